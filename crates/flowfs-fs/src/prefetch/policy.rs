//! Sequential detection and the read-ahead window of one open file.
//!
//! Every read fetches the 64 KiB chunks it touches. Only a reader that has continued
//! where it stopped at least once (a run) gets a window ahead of it: four times what the
//! run has read so far, at least 512 KiB, at most the read-ahead limit. Sizing the window
//! by bytes consumed rather than by the number of reads keeps a short stretch (an indexed
//! query reading a few hundred KiB through the kernel's read-ahead) from fetching
//! megabytes it never reads, while a long sequential read still reaches the limit fast.
//! A first read at offset 0 is no evidence of a sequential reader: htslib reads a BGZF
//! header there before it seeks through an index, so a tabix or `bcftools annotate`
//! query in a 2 GiB file costs kilobytes, not parts of it. Objects no larger than one
//! part come whole on their first read, in one request.

use crate::cache::CHUNK;

/// The smallest window ahead of a run.
const FIRST_WINDOW: u64 = 512 << 10;
/// How far out of order a read may arrive and still continue a run: the kernel hands its
/// read-ahead (at most 1 MiB here) to several threads.
const SLACK: u64 = 2 << 20;

#[derive(Debug, Default)]
pub struct SeqState {
    last_end: u64,
    /// Where the current run started (valid while `streak > 0`).
    run_start: u64,
    streak: u32,
    ahead_to: u64,
    reads: u64,
}

/// Byte ranges a read needs now (`need`) and should start fetching for later (`ahead`).
#[derive(Debug, PartialEq, Eq)]
pub struct Plan {
    pub need: (u64, u64),
    pub ahead: Option<(u64, u64)>,
}

fn down(x: u64, a: u64) -> u64 {
    x / a * a
}

fn up(x: u64, a: u64) -> u64 {
    x.div_ceil(a) * a
}

impl SeqState {
    pub fn plan(&mut self, off: u64, len: u64, size: u64, part: u64, max_ahead: u64) -> Plan {
        let end = (off + len).min(size);
        let first = self.reads == 0;
        self.reads += 1;
        if first && size <= part {
            self.last_end = end;
            return Plan {
                need: (0, size),
                ahead: None,
            };
        }
        let need = (down(off, CHUNK), up(end, CHUNK).min(size));
        let continued = !first
            && (off == self.last_end
                || (self.streak > 0
                    && off <= self.last_end + SLACK
                    && off + SLACK >= self.last_end));
        if !continued {
            self.streak = 0;
            self.ahead_to = 0;
            self.run_start = off;
            self.last_end = end;
            return Plan { need, ahead: None };
        }
        self.streak = self.streak.saturating_add(1);
        self.run_start = self.run_start.min(off);
        self.last_end = self.last_end.max(end);
        let window = self.window(max_ahead);
        let want_to = up(end + window, CHUNK).min(size);
        // Top the window up only once half of it is used, so that each request ahead
        // is large (part-sized once the window is) instead of one chunk per read.
        let from = need.1.max(self.ahead_to);
        if from >= want_to || (self.ahead_to > end && self.ahead_to - end > window / 2) {
            return Plan { need, ahead: None };
        }
        self.ahead_to = want_to;
        Plan {
            need,
            ahead: Some((from, want_to)),
        }
    }

    fn window(&self, max_ahead: u64) -> u64 {
        if self.streak == 0 {
            return 0;
        }
        let read = self.last_end.saturating_sub(self.run_start);
        read.saturating_mul(4)
            .max(FIRST_WINDOW)
            .min(max_ahead.max(CHUNK))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: u64 = 1 << 20;
    const GIB: u64 = 1 << 30;

    #[test]
    fn sequential_reads_grow_a_window_up_to_the_limit() {
        let mut s = SeqState::default();
        let r = 128 << 10;
        let p = s.plan(0, r, 2 * GIB, 8 * MIB, 64 * MIB);
        assert_eq!(
            p,
            Plan {
                need: (0, r),
                ahead: None
            }
        );
        let p = s.plan(r, r, 2 * GIB, 8 * MIB, 64 * MIB);
        assert_eq!(p.need, (r, 2 * r));
        // four times the 256 KiB read so far
        assert_eq!(p.ahead, Some((2 * r, 2 * r + 8 * r)));
        let mut furthest = 0;
        for i in 2..2048 {
            let p = s.plan(i * r, r, 2 * GIB, 8 * MIB, 64 * MIB);
            if let Some((a, b)) = p.ahead {
                assert!(b > a);
                furthest = b;
                // Never further than the limit ahead of the reader.
                assert!(b <= (i + 1) * r + 64 * MIB, "read {i}: ahead to {b}");
            }
        }
        // A long sequential read keeps the window open to the limit.
        assert!(furthest >= 2048 * r + 32 * MIB, "ahead only to {furthest}");
    }

    #[test]
    fn requests_ahead_are_large_once_the_window_is() {
        let mut s = SeqState::default();
        let r = 128 << 10;
        let mut sizes = Vec::new();
        for i in 0..1024 {
            if let Some((a, b)) = s.plan(i * r, r, 2 * GIB, 8 * MIB, 64 * MIB).ahead {
                sizes.push(b - a);
            }
        }
        // 128 MiB read in 1024 requests: a dozen or so requests ahead, the later ones
        // half the 64 MiB window each.
        assert!(sizes.len() <= 16, "{sizes:?}");
        let late = &sizes[sizes.len() - 3..];
        assert!(late.iter().all(|&n| n >= 32 * MIB - 2 * r), "{sizes:?}");
    }

    #[test]
    fn a_header_read_then_a_seek_fetches_no_part() {
        let mut s = SeqState::default();
        let p = s.plan(0, 4096, 2 * GIB, 8 * MIB, 64 * MIB);
        assert_eq!(
            p,
            Plan {
                need: (0, CHUNK),
                ahead: None
            }
        );
        let p = s.plan(1000 * MIB + 5, 4096, 2 * GIB, 8 * MIB, 64 * MIB);
        assert_eq!(p.need, (1000 * MIB, 1000 * MIB + CHUNK));
        assert_eq!(p.ahead, None);
        let p = s.plan(7 * MIB, 16384, 2 * GIB, 8 * MIB, 64 * MIB);
        assert_eq!(p.need.1 - p.need.0, CHUNK);
        assert_eq!(p.ahead, None);
    }

    #[test]
    fn a_short_run_after_a_seek_fetches_little_ahead() {
        let mut s = SeqState::default();
        let base = 700 * MIB;
        let mut fetched = 0;
        for i in 0..4 {
            let p = s.plan(base + i * 65536, 65536, 2 * GIB, 8 * MIB, 64 * MIB);
            fetched += p.need.1 - p.need.0 + p.ahead.map_or(0, |(a, b)| b - a);
        }
        assert!(fetched <= 4 * MIB, "{fetched}");
    }

    #[test]
    fn small_objects_come_in_one_request() {
        let mut s = SeqState::default();
        let p = s.plan(0, 4096, 3 * MIB, 8 * MIB, 64 * MIB);
        assert_eq!(
            p,
            Plan {
                need: (0, 3 * MIB),
                ahead: None
            }
        );
    }

    #[test]
    fn a_short_stretch_fetches_a_few_times_what_it_reads() {
        // An indexed query: a header read, a seek, then ~400 KiB read in the kernel's
        // 128 KiB requests, then a seek far away. Nothing beyond a few times the stretch.
        let mut s = SeqState::default();
        let r = 128 << 10;
        let mut fetched = 0;
        let mut add = |p: Plan| fetched += p.need.1 - p.need.0 + p.ahead.map_or(0, |(a, b)| b - a);
        add(s.plan(0, 4096, 2 * GIB, 8 * MIB, 64 * MIB));
        let base = 19 * MIB;
        for i in 0..3 {
            add(s.plan(base + i * r, r, 2 * GIB, 8 * MIB, 64 * MIB));
        }
        // the jump lands far outside the window: a new run, nothing ahead
        let p = s.plan(37 * MIB, r, 2 * GIB, 8 * MIB, 64 * MIB);
        assert_eq!(p.ahead, None);
        add(p);
        assert!(fetched <= 3 * MIB, "{fetched}");
    }
}
