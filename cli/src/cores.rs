//! Work shared out over the cores: scoped threads, each taking the next item as it is done,
//! so that one long item does not hold the rest back (task files differ by orders of size).

use std::sync::atomic::{AtomicUsize, Ordering};

/// Runs `work` on as many scoped threads as there are cores (at most one an item), each
/// given the items it takes, in order, one at a time: each thread's result, or its panic.
/// With one core or item, on this thread (a panic then is this thread's).
pub fn share<'a, T: Sync, R: Send>(
    items: &'a [T],
    work: impl Fn(&mut dyn Iterator<Item = &'a T>) -> R + Sync,
) -> Vec<std::thread::Result<R>> {
    let threads = std::thread::available_parallelism()
        .map_or(1, |n| n.get())
        .min(items.len());
    let next = AtomicUsize::new(0);
    let run = || {
        work(&mut std::iter::from_fn(|| {
            items.get(next.fetch_add(1, Ordering::Relaxed))
        }))
    };
    if threads <= 1 {
        return vec![Ok(run())];
    }
    std::thread::scope(|s| {
        let handles: Vec<_> = (0..threads).map(|_| s.spawn(run)).collect();
        handles.into_iter().map(|h| h.join()).collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_item_is_taken_once() {
        let items: Vec<u32> = (0..1000).collect();
        let per_thread = share(&items, |it| it.copied().collect::<Vec<u32>>());
        let mut all: Vec<u32> = per_thread.into_iter().flat_map(|r| r.unwrap()).collect();
        all.sort_unstable();
        assert_eq!(all, items);
        assert_eq!(share(&[] as &[u32], |it| it.count()).len(), 1);
    }
}
