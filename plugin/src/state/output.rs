//! Record buffers leave the vCPU threads here and are written by one writer thread, so a
//! vCPU never waits on `write()`. The queue is bounded: if the disk falls behind, vCPUs
//! wait for it rather than grow memory or drop records.

use super::flight::Ring;
use super::progress::{self, Counts, Progress};
use super::start_gate::{StartGate, StartPoint};
use super::taken::Taken;
use qemu_uftrace_format::record::{encode, RecordType, RECORD_SIZE};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{sync_channel, Receiver, RecvTimeoutError, SyncSender};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

/// Size of one record buffer: 64 Ki records.
pub const BUFFER_BYTES: usize = 1 << 20;
/// Full buffers that may wait for the writer (bounds memory to about 32 MiB).
const QUEUE_DEPTH: usize = 32;
/// Buffers in the pool from the start (address space only, until used).
const SEEDED_BUFFERS: usize = 4;

enum Msg {
    /// `early`: queued before `--stop-at`'s stop was set, so every record of it was made
    /// before (the stopping vCPU queues its own at the stop): none is cut by its time.
    Data {
        tid: u32,
        buf: Vec<u8>,
        early: bool,
    },
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
    /// Whether it stopped at the size cap (`max_size=`): the records past it were dropped
    /// whole, and no error is behind it.
    pub capped: bool,
    /// `--start-at`: the frames open at the start, written as entries.
    pub start_frames: u64,
    /// `--keep-last`: the frames open at the window's start, written as entries.
    pub window_frames: Option<u64>,
    /// Files beside the records (stack cookies) not written: past the size cap or their
    /// own cap.
    pub dropped_side: u64,
}

/// How much the writer may write: `max_bytes` of records in all (`max_size=`), and what
/// happens when they are reached (`on_cap`, called once on the writer thread; it must not
/// wait for the writer).
#[derive(Clone, Copy, Default)]
pub struct Limits {
    pub max_bytes: Option<u64>,
    pub on_cap: Option<fn()>,
    /// `--keep-last SIZE`: the writer keeps the last SIZE bytes of records, written at the
    /// end.
    pub keep_last: Option<u64>,
    /// `--start-at FUNC`: nothing is written before `Output::start_at`.
    pub start_at: bool,
    /// Record times count the only vCPU's guest instructions: the status file says how
    /// many it ran.
    pub insn_time: bool,
}

pub struct Output {
    limits: Limits,
    /// Taken by vCPU threads only (at each full buffer), never by the writer: a forked
    /// child, whose writer thread did not survive the fork, finds it free and replaces it.
    chan: Mutex<Chan>,
    /// Problems met off the writer thread, reported with its own at the end.
    noted: Mutex<Vec<String>>,
    /// Files beside the records not written ([`Written::dropped_side`]).
    dropped_side: AtomicU64,
    /// `--stop-at`: records from this time on are not written (`u64::MAX`: none).
    stop: Arc<AtomicU64>,
    /// `--start-at`: records before this time are not written (`u64::MAX`: not yet).
    start: Arc<AtomicU64>,
    /// `--start-at`: where it was reached.
    start_point: Arc<StartPoint>,
}

/// The queue to one writer thread.
struct Chan {
    tx: SyncSender<Msg>,
    pool: Arc<Mutex<Vec<Vec<u8>>>>,
    writer: Option<JoinHandle<Written>>,
    /// What the size cap has given out: records and the files beside them (stack cookies,
    /// written off the writer thread).
    taken: Taken,
}

impl Chan {
    fn start(
        dir: PathBuf,
        limits: Limits,
        taken: &Taken,
        stop: &Arc<AtomicU64>,
        (start, start_point): (&Arc<AtomicU64>, &Arc<StartPoint>),
    ) -> std::io::Result<Chan> {
        let mut w = Writer::new(dir, limits);
        w.taken = taken.clone();
        w.stop = Arc::clone(stop);
        if limits.start_at {
            w.gate = Some(StartGate::new(Arc::clone(start), Arc::clone(start_point)));
        }
        Chan::start_with(w)
    }

    fn start_with(w: Writer) -> std::io::Result<Chan> {
        let taken = w.taken.clone();
        let (tx, rx) = sync_channel(QUEUE_DEPTH);
        // Seeded before the guest runs, so that a vCPU's buffer swap takes one from here
        // instead of mapping memory at a moment the writer's pace decides: in user mode
        // that memory is the guest's address space too, and a mapping made before or
        // after the guest's own would move every later library (runs would not repeat).
        let seeded = (0..SEEDED_BUFFERS)
            .map(|_| Vec::with_capacity(BUFFER_BYTES))
            .collect();
        let pool = Arc::new(Mutex::new(seeded));
        let writer_pool = Arc::clone(&pool);
        let writer = with_signals_blocked(|| {
            std::thread::Builder::new()
                .name("uftrace-writer".into())
                .spawn(move || write_loop(w, rx, writer_pool))
        })?;
        Ok(Chan {
            tx,
            pool,
            writer: Some(writer),
            taken,
        })
    }
}

impl Output {
    /// The writer for `dir`, within `limits`, taking from the size cap's count `taken`.
    pub fn start(dir: PathBuf, limits: Limits, taken: &Taken) -> std::io::Result<Output> {
        let stop = Arc::new(AtomicU64::new(u64::MAX));
        let start = Arc::new(AtomicU64::new(u64::MAX));
        let start_point = Arc::new(StartPoint::default());
        let starts = (&start, &start_point);
        Ok(Output {
            limits,
            chan: Mutex::new(Chan::start(dir, limits, taken, &stop, starts)?),
            noted: Mutex::new(Vec::new()),
            dropped_side: AtomicU64::new(0),
            stop,
            start,
            start_point,
        })
    }

    fn chan(&self) -> std::sync::MutexGuard<'_, Chan> {
        self.chan.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// In a forked child: the parent's writer thread is not there, and its buffer pool may
    /// have been locked by it at the fork. Both are left behind (never touched again) for a
    /// new writer and pool; what the parent had queued is the parent's to write. The size
    /// cap's count goes on (user mode: one for all images).
    pub fn restart_after_fork(&self, dir: PathBuf) -> std::io::Result<()> {
        let start = (&self.start, &self.start_point);
        let taken = self.chan().taken.clone();
        let fresh = Chan::start(dir, self.limits, &taken, &self.stop, start)?;
        let old = std::mem::replace(&mut *self.chan(), fresh);
        // Dropping it would detach a thread that does not exist here.
        std::mem::forget(old);
        self.noted.lock().unwrap_or_else(|e| e.into_inner()).clear();
        self.dropped_side.store(0, Ordering::SeqCst);
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
        let early = self.stop.load(Ordering::SeqCst) == u64::MAX;
        if tx.send(Msg::Data { tid, buf, early }).is_err() {
            self.note_error(format!(
                "{tid}.dat: {records} records not written: the writer thread had stopped"
            ));
        }
    }

    /// Ends the trace at `time` (`--stop-at`): only records before it are written, from
    /// now on and of the buffers still to come (a vCPU's buffer holds records of both).
    pub fn stop_at(&self, time: u64) {
        self.stop.fetch_min(time, Ordering::SeqCst);
    }

    /// Starts the trace at `time` (`--start-at`), at task `tid`'s entry into `addr`:
    /// records before it are not written. Once only.
    pub fn start_at(&self, time: u64, addr: u64, tid: u32) {
        self.start_point.addr.store(addr, Ordering::Release);
        self.start_point.tid.store(tid, Ordering::Release);
        self.start.fetch_min(time, Ordering::AcqRel);
    }

    /// Takes room for `bytes` of a file beside the records (a stack cookie) within the size
    /// cap (`max_size=`), which counts them with the records; false, nothing taken, where
    /// they do not fit (counted as dropped).
    pub fn reserve_side(&self, bytes: u64) -> bool {
        let taken = self.chan().taken.clone();
        let Some(max) = self.limits.max_bytes else {
            return true;
        };
        let fits = taken.take_whole(max, bytes);
        if !fits {
            self.drop_side();
        }
        fits
    }

    /// User mode: a process image about to start (a forked child, an exec'd program) takes
    /// room for its files within the size cap; false where there is none left (it runs
    /// untraced, counted for `record`).
    pub fn take_image(&self) -> bool {
        let taken = self.chan().taken.clone();
        taken.take_image(self.limits.max_bytes)
    }

    /// A file beside the records was not written (its own cap).
    pub fn drop_side(&self) {
        self.dropped_side.fetch_add(1, Ordering::SeqCst);
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
        written.dropped_side = self.dropped_side.load(Ordering::SeqCst);
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

/// Where the writer puts one task's records: a file, or in tests one that fails on cue.
pub trait Sink: Write + Send {
    /// Cuts the file back to `len` bytes.
    fn set_len(&mut self, len: u64) -> std::io::Result<()>;
    /// The file's length now.
    fn len(&mut self) -> std::io::Result<u64>;
}

impl Sink for File {
    fn set_len(&mut self, len: u64) -> std::io::Result<()> {
        File::set_len(self, len)
    }

    fn len(&mut self) -> std::io::Result<u64> {
        Ok(self.metadata()?.len())
    }
}

/// Opens a task's file for appending (created if missing).
type Opener = Box<dyn FnMut(&Path) -> std::io::Result<Box<dyn Sink>> + Send>;

fn open_append(path: &Path) -> std::io::Result<Box<dyn Sink>> {
    let file = std::fs::OpenOptions::new()
        .append(true)
        .create(true)
        .open(path)?;
    Ok(Box::new(file))
}

/// The writer's state: open files, what was written, and once it stopped, why and what it
/// could not write.
struct Writer {
    dir: PathBuf,
    /// Open files, with the length each had when opened.
    files: HashMap<u32, (Box<dyn Sink>, u64)>,
    written: Written,
    open: Opener,
    free: fn(&Path) -> Option<u64>,
    limits: Limits,
    /// What the size cap has given out (`Chan::taken`).
    taken: Taken,
    /// Files left with a partial buffer at their end (the cut back failed): where the last
    /// whole one ended. Nothing may be appended to them.
    torn: HashMap<u32, u64>,
    /// `--stop-at`: the time from which records are not written (`u64::MAX`: none).
    stop: Arc<AtomicU64>,
    /// The buffer being written was queued before the stop (`Msg::Data`).
    early: bool,
    /// `--start-at`: what is written before and at the start.
    gate: Option<StartGate>,
    /// `--keep-last`: the window, written at the end.
    ring: Option<Ring>,
}

impl Writer {
    fn new(dir: PathBuf, limits: Limits) -> Writer {
        Writer {
            dir,
            files: HashMap::new(),
            written: Written::default(),
            open: Box::new(open_append),
            free: free_bytes,
            limits,
            taken: Taken::own(),
            torn: HashMap::new(),
            stop: Arc::new(AtomicU64::new(u64::MAX)),
            early: false,
            gate: None,
            ring: limits.keep_last.map(Ring::new),
        }
    }

    /// Writes one buffer for `tid`, or counts it lost once writing has stopped. Stops at the
    /// first error (a torn record would misalign every later one: the file is cut back to
    /// the last whole buffer), before the free space falls below the reserve, and at the
    /// size cap (whole records up to it are written, the rest dropped).
    fn write(&mut self, tid: u32, buf: &[u8]) {
        let passed;
        let buf = match &mut self.gate {
            Some(gate) => {
                passed = gate.pass(tid, buf);
                &passed[..]
            }
            None => buf,
        };
        if buf.is_empty() {
            return;
        }
        // The window ends at the stop (`--stop-at` with `--keep-last`): what comes after it
        // never enters the ring, so it does not push the window's start on.
        if let Some(ring) = &mut self.ring {
            let kept = match self.early {
                true => Cow::Borrowed(buf),
                false => before_stop(&self.stop, buf),
            };
            if !kept.is_empty() {
                ring.push(tid, &kept);
            }
        } else {
            self.write_through(tid, buf)
        }
    }

    /// The records of `buf` from before the `--stop-at` time, all of a buffer queued before
    /// it was set.
    fn before_stop<'a>(&self, buf: &'a [u8]) -> Cow<'a, [u8]> {
        if self.early {
            return Cow::Borrowed(buf);
        }
        before_stop(&self.stop, buf)
    }

    /// [`Writer::write`] past the start.
    fn write_through(&mut self, tid: u32, buf: &[u8]) {
        if self.written.capped {
            return;
        }
        let kept = self.before_stop(buf);
        // Everything was after the stop.
        if matches!(kept, Cow::Owned(_)) && kept.is_empty() {
            return;
        }
        let mut buf = &kept[..];
        // Taken before the write (given back if it fails): other images take from the same
        // count meanwhile.
        let mut taken = 0;
        if self.written.stopped.is_none() {
            if let Some(max) = self.limits.max_bytes {
                let (got, full) = self.taken.take_records(max, buf.len(), RECORD_SIZE);
                self.written.capped = full;
                buf = &buf[..got];
                taken = got as u64;
            }
        }
        if self.written.stopped.is_none() && !buf.is_empty() {
            let free = (self.free)(&self.dir);
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
            self.taken.give_back(taken);
            // An error, not the cap, is what lost these.
            self.written.capped = false;
            let lost = self.written.lost.entry(tid).or_default();
            if lost.records == 0 {
                lost.first_time = first_time(buf);
            }
            lost.records += (buf.len() / RECORD_SIZE) as u64;
        } else if self.written.capped {
            if let Some(on_cap) = self.limits.on_cap {
                on_cap();
            }
        }
    }

    /// What the status file says of the writer.
    fn counts(&self) -> Counts {
        Counts {
            bytes: self.written.bytes.values().sum(),
            tasks: self.written.bytes.len(),
            lost: self.written.lost.values().map(|l| l.records).sum(),
        }
    }

    fn state(&self) -> progress::State {
        if self.written.stopped.is_some() {
            progress::State::Stopped
        } else if self.written.capped {
            progress::State::Capped
        } else {
            progress::State::Recording
        }
    }

    fn append(&mut self, tid: u32, buf: &[u8]) -> std::io::Result<()> {
        let path = self.dir.join(format!("{tid}.dat"));
        let (file, opened_at) = match self.files.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut(),
            // Appended to: a program that exec'd carries on in its thread's file (the image
            // before it wrote its part and is gone).
            std::collections::hash_map::Entry::Vacant(e) => {
                let mut file = (self.open)(&path)?;
                let len = file.len()?;
                e.insert((file, len))
            }
        };
        let before = *opened_at + self.written.bytes.get(&tid).copied().unwrap_or(0);
        if let Err(e) = file.write_all(buf) {
            // Part of the buffer may be on disk: cut back to the last whole buffer.
            if let Err(cut) = file.set_len(before) {
                self.torn.insert(tid, before);
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
    /// how many (the reserve keeps room for them). A file whose tail is torn is cut back
    /// first; if that fails again, nothing goes after the torn record, and the error says
    /// where the whole records end.
    fn mark_lost(&mut self) {
        let lost: Vec<(u32, Lost)> = self.written.lost.iter().map(|(t, l)| (*t, *l)).collect();
        for (tid, lost) in lost {
            let count = lost.records.min(qemu_uftrace_format::ADDR_MASK);
            let record = encode(lost.first_time, RecordType::Lost, 0, count);
            let path = self.dir.join(format!("{tid}.dat"));
            let torn = self.torn.get(&tid).copied();
            let result = (self.open)(&path).and_then(|mut f| {
                if let Some(at) = torn {
                    f.set_len(at).map_err(|e| {
                        std::io::Error::new(
                            e.kind(),
                            format!("it ends in a torn record after byte {at}: {e}"),
                        )
                    })?;
                }
                f.write_all(&record)
            });
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

/// The records of `buf` from before the `--stop-at` time (all of them while none is set):
/// what comes after the stop is never written, nor enters `--keep-last`'s window.
fn before_stop<'a>(stop: &AtomicU64, buf: &'a [u8]) -> Cow<'a, [u8]> {
    let stop = stop.load(Ordering::Relaxed);
    if stop == u64::MAX {
        return Cow::Borrowed(buf);
    }
    Cow::Owned(
        buf.chunks_exact(RECORD_SIZE)
            .filter(|r| first_time(r) < stop)
            .flatten()
            .copied()
            .collect(),
    )
}

fn write_loop(mut w: Writer, rx: Receiver<Msg>, pool: Arc<Mutex<Vec<Vec<u8>>>>) -> Written {
    let mut status = Progress::new(&w.dir, w.limits.insn_time);
    status.write(progress::State::Recording, w.counts());
    loop {
        // Woken at least once a second, for the status of a guest that writes nothing.
        let (tid, mut buf) = match rx.recv_timeout(progress::EVERY) {
            Ok(Msg::Data { tid, buf, early }) => {
                w.early = early;
                (tid, buf)
            }
            Ok(Msg::Finish) | Err(RecvTimeoutError::Disconnected) => break,
            Err(RecvTimeoutError::Timeout) => {
                status.write(w.state(), w.counts());
                continue;
            }
        };
        w.write(tid, &buf);
        status.saw(&buf);
        if status.due() {
            status.write(w.state(), w.counts());
        }
        buf.clear();
        if let Ok(mut p) = pool.lock() {
            if p.len() < QUEUE_DEPTH {
                p.push(buf);
            }
        }
    }
    // `--start-at`: the tasks that did not run after the start still have their open frames.
    if let Some(mut gate) = w.gate.take() {
        for (tid, frames) in gate.unwritten() {
            w.write_through(tid, &frames);
        }
        w.written.start_frames = gate.stacks.written_frames;
    }
    // `--keep-last`: the window now.
    if let Some(ring) = w.ring.take() {
        let (bufs, frames) = ring.drain();
        for (tid, buf) in bufs {
            w.write_through(tid, &buf);
        }
        w.written.window_frames = Some(frames);
    }
    // No fsync: the records are safe in the page cache once written, whatever happens to
    // QEMU, and syncing a trace of hundreds of megabytes took a tenth of a kernel boot.
    w.files.clear();
    w.mark_lost();
    status.write(progress::State::Done, w.counts());
    w.written
}

/// Runs `f` (which starts a thread: it inherits the mask) with every signal blocked. A
/// process-directed signal goes to any thread that does not block it, and QEMU's
/// linux-user handler takes the thread it runs on for a guest thread: a guest's SIGALRM
/// handled on the writer thread crashed QEMU (about one run in 25 of a program with an
/// interval timer).
pub fn with_signals_blocked<R>(f: impl FnOnce() -> R) -> R {
    use nix::sys::signal::{pthread_sigmask, SigSet, SigmaskHow};
    let mut old = SigSet::empty();
    let blocked = pthread_sigmask(SigmaskHow::SIG_BLOCK, Some(&SigSet::all()), Some(&mut old));
    let result = f();
    if blocked.is_ok() {
        let _ = pthread_sigmask(SigmaskHow::SIG_SETMASK, Some(&old), None);
    }
    result
}

#[cfg(test)]
mod tests {
    use super::*;
    use qemu_uftrace_format::record::{decode_all, Record};

    /// One fake file: its bytes, and how it fails.
    #[derive(Default)]
    struct Fake {
        data: Vec<u8>,
        /// Bytes accepted before each write fails with `errno` (`None`: never fails).
        accept: Option<usize>,
        errno: i32,
        set_len_fails: bool,
    }

    type Disk = Arc<Mutex<HashMap<PathBuf, Fake>>>;

    struct FakeFile {
        disk: Disk,
        path: PathBuf,
    }

    impl Write for FakeFile {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            let mut disk = self.disk.lock().unwrap();
            let f = disk.get_mut(&self.path).unwrap();
            match f.accept {
                Some(0) => Err(std::io::Error::from_raw_os_error(f.errno)),
                Some(n) => {
                    let k = n.min(b.len());
                    f.data.extend_from_slice(&b[..k]);
                    f.accept = Some(n - k);
                    Ok(k)
                }
                None => {
                    f.data.extend_from_slice(b);
                    Ok(b.len())
                }
            }
        }

        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }

    impl Sink for FakeFile {
        fn set_len(&mut self, len: u64) -> std::io::Result<()> {
            let mut disk = self.disk.lock().unwrap();
            let f = disk.get_mut(&self.path).unwrap();
            if f.set_len_fails {
                return Err(std::io::Error::from_raw_os_error(libc::EIO));
            }
            f.data.truncate(len as usize);
            Ok(())
        }

        fn len(&mut self) -> std::io::Result<u64> {
            Ok(self.disk.lock().unwrap()[&self.path].data.len() as u64)
        }
    }

    fn plenty(_: &Path) -> Option<u64> {
        Some(1 << 40)
    }

    /// A writer on a fake disk with plenty of room, and that disk.
    /// The output of a recording whose writer thread runs `w`, with no stop or start set.
    fn output(limits: Limits, w: Writer) -> Output {
        Output {
            limits,
            chan: Mutex::new(Chan::start_with(w).unwrap()),
            noted: Mutex::new(Vec::new()),
            dropped_side: AtomicU64::new(0),
            stop: Arc::new(AtomicU64::new(u64::MAX)),
            start: Arc::new(AtomicU64::new(u64::MAX)),
            start_point: Arc::default(),
        }
    }

    fn writer(limits: Limits) -> (Writer, Disk) {
        let disk: Disk = Arc::default();
        let mut w = Writer::new(PathBuf::from("/fake"), limits);
        let d = Arc::clone(&disk);
        w.open = Box::new(move |path: &Path| {
            d.lock().unwrap().entry(path.to_path_buf()).or_default();
            Ok(Box::new(FakeFile {
                disk: Arc::clone(&d),
                path: path.to_path_buf(),
            }) as Box<dyn Sink>)
        });
        w.free = plenty;
        (w, disk)
    }

    /// `n` entry records timed from `t`.
    fn records(t: u64, n: usize) -> Vec<u8> {
        (0..n as u64)
            .flat_map(|i| encode(t + i, RecordType::Entry, 0, 0x1000 + i))
            .collect()
    }

    fn file(disk: &Disk, tid: u32) -> Vec<u8> {
        disk.lock().unwrap()[&PathBuf::from(format!("/fake/{tid}.dat"))]
            .data
            .clone()
    }

    fn fail_next(disk: &Disk, tid: u32, accept: usize, errno: i32, set_len_fails: bool) {
        let mut d = disk.lock().unwrap();
        let f = d
            .get_mut(&PathBuf::from(format!("/fake/{tid}.dat")))
            .unwrap();
        f.accept = Some(accept);
        f.errno = errno;
        f.set_len_fails = set_len_fails;
    }

    fn heal(disk: &Disk, tid: u32) {
        let mut d = disk.lock().unwrap();
        let f = d
            .get_mut(&PathBuf::from(format!("/fake/{tid}.dat")))
            .unwrap();
        f.accept = None;
        f.set_len_fails = false;
    }

    fn lost_record(r: &Record) -> Option<u64> {
        (r.kind == RecordType::Lost).then_some(r.addr)
    }

    /// A failed write (ENOSPC, EIO, after part of the buffer went out) is cut back to the
    /// last whole buffer; what follows is counted and marked by one LOST record there.
    #[test]
    fn a_failed_write_is_cut_back_and_marked_lost() {
        for (errno, accept) in [(libc::ENOSPC, 0), (libc::EIO, 0), (libc::EIO, 40)] {
            let (mut w, disk) = writer(Limits::default());
            w.write(7, &records(100, 4));
            fail_next(&disk, 7, accept, errno, false);
            w.write(7, &records(200, 3));
            heal(&disk, 7);
            w.write(7, &records(300, 2));
            w.mark_lost();
            let data = file(&disk, 7);
            let recs = decode_all(&data).unwrap();
            assert_eq!(
                data.len() % RECORD_SIZE,
                0,
                "errno {errno}, accept {accept}"
            );
            assert_eq!(recs.len(), 5, "4 written and the LOST record: {recs:?}");
            assert_eq!(recs[..4], decode_all(&records(100, 4)).unwrap()[..]);
            assert_eq!(lost_record(&recs[4]), Some(5));
            assert_eq!(recs[4].time, 200);
            let stopped = w.written.stopped.as_deref().unwrap();
            let expected = std::io::Error::from_raw_os_error(errno).to_string();
            assert!(stopped.contains(&expected), "{stopped}");
            assert_eq!(w.written.lost[&7].records, 5);
            assert_eq!(w.written.bytes[&7], 5 * RECORD_SIZE as u64);
        }
    }

    /// write(2) returning less than asked is no error: the rest follows.
    #[test]
    fn a_short_write_goes_on() {
        struct Short(Vec<u8>);
        impl Write for Short {
            fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                let k = b.len().min(7);
                self.0.extend_from_slice(&b[..k]);
                Ok(k)
            }
            fn flush(&mut self) -> std::io::Result<()> {
                Ok(())
            }
        }
        impl Sink for Short {
            fn set_len(&mut self, _: u64) -> std::io::Result<()> {
                unreachable!("nothing failed")
            }
            fn len(&mut self) -> std::io::Result<u64> {
                Ok(0)
            }
        }
        let out = Arc::new(Mutex::new(Vec::new()));
        let (mut w, _) = writer(Limits::default());
        let o = Arc::clone(&out);
        w.open = Box::new(move |_: &Path| {
            struct Shared(Arc<Mutex<Vec<u8>>>, Short);
            impl Write for Shared {
                fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
                    let k = self.1.write(b)?;
                    self.0.lock().unwrap().extend_from_slice(&b[..k]);
                    Ok(k)
                }
                fn flush(&mut self) -> std::io::Result<()> {
                    Ok(())
                }
            }
            impl Sink for Shared {
                fn set_len(&mut self, l: u64) -> std::io::Result<()> {
                    self.1.set_len(l)
                }
                fn len(&mut self) -> std::io::Result<u64> {
                    self.1.len()
                }
            }
            Ok(Box::new(Shared(Arc::clone(&o), Short(Vec::new()))) as Box<dyn Sink>)
        });
        w.write(1, &records(0, 3));
        assert!(w.written.stopped.is_none());
        assert_eq!(*out.lock().unwrap(), records(0, 3));
    }

    /// A write that fails after part of a buffer, and a cut back that fails too: the torn
    /// tail must never be followed by a LOST record (it would be misaligned); the end cuts
    /// back again, and if that fails the error says where the whole records end.
    #[test]
    fn a_torn_tail_is_never_appended_to() {
        let (mut w, disk) = writer(Limits::default());
        w.write(3, &records(100, 2));
        fail_next(&disk, 3, 20, libc::EIO, true);
        w.write(3, &records(200, 2));
        w.write(3, &records(300, 1));
        // Still failing at the end: nothing is appended after the torn record.
        w.mark_lost();
        let data = file(&disk, 3);
        assert_eq!(data.len(), 2 * RECORD_SIZE + 20, "unchanged");
        let errors = w.written.errors.join("\n");
        assert!(errors.contains("torn record after byte 32"), "{errors}");

        // The disk recovers by the end: cut back, then the LOST record, aligned.
        let (mut w, disk) = writer(Limits::default());
        w.write(3, &records(100, 2));
        fail_next(&disk, 3, 20, libc::EIO, true);
        w.write(3, &records(200, 2));
        heal(&disk, 3);
        w.mark_lost();
        let recs = decode_all(&file(&disk, 3)).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(lost_record(&recs[2]), Some(2));
        assert!(w.written.errors.is_empty(), "{:?}", w.written.errors);
    }

    /// Below the reserve of free space the writer stops before writing anything more.
    #[test]
    fn the_reserve_stops_the_writer() {
        let (mut w, disk) = writer(Limits::default());
        w.write(1, &records(0, 2));
        w.free = |_| Some(RESERVE_BYTES);
        w.write(1, &records(10, 2));
        w.mark_lost();
        let recs = decode_all(&file(&disk, 1)).unwrap();
        assert_eq!(recs.len(), 3);
        assert_eq!(lost_record(&recs[2]), Some(2));
        assert!(w.written.stopped.as_deref().unwrap().contains("MiB left"));
    }

    /// `max_size=`: whole records up to the cap, across tasks, then nothing; no LOST
    /// record, no error, and `on_cap` once.
    #[test]
    fn the_size_cap_keeps_whole_records() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static CAPPED: AtomicUsize = AtomicUsize::new(0);
        let limits = Limits {
            max_bytes: Some(10 * RECORD_SIZE as u64 + 5),
            on_cap: Some(|| {
                CAPPED.fetch_add(1, Ordering::Relaxed);
            }),
            ..Limits::default()
        };
        let (mut w, disk) = writer(limits);
        w.write(1, &records(0, 4));
        w.write(2, &records(0, 4));
        w.write(1, &records(100, 4));
        w.write(2, &records(100, 4));
        w.mark_lost();
        assert_eq!(decode_all(&file(&disk, 1)).unwrap().len(), 6);
        assert_eq!(file(&disk, 2), records(0, 4));
        assert!(w.written.capped);
        assert!(w.written.stopped.is_none() && w.written.errors.is_empty());
        assert!(w.written.lost.is_empty());
        assert_eq!(CAPPED.load(Ordering::Relaxed), 1);
    }

    /// Stack cookies count towards the cap: the records get what they leave, and a cookie
    /// gets room only where it fits beside the records written.
    #[test]
    fn files_beside_the_records_share_the_cap() {
        let limits = Limits {
            max_bytes: Some(10 * RECORD_SIZE as u64),
            ..Limits::default()
        };
        let (w, disk) = writer(limits);
        let out = output(limits, w);
        assert!(out.reserve_side(3 * RECORD_SIZE as u64));
        out.send(1, records(0, 4));
        let written = out.finish();
        assert_eq!(file(&disk, 1), records(0, 4));
        assert!(!written.capped);
        // Three records' worth left: a cookie of four does not fit, one of three does.
        assert!(!out.reserve_side(4 * RECORD_SIZE as u64));
        assert!(out.reserve_side(3 * RECORD_SIZE as u64));
        assert!(!out.reserve_side(1));
        assert_eq!(out.finish().dropped_side, 2);
        // And the records then get nothing more.
        let (mut w, disk) = writer(limits);
        assert!(w.taken.take_whole(u64::MAX, 7 * RECORD_SIZE as u64));
        w.write(1, &records(0, 4));
        assert_eq!(file(&disk, 1), records(0, 3));
        assert!(w.written.capped);
    }

    /// The cap reached exactly: the buffer that fills it is written whole.
    #[test]
    fn a_cap_reached_exactly_writes_the_last_buffer() {
        let (mut w, disk) = writer(Limits {
            max_bytes: Some(4 * RECORD_SIZE as u64),
            ..Limits::default()
        });
        w.write(1, &records(0, 4));
        w.write(1, &records(10, 1));
        assert_eq!(file(&disk, 1), records(0, 4));
        assert!(w.written.capped);
    }

    /// `--stop-at`: records from the stop's time on are never written, in whatever buffer
    /// they come.
    #[test]
    fn records_after_the_stop_are_not_written() {
        let (mut w, disk) = writer(Limits::default());
        w.write(1, &records(0, 4));
        w.stop.store(102, Ordering::Relaxed);
        w.write(1, &records(100, 4));
        w.write(2, &records(200, 4));
        w.mark_lost();
        let recs = decode_all(&file(&disk, 1)).unwrap();
        let times: Vec<u64> = recs.iter().map(|r| r.time).collect();
        assert_eq!(times, [0, 1, 2, 3, 100, 101]);
        assert!(!disk
            .lock()
            .unwrap()
            .contains_key(&PathBuf::from("/fake/2.dat")));
        assert!(w.written.stopped.is_none() && w.written.lost.is_empty());
    }

    /// The writer thread dying: later buffers cannot be queued, and the end says so (the
    /// trace is incomplete) instead of hanging or passing the records off as written.
    #[test]
    fn a_dead_writer_thread_is_reported() {
        let (mut w, _) = writer(Limits::default());
        w.open = Box::new(|_: &Path| panic!("the writer dies"));
        let out = output(Limits::default(), w);
        out.send(5, records(0, 2));
        // The thread is gone once the queue's receiver is: sends fail from then on.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        while out
            .chan()
            .tx
            .try_send(Msg::Data {
                tid: 5,
                buf: Vec::new(),
                early: true,
            })
            .is_ok()
            || !out.chan().writer.as_ref().unwrap().is_finished()
        {
            assert!(
                std::time::Instant::now() < deadline,
                "the writer never died"
            );
            std::thread::yield_now();
        }
        out.send(5, records(10, 3));
        let written = out.finish();
        let errors = written.errors.join("\n");
        assert!(errors.contains("writer thread panicked"), "{errors}");
        assert!(errors.contains("5.dat: 3 records not written"), "{errors}");
    }

    /// Real files: ENOSPC from a full device (`/dev/full`) stops the writer with that error.
    #[test]
    fn a_full_device_stops_the_writer() {
        let (mut w, _) = writer(Limits::default());
        w.open = Box::new(|_: &Path| {
            let f = std::fs::OpenOptions::new().write(true).open("/dev/full")?;
            Ok(Box::new(f) as Box<dyn Sink>)
        });
        w.write(9, &records(0, 2));
        let stopped = w.written.stopped.unwrap();
        let enospc = std::io::Error::from_raw_os_error(libc::ENOSPC).to_string();
        assert!(stopped.contains(&enospc), "{stopped}");
        assert_eq!(w.written.lost[&9].records, 2);
    }
}
