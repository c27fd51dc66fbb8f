//! Fetched ranges kept in memory until a reader has taken them, within a budget: a cold
//! read then costs one copy out of the download buffer, not a read back from the data
//! file (whose write may not even have happened yet).
//!
//! Each entry owns its ranges (`Ranges`, behind its own lock); `MemBudget` owns the
//! count of bytes in memory and the order in which ranges go when it is over budget. It
//! knows ranges, not entries (entry/mod.rs holds its `Ranges`; this file does not name it).

use std::collections::{BTreeMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::Mutex;

/// Most fetched ranges remembered for the memory budget's FIFO (stale ones included).
const MEM_QUEUE: usize = 4096;

/// A fetched range kept in memory until its bytes have been read once.
struct MemBuf {
    data: Bytes,
    served: usize,
}

/// One entry's fetched ranges in memory, by offset.
#[derive(Default)]
pub(super) struct Ranges(Mutex<BTreeMap<u64, MemBuf>>);

impl Ranges {
    /// Keeps `data` at `off`; the length of a range it replaced (0 if none).
    fn insert(&self, off: u64, data: Bytes) -> u64 {
        let old = self.0.lock().insert(off, MemBuf { data, served: 0 });
        old.map_or(0, |b| b.data.len() as u64)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.lock().is_empty()
    }

    /// Whether one range in memory holds all of `[off, end)` (bytes fetched and not
    /// admitted to the disk have no other place: a fetch ahead must not fetch them again).
    pub(super) fn holds(&self, off: u64, end: u64) -> bool {
        let mem = self.0.lock();
        (mem.range(..=off).next_back()).is_some_and(|(&s, b)| s + b.data.len() as u64 >= end)
    }

    /// Drops every range; their length.
    fn clear(&self) -> u64 {
        let gone = std::mem::take(&mut *self.0.lock());
        gone.values().map(|b| b.data.len() as u64).sum()
    }

    /// Drops the range at `off`; its length (0 if none).
    fn remove(&self, off: u64) -> u64 {
        self.0
            .lock()
            .remove(&off)
            .map_or(0, |b| b.data.len() as u64)
    }

    /// Bytes `[off, end)` if ranges in memory cover them all, and the bytes of the ranges
    /// that this read finished (they leave memory).
    fn take(&self, off: u64, end: u64) -> Option<(Bytes, u64)> {
        let mut mem = self.0.lock();
        let mut starts = Vec::new();
        let mut cur = off;
        while cur < end {
            let (&s, b) = mem.range(..=cur).next_back()?;
            let b_end = s + b.data.len() as u64;
            if b_end <= cur {
                return None;
            }
            starts.push(s);
            cur = b_end;
        }
        let mut out = Vec::new();
        let mut single = None;
        let mut freed = 0;
        let many = starts.len() > 1;
        for s in starts {
            let b = mem.get_mut(&s)?;
            let a = (off.max(s) - s) as usize;
            let z = ((end - s) as usize).min(b.data.len());
            if many {
                out.extend_from_slice(&b.data[a..z]);
            } else {
                // Within one range (the usual case): no copy.
                single = Some(b.data.slice(a..z));
            }
            b.served += z - a;
            // Read once: the kernel's page cache holds it from now on.
            if b.served >= b.data.len() {
                freed += b.data.len() as u64;
                mem.remove(&s);
            }
        }
        Some((single.unwrap_or_else(|| Bytes::from(out)), freed))
    }
}

/// The memory budget of fetched ranges not read yet.
pub(super) struct MemBudget {
    cap: u64,
    used: AtomicU64,
    /// Bytes promised to fetches ahead of any reader that are not in `used` yet
    /// (`promise`): what such fetches start never pushes unread bytes out.
    promised: AtomicU64,
    /// Ranges in memory, oldest first (stale ones too).
    queue: Mutex<VecDeque<(Weak<Ranges>, u64)>>,
}

impl MemBudget {
    pub fn new(cap: u64) -> MemBudget {
        MemBudget {
            cap,
            used: AtomicU64::new(0),
            promised: AtomicU64::new(0),
            queue: Mutex::new(VecDeque::new()),
        }
    }

    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used.load(Ordering::Relaxed)
    }

    /// Keeps a fetched range in memory for the reader that asked for it, within the
    /// budget: the oldest ranges go first. False if it does not fit at all.
    pub fn remember(&self, e: &Arc<Ranges>, off: u64, data: Bytes) -> bool {
        let len = data.len() as u64;
        if len == 0 || len > self.cap {
            return false;
        }
        let old = e.insert(off, data);
        self.used.fetch_sub(old, Ordering::Relaxed);
        self.used.fetch_add(len, Ordering::Relaxed);
        let mut q = self.queue.lock();
        q.push_back((Arc::downgrade(e), off));
        while self.used.load(Ordering::Relaxed) > self.cap || q.len() > MEM_QUEUE {
            let Some((w, o)) = q.pop_front() else {
                break;
            };
            if let Some(e) = w.upgrade() {
                self.used.fetch_sub(e.remove(o), Ordering::Relaxed);
            }
        }
        true
    }

    /// Promises `n` bytes to a fetch ahead of any reader if they fit in the budget with
    /// `keep` bytes left for the readers' own fetches (false: it should not start). A
    /// range pushed out of memory before it was read is fetched again if the disk does
    /// not have it (not admitted): 16 readers fetching ahead at once fetched 27 % of
    /// B1p twice that way. `unpromise` gives them back once fetched.
    pub fn promise(&self, n: u64, keep: u64) -> bool {
        let fits = |p: u64| {
            let used = self.used.load(Ordering::Relaxed);
            (used + p + n + keep <= self.cap).then_some(p + n)
        };
        (self.promised)
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, fits)
            .is_ok()
    }

    pub fn unpromise(&self, n: u64) {
        let back = |p: u64| Some(p.saturating_sub(n));
        let _ = (self.promised).fetch_update(Ordering::Relaxed, Ordering::Relaxed, back);
    }

    /// Drops every range of `e`: the kernel reads its data file itself from now on (a
    /// pin), and they would wait for a reader that never comes until the budget pushed
    /// them out.
    pub fn forget(&self, e: &Ranges) {
        self.used.fetch_sub(e.clear(), Ordering::Relaxed);
    }

    /// Bytes `[off, off + len)` of an entry of `size` bytes whose ranges are `e`, if
    /// memory holds all of them.
    pub fn read(&self, e: &Ranges, size: u64, off: u64, len: usize) -> Option<Bytes> {
        let end = (off + len as u64).min(size);
        if off >= end {
            return None;
        }
        let (data, freed) = e.take(off, end)?;
        self.used.fetch_sub(freed, Ordering::Relaxed);
        Some(data)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn promises_to_fetches_ahead_fit_beside_what_is_in_memory_and_the_readers_room() {
        let m = MemBudget::new(10);
        let e = Arc::new(Ranges::default());
        assert!(m.remember(&e, 0, Bytes::from_static(b"abc")));
        assert!(m.promise(4, 3), "3 + 4 + 3 <= 10");
        assert!(!m.promise(1, 3), "no room left");
        m.unpromise(4);
        assert!(m.promise(2, 3));
        assert!(m.read(&e, 3, 0, 3).is_some());
        assert!(m.promise(2, 3), "read bytes left");
    }
}
