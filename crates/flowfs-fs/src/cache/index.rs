//! The choice of victims: the bytes present in each 1 MiB block of every entry in the
//! directory (their sidecars), and the order in which they go when it is over its limit.
//! Plain data with methods: no I/O, no locks. An eviction (evict.rs) builds it from a
//! scan of the directory, whose files are the index every process shares (its "home",
//! issue 16), adding blocks in the order of their use times, and does the I/O it calls
//! for.

use std::collections::{BTreeMap, HashMap};

/// An entry, as the index knows it.
pub(super) type Id = u64;

/// One block eviction takes, in the order they go: its present chunks are punched.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Victim {
    pub id: Id,
    pub block: u64,
    pub bytes: u64,
}

/// Bytes present in one block and when it was last used.
#[derive(Debug, Clone, Copy)]
struct Block {
    tick: u64,
    bytes: u64,
}

/// The index. Every byte it counts is in a block of an entry.
#[derive(Debug)]
pub(super) struct Index {
    hashes: HashMap<Id, String>,
    blocks: BTreeMap<(Id, u64), Block>,
    /// Blocks by the tick of their last use: the first is the least recently used.
    lru: BTreeMap<u64, (Id, u64)>,
    tick: u64,
    next_id: Id,
    used: u64,
}

impl Default for Index {
    fn default() -> Index {
        Index {
            hashes: HashMap::new(),
            blocks: BTreeMap::new(),
            lru: BTreeMap::new(),
            tick: 0,
            next_id: 1,
            used: 0,
        }
    }
}

impl Index {
    /// Bytes the index holds.
    #[cfg(test)]
    pub fn used(&self) -> u64 {
        self.used
    }

    /// The id the next `insert` gives.
    pub fn next_id(&self) -> Id {
        self.next_id
    }

    /// An entry with `(block, bytes)` present, used in that order.
    pub fn insert(&mut self, hash: String, blocks: &[(u64, u64)]) -> Id {
        let id = self.next_id;
        self.next_id += 1;
        self.hashes.insert(id, hash);
        for &(b, bytes) in blocks {
            self.add(id, b, bytes);
        }
        id
    }

    /// `bytes` more are present in block `b` of `id`, which is used now. False (and
    /// nothing counted) if `id` is not in the index.
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

    /// Takes what must go for the index to hold at most `limit` bytes: blocks, least
    /// recently used first. Stops early when nothing is left.
    pub fn evict(&mut self, limit: u64) -> Vec<Victim> {
        let mut out = Vec::new();
        while self.used > limit {
            let Some((_, (id, block))) = self.lru.pop_first() else {
                break;
            };
            let bytes = self.blocks.remove(&(id, block)).map_or(0, |b| b.bytes);
            self.used -= bytes;
            out.push(Victim { id, block, bytes });
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn block(id: Id, block: u64, bytes: u64) -> Victim {
        Victim { id, block, bytes }
    }

    #[test]
    fn a_block_used_later_goes_later() {
        let mut ix = Index::default();
        let a = ix.insert("a".into(), &[(0, 4), (1, 4)]);
        let b = ix.insert("b".into(), &[(0, 4)]);
        ix.add(a, 0, 0);
        assert_eq!(ix.evict(4), vec![block(a, 1, 4), block(b, 0, 4)]);
        assert_eq!(ix.used(), 4);
        assert!(!ix.add(99, 0, 4), "an unknown entry counts nothing");
    }

    /// One step of a random history of the index.
    #[derive(Debug, Clone)]
    enum Op {
        Open(u8, Vec<(u8, u64)>),
        Add(u8, u8, u64),
        Evict(u64),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0..8u8, proptest::collection::vec((0..6u8, 0..50u64), 0..4))
                .prop_map(|(h, bs)| Op::Open(h, bs)),
            (0..8u8, 0..6u8, 0..50u64).prop_map(|(i, b, n)| Op::Add(i, b, n)),
            (0..300u64).prop_map(Op::Evict),
        ]
    }

    /// The reference: blocks in a list, least recently used first.
    #[derive(Default)]
    struct Model {
        blocks: Vec<((Id, u64), u64)>,
    }

    impl Model {
        fn used(&self) -> u64 {
            self.blocks.iter().map(|b| b.1).sum()
        }

        fn use_block(&mut self, k: (Id, u64), bytes: u64) {
            let old = self.blocks.iter().position(|b| b.0 == k);
            let before = old.map_or(0, |i| self.blocks.remove(i).1);
            self.blocks.push((k, before + bytes));
        }

        fn evict(&mut self, limit: u64) -> Vec<Victim> {
            let mut want = Vec::new();
            while self.used() > limit && !self.blocks.is_empty() {
                let ((id, b), bytes) = self.blocks.remove(0);
                want.push(block(id, b, bytes));
            }
            want
        }
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(256))]
        /// The index counts what it holds and evicts until it is within the limit (or
        /// empty), least recently used first.
        #[test]
        fn eviction_follows_the_lru_order(ops in proptest::collection::vec(op(), 1..60)) {
            let (mut ix, mut model, mut ids) = (Index::default(), Model::default(), Vec::new());
            for op in ops {
                match op {
                    Op::Open(h, bs) => {
                        let bs: Vec<(u64, u64)> =
                            bs.into_iter().map(|(b, n)| (b.into(), n)).collect();
                        let id = ix.insert(format!("o{h}"), &bs);
                        for (b, n) in bs {
                            model.use_block((id, b), n);
                        }
                        ids.push(id);
                    }
                    Op::Add(i, b, n) => {
                        if let Some(&id) = ids.get(i as usize) {
                            prop_assert!(ix.add(id, b.into(), n));
                            model.use_block((id, b.into()), n);
                        }
                    }
                    Op::Evict(limit) => {
                        let got = ix.evict(limit);
                        let want = model.evict(limit);
                        prop_assert_eq!(got, want);
                        prop_assert!(ix.used() <= limit || model.blocks.is_empty());
                    }
                }
                prop_assert_eq!(ix.used(), model.used());
            }
        }
    }
}
