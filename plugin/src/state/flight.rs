//! `--keep-last SIZE`, the flight recorder: the writer keeps the last SIZE bytes of records
//! (all tasks together) in memory instead of writing them, and writes them when the run
//! ends (QEMU's exit, a stopping signal, `--stop-at …,exit`), each task's frames open at
//! the window's start first, as entries at the times they were entered. Memory stays within
//! SIZE plus one buffer.

use super::open_stacks::OpenStacks;
use qemu_uftrace_format::record::RECORD_SIZE;
use std::collections::VecDeque;

pub struct Ring {
    max: usize,
    bytes: usize,
    bufs: VecDeque<(u32, Vec<u8>)>,
    /// Follows each task's stack through the records that fell out of the window.
    gone: OpenStacks,
}

impl Ring {
    pub fn new(max: u64) -> Ring {
        let max = usize::try_from(max).unwrap_or(usize::MAX) / RECORD_SIZE * RECORD_SIZE;
        Ring {
            max,
            bytes: 0,
            bufs: VecDeque::new(),
            gone: OpenStacks::default(),
        }
    }

    /// Keeps `buf` (task `tid`'s records), dropping the oldest records beyond the window.
    pub fn push(&mut self, tid: u32, buf: &[u8]) {
        self.bufs.push_back((tid, buf.to_vec()));
        self.bytes += buf.len();
        while self.bytes > self.max {
            let excess = self.bytes - self.max;
            let Some((t, oldest)) = self.bufs.front_mut() else {
                break;
            };
            let cut = excess.div_ceil(RECORD_SIZE) * RECORD_SIZE;
            if cut >= oldest.len() {
                let (t, oldest) = self.bufs.pop_front().expect("a front");
                self.gone.follow_all(t, &oldest);
                self.bytes -= oldest.len();
            } else {
                self.gone.follow_all(*t, &oldest[..cut]);
                oldest.drain(..cut);
                self.bytes -= cut;
            }
        }
    }

    /// What to write at the end, in order: each task's open frames at the window's start,
    /// then the window; and how many frames that was.
    pub fn drain(mut self) -> (Vec<(u32, Vec<u8>)>, u64) {
        // The markers after the open frames: at the window's first record, no later than
        // any record of it.
        let first = (self.bufs.front())
            .and_then(|(_, b)| b.get(..8))
            .and_then(|t| <[u8; 8]>::try_from(t).ok())
            .map_or(0, u64::from_le_bytes);
        let mut out = self.gone.all_open(first);
        let frames = self.gone.written_frames;
        out.extend(self.bufs);
        (out, frames)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use qemu_uftrace_format::record::{decode_all, encode, RecordType};

    #[test]
    fn the_window_is_the_tail_after_the_open_frames() {
        use RecordType::{Entry, Exit};
        let mut r = Ring::new(3 * RECORD_SIZE as u64 + 7);
        let a: Vec<u8> = [
            encode(1, Entry, 0, 0x10),
            encode(2, Entry, 1, 0x20),
            encode(3, Exit, 1, 0x20),
            encode(4, Entry, 1, 0x30),
        ]
        .concat();
        r.push(1, &a);
        r.push(2, &encode(5, Entry, 0, 0x40));
        r.push(
            1,
            &[encode(6, Entry, 2, 0x50), encode(7, Exit, 2, 0x50)].concat(),
        );
        let (out, frames) = r.drain();
        let times: Vec<(u32, Vec<u64>)> = out
            .iter()
            .map(|(t, b)| (*t, decode_all(b).unwrap().iter().map(|r| r.time).collect()))
            .collect();
        // The last 3 records (5, 6, 7); task 1 had 0x10 and 0x30 open before them, then
        // its marker at the window's first time.
        assert_eq!(times, [(1, vec![1, 4, 5]), (2, vec![5]), (1, vec![6, 7])]);
        let marker = decode_all(&out[0].1).unwrap()[2];
        assert_eq!(marker.kind, RecordType::Event);
        assert_eq!(marker.addr, qemu_uftrace_format::events::OPENED);
        assert_eq!(frames, 2);
    }
}
