//! User mode: the guest's processes, each traced into its own files as uftrace does.
//!
//! A guest `fork` (or `vfork`, or `clone` without `CLONE_VM`: qemu-user makes them all a
//! host `fork()`) forks QEMU and us with it: the child carries the parent's whole state
//! but not its writer thread. At the fork's return in the child it takes over: a writer of
//! its own, its thread alone in the task table, the call stack carried on (uftrace's fork
//! semantics) without the records the parent had not written yet (the parent writes them).
//!
//! A guest `execve` is a host `execve` of the guest's path, which would run a foreign
//! program through binfmt_misc without us. When the path is an ELF program of this
//! emulator's machine, this image writes all it has and runs QEMU again itself, with the
//! same options and the plugin, for the new program: a new uftrace session, with the same
//! thread and its file. Anything else (a script, a host program) runs as the guest asked,
//! untraced.
//!
//! Each image other than the first has a key `<pid>.<n>` (`n` counts the execs in that
//! process) and writes its `plugin.*` files into `procs/<key>/`, after a `plugin.proc`
//! line that says what it is: `kind=fork pid= ppid= time=` or `kind=exec pid= time= exe=`.
//! The record command waits until each has its `plugin.stats` or its process is gone.
//!
//! Each later image's files take their room in the size cap before it runs
//! (`state::taken::IMAGE_BYTES`: a fork's in its parent, just before the fork, an exec'd
//! one's in the image that execs it). One the cap has no room for runs untraced: a forked
//! child drops every callback but the system calls' (`retire`), an exec'd program's QEMU
//! is run `untraced=on`; neither writes a file, and what they start is untraced too.

use super::image;
use std::cell::Cell;
use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Set in a forked child by the atfork handler; the fork's return there takes it.
static FORKED: AtomicBool = AtomicBool::new(false);
/// The process that forked, set just before the fork (so the child inherits it): the
/// child's parent even when it exits first (`daemon()`), where `getppid()` would say 1.
static FORKING_PID: AtomicU32 = AtomicU32::new(0);
/// Whether the child of the fork under way is traced (its files' room taken in the cap),
/// set just before the fork (glibc's fork lock orders concurrent forks), so that the child
/// inherits it.
static CHILD_TRACED: AtomicBool = AtomicBool::new(true);
/// How a forked child that runs untraced drops its callbacks (`entry::register`, set at
/// install).
static RETIRE: std::sync::OnceLock<fn()> = std::sync::OnceLock::new();

thread_local! {
    /// Set in the parent on the thread that forked, until the fork's return takes it.
    static FORKED_HERE: Cell<bool> = const { Cell::new(false) };
    /// Whether that fork's child is traced, for the parent's placeholder line.
    static TRACED_HERE: Cell<bool> = const { Cell::new(true) };
}

/// Whether the cap has room for the files of an image this one starts (a fork's child, an
/// exec'd program), taken now; never from an untraced image.
fn room_for_next_image() -> bool {
    !image::untraced() && crate::state::OUTPUT.get().is_some_and(|o| o.take_image())
}

extern "C" fn forking() {
    // SAFETY: getpid cannot fail.
    FORKING_PID.store(unsafe { libc::getpid() } as u32, Ordering::Relaxed);
    // The child's files take their room now, in the parent, which still has the count.
    let traced = room_for_next_image();
    CHILD_TRACED.store(traced, Ordering::Relaxed);
    TRACED_HERE.with(|t| t.set(traced));
}

extern "C" fn forked_child() {
    FORKED.store(true, Ordering::Relaxed);
}

extern "C" fn forked_parent() {
    FORKED_HERE.with(|f| f.set(true));
}

/// At install (user mode): which image this is (its files in `out`), the fork handlers, and
/// how an untraced child drops its callbacks.
pub fn install(out: &Path, key: Option<String>, retire: fn()) {
    let _ = RETIRE.set(retire);
    if let Some(k) = key.as_deref().filter(|k| !k.ends_with(".0")) {
        image::set_time_floor(exec_time(out, k).unwrap_or(0));
    }
    image::set_key(key);
    crate::state::resync_cookie::set_image(image::files_dir(out), image::index());
    // SAFETY: handlers with no arguments that only set flags.
    unsafe { libc::pthread_atfork(Some(forking), Some(forked_parent), Some(forked_child)) };
}

/// The `time=` of an exec'd image's `plugin.proc`.
fn exec_time(out: &Path, key: &str) -> Option<u64> {
    let line = std::fs::read_to_string(out.join("procs").join(key).join("plugin.proc")).ok()?;
    line.trim_end()
        .split('\t')
        .find_map(|f| f.strip_prefix("time="))?
        .parse()
        .ok()
}

fn now_ns(vcpu: u32) -> u64 {
    crate::vcpu::with(vcpu, |s| {
        let now = s.now();
        s.engine.clamp(now)
    })
    .unwrap_or(0)
}

/// Writes `procs/<key>/plugin.proc` (made before the image runs, so that the record
/// command waits for it), whole or not at all. With `Announce::Placeholder` a line already
/// there stays.
fn announce(out: &Path, key: &str, line: &str, how: Announce) -> std::io::Result<()> {
    let dir = out.join("procs").join(key);
    std::fs::create_dir_all(&dir)?;
    // SAFETY: gettid cannot fail.
    let tmp = dir.join(format!("plugin.proc.{}", unsafe { libc::gettid() }));
    std::fs::write(&tmp, format!("{line}\n"))?;
    let path = dir.join("plugin.proc");
    if how == Announce::Own {
        return std::fs::rename(&tmp, path);
    }
    // A hard link is made only where the name is free, and holds the whole line.
    let linked = std::fs::hard_link(&tmp, &path);
    let done = match linked {
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(()),
        // A filesystem without hard links: nearly as good.
        Err(_) if !path.exists() => std::fs::rename(&tmp, &path),
        r => r,
    };
    let _ = std::fs::remove_file(&tmp);
    done
}

/// Who writes a `plugin.proc` line.
#[derive(PartialEq, Eq)]
enum Announce {
    /// The image itself, or the one before it that execs it: the line is the truth.
    Own,
    /// A forked child's parent, so that record waits for the child even if the parent (and
    /// the first QEMU) ends before the child ran. The child's own line, timed on its own
    /// clock, must win: the parent may run again only after its child wrote it and even
    /// exec'd, and a FORK line timed after the exec's SESS line would give the exec'd
    /// program's records the parent's session (uftrace picks a record's session by time).
    Placeholder,
}

/// A syscall starts on vCPU `vcpu`.
pub fn syscall(vcpu: u32, num: i64, a1: u64, a2: u64, a3: u64) {
    if num == crate::state::isa_or_default().linux_user().execve {
        exec(vcpu, a1, a2, a3);
    }
}

/// The syscall vCPU `vcpu` started returned `ret`.
pub fn syscall_ret(vcpu: u32, ret: i64) {
    if FORKED.swap(false, Ordering::Relaxed) && ret == 0 {
        take_over(vcpu);
    } else if FORKED_HERE.with(|f| f.replace(false)) && ret > 0 {
        // A placeholder for the child's own line: the child may not have run yet when the
        // parent (and the first QEMU) ends, and record must wait for it. An untraced child
        // has none: it writes nothing to wait for.
        let traced = TRACED_HERE.with(Cell::get);
        if let Some(cfg) = crate::state::config().filter(|_| traced) {
            // SAFETY: getpid cannot fail.
            let ppid = unsafe { libc::getpid() };
            let line = format!("kind=fork\tpid={ret}\tppid={ppid}\ttime={}", now_ns(vcpu));
            let _ = announce(&cfg.out, &format!("{ret}.0"), &line, Announce::Placeholder);
        }
    }
}

/// In a forked child, on the thread that forked (the only one the child has).
fn take_over(vcpu: u32) {
    // Watched like its parent, traced or not.
    super::record_watch::after_fork();
    if !CHILD_TRACED.load(Ordering::Relaxed) || image::untraced() {
        // The cap had no room for this image's files: nothing recorded, nothing written;
        // only its system calls are followed from now on (its execs run untraced too).
        image::set_untraced();
        drop(crate::vcpu::take_all());
        if let Some(retire) = RETIRE.get() {
            retire();
        }
        return;
    }
    let (Some(cfg), Some(out)) = (crate::state::CONFIG.get(), crate::state::OUTPUT.get()) else {
        return;
    };
    // SAFETY: getpid, getppid and gettid cannot fail.
    let (pid, ppid, tid) = unsafe { (libc::getpid(), libc::getppid(), libc::gettid() as u32) };
    // The parent as it was at the fork: it may have exited by now (`daemon()`), and the
    // child been given to init.
    let ppid = match FORKING_PID.load(Ordering::Relaxed) {
        0 => ppid,
        forker => forker as i32,
    };
    // From here on this image's files are its own, never the parent's.
    let key = format!("{pid}.0");
    image::set_key(Some(key.clone()));
    crate::state::resync_cookie::set_image(image::files_dir(&cfg.out), image::index());
    if let Err(e) = out.restart_after_fork(cfg.out.clone()) {
        // Nothing may reach the parent's queue, which nobody reads here: record nothing.
        eprintln!("qemu-uftrace plugin: forked process {pid} is not traced: writer: {e}");
        drop(crate::vcpu::take_all());
        return;
    }
    crate::lifecycle::stop_signals::after_fork();
    crate::handlers::switch::after_fork();
    let line = format!("kind=fork\tpid={pid}\tppid={ppid}\ttime={}", now_ns(vcpu));
    if let Err(e) = announce(&cfg.out, &key, &line, Announce::Own) {
        out.note_error(format!("procs/{key}/plugin.proc: {e}"));
    }
    // The other threads' states are the parent's: they do not exist here.
    for i in 0..crate::vcpu::capacity() as u32 {
        if i != vcpu {
            drop(crate::vcpu::remove(i));
        }
    }
    crate::lifecycle::vcpus::RETIRED
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clear();
    let mut table = qemu_uftrace_engine::tasks::TaskTable::new(cfg.split_levels);
    let tid = table.start_thread(vcpu, tid);
    *crate::state::TASKS
        .lock()
        .unwrap_or_else(|e| e.into_inner()) = Some(table);
    crate::vcpu::with(vcpu, |s| s.engine.fork_child(tid));
}

/// The guest runs `execve(path, argv, envp)` on vCPU `vcpu`: when it is a program of this
/// emulator's machine, this image ends and QEMU runs it with the plugin (this call then
/// does not return).
fn exec(vcpu: u32, path_ptr: u64, argv_ptr: u64, envp_ptr: u64) {
    let Some(cfg) = crate::state::config() else {
        return;
    };
    let Some(user_opts) = cfg.user_opts else {
        return;
    };
    let Some(path) = crate::handlers::usermap::with_buf(|b| {
        crate::handlers::usermap::read_cstr(b, path_ptr, 4096)
    }) else {
        return;
    };
    let host = Path::new(OsStr::from_bytes(&path));
    // The program decides first: the arguments of one this QEMU does not run are not read.
    if !runs_here(host) {
        return;
    }
    let Some(qemu_args) = own_command(user_opts) else {
        return;
    };
    let max = arg_max();
    // The words this QEMU puts before the guest's (its options, the plugin's, the path
    // twice) take their share: past it the execve of QEMU would fail, and the guest with it.
    let own: usize = [&qemu_args.argv0, &qemu_args.plugin, &path, &path]
        .into_iter()
        .chain(&qemu_args.opts)
        .map(|w| w.len() + 9)
        .sum::<usize>()
        + 512;
    let mut room = max.saturating_sub(own);
    let strings = crate::handlers::usermap::with_buf(|b| {
        Some((
            read_strings(b, argv_ptr, &mut room)?,
            read_strings(b, envp_ptr, &mut room)?,
        ))
    });
    let Some((argv, envp)) = strings else {
        // QEMU's own execve meets the same limit (or fault) and tells the guest.
        eprintln!(
            "qemu-uftrace plugin: {} runs untraced: its arguments and environment are not \
             readable within the host's limit of {max} bytes",
            host.display()
        );
        return;
    };
    // SAFETY: getpid cannot fail.
    let pid = unsafe { libc::getpid() };
    let next = match image::key().and_then(|k| k.split_once('.').map(|(_, n)| n.to_string())) {
        Some(n) => n.parse::<u32>().unwrap_or(0) + 1,
        None => 1,
    };
    let key = format!("{pid}.{next}");
    let exe = std::path::absolute(host).unwrap_or_else(|_| host.to_path_buf());
    // The new program's session begins strictly after every record of this image, and the
    // new image's clock starts there (`image::time_floor`): uftrace gives a record the
    // session of its process's latest SESS line at or before its time. This image's clock
    // may stand still here: a forked child inherits its parent's last time, which an
    // interpolated clock can have put milliseconds ahead of the host, and its fork line,
    // records and exec then all share that one time.
    let time = now_ns(vcpu).saturating_add(1);
    let line = format!(
        "kind=exec\tpid={pid}\ttime={time}\texe={}",
        String::from_utf8_lossy(exe.as_os_str().as_bytes()).replace(['\t', '\n'], " ")
    );
    // The new image's files take their room in the size cap now; without it (or from an
    // untraced image) the program runs untraced, still under QEMU.
    let traced = room_for_next_image();
    if traced {
        if let Err(e) = announce(&cfg.out, &key, &line, Announce::Own) {
            eprintln!("qemu-uftrace plugin: {} runs untraced: {e}", host.display());
            return;
        }
    }
    // Everything this image recorded goes to disk before it is replaced.
    crate::lifecycle::finish::finish();
    let mut words: Vec<Vec<u8>> = Vec::new();
    words.push(qemu_args.argv0);
    words.push(b"-plugin".to_vec());
    let mut value = qemu_args.plugin;
    // The function entries were the first program's: none for this one.
    value.extend_from_slice(format!(",proc={key},user_opts={},entries=", user_opts + 2).as_bytes());
    if !traced {
        value.extend_from_slice(b",untraced=on");
    }
    if let Some(fd) = super::record_watch::for_exec() {
        value.extend_from_slice(format!(",record_pidfd={fd}").as_bytes());
    }
    words.push(value);
    let mut envp = envp;
    let arena = cfg.one_arena.then(|| one_arena(&qemu_args.opts, &mut envp));
    words.extend(qemu_args.opts);
    words.push(b"-0".to_vec());
    words.push(argv.first().cloned().unwrap_or_else(|| path.clone()));
    // After `-0 NAME`, which the copied options (`user_opts`) end with from here on.
    words.extend(arena.into_iter().flatten());
    words.push(b"--".to_vec());
    words.push(path.clone());
    words.extend(argv.into_iter().skip(1));
    let err = run(&qemu_args.exe, &words, &envp);
    // Nothing is left to record into: the guest cannot go on traced.
    eprintln!(
        "qemu-uftrace plugin: cannot run QEMU again for {}: {err}",
        host.display()
    );
    // SAFETY: ends the process, as a failed exec in a vfork child would.
    unsafe { libc::_exit(127) }
}

/// With `one_arena=on`: the QEMU run for an exec'd program keeps its malloc to one arena
/// as this one does (`qemu_uftrace_engine::arena`), its tunable put into `envp`, and the
/// program gets `envp` as it asked: the options that say so, for after QEMU's `opts`.
fn one_arena(opts: &[Vec<u8>], envp: &mut Vec<Vec<u8>>) -> Vec<Vec<u8>> {
    use qemu_uftrace_engine::arena;
    let key = format!("{}=", arena::NAME);
    let key = key.as_bytes();
    let current = envp
        .iter()
        .find_map(|e| e.strip_prefix(key))
        .map(<[u8]>::to_vec);
    let set = |name: &str| {
        (envp.iter()).any(|e| {
            e.strip_prefix(name.as_bytes())
                .is_some_and(|r| r.starts_with(b"="))
        })
    };
    let user_says = arena::QEMU_ENV_OPTIONS.iter().any(|k| set(k))
        || (opts.windows(2)).any(|w| arena::touches(&String::from_utf8_lossy(&w[0]), &w[1]));
    let Some(a) = arena::one_arena(current.as_deref(), user_says) else {
        return Vec::new();
    };
    envp.retain(|e| !e.starts_with(key));
    envp.push([key, &a.tunables].concat());
    a.guest_words.to_vec()
}

/// Linux's longest argument or environment string.
const MAX_ARG_STRLEN: usize = 128 << 10;

/// The most an `execve`'s strings may take on this host: a quarter of the stack limit
/// (`ARG_MAX`), within Linux's floor of 32 pages and its ceiling of 6 MiB (an unlimited
/// stack gives no bound of its own).
fn arg_max() -> usize {
    // SAFETY: sysconf has no preconditions.
    let n = unsafe { libc::sysconf(libc::_SC_ARG_MAX) };
    usize::try_from(n)
        .unwrap_or(0)
        .clamp(MAX_ARG_STRLEN, 6 << 20)
}

/// Reads a NULL-terminated array of string pointers (argv, envp) from guest memory, no more
/// than `room` bytes: Linux counts each string with its NUL and its pointer against
/// `ARG_MAX`, so the host's `execve` of QEMU would refuse more anyway.
fn read_strings(
    b: &mut crate::state::guest::ByteBuf,
    mut at: u64,
    room: &mut usize,
) -> Option<Vec<Vec<u8>>> {
    let mut out = Vec::new();
    if at == 0 {
        return Some(out);
    }
    loop {
        let ptr = b.read_le(at, 8)?;
        if ptr == 0 {
            return Some(out);
        }
        // Read no further than what fits, its NUL and pointer included.
        let max = room.checked_sub(9)?.min(MAX_ARG_STRLEN);
        let s = crate::handlers::usermap::read_cstr(b, ptr, max)?;
        *room = room.checked_sub(s.len() + 9)?;
        out.push(s);
        at = at.checked_add(8)?;
    }
}

/// Whether `path` is an executable ELF program of this emulator's machine.
fn runs_here(path: &Path) -> bool {
    use std::io::Read;
    let Ok(c) = CString::new(path.as_os_str().as_bytes()) else {
        return false;
    };
    // SAFETY: a NUL-terminated path.
    if unsafe { libc::access(c.as_ptr(), libc::X_OK) } != 0 {
        return false;
    }
    let mut head = [0u8; 20];
    let read = std::fs::File::open(path).and_then(|mut f| f.read_exact(&mut head));
    let machine = crate::state::arch_or_default().elf_machine();
    read.is_ok()
        && head[..4] == *b"\x7fELF"
        && head[4] == 2 // ELFCLASS64
        && head[5] == 1 // little-endian
        && u16::from_le_bytes([head[18], head[19]]) == machine
}

/// This QEMU's command, as the record command gave it (`qemu -plugin VALUE opts… prog…`).
struct OwnCommand {
    exe: PathBuf,
    argv0: Vec<u8>,
    plugin: Vec<u8>,
    opts: Vec<Vec<u8>>,
}

fn own_command(user_opts: usize) -> Option<OwnCommand> {
    let cmdline = std::fs::read("/proc/self/cmdline").ok()?;
    let words: Vec<Vec<u8>> = cmdline.split(|&b| b == 0).map(<[u8]>::to_vec).collect();
    if words.get(1).map(Vec::as_slice) != Some(b"-plugin") {
        return None;
    }
    Some(OwnCommand {
        exe: std::fs::read_link("/proc/self/exe").ok()?,
        argv0: words.first()?.clone(),
        plugin: words.get(2)?.clone(),
        opts: words.get(3..3 + user_opts)?.to_vec(),
    })
}

/// `execve`, returning only its error.
fn run(exe: &Path, argv: &[Vec<u8>], envp: &[Vec<u8>]) -> std::io::Error {
    let cstrings = |v: &[Vec<u8>]| -> Option<Vec<CString>> {
        v.iter().map(|w| CString::new(w.clone()).ok()).collect()
    };
    let (Some(exe), Some(argv), Some(envp)) = (
        CString::new(exe.as_os_str().as_bytes()).ok(),
        cstrings(argv),
        cstrings(envp),
    ) else {
        return std::io::Error::other("an argument holds a NUL byte");
    };
    let mut argv_p: Vec<*const libc::c_char> = argv.iter().map(|c| c.as_ptr()).collect();
    argv_p.push(std::ptr::null());
    let mut envp_p: Vec<*const libc::c_char> = envp.iter().map(|c| c.as_ptr()).collect();
    envp_p.push(std::ptr::null());
    // SAFETY: NUL-terminated strings in NULL-terminated arrays, alive across the call.
    unsafe { libc::execve(exe.as_ptr(), argv_p.as_ptr(), envp_p.as_ptr()) };
    std::io::Error::last_os_error()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(out: &Path) -> String {
        std::fs::read_to_string(out.join("procs/12.0/plugin.proc")).unwrap()
    }

    #[test]
    fn the_childs_own_line_wins_over_its_parents_placeholder() {
        let dir = std::env::temp_dir().join(format!("qu-announce-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        let out = Dir(dir);
        // The parent first, as usual: the child's line replaces it.
        announce(out.path(), "12.0", "parent", Announce::Placeholder).unwrap();
        assert_eq!(line(out.path()), "parent\n");
        announce(out.path(), "12.0", "child", Announce::Own).unwrap();
        assert_eq!(line(out.path()), "child\n");
        // The parent late (its child ran first, maybe exec'd): the child's line stays.
        announce(out.path(), "12.0", "late parent", Announce::Placeholder).unwrap();
        assert_eq!(line(out.path()), "child\n");
        let left: Vec<_> = std::fs::read_dir(out.path().join("procs/12.0"))
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, ["plugin.proc"], "no temporary file is left");
    }

    /// A directory removed when dropped.
    struct Dir(PathBuf);

    impl Dir {
        fn path(&self) -> &Path {
            &self.0
        }
    }

    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}
