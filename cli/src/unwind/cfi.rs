//! DWARF call frame information (`.eh_frame`, `.debug_frame`) read with gimli: the rules
//! that give a frame's caller's registers at one address.

use gimli::{
    BaseAddresses, CfaRule, DebugFrame, EhFrame, Encoding, EndianSlice, EvaluationResult, Format,
    LittleEndian, Location, Register, RegisterRule, UnwindContext, UnwindExpression, UnwindSection,
    Value,
};

use super::image::{Image, Table};

type Slice<'a> = EndianSlice<'a, LittleEndian>;

/// A DWARF expression in one of an image's CFI sections.
pub type Expr = UnwindExpression<usize>;

/// How to find one register of the caller: the rules this unwinder follows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rule {
    /// Not mentioned: a callee-saved register the function left alone, or the return
    /// address still in the link register (a leaf).
    Unchanged,
    /// Saved at CFA + offset.
    At(i64),
    /// Is CFA + offset.
    Value(i64),
    /// Is another register's value.
    Register(u16),
    /// Saved at the address the expression computes (the CFA pushed first): a signal
    /// trampoline's registers in the sigcontext.
    AtExpr(Expr),
    /// Is the value the expression computes (the CFA pushed first).
    ValueExpr(Expr),
    /// A rule this unwinder does not follow.
    Unsupported,
}

/// How to find the CFA.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cfa {
    /// A register's value plus an offset.
    Register(u16, i64),
    /// What an expression computes (a signal trampoline's: the interrupted stack pointer,
    /// read from the sigcontext).
    Expr(Expr),
}

/// Which of an image's CFI sections an entry came from (its expressions point into it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Section {
    EhFrame,
    DebugFrame,
}

/// The rules at one address: the CFA, the return address, the frame pointer and the link
/// register.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Rules {
    pub cfa: Cfa,
    pub ra: Rule,
    /// The stack pointer's (`Unchanged`: the CFA is the caller's stack pointer).
    pub sp: Rule,
    pub fp: Rule,
    /// The link register's, on architectures that have one (`Unchanged` elsewhere).
    pub lr: Rule,
    /// The return-address column of the entry's CIE.
    pub ra_column: u16,
    /// The CIE's augmentation has 'S': a signal trampoline, whose "caller" is the code the
    /// signal interrupted, with every register restored from the sigcontext (its pc is
    /// where execution resumes, not a return address).
    pub signal: bool,
    pub section: Section,
}

fn rule(r: RegisterRule<usize>) -> Rule {
    match r {
        RegisterRule::Undefined | RegisterRule::SameValue => Rule::Unchanged,
        RegisterRule::Offset(o) => Rule::At(o),
        RegisterRule::ValOffset(o) => Rule::Value(o),
        RegisterRule::Register(Register(n)) => Rule::Register(n),
        RegisterRule::Expression(e) => Rule::AtExpr(e),
        RegisterRule::ValExpression(e) => Rule::ValueExpr(e),
        _ => Rule::Unsupported,
    }
}

/// The DWARF numbers of the registers whose rules are asked for.
#[derive(Debug, Clone, Copy)]
pub struct Asked {
    pub sp: u16,
    pub fp: u16,
    pub lr: Option<u16>,
}

fn rules_in<'a, S: UnwindSection<Slice<'a>>>(
    section: &S,
    which: Section,
    table: &Table,
    bases: &BaseAddresses,
    addr: u64,
    asked: Asked,
) -> Option<Rules> {
    let index = table
        .fde_index
        .get_or_init(|| qemu_uftrace_symbols::fde_index(section, bases));
    let i = index.partition_point(|&(start, _, _)| start <= addr);
    let &(start, end, offset) = index.get(i.checked_sub(1)?)?;
    if !(start..end).contains(&addr) {
        return None;
    }
    let mut ctx = UnwindContext::new();
    let fde = section
        .fde_from_offset(bases, S::Offset::from(offset), S::cie_from_offset)
        .ok()?;
    let ra_column = fde.cie().return_address_register().0;
    let signal = fde.is_signal_trampoline();
    let row = fde
        .unwind_info_for_address(section, bases, &mut ctx, addr)
        .ok()?;
    let cfa = match row.cfa() {
        CfaRule::RegisterAndOffset { register, offset } => Cfa::Register(register.0, *offset),
        CfaRule::Expression(e) => Cfa::Expr(*e),
    };
    Some(Rules {
        cfa,
        ra: rule(row.register(Register(ra_column))),
        sp: rule(row.register(Register(asked.sp))),
        fp: rule(row.register(Register(asked.fp))),
        lr: asked
            .lr
            .map_or(Rule::Unchanged, |lr| rule(row.register(Register(lr)))),
        ra_column,
        signal,
        section: which,
    })
}

fn eh_frame(t: &Table) -> (EhFrame<Slice<'_>>, BaseAddresses) {
    let mut section = EhFrame::new(&t.data, LittleEndian);
    section.set_address_size(8);
    (section, BaseAddresses::default().set_eh_frame(t.addr))
}

fn debug_frame(t: &Table) -> DebugFrame<Slice<'_>> {
    let mut section = DebugFrame::new(&t.data, LittleEndian);
    section.set_address_size(8);
    section
}

/// The rules for guest address `addr` in `image`'s tables (`.eh_frame` first, then
/// `.debug_frame`); `None` where no entry covers it. Both are looked up at the link address:
/// the index holds `.eh_frame`'s pc-relative addresses resolved against the section's link
/// address, and `.debug_frame`'s absolute ones as linked.
pub fn rules(image: &Image, addr: u64, asked: Asked) -> Option<Rules> {
    let addr = image.link(addr);
    if let Some(t) = &image.eh_frame {
        let (section, bases) = eh_frame(t);
        if let Some(r) = rules_in(&section, Section::EhFrame, t, &bases, addr, asked) {
            return Some(r);
        }
    }
    if let Some(t) = &image.debug_frame {
        let section = debug_frame(t);
        let bases = BaseAddresses::default();
        if let Some(r) = rules_in(&section, Section::DebugFrame, t, &bases, addr, asked) {
            return Some(r);
        }
    }
    None
}

/// Expression steps followed at most (a damaged expression must not loop).
const MAX_EXPR_STEPS: u32 = 64;

/// What `expr` (from `rules`' section of `image`) computes, with `initial` pushed first
/// (the CFA, for a register's rule), registers from `reg` and 8-byte memory words from
/// `mem`. `None` when it needs what is not known.
pub fn evaluate(
    image: &Image,
    rules: &Rules,
    expr: Expr,
    initial: Option<u64>,
    reg: impl Fn(u16) -> Option<u64>,
    mem: impl Fn(u64) -> Option<u64>,
) -> Option<u64> {
    let expression = match rules.section {
        Section::EhFrame => expr.get(&eh_frame(image.eh_frame.as_ref()?).0),
        Section::DebugFrame => expr.get(&debug_frame(image.debug_frame.as_ref()?)),
    }
    .ok()?;
    let encoding = Encoding {
        address_size: 8,
        format: Format::Dwarf32,
        version: 4,
    };
    let mut eval = expression.evaluation(encoding);
    eval.set_max_iterations(MAX_EXPR_STEPS);
    if let Some(v) = initial {
        eval.set_initial_value(v);
    }
    let mut step = eval.evaluate().ok()?;
    loop {
        step = match step {
            EvaluationResult::Complete => break,
            EvaluationResult::RequiresRegister { register, .. } => {
                let v = reg(register.0)?;
                eval.resume_with_register(Value::Generic(v)).ok()?
            }
            EvaluationResult::RequiresMemory { address, size, .. } => {
                let word = mem(address)?;
                let v = match size {
                    8 => word,
                    s @ 1..=7 => word & ((1u64 << (8 * u32::from(s))) - 1),
                    _ => return None,
                };
                eval.resume_with_memory(Value::Generic(v)).ok()?
            }
            _ => return None,
        };
    }
    match eval.as_result() {
        [piece] => match piece.location {
            Location::Address { address } => Some(address),
            Location::Value { value } => value.to_u64(!0).ok(),
            _ => None,
        },
        _ => None,
    }
}
