//! Unwinding a stack cookie after the run: the calls that were open when a run from a
//! snapshot began, from the guest's own tables: an x86-64 kernel's ORC tables where they
//! cover the address, else DWARF CFI (`.eh_frame`, `.debug_frame`), else SFrame
//! (`.sframe`); frame records where none does (and the innermost function's return address
//! where it keeps it on entry).

pub mod cfi;
pub mod image;
pub mod orc;
pub mod sframe;

use qemu_uftrace_engine::arch::{isa, Arch, ExceptionKind, Isa, Mode};
use qemu_uftrace_engine::guest::read_frame_record;
use qemu_uftrace_format::cookie::StackCookie;
use qemu_uftrace_format::pseudo;

use cfi::{Cfa, Rule};
pub use image::Image;

/// How a frame's return address was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Method {
    /// DWARF call frame information.
    Cfi,
    /// SFrame.
    SFrame,
    /// An x86-64 kernel's ORC tables.
    Orc,
    /// The frame-record chain (frame pointers).
    FrameRecord,
    /// The innermost function's return address where a function keeps it on entry (the
    /// link register until it calls, the stack top on x86-64 before it pushes anything),
    /// for code without CFI.
    LeafReturn,
    /// The exception entry between a task's user-mode calls and its kernel calls (a system
    /// call it sleeps in), from the registers its return to user mode restored; or an
    /// exception an arm64 kernel took in its own code, from the registers it saved.
    Exception,
    /// A signal delivery (a pseudo-frame like the engine's `[SIGALRM]` …, shown as
    /// `[signal]`: its number is not known): the CFI of its sigreturn trampoline ('S' in
    /// the CIE's augmentation) restored the interrupted code's registers from the
    /// sigcontext.
    Signal,
}

impl Method {
    pub fn name(self) -> &'static str {
        match self {
            Method::Cfi => "CFI",
            Method::SFrame => "SFrame",
            Method::Orc => "ORC",
            Method::FrameRecord => "frame records",
            Method::LeafReturn => "leaf return address",
            Method::Exception => "exception entry",
            Method::Signal => "signal frame",
        }
    }
}

/// One open call, recovered.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame {
    /// The function's entry (the pc itself where no symbol names one).
    pub func: u64,
    /// Where it returns to.
    pub ret_addr: u64,
    pub method: Method,
}

/// Frames followed at most (a corrupt stack must not loop).
const MAX_FRAMES: usize = 256;

/// DWARF register numbers of the registers a cookie holds.
struct DwarfRegs {
    sp: u16,
    fp: u16,
    /// The link register, on architectures that have one.
    lr: Option<u16>,
}

fn dwarf_regs(arch: Arch) -> DwarfRegs {
    match arch {
        Arch::Aarch64 => DwarfRegs {
            sp: 31,
            fp: 29,
            lr: Some(30),
        },
        Arch::Riscv64 => DwarfRegs {
            sp: 2,
            fp: 8,
            lr: Some(1),
        },
        Arch::X86_64 => DwarfRegs {
            sp: 7,
            fp: 6,
            lr: None,
        },
    }
}

/// The registers of the frame being unwound (`None`: not known in this frame).
#[derive(Debug, Clone, Copy)]
struct Regs {
    pc: u64,
    sp: Option<u64>,
    fp: Option<u64>,
    lr: Option<u64>,
}

/// The saved stack top, and the other stacks the chain went on to.
struct Stack<'a> {
    base: u64,
    bytes: &'a [u8],
    extra: &'a [(u64, Vec<u8>)],
}

impl Stack<'_> {
    fn read_into(&self, addr: u64, out: &mut [u8]) -> Option<()> {
        let regions = std::iter::once((self.base, self.bytes))
            .chain(self.extra.iter().map(|(b, bytes)| (*b, bytes.as_slice())));
        for (base, bytes) in regions {
            let Some(at) = addr.checked_sub(base).and_then(|a| usize::try_from(a).ok()) else {
                continue;
            };
            if let Some(src) = at.checked_add(out.len()).and_then(|end| bytes.get(at..end)) {
                out.copy_from_slice(src);
                return Some(());
            }
        }
        None
    }

    fn read_u64(&self, addr: u64) -> Option<u64> {
        let mut w = [0u8; 8];
        self.read_into(addr, &mut w)?;
        Some(u64::from_le_bytes(w))
    }
}

/// A sigreturn trampoline known by its code, where no CFI describes it: QEMU's aarch64
/// vDSO leaves `__kernel_rt_sigreturn` without (libgcc recognises its two instructions, as
/// here). The kernel's signal frame starts at the stack pointer there; the offsets are of
/// the interrupted registers in it.
struct KnownSigreturn {
    code: &'static [u8],
    pc: u64,
    sp: u64,
    fp: u64,
    lr: u64,
}

fn known_sigreturn(arch: Arch) -> Option<KnownSigreturn> {
    match arch {
        // `mov x8, #139` (rt_sigreturn), `svc #0`. The sigcontext follows the siginfo (128
        // bytes) and the ucontext's first 176; its x0..x30, sp and pc start 8 bytes in.
        Arch::Aarch64 => {
            let regs = 128 + 176 + 8;
            Some(KnownSigreturn {
                code: &[0x68, 0x11, 0x80, 0xd2, 0x01, 0x00, 0x00, 0xd4],
                pc: regs + 32 * 8,
                sp: regs + 31 * 8,
                fp: regs + 29 * 8,
                lr: regs + 30 * 8,
            })
        }
        // glibc's x86-64 `__restore_rt` and the riscv64 vDSO's trampoline have CFI.
        Arch::X86_64 | Arch::Riscv64 => None,
    }
}

struct Unwinder<'a> {
    arch: Arch,
    isa: &'static dyn Isa,
    regs: DwarfRegs,
    stack: Stack<'a>,
    images: &'a [Image],
}

impl Unwinder<'_> {
    fn image(&self, addr: u64) -> Option<&Image> {
        image_at(self.images, addr)
    }

    fn reg(&self, r: &Regs, n: u16) -> Option<u64> {
        if n == self.regs.sp {
            r.sp
        } else if n == self.regs.fp {
            r.fp
        } else if Some(n) == self.regs.lr {
            r.lr
        } else {
            None
        }
    }

    /// Whether `addr` follows a call instruction in a known file's code.
    fn is_return_address(&self, addr: u64) -> bool {
        follows_call_in(self.isa, self.images, addr)
    }

    fn function_at(&self, addr: u64) -> Option<u64> {
        self.image(addr)?.function_at(addr)
    }

    /// The CFI rules for the frame at `pc`, and the address they were looked up at: `pc`
    /// itself where the frame stopped there (`exact`) or where a signal trampoline starts
    /// there, else the call instruction before the return address.
    fn cfi_rules(&self, exact: bool, pc: u64) -> Option<(u64, cfi::Rules)> {
        let asked = cfi::Asked {
            sp: self.regs.sp,
            fp: self.regs.fp,
            lr: self.regs.lr,
        };
        let at = |a: u64| cfi::rules(self.image(a)?, a, asked);
        if !exact {
            // A handler "returns" into its sigreturn trampoline, which follows no call:
            // its rules hold at the address itself. (glibc and the kernel's vDSO put a nop
            // before theirs, inside the entry, for unwinders that always subtract one.)
            if let Some(r) = at(pc).filter(|r| r.signal) {
                return Some((pc, r));
            }
        }
        let lookup = if exact { pc } else { pc.wrapping_sub(1) };
        Some((lookup, at(lookup)?))
    }

    /// Whether `addr` is a sigreturn trampoline that a handler's return address may name.
    fn is_signal_trampoline(&self, addr: u64) -> bool {
        self.cfi_rules(false, addr).is_some_and(|(_, r)| r.signal)
            || self.known_sigreturn_at(addr).is_some()
    }

    /// The known sigreturn trampoline whose code starts at `addr`, if it is one.
    fn known_sigreturn_at(&self, addr: u64) -> Option<KnownSigreturn> {
        let known = known_sigreturn(self.arch)?;
        let end = addr.checked_add(known.code.len() as u64)?;
        let code = self.image(addr)?.code_before(end, known.code.len())?;
        (code == known.code).then_some(known)
    }

    /// One step out of a known sigreturn trampoline that no CFI describes (a handler
    /// returned into it): the interrupted code's registers, from the signal frame.
    fn known_sigreturn_step(&self, r: &Regs) -> Option<(u64, Regs)> {
        let known = self.known_sigreturn_at(r.pc)?;
        let frame = r.sp?;
        let at = |o: u64| self.stack.read_u64(frame.checked_add(o)?);
        let pc = at(known.pc)?;
        let regs = Regs {
            pc,
            sp: Some(at(known.sp)?),
            fp: at(known.fp),
            lr: at(known.lr),
        };
        Some((pc, regs))
    }

    /// One step by CFI: the return address (for a signal trampoline, where the interrupted
    /// code resumes), the caller's registers, and whether this was a signal trampoline.
    fn cfi_step(&self, exact: bool, r: &Regs) -> Option<(u64, Regs, bool)> {
        let (lookup, rules) = self.cfi_rules(exact, r.pc)?;
        let image = self.image(lookup)?;
        let reg = |n: u16| self.reg(r, n);
        let mem = |a: u64| self.stack.read_u64(a);
        let cfa = match rules.cfa {
            Cfa::Register(n, offset) => reg(n)?.checked_add_signed(offset)?,
            Cfa::Expr(e) => cfi::evaluate(image, &rules, e, None, reg, mem)?,
        };
        let apply = |rule: Rule, current: Option<u64>| match rule {
            Rule::Unchanged => current,
            Rule::At(o) => mem(cfa.checked_add_signed(o)?),
            Rule::Value(o) => cfa.checked_add_signed(o),
            Rule::Register(n) => reg(n),
            Rule::AtExpr(e) => mem(cfi::evaluate(image, &rules, e, Some(cfa), reg, mem)?),
            Rule::ValueExpr(e) => cfi::evaluate(image, &rules, e, Some(cfa), reg, mem),
            Rule::Unsupported => None,
        };
        // An unmentioned return address is still in the link register only in the
        // innermost frame; further out it would be the same address again.
        let ra = match rules.ra {
            Rule::Unchanged if !exact => return None,
            rule => self
                .isa
                .strip_authentication(apply(rule, reg(rules.ra_column))?),
        };
        let regs = Regs {
            pc: ra,
            // The CFA is the caller's stack pointer, unless a trampoline's rules say
            // otherwise.
            sp: match rules.sp {
                Rule::Unchanged => Some(cfa),
                rule => apply(rule, r.sp),
            },
            fp: apply(rules.fp, r.fp),
            lr: match self.regs.lr {
                // The interrupted code's link register, from the sigcontext.
                Some(_) if rules.signal => apply(rules.lr, r.lr),
                // The caller's link register still holds what its call put there.
                Some(_) => Some(ra),
                None => None,
            },
        };
        Some((ra, regs, rules.signal))
    }

    /// One step by SFrame: the same as by CFI, from the compact table.
    fn sframe_step(&self, exact: bool, r: &Regs) -> Option<(u64, Regs)> {
        let lookup = if exact { r.pc } else { r.pc.checked_sub(1)? };
        let image = self.image(lookup)?;
        let table = image.sframe.as_ref()?;
        let sf = sframe::SFrame::parse(&table.data, table.addr).ok()?;
        let row = sf.row_at(image.link(lookup))?;
        let base = if row.cfa_base_fp { r.fp? } else { r.sp? };
        let cfa = base.checked_add_signed(row.cfa as i64)?;
        let at = |o: i32| self.stack.read_u64(cfa.checked_add_signed(o as i64)?);
        let ra = match row.ra.or(sf.fixed_ra()) {
            Some(o) => self.isa.strip_authentication(at(o)?),
            // Not saved: still in the link register, in the innermost frame only.
            None if exact => r.lr?,
            None => return None,
        };
        let regs = Regs {
            pc: ra,
            sp: Some(cfa),
            fp: match row.fp {
                Some(o) => Some(at(o)?),
                None => r.fp,
            },
            lr: self.regs.lr.map(|_| ra),
        };
        Some((ra, regs))
    }

    /// One step by ORC (x86-64 kernels).
    fn orc_step(&self, exact: bool, r: &Regs) -> Option<(u64, Regs)> {
        let lookup = if exact { r.pc } else { r.pc.checked_sub(1)? };
        let image = self.image(lookup)?;
        let entry = image.orc.as_ref()?.find(image.link(lookup))?;
        let (ra, sp, fp) = orc::step(&entry, r.sp, r.fp, |a| self.stack.read_u64(a))?;
        let regs = Regs {
            pc: ra,
            sp: Some(sp),
            fp,
            lr: None,
        };
        Some((ra, regs))
    }

    /// Out of a kernel's entry code for an exception it took in its own code, into the code
    /// it interrupted, by the `struct pt_regs` the entry saved: the exception, the
    /// interrupted pc and its registers.
    fn kernel_exception_step(&self, r: &Regs) -> Option<(ExceptionKind, u64, Regs)> {
        let at = r.pc.wrapping_sub(1);
        let image = self.image(at)?;
        let kind = image.exception_entry_at(at)?;
        let regs = match self.arch {
            Arch::Aarch64 => self.arm64_saved_regs(r)?,
            Arch::X86_64 => self.x86_64_saved_regs(image, at, r)?,
            Arch::Riscv64 => return None,
        };
        Some((kind, regs.pc, regs))
    }

    /// arm64: the entry saved `regs[31]`, `sp`, `pc`, `pstate`, then the kernel's own
    /// fields, among them `stackframe`, where the frame pointer points (the interrupted x29
    /// and pc). It is told by its `pc` slot repeating the record's, `pstate` saying EL1h
    /// and `regs[29]` the record's frame pointer.
    fn arm64_saved_regs(&self, r: &Regs) -> Option<Regs> {
        const X29: u64 = 29 * 8;
        const X30: u64 = 30 * 8;
        const SP: u64 = 31 * 8;
        const PC: u64 = SP + 8;
        const PSTATE: u64 = PC + 8;
        const EL1H: u64 = 0b0101;
        let fp = r.fp?;
        let (next, elr) = read_frame_record(self.isa, fp, |a, out| self.stack.read_into(a, out))?;
        let word = |a: u64| self.stack.read_u64(a);
        // `stackframe` follows `pstate` by a few fields, which kernels add to.
        let base = (PSTATE + 8..=PSTATE + 256).step_by(8).find_map(|offset| {
            let base = fp.checked_sub(offset)?;
            let saved = (word(base + PC)?, word(base + PSTATE)?, word(base + X29)?);
            (saved.0 == elr && saved.1 & 0xf == EL1H && saved.2 == next).then_some(base)
        })?;
        Some(Regs {
            pc: elr,
            sp: word(base + SP),
            fp: Some(next),
            lr: word(base + X30).map(|lr| self.isa.strip_authentication(lr)),
        })
    }

    /// x86-64: the entry's ORC entry (`UNWIND_HINT_REGS`) says where the `struct pt_regs`
    /// is (`r15` … `bp` at 32 … `ip` at 128, `cs`, `flags`, `sp` at 152); one saved from user
    /// mode (`cs` at ring 3) is the user cookie's business.
    fn x86_64_saved_regs(&self, image: &Image, at: u64, r: &Regs) -> Option<Regs> {
        const BP: u64 = 4 * 8;
        const IP: u64 = 16 * 8;
        const CS: u64 = IP + 8;
        const SP: u64 = CS + 16;
        let e = image.orc.as_ref()?.find(image.link(at))?;
        if e.kind != orc::Kind::Regs || e.sp_reg != orc::REG_SP {
            return None;
        }
        let regs = r.sp?.checked_add_signed(e.sp_offset.into())?;
        let word = |a: u64| self.stack.read_u64(a);
        let (ip, cs) = (word(regs + IP)?, word(regs + CS)?);
        (cs & 3 == 0 && self.image(ip).is_some()).then(|| Regs {
            pc: ip,
            sp: word(regs + SP),
            fp: word(regs + BP),
            lr: None,
        })
    }

    /// One step by frame records, with the link register for the innermost function.
    fn frame_step(&self, exact: bool, r: &Regs) -> Option<(u64, Regs, Method)> {
        let record = |fp: u64| {
            read_frame_record(self.isa, fp, |addr, out| self.stack.read_into(addr, out))
                .map(|(next, ra)| (next, self.isa.strip_authentication(ra)))
        };
        if exact {
            let here = self.function_at(r.pc);
            // The innermost function's return address before its frame exists: in the
            // link register (when it did not call since, the address follows a call from
            // elsewhere), or on the stack top (x86-64, before `push %rbp`).
            let candidate = match self.regs.lr {
                Some(_) => r.lr,
                None => r.sp.and_then(|sp| self.stack.read_u64(sp)),
            };
            if let Some(ra) = candidate.filter(|&ra| {
                self.is_return_address(ra) && self.function_at(ra.wrapping_sub(1)) != here
            }) {
                let fp = match (r.fp, r.fp.and_then(record)) {
                    // It already saved its record, which returns to the same place.
                    (_, Some((next, saved))) if saved == ra => Some(next),
                    // It saved only its caller's frame pointer, in the return address's
                    // slot (RISC-V GCC's leaves).
                    (Some(fp), Some((_, saved)))
                        if saved > fp
                            && !self.is_return_address(saved)
                            && self.stack.read_u64(saved).is_some() =>
                    {
                        Some(saved)
                    }
                    _ => r.fp,
                };
                let sp = match (self.regs.lr, r.sp) {
                    // A stack top at the end of the address space is no stack.
                    (None, Some(sp)) => Some(sp.checked_add(8)?),
                    _ => None,
                };
                let regs = Regs {
                    pc: ra,
                    sp,
                    fp,
                    lr: None,
                };
                return Some((ra, regs, Method::LeafReturn));
            }
        }
        let fp = r.fp.filter(|&fp| fp != 0)?;
        let (next, ra) = record(fp)?;
        // Callers' records sit higher on a downward-growing stack.
        if !self.is_return_address(ra) || (next != 0 && next <= fp) {
            return None;
        }
        let regs = Regs {
            pc: ra,
            sp: None,
            fp: Some(next),
            lr: None,
        };
        Some((ra, regs, Method::FrameRecord))
    }
}

/// Whether `addr` follows a call instruction in the code of one of `images`: a return
/// into a caller, rather than a task's first jump into its entry code (a Linux task that
/// began under tracing "returns" from its first switch into `ret_from_fork`).
pub fn follows_call(arch: Arch, images: &[Image], addr: u64) -> bool {
    follows_call_in(isa(arch), images, addr)
}

fn follows_call_in(isa: &dyn Isa, images: &[Image], addr: u64) -> bool {
    code_before(images, addr, isa.call_lookbehind())
        .and_then(|before| isa.call_ending_at(Mode::Bits64, addr, before))
        .is_some()
}

/// The image of `images` whose code holds `addr`.
fn image_at(images: &[Image], addr: u64) -> Option<&Image> {
    images.iter().find(|i| i.has_code(addr))
}

/// The `len` bytes of code that end at `addr`, in whichever of `images` holds them.
pub fn code_before(images: &[Image], addr: u64, len: usize) -> Option<&[u8]> {
    image_at(images, addr.wrapping_sub(1))?.code_before(addr, len)
}

/// The calls open in `cookie`'s context, innermost first, as far as the tables and the
/// saved stack reach. The outermost function (the one nobody called: `_start`, a thread's
/// entry) is not among them: only frames whose return address was found are.
pub fn unwind(cookie: &StackCookie, arch: Arch, images: &[Image]) -> Vec<Frame> {
    let u = Unwinder {
        arch,
        isa: isa(arch),
        regs: dwarf_regs(arch),
        stack: Stack {
            base: cookie.stack_base,
            bytes: &cookie.stack,
            extra: &cookie.extra,
        },
        images,
    };
    let mut regs = Regs {
        pc: cookie.pc,
        sp: Some(cookie.sp),
        fp: Some(cookie.fp),
        // A link register signed on entry (arm64 `paciasp`, until `autiasp`) carries its
        // authentication code in the top bits.
        lr: u.regs.lr.map(|_| u.isa.strip_authentication(cookie.lr)),
    };
    let mut frames = Vec::new();
    // Whether the frame's pc is where it stopped (the innermost frame, and the code a
    // signal interrupted) rather than a return address.
    let mut exact = true;
    for _ in 0..MAX_FRAMES {
        // An exception taken in the kernel: its entry, as the engine opens one, and the
        // code it interrupted, where it stopped.
        if let Some((kind, elr, next)) = (!exact).then(|| u.kernel_exception_step(&regs)).flatten()
        {
            frames.push(Frame {
                func: kind.addr(),
                ret_addr: elr,
                method: Method::Exception,
            });
            regs = next;
            exact = true;
            continue;
        }
        let lookup = if exact {
            regs.pc
        } else {
            regs.pc.wrapping_sub(1)
        };
        // An x86-64 kernel's ORC tables first: they are its own unwinder's, and cover its
        // assembly, which its .debug_frame does not.
        let step = u
            .orc_step(exact, &regs)
            .map(|(ra, next)| (ra, next, Method::Orc))
            // A handler's return into a trampoline CFI does not describe (before CFI: the
            // function before it may have CFI that reaches past its end).
            .or_else(|| {
                (!exact)
                    .then(|| u.known_sigreturn_step(&regs))
                    .flatten()
                    .map(|(ra, next)| (ra, next, Method::Signal))
            })
            .or_else(|| {
                u.cfi_step(exact, &regs).map(|(ra, next, signal)| {
                    (ra, next, if signal { Method::Signal } else { Method::Cfi })
                })
            })
            .or_else(|| {
                u.sframe_step(exact, &regs)
                    .map(|(ra, next)| (ra, next, Method::SFrame))
            })
            .or_else(|| u.frame_step(exact, &regs));
        let Some((ra, next, method)) = step else {
            break;
        };
        let signal = method == Method::Signal;
        // The end of the chain, or something that is not a return into known code (nor
        // a handler's into its sigreturn trampoline; a trampoline's "return" resumes the
        // interrupted code anywhere in it).
        let known = if signal {
            u.image(ra).is_some()
        } else {
            u.is_return_address(ra) || u.is_signal_trampoline(ra)
        };
        if ra == 0 || !known {
            break;
        }
        // A caller's frame is above its callee's (the same only for an innermost function
        // with no frame, on a link-register architecture): no progress means a loop.
        if let (Some(old), Some(new)) = (regs.sp, next.sp) {
            if new < old || (new == old && !exact) {
                break;
            }
        }
        frames.push(if signal {
            // The delivery, as the engine opens one: nothing returns to it; the handler's
            // return into the trampoline ends it. Its number is not known: the kernel
            // writes the frame's siginfo only for SA_SIGINFO handlers, and nothing says
            // whether this one is (stale bytes would name the wrong signal).
            Frame {
                func: pseudo::signal_addr(0),
                ret_addr: 0,
                method,
            }
        } else {
            Frame {
                func: u.function_at(lookup).unwrap_or(lookup),
                ret_addr: ra,
                method,
            }
        });
        regs = next;
        exact = signal;
    }
    frames
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A built fixture: its directory (kept while it is used), the program, its symbols.
    type Fixture = (
        tempfile::TempDir,
        Image,
        std::collections::HashMap<String, u64>,
    );

    /// `testdata/<name>.S` built with the host's gcc: the program and its symbols.
    fn fixture(name: &str) -> Fixture {
        let (dir, image, syms) = fixture_by("gcc", name, "");
        assert!(image.eh_frame.is_some());
        (dir, image, syms)
    }

    /// [`fixture`] built by the compiler `cc`, with `head` put before the source's text.
    fn fixture_by(cc: &str, name: &str, head: &str) -> Fixture {
        let dir = tempfile::tempdir().unwrap();
        let src = format!(
            "{}/src/unwind/testdata/{name}.S",
            env!("CARGO_MANIFEST_DIR")
        );
        let text = std::fs::read_to_string(src).unwrap();
        let src = dir.path().join(format!("{name}.S"));
        std::fs::write(&src, format!("{head}{text}")).unwrap();
        let out = dir.path().join(name);
        let status = std::process::Command::new(cc)
            .args(["-nostdlib", "-static", "-no-pie", "-o"])
            .arg(&out)
            .arg(src)
            .status()
            .unwrap_or_else(|e| panic!("{cc} (run scripts/install-deps.sh): {e}"));
        assert!(status.success());
        let bytes = std::fs::read(&out).unwrap();
        use object::{Object, ObjectSymbol};
        let file = object::File::parse(&*bytes).unwrap();
        let syms = file
            .symbols()
            .filter_map(|s| Some((s.name().ok()?.to_string(), s.address())))
            .collect();
        let image = Image::parse(name, &bytes).unwrap();
        (dir, image, syms)
    }

    fn remember() -> Fixture {
        fixture("remember")
    }

    fn cookie(pc: u64, sp: u64, words: &[u64]) -> StackCookie {
        StackCookie {
            machine: Arch::X86_64.elf_machine(),
            tid: 1,
            vcpu: 0,
            time: 0,
            pc,
            sp,
            fp: 0,
            lr: 0,
            stack_base: sp,
            stack: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            extra: Vec::new(),
        }
    }

    #[test]
    fn a_leaf_return_at_the_top_of_the_address_space_ends_the_unwind() {
        let (_dir, image, sym) = remember();
        let images = std::slice::from_ref(&image);
        // Stopped outside every image with a return address on the stack top: a leaf's.
        let at = |sp| unwind(&cookie(0x10, sp, &[sym["after_g"]]), Arch::X86_64, images);
        let frames = at(0x8000);
        assert_eq!(frames[0].method, Method::LeafReturn);
        assert_eq!(frames[0].ret_addr, sym["after_g"]);
        // The same stack's word in the last 8 bytes: its caller's sp would wrap to 0.
        assert_eq!(at(u64::MAX - 7), []);
    }

    #[test]
    fn a_return_address_of_zero_looks_nothing_up() {
        let u = Unwinder {
            arch: Arch::X86_64,
            isa: isa(Arch::X86_64),
            regs: dwarf_regs(Arch::X86_64),
            stack: Stack {
                base: 0x8000,
                bytes: &[],
                extra: &[],
            },
            images: &[],
        };
        let regs = Regs {
            pc: 0,
            sp: Some(0x8000),
            fp: Some(0),
            lr: None,
        };
        assert!(u.sframe_step(false, &regs).is_none());
        assert!(u.orc_step(false, &regs).is_none());
    }

    #[test]
    fn cfi_rows_after_restore_state_hold_in_inner_and_outer_frames() {
        let (_dir, image, sym) = remember();
        let images = std::slice::from_ref(&image);
        // Stopped in g, called by f from its restored state (rbx still pushed), called by
        // _start, whose CFI ends the stack.
        let stack = [sym["after_g"], 0x1111, sym["after_f"]];
        let frames = unwind(&cookie(sym["g"], 0x8000, &stack), Arch::X86_64, images);
        assert_eq!(
            frames,
            [
                Frame {
                    func: sym["g"],
                    ret_addr: sym["after_g"],
                    method: Method::Cfi
                },
                Frame {
                    func: sym["f"],
                    ret_addr: sym["after_f"],
                    method: Method::Cfi
                },
            ]
        );
        // Stopped in f itself after the call returned: the restored row again (CFA rsp+16).
        let frames = unwind(
            &cookie(sym["after_g"], 0x8008, &stack[1..]),
            Arch::X86_64,
            images,
        );
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].ret_addr, sym["after_f"]);
    }

    /// `testdata/sigframe.S`'s stack: `handler` stopped at its entry (its return address,
    /// the trampoline, at 0x8000), the kernel's signal frame above it (the ucontext at
    /// 0x8008, a siginfo 304 bytes on that only SA_SIGINFO handlers get), and `work` interrupted with its frame
    /// at 0x9000 (saved rbp 0, return address after_work).
    fn signal_stack(sym: &std::collections::HashMap<String, u64>) -> Vec<u64> {
        let mut words = vec![0u64; (0x9010 - 0x8000) / 8];
        let mut put = |addr: u64, v: u64| words[(addr - 0x8000) as usize / 8] = v;
        put(0x8000, sym["restore_rt"]);
        let uc = 0x8008;
        put(uc + 120, 0x9000); // rbp
        put(uc + 160, 0x9000); // rsp
        put(uc + 168, sym["in_work"]); // rip
        put(uc + 304, 14); // si_signo, not trusted
        put(0x9000, 0);
        put(0x9008, sym["after_work"]);
        words
    }

    /// The remember fixture's frames (g called by f, called by _start) with the image loaded
    /// `bias` above its link addresses, beside another file's code at its own addresses.
    fn unwind_at_bias(mut image: Image, sym: &std::collections::HashMap<String, u64>, bias: u64) {
        image.bias = bias;
        let (_other_dir, other, _) = fixture("sigframe");
        let at = |name: &str| sym[name] + bias;
        let stack = [at("after_g"), 0x1111, at("after_f")];
        let images = [other, image];
        let frames = unwind(&cookie(at("g"), 0x8000, &stack), Arch::X86_64, &images);
        assert_eq!(
            frames,
            [
                Frame {
                    func: at("g"),
                    ret_addr: at("after_g"),
                    method: Method::Cfi
                },
                Frame {
                    func: at("f"),
                    ret_addr: at("after_f"),
                    method: Method::Cfi
                },
            ]
        );
        // At its link addresses nothing of it is there.
        let frames = unwind(
            &cookie(sym["g"], 0x8000, &[sym["after_g"], 0x1111, sym["after_f"]]),
            Arch::X86_64,
            &images[1..],
        );
        assert!(frames.is_empty(), "{frames:?}");
    }

    #[test]
    fn eh_frame_is_looked_up_at_the_load_bias() {
        // A PIE or a shared library: its .eh_frame's pc-relative addresses resolve to link
        // addresses.
        let (_dir, image, sym) = remember();
        unwind_at_bias(image, &sym, 0x5555_0000_0000);
    }

    #[test]
    fn debug_frame_is_looked_up_at_the_load_bias() {
        // .debug_frame's addresses are absolute, as linked.
        let (_dir, image, sym) = fixture_by("gcc", "remember", ".cfi_sections .debug_frame\n");
        assert!(image.eh_frame.is_none() && image.debug_frame.is_some());
        unwind_at_bias(image, &sym, 0x7f00_1234_0000);
    }

    #[test]
    fn cfi_signal_frames_unwind_to_the_interrupted_code() {
        let (_dir, image, sym) = fixture("sigframe");
        let images = std::slice::from_ref(&image);
        let stack = signal_stack(&sym);
        let frames = unwind(
            &cookie(sym["handler"], 0x8000, &stack),
            Arch::X86_64,
            images,
        );
        let delivery = Frame {
            func: pseudo::signal_addr(0),
            ret_addr: 0,
            method: Method::Signal,
        };
        let work = Frame {
            func: sym["work"],
            ret_addr: sym["after_work"],
            method: Method::Cfi,
        };
        assert_eq!(
            frames,
            [
                Frame {
                    func: sym["handler"],
                    ret_addr: sym["restore_rt"],
                    method: Method::Cfi
                },
                delivery,
                work,
            ]
        );
        // Stopped in the trampoline itself (in rt_sigreturn): its pc is looked up as it
        // is, and the same frames are beneath.
        let frames = unwind(
            &StackCookie {
                stack_base: 0x8000,
                ..cookie(sym["restore_rt"] + 5, 0x8008, &stack)
            },
            Arch::X86_64,
            images,
        );
        assert_eq!(frames, [delivery, work]);
    }

    /// The kernel-exception fixtures' frames: `handler` (returning into the entry code),
    /// the interrupt's entry, `work` where it was interrupted; found by `method`.
    fn crossed(
        sym: &std::collections::HashMap<String, u64>,
        handler: &str,
        method: Method,
    ) -> [Frame; 3] {
        [
            Frame {
                func: sym[handler],
                ret_addr: sym["after_handler"],
                method,
            },
            Frame {
                func: ExceptionKind::Irq.addr(),
                ret_addr: sym["in_work"],
                method: Method::Exception,
            },
            Frame {
                func: sym["work"],
                ret_addr: sym["after_work"],
                method,
            },
        ]
    }

    #[test]
    fn an_exception_the_arm64_kernel_took_in_its_own_code_is_crossed() {
        let (_dir, image, sym) = fixture_by("aarch64-linux-gnu-gcc", "kentry_a64", "");
        // work's record at 0x9000 (x29 0, x30 after_work); the pt_regs at 0x8800 (regs[29]
        // at 232, regs[30] 240, sp 248, pc 256, pstate 264 (EL1h), `stackframe` at 304: the
        // interrupted x29 and pc); the handler's record at 0x8700, chained to `stackframe`.
        let mut words = vec![0u64; (0x9010 - 0x8700) / 8];
        let put = |words: &mut Vec<u64>, addr: u64, v: u64| words[(addr - 0x8700) as usize / 8] = v;
        let base = 0x8800;
        put(&mut words, base + 232, 0x9000);
        put(&mut words, base + 240, sym["after_work"]);
        put(&mut words, base + 248, 0x9000);
        put(&mut words, base + 256, sym["in_work"]);
        put(&mut words, base + 264, 0x3c5);
        put(&mut words, base + 304, 0x9000);
        put(&mut words, base + 312, sym["in_work"]);
        put(&mut words, 0x8700, base + 304);
        put(&mut words, 0x8708, sym["after_handler"]);
        put(&mut words, 0x9008, sym["after_work"]);
        let cookie = StackCookie {
            machine: Arch::Aarch64.elf_machine(),
            fp: 0x8700,
            lr: sym["after_handler"],
            ..cookie(sym["in_handler"], 0x8700, &words)
        };
        let frames = unwind(&cookie, Arch::Aarch64, std::slice::from_ref(&image));
        let expected = crossed(&sym, "el1h_64_irq_handler", Method::LeafReturn);
        assert_eq!(frames, expected);
        let irq = expected[1];
        // A record whose pt_regs does not repeat its pc (no exception saved it) is not
        // crossed.
        put(&mut words, base + 256, sym["in_work"] + 4);
        let cookie = StackCookie {
            stack: words.iter().flat_map(|w| w.to_le_bytes()).collect(),
            ..cookie
        };
        let frames = unwind(&cookie, Arch::Aarch64, std::slice::from_ref(&image));
        assert!(!frames.contains(&irq), "{frames:?}");
    }

    #[test]
    fn an_exception_the_x86_64_kernel_took_in_its_own_code_is_crossed() {
        let (dir, image, sym) = fixture_by("gcc", "kentry_x86", "");
        assert!(image.orc.is_some(), "{}", dir.path().display());
        // The handler's return address at 0x8000; the pt_regs above it (bp at +32, ip at
        // +128, cs +136, sp +152); work's return address at 0x9000.
        let mut words = vec![0u64; (0x9008 - 0x8000) / 8];
        let put = |words: &mut Vec<u64>, addr: u64, v: u64| words[(addr - 0x8000) as usize / 8] = v;
        let regs = 0x8008;
        put(&mut words, 0x8000, sym["after_handler"]);
        put(&mut words, regs + 128, sym["in_work"]);
        put(&mut words, regs + 136, 0x10);
        put(&mut words, regs + 152, 0x9000);
        put(&mut words, 0x9000, sym["after_work"]);
        let frames = unwind(
            &cookie(sym["in_handler"], 0x8000, &words),
            Arch::X86_64,
            std::slice::from_ref(&image),
        );
        let expected = crossed(&sym, "handler", Method::Orc);
        assert_eq!(frames, expected);
        let irq = expected[1];
        // Registers saved from user mode (cs at ring 3) are not crossed.
        put(&mut words, regs + 136, 0x33);
        let frames = unwind(
            &cookie(sym["in_handler"], 0x8000, &words),
            Arch::X86_64,
            std::slice::from_ref(&image),
        );
        assert!(!frames.contains(&irq), "{frames:?}");
    }

    #[test]
    fn a_sigreturn_trampoline_without_cfi_is_known_by_its_code() {
        let (_dir, image, sym) = fixture_by("aarch64-linux-gnu-gcc", "sigframe_a64", "");
        // The handler stopped at its entry (its return address, the trampoline, in x30);
        // the signal frame at its stack pointer 0x8000; work's frame at 0x9000 (its saved
        // x29 0 and x30 after_work), interrupted at in_work.
        let mut words = vec![0u64; (0x9010 - 0x8000) / 8];
        let mut put = |addr: u64, v: u64| words[(addr - 0x8000) as usize / 8] = v;
        put(0x8000 + 544, 0x9000); // x29
        put(0x8000 + 552, sym["after_work"]); // x30
        put(0x8000 + 560, 0x9000); // sp
        put(0x8000 + 568, sym["in_work"]); // pc
        put(0x9008, sym["after_work"]);
        let cookie = StackCookie {
            machine: Arch::Aarch64.elf_machine(),
            lr: sym["restorer"],
            ..cookie(sym["handler"], 0x8000, &words)
        };
        let frames = unwind(&cookie, Arch::Aarch64, std::slice::from_ref(&image));
        assert_eq!(
            frames,
            [
                Frame {
                    func: sym["handler"],
                    ret_addr: sym["restorer"],
                    method: Method::Cfi
                },
                Frame {
                    func: pseudo::signal_addr(0),
                    ret_addr: 0,
                    method: Method::Signal
                },
                Frame {
                    func: sym["work"],
                    ret_addr: sym["after_work"],
                    method: Method::Cfi
                },
            ]
        );
        // Other code is no trampoline: the same stack with the handler returning to
        // after_work's first instruction unwinds no signal frame.
        let frames = unwind(
            &StackCookie {
                lr: sym["in_work"],
                ..cookie
            },
            Arch::Aarch64,
            &[image],
        );
        assert!(
            frames.iter().all(|f| f.method != Method::Signal),
            "{frames:?}"
        );
    }

    #[test]
    fn a_signal_frame_with_an_unreadable_sigcontext_ends_the_chain() {
        let (_dir, image, sym) = fixture("sigframe");
        // The copy ends before the ucontext: the handler's frame, then nothing.
        let stack = &signal_stack(&sym)[..4];
        let frames = unwind(
            &cookie(sym["handler"], 0x8000, stack),
            Arch::X86_64,
            &[image],
        );
        assert_eq!(frames.len(), 1);
        assert_eq!(frames[0].ret_addr, sym["restore_rt"]);
    }

    #[test]
    fn reads_reach_the_other_stacks() {
        // An interrupt handler's stack copied first, the interrupted task's after.
        let main = 5u64.to_le_bytes();
        let extra = vec![(0x9000u64, 7u64.to_le_bytes().to_vec())];
        let s = Stack {
            base: 0x1000,
            bytes: &main,
            extra: &extra,
        };
        assert_eq!(s.read_u64(0x1000), Some(5));
        assert_eq!(s.read_u64(0x9000), Some(7));
        assert_eq!(s.read_u64(0x9004), None);
        assert_eq!(s.read_u64(0x0ff8), None);
    }

    #[test]
    fn a_stack_that_is_not_one_unwinds_to_nothing() {
        let (_dir, image, sym) = remember();
        // A "return address" that follows no call, and a stack copy too short to read.
        let frames = unwind(&cookie(sym["g"], 0x8000, &[0x1234]), Arch::X86_64, &[image]);
        assert!(frames.is_empty());
        let (_dir, image, sym) = remember();
        let frames = unwind(&cookie(sym["g"], 0x8000, &[]), Arch::X86_64, &[image]);
        assert!(frames.is_empty());
    }
}
