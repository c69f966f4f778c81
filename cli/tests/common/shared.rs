//! One recording of each (QEMU command line, `record` options), shared by every test and
//! every test binary that asks for it within a run: kernel boots cost a minute or more each,
//! and several tests only read the same trace (issue 35).
//!
//! A recording lives under `CARGO_TARGET_TMPDIR/shared-recordings/<key>/`, `<key>` a hash of
//! everything that changes its result (the recorder binary, the argv, the options, the files
//! they name, the environment `record` reads). It is recorded into `<key>.partial/` and
//! renamed into place whole, so a crash mid-recording leaves nothing that is reused. A file
//! lock per key (flock: it holds across threads and processes alike) makes a second caller
//! wait for the first one's recording instead of booting again. Only successful recordings
//! are kept: a failed one fails its caller, and the next caller records again.
//! `scripts/test.sh` deletes the directory before and after the suite.
//!
//! The trace is shared: callers only read it (uftrace replay/report/info/dump). A test that
//! writes into a trace takes [`Recording::private_copy`]; one that writes beside it
//! (`export`'s `<dir>.pftrace`) takes [`Recording::linked_copy`].

use sha2::{Digest, Sha256};
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// A finished, successful recording: read it, never write into it.
#[derive(Debug, Clone)]
pub struct Recording {
    /// The trace directory (`.../<key>/trace.data`).
    pub dir: PathBuf,
    /// The guest's console (record's stdout).
    pub console: String,
    /// record's stderr.
    pub stderr: String,
}

impl Recording {
    /// A copy of the trace, byte for byte, in a fresh temp dir (keep it alive): for a test
    /// that rewrites the trace (`qemu-uftrace symbols`).
    pub fn private_copy(&self) -> (tempfile::TempDir, PathBuf) {
        self.copy_with(|from, to| std::fs::copy(from, to).map(|_| ()))
    }

    /// The trace's files hard-linked into a fresh temp dir (keep it alive): for a test whose
    /// tool only reads the trace and writes beside it (`export`'s `<dir>.pftrace`), at no
    /// cost in disk or time.
    pub fn linked_copy(&self) -> (tempfile::TempDir, PathBuf) {
        self.copy_with(|from, to| std::fs::hard_link(from, to))
    }

    fn copy_with(
        &self,
        file: impl Fn(&Path, &Path) -> std::io::Result<()> + Copy,
    ) -> (tempfile::TempDir, PathBuf) {
        let tmp = tempfile::tempdir().expect("temp dir");
        let to = tmp.path().join("trace.data");
        copy_tree(&self.dir, &to, file)
            .unwrap_or_else(|e| panic!("copying {} to {}: {e}", self.dir.display(), to.display()));
        (tmp, to)
    }
}

fn copy_tree(
    from: &Path,
    to: &Path,
    file: impl Fn(&Path, &Path) -> std::io::Result<()> + Copy,
) -> std::io::Result<()> {
    std::fs::create_dir(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let (src, dst) = (entry.path(), to.join(entry.file_name()));
        let kind = entry.file_type()?;
        if kind.is_dir() {
            copy_tree(&src, &dst, file)?;
        } else if kind.is_symlink() {
            std::os::unix::fs::symlink(std::fs::read_link(&src)?, &dst)?;
        } else {
            file(&src, &dst)?;
        }
    }
    Ok(())
}

/// Where the shared recordings live (`scripts/test.sh` deletes it before and after a run).
pub fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("shared-recordings")
}

/// `qemu-uftrace record -o DIR OPTIONS -- ARGV` (stdin from /dev/null), which must succeed,
/// recorded once per run for every caller: the first caller records, the others (threads of
/// this binary or other test binaries) wait on its lock and read the same directory.
pub fn record(argv: &[String], options: &[&str]) -> Recording {
    record_in(&root(), argv, options)
}

/// [`record`] with its recordings under `root`.
pub fn record_in(root: &Path, argv: &[String], options: &[&str]) -> Recording {
    std::fs::create_dir_all(root).unwrap_or_else(|e| panic!("creating {}: {e}", root.display()));
    let key = key(argv, options);
    let lock_path = root.join(format!("{key}.lock"));
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .unwrap_or_else(|e| panic!("opening {}: {e}", lock_path.display()));
    // Blocks until whoever records this key now has finished; released when `lock` closes.
    rustix::fs::flock(&lock, rustix::fs::FlockOperation::LockExclusive)
        .unwrap_or_else(|e| panic!("locking {}: {e}", lock_path.display()));
    let done = root.join(&key);
    if !done.exists() {
        record_into_place(root, &key, argv, options);
    }
    let read = |name: &str| {
        let p = done.join(name);
        std::fs::read_to_string(&p).unwrap_or_else(|e| panic!("reading {}: {e}", p.display()))
    };
    Recording {
        dir: done.join("trace.data"),
        console: read("console.txt"),
        stderr: read("stderr.txt"),
    }
}

/// Records into `<key>.partial/` and renames it to `<key>/` once complete, or panics (leaving
/// nothing) when `record` fails. The caller holds the key's lock.
fn record_into_place(root: &Path, key: &str, argv: &[String], options: &[&str]) {
    let partial = root.join(format!("{key}.partial"));
    // A crashed earlier recording's leftovers: nobody else writes here while we hold the lock.
    if partial.exists() {
        std::fs::remove_dir_all(&partial)
            .unwrap_or_else(|e| panic!("removing {}: {e}", partial.display()));
    }
    std::fs::create_dir(&partial).unwrap_or_else(|e| panic!("creating {}: {e}", partial.display()));
    // One line a recording started, for whoever wonders what a run recorded (and for the
    // helper's own test: concurrent callers record once).
    let log = root.join("recorded.log");
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log)
        .and_then(|mut f| {
            std::io::Write::write_all(
                &mut f,
                format!(
                    "{key} pid {}: record {options:?} -- {argv:?}\n",
                    std::process::id()
                )
                .as_bytes(),
            )
        })
        .unwrap_or_else(|e| panic!("writing {}: {e}", log.display()));
    let out = super::record_into(&partial.join("trace.data"), options, argv);
    let console = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    if !out.status.success() {
        let _ = std::fs::remove_dir_all(&partial);
        panic!(
            "record {options:?} -- {argv:?} failed ({}):\n{stderr}\nconsole:\n{console}",
            out.status
        );
    }
    let write = |name: &str, text: &str| {
        let p = partial.join(name);
        std::fs::write(&p, text).unwrap_or_else(|e| panic!("writing {}: {e}", p.display()));
    };
    write("console.txt", &console);
    write("stderr.txt", &stderr);
    write("command.txt", &format!("record {options:?} -- {argv:?}\n"));
    let done = root.join(key);
    std::fs::rename(&partial, &done)
        .unwrap_or_else(|e| panic!("renaming {} to {}: {e}", partial.display(), done.display()));
}

/// Files up to this size are keyed by their bytes (the guests the tests build are rebuilt
/// alike, so their mtimes say nothing); larger ones (kernels, DWARF vmlinuxes, the recorder)
/// by path, size and mtime, which the installer and cargo change when they replace them.
const HASHED_WHOLE: u64 = 8 << 20;

/// The hash of everything that changes what `record OPTIONS -- ARGV` writes.
fn key(argv: &[String], options: &[&str]) -> String {
    let mut h = Sha256::new();
    let mut field = |what: &str, bytes: &[u8]| {
        h.update(what.as_bytes());
        h.update((bytes.len() as u64).to_le_bytes());
        h.update(bytes);
    };
    // The recorder by path, size and mtime (cargo relinks it when anything in it changes):
    // hashing its bytes in every test would cost more than it tells.
    field(
        "recorder",
        metadata_identity(Path::new(super::BIN)).as_bytes(),
    );
    for o in options {
        field("option", o.as_bytes());
        field("option file", file_identity(Path::new(o)).as_bytes());
    }
    for (i, a) in argv.iter().enumerate() {
        field("arg", a.as_bytes());
        // The emulator by its PATH entry; any argument naming a file (kernel, initrd, bios,
        // symbols) or a `key=file` part of one (`-drive file=…`) by the file's identity.
        let program = (i == 0)
            .then(|| which::which(a).ok())
            .flatten()
            .unwrap_or_else(|| PathBuf::from(a));
        field("arg file", file_identity(&program).as_bytes());
        for part in a
            .split(',')
            .filter_map(|p| p.split_once('=').map(|(_, v)| v))
        {
            field("arg part file", file_identity(Path::new(part)).as_bytes());
        }
    }
    // What record reads from its environment: where its plugin cache and QEMUs come from.
    let mut env: Vec<(String, String)> = std::env::vars()
        .filter(|(k, _)| {
            k.starts_with("QEMU_UFTRACE")
                || ["PATH", "HOME", "XDG_CACHE_HOME"].contains(&k.as_str())
        })
        .collect();
    env.sort();
    for (k, v) in env {
        field("env", format!("{k}={v}").as_bytes());
    }
    h.finalize()
        .iter()
        .take(16)
        .map(|b| format!("{b:02x}"))
        .collect()
}

/// A file's identity as [`HASHED_WHOLE`] says, or "" when `path` names no file.
fn file_identity(path: &Path) -> String {
    let Ok(meta) = std::fs::metadata(path) else {
        return String::new();
    };
    if !meta.is_file() {
        return String::new();
    }
    if meta.len() > HASHED_WHOLE {
        return metadata_identity(path);
    }
    let mut h = Sha256::new();
    let mut f =
        std::fs::File::open(path).unwrap_or_else(|e| panic!("opening {}: {e}", path.display()));
    let mut buf = vec![0u8; 1 << 20];
    loop {
        let n = f
            .read(&mut buf)
            .unwrap_or_else(|e| panic!("reading {}: {e}", path.display()));
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    h.finalize().iter().map(|b| format!("{b:02x}")).collect()
}

/// `path`'s path, size and mtime, or "" when it names nothing.
fn metadata_identity(path: &Path) -> String {
    std::fs::metadata(path)
        .map(|m| {
            format!(
                "{} {} {}.{}",
                path.display(),
                m.len(),
                m.mtime(),
                m.mtime_nsec()
            )
        })
        .unwrap_or_default()
}
