//! Arguments and return values (uftrace's `-A/--argument`, `-R/--retval`): the spec syntax
//! as uftrace parses it (`utils/argspec.c` `parse_argspec`, `utils/filter.c`
//! `add_arg_spec`), the payload a record with the `more` bit carries (`libmcount/record.c`
//! `save_to_argbuf`, `utils/fstack.c` `read_task_arg`), and the carrier records the plugin
//! writes in their place (16 bytes each, so that every stage that walks records in 16-byte
//! steps passes them on) until `record` folds them into their ENTRY and EXIT records.
//!
//! A carrier group is EVENT records whose ids are far above any event's: a head (kind and
//! payload length), the function (its low 40 bits), then the payload, 5 bytes a record.
//! Arguments follow their ENTRY record at once (same time); a return value comes right
//! before its EXIT (read at the return instruction, the EXIT written where it lands), or
//! before the EXITs that one return wrote with it (a tail call's callee's, then its own).
//! A group that does not sit so is dropped and counted, never attached elsewhere.

use std::fmt;
use std::io::{self, Read, Write};

use crate::record::{encode_word, RecordType, RECORD_SIZE};

/// uftrace's `ARG_STR_MAX`: a longer string keeps 95 bytes and `...`.
pub const STR_MAX: usize = 98;

/// How uftrace shows a value (`enum uftrace_arg_format`, the letters of `/d` …).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fmt {
    /// `d` or none: decimal, hex when large.
    Auto,
    Sint,
    Uint,
    Hex,
    Oct,
    Str,
    Char,
    Ptr,
    /// `e:NAME`: by the enum's names (definitions in `info`'s `enumauto:`), NAME kept as
    /// its [`enum_key`] so that a value stays `Copy`.
    Enum(u64),
    /// `f` (or `fpargN`): a floating-point value, from the floating-point registers, which
    /// the conventions number apart from the integer ones (`fparg2` and `arg2/f` are the
    /// second floating-point argument, wherever the integers are).
    Float,
}

/// One value of a spec: `argN` (1-based) or `retval` (`idx` 0), shown as `fmt`, `size`
/// bytes of its register; a [`Fmt::Float`] value's `idx` counts the floating-point
/// arguments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Value {
    pub idx: u8,
    pub fmt: Fmt,
    pub size: u8,
}

impl Value {
    pub fn is_retval(&self) -> bool {
        self.idx == 0
    }

    /// Whether it is read from the floating-point registers.
    pub fn is_float(&self) -> bool {
        self.fmt == Fmt::Float
    }

    /// What the plugin must read: a string (`s`), a floating-point register's low bytes
    /// (`f` and their count) or an integer register's (their count).
    pub fn plugin_word(&self) -> String {
        match self.fmt {
            Fmt::Str => "s".into(),
            Fmt::Float => format!("f{}", self.size),
            _ => self.size.to_string(),
        }
    }
}

/// One `FUNC@arg1/s,arg2` or `FUNC@retval/d` as typed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FuncSpec {
    pub pattern: String,
    pub values: Vec<Value>,
}

/// Why a spec was refused: one line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SpecError(pub String);

impl fmt::Display for SpecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SpecError {}

/// The last argument a spec may name: past the calling convention's registers they are
/// read from the stack (uftrace reads up to ~100 slots; beyond a few dozen is no C API).
pub const MAX_ARG: u8 = 32;

/// The floating-point argument registers of all three conventions (x86_64's xmm0–7,
/// aarch64's v0–7, RISC-V's fa0–7): the last floating-point argument a spec may name (those
/// past them are on the stack, not read yet).
pub const MAX_FLOAT_ARG: u8 = 8;

/// Parses `FUNC@VALUE[,VALUE…]`, each VALUE `argN[/FMT[SIZE]]` or `retval[/FMT[SIZE]]`;
/// `max_arg` is the last argument that may be named ([`MAX_ARG`]).
pub fn parse(spec: &str, max_arg: u8) -> Result<FuncSpec, SpecError> {
    let err = |why: String| SpecError(format!("{spec}: {why}"));
    let Some((pattern, actions)) = spec.split_once('@') else {
        return Err(err(
            "no value named (FUNC@arg1,arg2/s or FUNC@retval/d)".into()
        ));
    };
    if pattern.is_empty() {
        return Err(err("no function named before @".into()));
    }
    let mut values = Vec::new();
    for action in actions.split(',') {
        let v = parse_value(action, max_arg).map_err(err)?;
        merge(&mut values, v, true);
    }
    Ok(FuncSpec {
        pattern: pattern.to_string(),
        values,
    })
}

/// The N of `argN` or `fpargN` (`rest` follows `name`), from 1, and what follows it.
fn index_of<'a>(text: &str, name: &str, rest: &'a str) -> Result<(u8, &'a str), String> {
    let digits = rest.chars().take_while(char::is_ascii_digit).count();
    let n: u8 = rest[..digits]
        .parse()
        .map_err(|_| format!("{text}: expected {name}N (N from 1) or retval"))?;
    if n == 0 {
        return Err(format!("{text}: arguments count from {name}1"));
    }
    Ok((n, &rest[digits..]))
}

fn parse_value(text: &str, max_arg: u8) -> Result<Value, String> {
    let (idx, suffix) = if let Some(rest) = text.strip_prefix("retval") {
        (0u8, rest)
    } else if let Some(rest) = text.strip_prefix("arg") {
        let (n, rest) = index_of(text, "arg", rest)?;
        if n > max_arg {
            return Err(format!("{text}: at most arg{max_arg} is read"));
        }
        (n, rest)
    } else if let Some(rest) = text.strip_prefix("fparg") {
        let (n, rest) = index_of(text, "fparg", rest)?;
        let v = Value {
            idx: n,
            fmt: Fmt::Float,
            size: 8,
        };
        return float_size(text, v, rest);
    } else {
        return Err(format!(
            "{text}: expected argN or retval (uftrace's other actions are not taken here)"
        ));
    };
    let mut v = Value {
        idx,
        fmt: Fmt::Auto,
        size: 8,
    };
    if suffix.is_empty() {
        return Ok(v);
    }
    if suffix.starts_with('%') {
        return Err(format!(
            "{text}: values by register or stack offset (%…) are not read yet; name argN"
        ));
    }
    let Some(rest) = suffix.strip_prefix('/') else {
        return Err(format!("{text}: expected /FORMAT after the value's name"));
    };
    let mut chars = rest.chars();
    v.fmt = match chars.next() {
        Some('d') => Fmt::Auto,
        Some('i') => Fmt::Sint,
        Some('u') => Fmt::Uint,
        Some('x') => Fmt::Hex,
        Some('o') => Fmt::Oct,
        Some('s') => Fmt::Str,
        Some('c') => {
            v.size = 1;
            Fmt::Char
        }
        Some('p') => Fmt::Ptr,
        Some('f') => {
            v.fmt = Fmt::Float;
            return float_size(text, v, chars.as_str());
        }
        Some('e') => {
            let name = chars.as_str().strip_prefix(':').unwrap_or("");
            if name.is_empty() || !name.chars().all(|c| c.is_alphanumeric() || c == '_') {
                return Err(format!("{text}: expected e:NAME, the enum's name"));
            }
            return Ok(Value {
                fmt: Fmt::Enum(enum_key(name)),
                ..v
            });
        }
        Some(c @ ('S' | 't')) => {
            return Err(format!(
                "{text}: format /{c} ({}) is not read yet; use d, i, u, x, o, s, c, p, f or e:NAME",
                match c {
                    'S' => "std::string",
                    _ => "struct by value",
                }
            ))
        }
        _ => {
            return Err(format!(
                "{text}: unknown format (d, i, u, x, o, s, c, p or f, then 8, 16, 32 or 64)"
            ))
        }
    };
    let size = chars.as_str();
    if size.starts_with('%') {
        return Err(format!(
            "{text}: values by register or stack offset (%…) are not read yet; name argN"
        ));
    }
    if !size.is_empty() {
        v.size = match size {
            "8" => 1,
            "16" => 2,
            "32" => 4,
            "64" => 8,
            _ => return Err(format!("{text}: size must be 8, 16, 32 or 64 bits")),
        };
        if v.fmt == Fmt::Str {
            // uftrace takes and ignores a string's size; it stays a pointer.
            v.size = 8;
        }
    }
    Ok(v)
}

/// A floating-point value's size: `suffix` is what follows `/f` (or `fpargN`, with its own
/// `/f` if any): none (a double), 32 or 64. uftrace's 80 (x86's long double, passed in memory, not in a
/// register) is not read.
fn float_size(text: &str, mut v: Value, suffix: &str) -> Result<Value, String> {
    if v.idx > MAX_FLOAT_ARG {
        return Err(format!(
            "{text}: at most the {MAX_FLOAT_ARG}th floating-point argument is read (those \
             past the registers are on the stack)"
        ));
    }
    let size = suffix.strip_prefix("/f").unwrap_or(suffix);
    if size.starts_with('%') {
        return Err(format!(
            "{text}: values by register or stack offset (%…) are not read yet; name fpargN"
        ));
    }
    v.size = match size {
        "" | "64" => 8,
        "32" => 4,
        "80" => {
            return Err(format!(
                "{text}: long double (/f80) is passed in memory, which is not read yet; \
                 use /f32 or /f64"
            ))
        }
        _ => return Err(format!("{text}: a floating-point size is 32 or 64 bits")),
    };
    Ok(v)
}

/// Adds `v` to a function's values as uftrace's `add_arg_spec` does: a value of the same
/// kind (integer or floating-point) and index is replaced (an exact name's never by a
/// regular expression's), a new one appended. `exact` is whether `v`'s spec named the
/// function whole.
pub fn merge(values: &mut Vec<Value>, v: Value, exact: bool) {
    merge_exact(values, &mut Vec::new(), v, exact)
}

/// [`merge`] keeping each value's exactness in `exacts` (parallel to `values`).
pub fn merge_exact(values: &mut Vec<Value>, exacts: &mut Vec<bool>, v: Value, exact: bool) {
    exacts.resize(values.len(), true);
    match (values.iter()).position(|o| o.idx == v.idx && o.is_float() == v.is_float()) {
        Some(i) => {
            if exact || !exacts[i] {
                values[i] = v;
                exacts[i] = exact;
            }
        }
        None => {
            values.push(v);
            exacts.push(exact);
        }
    }
}

/// Appends one integer value as libmcount does: its register's low `size` bytes, padded
/// to 4 with the register's next bytes.
pub fn push_int(payload: &mut Vec<u8>, reg: u64, size: u8) {
    let n = (size as usize).div_ceil(4) * 4;
    payload.extend_from_slice(&reg.to_le_bytes()[..n.min(8)]);
}

/// Appends one string value: its u16 length and bytes, padded to 4. `read` is what guest
/// memory gave from the pointer on (up to [`STR_MAX`] + 1 bytes, fewer where a page could
/// not be read); `NULL` for a null pointer, `<0x…>` (libmcount's mark) where nothing
/// up to the string's end could be read.
pub fn push_str(payload: &mut Vec<u8>, ptr: u64, read: &[u8]) {
    let text: Vec<u8> = if ptr == 0 {
        b"NULL".to_vec()
    } else {
        match read.iter().position(|&b| b == 0) {
            Some(n) if n < STR_MAX => read[..n].to_vec(),
            // As libmcount cuts: 95 bytes and `...` (a string of 98 or more).
            _ if read.len() >= STR_MAX => {
                let mut t = read[..STR_MAX - 3].to_vec();
                t.extend_from_slice(b"...");
                t
            }
            // Its end could not be read: no value passed off as the string.
            _ => format!("<{ptr:#x}>").into_bytes(),
        }
    };
    let start = payload.len();
    payload.extend_from_slice(&(text.len() as u16).to_le_bytes());
    payload.extend_from_slice(&text);
    let len = payload.len() - start;
    payload.resize(start + len.div_ceil(4) * 4, 0);
}

const TAG_SHIFT: u32 = 40;
const LOW40: u64 = (1 << TAG_SHIFT) - 1;
const TAG_ARGS: u64 = 0xa1;
const TAG_RETVAL: u64 = 0xa2;
const TAG_FUNC: u64 = 0xa3;
const TAG_DATA: u64 = 0xa4;
/// Payload bytes a data carrier holds.
const PER_CARRIER: usize = 5;
/// The longest payload a group carries (libmcount's ARGBUF_SIZE less its length word).
pub const MAX_PAYLOAD: usize = 1020;

/// The EVENT ids (48-bit address fields) of the carriers of `payload`, arguments of
/// `func`'s entry or (`retval`) its return value.
pub fn carriers(retval: bool, func: u64, payload: &[u8]) -> impl Iterator<Item = u64> + '_ {
    let head = if retval { TAG_RETVAL } else { TAG_ARGS } << TAG_SHIFT | payload.len() as u64;
    let func = TAG_FUNC << TAG_SHIFT | (func & LOW40);
    let data = payload.chunks(PER_CARRIER).map(|c| {
        let mut w = [0u8; 8];
        w[..c.len()].copy_from_slice(c);
        TAG_DATA << TAG_SHIFT | u64::from_le_bytes(w)
    });
    [head, func].into_iter().chain(data)
}

/// Whether an EVENT id is a carrier's (the plugin's own; never an event of uftrace's).
pub fn is_carrier(id: u64) -> bool {
    matches!(id >> TAG_SHIFT, TAG_ARGS | TAG_RETVAL | TAG_FUNC | TAG_DATA)
}

/// The function (its low 40 bits) whose return value a carrier group starting with `head`,
/// `func` carries; `None` where those two are not a return value group's first carriers.
pub fn retval_func(head: u64, func: u64) -> Option<u64> {
    (head >> TAG_SHIFT == TAG_RETVAL && func >> TAG_SHIFT == TAG_FUNC).then_some(func & LOW40)
}

/// Whether `addr` is function `low40` of a carrier ([`retval_func`]).
pub fn is_func(addr: u64, low40: u64) -> bool {
    addr & LOW40 == low40
}

/// What [`fold`] did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Folded {
    /// ENTRY records given their arguments.
    pub args: u64,
    /// EXIT records given their return value.
    pub retvals: u64,
    /// Groups with no record to go with (its record not written: a filter, the size cap).
    pub dropped: u64,
}

impl std::ops::AddAssign for Folded {
    fn add_assign(&mut self, o: Folded) {
        self.args += o.args;
        self.retvals += o.retvals;
        self.dropped += o.dropped;
    }
}

/// A carrier group being read.
struct Group {
    retval: bool,
    time: u64,
    len: usize,
    func: Option<u64>,
    payload: Vec<u8>,
}

struct Rec {
    bytes: [u8; RECORD_SIZE],
    payload: Option<Vec<u8>>,
}

impl Rec {
    fn word(&self) -> u64 {
        u64::from_le_bytes(self.bytes[8..].try_into().expect("8 bytes"))
    }
    fn time(&self) -> u64 {
        u64::from_le_bytes(self.bytes[..8].try_into().expect("8 bytes"))
    }
    fn kind(&self) -> u64 {
        self.word() & 3
    }
    fn addr40(&self) -> u64 {
        (self.word() >> 16) & LOW40
    }
    fn write(self, out: &mut impl Write) -> io::Result<()> {
        let Rec { mut bytes, payload } = self;
        match payload {
            None => out.write_all(&bytes),
            Some(p) => {
                let word = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes")) | 1 << 2;
                bytes[8..].copy_from_slice(&word.to_le_bytes());
                out.write_all(&bytes)?;
                out.write_all(&p)?;
                // The whole payload is padded to 8 (`read_task_args`).
                let pad = (8 - p.len() % 8) % 8;
                out.write_all(&[0u8; 8][..pad])
            }
        }
    }
}

/// The fold's state between records: the record written last (held back: arguments may
/// follow it), a return value waiting for its EXIT, a carrier group being read.
#[derive(Default)]
struct Folder {
    done: Folded,
    held: Option<Rec>,
    /// Return values waiting for their EXIT records: one, or a tail call's (its function's
    /// and the callee's, closed by the callee's return), with the time of the first EXIT
    /// after them once seen.
    pending_ret: Vec<(u64, Vec<u8>)>,
    pending_exit_time: Option<u64>,
    group: Option<Group>,
}

impl Folder {
    /// Nothing pending: a run of records with no carrier among them passes as it is.
    fn quiet(&self) -> bool {
        self.group.is_none() && self.pending_ret.is_empty()
    }

    /// One record.
    fn record(&mut self, bytes: [u8; RECORD_SIZE], out: &mut impl Write) -> io::Result<()> {
        let done = &mut self.done;
        let word = u64::from_le_bytes(bytes[8..].try_into().expect("8 bytes"));
        let time = u64::from_le_bytes(bytes[..8].try_into().expect("8 bytes"));
        let id = word >> 16;
        let carrier = word & 3 == RecordType::Event as u64 && is_carrier(id);
        if !carrier {
            if self.group.take().is_some() {
                done.dropped += 1;
            }
            let mut rec = Rec {
                bytes,
                payload: None,
            };
            if !self.pending_ret.is_empty() {
                // A value goes to its function's EXIT among those right after it that one
                // return wrote (one time: a tail call's callee's, then its function's).
                let exit = rec.kind() == RecordType::Exit as u64
                    && *self.pending_exit_time.get_or_insert(rec.time()) == rec.time();
                let at = (self.pending_ret.iter()).position(|&(f, _)| f == rec.addr40());
                match at.filter(|_| exit) {
                    Some(i) => {
                        rec.payload = Some(self.pending_ret.remove(i).1);
                        done.retvals += 1;
                    }
                    None if exit => {}
                    None => {
                        done.dropped += self.pending_ret.len() as u64;
                        self.pending_ret.clear();
                    }
                }
                if self.pending_ret.is_empty() {
                    self.pending_exit_time = None;
                }
            }
            if let Some(h) = self.held.replace(rec) {
                h.write(out)?;
            }
            return Ok(());
        }
        let tag = id >> TAG_SHIFT;
        let low = id & LOW40;
        match tag {
            TAG_ARGS | TAG_RETVAL => {
                if self.group.take().is_some() {
                    done.dropped += 1;
                }
                self.group = Some(Group {
                    retval: tag == TAG_RETVAL,
                    time,
                    len: low as usize,
                    func: None,
                    payload: Vec::new(),
                });
            }
            TAG_FUNC => match &mut self.group {
                Some(Group { func: f @ None, .. }) => *f = Some(low),
                _ => {
                    self.group = None;
                    done.dropped += 1;
                }
            },
            _ => match &mut self.group {
                Some(g) if g.func.is_some() && g.payload.len() < g.len => {
                    let take = (g.len - g.payload.len()).min(PER_CARRIER);
                    g.payload.extend_from_slice(&low.to_le_bytes()[..take]);
                }
                _ => {
                    self.group = None;
                    done.dropped += 1;
                }
            },
        }
        // A whole group: attached where it belongs, or dropped.
        let complete = (self.group.as_ref())
            .is_some_and(|g| g.func.is_some() && g.payload.len() == g.len && g.len > 0);
        if complete {
            let Some(Group {
                retval,
                time,
                func: Some(func),
                payload,
                ..
            }) = self.group.take()
            else {
                return Ok(());
            };
            if retval {
                // Values read at one return come together; one after an EXIT came
                // starts anew.
                if self.pending_exit_time.take().is_some() {
                    done.dropped += self.pending_ret.len() as u64;
                    self.pending_ret.clear();
                }
                self.pending_ret.push((func, payload));
            } else {
                match &mut self.held {
                    Some(h)
                        if h.kind() == RecordType::Entry as u64
                            && h.addr40() == func
                            && h.time() == time
                            && h.payload.is_none() =>
                    {
                        h.payload = Some(payload);
                        done.args += 1;
                    }
                    _ => done.dropped += 1,
                }
            }
        }
        Ok(())
    }

    fn finish(mut self, out: &mut impl Write) -> io::Result<Folded> {
        if let Some(h) = self.held.take() {
            h.write(out)?;
        }
        self.done.dropped += u64::from(self.group.is_some()) + self.pending_ret.len() as u64;
        Ok(self.done)
    }
}

/// Whether the 16 bytes at `r` are a carrier record.
fn is_carrier_record(r: &[u8]) -> bool {
    let word = u64::from_le_bytes(r[8..16].try_into().expect("8 bytes"));
    word & 3 == RecordType::Event as u64 && is_carrier(word >> 16)
}

/// Rewrites a task file's records with the carriers folded into their records (the `more`
/// bit and the payload after), as uftrace's readers take them. Runs of records with no
/// carrier among them are written whole, straight from the input (a boot's files are
/// hundreds of MB with a carrier every few hundred records).
pub fn fold(input: impl Read, out: &mut impl Write) -> io::Result<Folded> {
    fold_sized(input, out, 4 << 20)
}

/// [`fold`] reading at most `chunk` bytes at a time (whole records, at least one): a task
/// file of a few KB needs no 4 MiB buffer zeroed for it (a boot has ~80 task files).
pub fn fold_sized(mut input: impl Read, out: &mut impl Write, chunk: usize) -> io::Result<Folded> {
    let mut f = Folder::default();
    let mut buf = vec![0u8; chunk.div_ceil(RECORD_SIZE).max(1) * RECORD_SIZE];
    let mut have = 0usize;
    loop {
        let n = loop {
            match input.read(&mut buf[have..]) {
                Ok(n) => break n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        };
        have += n;
        let whole = have - have % RECORD_SIZE;
        let mut i = 0;
        while i < whole {
            if f.quiet() {
                // Up to the next carrier: all as it is, but the record right before it
                // (held: the carrier may be its arguments).
                let next = (buf[i..whole].chunks_exact(RECORD_SIZE))
                    .position(is_carrier_record)
                    .map_or(whole, |k| i + k * RECORD_SIZE);
                if next > i {
                    if let Some(h) = f.held.take() {
                        h.write(out)?;
                    }
                    out.write_all(&buf[i..next - RECORD_SIZE])?;
                    let mut last = [0u8; RECORD_SIZE];
                    last.copy_from_slice(&buf[next - RECORD_SIZE..next]);
                    f.held = Some(Rec {
                        bytes: last,
                        payload: None,
                    });
                    i = next;
                    continue;
                }
            }
            let mut r = [0u8; RECORD_SIZE];
            r.copy_from_slice(&buf[i..i + RECORD_SIZE]);
            f.record(r, out)?;
            i += RECORD_SIZE;
        }
        // A partial record waits for the rest; at the end it is dropped, as the readers
        // drop it.
        buf.copy_within(whole..have, 0);
        have -= whole;
        if n == 0 {
            break;
        }
    }
    f.finish(out)
}

/// [`fold`] one record at a time: what the runs written whole must equal (tests).
#[cfg(test)]
fn fold_each(input: &[u8], out: &mut impl Write) -> io::Result<Folded> {
    let mut f = Folder::default();
    for r in input.chunks_exact(RECORD_SIZE) {
        f.record(r.try_into().expect("16 bytes"), out)?;
    }
    f.finish(out)
}

/// One carrier record's 16 bytes (for the plugin's writer and tests).
pub fn carrier_record(time: u64, id: u64) -> [u8; RECORD_SIZE] {
    let mut out = [0u8; RECORD_SIZE];
    out[..8].copy_from_slice(&time.to_le_bytes());
    out[8..].copy_from_slice(&encode_word(RecordType::Event, 0, id).to_le_bytes());
    out
}

/// The `info` file's ARG_SPEC block: `argspec:lines=N`, then the `-A` specs joined by `;`
/// (`argspec:`) and the `-R` ones (`retspec:`), as uftrace record writes them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct InfoSpec {
    pub argspec: Vec<String>,
    pub retspec: Vec<String>,
    /// Enum definitions the specs' `e:NAME` show by (`enum NAME { A = 0, B = 5 }`), for
    /// `enumauto:` (uftrace reads them with the AUTO_ARGS feature).
    pub enums: Vec<String>,
    /// `-a`: `auto-args:1`, by which uftrace takes each function's values from the `A:` and
    /// `R:` lines of its `.dbg` file (with the DEBUG_INFO feature), as `uftrace record -a`
    /// writes them.
    pub auto: bool,
}

impl InfoSpec {
    pub fn is_empty(&self) -> bool {
        self.argspec.is_empty() && self.retspec.is_empty() && !self.auto
    }

    pub fn write_to(&self, w: &mut impl Write) -> io::Result<()> {
        let autos = !self.enums.is_empty() || self.auto;
        let lines = usize::from(!self.argspec.is_empty())
            + usize::from(!self.retspec.is_empty())
            + if autos { 3 } else { 0 }
            + usize::from(self.auto);
        writeln!(w, "argspec:lines={lines}")?;
        if !self.argspec.is_empty() {
            writeln!(w, "argspec:{}", one_line(&self.argspec.join(";")))?;
        }
        if !self.retspec.is_empty() {
            writeln!(w, "retspec:{}", one_line(&self.retspec.join(";")))?;
        }
        if autos {
            // No automatic specs of uftrace's own list: only the enums.
            writeln!(w, "argauto:")?;
            writeln!(w, "retauto:")?;
            writeln!(w, "enumauto:{}", one_line(&self.enums.join(";")))?;
        }
        if self.auto {
            writeln!(w, "auto-args:1")?;
        }
        Ok(())
    }
}

/// Uncut: uftrace reads the ARG_SPEC block with `getline` (0.13–0.19), and a cut spec
/// would leave records with values no spec describes (fatal to replay).
fn one_line(s: &str) -> String {
    crate::text::escape_controls(&s.replace(['\n', '\r'], " ")).into_owned()
}

/// The payload length of a record with the `more` bit, given its function's values (for
/// readers of finished traces: `export`). `data` starts right after the record.
pub fn payload_len(values: &[Value], retval: bool, data: &[u8]) -> Option<usize> {
    let mut at = 0usize;
    for v in values.iter().filter(|v| v.is_retval() == retval) {
        if v.fmt == Fmt::Str {
            let len = u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?) as usize;
            at += (2 + len).div_ceil(4) * 4;
        } else {
            at += (v.size as usize).div_ceil(4) * 4;
        }
    }
    Some(at.div_ceil(8) * 8)
}

/// `-A`/`-R` as a finished trace's `info` says them (`argspec:`, `retspec:`), each split
/// at `;` as uftrace splits them.
pub fn read_info_spec(info: &[u8]) -> Option<InfoSpec> {
    let text = String::from_utf8_lossy(info.get(40..)?);
    let mut spec = InfoSpec::default();
    for line in text.lines() {
        if let Some(v) = line
            .strip_prefix("argspec:")
            .filter(|v| !v.starts_with("lines="))
        {
            spec.argspec
                .extend(v.split(';').filter(|s| !s.is_empty()).map(str::to_string));
        } else if let Some(v) = line.strip_prefix("retspec:") {
            spec.retspec
                .extend(v.split(';').filter(|s| !s.is_empty()).map(str::to_string));
        } else if let Some(v) = line.strip_prefix("enumauto:") {
            spec.enums
                .extend(v.split(';').filter(|s| !s.is_empty()).map(str::to_string));
        } else if line == "auto-args:1" {
            spec.auto = true;
        }
    }
    (!spec.is_empty()).then_some(spec)
}

/// The key an enum's name is known by in a [`Value`] (FNV-1a).
pub fn enum_key(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The enums a trace's `info` defines (`enumauto:`), by [`enum_key`]: each one's
/// enumerators, the largest value first (as uftrace's `parse_enum_string` keeps them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Enums(std::collections::HashMap<u64, Vec<(i64, String)>>);

impl Enums {
    /// Reads definitions as uftrace's `parse_enum_string` does, `enum NAME { A = 0, B, C =
    /// 5 }` (an enumerator without a value is the previous one's plus one); one it cannot
    /// read is left out (its values then show as numbers).
    pub fn parse(defs: &[String]) -> Enums {
        let mut out = std::collections::HashMap::new();
        for d in defs {
            let Some((head, body)) = d.split_once('{') else {
                continue;
            };
            let Some(name) = head.trim().strip_prefix("enum ").map(str::trim) else {
                continue;
            };
            let mut vals: Vec<(i64, String)> = Vec::new();
            let mut next = 0i64;
            let ok = (body.trim_end().trim_end_matches('}').split(','))
                .map(str::trim)
                .filter(|e| !e.is_empty())
                .all(|e| {
                    let (n, v) = match e.split_once('=') {
                        Some((n, v)) => match v.trim().parse::<i64>() {
                            Ok(v) => (n.trim(), v),
                            Err(_) => return false,
                        },
                        None => (e, next),
                    };
                    next = v.wrapping_add(1);
                    // Before the first of a value not larger: the largest first.
                    let at = vals.iter().position(|(x, _)| *x <= v).unwrap_or(vals.len());
                    vals.insert(at, (v, n.to_string()));
                    true
                });
            if ok && !name.is_empty() {
                out.insert(enum_key(name), vals);
            }
        }
        Enums(out)
    }

    /// Value `val` of enum `key` as uftrace's `convert_enum_val` shows it: its name, else
    /// the names its bits make (`A|B`, `+0x…` for what is left), else the number.
    pub fn show(&self, key: u64, val: i64) -> String {
        let number = || {
            if val.unsigned_abs() > 100_000 {
                format!("{val:#x}")
            } else {
                val.to_string()
            }
        };
        let Some(vals) = self.0.get(&key) else {
            return val.to_string();
        };
        if let Some((_, n)) = vals.iter().find(|(v, _)| *v == val) {
            return n.clone();
        }
        let (mut left, mut names) = (val, Vec::new());
        for (v, n) in vals {
            if *v <= left {
                left = left.wrapping_sub(*v);
                names.push(n.as_str());
            }
            if left == 0 {
                break;
            }
        }
        match (names.is_empty(), left) {
            (true, _) => number(),
            (false, 0) => names.join("|"),
            (false, _) => format!("{}+{left:#x}", names.join("|")),
        }
    }
}

/// The values of a record with the `more` bit as uftrace's replay writes them (`1, "x"`;
/// enums by `enums`; a `/p` pointer as `&name` where `symbol` names the function holding
/// it, as replay's `task_find_sym_addr` does, `0` when null, else hex), and the payload's
/// length (padded to 8). `None` when `data` is shorter than the spec says.
pub fn render(
    values: &[Value],
    retval: bool,
    data: &[u8],
    enums: &Enums,
    symbol: &dyn Fn(u64) -> Option<String>,
) -> Option<(String, usize)> {
    let mut at = 0usize;
    let mut parts = Vec::new();
    for v in values.iter().filter(|v| v.is_retval() == retval) {
        if v.fmt == Fmt::Str {
            let len = u16::from_le_bytes(data.get(at..at + 2)?.try_into().ok()?) as usize;
            let bytes = data.get(at + 2..at + 2 + len)?;
            let mut t = String::from("\"");
            for &b in bytes.iter().take_while(|&&b| b != 0) {
                match b {
                    b'\n' => t.push_str("\\n"),
                    8 => t.push_str("\\b"),
                    b => t.push(char::from(b)),
                }
            }
            t.push('"');
            parts.push(t);
            at += (2 + len).div_ceil(4) * 4;
            continue;
        }
        let size = usize::from(v.size).clamp(1, 8);
        let mut w = [0u8; 8];
        w[..size].copy_from_slice(data.get(at..at + size)?);
        let raw = u64::from_le_bytes(w);
        let signed = {
            let shift = 64 - 8 * size as u32;
            ((raw << shift) as i64) >> shift
        };
        parts.push(match v.fmt {
            Fmt::Auto if size == 4 && raw > 0xffff_0000 => signed.to_string(),
            Fmt::Auto if (raw as i64) > 100_000 || (raw as i64) < -100_000 => format!("{raw:#x}"),
            Fmt::Auto => (raw as i64).to_string(),
            Fmt::Sint => signed.to_string(),
            Fmt::Uint if raw > 100_000 => format!("{raw:#x}"),
            Fmt::Uint => raw.to_string(),
            Fmt::Hex => format!("{raw:#x}"),
            Fmt::Ptr if raw == 0 => "0".into(),
            Fmt::Ptr => symbol(raw).map_or_else(|| format!("{raw:#x}"), |name| format!("&{name}")),
            Fmt::Oct => format!("0{raw:o}"),
            Fmt::Enum(key) => enums.show(key, signed),
            Fmt::Char => format!("'{}'", char::from(raw as u8)),
            Fmt::Float if size == 4 => c_float(f64::from(f32::from_bits(raw as u32))),
            Fmt::Float => c_float(f64::from_bits(raw)),
            Fmt::Str => unreachable!("strings are read above"),
        });
        at += size.div_ceil(4) * 4;
    }
    Some((parts.join(", "), at.div_ceil(8) * 8))
}

/// A floating-point value as C's `%#f` shows it (uftrace's replay): six decimals, `inf`
/// and `nan` in lower case.
fn c_float(x: f64) -> String {
    match x {
        x if x.is_nan() && x.is_sign_negative() => "-nan".into(),
        x if x.is_nan() => "nan".into(),
        x if x.is_infinite() && x < 0.0 => "-inf".into(),
        x if x.is_infinite() => "inf".into(),
        x => format!("{x:.6}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn specs_parse_as_uftrace_reads_them() {
        let s = parse("f@arg1/s,arg2/x32,arg3", 6).unwrap();
        assert_eq!(s.pattern, "f");
        assert_eq!(
            s.values,
            [
                Value {
                    idx: 1,
                    fmt: Fmt::Str,
                    size: 8
                },
                Value {
                    idx: 2,
                    fmt: Fmt::Hex,
                    size: 4
                },
                Value {
                    idx: 3,
                    fmt: Fmt::Auto,
                    size: 8
                },
            ]
        );
        let r = parse("^g@retval/i32", 8).unwrap();
        assert_eq!(
            r.values,
            [Value {
                idx: 0,
                fmt: Fmt::Sint,
                size: 4
            }]
        );
        assert_eq!(parse("c@arg1/c", 8).unwrap().values[0].size, 1);
        for (bad, why) in [
            ("f", "no value named"),
            ("f@arg7", "at most arg6"),
            ("f@arg1/f80", "long double"),
            ("f@fparg9", "8th floating-point"),
            ("f@fparg1/f16", "32 or 64"),
            ("f@arg1/q", "unknown format"),
            ("f@arg1/x12", "size must be"),
            ("f@arg1%rdi", "by register"),
            ("f@depth=2", "expected argN or retval"),
        ] {
            let e = parse(bad, 6).unwrap_err().to_string();
            assert!(e.contains(why), "{bad}: {e}");
            assert!(!e.contains('\n'));
        }
    }

    #[test]
    fn floating_point_values_count_their_own_registers() {
        let f = |idx, size| Value {
            idx,
            fmt: Fmt::Float,
            size,
        };
        let s = parse("scale@fparg1,fparg2/f32,arg1/i32,arg2/f", 8).unwrap();
        assert_eq!(
            s.values,
            [
                f(1, 8),
                f(2, 8),
                Value {
                    idx: 1,
                    fmt: Fmt::Sint,
                    size: 4
                }
            ],
            "arg2/f is fparg2, which it replaces"
        );
        assert_eq!(parse("g@retval/f32", 8).unwrap().values, [f(0, 4)]);
        assert_eq!(parse("g@arg3/f64", 8).unwrap().values, [f(3, 8)]);
        assert_eq!(f(2, 4).plugin_word(), "f4");
        // As replay shows them: `%#f`.
        let mut p = Vec::new();
        push_int(&mut p, 1.5f64.to_bits(), 8);
        push_int(&mut p, u64::from((-2.25f32).to_bits()), 4);
        push_int(&mut p, f64::NAN.to_bits(), 8);
        let values = [f(1, 8), f(2, 4), f(3, 8)];
        let (text, len) = render(&values, false, &p, &Enums::default(), &|_| None).unwrap();
        assert_eq!(text, "1.500000, -2.250000, nan");
        assert_eq!(len, 24);
        assert_eq!(payload_len(&values, false, &p), Some(24));
    }

    /// `/p` as replay shows it: `&name` of the function holding the pointer, `0` when
    /// null, else hex (`%p`).
    #[test]
    fn pointers_show_the_function_they_point_into() {
        let v = parse("apply@arg1/p,arg2/p,arg3/p", 8).unwrap().values;
        let mut p = Vec::new();
        for raw in [0x401136, 0, 0x7ffe_1234] {
            push_int(&mut p, raw, 8);
        }
        let symbol = |a: u64| {
            (0x401130..0x401180)
                .contains(&a)
                .then(|| "twice".to_string())
        };
        let (text, _) = render(&v, false, &p, &Enums::default(), &symbol).unwrap();
        assert_eq!(text, "&twice, 0, 0x7ffe1234");
    }

    #[test]
    fn enums_show_as_uftrace_shows_them() {
        let e = Enums::parse(&[
            "enum color { RED = 0, GREEN = 5, BLUE }".to_string(),
            "enum flags { A = 1, B = 2, C = 8 }".to_string(),
            "enum broken { X = y }".to_string(),
        ]);
        let show = |name: &str, v| e.show(enum_key(name), v);
        assert_eq!(show("color", 6), "BLUE");
        assert_eq!(show("color", 0), "RED");
        assert_eq!(show("flags", 3), "B|A");
        assert_eq!(show("flags", 19), "C|B|A+0x8");
        assert_eq!(show("flags", -4), "-4");
        assert_eq!(show("broken", 1), "1");
        let v = parse("paint@arg1/e:color", 8).unwrap().values;
        let mut p = Vec::new();
        push_int(&mut p, 6, 8);
        assert_eq!(render(&v, false, &p, &e, &|_| None).unwrap().0, "BLUE");
        assert_eq!(
            render(&v, false, &p, &Enums::default(), &|_| None)
                .unwrap()
                .0,
            "6"
        );
    }

    #[test]
    fn merging_keeps_order_and_exact_names_win() {
        let mut vals = Vec::new();
        let mut ex = Vec::new();
        let v = |idx, fmt| Value { idx, fmt, size: 8 };
        merge_exact(&mut vals, &mut ex, v(2, Fmt::Hex), true);
        merge_exact(&mut vals, &mut ex, v(1, Fmt::Auto), false);
        merge_exact(&mut vals, &mut ex, v(2, Fmt::Str), false);
        assert_eq!(vals, [v(2, Fmt::Hex), v(1, Fmt::Auto)]);
        merge_exact(&mut vals, &mut ex, v(1, Fmt::Str), true);
        assert_eq!(vals, [v(2, Fmt::Hex), v(1, Fmt::Str)]);
    }

    #[test]
    fn strings_are_cut_and_marked_as_libmcount_does() {
        let mut p = Vec::new();
        push_str(&mut p, 0x10, b"abc\0zz");
        assert_eq!(p, [3, 0, b'a', b'b', b'c', 0, 0, 0]);
        p.clear();
        push_str(&mut p, 0, b"");
        assert_eq!(&p[2..6], b"NULL");
        p.clear();
        push_str(&mut p, 0x1234, b"ab");
        assert_eq!(&p[2..2 + 8], b"<0x1234>");
        p.clear();
        push_str(&mut p, 0x10, &[b'x'; 99]);
        assert_eq!(u16::from_le_bytes([p[0], p[1]]), 98);
        assert_eq!(&p[2 + 95..2 + 98], b"...");
    }

    fn rec(time: u64, kind: RecordType, addr: u64) -> [u8; 16] {
        crate::record::encode(time, kind, 0, addr)
    }

    #[test]
    fn carriers_fold_into_their_records_or_are_dropped() {
        let mut input = Vec::new();
        let args = [1u8, 0, 0, 0, 2, 0, 0, 0];
        let ret = [7u8, 0, 0, 0, 0, 0, 0, 0];
        input.extend(rec(10, RecordType::Entry, 0x401000));
        for id in carriers(false, 0x401000, &args) {
            input.extend(carrier_record(10, id));
        }
        // A second group after the first: its entry is not right before it.
        for id in carriers(false, 0x401000, &args) {
            input.extend(carrier_record(10, id));
        }
        for id in carriers(true, 0x401000, &ret) {
            input.extend(carrier_record(11, id));
        }
        input.extend(rec(12, RecordType::Exit, 0x401000));
        // A return value whose exit is another function's.
        for id in carriers(true, 0x401000, &ret) {
            input.extend(carrier_record(13, id));
        }
        input.extend(rec(14, RecordType::Exit, 0x500000));
        let mut out = Vec::new();
        let done = fold(&input[..], &mut out).unwrap();
        assert_eq!(
            done,
            Folded {
                args: 1,
                retvals: 1,
                dropped: 2
            }
        );
        assert_eq!(out.len(), 16 + 8 + 16 + 8 + 16);
        let word = |at: usize| u64::from_le_bytes(out[at + 8..at + 16].try_into().unwrap());
        assert_eq!(word(0) >> 2 & 1, 1);
        assert_eq!(&out[16..24], &args);
        assert_eq!(word(24) >> 2 & 1, 1);
        assert_eq!(&out[40..48], &ret);
        assert_eq!(word(48) >> 2 & 1, 0);
        assert!(crate::record::decode(out[48..64].try_into().unwrap()).is_ok());
    }

    /// A function that left by a tail call: its value, read at the callee's return, goes
    /// to its EXIT past the callee's, which that return wrote at the same time; never to an
    /// EXIT a later return wrote (a recursion's outer call, its inner one not written).
    #[test]
    fn a_tail_call_s_value_passes_the_callee_s_exit() {
        let ret = [3u8, 0, 0, 0, 0, 0, 0, 0];
        let mut input = Vec::new();
        input.extend(rec(10, RecordType::Entry, 0x401000));
        input.extend(rec(11, RecordType::Entry, 0x402000));
        for id in carriers(true, 0x401000, &ret) {
            input.extend(carrier_record(11, id));
        }
        input.extend(rec(12, RecordType::Exit, 0x402000));
        input.extend(rec(12, RecordType::Exit, 0x401000));
        // The inner call's value, its EXIT not written: the outer one's EXIT comes later.
        for id in carriers(true, 0x401000, &ret) {
            input.extend(carrier_record(13, id));
        }
        input.extend(rec(14, RecordType::Exit, 0x403000));
        input.extend(rec(15, RecordType::Exit, 0x401000));
        let mut out = Vec::new();
        let done = fold(&input[..], &mut out).unwrap();
        assert_eq!(
            done,
            Folded {
                args: 0,
                retvals: 1,
                dropped: 1
            }
        );
        // ENTRY, ENTRY, EXIT callee, EXIT with its value (8 bytes), EXIT, EXIT.
        assert_eq!(out.len(), 16 * 6 + 8);
        let word = |at: usize| u64::from_le_bytes(out[at + 8..at + 16].try_into().unwrap());
        assert_eq!(word(32) >> 2 & 1, 0, "the callee's EXIT");
        assert_eq!(word(48) >> 2 & 1, 1, "the function's EXIT");
        assert_eq!(&out[64..72], &ret);
        assert_eq!(word(72) >> 2 & 1, 0);
        assert_eq!(word(88) >> 2 & 1, 0, "not the outer call's EXIT");
    }

    /// Reads in pieces of odd sizes: records split across reads.
    struct Pieces<'a>(&'a [u8], usize);

    impl Read for Pieces<'_> {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            self.1 = (self.1 * 7 + 13) % 997 + 1;
            let n = self.1.min(buf.len()).min(self.0.len());
            buf[..n].copy_from_slice(&self.0[..n]);
            self.0 = &self.0[n..];
            Ok(n)
        }
    }

    /// Runs written whole, groups whole, broken and misplaced, records split across
    /// reads: the same bytes and counts as one record at a time.
    #[test]
    fn folding_runs_whole_equals_folding_each_record() {
        let mut data = Vec::new();
        let mut x = 1u64;
        for i in 0..60_000u64 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            let f = 0x1000 + (x >> 60);
            data.extend(rec(i, RecordType::Entry, f));
            match (x >> 33) % 11 {
                0 | 1 => {
                    let payload = (i as u32).to_le_bytes().repeat(1 + (x >> 40) as usize % 4);
                    for id in carriers(false, f, &payload) {
                        data.extend(carrier_record(i, id));
                    }
                }
                2 => {
                    for id in carriers(true, f, &[1, 2, 3, 4]) {
                        data.extend(carrier_record(i, id));
                    }
                }
                // A group cut short, then one of another function.
                3 => {
                    data.extend(carrier_record(
                        i,
                        carriers(false, f, &[9; 8]).next().unwrap(),
                    ));
                    for id in carriers(false, f + 1, &[7; 4]) {
                        data.extend(carrier_record(i, id));
                    }
                }
                _ => {}
            }
            data.extend(rec(i, RecordType::Exit, f));
        }
        data.extend_from_slice(&[1, 2, 3]);
        let mut want = Vec::new();
        let wanted = fold_each(&data[..data.len() - 3], &mut want).unwrap();
        assert!(wanted.args > 0 && wanted.retvals > 0 && wanted.dropped > 0);
        let mut got = Vec::new();
        let done = fold(Pieces(&data, 0), &mut got).unwrap();
        assert_eq!(done, wanted);
        assert!(got == want);
        let mut whole = Vec::new();
        assert_eq!(fold(&data[..], &mut whole).unwrap(), wanted);
        assert!(whole == want);
        // Read a record at a time, a few, or in a chunk that is no whole number of records
        // (rounded up to one): the same.
        for chunk in [1, 16, 40, 4096] {
            let mut small = Vec::new();
            assert_eq!(fold_sized(&data[..], &mut small, chunk).unwrap(), wanted);
            assert!(small == want, "chunk {chunk}");
        }
    }

    #[test]
    fn payload_lengths_follow_the_spec() {
        let vals = parse("f@arg1/s,arg2/x32,retval", 6).unwrap().values;
        let mut p = Vec::new();
        push_str(&mut p, 0x10, b"hello\0");
        push_int(&mut p, 5, 4);
        assert_eq!(payload_len(&vals, false, &p), Some(16));
        assert_eq!(payload_len(&vals, true, &[0; 8]), Some(8));
    }

    #[test]
    fn values_render_as_replay_shows_them() {
        let vals = parse("f@arg1/s,arg2/i32,arg3,arg4/x,arg5/c,arg6/u16", 6)
            .unwrap()
            .values;
        let mut p = Vec::new();
        push_str(&mut p, 0x10, b"wo\nrld\0");
        push_int(&mut p, (-7i64) as u64, 4);
        push_int(&mut p, 1 << 40, 8);
        push_int(&mut p, 255, 8);
        push_int(&mut p, u64::from(b'a'), 1);
        push_int(&mut p, 70000, 2);
        let (text, len) = render(&vals, false, &p, &Enums::default(), &|_| None).unwrap();
        assert_eq!(text, "\"wo\\nrld\", -7, 0x10000000000, 0xff, 'a', 4464");
        assert_eq!(len, p.len().div_ceil(8) * 8);
        assert!(render(&vals, false, &p[..6], &Enums::default(), &|_| None).is_none());
        let mut info = vec![0u8; 40];
        let mut w = Vec::new();
        InfoSpec {
            argspec: vec!["f@arg1".into(), "g@arg2/s".into()],
            retspec: vec!["f@retval".into()],
            enums: Vec::new(),
            auto: false,
        }
        .write_to(&mut w)
        .unwrap();
        info.extend(w);
        let back = read_info_spec(&info).unwrap();
        assert_eq!(back.argspec, ["f@arg1", "g@arg2/s"]);
        assert_eq!(back.retspec, ["f@retval"]);
    }

    #[test]
    fn info_block_lines() {
        let mut w = Vec::new();
        InfoSpec {
            argspec: vec!["f@arg1".into(), "g@arg2/s".into()],
            retspec: vec!["f@retval".into()],
            enums: Vec::new(),
            auto: false,
        }
        .write_to(&mut w)
        .unwrap();
        assert_eq!(
            String::from_utf8(w).unwrap(),
            "argspec:lines=2\nargspec:f@arg1;g@arg2/s\nretspec:f@retval\n"
        );
        // -a, as `uftrace record -a` writes it.
        let mut w = Vec::new();
        let auto = InfoSpec {
            argspec: vec!["f@arg1".into()],
            enums: vec!["enum e { A = 0 }".into()],
            auto: true,
            ..InfoSpec::default()
        };
        auto.write_to(&mut w).unwrap();
        assert_eq!(
            String::from_utf8(w.clone()).unwrap(),
            "argspec:lines=5\nargspec:f@arg1\nargauto:\nretauto:\nenumauto:enum e { A = 0 }\n\
             auto-args:1\n"
        );
        let mut info = vec![0u8; 40];
        info.extend(w);
        assert_eq!(read_info_spec(&info).as_ref(), Some(&auto));
    }
}
