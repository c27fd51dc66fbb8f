//! An entry's chunk map as this process last saw it: one `u32` per 64 KiB chunk, as in
//! the map of the entry's file (persist.rs): bit 0 says the chunk is present, the bits
//! above are its generation, one more each time the chunk is made present again. The file
//! is the truth every process reads; this copy is a hint that a read checks against it
//! (entry/mod.rs `try_read`).

use super::{BLOCK_CHUNKS, CHUNK};

/// A chunk's word with the present bit set, one generation after `old`.
pub(super) fn made_present(old: u32) -> u32 {
    if old & 1 == 1 {
        old
    } else {
        ((old >> 1).wrapping_add(1) << 1) | 1
    }
}

/// One word per chunk, and how many are present (an open asks whether any is: a count,
/// not a scan of a large object's map).
pub(super) struct ChunkMap {
    words: Vec<u32>,
    present: usize,
}

impl ChunkMap {
    pub fn new(words: Vec<u32>) -> ChunkMap {
        let present = present(&words) as usize;
        ChunkMap { words, present }
    }

    pub fn has(&self, c: u64) -> bool {
        self.words.get(c as usize).is_some_and(|w| w & 1 == 1)
    }

    /// Whether any chunk is present.
    pub fn any(&self) -> bool {
        self.present > 0
    }

    /// Sets the word of chunk `c` (one that exists), keeping the count.
    fn set(&mut self, c: usize, w: u32) {
        let was = self.words[c] & 1;
        self.words[c] = w;
        self.present = self.present + (w & 1) as usize - was as usize;
    }

    /// The words of chunks `[c0, c1)`.
    pub fn words(&self, c0: u64, c1: u64) -> &[u32] {
        &self.words[c0 as usize..c1 as usize]
    }

    /// Takes what the file says of chunks `c0..` (the first word is chunk `c0`), except
    /// for the chunks `skip` says (in flight here).
    pub fn update(&mut self, c0: u64, words: &[u32], skip: impl Fn(u64) -> bool) {
        for (i, &w) in words.iter().enumerate() {
            let c = c0 + i as u64;
            if !skip(c) && (c as usize) < self.words.len() {
                self.set(c as usize, w);
            }
        }
    }

    /// Clears the present chunks of `[c0, c1)`; the runs of them `(start, end)`.
    pub fn clear_range(&mut self, c0: u64, c1: u64) -> Vec<(u64, u64)> {
        let mut runs = Vec::new();
        let mut run: Option<u64> = None;
        for c in c0..=c1 {
            let had = c < c1 && self.has(c);
            if had {
                self.set(c as usize, self.words[c as usize] & !1);
                run.get_or_insert(c);
            } else if let Some(s) = run.take() {
                runs.push((s, c));
            }
        }
        runs
    }
}

/// Present chunks in `words`.
pub(super) fn present(words: &[u32]) -> u64 {
    words.iter().filter(|w| *w & 1 == 1).count() as u64
}

/// Bytes present in each block of a map that has any (chunks counted whole).
pub(super) fn blocks(words: &[u32]) -> Vec<(u64, u64)> {
    words
        .chunks(BLOCK_CHUNKS as usize)
        .enumerate()
        .filter_map(|(b, w)| {
            let n = present(w);
            (n > 0).then_some((b as u64, n * CHUNK))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_count_of_present_chunks_follows_updates_and_clears() {
        let mut m = ChunkMap::new(vec![0, 3, 0, 0]);
        assert!(m.any());
        m.update(2, &[1, 5], |_| false);
        assert_eq!(m.present, 3);
        m.update(1, &[2], |_| false);
        assert_eq!(m.present, 2);
        assert_eq!(m.clear_range(0, 4), vec![(2, 4)]);
        assert!(!m.any());
        m.update(3, &[7, 9], |_| false); // past the end: ignored
        assert_eq!((m.present, m.has(3)), (1, true));
    }
}
