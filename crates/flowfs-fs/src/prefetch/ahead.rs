//! The ledger of whole objects fetched ahead of readers (object.rs): what was fetched,
//! and how much of it a reader opened. What no reader opens is the prefetch's waste; it
//! is bounded by the window (`SIBLING_PREFETCH` files and `--max-readahead` bytes ahead
//! of the reader) and reported by `flowfs status`.

use std::collections::{BTreeMap, HashMap};

/// Objects remembered until a reader opens them; beyond, the oldest are forgotten (and
/// stay counted as fetched and not read).
const LEDGER_MAX: usize = 4096;

/// Objects fetched ahead of readers since the mount started.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AheadStats {
    /// Objects fetched ahead.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those objects, the ones a reader opened afterwards.
    pub files_read: u64,
    /// Their bytes.
    pub bytes_read: u64,
}

#[derive(Default)]
pub(super) struct Ledger {
    /// Fetched and not opened yet: key -> (sequence number, bytes).
    waiting: HashMap<String, (u64, u64)>,
    /// The same keys by sequence number, oldest first.
    order: BTreeMap<u64, String>,
    next: u64,
    stats: AheadStats,
}

impl Ledger {
    /// `key`, `bytes` long, is being fetched ahead of its reader.
    pub(super) fn fetched(&mut self, key: &str, bytes: u64) {
        if self.waiting.contains_key(key) {
            return;
        }
        self.stats.files += 1;
        self.stats.bytes += bytes;
        let seq = self.next;
        self.next += 1;
        self.waiting.insert(key.to_string(), (seq, bytes));
        self.order.insert(seq, key.to_string());
        if self.order.len() > LEDGER_MAX {
            if let Some((_, old)) = self.order.pop_first() {
                self.waiting.remove(&old);
            }
        }
    }

    /// A reader opened `key`.
    pub(super) fn opened(&mut self, key: &str) {
        if let Some((seq, bytes)) = self.waiting.remove(key) {
            self.order.remove(&seq);
            self.stats.files_read += 1;
            self.stats.bytes_read += bytes;
        }
    }

    pub(super) fn stats(&self) -> AheadStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn what_readers_open_is_counted_once_and_the_ledger_stays_bounded() {
        let mut l = Ledger::default();
        l.fetched("a", 10);
        l.fetched("a", 10); // fetched again while waiting: one object
        l.fetched("b", 5);
        l.opened("a");
        l.opened("a");
        l.opened("never-fetched");
        let s = l.stats();
        assert_eq!(
            (s.files, s.bytes, s.files_read, s.bytes_read),
            (2, 15, 1, 10)
        );
        for i in 0..LEDGER_MAX + 10 {
            l.fetched(&format!("k{i}"), 1);
        }
        assert_eq!(l.waiting.len(), LEDGER_MAX);
        assert_eq!(l.order.len(), LEDGER_MAX);
        l.opened("b"); // forgotten: stays unread
        assert_eq!(l.stats().files_read, 1);
    }
}
