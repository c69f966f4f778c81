//! `qemu-uftrace export`: a `uftrace.data` directory as a Perfetto trace (the `TracePacket`
//! stream of Perfetto's `trace.proto`), which ui.perfetto.dev opens as it is or gzipped.
//!
//! One pass over each task's file; memory holds the tasks, the symbol tables and the names
//! seen, never the events. Packets go out in zlib-compressed `compressed_packets` bundles of
//! 1 MiB, as traced writes a compressed trace (`--no-compress`: plain; `--gzip`: the whole
//! file gzipped, plain inside). Layout (see `convert` for the per-task sequences):
//! - sequence 1: the trace's attributes (its clock, whether it is complete) and the track
//!   descriptors, a process track per guest process and a thread track per task (`tracks`);
//! - sequence 2 + i: task i's slices, one per call, exception entry and scheduler gap, and
//!   instants for LOST records, guessed stacks, and the cut of an incomplete trace.

mod convert;
pub mod proto;
pub mod source;
pub mod tracks;

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use anyhow::{Context as _, Result};

use crate::errors::{fail, note, warn};
use proto::{attributes, event, packet, track, Msg};
use source::{Symbols, TaskFile, TraceClock};

/// Options of `export`.
#[derive(Debug, Clone)]
pub struct Options {
    pub dir: PathBuf,
    /// `None`: `<DIR>.pftrace` beside the directory; `-`: standard output.
    pub output: Option<PathBuf>,
    pub gzip: bool,
    /// Packets as they are, not in compressed bundles (for readers that do not inflate
    /// `compressed_packets`).
    pub no_compress: bool,
    /// Source locations from the trace's `.dbg` files on each function's slices.
    pub srcline: bool,
}

/// uuid spaces of the tracks (any unique numbers do).
const PROCESS_UUID: u64 = 1 << 40;
const THREAD_UUID: u64 = 2 << 40;
const CLOCK_UUID: u64 = 3 << 40;

/// Where the trace goes when `-o` is not given: `<DIR>.pftrace`, `.gz` added with gzip.
pub fn default_output(dir: &Path, gzip: bool) -> PathBuf {
    // `uftrace.data/` is `uftrace.data`, and `.` or `..` the directory's own name.
    let mut dir = dir.components().as_path().to_path_buf();
    if dir.file_name().is_none() {
        dir = dir.canonicalize().unwrap_or(dir);
    }
    let mut s = dir.into_os_string();
    s.push(if gzip { ".pftrace.gz" } else { ".pftrace" });
    PathBuf::from(s)
}

/// What an export wrote and found, for the summary line and the exit status.
#[derive(Debug, Default)]
pub struct Summary {
    pub tasks: usize,
    pub records: u64,
    pub bytes: u64,
    /// Problems that left records out (a damaged file): the export is not all there is.
    pub damaged: Vec<String>,
    pub warnings: Vec<String>,
}

/// Runs `export` and returns the exit status: 0, or 1 when damaged input left records out.
pub fn run(opts: &Options) -> Result<i32> {
    let dir = &opts.dir;
    if !dir.is_dir() {
        return Err(fail(
            format!("no trace directory at {}", dir.display()),
            "record one with qemu-uftrace record -- qemu-system-aarch64 …, or pass -d DIR",
        ));
    }
    let to_stdout = opts.output.as_deref() == Some(Path::new("-"));
    if to_stdout && std::io::IsTerminal::is_terminal(&std::io::stdout()) {
        return Err(crate::errors::usage(
            "-o - writes a binary trace, and standard output is a terminal",
            "redirect it (-o - > trace.pftrace) or pipe it",
        ));
    }
    let output = opts
        .output
        .clone()
        .unwrap_or_else(|| default_output(dir, opts.gzip));
    let gzip = opts.gzip || output.extension().is_some_and(|e| e == "gz");
    if gzip && opts.no_compress {
        return Err(crate::errors::usage(
            "--no-compress asks for plain packets, and a .gz name or --gzip for a gzipped file",
            "drop one of them",
        ));
    }
    let how = Compression::of(gzip, opts.no_compress);
    let summary = if to_stdout {
        let stdout = std::io::stdout().lock();
        let mut w = std::io::BufWriter::new(stdout);
        let s = write_to(dir, how, opts.srcline, &mut w)
            .context("cannot write the trace to standard output")?;
        w.flush()
            .context("cannot write the trace to standard output")?;
        s
    } else {
        let mut summary = None;
        let mut failure = None;
        crate::atomic_file::replace(&output, |w| match write_to(dir, how, opts.srcline, w) {
            Ok(s) => {
                summary = Some(s);
                Ok(())
            }
            Err(e) => {
                let msg = format!("{e:#}");
                failure = Some(e);
                Err(std::io::Error::other(msg))
            }
        })
        .map_err(|e| failure.unwrap_or(e))?;
        // The temporary file was private (0600); a trace is for sharing.
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&output, std::fs::Permissions::from_mode(0o644))
            .with_context(|| format!("cannot make {} readable", output.display()))?;
        summary.expect("set when the file was written")
    };
    for w in &summary.warnings {
        warn(w);
    }
    for d in &summary.damaged {
        warn(format!("damaged trace: {d}"));
    }
    if !to_stdout {
        let size = std::fs::metadata(&output).map_or(summary.bytes, |m| m.len());
        note(format!(
            "wrote {} ({} task{}, {} record{}, {size} bytes{}); open it in ui.perfetto.dev",
            output.display(),
            summary.tasks,
            if summary.tasks == 1 { "" } else { "s" },
            summary.records,
            if summary.records == 1 { "" } else { "s" },
            match how {
                Compression::Gzip => ", gzip-compressed",
                Compression::Bundles => ", compressed packets",
                Compression::None => "",
            }
        ));
    }
    Ok(if summary.damaged.is_empty() { 0 } else { 1 })
}

/// `record --then export`: the new trace to `<DIR>.pftrace`.
pub fn then(dir: &Path) -> Result<i32> {
    run(&Options {
        dir: dir.to_path_buf(),
        output: None,
        gzip: false,
        no_compress: false,
        srcline: false,
    })
}

/// How the packets are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// In zlib-compressed `compressed_packets` bundles (the default).
    Bundles,
    /// The whole stream gzipped, packets plain inside.
    Gzip,
    /// Plain packets.
    None,
}

impl Compression {
    pub fn of(gzip: bool, no_compress: bool) -> Compression {
        if gzip {
            Compression::Gzip
        } else if no_compress {
            Compression::None
        } else {
            Compression::Bundles
        }
    }
}

/// Writes the whole trace of `dir` into `w`, compressed as `how` says.
pub fn write_to(dir: &Path, how: Compression, srcline: bool, w: &mut dyn Write) -> Result<Summary> {
    if how == Compression::Gzip {
        // Level 1: a boot's trace compresses to a fifth of its size at that level already,
        // and higher levels cost seconds for a few percent.
        let mut gz = flate2::write::GzEncoder::new(w, flate2::Compression::fast());
        let s = write_trace(dir, srcline, false, &mut gz)?;
        gz.finish().context("cannot finish the gzip stream")?;
        Ok(s)
    } else {
        write_trace(dir, srcline, how == Compression::Bundles, w)
    }
}

/// The task ids of `dir`'s `.dat` files, as `info` lists them when it can be read.
fn task_ids(dir: &Path) -> Result<Vec<u32>> {
    let dats = crate::datadir::dat_files(dir)?;
    if dats.is_empty() {
        return Err(fail(
            format!("{} holds no <tid>.dat file", dir.display()),
            "pass -d the directory qemu-uftrace record (or uftrace record) wrote",
        ));
    }
    Ok(dats.into_iter().map(|(t, _)| t).collect())
}

fn write_trace(dir: &Path, srcline: bool, bundles: bool, w: &mut dyn Write) -> Result<Summary> {
    let tids = task_ids(dir)?;
    let task_txt = std::fs::read_to_string(dir.join("task.txt")).map_err(|e| {
        fail(
            format!("cannot read {}: {e}", dir.join("task.txt").display()),
            "the directory is not a complete uftrace.data; record again",
        )
    })?;
    let tasks = TaskFile::parse(&task_txt);
    let stats = crate::stats::Stats::read(dir).ok().flatten();
    let user_mode = stats
        .as_ref()
        .is_some_and(crate::stats::Stats::is_user_mode);
    let guest = crate::guest_tasks::read(dir);
    let plan = tracks::plan(&tids, &tasks, &guest, user_mode);
    let clock = source::trace_clock(dir);
    let incomplete = source::incomplete_reason(dir);
    let event_names = source::event_names(dir);
    let arg_lookup = crate::argspec::Lookup::read(dir);
    // -a's values are in the `.dbg` files.
    let auto_args = arg_lookup.as_ref().is_some_and(|l| l.auto);
    let mut summary = Summary {
        tasks: tids.len(),
        ..Default::default()
    };

    let open = |tid: u32| {
        let path = dir.join(format!("{tid}.dat"));
        std::fs::File::open(&path).with_context(|| format!("cannot read {}", path.display()))
    };
    let firsts: Vec<Option<u64>> = tids
        .iter()
        .map(|&t| open(t).map(convert::first_time))
        .collect::<Result<_>>()?;
    let start = firsts.iter().flatten().min().copied().unwrap_or(0);

    let mut out = convert::Out::new(w, bundles);
    header(&mut out, &plan, &clock, incomplete.as_deref(), start)?;

    // One symbol table per session, loaded when a task first needs it.
    let mut symbols: HashMap<String, Symbols> = HashMap::new();
    let empty = Symbols::default();
    for (i, &tid) in tids.iter().enumerate() {
        let sessions = tasks.timeline(tid);
        for (_, sid) in &sessions {
            let Some(sid) = sid else { continue };
            if !symbols.contains_key(*sid) {
                let loaded = Symbols::load(dir, sid, tasks.dlopens(sid), srcline || auto_args)
                    .unwrap_or_else(|e| {
                        summary.warnings.push(format!(
                            "{e:#}: the functions of session {sid} are shown as addresses"
                        ));
                        Symbols::default()
                    });
                symbols.insert(sid.to_string(), loaded);
            }
        }
        let mut resolved: Vec<(u64, &Symbols)> = Vec::new();
        for (k, (ns, sid)) in sessions.iter().enumerate() {
            let syms = sid.and_then(|s| symbols.get(s)).unwrap_or(&empty);
            let end = sessions.get(k + 1).map_or(u64::MAX, |s| s.0);
            resolved.push((*ns, syms));
            // A module loaded within the session may name an address otherwise from its
            // load on (a range a later module reused): the records after it are a stretch
            // of their own, their names interned apart.
            let mut loads: Vec<u64> = syms.load_times().filter(|&t| t > *ns && t < end).collect();
            loads.dedup();
            for t in loads {
                if resolved.len() >= convert::MAX_STRETCHES {
                    summary.warnings.push(format!(
                        "task {tid}: more than {} sessions and module loads; the modules \
                         loaded after the last are named as at its time",
                        convert::MAX_STRETCHES
                    ));
                    break;
                }
                resolved.push((t, syms));
            }
        }
        if sessions.iter().all(|s| s.1.is_none()) {
            summary.warnings.push(format!(
                "task.txt gives task {tid} no session: its functions are shown as addresses"
            ));
            resolved.push((0, &empty));
        }
        let ctx = convert::Context {
            sessions: resolved,
            event_names: &event_names,
            incomplete: incomplete.as_deref(),
            srcline,
            args: arg_lookup.as_ref(),
        };
        let file = std::io::BufReader::with_capacity(0, open(tid)?);
        let seq = u32::try_from(i + 2).context("too many tasks")?;
        let sum = convert::task(&mut out, &ctx, seq, THREAD_UUID | u64::from(tid), file)
            .with_context(|| format!("cannot convert {tid}.dat"))?;
        summary.records += sum.records;
        if let Some(cut) = sum.cut {
            summary.damaged.push(format!("{tid}.dat: {cut}"));
        }
        if sum.time_went_back > 0 {
            summary.warnings.push(format!(
                "{tid}.dat: {} records are stamped earlier than the record before them; they \
                 are exported at that record's time",
                sum.time_went_back
            ));
        }
        if sum.unmatched_returns > 0 {
            summary.warnings.push(format!(
                "{tid}.dat: {} returns with no call open are left out",
                sum.unmatched_returns
            ));
        }
    }
    if let Some(why) = &incomplete {
        summary.warnings.push(format!(
            "{why}: each task's last record carries an \"INCOMPLETE TRACE\" marker"
        ));
    }
    summary.bytes = out.bytes;
    out.finish().context("cannot write the trace")?;
    Ok(summary)
}

/// Sequence 1: the trace's attributes, its tracks, and for an instruction clock a track
/// saying so at the trace's start.
fn header<W: Write>(
    out: &mut convert::Out<W>,
    plan: &tracks::Plan,
    clock: &TraceClock,
    incomplete: Option<&str>,
    start: u64,
) -> Result<()> {
    const SEQ: u64 = 1;
    let clock_text = match clock {
        TraceClock::Instructions => {
            "insn: timestamps count guest instructions executed, not time (each vCPU its \
             own); the timeline shows 1 instruction as 1 ns"
        }
        TraceClock::Nanoseconds => "ns: timestamps are nanoseconds",
    };
    let mut attrs = Msg::new();
    let mut attr = |k: &str, v: &str| {
        let mut a = Msg::new();
        a.string(attributes::KEY, k)
            .string(attributes::STRING_VALUE, v);
        attrs.message(attributes::ATTRIBUTE, &a);
    };
    attr("clock", clock_text);
    attr("source", "qemu-uftrace export of a uftrace.data directory");
    if let Some(why) = incomplete {
        attr("incomplete", why);
    }
    let mut p = Msg::new();
    p.uint(packet::SEQUENCE_ID, SEQ)
        .message(packet::TRACE_ATTRIBUTES, &attrs);
    out.packet(&p.buf)?;

    for proc in &plan.processes {
        let mut pd = Msg::new();
        pd.int(track::PROCESS_PID, i64::from(proc.pid))
            .string(track::PROCESS_NAME, &proc.name);
        let mut td = Msg::new();
        td.uint(track::UUID, PROCESS_UUID | u64::from(proc.pid))
            .message(track::PROCESS, &pd);
        let mut p = Msg::new();
        p.uint(packet::SEQUENCE_ID, SEQ)
            .message(packet::TRACK_DESCRIPTOR, &td);
        out.packet(&p.buf)?;
    }
    for t in &plan.threads {
        let mut thd = Msg::new();
        thd.int(track::THREAD_PID, i64::from(t.pid))
            .int(track::THREAD_TID, i64::from(t.tid))
            .string(track::THREAD_NAME, &t.name);
        let mut td = Msg::new();
        td.uint(track::UUID, THREAD_UUID | u64::from(t.tid))
            .message(track::THREAD, &thd);
        let mut p = Msg::new();
        p.uint(packet::SEQUENCE_ID, SEQ)
            .message(packet::TRACK_DESCRIPTOR, &td);
        out.packet(&p.buf)?;
    }
    if *clock == TraceClock::Instructions {
        let name = "clock: guest instructions (1 ns shown = 1 instruction)";
        let mut td = Msg::new();
        td.uint(track::UUID, CLOCK_UUID)
            .string(track::NAME, name)
            .string(track::DESCRIPTION, clock_text);
        let mut p = Msg::new();
        p.uint(packet::SEQUENCE_ID, SEQ)
            .message(packet::TRACK_DESCRIPTOR, &td);
        out.packet(&p.buf)?;
        let mut te = Msg::new();
        te.uint(event::TYPE, event::INSTANT)
            .uint(event::TRACK_UUID, CLOCK_UUID)
            .string(event::NAME, "timeline unit: guest instructions");
        let mut p = Msg::new();
        p.uint(packet::TIMESTAMP, start)
            .uint(packet::SEQUENCE_ID, SEQ)
            .message(packet::TRACK_EVENT, &te);
        out.packet(&p.buf)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_output_is_beside_the_directory() {
        let p = |d: &str, gz| default_output(Path::new(d), gz);
        assert_eq!(p("uftrace.data", false), Path::new("uftrace.data.pftrace"));
        assert_eq!(p("t/boot/", true), Path::new("t/boot.pftrace.gz"));
        let here = std::env::current_dir().unwrap();
        let mut name = here.as_os_str().to_owned();
        name.push(".pftrace");
        assert_eq!(p(".", false), PathBuf::from(name));
    }
}
