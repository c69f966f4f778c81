//! Record buffers leave the vCPU threads here and are written by one writer thread, so a
//! vCPU never waits on `write()`. The queue is bounded: if the disk falls behind, vCPUs
//! wait for it rather than grow memory or drop records.

use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::path::PathBuf;
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
}

pub struct Output {
    tx: SyncSender<Msg>,
    pool: Arc<Mutex<Vec<Vec<u8>>>>,
    writer: Mutex<Option<JoinHandle<Written>>>,
    /// Problems met off the writer thread, reported with its own at the end.
    noted: Mutex<Vec<String>>,
}

impl Output {
    pub fn start(dir: PathBuf) -> std::io::Result<Output> {
        let (tx, rx) = sync_channel(QUEUE_DEPTH);
        let pool = Arc::new(Mutex::new(Vec::new()));
        let writer_pool = Arc::clone(&pool);
        let writer = std::thread::Builder::new()
            .name("uftrace-writer".into())
            .spawn(move || write_loop(dir, rx, writer_pool))?;
        Ok(Output {
            tx,
            pool,
            writer: Mutex::new(Some(writer)),
            noted: Mutex::new(Vec::new()),
        })
    }

    /// An empty buffer, recycled when possible.
    pub fn fresh(&self) -> Vec<u8> {
        let recycled = self.pool.lock().ok().and_then(|mut p| p.pop());
        recycled.unwrap_or_else(|| Vec::with_capacity(BUFFER_BYTES))
    }

    /// Queues a full buffer for `tid`'s file (blocks while the queue is full).
    pub fn send(&self, tid: u32, buf: Vec<u8>) {
        let records = buf.len() / qemu_uftrace_format::record::RECORD_SIZE;
        // Fails only when the writer thread is gone (it died, or exit already ran).
        if self.tx.send(Msg::Data { tid, buf }).is_err() {
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
        let _ = self.tx.send(Msg::Finish);
        let handle = self.writer.lock().ok().and_then(|mut w| w.take());
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

fn write_loop(dir: PathBuf, rx: Receiver<Msg>, pool: Arc<Mutex<Vec<Vec<u8>>>>) -> Written {
    let mut files: HashMap<u32, File> = HashMap::new();
    let mut written = Written::default();
    while let Ok(msg) = rx.recv() {
        let (tid, mut buf) = match msg {
            Msg::Data { tid, buf } => (tid, buf),
            Msg::Finish => break,
        };
        let result = match files.entry(tid) {
            std::collections::hash_map::Entry::Occupied(e) => e.into_mut().write_all(&buf),
            std::collections::hash_map::Entry::Vacant(e) => {
                match File::create(dir.join(format!("{tid}.dat"))) {
                    Ok(f) => e.insert(f).write_all(&buf),
                    Err(err) => Err(err),
                }
            }
        };
        match result {
            Ok(()) => *written.bytes.entry(tid).or_default() += buf.len() as u64,
            Err(e) => written.errors.push(format!("{tid}.dat: {e}")),
        }
        buf.clear();
        if let Ok(mut p) = pool.lock() {
            if p.len() < QUEUE_DEPTH {
                p.push(buf);
            }
        }
    }
    // No fsync: the records are safe in the page cache once written, whatever happens to
    // QEMU, and syncing a trace of hundreds of megabytes took a tenth of a kernel boot.
    drop(files);
    written
}
