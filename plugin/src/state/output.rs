//! Record buffers leave the vCPU threads here and are written by one writer thread, so a
//! vCPU never waits on `write()`. The queue is bounded: if the disk falls behind, vCPUs
//! wait for it rather than grow memory or drop records.

use qemu_uftrace_format::record::{encode, RecordType, RECORD_SIZE};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{sync_channel, Receiver, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Size of one record buffer: 64 Ki records.
pub const BUFFER_BYTES: usize = 1 << 20;
/// Full buffers that may wait for the writer (bounds memory to about 32 MiB).
const QUEUE_DEPTH: usize = 32;

enum Msg {
    Data { tid: u32, buf: Vec<u8> },
    Finish,
}

/// What the writer wrote, per task id.
#[derive(Debug, Default)]
pub struct Written {
    pub bytes: HashMap<u32, u64>,
    pub errors: Vec<String>,
    /// Why the writer stopped writing, if it did.
    pub stopped: Option<String>,
    /// What it could not write after that, per task id.
    pub lost: HashMap<u32, Lost>,
}

pub struct Output {
    /// Taken by vCPU threads only (at each full buffer), never by the writer: a forked
    /// child, whose writer thread did not survive the fork, finds it free and replaces it.
    chan: Mutex<Chan>,
    /// Problems met off the writer thread, reported with its own at the end.
    noted: Mutex<Vec<String>>,
}

/// The queue to one writer thread.
struct Chan {
    tx: SyncSender<Msg>,
    pool: Arc<Mutex<Vec<Vec<u8>>>>,
    writer: Option<JoinHandle<Written>>,
}

impl Chan {
    fn start(dir: PathBuf) -> std::io::Result<Chan> {
        let (tx, rx) = sync_channel(QUEUE_DEPTH);
        let pool = Arc::new(Mutex::new(Vec::new()));
        let writer_pool = Arc::clone(&pool);
        let writer = with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("uftrace-writer".into())
                .spawn(move || write_loop(dir, rx, writer_pool))
        })?;
        Ok(Chan {
            tx,
            pool,
            writer: Some(writer),
        })
    }
}

impl Output {
    pub fn start(dir: PathBuf) -> std::io::Result<Output> {
        Ok(Output {
            chan: Mutex::new(Chan::start(dir)?),
            noted: Mutex::new(Vec::new()),
        })
    }

    fn chan(&self) -> std::sync::MutexGuard<'_, Chan> {
        self.chan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// In a forked child: the parent's writer thread is not there, and its buffer pool may
    /// have been locked by it at the fork. Both are left behind (never touched again) for a
    /// new writer and pool; what the parent had queued is the parent's to write.
    pub fn restart_after_fork(&self, dir: PathBuf) -> std::io::Result<()> {
        let fresh = Chan::start(dir)?;
        let old = std::mem::replace(&mut *self.chan(), fresh);
        // Dropping it would detach a thread that does not exist here.
        std::mem::forget(old);
        self.noted.lock().unwrap_or_else(|e| e.into_inner()).clear();
        Ok(())
    }

    /// An empty buffer, recycled when possible.
    pub fn fresh(&self) -> Vec<u8> {
        let pool = Arc::clone(&self.chan().pool);
        let recycled = pool.lock().ok().and_then(|mut p| p.pop());
        recycled.unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES))
    }

    /// Queues a full buffer for `tid`'s file (blocks while the queue is full).
    pub fn send(&self, tid: u32, buf: Vec<u8>) {
        let records = buf.len() / RECORD_SIZE;
        // Fails only when the writer thread is gone (it died, or exit already ran).
        let tx = self.chan().tx.clone();
        if tx.send(Msg::Data { tid, buf }).is_err() {
            self.note_error(format!(
                "{tid}.dat: {records} records not written: the writer thread had stopped"
            ));
        }
    }

    /// Records a problem for `plugin.stats` (which then says the trace is incomplete).
    pub fn note_error(&self, msg: String) {
        eprintln!("qemu-uftrace plugin: {msg}");
        self.noted
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(msg);
    }

    /// Waits until everything queued is written.
    pub fn finish(&self) -> Written {
        // A writer that already stopped has nothing left to finish; `join` says why.
        let (tx, handle) = {
            let mut chan = self.chan();
            (chan.tx.clone(), chan.writer.take())
        };
        let _ = tx.send(Msg::Finish);
        let mut written = match handle.map(JoinHandle::join) {
            Some(Ok(written)) => written,
            Some(Err(_)) => Written {
                errors: vec!["writer thread panicked".into()],
                ..Default::default()
            },
            None => Written::default(),
        };
        let noted = std::mem::take(&mut *self.noted.lock().unwrap_or_else(|e| e.into_inner()));
        written.errors.extend(noted);
        written
    }
}

/// Free space the writer leaves on the trace's filesystem: what `record` writes after QEMU
/// exits (symbol files, task list, info) must still fit, so that a full disk still gives a
/// trace uftrace replays up to where recording stopped.
pub const RESERVE_BYTES: u64 = 32 << 20;

/// Records that reached the writer after it stopped.
#[derive(Debug, Default, Clone, Copy)]
pub struct Lost {
    pub records: u64,
    /// The time of the first of them, where the task's LOST record goes.
    pub first_time: u64,
}

/// Bytes free for us on the filesystem holding `dir` (`None`: cannot tell).
fn free_bytes(dir: &Path) -> Option<u64> {
    let c = std::ffi::CString::new(dir.as_os_str().as_bytes()).ok()?;
    // SAFETY: statvfs is plain data, for which all zeroes is a valid value.
    let mut st: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a NUL-terminated path and a struct to fill.
    if unsafe { libc::statvfs(c.as_ptr(), &mut st) } != 0 {
        return None;
    }
    Some(st.f_bavail as u64 * st.f_frsize as u64)
}

/// The writer's state: open files, what was written, and once it stopped, why and what it
/// could not write.
struct Writer {
    dir: PathBuf,
    /// Open files, with the length each had when opened.
    files: HashMap<u32, (File, u64)>,
    written: Written,
}

impl Writer {
    /// Writes one buffer for `tid`, or counts it lost once writing has stopped. Stops at the
    /// first error (a torn record would misalign every later one: the file is cut back to
    /// the last whole buffer) and before the free space falls below the reserve.
    fn write(&mut self, tid: u32, buf: &[u8]) {
        if self.written.stopped.is_none() {
            let free = free_bytes(&self.dir);
            if free.is_some_and(|f| f < RESERVE_BYTES + buf.len() as u64) {
                self.written.stopped = Some(format!(
                    "recording stopped with {} MiB left on the trace's filesystem (kept for \
                     assembling the trace)",
                    free.unwrap_or(0) >> 20
                ));
            } else if let Err(e) = self.append(tid, buf) {
                self.written.stopped = Some(format!("{tid}.dat: {e}"));
            }
        }
        if self.written.stopped.is_some() {
            let lost = self.written.lost.entry(tid).or_default();
            if lost.records == 0 {
                lost.first_time = first_time(buf);
            }
            lost.records += (buf.len() / RECORD_SIZE) as u64;
        }
    }

    fn append(&mut self, tid: u32, buf: &[u8]) -> std::io::Result<()> {
        let path = self.dir.join(format!("{tid}.dat"));
        let (file, opened_at) = match self.files.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            // Appended to: a program that exec'd carries on in its thread's file (the image
            // before it wrote its part and is gone).
            std::collections::hash_map::Entry::Vacant(e) => {
                let file = std::fs::OpenOptions::new()
                    .append(true)
                    .create(true)
                    .open(&path)?;
                let len = file.metadata()?.len();
                e.insert((file, len))
            }
        };
        let before = *opened_at + self.written.bytes.get(&tid).copied().unwrap_or(0);
        if let Err(e) = file.write_all(buf) {
            // Part of the buffer may be on disk: cut back to the last whole buffer.
            if let Err(cut) = file.set_len(before) {
                return Err(std::io::Error::new(
                    e.kind(),
                    format!("{e}, and cutting it back to {before} bytes failed: {cut}"),
                ));
            }
            return Err(e);
        }
        *self.written.bytes.entry(tid).or_default() += buf.len() as u64;
        Ok(())
    }

    /// Ends each file that lost records with a LOST record, so that replay shows where and
    /// how many (the reserve keeps room for them).
    fn mark_lost(&mut self) {
        let lost: Vec<(u32, Lost)> = self.written.lost.iter().map(|(t, l)| (*t, *l)).collect();
        for (tid, lost) in lost {
            let count = lost.records.min(qemu_uftrace_format::ADDR_MASK);
            let record = encode(lost.first_time, RecordType::Lost, 0, count);
            let path = self.dir.join(format!("{tid}.dat"));
            let result = std::fs::OpenOptions::new()
                .append(true)
                .create(true)
                .open(&path)
                .and_then(|mut f| f.write_all(&record));
            match result {
                Ok(()) => *self.written.bytes.entry(tid).or_default() += RECORD_SIZE as u64,
                Err(e) => self
                    .written
                    .errors
                    .push(format!("{tid}.dat: cannot mark the lost records: {e}")),
            }
        }
    }
}

/// The time of a buffer's first record.
fn first_time(buf: &[u8]) -> u64 {
    buf.get(..8)
        .and_then(|b| b.try_into().ok())
        .map_or(0, u64::from_le_bytes)
}

fn write_loop(dir: PathBuf, rx: Receiver<Msg>, pool: Arc<Mutex<Vec<Vec<u8>>>>) -> Written {
    let mut w = Writer {
        dir,
        files: HashMap::new(),
        written: Written::default(),
    };
    while let Ok(msg) = rx.recv() {
        let (tid, mut buf) = match msg {
            Msg::Data { tid, buf } => (tid, buf),
            Msg::Finish => break,
        };
        w.write(tid, &buf);
        buf.clear();
        if let Ok(mut p) = pool.lock() {
            if p.len() < QUEUE_DEPTH {
                p.push(buf);
            }
        }
    }
    // No fsync: the records are safe in the page cache once written, whatever happens to
    // QEMU, and syncing a trace of hundreds of megabytes took a tenth of a kernel boot.
    w.files.clear();
    w.mark_lost();
    w.written
}

/// Runs `f` (which starts a thread: it inherits the mask) with every signal blocked. A
/// process-directed signal goes to any thread that does not block it, and QEMU's
/// linux-user handler takes the thread it runs on for a guest thread: a guest's SIGALRM
/// handled on the writer thread crashed QEMU (about one run in 25 of a program with an
/// interval timer).
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    // SAFETY: plain libc calls on sets that live on this stack.
    unsafe {
        let mut all: libc::sigset_t = std::mem::zeroed();
        let mut old: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let blocked = libc::pthread_sigmask(libc::SIG_BLOCK, &all, &mut old) == 0;
        let result = f();
        if blocked {
            libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut());
        }
        result
    }
}
