//! The cache's index: which object versions it holds, the bytes present in each 1 MiB
//! block of the open ones, and the order in which they go when the cache is over its
//! limit. Plain data with methods: no I/O, no locks, no handles. `DiskCache` keeps it
//! under its `inner` lock, asks it what to evict, and does the I/O that calls for after
//! releasing that lock. A cache shared by the mounts of a node (issue 16) moves this
//! structure (into shared memory or a daemon), not the code that talks to it.
//!
//! Names: an object version is named by its hash (the name of its files). While its files
//! are created, read or removed outside the lock, its name is *busy*: nobody else may
//! open, adopt or evict it until the owner of that I/O calls `unreserve`.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::time::SystemTime;

/// An open entry, as the index knows it. Never reused: a stale handle's marks (an entry
/// eviction dropped while a fetch still wrote to it) match no entry.
pub(super) type Id = u64;

/// One thing eviction takes, in the order they go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Victim {
    /// An entry found on disk at start and not opened since: its files go whole. Its name
    /// is busy until the caller has removed them.
    Cold { hash: String },
    /// A block of an open entry: its present chunks are punched (`bytes` of them).
    Block { id: Id, block: u64, bytes: u64 },
}

/// What the index knows of a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Lookup {
    /// Open in this process.
    Open(Id),
    /// On disk from an earlier run, not opened since.
    Cold,
    /// Its files are being created, read or removed: wait until it is unreserved.
    Busy,
    /// Not in the cache.
    Absent,
}

/// Bytes present in one block and when it was last used.
#[derive(Debug, Clone, Copy)]
struct Block {
    tick: u64,
    bytes: u64,
}

/// The index. Every byte it counts is either in a cold entry or in a block of an open one.
#[derive(Debug)]
pub(super) struct Index {
    by_hash: HashMap<String, Id>,
    hashes: HashMap<Id, String>,
    blocks: BTreeMap<(Id, u64), Block>,
    /// Blocks by the tick of their last use: the first is the least recently used.
    lru: BTreeMap<u64, (Id, u64)>,
    /// Entries found on disk at start and not opened since: (mtime, hash) -> bytes.
    cold: BTreeMap<(SystemTime, String), u64>,
    cold_index: HashMap<String, SystemTime>,
    busy: HashSet<String>,
    tick: u64,
    next_id: Id,
    used: u64,
}

impl Default for Index {
    fn default() -> Index {
        Index {
            by_hash: HashMap::new(),
            hashes: HashMap::new(),
            blocks: BTreeMap::new(),
            lru: BTreeMap::new(),
            cold: BTreeMap::new(),
            cold_index: HashMap::new(),
            busy: HashSet::new(),
            tick: 0,
            next_id: 1,
            used: 0,
        }
    }
}

impl Index {
    /// Bytes the cache holds (cold entries and present chunks of open ones).
    pub fn used(&self) -> u64 {
        self.used
    }

    /// An entry an earlier run left on disk (at start, before any is opened).
    pub fn add_cold(&mut self, hash: String, mtime: SystemTime, bytes: u64) {
        self.cold.insert((mtime, hash.clone()), bytes);
        self.cold_index.insert(hash, mtime);
        self.used += bytes;
    }

    pub fn lookup(&self, hash: &str) -> Lookup {
        if self.busy.contains(hash) {
            Lookup::Busy
        } else if let Some(&id) = self.by_hash.get(hash) {
            Lookup::Open(id)
        } else if self.cold_index.contains_key(hash) {
            Lookup::Cold
        } else {
            Lookup::Absent
        }
    }

    /// Takes a cold entry out (its bytes no longer counted) to open it: its name is busy
    /// until `insert` (or `unreserve`). False if it is not cold.
    pub fn take_cold(&mut self, hash: &str) -> bool {
        let Some(mtime) = self.cold_index.remove(hash) else {
            return false;
        };
        let bytes = self.cold.remove(&(mtime, hash.to_string())).unwrap_or(0);
        self.used -= bytes;
        self.busy.insert(hash.to_string());
        true
    }

    /// Makes an absent name busy (to create its files outside the lock). False if the
    /// index knows it already.
    pub fn reserve(&mut self, hash: &str) -> bool {
        if self.lookup(hash) != Lookup::Absent {
            return false;
        }
        self.busy.insert(hash.to_string());
        true
    }

    /// The I/O on a busy name is over.
    pub fn unreserve(&mut self, hash: &str) {
        self.busy.remove(hash);
    }

    /// A newly opened entry with `(block, bytes)` present, used in that order; its name
    /// is no longer busy.
    pub fn insert(&mut self, hash: String, blocks: &[(u64, u64)]) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        self.busy.remove(&hash);
        self.by_hash.insert(hash.clone(), id);
        self.hashes.insert(id, hash);
        for &(b, bytes) in blocks {
            self.add(id, b, bytes);
        }
        id
    }

    /// `bytes` more are present in block `b` of `id`, which is used now. False (and
    /// nothing counted) if `id` is not open: eviction dropped it.
    pub fn add(&mut self, id: Id, b: u64, bytes: u64) -> bool {
        if !self.hashes.contains_key(&id) {
            return false;
        }
        self.tick += 1;
        let tick = self.tick;
        let block = self
            .blocks
            .entry((id, b))
            .or_insert(Block { tick, bytes: 0 });
        self.lru.remove(&block.tick);
        block.tick = tick;
        block.bytes += bytes;
        self.lru.insert(tick, (id, b));
        self.used += bytes;
        true
    }

    /// Block `b` of `id` was read: it goes last (if the index holds it).
    pub fn touch(&mut self, id: Id, b: u64) {
        if self.blocks.contains_key(&(id, b)) {
            self.add(id, b, 0);
        }
    }

    /// Takes what must go for the cache to hold at most `limit` bytes: cold entries
    /// first (oldest first), then blocks, least recently used first. Stops early when
    /// nothing is left.
    pub fn evict(&mut self, limit: u64) -> Vec<Victim> {
        let mut out = Vec::new();
        while self.used > limit {
            if let Some(((_, hash), bytes)) = self.cold.pop_first() {
                self.cold_index.remove(&hash);
                self.used -= bytes;
                self.busy.insert(hash.clone());
                out.push(Victim::Cold { hash });
                continue;
            }
            let Some((_, (id, block))) = self.lru.pop_first() else {
                break;
            };
            let bytes = self.blocks.remove(&(id, block)).map_or(0, |b| b.bytes);
            self.used -= bytes;
            out.push(Victim::Block { id, block, bytes });
        }
        out
    }

    /// An open entry goes (eviction left it empty and unused): its blocks leave the index
    /// and its name is busy until the caller has removed its files.
    pub fn forget(&mut self, id: Id) -> Option<String> {
        let hash = self.hashes.remove(&id)?;
        if self.by_hash.get(&hash) == Some(&id) {
            self.by_hash.remove(&hash);
        }
        let gone: Vec<_> = self
            .blocks
            .range((id, 0)..=(id, u64::MAX))
            .map(|(&k, &b)| (k, b))
            .collect();
        for (k, b) in gone {
            self.blocks.remove(&k);
            self.lru.remove(&b.tick);
            self.used -= b.bytes;
        }
        self.busy.insert(hash.clone());
        Some(hash)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::time::Duration;

    fn at(secs: u64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(secs)
    }

    fn block(id: Id, block: u64, bytes: u64) -> Victim {
        Victim::Block { id, block, bytes }
    }

    #[test]
    fn cold_entries_go_first_oldest_first() {
        let mut ix = Index::default();
        ix.add_cold("new".into(), at(20), 5);
        ix.add_cold("old".into(), at(10), 5);
        let a = ix.insert("a".into(), &[(0, 5)]);
        assert_eq!(ix.used(), 15);
        let v = ix.evict(4);
        assert_eq!(
            v,
            vec![
                Victim::Cold { hash: "old".into() },
                Victim::Cold { hash: "new".into() },
                block(a, 0, 5),
            ]
        );
        assert_eq!(ix.used(), 0);
        // Their files are being removed: nobody opens them meanwhile.
        assert_eq!(ix.lookup("old"), Lookup::Busy);
        ix.unreserve("old");
        assert_eq!(ix.lookup("old"), Lookup::Absent);
    }

    #[test]
    fn a_touched_block_goes_last() {
        let mut ix = Index::default();
        let a = ix.insert("a".into(), &[(0, 4), (1, 4)]);
        let b = ix.insert("b".into(), &[(0, 4)]);
        ix.touch(a, 0);
        // Not held: touching it adds nothing.
        ix.touch(b, 7);
        assert_eq!(ix.evict(4), vec![block(a, 1, 4), block(b, 0, 4)]);
        assert_eq!(ix.used(), 4);
    }

    #[test]
    fn a_forgotten_entry_counts_nothing_and_is_busy() {
        let mut ix = Index::default();
        let a = ix.insert("a".into(), &[(0, 4), (3, 0)]);
        assert_eq!(ix.forget(a), Some("a".into()));
        assert_eq!(ix.used(), 0);
        assert!(!ix.add(a, 0, 4), "a stale entry's marks are not counted");
        assert_eq!(ix.used(), 0);
        assert_eq!(ix.lookup("a"), Lookup::Busy);
        assert!(!ix.reserve("a"));
        assert!(ix.evict(0).is_empty());
    }

    #[test]
    fn opening_a_cold_entry_uncounts_it_until_inserted() {
        let mut ix = Index::default();
        ix.add_cold("a".into(), at(1), 8);
        assert_eq!(ix.lookup("a"), Lookup::Cold);
        assert!(ix.take_cold("a"));
        assert_eq!((ix.used(), ix.lookup("a")), (0, Lookup::Busy));
        let id = ix.insert("a".into(), &[(0, 3)]);
        assert_eq!((ix.used(), ix.lookup("a")), (3, Lookup::Open(id)));
    }

    /// One step of a random history of the index.
    #[derive(Debug, Clone)]
    enum Op {
        Cold(u8, u8, u64),
        Open(u8, Vec<(u8, u64)>),
        Add(u8, u8, u64),
        Touch(u8, u8),
        Forget(u8),
        Evict(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8u8, 0..4u8, 0..100u64).prop_map(|(h, t, b)| Op::Cold(h, t, b)),
            (0..8u8, proptest::collection::vec((0..6u8, 0..50u64), 0..4))
                .prop_map(|(h, bs)| Op::Open(h, bs)),
            (0..8u8, 0..6u8, 0..50u64).prop_map(|(i, b, n)| Op::Add(i, b, n)),
            (0..8u8, 0..6u8).prop_map(|(i, b)| Op::Touch(i, b)),
            (0..8u8).prop_map(Op::Forget),
            (0..300u64).prop_map(Op::Evict),
        ]
    }

    /// The reference: cold entries by (mtime, hash), blocks in a list, least recently
    /// used first.
    #[derive(Default)]
    struct Model {
        cold: Vec<((SystemTime, String), u64)>,
        blocks: Vec<((Id, u64), u64)>,
    }

    impl Model {
        fn used(&self) -> u64 {
            let cold: u64 = self.cold.iter().map(|c| c.1).sum();
            cold + self.blocks.iter().map(|b| b.1).sum::<u64>()
        }

        fn use_block(&mut self, k: (Id, u64), bytes: u64) {
            let old = self.blocks.iter().position(|b| b.0 == k);
            let before = old.map_or(0, |i| self.blocks.remove(i).1);
            self.blocks.push((k, before + bytes));
        }

        /// What eviction to `limit` takes, in order.
        fn evict(&mut self, limit: u64) -> Vec<Victim> {
            let mut want = Vec::new();
            while self.used() > limit {
                if !self.cold.is_empty() {
                    let ((_, hash), _) = self.cold.remove(0);
                    want.push(Victim::Cold { hash });
                } else if !self.blocks.is_empty() {
                    let ((id, block), bytes) = self.blocks.remove(0);
                    want.push(Victim::Block { id, block, bytes });
                } else {
                    break;
                }
            }
            want
        }
    }

    /// The index and the model, driven by the same steps.
    #[derive(Default)]
    struct Sim {
        ix: Index,
        model: Model,
        ids: Vec<Id>,
        forgotten: Vec<Id>,
    }

    impl Sim {
        fn step(&mut self, op: Op) -> Result<(), TestCaseError> {
            let id = |i: u8| self.ids.get(i as usize).copied();
            match op {
                Op::Cold(h, t, bytes) => {
                    let hash = format!("c{h}");
                    if self.ix.lookup(&hash) == Lookup::Absent {
                        self.ix.add_cold(hash.clone(), at(t.into()), bytes);
                        self.model.cold.push(((at(t.into()), hash), bytes));
                        self.model.cold.sort();
                    }
                }
                Op::Open(h, bs) => {
                    let hash = format!("o{h}");
                    if self.ix.lookup(&hash) == Lookup::Absent {
                        let bs: Vec<(u64, u64)> =
                            bs.into_iter().map(|(b, n)| (b.into(), n)).collect();
                        let id = self.ix.insert(hash, &bs);
                        for (b, n) in bs {
                            self.model.use_block((id, b), n);
                        }
                        self.ids.push(id);
                    }
                }
                Op::Add(i, b, n) => {
                    if let Some(id) = id(i) {
                        let live = self.ix.add(id, b.into(), n);
                        prop_assert_eq!(live, !self.forgotten.contains(&id));
                        if live {
                            self.model.use_block((id, b.into()), n);
                        }
                    }
                }
                Op::Touch(i, b) => {
                    if let Some(id) = id(i) {
                        self.ix.touch(id, b.into());
                        if self.model.blocks.iter().any(|x| x.0 == (id, b.into())) {
                            self.model.use_block((id, b.into()), 0);
                        }
                    }
                }
                Op::Forget(i) => {
                    if let Some(hash) = id(i).and_then(|id| self.ix.forget(id)) {
                        prop_assert_eq!(self.ix.lookup(&hash), Lookup::Busy);
                        self.ix.unreserve(&hash);
                        let id = self.ids[i as usize];
                        self.forgotten.push(id);
                        self.model.blocks.retain(|b| b.0 .0 != id);
                    }
                }
                Op::Evict(limit) => self.evict(limit)?,
            }
            prop_assert_eq!(self.ix.used(), self.model.used());
            Ok(())
        }

        fn evict(&mut self, limit: u64) -> Result<(), TestCaseError> {
            let got = self.ix.evict(limit);
            let want = self.model.evict(limit);
            let empty = self.model.cold.is_empty() && self.model.blocks.is_empty();
            prop_assert!(self.ix.used() <= limit || empty);
            for v in &got {
                match v {
                    Victim::Cold { hash } => {
                        prop_assert_eq!(self.ix.lookup(hash), Lookup::Busy);
                        self.ix.unreserve(hash);
                    }
                    Victim::Block { id, .. } => prop_assert!(!self.forgotten.contains(id)),
                }
            }
            prop_assert_eq!(got, want);
            Ok(())
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// The index counts what it holds, evicts until it is within the limit (or empty),
        /// cold entries first (oldest first), then blocks least recently used first, never
        /// one of an entry it forgot; a name it hands out for I/O stays busy until
        /// unreserved.
        #[test]
        fn eviction_follows_the_lru_order(ops in proptest::collection::vec(op(), 1..60)) {
            let mut sim = Sim::default();
            for op in ops {
                sim.step(op)?;
            }
        }
    }
}
