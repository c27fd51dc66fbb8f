//! The bitmap of the 64 KiB chunks an entry holds, and its blocks of `BLOCK_CHUNKS`.

use super::persist::popcount;
use super::{BLOCK_CHUNKS, CHUNK};

/// One bit per chunk, and how many are set.
pub(super) struct Bitmap {
    present: Vec<u64>,
    count: u64,
}

impl Bitmap {
    pub fn new(present: Vec<u64>) -> Bitmap {
        let count = popcount(&present);
        Bitmap { present, count }
    }

    pub fn words(&self) -> &[u64] {
        &self.present
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn has(&self, c: u64) -> bool {
        self.present[(c / 64) as usize] & (1 << (c % 64)) != 0
    }

    /// Sets chunks `[c0, c1)`; how many were not set.
    pub fn set_range(&mut self, c0: u64, c1: u64) -> u64 {
        let mut added = 0;
        for c in c0..c1 {
            let (w, b) = ((c / 64) as usize, 1u64 << (c % 64));
            if self.present[w] & b == 0 {
                added += 1;
            }
            self.present[w] |= b;
        }
        self.count += added;
        added
    }

    /// Clears the chunks of `[c0, c1)` that are set; the runs of them `(start, end)`.
    pub fn clear_range(&mut self, c0: u64, c1: u64) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut run: Option<u64> = None;
        for c in c0..=c1 {
            if c < c1 && self.clear(c) {
                run.get_or_insert(c);
            } else if let Some(s) = run.take() {
                runs.push((s, c));
            }
        }
        self.count -= runs.iter().map(|(s, c)| c - s).sum::<u64>();
        runs
    }

    fn clear(&mut self, c: u64) -> bool {
        let (w, b) = ((c / 64) as usize, 1u64 << (c % 64));
        let had = self.present[w] & b != 0;
        self.present[w] &= !b;
        had
    }

    /// Bytes present in each block of a bitmap of `chunks` chunks that has any.
    pub fn blocks(&self, chunks: u64) -> Vec<(u64, u64)> {
        (0..chunks.div_ceil(BLOCK_CHUNKS))
            .filter_map(|b| {
                let n = (b * BLOCK_CHUNKS..((b + 1) * BLOCK_CHUNKS).min(chunks))
                    .filter(|&c| self.has(c))
                    .count() as u64;
                (n > 0).then_some((b, n * CHUNK))
            })
            .collect()
    }
}
