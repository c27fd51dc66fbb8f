//! Eviction: what goes is decided under `inner` (the index picks the victims, the entries
//! clear their chunks), and the disk I/O it calls for runs after `inner` is released:
//! the statvfs before, the `.meta` writes, hole punching and file removals after. A cache
//! hit (`touch`) never waits for the disk.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::disk::disk_space;
use super::entry::{CacheEntry, Taken};
use super::index::{Id, Victim};
use super::{persist, DiskCache, Inner, CHUNK};

/// What one eviction decided under the lock, for the I/O after it.
#[derive(Default)]
struct Plan {
    /// Chunks taken from open entries, by entry.
    taken: BTreeMap<Id, (Arc<CacheEntry>, Vec<Taken>)>,
    /// Entries that go whole: cold ones (no handle) and open ones eviction left empty
    /// and unused. Their names are busy until their files are removed.
    gone: Vec<(String, Option<Arc<CacheEntry>>)>,
}

impl DiskCache {
    /// Evicts down to the cache's limit.
    pub(super) fn evict(&self) {
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
        let _one = self.evicting.lock();
        let avail = self.avail(room);
        let plan = {
            let mut inner = self.inner.lock();
            let limit = self.limit(inner.index.used(), room, avail);
            inner.plan(limit)
        };
        if plan.taken.is_empty() && plan.gone.is_empty() {
            return;
        }
        // Entries that went whole first: their names are busy (an open of one waits)
        // until their files are gone.
        let gone = self.remove_gone(&plan.gone);
        if !plan.gone.is_empty() {
            let mut inner = self.inner.lock();
            for (hash, _) in &plan.gone {
                inner.index.unreserve(hash);
            }
            drop(inner);
            self.names.notify_all();
        }
        for (id, (e, taken)) in plan.taken {
            if gone.contains(&id) {
                e.end_punch(&taken);
            } else {
                e.unvouch();
                e.punch(&taken);
            }
        }
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

    /// Removes the files of entries that went whole (no lock of the cache held); the
    /// ids of the open ones among them.
    fn remove_gone(&self, gone: &[(String, Option<Arc<CacheEntry>>)]) -> Vec<Id> {
        let mut ids = Vec::new();
        for (hash, e) in gone {
            if let Some(e) = e {
                self.forget_mem(e);
                ids.push(e.id());
            }
            persist::remove(&self.root, hash);
        }
        ids
    }
}

impl Inner {
    /// Takes what must go for the cache to hold at most `limit` bytes (in memory only).
    fn plan(&mut self, limit: u64) -> Plan {
        let mut plan = Plan::default();
        for v in self.index.evict(limit) {
            let (id, block, bytes) = match v {
                Victim::Cold { hash } => {
                    plan.gone.push((hash, None));
                    continue;
                }
                Victim::Block { id, block, bytes } => (id, block, bytes),
            };
            let Some(e) = self.hot.get(&id).cloned() else {
                continue;
            };
            let taken = e.take_block(block);
            debug_assert_eq!(taken.freed() * CHUNK, bytes, "the index counts the bitmap");
            let empty = taken.empty;
            plan.taken
                .entry(id)
                .or_insert_with(|| (e.clone(), Vec::new()))
                .1
                .push(taken);
            if empty && e.unused() {
                self.hot.remove(&id);
                if let Some(hash) = self.index.forget(id) {
                    plan.gone.push((hash, Some(e)));
                }
            }
        }
        plan
    }
}
