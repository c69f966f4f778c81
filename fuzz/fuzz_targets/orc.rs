//! The ORC reader and stepper (`cli/src/unwind/orc.rs`): a kernel's `.orc_unwind_ip` and
//! `.orc_unwind` sections, and one unwind step over a stack of the same bytes. The first
//! byte splits the input between the sections; any bytes are refused or read, and any
//! entry steps or stops, never a panic (overflow checks on).
#![no_main]

use libfuzzer_sys::fuzz_target;
use qemu_uftrace::unwind::orc::{step, Orc};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else {
        return;
    };
    // Whole entries on both sides, as many of each as the byte says.
    let n = (usize::from(split)).min(rest.len() / 10);
    let (ips, rest) = rest.split_at(4 * n);
    let (entries, stack) = rest.split_at((6 * n).min(rest.len()));
    let word = |at: usize| {
        stack
            .get(at..at.checked_add(8)?)
            .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
    };
    let base = word(0).unwrap_or(0);
    let Ok(orc) = Orc::parse(ips, base, entries) else {
        return;
    };
    let _ = orc.entry_count();
    // A stack at `base`: its words are the stack's, from byte 8 on.
    let read = |addr: u64| {
        word(
            usize::try_from(addr.checked_sub(base)?)
                .ok()?
                .checked_add(8)?,
        )
    };
    for ip in [
        base,
        base.wrapping_add(4 * n as u64),
        word(8).unwrap_or(0),
        u64::MAX,
    ] {
        if let Some(e) = orc.find(ip) {
            for (sp, bp) in [
                (word(16), word(24)),
                (Some(base), Some(base)),
                (Some(0), Some(u64::MAX)),
            ] {
                let _ = step(&e, sp, bp, read);
            }
        }
    }
});
