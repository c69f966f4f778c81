//! riscv64: S-mode reads no user page (no SUM), so a user-mode cookie due at an SRET (a
//! snapshot start's, `midway`; a window's, `switch`) is taken at the first user block there:
//! the SRET leaves its target in this vCPU's word, which the conditional callback of every
//! block right after an `ecall` compares with its own address (`midway::on_user_resume`).
//! Other architectures read user pages at the exception return and need no word.

use std::sync::OnceLock;

use crate::vcpu::scoreboard::{self, Scoreboard};

static WORD: OnceLock<Scoreboard> = OnceLock::new();

/// At install: the words, where user-mode cookies may be due at SRETs (`on`).
pub fn install(on: bool) {
    if on {
        let _ = WORD.set(scoreboard::one_word());
    }
}

/// The words, where installed (translation registers the blocks' callbacks on them).
pub fn words() -> Option<&'static Scoreboard> {
    WORD.get()
}

/// An SRET on `vcpu` to user mode at `target` makes a user cookie due at the first user
/// block there; false without the words (the caller reads user pages itself).
pub fn due_at(vcpu: u32, target: u64) -> bool {
    let Some(word) = WORD.get() else {
        return false;
    };
    word.for_vcpu(vcpu, false).set(target);
    true
}
