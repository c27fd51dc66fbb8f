//! Eviction for the whole directory, by whichever process finds it over its limit: one
//! at a time across processes (`objects/evict.lock`, flock; the next one looks at the
//! count again once it has the lock, and finds nothing to do if its holder did it). It
//! scans every sidecar and segment of small versions, orders their blocks by use time
//! (index.rs; a segment is one block, used at its last write), and punches the oldest
//! under each block's fetch lock (punch.rs `punch_block`), skipping blocks being fetched
//! and entries a process pins (pin.rs: newer blocks go in their place); a segment goes
//! whole, unless a live process may still append to it (small.rs). Entries left empty
//! and in use by nobody are removed. No lock of the cache is held across its
//! I/O; a cache hit never waits for it (a hit of this process on a block it takes waits
//! for `state`).

use std::collections::HashSet;
use std::os::unix::io::AsRawFd;

use super::disk::disk_space;
use super::index::Index;
use super::persist::{self, map_path, Scanned};
use super::punch::{punch_block, remove_unused};
use super::small::SegmentFile;
use super::{bitmap, DiskCache, BLOCK_CHUNKS, CHUNK};

/// An eviction brings the directory this far below its limit (a 64th, at most 64 MiB),
/// so that the next store does not scan it again at once.
fn slack(limit: u64) -> u64 {
    (limit / 64).min(64 << 20)
}

impl DiskCache {
    /// Evicts down to the cache's limit (if the directory is over it: one `pread` of its
    /// count otherwise). Blocks on the disk: call it off the async workers.
    pub fn evict(&self) {
        self.evict_for(0);
    }

    /// Evicts until `bytes` more (plus the floor) are free on the disk, or the cache is
    /// empty: a staged write that found the disk full goes before cached data.
    pub fn make_room(&self, bytes: u64) {
        self.evict_for(bytes);
    }

    fn evict_for(&self, room: u64) {
        let open = self.open.read_recursive();
        if !*open {
            return;
        }
        if !self.over(room) {
            return;
        }
        // Waited for, not skipped: an eviction that runs now may skip blocks a fetch still
        // holds, and only the eviction after that fetch takes them. Each is bounded work
        // (a scan, punches that never wait); a killed evictor's flock goes with it.
        let _one = self.evicting.lock();
        let fd = self.evict_lock.as_raw_fd();
        // SAFETY: flock on an fd we own; released below (or with the fd).
        if unsafe { libc::flock(fd, libc::LOCK_EX) } != 0 {
            return;
        }
        if self.over(room) {
            self.evict_locked(room);
        }
        // SAFETY: as above.
        unsafe { libc::flock(fd, libc::LOCK_UN) };
    }

    /// Whether the directory holds more than its limit (one `pread` of its count; a
    /// statvfs too under a free-space floor).
    fn over(&self, room: u64) -> bool {
        let used = self.usage.get();
        used > self.limit(used, room, self.avail(room))
    }

    /// The eviction itself, under both eviction locks.
    fn evict_locked(&self, room: u64) {
        let used = self.usage.get();
        let found = persist::scan(&self.root);
        let segments = self.small.segments();
        let total: u64 = (found.iter())
            .map(|s| bitmap::present(&s.words) * CHUNK)
            .chain(segments.iter().map(|s| s.bytes))
            .sum();
        let limit = self.limit(total, room, self.avail(room));
        let target = limit.saturating_sub(slack(limit));
        let freed = if total > limit {
            self.evict_scanned(&found, &segments, target)
        } else {
            0
        };
        // The count becomes what was found, less what went; stores since the scan have
        // added theirs to it already.
        self.usage.add(total as i64 - used as i64 - freed as i64);
    }

    /// Takes blocks of the scanned files and segments, least recently used first, until
    /// they hold at most `target` bytes; the bytes freed.
    fn evict_scanned(&self, found: &[Scanned], segments: &[SegmentFile], target: u64) -> u64 {
        let mut ix = Index::default();
        let mut order = Vec::new();
        let mut ids = Vec::new();
        for s in found {
            let id = ix.insert(s.hash.clone(), &[]);
            ids.push(id);
            for (b, bytes) in bitmap::blocks(&s.words) {
                let stamp = s.stamps.get(b as usize).copied().unwrap_or(0);
                order.push((stamp, id, b, bytes));
            }
        }
        // Segments after the entries: an id past `ids` is segment `id - first`.
        let first = ix.next_id();
        for s in segments {
            let id = ix.insert(s.path.display().to_string(), &[]);
            order.push((s.stamp, id, 0, s.bytes));
        }
        order.sort_unstable();
        for (_, id, b, bytes) in order {
            ix.add(id, b, bytes);
        }
        let (mut freed, mut emptied) = (0, Vec::new());
        // Pinned entries (pin.rs) keep their blocks: eviction goes on to newer blocks
        // until what it can take brings the directory to `target`.
        let (mut pinned, mut kept) = (HashSet::new(), 0);
        loop {
            let victims = ix.evict(target.saturating_sub(kept));
            if victims.is_empty() {
                break;
            }
            for v in victims {
                let punched = if pinned.contains(&v.id) {
                    None
                } else if v.id >= first {
                    let s = &segments[(v.id - first) as usize];
                    self.changes.note(&self.usage, None);
                    self.small.evict(s)
                } else if let Some(i) = ids.iter().position(|&id| id == v.id) {
                    let n = self.evict_block(&found[i], v.block);
                    emptied.extend(n.map(|_| i));
                    n
                } else {
                    continue;
                };
                if let Some(n) = punched {
                    freed += n;
                } else {
                    pinned.insert(v.id);
                    kept += v.bytes;
                }
            }
        }
        // Files that hold nothing (all their blocks went, or none was ever fetched).
        emptied.extend((0..found.len()).filter(|&i| bitmap::present(&found[i].words) == 0));
        emptied.sort_unstable();
        emptied.dedup();
        for i in emptied {
            let s = &found[i];
            self.changes.note(&self.usage, None);
            remove_unused(&map_path(&self.root, &s.hash), &s.layout);
        }
        freed
    }

    /// Punches block `b` of a scanned entry; an entry this process has open gives it up
    /// first (its readers here wait for the punch, then fetch it again). The bytes freed;
    /// `None` if a process pins the entry.
    fn evict_block(&self, s: &Scanned, b: u64) -> Option<u64> {
        let hot = self.inner.lock().get(&s.hash).cloned();
        let taken = hot.as_ref().map(|e| e.take_block(b));
        let path = map_path(&self.root, &s.hash);
        // Noted before the change: a process killed after it is still counted.
        self.changes.note(&self.usage, Some(&path));
        let freed = match punch_block(&path, &s.layout, b) {
            Ok(n) => n,
            Err(err) => {
                tracing::debug!("cannot evict block {b} of {}: {err}", path.display());
                Some(0)
            }
        };
        if let (Some(e), Some(t)) = (hot, taken) {
            e.end_punch(&t);
        }
        if let Some(n) = freed.filter(|&n| n > 0) {
            use std::sync::atomic::Ordering::Relaxed;
            self.evicted_blocks.fetch_add(1, Relaxed);
            self.evicted_bytes.fetch_add(n, Relaxed);
        }
        debug_assert!(freed.unwrap_or(0) <= BLOCK_CHUNKS * CHUNK);
        freed
    }

    /// Bytes free on the cache's disk, asked only when the limit depends on them.
    pub(super) fn avail(&self, room: u64) -> Option<u64> {
        if self.min_free == 0 && room == 0 {
            return None;
        }
        disk_space(&self.root).map(|d| d.avail)
    }

    /// What the cache may hold now, with `used` bytes in it, `room` more to free and
    /// `avail` free on its disk (`None`: not asked, or statvfs failed).
    pub(super) fn limit(&self, used: u64, room: u64, avail: Option<u64>) -> u64 {
        match avail {
            Some(avail) => self
                .capacity
                .min((used + avail).saturating_sub(self.min_free + room)),
            None => self.capacity,
        }
    }
}
