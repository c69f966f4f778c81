//! User mode with the host's address randomisation off: what keeps QEMU's own threads from
//! moving the guest's mappings. qemu-user maps the guest where the host's `mmap` puts it. A
//! thread's first `malloc` maps 128 MiB, then unmaps its unaligned ends; a mapping QEMU's
//! main thread makes between the two lands below that reservation, and every later guest
//! mapping with it. QEMU's RCU thread and the plugin's threads each do this once, when the
//! scheduler lets them: under two test suites at once a guest's libc moved in about one
//! recording in twenty, and with every `munmap` 2 ms late (strace's fault injection) in
//! every one. With one arena (`glibc.malloc.arena_max=1`, a tunable of the host's glibc for
//! QEMU alone) no thread maps its own. The record command sets it for the first program's
//! QEMU, the plugin for the QEMU it runs for an exec'd program.

/// The tunable.
const ONE_ARENA: &[u8] = b"glibc.malloc.arena_max=1";

/// The variable.
pub const NAME: &str = "GLIBC_TUNABLES";

/// QEMU's own environment variables that set or unset the guest's variables, as `-E`/`-U`
/// do: where one is set, the user has a say over the variable that is not second-guessed.
pub const QEMU_ENV_OPTIONS: [&str; 2] = ["QEMU_SET_ENV", "QEMU_UNSET_ENV"];

/// What QEMU is run with.
#[derive(Debug, PartialEq, Eq)]
pub struct OneArena {
    /// `GLIBC_TUNABLES` for QEMU.
    pub tunables: Vec<u8>,
    /// QEMU's options, after the user's, that give the guest its environment as it was: the
    /// value it had back (`-E`) or none (`-U`).
    pub guest_words: [Vec<u8>; 2],
}

/// For a QEMU whose environment has `GLIBC_TUNABLES` at `current`; `None` where the guest's
/// environment could not be kept as it was: a value `-E` would split (at a comma), or
/// `user_says` (the user's own `-E`/`-U` of the variable, or `QEMU_SET_ENV`/
/// `QEMU_UNSET_ENV`, applied in an order not worth second-guessing).
pub fn one_arena(current: Option<&[u8]>, user_says: bool) -> Option<OneArena> {
    if user_says {
        return None;
    }
    match current {
        None => Some(OneArena {
            tunables: ONE_ARENA.to_vec(),
            guest_words: [b"-U".to_vec(), NAME.as_bytes().to_vec()],
        }),
        Some(v) if v.contains(&b',') => None,
        Some(v) => Some(OneArena {
            tunables: [v, b":", ONE_ARENA].concat(),
            guest_words: [b"-E".to_vec(), [NAME.as_bytes(), b"=", v].concat()],
        }),
    }
}

/// Whether QEMU's option `name` with `value` says something of the variable (`-E`, `-U`).
pub fn touches(name: &str, value: &[u8]) -> bool {
    matches!(name.trim_start_matches('-'), "E" | "U")
        && value.windows(NAME.len()).any(|w| w == NAME.as_bytes())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_arena_for_qemu_and_the_guest_s_environment_as_it_was() {
        let words = |a: OneArena| {
            let s = |b: Vec<u8>| String::from_utf8(b).unwrap();
            (s(a.tunables), a.guest_words.map(s))
        };
        assert_eq!(
            one_arena(None, false).map(words),
            Some((
                "glibc.malloc.arena_max=1".into(),
                ["-U".into(), "GLIBC_TUNABLES".into()]
            ))
        );
        assert_eq!(
            one_arena(Some(b"glibc.malloc.check=3"), false).map(words),
            Some((
                "glibc.malloc.check=3:glibc.malloc.arena_max=1".into(),
                ["-E".into(), "GLIBC_TUNABLES=glibc.malloc.check=3".into()]
            ))
        );
        // What `-E` would split, and the user's own say over it: left as it was.
        assert_eq!(one_arena(Some(b"a=1,b"), false), None);
        assert_eq!(one_arena(None, true), None);
        assert!(touches("U", b"GLIBC_TUNABLES"));
        assert!(touches("-E", b"A=1,GLIBC_TUNABLES=x"));
        assert!(!touches("E", b"A=1") && !touches("L", b"/GLIBC_TUNABLES"));
    }
}
