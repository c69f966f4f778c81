//! The Linux userland guest: Debian's arm64 kernel booting an initramfs whose only program is
//! `/init` (`tests/guests/linux/init.c`), a static glibc program whose functions make known
//! syscalls and take known page faults a known number of times (`counts.h`), fork a child,
//! and power the machine off, so that QEMU exits with status 0.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;
use std::time::Duration;

use anyhow::{anyhow, bail, Context, Result};

use crate::cpio::{write_newc, Entry};
use crate::{
    cross_prefix, debian_kernel, guest_build_dir, locked, wait_with_timeout, workspace_root,
};

/// `tests/guests/linux/counts.h`, the one place the call counts are written.
const COUNTS_H: &str = include_str!("../guests/linux/counts.h");

/// A `#define` of `counts.h` (`WRITE_CALLS`, `GETPID_CALLS`, `SLEEP_CALLS`, `FAULT_PAGES`,
/// `CHILD_STEPS`).
pub fn init_count(name: &str) -> u64 {
    crate::header_define(COUNTS_H, name)
}

/// Which of the guest's processes makes a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum InitTask {
    /// `/init` itself: PID 1.
    Init,
    /// The child `do_fork` forks.
    Child,
}

/// `(function, task, calls)`: the functions of `init.c`, how often they are called (entered by
/// `bl`: the build has no sibling calls) and by which process. `do_fork` is entered once, by
/// PID 1; the child starts life inside it (returning from `fork`) and calls `child_work`.
/// `main` is not listed: glibc's `__wrap_main` enters it by a tail call (`b main`), so a
/// trace shows its calls inside `__wrap_main` and no call of `main` itself.
pub fn init_expected_calls() -> Vec<(&'static str, InitTask, u64)> {
    use InitTask::*;
    vec![
        ("do_write", Init, init_count("WRITE_CALLS")),
        ("do_getpid_loop", Init, 1),
        ("one_getpid", Init, init_count("GETPID_CALLS")),
        ("do_sleep", Init, init_count("SLEEP_CALLS")),
        ("do_fault", Init, 1),
        ("touch_page", Init, init_count("FAULT_PAGES")),
        ("do_fork", Init, 1),
        ("child_work", Child, 1),
        ("child_step", Child, init_count("CHILD_STEPS")),
    ]
}

/// The line `/init` prints when everything went as planned, and the one with its figures
/// (`INIT: pid=1 getpid_sum=100 fault=0 child=N`).
pub const INIT_OK: &str = "INIT: ok";

/// The child's PID as `/init` printed it (`child=N`), when it did.
pub fn init_child_pid(console: &str) -> Option<u32> {
    console
        .lines()
        .find(|l| l.contains("INIT: pid="))?
        .split_whitespace()
        .find_map(|w| w.strip_prefix("child="))?
        .trim()
        .parse()
        .ok()
}

/// Builds `/init` and its initramfs once per process; returns `(cpio, init ELF)`:
/// `<guest_build_dir>/linux/init.elf` (static, with symbols: a `--symbols` source) and
/// `<guest_build_dir>/linux/initramfs.cpio` (newc, uncompressed: `/dev`, `/dev/console`,
/// `/init`).
pub fn initramfs_guest() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_initramfs("init").map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the initramfs guest failed: {e}"))
}

/// Like [`initramfs_guest`], with `tests/guests/linux/snapinit.c` as `/init` (PID 1 sleeps
/// in `read(2)` five calls deep after printing `SNAP: waiting`):
/// `<guest_build_dir>/linux/snapinit.{elf,cpio}`.
pub fn snap_initramfs_guest() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_initramfs("snapinit").map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the snapshot initramfs guest failed: {e}"))
}

/// The signal snapshot guest (`tests/guests/linux/sigsnapinit.c`): its initramfs and its
/// ELF.
pub fn sigsnap_initramfs_guest() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_initramfs("sigsnapinit").map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the signal snapshot initramfs guest failed: {e}"))
}

/// [`snap_initramfs_guest`] for Debian's amd64 kernel (`snapinit.c` built for x86-64).
pub fn snap_initramfs_guest_x86_64() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_initramfs("snapinit-x86_64").map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the x86-64 snapshot initramfs guest failed: {e}"))
}

/// [`snap_initramfs_guest`] for Debian's riscv64 kernel (`snapinit.c` built with Debian's
/// riscv64 cross gcc).
pub fn snap_initramfs_guest_riscv64() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_initramfs("snapinit-riscv64").map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the riscv64 snapshot initramfs guest failed: {e}"))
}

/// [`sigsnap_initramfs_guest`] for Debian's amd64 kernel (`sigsnapinit.c` built for
/// x86-64: glibc's own `__restore_rt`).
pub fn sigsnap_initramfs_guest_x86_64() -> Result<(PathBuf, PathBuf)> {
    static BUILT: OnceLock<std::result::Result<(PathBuf, PathBuf), String>> = OnceLock::new();
    BUILT
        .get_or_init(|| build_initramfs("sigsnapinit-x86_64").map_err(|e| format!("{e:#}")))
        .clone()
        .map_err(|e| anyhow!("building the x86-64 signal snapshot initramfs guest failed: {e}"))
}

/// The unwinding benchmark's guest (`tests/guests/linux/manyinit.c`: PID 1 and 100 children
/// asleep): its initramfs and its ELF.
/// On x86-64 (`x86_64`) or arm64 (otherwise).
pub fn many_initramfs_guest(x86_64: bool) -> Result<(PathBuf, PathBuf)> {
    build_initramfs(if x86_64 {
        "manyinit-x86_64"
    } else {
        "manyinit"
    })
}

/// Builds `tests/guests/linux/<program>.c` (or, for `<program>-x86_64`, `<program>.c`
/// for x86-64) and packs it as `/init`.
fn build_initramfs(program: &str) -> Result<(PathBuf, PathBuf)> {
    let dir = make_linux_guests(None)?;
    let elf = dir.join(format!("{program}.elf"));
    let init = std::fs::read(&elf).with_context(|| format!("reading {}", elf.display()))?;
    let name = match program {
        "init" => "initramfs.cpio".to_string(),
        other => format!("{other}.cpio"),
    };
    let path = pack_initramfs(&dir, &name, &init, &[], &[])?;
    Ok((path, elf))
}

/// Runs make in `tests/guests/linux` into `<guest_build_dir>/linux` (its default goal, or
/// `goal`), under the guests' build lock; gives that directory.
pub(crate) fn make_linux_guests(goal: Option<&Path>) -> Result<PathBuf> {
    let root = guest_build_dir();
    let dir = root.join("linux");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let mut make = locked(&root.join(".lock"), "make");
    make.arg("-s")
        .arg("-C")
        .arg(workspace_root().join("tests/guests/linux"))
        .arg(format!("O={}", dir.display()))
        .arg(format!("CROSS={}", cross_prefix()));
    if let Some(goal) = goal {
        make.arg(goal);
    }
    let output = make
        .stdin(Stdio::null())
        .output()
        .context("running make in tests/guests/linux (is make installed?)")?;
    if !output.status.success() {
        bail!(
            "make -C tests/guests/linux{} failed ({}; the static links need the arm64, amd64 \
             and riscv64 glibc of scripts/install-deps.sh):\n{}{}",
            goal.map(|g| format!(" {}", g.display()))
                .unwrap_or_default(),
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
    }
    Ok(dir)
}

/// Packs `init` as `/init`, with `/dev/console`, the directories `dirs` and the files
/// `files` (name, bytes) at the root, into `dir/name`, which it replaces whole: another test
/// process may be reading the archive, never rewrite it.
pub(crate) fn pack_initramfs(
    dir: &Path,
    name: &str,
    init: &[u8],
    dirs: &[&str],
    files: &[(String, Vec<u8>)],
) -> Result<PathBuf> {
    let mut entries = crate::cpio::console_entries().to_vec();
    entries.extend(dirs.iter().map(|&path| Entry::Dir { path, mode: 0o755 }));
    entries.push(Entry::File {
        path: "init",
        mode: 0o755,
        data: init,
    });
    entries.extend(files.iter().map(|(path, data)| Entry::File {
        path,
        mode: 0o644,
        data,
    }));
    let mut cpio = Vec::with_capacity(init.len() + 1024);
    write_newc(&mut cpio, &entries)?;
    crate::cpio::replace_whole(dir, name, &cpio)
}

/// The kernel command line of the initramfs boot: `/init` from the initramfs, no KASLR (so
/// that System.map's addresses hold), QEMU ends at the panic if `/init` ever exits.
pub const INITRAMFS_APPEND: &str =
    "console=ttyAMA0 panic=-1 nokaslr cryptomgr.notests rdinit=/init";

/// The QEMU command (argv, emulator first) that boots Debian's kernel into the initramfs
/// guest on `smp` vCPUs: `-M virt -cpu max -m 512M -nographic -nic none -kernel vmlinuz
/// -initrd initramfs.cpio -append "…" -no-reboot -smp N`. Builds the guest first.
pub fn initramfs_boot_args_on(qemu: &str, smp: u32) -> Result<Vec<String>> {
    let (cpio, _) = initramfs_guest()?;
    let machine = ["-M", "virt", "-cpu", "max"];
    Ok(initramfs_boot(
        qemu,
        &machine,
        "512M",
        smp,
        &debian_kernel(),
        &cpio,
        INITRAMFS_APPEND,
    ))
}

/// A Linux kernel booted from its initramfs on `qemu` (argv, emulator first): `machine`
/// (`-M …`, `-cpu …`), `-m MEMORY -nographic -nic none -no-reboot -smp N -kernel KERNEL
/// -initrd INITRD -append APPEND`: the boot every initramfs guest and the Debian VMs make.
pub fn initramfs_boot(
    qemu: &str,
    machine: &[&str],
    memory: &str,
    smp: u32,
    kernel: &Path,
    initrd: &Path,
    append: &str,
) -> Vec<String> {
    let mut argv = vec![qemu.to_string()];
    argv.extend(machine.iter().map(|s| s.to_string()));
    let smp = smp.to_string();
    let rest = [
        "-m",
        memory,
        "-nographic",
        "-nic",
        "none",
        "-no-reboot",
        "-smp",
        &smp,
        "-kernel",
        &kernel.to_string_lossy(),
        "-initrd",
        &initrd.to_string_lossy(),
        "-append",
        append,
    ];
    argv.extend(rest.iter().map(|s| s.to_string()));
    argv
}

/// How long the initramfs boot may take under plain QEMU (about 2 s on this project's
/// machines) or traced.
pub const INITRAMFS_TIMEOUT: Duration = Duration::from_secs(120);

/// Runs `argv` (emulator first) with stdin closed, killing it after `timeout`; returns the
/// exit code (`None` when killed or timed out) and the console (stdout), failing only when
/// QEMU cannot be started.
pub fn run_qemu_argv(argv: &[String], timeout: Duration) -> Result<(Option<i32>, String)> {
    let child = Command::new(&argv[0])
        .args(&argv[1..])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {} (run scripts/install-deps.sh)", argv[0]))?;
    let (status, stdout, stderr) =
        wait_with_timeout(child, timeout).with_context(|| format!("running {}", argv.join(" ")))?;
    let console = if stderr.is_empty() {
        stdout
    } else {
        format!("{stdout}\n[stderr]\n{stderr}")
    };
    Ok((status.flatten(), console))
}

/// The guest's ELF symbols are at the static binary's link addresses (0x400000 up), far
/// from the kernel's (0xffff8000_0000_0000 up), so both name spaces can be given to one
/// trace. Returns the `[lowest, highest]` function address of an ELF, for that check.
pub fn function_span(elf: &Path) -> Result<(u64, u64)> {
    let map = crate::nm_functions(elf)?;
    let lo = map.keys().next().copied();
    let hi = map.keys().next_back().copied();
    lo.zip(hi)
        .ok_or_else(|| anyhow!("{} has no functions", elf.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_the_header() {
        assert_eq!(init_count("GETPID_CALLS"), 100);
        assert!(init_expected_calls().iter().all(|(_, _, n)| *n > 0));
    }

    #[test]
    fn finds_the_child_pid() {
        let console = "x\nINIT: pid=1 getpid_sum=100 fault=0 child=71\r\nINIT: ok\n";
        assert_eq!(init_child_pid(console), Some(71));
        assert_eq!(init_child_pid("INIT: ok"), None);
    }
}
