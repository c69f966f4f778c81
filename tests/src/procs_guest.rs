//! The process tests' guest (issue 24): Debian's arm64 (riscv64, amd64) kernel booting a
//! gzip-compressed newc initramfs whose `/init` and `/worker` are dynamic PIEs
//! (`tests/guests/procs`), with the cross toolchain's dynamic loader and glibc at `/lib`, as a
//! distribution ships them.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{anyhow, bail, Context, Result};

use crate::cpio::{write_newc, Entry};
use crate::{cross_prefix, debian_kernel, guest_build_dir, locked, workspace_root};

/// `tests/guests/procs/counts.h`.
const COUNTS_H: &str = include_str!("../guests/procs/counts.h");

/// A `#define` of `counts.h` (`INIT_STEPS`, `CHILD_STEPS`, `WORKER_STEPS`, `THREAD_STEPS`,
/// `PLUG_STEPS`).
pub fn procs_count(name: &str) -> u64 {
    crate::header_define(COUNTS_H, name)
}

/// Where the cross toolchain keeps the guest's glibc and loader.
pub const CROSS_LIB: &str = "/usr/aarch64-linux-gnu/lib";

/// The guest architectures the process guest is built for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ProcsArch {
    Aarch64,
    Riscv64,
    /// Built with the host's own gcc, its glibc and loader packed from the host's.
    X86_64,
}

impl ProcsArch {
    fn cross(self) -> String {
        match self {
            ProcsArch::Aarch64 => cross_prefix(),
            ProcsArch::Riscv64 => "riscv64-linux-gnu-".into(),
            ProcsArch::X86_64 => String::new(),
        }
    }

    /// The toolchain's glibc and loader directory, and the loader's name.
    fn lib(self) -> (&'static str, &'static str) {
        match self {
            ProcsArch::Aarch64 => (CROSS_LIB, "ld-linux-aarch64.so.1"),
            ProcsArch::Riscv64 => ("/usr/riscv64-linux-gnu/lib", "ld-linux-riscv64-lp64d.so.1"),
            ProcsArch::X86_64 => ("/lib/x86_64-linux-gnu", "ld-linux-x86-64.so.2"),
        }
    }

    /// The directory of the archive the loader goes in: the programs' `PT_INTERP` (x86-64's
    /// is `/lib64/ld-linux-x86-64.so.2`; libc stays in `/lib`, which its loader searches).
    fn loader_dir(self) -> &'static str {
        match self {
            ProcsArch::X86_64 => "lib64",
            _ => "lib",
        }
    }

    fn dir(self) -> &'static str {
        match self {
            ProcsArch::Aarch64 => "procs",
            ProcsArch::Riscv64 => "procs-riscv64",
            ProcsArch::X86_64 => "procs-x86_64",
        }
    }
}

/// The built guest: the initramfs and the programs in it (with their symbols).
#[derive(Debug, Clone)]
pub struct ProcsGuest {
    /// `initramfs.cpio.gz`: `/dev/console`, `/init`, `/worker`, `/lib/ld-linux-aarch64.so.1`,
    /// `/lib/libc.so.6`, `/lib/libplug.so` (the worker's `dlopen`).
    pub cpio: PathBuf,
    pub init: PathBuf,
    pub worker: PathBuf,
    /// The build directory (`deepinit` too).
    pub dir: PathBuf,
}

/// Builds the arm64 guest once per process.
pub fn procs_guest() -> Result<ProcsGuest> {
    procs_guest_for(ProcsArch::Aarch64)
}

/// Builds the guest for `arch` once per process.
pub fn procs_guest_for(arch: ProcsArch) -> Result<ProcsGuest> {
    static BUILT: [OnceLock<std::result::Result<ProcsGuest, String>>; 3] =
        [OnceLock::new(), OnceLock::new(), OnceLock::new()];
    BUILT[arch as usize]
        .get_or_init(|| build(arch).map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the process guest ({arch:?}) failed: {e}"))
}

fn read(path: &Path) -> Result<Vec<u8>> {
    std::fs::read(path).with_context(|| format!("reading {}", path.display()))
}

fn build(arch: ProcsArch) -> Result<ProcsGuest> {
    let root = guest_build_dir();
    let dir = root.join(arch.dir());
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let output = locked(&root.join(".lock"), "make")
        .arg("-s")
        .arg("-C")
        .arg(workspace_root().join("tests/guests/procs"))
        .arg(format!("O={}", dir.display()))
        .arg(format!("CROSS={}", arch.cross()))
        .stdin(Stdio::null())
        .output()
        .context("running make in tests/guests/procs")?;
    if !output.status.success() {
        bail!(
            "make -C tests/guests/procs failed ({}):\n{}{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let init = read(&dir.join("init"))?;
    let path = pack(arch, &dir, "initramfs.cpio.gz", &init)?;
    Ok(ProcsGuest {
        cpio: path,
        init: dir.join("init"),
        worker: dir.join("worker"),
        dir,
    })
}

/// Packs `init` as `/init` with `/worker`, the loader, libc and `libplug.so` from the
/// build in `dir` into a gzip-compressed newc archive `dir/name`.
fn pack(arch: ProcsArch, dir: &Path, name: &str, init: &[u8]) -> Result<PathBuf> {
    let worker = read(&dir.join("worker"))?;
    let (lib, loader) = arch.lib();
    let lib = Path::new(lib);
    let ld = read(&lib.join(loader))?;
    let loader_path = format!("{}/{loader}", arch.loader_dir());
    let libc = read(&lib.join("libc.so.6"))?;
    let plug = read(&dir.join("libplug.so"))?;
    let [dev, console] = crate::cpio::console_entries();
    let mut cpio = Vec::new();
    write_newc(
        &mut cpio,
        &[
            dev,
            console,
            Entry::Dir {
                path: "lib",
                mode: 0o755,
            },
            Entry::Dir {
                path: "lib64",
                mode: 0o755,
            },
            Entry::File {
                path: &loader_path,
                mode: 0o755,
                data: &ld,
            },
            Entry::File {
                path: "lib/libc.so.6",
                mode: 0o755,
                data: &libc,
            },
            Entry::File {
                path: "lib/libplug.so",
                mode: 0o755,
                data: &plug,
            },
            Entry::File {
                path: "init",
                mode: 0o755,
                data: init,
            },
            Entry::File {
                path: "worker",
                mode: 0o755,
                data: &worker,
            },
        ],
    )?;
    // gzip(1), as distributions compress their initramfs.
    let mut gz = Command::new("gzip")
        .args(["-n", "-c"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .context("running gzip")?;
    let mut stdin = gz.stdin.take().context("gzip's stdin")?;
    let writer = std::thread::spawn(move || stdin.write_all(&cpio));
    let out = gz.wait_with_output().context("running gzip")?;
    writer
        .join()
        .map_err(|_| anyhow!("writing to gzip panicked"))?
        .context("writing to gzip")?;
    if !out.status.success() {
        bail!("gzip failed ({})", out.status);
    }
    crate::cpio::replace_whole(dir, name, &out.stdout)
}

/// The arm64 guest whose `/init` is `deepinit` (tests/guests/procs/deepinit.c): it runs
/// `/worker` from 17 directories of 255-byte names deep, with ESC and CR in a directory
/// name and in its tasks' names. The archive's path.
pub fn deep_guest() -> Result<PathBuf> {
    static BUILT: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BUILT
        .get_or_init(|| {
            let guest = procs_guest().map_err(|e| format!("{e:#}"))?;
            let init = read(&guest.dir.join("deepinit")).map_err(|e| format!("{e:#}"))?;
            pack(ProcsArch::Aarch64, &guest.dir, "deep.cpio.gz", &init)
                .map_err(|e| format!("{e:#}"))
        })
        .clone()
        .map_err(|e| anyhow!("building the deep-path guest failed: {e}"))
}

/// [`procs_boot_args_on`] with [`deep_guest`]'s archive.
pub fn deep_boot_args_on(qemu: &str) -> Result<Vec<String>> {
    let cpio = deep_guest()?;
    let mut args = procs_boot_args_on(qemu)?;
    let at = args
        .iter()
        .position(|a| a == "-initrd")
        .context("-initrd")?
        + 1;
    args[at] = cpio.to_string_lossy().into_owned();
    Ok(args)
}

/// The QEMU command (argv, emulator first) that boots Debian's riscv64 kernel into the
/// riscv64 guest on one hart, under QEMU's own OpenSBI.
pub fn procs_riscv64_boot_args_on(qemu: &str) -> Result<Vec<String>> {
    let guest = procs_guest_for(ProcsArch::Riscv64)?;
    Ok(crate::linux_guest::initramfs_boot(
        qemu,
        &["-M", "virt", "-bios", "default"],
        "512M",
        1,
        &crate::riscv64::riscv64_kernel(),
        &guest.cpio,
        "console=ttyS0 panic=-1 nokaslr cryptomgr.notests rdinit=/init",
    ))
}

/// The kernel command line of the amd64 process guest (`no_timer_check`: on a loaded host
/// the kernel's IO-APIC timer check can find no tick and panic).
pub const X86_64_APPEND: &str =
    "console=ttyS0 panic=-1 nokaslr no_timer_check cryptomgr.notests rdinit=/init";

/// The QEMU command (argv, emulator first) that boots Debian's amd64 kernel (a bzImage,
/// from SeaBIOS) into the x86-64 guest on one vCPU.
pub fn procs_x86_64_boot_args_on(qemu: &str) -> Result<Vec<String>> {
    let guest = procs_guest_for(ProcsArch::X86_64)?;
    let kernel = crate::cached("kernel-amd64/vmlinuz");
    Ok(crate::linux_guest::initramfs_boot(
        qemu,
        &["-M", "pc"],
        "512M",
        1,
        &kernel,
        &guest.cpio,
        X86_64_APPEND,
    ))
}

/// The QEMU command (argv, emulator first) that boots Debian's arm64 kernel into this
/// guest on one vCPU, as [`crate::linux_guest::initramfs_boot_args_on`] does.
pub fn procs_boot_args_on(qemu: &str) -> Result<Vec<String>> {
    procs_boot_of(qemu, &debian_kernel())
}

/// [`procs_boot_args_on`] with Debian's arm64 kernel built for 16 KiB pages.
pub fn procs_16k_boot_args_on(qemu: &str) -> Result<Vec<String>> {
    procs_boot_of(qemu, &crate::debian_16k_kernel())
}

fn procs_boot_of(qemu: &str, kernel: &Path) -> Result<Vec<String>> {
    let guest = procs_guest()?;
    Ok(crate::linux_guest::initramfs_boot(
        qemu,
        &["-M", "virt", "-cpu", "max"],
        "512M",
        1,
        kernel,
        &guest.cpio,
        crate::linux_guest::INITRAMFS_APPEND,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_the_header() {
        assert_eq!(procs_count("INIT_STEPS"), 7);
        assert_eq!(procs_count("WORKER_STEPS"), 11);
        assert_eq!(procs_count("CHILD_STEPS"), 5);
        assert_eq!(procs_count("THREAD_STEPS"), 13);
        assert_eq!(procs_count("PLUG_STEPS"), 3);
    }
}
