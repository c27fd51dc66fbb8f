//! GET sizing: the pieces a claim hands over, grouped into GETs.

use std::sync::Arc;

use crate::cache::{Claimed, CHUNK};

use super::{Object, Prefetcher};

/// Chunks per piece of a GET: what a reader waits for at most before its bytes are
/// handed over, however long the GET they come in.
pub(super) const PIECE: u64 = (1 << 20) / CHUNK;

/// The longest GETs, in chunks, for what a reader needs now and for read-ahead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Sizing {
    part: u64,
    ahead: u64,
}

impl Sizing {
    pub(super) fn new(part_size: u64, max_readahead: u64) -> Sizing {
        let part = (part_size / CHUNK).max(1);
        // Far ahead of a long run, GETs of half the window: a fifth of the requests of
        // part-sized ones, and the server spends its CPU per request.
        let ahead = (max_readahead / 2 / CHUNK).max(part);
        Sizing { part, ahead }
    }

    /// GETs of what a read waits for: at most one part.
    pub(super) fn part_run(&self) -> u64 {
        self.part
    }

    /// GETs of read-ahead: at most half the window, at least one part.
    pub(super) fn ahead_run(&self) -> u64 {
        self.ahead
    }
}

/// Consecutive pieces together, each group spanning at most `max_run` chunks (a piece
/// longer than that alone).
/// (`span`: a piece's chunks.)
pub(super) fn group<P>(pieces: Vec<P>, max_run: u64, span: fn(&P) -> (u64, u64)) -> Vec<Vec<P>> {
    let mut out = Vec::new();
    let mut group: Vec<P> = Vec::new();
    for p in pieces {
        let (s, e) = span(&p);
        let joins = group
            .first()
            .zip(group.last())
            .is_some_and(|(first, last)| span(last).1 == s && e - span(first).0 <= max_run);
        if !joins && !group.is_empty() {
            out.push(std::mem::take(&mut group));
        }
        group.push(p);
    }
    if !group.is_empty() {
        out.push(group);
    }
    out
}

impl Prefetcher {
    /// Starts the claimed pieces, consecutive ones together in GETs of at most `max_run`
    /// chunks.
    pub(super) fn spawn_gets(
        self: &Arc<Self>,
        obj: &Arc<Object>,
        pieces: Vec<Claimed>,
        max_run: u64,
    ) {
        for g in group(pieces, max_run, Claimed::chunks) {
            self.spawn_get(obj, g);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pieces(ranges: &[(u64, u64)]) -> Vec<(u64, u64)> {
        ranges.to_vec()
    }

    fn spans(groups: &[Vec<(u64, u64)>]) -> Vec<(u64, u64)> {
        groups.iter().map(|g| (g[0].0, g[g.len() - 1].1)).collect()
    }

    fn group(p: Vec<(u64, u64)>, max_run: u64) -> Vec<Vec<(u64, u64)>> {
        super::group(p, max_run, |&p| p)
    }

    #[test]
    fn consecutive_pieces_share_a_get_up_to_the_run() {
        let p = pieces(&[(0, 16), (16, 32), (32, 48), (48, 64), (64, 70)]);
        assert_eq!(spans(&group(p, 32)), [(0, 32), (32, 64), (64, 70)]);
    }

    #[test]
    fn a_gap_starts_a_new_get() {
        let p = pieces(&[(0, 16), (20, 36), (36, 40)]);
        assert_eq!(spans(&group(p, 128)), [(0, 16), (20, 40)]);
        assert!(group(Vec::new(), 16).is_empty());
    }

    #[test]
    fn read_ahead_gets_are_half_the_window_and_never_below_a_part() {
        let s = Sizing::new(8 << 20, 64 << 20);
        assert_eq!(s.part_run() * CHUNK, 8 << 20);
        assert_eq!(s.ahead_run() * CHUNK, 32 << 20);
        let s = Sizing::new(8 << 20, 4 << 20);
        assert_eq!(s.ahead_run(), s.part_run());
        assert_eq!(Sizing::new(1, 1).part_run(), 1);
    }
}
