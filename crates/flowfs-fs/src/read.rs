//! Sequential detection and the read-ahead window of one open file.
//!
//! Every read fetches the 64 KiB chunks it touches. Only a reader that has continued
//! where it stopped at least once (a streak) gets a window ahead of it, starting at
//! 512 KiB and doubling with each further sequential read up to the read-ahead limit.
//! A first read at offset 0 is no evidence of a sequential reader: htslib reads a BGZF
//! header there before it seeks through an index, so a tabix or `bcftools annotate`
//! query in a 2 GiB file costs kilobytes, not parts of it. Objects no larger than one
//! part come whole on their first read, in one request.

use crate::cache::CHUNK;

/// The window after the first continued read; it doubles with each further one.
const FIRST_WINDOW: u64 = 512 << 10;

#[derive(Debug, Default)]
pub struct SeqState {
    last_end: u64,
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
        // The kernel hands its read-ahead requests to several threads, so a streak
        // tolerates requests that arrive slightly out of order.
        let slack = self.window(max_ahead).max(1 << 20);
        let continued = !first
            && (off == self.last_end
                || (self.streak > 0
                    && off <= self.last_end + slack
                    && off + slack >= self.last_end));
        if !continued {
            self.streak = 0;
            self.ahead_to = 0;
            self.last_end = end;
            return Plan { need, ahead: None };
        }
        self.streak = (self.streak + 1).min(16);
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
        (FIRST_WINDOW << (self.streak - 1).min(12)).min(max_ahead.max(CHUNK))
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
        assert_eq!(p.ahead, Some((2 * r, 2 * r + FIRST_WINDOW)));
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
        // 128 MiB read in 1024 requests: a handful of requests ahead, the later ones
        // half the 64 MiB window each.
        assert!(sizes.len() <= 12, "{sizes:?}");
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
}
