//! The SFrame reader (`cli/src/unwind/sframe.rs`): a `.sframe` section of a guest's
//! program or library, read to unwind a saved stack. Its counts and offsets are the file's:
//! refused or read, never a panic (overflow checks on) or an allocation past the input's
//! size.
#![no_main]

use libfuzzer_sys::fuzz_target;
use qemu_uftrace::unwind::sframe::SFrame;

fuzz_target!(|data: &[u8]| {
    // The section's load address: bytes the header does not use vary it (0 when short).
    let addr = data
        .get(28..36)
        .map_or(0, |w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])));
    let Ok(sf) = SFrame::parse(data, addr) else {
        return;
    };
    let _ = sf.fixed_ra();
    for fde in sf.fdes.iter().take(64) {
        let _ = sf.rows(fde);
        for pc in [
            fde.start,
            fde.start.wrapping_add(u64::from(fde.size) / 2),
            fde.start.wrapping_sub(1),
            u64::MAX,
        ] {
            let _ = sf.row_at(pc);
        }
    }
});
