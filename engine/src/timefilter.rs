//! `-t/--time-filter` (uftrace's `record -t`): a call shorter than the threshold is not
//! written; its longer ancestors are.
//!
//! A record's fate is known only at its frame's exit, so the engine's records pass through
//! here (its general path: with a time filter the fast path is off, see
//! `Engine::set_time_filter`) and wait: an entry until its exit, an event until the frame it
//! is in is written or dropped. The rules are those of uftrace's own `replay -t`
//! (`get_task_ustack` in utils/fstack.c), so that a filtered recording replays as the
//! unfiltered one does with the same `-t`:
//! - an exit matches the last waiting entry (by position, as uftrace does); shorter than the
//!   threshold, both go with everything waiting after the entry; else everything waiting is
//!   written (the ancestors first, each with its own time), then the exit;
//! - an exit with no waiting entry (its entry was written with a long descendant) is
//!   written, after whatever waits;
//! - a user event (uftrace's `EVENT_ID_USER` and up: the resync markers) and a LOST record
//!   are written at once, after whatever waits; other events (the scheduler's) wait;
//! - `-A`/`-R`'s carriers (`format::args`: a function's arguments right after its entry,
//!   its return value right before its exit) wait with their frame and go with it, so that
//!   a kept call keeps its values and a dropped one leaves none behind.
//!
//! What waits is the open frames' entries and the events among them: bounded by the stack
//! depth, by [`MAX_WAITING_EVENTS`] for events and by [`MAX_WAITING`] in all (past them
//! everything waiting is written: a frame a longjmp skipped has no exit, so its entry stays
//! until something is written).
//! It is the running context's: a context switched away takes its own along (`Deferred`,
//! in `Suspended`), as it takes its stack, and what still waits when the recording ends is
//! written then (frames still open are written as without `-t`).

use qemu_uftrace_format::args;
use qemu_uftrace_format::record::RecordType;

/// uftrace's first user event id (`EVENT_ID_USER`): such events are shown whatever the time
/// filter. The resync markers are among them.
pub const EVENT_ID_USER: u64 = qemu_uftrace_format::events::USER_BASE;

/// Events kept waiting in unwritten frames beyond the entries before everything waiting is
/// written anyway: a frame that switches tasks forever must not grow memory without bound.
pub const MAX_WAITING_EVENTS: usize = 1024;

/// Records kept waiting at most: twice the deepest stack the engine follows (`hot`'s
/// `HARD_STACK_LIMIT`, 16 Ki; not named here: `hot` uses this module).
pub const MAX_WAITING: usize = 32 * 1024;

/// Room for waiting records made at the start and at each resume, so that the timed fast
/// path (`Engine::try_call_timed`) pushes without growing.
const RESERVED_WAITING: usize = 256;

/// Whether a waiting record is an argument carrier's.
fn is_carrier_record(w: &Waiting) -> bool {
    w.kind == RecordType::Event && args::is_carrier(w.addr)
}

/// One record not yet written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Waiting {
    pub time: u64,
    pub kind: RecordType,
    pub depth: usize,
    pub addr: u64,
}

/// What to do with the records of one arriving record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing to write yet.
    Wait,
    /// Write everything waiting (`TimeFilter::drain`), then the record itself.
    WriteAll,
}

/// One context's records not yet written, oldest first.
#[derive(Debug, Clone, Default)]
pub struct Deferred {
    waiting: Vec<Waiting>,
    /// Events among `waiting`.
    events: usize,
}

impl Deferred {
    /// Takes everything waiting, oldest first, to be written now.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Waiting> {
        self.events = 0;
        self.waiting.drain(..)
    }

    pub fn is_empty(&self) -> bool {
        self.waiting.is_empty()
    }

    /// Gives back the room a waiting context does not need (as `ShadowStack::suspend`).
    pub fn shrink(&mut self) {
        self.waiting.shrink_to_fit();
    }
}

/// The threshold and the running context's waiting records.
#[derive(Debug, Clone)]
pub struct TimeFilter {
    threshold: u64,
    waiting: Vec<Waiting>,
    /// Events among `waiting`.
    events: usize,
    /// Calls not written because they were shorter than the threshold.
    pub dropped: u64,
}

impl TimeFilter {
    /// A filter dropping calls shorter than `threshold` (in the clock's unit).
    pub fn new(threshold: u64) -> TimeFilter {
        TimeFilter {
            threshold,
            waiting: Vec::with_capacity(RESERVED_WAITING),
            events: 0,
            dropped: 0,
        }
    }

    pub fn threshold(&self) -> u64 {
        self.threshold
    }

    /// A record the engine would write: whether it waits, is dropped (`Wait`, with what it
    /// closes gone), or is written after everything waiting (`WriteAll`).
    pub fn offer(&mut self, time: u64, kind: RecordType, depth: usize, addr: u64) -> Verdict {
        let rec = Waiting {
            time,
            kind,
            depth,
            addr,
        };
        if self.waiting.len() >= MAX_WAITING && kind != RecordType::Exit {
            return Verdict::WriteAll;
        }
        match kind {
            RecordType::Entry => {
                self.waiting.push(rec);
                Verdict::Wait
            }
            RecordType::Exit => {
                let Some(i) = self
                    .waiting
                    .iter()
                    .rposition(|w| w.kind == RecordType::Entry)
                else {
                    return Verdict::WriteAll;
                };
                if time.saturating_sub(self.waiting[i].time) >= self.threshold {
                    return Verdict::WriteAll;
                }
                self.dropped += 1;
                // What follows the entry goes with it: events, and the carriers of its
                // arguments and return value (which `events` does not count). Not the
                // return values of the frames it was tail-called from, which the same
                // return closes: they come after its own, as their exits will.
                let w = &self.waiting;
                let end = (i + 1..w.len().saturating_sub(1))
                    .find(|&j| {
                        args::retval_func(w[j].addr, w[j + 1].addr)
                            .is_some_and(|f| is_carrier_record(&w[j]) && !args::is_func(addr, f))
                    })
                    .unwrap_or(w.len());
                let gone = (w[i + 1..end].iter())
                    .filter(|w| !is_carrier_record(w))
                    .count();
                self.events -= gone;
                self.waiting.drain(i..end);
                Verdict::Wait
            }
            // A carrier (`-A`/`-R`'s values, `format::args`) shares its frame's fate: it waits
            // behind the entry it follows (or before the exit it precedes) and goes with the
            // frame. Not counted among the events: a group is bounded by its payload, and
            // `-a`'s would bring the events' cap, and so short calls written, far sooner.
            RecordType::Event if args::is_carrier(addr) => {
                if self.waiting.is_empty() {
                    return Verdict::WriteAll;
                }
                self.waiting.push(rec);
                Verdict::Wait
            }
            RecordType::Event if addr < EVENT_ID_USER => {
                if self.events >= MAX_WAITING_EVENTS {
                    return Verdict::WriteAll;
                }
                self.events += 1;
                self.waiting.push(rec);
                Verdict::Wait
            }
            _ => Verdict::WriteAll,
        }
    }

    /// Takes everything waiting, oldest first, to be written now.
    pub fn drain(&mut self) -> std::vec::Drain<'_, Waiting> {
        self.events = 0;
        self.waiting.drain(..)
    }

    /// The last record waiting.
    pub fn last(&self) -> Option<&Waiting> {
        self.waiting.last()
    }

    /// Whether anything waits.
    pub fn is_idle(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The running context leaves: what waits goes with it.
    pub fn suspend(&mut self) -> Deferred {
        let mut d = Deferred {
            waiting: std::mem::take(&mut self.waiting),
            events: std::mem::take(&mut self.events),
        };
        d.shrink();
        d
    }

    /// A context resumes with what it left waiting.
    pub fn resume(&mut self, d: Deferred) {
        debug_assert!(self.waiting.is_empty(), "suspend took it");
        self.waiting = d.waiting;
        self.events = d.events;
        self.waiting
            .reserve(RESERVED_WAITING.saturating_sub(self.waiting.len()));
    }

    /// The timed fast path's entry (`Engine::try_call_timed`): it waits, where there is room
    /// without growing (false, nothing changed, where there is not).
    #[inline(always)]
    pub fn try_wait_entry(&mut self, time: u64, depth: usize, addr: u64) -> bool {
        if self.waiting.len() >= self.waiting.capacity().min(MAX_WAITING) {
            return false;
        }
        self.waiting.push(Waiting {
            time,
            kind: RecordType::Entry,
            depth,
            addr,
        });
        true
    }

    /// The timed fast path's exit (`Engine::try_ret_timed`): when the last record waiting is
    /// an entry (the one `offer` would match) shorter than the threshold, both go, as
    /// `offer` would drop them. False, nothing changed, otherwise.
    #[inline(always)]
    pub fn try_drop_short(&mut self, time: u64) -> bool {
        match self.waiting.last() {
            Some(w)
                if w.kind == RecordType::Entry && time.saturating_sub(w.time) < self.threshold =>
            {
                self.waiting.pop();
                self.dropped += 1;
                true
            }
            _ => false,
        }
    }

    /// Forgets what waits and what was dropped (a forked child: those records and counts
    /// are its parent's, which reports them; the child counts its own from zero, as its
    /// other stats).
    pub fn forget(&mut self) {
        self.events = 0;
        self.waiting.clear();
        self.dropped = 0;
    }

    /// Takes back the last waiting record when it is the entry of `addr` at `depth` made at
    /// `time` (a call that faulted before it ran: `Engine::unmake_faulted_call`).
    pub fn take_back_entry(&mut self, time: u64, depth: usize, addr: u64) -> bool {
        let wanted = Waiting {
            time,
            kind: RecordType::Entry,
            depth,
            addr,
        };
        if self.waiting.last() != Some(&wanted) {
            return false;
        }
        self.waiting.pop();
        true
    }

    /// Makes the last waiting record, when it is the entry of `func` at `depth`, an entry of
    /// `to` (`Engine::retarget_top`). False where it is not.
    pub fn retarget_last(&mut self, depth: usize, func: u64, to: u64) -> bool {
        match self.waiting.last_mut() {
            Some(w) if w.kind == RecordType::Entry && w.depth == depth && w.addr == func => {
                w.addr = to;
                true
            }
            _ => false,
        }
    }
}

/// Reads a time filter's TIME as uftrace's `parse_time` does: a number (decimals allowed)
/// with an optional unit, `ns`/`nsec` (the default), `us`/`usec`, `ms`/`msec`, `s`/`sec`,
/// `m`/`min`, case-insensitive; the value is in ns (instructions under the `insn` clock).
/// Unlike uftrace's, a unit it does not know or a sign is refused rather than read as ns,
/// and there is no 3-digit limit before the point. A fraction finer than 1 ns is dropped.
pub fn parse_time(text: &str) -> Result<u64, TimeError> {
    if text.starts_with('-') {
        return Err(TimeError::Negative(text.to_string()));
    }
    let digits_end = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(digits_end);
    let (whole, frac) = number.split_once('.').unwrap_or((number, ""));
    if whole.is_empty() || frac.contains('.') || (number.contains('.') && frac.is_empty()) {
        return Err(TimeError::Number(text.to_string()));
    }
    let exp: u32 = match unit.to_ascii_lowercase().as_str() {
        "" | "ns" | "nsec" => 0,
        "us" | "usec" => 3,
        "ms" | "msec" => 6,
        "s" | "sec" => 9,
        "m" | "min" => 0, // scaled by 60 s below
        _ => return Err(TimeError::Unit(unit.to_string())),
    };
    let minutes = matches!(unit.to_ascii_lowercase().as_str(), "m" | "min");
    let exp = if minutes { 9 } else { exp };
    let scale = 10u64.pow(exp);
    let whole: u64 = whole
        .parse()
        .map_err(|_| TimeError::Number(text.to_string()))?;
    // The fraction, to whole ns of the unit (digits past them dropped).
    let mut part = 0u64;
    let mut place = scale;
    for d in frac.bytes() {
        place /= 10;
        if place == 0 {
            break;
        }
        part += u64::from(d - b'0') * place;
    }
    let ns = whole
        .checked_mul(scale)
        .and_then(|v| v.checked_add(part))
        .and_then(|v| if minutes { v.checked_mul(60) } else { Some(v) })
        .ok_or_else(|| TimeError::Number(text.to_string()))?;
    Ok(ns)
}

/// A time filter's TIME that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TimeError {
    #[error("time filter '{0}' is negative: give a duration such as 100 (ns), 10us or 1.5ms")]
    Negative(String),
    #[error("time filter '{0}' is not a number with an optional unit (ns, us, ms, s, m)")]
    Number(String),
    #[error("time filter unit '{0}' is none of ns, us, ms, s, m (a bare number is ns)")]
    Unit(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_waits_is_bounded() {
        let mut f = TimeFilter::new(1000);
        for i in 0..MAX_WAITING as u64 {
            assert_eq!(f.offer(i, RecordType::Entry, 0, 0x100), Verdict::Wait);
        }
        assert_eq!(f.offer(1, RecordType::Entry, 0, 0x100), Verdict::WriteAll);
        assert_eq!(f.drain().len(), MAX_WAITING);
        for i in 0..MAX_WAITING_EVENTS as u64 {
            assert_eq!(f.offer(i, RecordType::Event, 0, 7), Verdict::Wait);
        }
        assert_eq!(f.offer(1, RecordType::Event, 0, 7), Verdict::WriteAll);
        // A user event never waits.
        assert_eq!(f.drain().len(), MAX_WAITING_EVENTS);
        assert_eq!(
            f.offer(1, RecordType::Event, 0, EVENT_ID_USER),
            Verdict::WriteAll
        );
        assert_eq!(f.offer(1, RecordType::Lost, 0, 0), Verdict::WriteAll);
    }

    /// A call's argument and return value carriers: kept with a long call, in their
    /// places; gone with a short one; written at once where nothing waits.
    #[test]
    fn carriers_share_their_frames_fate() {
        let ids = |retval, func| -> Vec<u64> { args::carriers(retval, func, &[1, 2]).collect() };
        let mut f = TimeFilter::new(100);
        let offer_all = |f: &mut TimeFilter, time, ids: &[u64]| {
            for &id in ids {
                assert_eq!(f.offer(time, RecordType::Event, 0, id), Verdict::Wait);
            }
        };
        // A short call with both: nothing of it stays.
        assert_eq!(f.offer(0, RecordType::Entry, 0, 0x100), Verdict::Wait);
        offer_all(&mut f, 0, &ids(false, 0x100));
        assert_eq!(f.offer(5, RecordType::Entry, 1, 0x200), Verdict::Wait);
        offer_all(&mut f, 5, &ids(false, 0x200));
        offer_all(&mut f, 9, &ids(true, 0x200));
        assert_eq!(f.offer(9, RecordType::Exit, 1, 0x200), Verdict::Wait);
        assert_eq!(f.dropped, 1);
        // Its parent's arguments still wait after it; long, the parent is written whole.
        offer_all(&mut f, 200, &ids(true, 0x100));
        assert_eq!(f.offer(200, RecordType::Exit, 0, 0x100), Verdict::WriteAll);
        let got: Vec<(RecordType, u64)> = f.drain().map(|w| (w.kind, w.addr)).collect();
        let want: Vec<(RecordType, u64)> = std::iter::once((RecordType::Entry, 0x100))
            .chain(
                ids(false, 0x100)
                    .into_iter()
                    .map(|id| (RecordType::Event, id)),
            )
            .chain(
                ids(true, 0x100)
                    .into_iter()
                    .map(|id| (RecordType::Event, id)),
            )
            .collect();
        assert_eq!(got, want);
        // A scheduler event among them is still counted (and uncounted when its frame goes).
        assert_eq!(f.offer(300, RecordType::Entry, 0, 0x100), Verdict::Wait);
        offer_all(&mut f, 300, &ids(false, 0x100));
        assert_eq!(f.offer(301, RecordType::Event, 0, 7), Verdict::Wait);
        assert_eq!(f.events, 1);
        assert_eq!(f.offer(302, RecordType::Exit, 0, 0x100), Verdict::Wait);
        assert_eq!((f.events, f.is_idle()), (0, true));
        // Nothing waiting (its entry written with a long descendant): written at once.
        let id = ids(true, 0x100)[0];
        assert_eq!(f.offer(400, RecordType::Event, 0, id), Verdict::WriteAll);
    }

    /// One return closing a tail call (`strdup`'s jump into `memcpy`): the callee's value,
    /// then its caller's, then the two exits. The short callee goes with its own value
    /// only; its long caller keeps its value.
    #[test]
    fn a_tail_callers_value_outlives_its_short_callee() {
        let ids = |retval, func| -> Vec<u64> { args::carriers(retval, func, &[1, 2]).collect() };
        let mut f = TimeFilter::new(100);
        assert_eq!(f.offer(0, RecordType::Entry, 0, 0x100), Verdict::Wait);
        assert_eq!(f.offer(150, RecordType::Entry, 1, 0x200), Verdict::Wait);
        for id in ids(true, 0x200).into_iter().chain(ids(true, 0x100)) {
            assert_eq!(f.offer(160, RecordType::Event, 0, id), Verdict::Wait);
        }
        assert_eq!(f.offer(160, RecordType::Exit, 1, 0x200), Verdict::Wait);
        assert_eq!(f.offer(160, RecordType::Exit, 0, 0x100), Verdict::WriteAll);
        let got: Vec<u64> = f.drain().map(|w| w.addr).collect();
        let want: Vec<u64> = std::iter::once(0x100).chain(ids(true, 0x100)).collect();
        assert_eq!(got, want);
    }

    #[test]
    fn times_read_as_uftrace_reads_them() {
        for (text, ns) in [
            ("100", 100),
            ("0", 0),
            ("10ns", 10),
            ("10.9ns", 10),
            ("50.987us", 50_987),
            ("1.05us", 1_050),
            ("10US", 10_000),
            ("100.654ms", 100_654_000),
            ("123.123s", 123_123_000_000),
            ("17.1m", 1_026_000_000_000),
            ("2min", 120_000_000_000),
            ("10000", 10_000),
        ] {
            assert_eq!(parse_time(text), Ok(ns), "{text}");
        }
        for bad in [
            "", "-5", "+5", "us", "1.2.3us", "1.us", ".5us", "10 us", "10kg", "5h",
        ] {
            assert!(parse_time(bad).is_err(), "{bad} accepted");
        }
        assert_eq!(parse_time("5x"), Err(TimeError::Unit("x".into())));
        assert!(parse_time("99999999999999999999").is_err());
        assert_eq!(parse_time("-5us"), Err(TimeError::Negative("-5us".into())));
    }
}
