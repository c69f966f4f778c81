//! Frames recovered by unwinding, open beneath the engine's own. `super::splice` writes them
//! at the start of a task that began mid-way (`super::recover`) and at each marker where the
//! engine resynced or was switched on (`super::resync`). The engine knew nothing of
//! those frames: its depths start at 0 above them, and it wrote each return past the bottom
//! of its stack as an exit to the return's target (`Engine::outer_return`). Here such a
//! return is matched to the recovered frame that returns there, and every other record moves
//! down by the frames still open.
//!
//! `rewrite_file` streams a task's `.dat` file through a `Rewriter` in one pass: the files
//! can be gigabytes.

use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use qemu_uftrace_format::record::{self, Record, RecordType, RECORD_SIZE};
use qemu_uftrace_format::{addr48, MAX_STACK};

use qemu_uftrace_format::cookie::StackCookie;
use qemu_uftrace_format::Arch;

use qemu_uftrace_engine::arch::ExceptionKind;

use crate::unwind::{self, Frame, Image, Method};

/// The user event that marks the end of recovered frames (`events.txt`).
pub const UNWOUND_EVENT: u64 = qemu_uftrace_format::events::UNWOUND;
pub const UNWOUND_EVENT_NAME: &str = "qemu:unwound";

/// A record at `depth`, clamped to the deepest depth the format holds.
pub fn rec(time: u64, kind: RecordType, depth: usize, addr: u64) -> Record {
    Record {
        time,
        kind,
        depth: (depth as u16).min(MAX_STACK - 1),
        addr: addr48(addr),
    }
}

/// What became of a record of the engine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pushed {
    /// Written, beneath the frames still open.
    Moved,
    /// A return past the bottom that closed recovered frames.
    Matched,
    /// A return past the bottom that matched none: nothing written for it (the caller
    /// decides whether a LOST record says so).
    Unmatched,
}

/// Recovered frames and the engine's records above them.
#[derive(Debug, Default)]
pub struct Beneath<'a> {
    /// Outermost first.
    frames: &'a [Frame],
    /// How many of them are still open.
    open: usize,
    /// How many frames the engine itself had open after its last record.
    engine_open: usize,
}

impl<'a> Beneath<'a> {
    /// Writes the entries of `frames` (outermost first) at `time`, then the marker that ends
    /// them (none when there are no frames).
    pub fn open(frames: &'a [Frame], time: u64, out: &mut Vec<Record>) -> Self {
        Self::open_marked(frames, time, out, UNWOUND_EVENT)
    }

    /// [`Beneath::open`], the frames ended by user event `marker` (a switch on's
    /// `qemu:opened`).
    pub fn open_marked(frames: &'a [Frame], time: u64, out: &mut Vec<Record>, marker: u64) -> Self {
        for (d, f) in frames.iter().enumerate() {
            out.push(rec(time, RecordType::Entry, d, f.func));
        }
        if !frames.is_empty() {
            out.push(rec(time, RecordType::Event, frames.len(), marker));
        }
        Beneath {
            frames,
            open: frames.len(),
            engine_open: 0,
        }
    }

    /// How many recovered frames are still open.
    pub fn depth(&self) -> usize {
        self.open
    }

    /// Whether any frame was recovered at all.
    pub fn any(&self) -> bool {
        !self.frames.is_empty()
    }

    /// Every recovered frame still open closes at `time` (the engine closed its own there).
    pub fn close_all(&mut self, time: u64, out: &mut Vec<Record>) {
        self.close_down_to(0, time, out);
        self.engine_open = 0;
    }

    fn close_down_to(&mut self, j: usize, time: u64, out: &mut Vec<Record>) {
        for d in (j..self.open).rev() {
            out.push(rec(time, RecordType::Exit, d, self.frames[d].func));
        }
        self.open = self.open.min(j);
    }

    /// One record of the engine's.
    pub fn push(&mut self, r: Record, out: &mut Vec<Record>) -> Pushed {
        let depth = r.depth as usize;
        match r.kind {
            RecordType::Exit if self.engine_open == 0 => {
                // A return past the bottom: its address is the return's target.
                let frames = self.frames;
                let Some(j) = (0..self.open)
                    .rev()
                    .find(|&j| addr48(frames[j].ret_addr) == r.addr)
                else {
                    return Pushed::Unmatched;
                };
                // A handler's return into its sigreturn trampoline ends the signal's
                // delivery too (`rt_sigreturn` follows at once).
                let j = match j.checked_sub(1) {
                    Some(d) if frames[d].method == Method::Signal => d,
                    _ => j,
                };
                // Frames above it that the unwinder saw but that returned unseen close here
                // too.
                self.close_down_to(j, r.time, out);
                return Pushed::Matched;
            }
            RecordType::Entry => self.engine_open = depth + 1,
            RecordType::Exit | RecordType::Lost | RecordType::Event => self.engine_open = depth,
        }
        out.push(rec(r.time, r.kind, depth + self.open, r.addr));
        Pushed::Moved
    }
}

/// One cookie file unwound: its frames, outermost first, and the cookie.
pub fn unwind_cookie(path: &Path, images: &[Image]) -> Result<(Vec<unwind::Frame>, StackCookie)> {
    let cookie = read_cookie(path)?;
    let frames = unwind_read(path, &cookie, images)?;
    Ok((frames, cookie))
}

/// One cookie file read.
pub fn read_cookie(path: &Path) -> Result<StackCookie> {
    let bytes = std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?;
    StackCookie::decode(&bytes).with_context(|| path.display().to_string())
}

/// A cookie read from `path` unwound with `images`: its frames, outermost first.
pub fn unwind_read(
    path: &Path,
    cookie: &StackCookie,
    images: &[Image],
) -> Result<Vec<unwind::Frame>> {
    let arch = Arch::from_elf_machine(cookie.machine)
        .with_context(|| format!("{}: unknown ELF machine {}", path.display(), cookie.machine))?;
    let mut frames = unwind::unwind(cookie, arch, images);
    frames.reverse();
    Ok(frames)
}

/// The exception a task's user-mode code took where it resumes at `pc`: a system call if
/// the instruction before is one (AArch64 `svc #0`, x86-64 `syscall`, RISC-V `ecall`), an
/// interrupt otherwise.
pub fn exception_before(pc: u64, machine: u16, images: &[Image]) -> ExceptionKind {
    const SVC0: [u8; 4] = 0xd400_0001u32.to_le_bytes();
    const SYSCALL: [u8; 2] = [0x0f, 0x05];
    const ECALL: [u8; 4] = 0x0000_0073u32.to_le_bytes();
    let call: &[u8] = match Arch::from_elf_machine(machine) {
        Some(Arch::Aarch64) => &SVC0,
        Some(Arch::X86_64) => &SYSCALL,
        Some(Arch::Riscv64) => &ECALL,
        _ => &[],
    };
    let is_svc = !call.is_empty() && unwind::code_before(images, pc, call.len()) == Some(call);
    if is_svc {
        ExceptionKind::Svc
    } else {
        ExceptionKind::Irq
    }
}

/// A task's calls open in the kernel (`kernel`, outermost first) over those of the user-mode
/// code that entered it (`user`, unwound from `cookie`, its context where it resumes, with
/// `images`): the user frames, the exception they took, then the kernel's.
pub fn under_user(
    user: Vec<Frame>,
    cookie: &StackCookie,
    images: &[Image],
    kernel: Vec<Frame>,
) -> Vec<Frame> {
    let mut frames = user;
    frames.push(Frame {
        func: exception_before(cookie.pc, cookie.machine, images).addr(),
        ret_addr: cookie.pc,
        method: Method::Exception,
    });
    frames.extend(kernel);
    frames
}

/// A pass over one task's records.
pub trait Rewriter {
    /// One record in, any number out.
    fn push(&mut self, r: Record, out: &mut Vec<Record>);
    /// After the last record (or, for an empty or missing file, instead of any).
    fn finish(&mut self, _out: &mut Vec<Record>) {}
}

/// Rewrites task file `dat` through `pass` in one streaming pass. A missing file counts as
/// empty, and is written only if the pass writes something. A half-written last record is
/// kept as it was, for the assembly's own trimming to report.
pub fn rewrite_file(dat: &Path, pass: &mut impl Rewriter) -> Result<()> {
    let mut input: Box<dyn Read> = match std::fs::File::open(dat) {
        Ok(f) => Box::new(std::io::BufReader::with_capacity(1 << 20, f)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let mut out = Vec::new();
            pass.finish(&mut out);
            if out.is_empty() {
                return Ok(());
            }
            Box::new(std::io::empty())
        }
        Err(e) => return Err(e).with_context(|| format!("cannot read {}", dat.display())),
    };
    let mut bad = None;
    // Each task's file is rewritten whole: a sync per file cost most of a 100-task
    // recovery, and the data directory is only complete once the assembly ends anyway.
    crate::atomic_file::replace_unsynced(dat, |w| {
        let mut buf = vec![0u8; 1 << 20];
        let mut have = 0;
        let mut out = Vec::new();
        // A read's records encoded into one write: one `write_all` per record through the
        // `dyn Write` took most of the rewrite of a 2.4 GB trace (~7 s after a VM's boot).
        let mut bytes = Vec::with_capacity(buf.len());
        loop {
            let n = input.read(&mut buf[have..])?;
            have += n;
            let whole = have - have % RECORD_SIZE;
            if n == 0 || whole == buf.len() {
                for chunk in buf[..whole].chunks_exact(RECORD_SIZE) {
                    let word: &[u8; RECORD_SIZE] = chunk.try_into().expect("a record's bytes");
                    match record::decode(word) {
                        Ok(r) => pass.push(r, &mut out),
                        Err(e) => {
                            bad = Some(e.0);
                            return Err(std::io::Error::other("bad record"));
                        }
                    }
                }
                if n == 0 {
                    pass.finish(&mut out);
                }
                for r in out.drain(..) {
                    bytes.extend_from_slice(&record::encode(
                        r.time,
                        r.kind,
                        r.depth as u32,
                        r.addr,
                    ));
                }
                w.write_all(&bytes)?;
                bytes.clear();
                buf.copy_within(whole..have, 0);
                have -= whole;
                if n == 0 {
                    return w.write_all(&buf[..have]);
                }
            }
        }
    })
    .map_err(|e| match bad {
        Some(word) => anyhow::anyhow!("{}: bad record word {word:#x}", dat.display()),
        None => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use testing::{drawn, frame};
    use RecordType::*;

    #[test]
    fn records_move_beneath_and_a_return_to_an_outer_frame_closes_those_between() {
        let frames = [frame(0x100, 0x50), frame(0x200, 0x110), frame(0x300, 0x210)];
        let mut out = Vec::new();
        let mut b = Beneath::open(&frames, 5, &mut out);
        assert_eq!(b.push(rec(6, Entry, 0, 0x400), &mut out), Pushed::Moved);
        assert_eq!(b.push(rec(7, Exit, 0, 0x400), &mut out), Pushed::Moved);
        assert_eq!(b.push(rec(8, Exit, 0, 0x110), &mut out), Pushed::Matched);
        assert_eq!(b.push(rec(9, Exit, 0, 0x999), &mut out), Pushed::Unmatched);
        assert_eq!(b.depth(), 1);
        let got = drawn(&out);
        assert_eq!(
            got,
            [
                (5, Entry, 0, 0x100),
                (5, Entry, 1, 0x200),
                (5, Entry, 2, 0x300),
                (5, Event, 3, UNWOUND_EVENT),
                (6, Entry, 3, 0x400),
                (7, Exit, 3, 0x400),
                (8, Exit, 2, 0x300),
                (8, Exit, 1, 0x200),
            ]
        );
    }

    struct Count(usize);
    impl Rewriter for Count {
        fn push(&mut self, r: Record, out: &mut Vec<Record>) {
            self.0 += 1;
            out.push(r);
        }
        fn finish(&mut self, out: &mut Vec<Record>) {
            out.push(rec(99, Lost, 0, 0));
        }
    }

    #[test]
    fn a_missing_file_is_written_only_when_the_pass_writes_something() {
        let dir = tempfile::tempdir().unwrap();
        let dat = dir.path().join("3.dat");
        rewrite_file(&dat, &mut Count(0)).unwrap();
        let back = record::decode_all(&std::fs::read(&dat).unwrap()).unwrap();
        assert_eq!(back, [rec(99, Lost, 0, 0)]);
        struct Nothing;
        impl Rewriter for Nothing {
            fn push(&mut self, _: Record, _: &mut Vec<Record>) {}
        }
        let other = dir.path().join("4.dat");
        rewrite_file(&other, &mut Nothing).unwrap();
        assert!(!other.exists());
    }

    #[test]
    fn a_bad_record_word_is_one_line_and_the_file_is_kept() {
        let dir = tempfile::tempdir().unwrap();
        let dat = dir.path().join("3.dat");
        let bytes = [0xffu8; RECORD_SIZE];
        std::fs::write(&dat, bytes).unwrap();
        let e = rewrite_file(&dat, &mut Count(0)).unwrap_err();
        assert!(format!("{e:#}").contains("bad record word"), "{e:#}");
        assert_eq!(std::fs::read(&dat).unwrap(), bytes);
    }
}

/// What the tests of the splice that writes beneath draw streams with.
#[cfg(test)]
pub(crate) mod testing {
    use super::*;

    /// A record as drawn (depth and address as written).
    pub fn r(time: u64, kind: RecordType, depth: u16, addr: u64) -> Record {
        Record {
            time,
            kind,
            depth,
            addr,
        }
    }

    /// A frame unwound by CFI.
    pub fn frame(func: u64, ret_addr: u64) -> Frame {
        Frame {
            func,
            ret_addr,
            method: Method::Cfi,
        }
    }

    /// A stream as (time, kind, depth, address), to compare with a drawn one.
    pub fn drawn(out: &[Record]) -> Vec<(u64, RecordType, u16, u64)> {
        out.iter()
            .map(|x| (x.time, x.kind, x.depth, x.addr))
            .collect()
    }
}
