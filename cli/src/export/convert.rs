//! One task's `.dat` file to one Perfetto packet sequence, in one pass.
//!
//! Each task is a sequence of its own: its first packet clears the incremental state and
//! sets the defaults (its thread track, its clock), so event packets carry neither a track
//! nor a clock id. The clock is sequence-scoped and incremental: a packet's timestamp is
//! the delta from the one before (one or two bytes instead of eight). A function's name is
//! interned in the packet of its first call on the sequence and referred to by `name_iid`
//! after. Memory holds the open slices and the names seen, never the events.
//!
//! `SEQ_NEEDS_INCREMENTAL_STATE` is set on the packets that intern names, not on every event:
//! it only tells a reader to drop packets whose sequence lost its start (a ring buffer that
//! wrapped), which a file written whole never does, and it would cost 2 bytes an event.

use std::collections::HashMap;
use std::io::{Read, Write};

use qemu_uftrace_format::record::{self, RecordType, RECORD_SIZE};

use super::proto::{self, clock, defaults, event, interned, packet, put_varint, Msg};
use super::source::Symbols;

/// uftrace's scheduler events (perf's ids), which it shows as a `linux:schedule` call.
const SCHED_IN: u64 = 200_001;
const SCHED_OUT: u64 = 200_002;
const SCHED_OUT_PREEMPT: u64 = 200_007;

/// The exec functions among uftrace's "fixup" names (`fstack.c`'s `fixup_syms`, 0.13 to
/// 0.19): a call to one (by its name in the session of the call's time) resets uftrace's
/// stack to empty, since a successful exec never returns. That call and every frame open
/// under it are never counted by `report` unless their returns come later, and what follows
/// shows at depth 0.
const EXEC_NAMES: [&str; 7] = [
    "execl", "execlp", "execle", "execv", "execve", "execvp", "execvpe",
];

/// The iid that marks an interning key as an exec function's (never a slice of its own).
const EXEC_IID: u64 = 0;

/// Packets gathered before they are written: 1 MiB, the chunk traced writes into a file and
/// compresses as one `compressed_packets` bundle.
const BUNDLE: usize = 1 << 20;

/// Where packets go: framed, buffered, counted, and with `compress` deflated a bundle at a
/// time into `TracePacket.compressed_packets`, as traced writes a trace whose config asks
/// for `COMPRESSION_TYPE_DEFLATE`. Perfetto's trace processor (and so its UI) inflates each
/// bundle and reads the packets in it as if they stood in the file (`ProtoTraceTokenizer`);
/// a call trace's packets shrink about twentyfold.
pub struct Out<W: Write> {
    w: W,
    buf: Vec<u8>,
    compress: bool,
    deflated: Vec<u8>,
    /// The packets' bytes, before any compression.
    pub bytes: u64,
}

impl<W: Write> Out<W> {
    pub fn new(w: W, compress: bool) -> Out<W> {
        Out {
            w,
            buf: Vec::with_capacity(BUNDLE + 4096),
            compress,
            deflated: Vec::new(),
            bytes: 0,
        }
    }

    pub fn packet(&mut self, body: &[u8]) -> std::io::Result<()> {
        let before = self.buf.len();
        proto::frame(&mut self.buf, body);
        self.bytes += (self.buf.len() - before) as u64;
        if self.buf.len() >= BUNDLE {
            self.write_buffered()?;
        }
        Ok(())
    }

    /// Writes the packets gathered, as they are or as one compressed bundle.
    fn write_buffered(&mut self) -> std::io::Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        if self.compress {
            // zlib's format, as traced's deflateInit writes it (the reader takes zlib or
            // gzip). Level 1: Debian's arm64 boot is 8.1 MB in 1.7 s, 0.009x the JSON of
            // `dump --chrome`; traced's level 6 is ~45% smaller at ~2.6x the compression
            // time (C zlib on its 1 MiB bundles: 3.8 MB in 2.9 s against 6.8 MB in 1.1 s).
            self.deflated.clear();
            let mut z = flate2::write::ZlibEncoder::new(
                std::mem::take(&mut self.deflated),
                flate2::Compression::fast(),
            );
            z.write_all(&self.buf)?;
            self.deflated = z.finish()?;
            self.w
                .write_all(&proto::bundle_header(self.deflated.len()))?;
            self.w.write_all(&self.deflated)?;
        } else {
            self.w.write_all(&self.buf)?;
        }
        self.buf.clear();
        Ok(())
    }

    pub fn finish(mut self) -> std::io::Result<W> {
        self.write_buffered()?;
        self.w.flush()?;
        Ok(self.w)
    }
}

/// What the trace as a whole tells every task.
pub struct Context<'a> {
    /// The task's sessions' symbols, by the time each starts (the first at 0), a session
    /// split where it loaded a module: each stretch is named as at its start.
    pub sessions: Vec<(u64, &'a Symbols)>,
    /// User events' names (`events.txt`).
    pub event_names: &'a HashMap<u64, String>,
    /// Why the recording is incomplete, marked at each task's last record.
    pub incomplete: Option<&'a str>,
    /// Attach each function's source location (`.dbg`) to its slices.
    pub srcline: bool,
    /// `-A`/`-R` (`info`): which values a record with the `more` bit carries, shown as
    /// the slice's `args` and `retval`.
    pub args: Option<&'a crate::argspec::Lookup>,
}

/// What converting one task found.
#[derive(Debug, Default)]
pub struct TaskSummary {
    pub records: u64,
    pub first_time: Option<u64>,
    pub last_time: u64,
    /// Slices still open at the end (the trace leaves them open).
    pub open_at_end: usize,
    /// Returns with no call open, left out.
    pub unmatched_returns: u64,
    /// Records stamped earlier than the one before, exported at that one's time.
    pub time_went_back: u64,
    /// Why the file could not be read to its end.
    pub cut: Option<String>,
}

/// What a slice on the stack stands for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Call,
    Schedule,
}

/// The most stretches ([`Context::sessions`]) a task's keys tell apart (the bits between a
/// 48-bit address and [`KEY_SCHEDULE`]).
pub const MAX_STRETCHES: usize = 1 << 12;

/// Interning keys of names that are not functions (a function's is its 48-bit address and
/// its stretch's index above it).
const KEY_SCHEDULE: u64 = 1 << 60;
const KEY_SCHEDULE_PREEMPT: u64 = (1 << 60) + 1;

struct Sequence<'a, 'c, W: Write> {
    out: &'a mut Out<W>,
    ctx: &'a Context<'c>,
    seq: u32,
    /// Interning key → (iid, whether a source location of that iid was interned too).
    iids: HashMap<u64, (u64, bool)>,
    prev: u64,
    scratch: Vec<u8>,
    te: Vec<u8>,
    stack: Vec<Open>,
    /// The address of the last exec call, while a return of it may still come (a failed
    /// exec returns: uftrace counts that return as a call).
    exec_pending: Option<u64>,
    /// The last iid given (an exec key may be interned twice: see [`EXEC_IID`]).
    last_iid: u64,
    /// Each function key's `-A`/`-R` values.
    arg_values: HashMap<u64, Vec<qemu_uftrace_format::args::Value>>,
    /// The next begin's or end's annotation (`args`, `retval`), then taken.
    annotation: Option<(&'static str, String)>,
}

impl<W: Write> Sequence<'_, '_, W> {
    /// The name of an interning key, and its source location when asked for and known.
    fn name_of(&self, key: u64) -> (String, Option<(String, u32)>) {
        match key {
            KEY_SCHEDULE => ("linux:schedule".into(), None),
            KEY_SCHEDULE_PREEMPT => ("linux:schedule (pre-empted)".into(), None),
            key => {
                let addr = key & qemu_uftrace_format::ADDR_MASK;
                let stretch = self.ctx.sessions.get((key >> 48) as usize);
                if self.ctx.srcline {
                    if let Some((name, file, line)) =
                        stretch.and_then(|&(ns, s)| s.lookup_line(addr, ns))
                    {
                        return (name.to_string(), Some((file.to_string(), line)));
                    }
                }
                let name = stretch
                    .and_then(|&(ns, s)| s.lookup(addr, ns))
                    .map_or_else(|| format!("<{addr:x}>"), str::to_string);
                (name, None)
            }
        }
    }

    /// Whether a function key is an exec function's (decided once per key: its name is
    /// interned with [`EXEC_IID`] and never sent).
    fn is_exec(&mut self, key: u64) -> bool {
        if let Some(&(iid, _)) = self.iids.get(&key) {
            return iid == EXEC_IID;
        }
        let exec = EXEC_NAMES.contains(&self.name_of(key).0.as_str());
        if exec {
            self.iids.insert(key, (EXEC_IID, false));
        }
        exec
    }

    /// An exec call at `time`: uftrace's stack empties (every open slice ends here) and the
    /// call shows as an instant.
    fn exec(&mut self, time: u64, key: u64) -> std::io::Result<()> {
        while !self.stack.is_empty() {
            self.end(time)?;
        }
        self.exec_pending = Some(key);
        let name = self.name_of(key).0;
        self.instant(
            time,
            &name,
            Some((
                "exec",
                "uftrace empties a task's call stack at an exec call (it never returns): \
                 the frames open here and this call are left out of its report",
            )),
        )
    }

    /// The packet of one track event at `time`: `kind`, and for a begin its name (interned
    /// here on first use).
    fn event(&mut self, time: u64, kind: u64, key: Option<u64>) -> std::io::Result<()> {
        let delta = time.saturating_sub(self.prev);
        self.prev = self.prev.max(time);
        self.scratch.clear();
        self.te.clear();
        self.te
            .extend_from_slice(&[(event::TYPE << 3) as u8, kind as u8]);
        let mut interned = None;
        if let Some(key) = key {
            let (iid, has_line) = match self.iids.get(&key) {
                Some(&known) if known.0 != EXEC_IID => known,
                _ => {
                    self.last_iid += 1;
                    let iid = self.last_iid;
                    let (name, line) = self.name_of(key);
                    let mut id = Msg::new();
                    let mut en = Msg::new();
                    en.uint(interned::IID, iid).string(interned::NAME, &name);
                    id.message(interned::EVENT_NAMES, &en);
                    if let Some((file, n)) = &line {
                        let mut sl = Msg::new();
                        sl.uint(interned::IID, iid)
                            .string(interned::FILE_NAME, file)
                            .string(interned::FUNCTION_NAME, &name)
                            .uint(interned::LINE_NUMBER, u64::from(*n));
                        id.message(interned::SOURCE_LOCATIONS, &sl);
                    }
                    interned = Some(id);
                    self.iids.insert(key, (iid, line.is_some()));
                    (iid, line.is_some())
                }
            };
            self.te.push((event::NAME_IID << 3) as u8);
            put_varint(&mut self.te, iid);
            if has_line {
                put_varint(&mut self.te, u64::from(event::SOURCE_LOCATION_IID << 3));
                put_varint(&mut self.te, iid);
            }
        }
        if let Some((name, value)) = self.annotation.take() {
            let mut a = Msg::new();
            a.string(event::ANNOTATION_NAME, name)
                .string(event::ANNOTATION_STRING, &value);
            put_varint(&mut self.te, u64::from(event::DEBUG_ANNOTATIONS << 3 | 2));
            put_varint(&mut self.te, a.buf.len() as u64);
            self.te.extend_from_slice(&a.buf);
        }
        let s = &mut self.scratch;
        s.push((packet::TIMESTAMP << 3) as u8);
        put_varint(s, delta);
        s.push((packet::SEQUENCE_ID << 3) as u8);
        put_varint(s, u64::from(self.seq));
        s.push((packet::TRACK_EVENT << 3 | 2) as u8);
        put_varint(s, self.te.len() as u64);
        s.extend_from_slice(&self.te);
        if let Some(id) = interned {
            // A name (and its location) is interned in the packet of its first use.
            let mut m = Msg {
                buf: std::mem::take(&mut self.scratch),
            };
            m.message(packet::INTERNED_DATA, &id)
                .uint(packet::SEQUENCE_FLAGS, packet::SEQ_NEEDS_INCREMENTAL_STATE);
            self.scratch = m.buf;
        }
        self.out.packet(&self.scratch)
    }

    /// An instant with a literal name (rare markers: LOST, the cut) and a note.
    fn instant(
        &mut self,
        time: u64,
        name: &str,
        note: Option<(&str, &str)>,
    ) -> std::io::Result<()> {
        let delta = time.saturating_sub(self.prev);
        self.prev = self.prev.max(time);
        let mut te = Msg::new();
        te.uint(event::TYPE, event::INSTANT)
            .string(event::NAME, name);
        if let Some((k, v)) = note {
            let mut a = Msg::new();
            a.string(event::ANNOTATION_NAME, k)
                .string(event::ANNOTATION_STRING, v);
            te.message(event::DEBUG_ANNOTATIONS, &a);
        }
        let mut p = Msg::new();
        p.uint(packet::TIMESTAMP, delta)
            .uint(packet::SEQUENCE_ID, u64::from(self.seq))
            .message(packet::TRACK_EVENT, &te);
        self.out.packet(&p.buf)
    }

    /// The `-A`/`-R` values of function `key` (by its name, as uftrace matches specs), and
    /// `-a`'s (by its address, from its `.dbg` file), merged as uftrace's replay merges them.
    fn values_of(&mut self, key: u64) -> &[qemu_uftrace_format::args::Value] {
        if !self.arg_values.contains_key(&key) {
            let values = match self.ctx.args {
                Some(l) => {
                    let explicit = l.values_for(&self.name_of(key).0);
                    let addr = key & qemu_uftrace_format::ADDR_MASK;
                    let auto = (self.ctx.sessions.get((key >> 48) as usize))
                        .filter(|_| l.auto)
                        .and_then(|&(ns, s)| s.lookup_auto(addr, ns));
                    match auto {
                        Some(auto) => {
                            crate::argspec::merge_auto(explicit, crate::argspec::parse_auto(auto))
                        }
                        None => explicit,
                    }
                }
                None => Vec::new(),
            };
            self.arg_values.insert(key, values);
        }
        self.arg_values.get(&key).map_or(&[], Vec::as_slice)
    }

    fn begin(&mut self, time: u64, key: u64, what: Open) -> std::io::Result<()> {
        self.stack.push(what);
        self.event(time, event::SLICE_BEGIN, Some(key))
    }

    fn end(&mut self, time: u64) -> std::io::Result<()> {
        self.stack.pop();
        self.event(time, event::SLICE_END, None)
    }
}

/// The first packets of a task's sequence: state cleared, its defaults (thread track,
/// clock), then the clock snapshot that puts the sequence's clock at `first` on the trace's
/// timeline.
fn start_sequence<W: Write>(
    out: &mut Out<W>,
    seq: u32,
    track_uuid: u64,
    first: u64,
) -> std::io::Result<()> {
    let mut ted = Msg::new();
    ted.uint(defaults::TRACK_UUID, track_uuid);
    let mut d = Msg::new();
    d.uint(defaults::TIMESTAMP_CLOCK_ID, clock::CUSTOM)
        .message(defaults::TRACK_EVENT_DEFAULTS, &ted);
    let mut p = Msg::new();
    p.uint(packet::SEQUENCE_ID, u64::from(seq))
        .uint(
            packet::SEQUENCE_FLAGS,
            packet::SEQ_INCREMENTAL_STATE_CLEARED | packet::SEQ_NEEDS_INCREMENTAL_STATE,
        )
        .message(packet::DEFAULTS, &d);
    out.packet(&p.buf)?;

    let mut boottime = Msg::new();
    boottime
        .uint(clock::CLOCK_ID, clock::BOOTTIME)
        .uint(clock::TIMESTAMP, first);
    let mut own = Msg::new();
    own.uint(clock::CLOCK_ID, clock::CUSTOM)
        .uint(clock::TIMESTAMP, first)
        .uint(clock::IS_INCREMENTAL, 1)
        .uint(clock::UNIT_MULTIPLIER_NS, 1);
    let mut snap = Msg::new();
    snap.message(clock::CLOCKS, &boottime)
        .message(clock::CLOCKS, &own);
    let mut p = Msg::new();
    p.uint(packet::SEQUENCE_ID, u64::from(seq))
        .message(packet::CLOCK_SNAPSHOT, &snap);
    out.packet(&p.buf)
}

/// The time of a file's first record, if it has one (to place sequences and markers).
pub fn first_time(mut r: impl Read) -> Option<u64> {
    let mut b = [0u8; RECORD_SIZE];
    r.read_exact(&mut b).ok()?;
    record::decode(&b).ok().map(|rec| rec.time)
}

/// Converts one task's records (`input`, the `.dat` file's bytes in order).
pub fn task<W: Write>(
    out: &mut Out<W>,
    ctx: &Context,
    seq: u32,
    track_uuid: u64,
    mut input: impl Read,
) -> std::io::Result<TaskSummary> {
    let mut sum = TaskSummary::default();
    let no_enums = qemu_uftrace_format::args::Enums::default();
    let enums = ctx.args.map_or(&no_enums, |l| &l.enums);
    let mut s = Sequence {
        out,
        ctx,
        seq,
        iids: HashMap::new(),
        prev: 0,
        scratch: Vec::with_capacity(64),
        te: Vec::with_capacity(16),
        stack: Vec::new(),
        exec_pending: None,
        last_iid: 0,
        arg_values: HashMap::new(),
        annotation: None,
    };
    let mut chunk = vec![0u8; 1 << 20];
    let mut have = 0usize;
    let mut last = 0u64;
    let mut after_lost = false;
    let mut offset = 0u64;
    // The session records resolve in (an exec starts another), and when the next starts.
    let mut session = 0usize;
    let next_session = |i: usize| ctx.sessions.get(i + 1).map_or(u64::MAX, |s| s.0);
    let mut switch_at = next_session(0);
    'file: loop {
        let n = match input.read(&mut chunk[have..]) {
            Ok(0) => break,
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        have += n;
        let mut at = 0usize;
        while at + RECORD_SIZE <= have {
            let bytes: &[u8; RECORD_SIZE] = chunk[at..at + RECORD_SIZE]
                .try_into()
                .expect("a slice of RECORD_SIZE");
            let rec = match record::decode(bytes) {
                Ok(r) => r,
                Err(_) => {
                    sum.cut = Some(format!(
                        "record {} (byte {offset}) is not a uftrace record (bad magic); the rest \
                         of the file is left out",
                        offset / RECORD_SIZE as u64
                    ));
                    have = 0;
                    break 'file;
                }
            };
            // `-A`/`-R`: the values after the record (`more`), their length by the spec.
            let mut len = RECORD_SIZE;
            let mut note = None;
            if bytes[8] & 4 != 0 {
                let (mut sess, mut sw) = (session, switch_at);
                while rec.time.max(last) >= sw {
                    sess += 1;
                    sw = next_session(sess);
                }
                let key = rec.addr | (sess as u64) << 48;
                let retval = rec.kind == RecordType::Exit;
                let values = s.values_of(key);
                let data = &chunk[at + RECORD_SIZE..have];
                // A `/p` value names the function it points into, in this session at this
                // time, as replay does.
                let stretch = ctx.sessions.get(sess);
                let symbol = |p: u64| -> Option<String> {
                    stretch.and_then(|&(_, src)| src.lookup(p, rec.time).map(str::to_string))
                };
                match qemu_uftrace_format::args::render(values, retval, data, enums, &symbol) {
                    Some(_) if values.is_empty() => {
                        sum.cut = Some(format!(
                            "record {} (byte {offset}) carries values that no -A/-R spec in \
                             info describes; the rest of the file is left out",
                            offset / RECORD_SIZE as u64
                        ));
                        have = 0;
                        break 'file;
                    }
                    Some((text, n)) => {
                        len += n;
                        note = Some((if retval { "retval" } else { "args" }, text));
                    }
                    // The rest of the values is in the next read.
                    None if data.len() < 1 << 17 => break,
                    None => {
                        sum.cut = Some(format!(
                            "record {} (byte {offset}): its values do not fit their spec; the \
                             rest of the file is left out",
                            offset / RECORD_SIZE as u64
                        ));
                        have = 0;
                        break 'file;
                    }
                }
            }
            at += len;
            offset += len as u64;
            if sum.first_time.is_none() {
                start_sequence(s.out, seq, track_uuid, rec.time)?;
                s.prev = rec.time;
                sum.first_time = Some(rec.time);
                last = rec.time;
            }
            let time = if rec.time < last {
                sum.time_went_back += 1;
                last
            } else {
                rec.time
            };
            last = time;
            sum.records += 1;
            while time >= switch_at {
                session += 1;
                switch_at = next_session(session);
            }
            // After a LOST record uftrace trusts the next record's depth: slices deeper
            // than it are over.
            if after_lost {
                after_lost = false;
                let level = match rec.kind {
                    RecordType::Exit => usize::from(rec.depth) + 1,
                    _ => usize::from(rec.depth),
                };
                while s.stack.len() > level && rec.kind != RecordType::Lost {
                    s.end(time)?;
                }
            }
            match rec.kind {
                RecordType::Entry => {
                    // Names are interned per stretch: one address, two programs or modules.
                    let key = rec.addr | (session as u64) << 48;
                    if s.is_exec(key) {
                        s.exec(time, key)?;
                    } else {
                        s.annotation = note.take();
                        s.begin(time, key, Open::Call)?
                    }
                }
                RecordType::Exit => {
                    // A return closes the innermost call (uftrace's rule), a scheduler gap
                    // open above it included.
                    while s.stack.last() == Some(&Open::Schedule) {
                        s.end(time)?;
                    }
                    let exec = s
                        .exec_pending
                        .filter(|k| k & qemu_uftrace_format::ADDR_MASK == rec.addr);
                    if let (true, Some(key)) = (s.stack.is_empty(), exec) {
                        // A failed exec's return, which `report` counts as a call (by its
                        // address: one instant of a slice, under its exec name).
                        s.exec_pending = None;
                        s.begin(time, key, Open::Call)?;
                        s.iids.insert(key, (EXEC_IID, false));
                        s.end(time)?;
                    } else if s.stack.is_empty() {
                        sum.unmatched_returns += 1;
                    } else {
                        s.annotation = note.take();
                        s.end(time)?;
                    }
                }
                RecordType::Lost => {
                    after_lost = true;
                    // The engine writes a count of 0 where it guessed (a stack rebuilt), the
                    // writer the number of records it could not write.
                    if rec.addr == 0 {
                        s.instant(
                            time,
                            "guessed: stack rebuilt",
                            Some((
                                "why",
                                "the recorder lost track of this context's calls here and \
                                 rebuilt its stack from the guest's frame records",
                            )),
                        )?;
                    } else {
                        let count = rec.addr.to_string();
                        s.instant(time, "LOST records", Some(("lost", &count)))?;
                    }
                }
                RecordType::Event => match rec.addr {
                    SCHED_OUT => s.begin(time, KEY_SCHEDULE, Open::Schedule)?,
                    SCHED_OUT_PREEMPT => s.begin(time, KEY_SCHEDULE_PREEMPT, Open::Schedule)?,
                    SCHED_IN => {
                        if s.stack.last() == Some(&Open::Schedule) {
                            s.end(time)?;
                        }
                    }
                    id => {
                        let name = ctx
                            .event_names
                            .get(&id)
                            .cloned()
                            .unwrap_or_else(|| format!("user_event:{id}"));
                        s.instant(time, &name, None)?;
                    }
                },
            }
        }
        chunk.copy_within(at..have, 0);
        have -= at;
    }
    if have > 0 && sum.cut.is_none() {
        sum.cut = Some(format!(
            "ends in a partial record ({have} of {RECORD_SIZE} bytes), left out"
        ));
    }
    sum.last_time = last;
    if sum.first_time.is_some() {
        if let Some(cut) = &sum.cut {
            s.instant(last, "cut: unreadable data", Some(("why", cut)))?;
        }
        if let Some(why) = ctx.incomplete {
            s.instant(last, "INCOMPLETE TRACE", Some(("why", why)))?;
        }
    }
    sum.open_at_end = s.stack.len();
    Ok(sum)
}
