//! User mode: where the program, its dynamic loader and its shared libraries were in the
//! guest, from the plugin's `plugin.maps`, turned into symbol sources at their load biases.
//!
//! Guest paths are looked up under the sysroot as qemu-user does (`-L`, else
//! `QEMU_LD_PREFIX`): the file there if it exists, else the path as it is; "there" is
//! inside the sysroot, its absolute symlinks resolved within it ([`crate::contained`]).
//! qemu-user itself opens `ROOT/path` on the host, where an absolute symlink leads out of
//! the root: a file is named from the sysroot's only when it is the file QEMU mapped (the
//! plugin says which: device and inode), else from the host file QEMU really ran, found
//! again by the path the host gave it and checked the same way, said in one line.

use std::ffi::OsStr;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};

use super::options::QemuOption;
use super::user::Elf;
use crate::contained;
use crate::symbol_source::SourceArg;
use qemu_uftrace_format::Arch;

/// What the plugin saw: the auxiliary vector and the executable file mappings.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct PluginMaps {
    /// `AT_ENTRY`, `AT_BASE` (0: no interpreter).
    pub aux: Option<(u64, u64)>,
    /// The executable file mappings, in the order they were mapped.
    pub mmaps: Vec<Mmap>,
    /// The host file QEMU mapped as the dynamic loader, where the plugin found it.
    pub interp_file: Option<HostFile>,
    /// `AT_SYSINFO_EHDR`: where the vDSO was (0 or `None`: none).
    pub vdso: Option<u64>,
    /// The plugin's copy of the vDSO (`plugin.vdso`: an image's own, or for a forked
    /// child the one it inherited, `with_vdso_from`).
    pub vdso_file: Option<PathBuf>,
}

/// One executable file mapping as the guest made it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mmap {
    /// The path the guest opened.
    pub guest: Vec<u8>,
    pub start: u64,
    pub offset: u64,
    /// The host file QEMU mapped, where the plugin could ask.
    pub file: Option<HostFile>,
}

/// A host file QEMU mapped: what it is (device, inode) and where the host said it was.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HostFile {
    pub dev: u64,
    pub ino: u64,
    pub path: PathBuf,
}

impl HostFile {
    /// From a line's `P_dev`, `P_ino`, `P_host` fields.
    fn from_fields(get: &std::collections::HashMap<&str, &str>, prefix: &str) -> Option<Self> {
        let field = |k: &str| get.get(format!("{prefix}{k}").as_str()).copied();
        Some(HostFile {
            dev: hex(field("dev")?)?,
            ino: hex(field("ino")?)?,
            path: PathBuf::from(field("host").filter(|p| !p.is_empty())?),
        })
    }

    /// Whether `path` is this file now.
    fn is(&self, path: &Path) -> bool {
        use std::os::unix::fs::MetadataExt;
        std::fs::metadata(path).is_ok_and(|m| (m.dev(), m.ino()) == (self.dev, self.ino))
    }
}

/// The vDSO copy the plugin writes into a process image's folder.
pub const VDSO_FILE: &str = "plugin.vdso";

fn hex(v: &str) -> Option<u64> {
    u64::from_str_radix(v.strip_prefix("0x").unwrap_or(v), 16).ok()
}

/// Parses `plugin.maps`; unknown lines and fields are passed over.
pub fn parse(text: &str) -> PluginMaps {
    let mut maps = PluginMaps::default();
    for line in text.lines() {
        let mut fields = line.split('\t');
        let kind = fields.next().unwrap_or("");
        let mut get = std::collections::HashMap::new();
        for f in fields {
            if let Some((k, v)) = f.split_once('=') {
                get.insert(k, v);
            }
        }
        let num = |k: &str| get.get(k).and_then(|v| hex(v));
        match kind {
            "aux" => {
                if let (Some(entry), Some(base)) = (num("entry"), num("base")) {
                    maps.aux = Some((entry, base));
                }
                maps.vdso = num("vdso").filter(|&v| v != 0);
                maps.interp_file = HostFile::from_fields(&get, "interp_");
            }
            "mmap" => {
                if let (Some(start), Some(offset), Some(path)) =
                    (num("start"), num("offset"), get.get("path"))
                {
                    maps.mmaps.push(Mmap {
                        guest: path.as_bytes().to_vec(),
                        start,
                        offset,
                        file: HostFile::from_fields(&get, ""),
                    });
                }
            }
            _ => {}
        }
    }
    maps
}

/// The sysroot qemu-user looks guest paths up under: `-L`, else `QEMU_LD_PREFIX`.
pub fn sysroot(opts: &[QemuOption]) -> Option<PathBuf> {
    let given = opts
        .iter()
        .rev()
        .find(|o| o.name == "L")
        .and_then(|o| o.value.clone())
        .or_else(|| std::env::var_os("QEMU_LD_PREFIX"));
    given.filter(|p| !p.is_empty()).map(PathBuf::from)
}

/// A guest path on the host: under the sysroot when it is there (looked up inside it, an
/// absolute symlink resolving within it, `..` stopping at it), else as it is.
pub fn host_path(sysroot: Option<&Path>, guest: &[u8]) -> PathBuf {
    if let Some(root) = sysroot {
        if guest.starts_with(b"/") {
            if let Ok(under) = contained::path_by_its_name(root, guest) {
                return under;
            }
        }
    }
    Path::new(OsStr::from_bytes(guest)).to_path_buf()
}

/// The host file to name a file QEMU mapped by (`mapped`, where the plugin said) that the
/// guest opened as `guest`: [`host_path`]'s when it is that file; else, under a sysroot, the
/// file QEMU really mapped (an absolute symlink in the root led QEMU out of it, on the
/// host), found again by the host's path for it and checked to be it, with one line saying
/// so; `None` (and a line) when that cannot be found. Nothing else outside the root is
/// opened: only the very file that ran.
pub fn mapped_file(
    sysroot: Option<&Path>,
    guest: &[u8],
    mapped: Option<&HostFile>,
) -> Option<PathBuf> {
    let named = host_path(sysroot, guest);
    let (Some(root), Some(m)) = (sysroot, mapped) else {
        return Some(named);
    };
    if m.is(&named) {
        return Some(named);
    }
    let guest = qemu_uftrace_format::text::escape_bytes(guest);
    if m.path.is_absolute() && m.is(&m.path) {
        say_once(format!(
            "{guest} left the -L root {} through a symlink: QEMU ran the host's {} (not {}), \
             and its functions are named from that file",
            root.display(),
            m.path.display(),
            named.display()
        ));
        return Some(m.path.clone());
    }
    say_once(format!(
        "{guest} is not named: QEMU ran {} (a symlink in the -L root {} leads out of it), \
         which is no longer there",
        m.path.display(),
        root.display()
    ));
    None
}

/// Prints `line` as a warning once per `record` (the maps are read more than once).
fn say_once(line: String) {
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let mut said = SAID.lock().unwrap_or_else(|e| e.into_inner());
    if !said.contains(&line) {
        crate::errors::warn(&line);
        said.push(line);
    }
}

/// The files a user-mode program will most likely map, known before it runs: itself, its
/// dynamic loader, and the libraries it needs (`DT_NEEDED`, transitively), looked up in the
/// sysroot's (or the host's) library directories as the loader would. Only a guess, to read
/// their symbols while the program runs: where they really were comes from `plugin.maps`.
pub fn expected_images(program: &Path, sysroot: Option<&Path>, arch: Arch) -> Vec<PathBuf> {
    let triplet = format!("{}-linux-gnu", arch.qemu_target());
    let dirs: Vec<PathBuf> = [
        format!("/lib/{triplet}"),
        format!("/usr/lib/{triplet}"),
        "/lib".into(),
        "/usr/lib".into(),
        "/lib64".into(),
        "/usr/lib64".into(),
    ]
    .iter()
    .filter_map(|d| match sysroot {
        Some(root) => contained::path(root, d.as_bytes()).ok(),
        None => Some(PathBuf::from(d)),
    })
    .collect();
    let real_root = sysroot.and_then(|r| std::fs::canonicalize(r).ok());
    // `dir/name` as a file: inside the sysroot when `dir` is (a link named `name` resolving
    // within it), else on the host.
    let file_in = |dir: &Path, name: &str| -> Option<PathBuf> {
        if let (Some(root), Some(real)) = (sysroot, &real_root) {
            if let Ok(inside) = dir.strip_prefix(real) {
                let mut guest = Path::new("/").join(inside).into_os_string().into_vec();
                if guest.len() > 1 {
                    guest.push(b'/');
                }
                guest.extend_from_slice(name.as_bytes());
                return contained::path_by_its_name(root, &guest)
                    .ok()
                    .filter(|p| p.is_file());
            }
        }
        Some(dir.join(name)).filter(|p| p.is_file())
    };
    let mut out = vec![program.to_path_buf()];
    if let Some(interp) = Elf::read(program).and_then(|e| e.interp) {
        out.push(host_path(sysroot, &interp));
    }
    let mut next = 0;
    while next < out.len() && out.len() < 64 {
        let needed = qemu_uftrace_symbols::needed_libraries(&out[next]);
        // Its own run paths first (`$ORIGIN`: its directory), as the loader looks.
        let origin = out[next].parent().unwrap_or(Path::new("/")).to_path_buf();
        let own: Vec<PathBuf> = qemu_uftrace_symbols::run_paths(&out[next])
            .iter()
            .filter_map(
                |d| match d.strip_prefix("$ORIGIN").or(d.strip_prefix("${ORIGIN}")) {
                    Some(rest) => beside(&origin, rest, sysroot),
                    None => Some(host_path(sysroot, d.as_bytes())),
                },
            )
            .collect();
        next += 1;
        for name in needed {
            // A name with a slash is a path to the loader, not one to look up.
            if name.contains('/') {
                continue;
            }
            let found = (own.iter().chain(&dirs)).find_map(|d| file_in(d, &name));
            if let Some(path) = found.filter(|p| !out.contains(p)) {
                out.push(path);
            }
        }
    }
    out
}

/// `$ORIGIN/rest` for a file in `origin`: inside the sysroot when `origin` is (its `..`
/// stopping at the sysroot's top), else on the host.
fn beside(origin: &Path, rest: &str, sysroot: Option<&Path>) -> Option<PathBuf> {
    let rest = rest.trim_start_matches('/');
    let inside = sysroot.and_then(|root| {
        let real = std::fs::canonicalize(origin).ok()?;
        let root = std::fs::canonicalize(root).ok()?;
        let at = real.strip_prefix(&root).ok()?;
        let mut guest = Path::new("/").join(at).into_os_string().into_vec();
        guest.push(b'/');
        guest.extend_from_slice(rest.as_bytes());
        Some(guest)
    });
    match (inside, sysroot) {
        (Some(guest), Some(root)) => contained::path(root, &guest).ok(),
        _ => Some(origin.join(rest)),
    }
}

/// The symbol sources of a user-mode run: the program at its load bias (`AT_ENTRY` minus
/// its entry), the interpreter at `AT_BASE`, then each library mapped executable, once each.
/// Without the plugin's maps (it died first), the program at its link addresses.
pub fn sources(program: &Path, sysroot: Option<&Path>, maps: &PluginMaps) -> Vec<SourceArg> {
    let mut out: Vec<SourceArg> = Vec::new();
    let mut add = |path: PathBuf, offset: u64, origin: &'static str| {
        if !out.iter().any(|s| s.path == path) {
            out.push(SourceArg {
                path,
                offset,
                origin,
            });
        }
    };
    let elf = Elf::read(program);
    let program_bias = match (&elf, maps.aux) {
        (Some(e), Some((entry, _))) if e.relocatable => entry.wrapping_sub(e.entry),
        _ => 0,
    };
    add(program.to_path_buf(), program_bias, "the program");
    if let (Some(interp), Some((_, base))) = (elf.as_ref().and_then(|e| e.interp.clone()), maps.aux)
    {
        let path = mapped_file(sysroot, &interp, maps.interp_file.as_ref());
        if let Some(path) = path.filter(|_| base != 0) {
            if let Some(ld) = Elf::read(&path) {
                add(path, ld.bias_of_base(base), "the dynamic loader");
            }
        }
    }
    // The vDSO, named from the plugin's copy.
    if let Some((file, bias)) = vdso(maps) {
        add(file, bias, "the vDSO");
    }
    for m in &maps.mmaps {
        let Some(path) = mapped_file(sysroot, &m.guest, m.file.as_ref()) else {
            continue;
        };
        if let Some(lib) = Elf::read(&path) {
            add(
                path,
                lib.bias_of_mapping(m.start, m.offset),
                "a shared library",
            );
        }
    }
    out
}

/// The plugin's copy of the vDSO and its load bias (its ELF header where `AT_SYSINFO_EHDR`
/// says). QEMU moves its copy's headers and `.dynsym` to where it maps it (a bias of 0),
/// not its `.symtab`: the symbol reader takes `.dynsym` where `.symtab`'s functions lie
/// in no code section.
pub fn vdso(maps: &PluginMaps) -> Option<(PathBuf, u64)> {
    let (addr, file) = (maps.vdso?, maps.vdso_file.as_ref()?);
    let elf = Elf::read(file)?;
    Some((file.clone(), elf.bias_of_base(addr)))
}

/// Reads `plugin.maps` from the trace directory (`None` when the plugin wrote none), with
/// the vDSO copy beside it.
pub fn read(dir: &Path) -> Option<PluginMaps> {
    std::fs::read_to_string(dir.join("plugin.maps"))
        .ok()
        .map(|t| parse(&t).with_vdso_from(dir))
}

impl PluginMaps {
    /// The vDSO copy in `dir` when there is one and none was found yet (a forked child
    /// writes none: its vDSO is the image's it was forked from).
    pub fn with_vdso_from(mut self, dir: &Path) -> PluginMaps {
        let file = dir.join(VDSO_FILE);
        if self.vdso_file.is_none() && file.is_file() {
            self.vdso_file = Some(file);
        }
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The host's own shell as qemu-x86_64 would run it: itself, its loader (PT_INTERP), and
    /// libc found in the multiarch directory, where the loader finds it.
    #[test]
    fn expected_images_follow_interp_and_needed() {
        let sh = Path::new("/bin/sh");
        let files = expected_images(sh, None, Arch::X86_64);
        assert_eq!(files[0], sh);
        let interp = Elf::read(sh)
            .and_then(|e| e.interp)
            .expect("a dynamic shell");
        assert_eq!(files[1], host_path(None, &interp));
        assert!(
            files.contains(&PathBuf::from("/lib/x86_64-linux-gnu/libc.so.6")),
            "{files:?}"
        );
        // A file that is no ELF is only itself.
        let text = tempfile::NamedTempFile::new().unwrap();
        assert_eq!(
            expected_images(text.path(), None, Arch::X86_64),
            [text.path()]
        );
    }

    #[test]
    fn parses_the_plugin_file() {
        let m = parse(
            "aux\tentry=0x5500000740\tphdr=0x5500000040\tbase=0x7f0000000000\n\
             mmap\tstart=0x7f1000000000\tlen=0x1000\toffset=0x0\tpath=/lib/libc.so.6\n\
             junk\n",
        );
        assert_eq!(m.aux, Some((0x55_0000_0740, 0x7f00_0000_0000)));
        assert_eq!(m.vdso, None);
        assert_eq!(
            m.mmaps,
            [Mmap {
                guest: b"/lib/libc.so.6".to_vec(),
                start: 0x7f10_0000_0000,
                offset: 0,
                file: None
            }]
        );
        let m = parse("aux\tentry=0x1\tphdr=0x2\tbase=0x0\tvdso=0x7f0000001000\n");
        assert_eq!(m.vdso, Some(0x7f00_0000_1000));
        // The host files QEMU mapped.
        let m = parse(
            "aux\tentry=0x1\tphdr=0x2\tbase=0x3\tvdso=0x0\tinterp_dev=fd01\tinterp_ino=1f\t\
             interp_host=/x/ld b.so\n\
             mmap\tstart=0x10\tlen=0x1000\toffset=0x0\tdev=1\tino=2\thost=/h/l=c\tpath=/l\n",
        );
        let file = |dev, ino, path: &str| HostFile {
            dev,
            ino,
            path: PathBuf::from(path),
        };
        assert_eq!(m.interp_file, Some(file(0xfd01, 0x1f, "/x/ld b.so")));
        assert_eq!(m.mmaps[0].file, Some(file(1, 2, "/h/l=c")));
    }

    /// A root laid out as Debian's, with absolute symlinks (`/lib` → `/usr/lib`, the
    /// loader's link) whose targets also exist on the host with other contents: the host
    /// paths of the guest's files are the root's own files, never the host's.
    fn absolute_link_root() -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().join("root");
        let multi = root.join("usr/lib/x86_64-linux-gnu");
        std::fs::create_dir_all(&multi).unwrap();
        std::fs::create_dir_all(root.join("bin")).unwrap();
        std::fs::create_dir_all(root.join("lib64")).unwrap();
        std::os::unix::fs::symlink("/usr/lib", root.join("lib")).unwrap();
        for name in ["libm.so.6", "ld-linux-x86-64.so.2"] {
            std::fs::write(multi.join(name), b"inside").unwrap();
        }
        // libc.so.6 itself an absolute link, to a path the host has too.
        std::os::unix::fs::symlink(
            "/usr/lib/x86_64-linux-gnu/libm.so.6",
            multi.join("libc.so.6"),
        )
        .unwrap();
        std::os::unix::fs::symlink(
            "/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2",
            root.join("lib64/ld-linux-x86-64.so.2"),
        )
        .unwrap();
        // A program that needs libc.so.6 through that loader: the host's shell.
        std::fs::copy("/bin/sh", root.join("bin/sh")).unwrap();
        let root = std::fs::canonicalize(&root).unwrap();
        (tmp, root)
    }

    #[test]
    fn sysroot_links_resolve_inside_it() {
        let (_tmp, root) = absolute_link_root();
        for guest in [
            "/lib/x86_64-linux-gnu/libc.so.6",
            "/lib64/ld-linux-x86-64.so.2",
            "/../../../../lib64/ld-linux-x86-64.so.2",
        ] {
            let host = host_path(Some(&root), guest.as_bytes());
            assert!(
                std::fs::read(&host).unwrap() == b"inside",
                "{guest}: {} is not the root's",
                host.display()
            );
            assert!(host.starts_with(&root), "{guest}: {}", host.display());
        }
        let files = expected_images(&root.join("bin/sh"), Some(&root), Arch::X86_64);
        assert!(files.len() >= 3, "{files:?}");
        for f in &files[1..] {
            assert!(
                std::fs::read(f).unwrap() == b"inside",
                "{} is not the root's",
                f.display()
            );
            assert!(f.starts_with(&root), "{files:?}");
        }
    }

    /// QEMU followed the root's absolute link on the host: the file named is the one it
    /// mapped (the host's, found by its host path and checked by device and inode), not the
    /// root's file of that name; the root's is kept when it is the one mapped; a mapped
    /// file that is gone names nothing.
    #[test]
    fn files_are_named_from_what_qemu_mapped() {
        use std::os::unix::fs::MetadataExt;
        let (_tmp, root) = absolute_link_root();
        let guest = b"/lib/x86_64-linux-gnu/libc.so.6";
        let identity = |p: &Path| {
            let m = std::fs::metadata(p).unwrap();
            HostFile {
                dev: m.dev(),
                ino: m.ino(),
                path: std::fs::canonicalize(p).unwrap(),
            }
        };
        let host = identity(Path::new("/usr/lib/x86_64-linux-gnu/libm.so.6"));
        assert_eq!(
            mapped_file(Some(&root), guest, Some(&host)),
            Some(host.path.clone())
        );
        let inside = identity(&host_path(Some(&root), guest));
        assert_eq!(
            mapped_file(Some(&root), guest, Some(&inside)),
            Some(host_path(Some(&root), guest))
        );
        let gone = HostFile {
            path: root.join("gone.so"),
            ..host.clone()
        };
        assert_eq!(mapped_file(Some(&root), guest, Some(&gone)), None);
        // Not found again at the path the host gave: another file there is not it.
        let moved = HostFile {
            path: PathBuf::from("/bin/sh"),
            ..host
        };
        assert_eq!(mapped_file(Some(&root), guest, Some(&moved)), None);
    }

    #[test]
    fn guest_paths_resolve_under_the_sysroot_when_there() {
        let tmp = tempfile::tempdir().unwrap();
        let dir = std::fs::canonicalize(tmp.path()).unwrap();
        std::fs::create_dir(dir.join("lib")).unwrap();
        std::fs::write(dir.join("lib/libx.so"), b"").unwrap();
        assert_eq!(
            host_path(Some(&dir), b"/lib/libx.so"),
            dir.join("lib/libx.so")
        );
        assert_eq!(
            host_path(Some(&dir), b"/lib/liby.so"),
            PathBuf::from("/lib/liby.so")
        );
        assert_eq!(
            host_path(None, b"/lib/libx.so"),
            PathBuf::from("/lib/libx.so")
        );
    }
}
