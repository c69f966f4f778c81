//! Stack cookies: what the plugin saves of a context whose call stack it found already open
//! (a run that starts from a snapshot, `-loadvm` / `-incoming`), for the CLI to unwind after
//! the run with the guest's own tables. Not a uftrace file: uftrace ignores
//! `unwind-<tid>.stack`, and `record` removes it once the frames are in `<tid>.dat`.
//!
//! Layout (little-endian): the magic `QUSTACK\x01`, the ELF machine (u16), 6 bytes of zero,
//! the task (u32), the vCPU (u32), the time of the capture (u64), pc, sp, the frame-pointer
//! register, the link register (u64 each; 0 where the architecture has none or it could not
//! be read), the stack copy's start address (u64) and length (u64), then the copy; then,
//! optionally, copies of other stacks the frame-record chain leads to (an interrupt handler
//! runs on its own stack and its chain goes on on the interrupted task's): each its start
//! address (u64), length (u64) and bytes.

/// A cookie file's name for task `tid` (the plugin's task id, before `record` renumbers).
pub fn file_name(tid: u32) -> String {
    format!("unwind-{tid}.stack")
}

/// The task a cookie file name stands for.
pub fn tid_of(name: &str) -> Option<u32> {
    name.strip_prefix("unwind-")?
        .strip_suffix(".stack")?
        .parse()
        .ok()
}

/// The name of task `tid`'s second cookie, of its user-mode context: an OS task found
/// asleep in the kernel has its user-mode calls open too, under the kernel's. The plugin
/// saves them as the task first returns to user mode (the user registers are live there).
pub fn user_file_name(tid: u32) -> String {
    format!("unwind-{tid}.user.stack")
}

/// The task a user-mode cookie file name stands for.
pub fn user_tid_of(name: &str) -> Option<u32> {
    name.strip_prefix("unwind-")?
        .strip_suffix(".user.stack")?
        .parse()
        .ok()
}

/// Resync cookies: where a return matched nothing and no frame record told the stack, the
/// plugin saves a cookie of task `tid` numbered `seq` and the engine writes a marker event
/// naming `seq` in that task's stream ([`resync_marker`]); the CLI puts the unwound frames
/// there and removes both.
pub fn resync_file_name(tid: u32, seq: u32) -> String {
    format!("resync-{tid}-{seq}.stack")
}

/// The task and number a resync cookie file name stands for.
pub fn resync_of(name: &str) -> Option<(u32, u32)> {
    let (tid, seq) = name
        .strip_prefix("resync-")?
        .strip_suffix(".stack")?
        .split_once('-')?;
    Some((tid.parse().ok()?, seq.parse().ok()?))
}

/// The name of resync cookie `seq`'s user-mode part: a window switched on while task `tid`
/// ran in the kernel (a system call, an interrupt) has its user-mode calls open beneath the
/// kernel's. The plugin saves them as the task first returns to user mode (the user
/// registers are live there), as for a snapshot's start ([`user_file_name`]).
pub fn resync_user_file_name(tid: u32, seq: u32) -> String {
    format!("resync-{tid}-{seq}.user.stack")
}

/// The task and number a resync cookie's user-mode part's file name stands for.
pub fn resync_user_of(name: &str) -> Option<(u32, u32)> {
    resync_of(&format!("{}.stack", name.strip_suffix(".user.stack")?))
}

/// Resync cookies saved at most per process: each is a stack copy (32 KiB); past them the
/// engine guesses as without.
pub const MAX_RESYNC_COOKIES: u32 = 1024;

/// Process images (user mode: `N` of `procs/PID.N`, 0 for the first and forked ones) whose
/// resync cookies are numbered apart: an exec'd image appends to its task's file, so its
/// markers must not name the image before's cookies. Later ones guess as without.
pub const MAX_RESYNC_IMAGES: u32 = 4096;

/// The number of process image `image`'s first resync cookie (its own are the
/// [`MAX_RESYNC_COOKIES`] from there); `None` past [`MAX_RESYNC_IMAGES`].
pub fn resync_first_seq(image: u32) -> Option<u32> {
    (image < MAX_RESYNC_IMAGES).then(|| image * MAX_RESYNC_COOKIES)
}

/// The first id of the resync markers (never left in a published trace).
const RESYNC_MARKER_BASE: u64 = crate::events::USER_BASE + 0x1_0000;

/// The event id of the marker for resync cookie `seq`.
pub fn resync_marker(seq: u32) -> u64 {
    RESYNC_MARKER_BASE + u64::from(seq)
}

/// The resync cookie a marker event id names.
pub fn resync_seq_of_marker(id: u64) -> Option<u32> {
    let seq = id.checked_sub(RESYNC_MARKER_BASE)?;
    u32::try_from(seq)
        .ok()
        .filter(|&s| s < MAX_RESYNC_COOKIES * MAX_RESYNC_IMAGES)
}

const MAGIC: &[u8; 8] = b"QUSTACK\x01";
const HEADER: usize = 8 + 8 + 4 + 4 + 8 + 4 * 8 + 8 + 8;

/// The registers an unwinder starts from, and the top of the stack they point into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StackCookie {
    /// ELF `e_machine` of the guest.
    pub machine: u16,
    pub tid: u32,
    pub vcpu: u32,
    /// The record time of the capture (before the context's first record).
    pub time: u64,
    pub pc: u64,
    pub sp: u64,
    pub fp: u64,
    /// The link register (AArch64 x30, RISC-V ra); 0 on x86-64.
    pub lr: u64,
    /// Where `stack` starts in guest virtual memory (the stack pointer, normally).
    pub stack_base: u64,
    pub stack: Vec<u8>,
    /// Other stacks the chain goes on on: (start address, bytes).
    pub extra: Vec<(u64, Vec<u8>)>,
}

/// Why bytes are not a stack cookie.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CookieError {
    BadMagic,
    Truncated { want: u64, have: u64 },
}

impl std::fmt::Display for CookieError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CookieError::BadMagic => write!(f, "not a qemu-uftrace stack cookie (bad magic)"),
            CookieError::Truncated { want, have } => {
                write!(f, "truncated stack cookie ({have} of {want} bytes)")
            }
        }
    }
}

impl std::error::Error for CookieError {}

impl StackCookie {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(HEADER + self.stack.len());
        out.extend_from_slice(MAGIC);
        out.extend_from_slice(&self.machine.to_le_bytes());
        out.extend_from_slice(&[0; 6]);
        out.extend_from_slice(&self.tid.to_le_bytes());
        out.extend_from_slice(&self.vcpu.to_le_bytes());
        for v in [
            self.time,
            self.pc,
            self.sp,
            self.fp,
            self.lr,
            self.stack_base,
            self.stack.len() as u64,
        ] {
            out.extend_from_slice(&v.to_le_bytes());
        }
        out.extend_from_slice(&self.stack);
        for (base, bytes) in &self.extra {
            out.extend_from_slice(&base.to_le_bytes());
            out.extend_from_slice(&(bytes.len() as u64).to_le_bytes());
            out.extend_from_slice(bytes);
        }
        out
    }

    pub fn decode(bytes: &[u8]) -> Result<StackCookie, CookieError> {
        if bytes.len() < 8 || &bytes[..8] != MAGIC {
            return Err(CookieError::BadMagic);
        }
        let truncated = |want: usize| CookieError::Truncated {
            want: want as u64,
            have: bytes.len() as u64,
        };
        if bytes.len() < HEADER {
            return Err(truncated(HEADER));
        }
        let u64_at = |at: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&bytes[at..at + 8]);
            u64::from_le_bytes(w)
        };
        let u32_at = |at: usize| {
            let mut w = [0u8; 4];
            w.copy_from_slice(&bytes[at..at + 4]);
            u32::from_le_bytes(w)
        };
        let len = u64_at(HEADER - 8);
        let end = usize::try_from(len)
            .ok()
            .and_then(|l| l.checked_add(HEADER))
            .filter(|&end| end <= bytes.len())
            .ok_or(CookieError::Truncated {
                want: len.saturating_add(HEADER as u64),
                have: bytes.len() as u64,
            })?;
        Ok(StackCookie {
            machine: u16::from_le_bytes([bytes[8], bytes[9]]),
            tid: u32_at(16),
            vcpu: u32_at(20),
            time: u64_at(24),
            pc: u64_at(32),
            sp: u64_at(40),
            fp: u64_at(48),
            lr: u64_at(56),
            stack_base: u64_at(64),
            stack: bytes[HEADER..end].to_vec(),
            extra: extra_regions(&bytes[end..])?,
        })
    }
}

/// The optional regions after the main copy.
fn extra_regions(mut rest: &[u8]) -> Result<Vec<(u64, Vec<u8>)>, CookieError> {
    let mut out = Vec::new();
    let word = |b: &[u8]| {
        let mut w = [0u8; 8];
        w.copy_from_slice(&b[..8]);
        u64::from_le_bytes(w)
    };
    while !rest.is_empty() {
        let truncated = CookieError::Truncated {
            want: 16,
            have: rest.len() as u64,
        };
        if rest.len() < 16 {
            return Err(truncated);
        }
        let (base, len) = (word(rest), word(&rest[8..]));
        let body = &rest[16..];
        let len = usize::try_from(len)
            .ok()
            .filter(|&l| l <= body.len())
            .ok_or(CookieError::Truncated {
                want: len.saturating_add(16),
                have: rest.len() as u64,
            })?;
        out.push((base, body[..len].to_vec()));
        rest = &body[len..];
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> StackCookie {
        StackCookie {
            machine: 183,
            tid: 7,
            vcpu: 1,
            time: 12345,
            pc: 0x4008_0000,
            sp: 0x4010_0000 - 0x40,
            fp: 0x4010_0000 - 0x20,
            lr: 0x4008_0124,
            stack_base: 0x4010_0000 - 0x40,
            stack: (0..64u8).collect(),
            extra: Vec::new(),
        }
    }

    #[test]
    fn round_trip() {
        let c = sample();
        assert_eq!(StackCookie::decode(&c.encode()), Ok(c));
        let mut c = sample();
        c.extra = vec![(0x5000, vec![1, 2, 3]), (0x9000, Vec::new())];
        assert_eq!(StackCookie::decode(&c.encode()), Ok(c.clone()));
        // A region cut short is an error.
        let bytes = c.encode();
        assert!(StackCookie::decode(&bytes[..bytes.len() - 17]).is_err());
    }

    #[test]
    fn bad_input_is_an_error_not_a_panic() {
        let bytes = sample().encode();
        assert_eq!(StackCookie::decode(b"nope"), Err(CookieError::BadMagic));
        for cut in [8, HEADER - 1, HEADER + 10] {
            assert!(matches!(
                StackCookie::decode(&bytes[..cut]),
                Err(CookieError::Truncated { .. })
            ));
        }
        let mut huge = bytes.clone();
        huge[HEADER - 8..HEADER].copy_from_slice(&u64::MAX.to_le_bytes());
        assert!(StackCookie::decode(&huge).is_err());
    }

    #[test]
    fn file_names_carry_the_task() {
        assert_eq!(tid_of(&file_name(42)), Some(42));
        assert_eq!(tid_of("42.dat"), None);
        assert_eq!(user_tid_of(&user_file_name(42)), Some(42));
        assert_eq!(tid_of(&user_file_name(42)), None);
        assert_eq!(user_tid_of(&file_name(42)), None);
    }

    #[test]
    fn resync_cookies_and_markers_name_each_other() {
        assert_eq!(resync_of(&resync_file_name(42, 3)), Some((42, 3)));
        assert_eq!(tid_of(&resync_file_name(42, 3)), None);
        assert_eq!(resync_of(&file_name(42)), None);
        // A window's user-mode part: its own name, not the kernel part's.
        assert_eq!(resync_user_of(&resync_user_file_name(42, 3)), Some((42, 3)));
        assert_eq!(resync_of(&resync_user_file_name(42, 3)), None);
        assert_eq!(resync_user_of(&resync_file_name(42, 3)), None);
        assert_eq!(resync_seq_of_marker(resync_marker(3)), Some(3));
        assert_eq!(resync_seq_of_marker(crate::events::USER_BASE), None);
        // A later image's (numbered from its index up), and past the last image's.
        let later = resync_first_seq(3).unwrap() + 5;
        assert_eq!(resync_seq_of_marker(resync_marker(later)), Some(later));
        assert_eq!(resync_first_seq(MAX_RESYNC_IMAGES), None);
        assert_eq!(
            resync_seq_of_marker(resync_marker(MAX_RESYNC_COOKIES * MAX_RESYNC_IMAGES)),
            None
        );
    }
}
