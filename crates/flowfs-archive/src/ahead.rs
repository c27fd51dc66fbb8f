//! Members of a plain tar read in archive order (`cp -r`, `tar c`, a tool walking a
//! reference directory): each is a few hundred KiB, so a GET per member made `cp -r` of
//! 10,000 members 9,999 GETs one after another (B11: 110 s against 12 s for `cat | tar x`
//! of the same archive). `Ahead` notices a read that starts just past where an earlier one
//! ended and fetches the archive from there in one bigger GET (1 MiB, doubling to 8 MiB
//! while reads stay in order), keeping it for the members that follow. A read that follows
//! nothing (a random member) is a GET of its own bytes only, as before.

use std::collections::VecDeque;

use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;
use tokio::sync::OnceCell;

/// Members of at most this many bytes take part (the caller decides); a bigger one is
/// read ahead by the file system above, range after range, and a read of it here too
/// fetched its bytes twice. At 1 MiB, the 272 members of 1-8 MiB in B11's 10,000 (a
/// quarter of its bytes) were each read on their own, one after another: `cp -r` took
/// 791 GETs, 2.25x `cat | tar x`; at 8 MiB, 316 GETs, 1.19x.
pub(crate) const SMALL: u64 = 8 << 20;
/// The first fetch ahead, and the most.
const FIRST: u64 = 1 << 20;
const MOST: u64 = 8 << 20;
/// Bytes kept per archive.
const KEPT: u64 = 32 << 20;
/// A read "follows" one that ended at most this far before it: the next member's
/// headers (512 bytes, a PAX or GNU long-name header more) and the padding between.
const GAP: u64 = 64 << 10;
/// Ends of recent reads remembered: the file system reads a directory's small files
/// ahead several at once, and a few readers in order at once each keep theirs.
const ENDS: usize = 32;

/// What to do for a read of archive bytes `[start, end)`.
#[derive(Debug)]
pub(crate) enum Plan {
    /// They are in the chunk `[at, to)` of the archive: fetched, being fetched, or to be
    /// fetched by whoever comes first (`cell.get_or_try_init`); the others wait for it.
    Chunk {
        at: u64,
        to: u64,
        cell: Arc<OnceCell<Bytes>>,
        /// The chunk after it, for the caller to fetch in the background: reads in order
        /// then find their bytes arrived rather than wait a GET per chunk.
        next: Option<(u64, u64, Arc<OnceCell<Bytes>>)>,
    },
    /// Fetch exactly them.
    Direct,
}

#[derive(Default)]
pub(crate) struct Ahead {
    state: Mutex<State>,
}

/// Archive bytes `[at, to)`, fetched once by whoever asks first.
struct Chunk {
    at: u64,
    to: u64,
    cell: Arc<OnceCell<Bytes>>,
    /// The chunk after it was asked for.
    followed: bool,
}

#[derive(Default)]
struct State {
    /// Chunks of the archive fetched ahead, or being fetched, oldest first.
    kept: VecDeque<Chunk>,
    /// Where recent reads ended.
    ends: VecDeque<u64>,
    /// The next fetch ahead: grows while reads follow each other.
    window: u64,
}

impl Ahead {
    /// The plan for a read of `[start, end)`; a fetch ahead goes no further than `limit`
    /// (the archive's end, or a member too big to be read ahead here), and ends where
    /// `snap` says (the end of the member it would cut: no member read from two chunks).
    pub(crate) fn plan(&self, start: u64, end: u64, limit: u64, snap: &dyn Fn(u64) -> u64) -> Plan {
        let mut st = self.state.lock();
        let follows = st.follows(start);
        st.ended(end);
        let have = st.kept.iter().position(|c| c.at <= start && end <= c.to);
        let i = match have {
            Some(i) => i,
            // A random member costs its own bytes; the window shrinks, so that after a
            // run of random reads a pair side by side does not fetch 8 MiB ahead.
            None if !follows => {
                st.window /= 2;
                return Plan::Direct;
            }
            None => {
                st.window = (st.window * 2).clamp(FIRST, MOST);
                let to = snap((start + st.window).min(limit)).min(limit).max(end);
                st.add(start, to)
            }
        };
        // The chunk after this one is fetched while this one is read, once.
        let c = &st.kept[i];
        let (at, to, cell, followed) = (c.at, c.to, c.cell.clone(), c.followed);
        // Not for a chunk just made by a read after only one other (two random members
        // side by side): for a read that found its chunk, or a run of reads in order.
        let run = have.is_some() || st.window >= 2 * FIRST;
        let next = match !followed && to < limit && run {
            true => {
                st.kept[i].followed = true;
                // Doubling while reads stay in order, as a new chunk's window does.
                st.window = ((to - at) * 2).clamp(FIRST, MOST).max(st.window);
                let next_to = snap((to + st.window).min(limit)).min(limit);
                let j = st.add(to, next_to);
                Some((to, next_to, st.kept[j].cell.clone()))
            }
            false => None,
        };
        Plan::Chunk { at, to, cell, next }
    }

    /// A read of a big member, `[start, end)`: not fetched here, but the small member
    /// after it follows it.
    pub(crate) fn saw(&self, end: u64) {
        self.state.lock().ended(end);
    }
}

impl State {
    /// A new chunk `[at, to)` (or the one kept there); its place in `kept`.
    fn add(&mut self, at: u64, to: u64) -> usize {
        if let Some(i) = self.kept.iter().position(|c| c.at == at) {
            return i;
        }
        self.kept.push_back(Chunk {
            at,
            to,
            cell: Arc::new(OnceCell::new()),
            followed: false,
        });
        while self.kept.iter().map(|c| c.to - c.at).sum::<u64>() > KEPT {
            self.kept.pop_front();
        }
        self.kept.len() - 1
    }

    fn follows(&self, start: u64) -> bool {
        self.ends.iter().any(|&e| start >= e && start - e <= GAP)
    }

    fn ended(&mut self, end: u64) {
        if !self.ends.contains(&end) {
            if self.ends.len() == ENDS {
                self.ends.pop_front();
            }
            self.ends.push_back(end);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(p: Plan) -> (u64, u64) {
        match p {
            Plan::Chunk { at, to, .. } => (at, to),
            Plan::Direct => panic!("a direct read"),
        }
    }

    fn same(x: u64) -> u64 {
        x
    }

    #[test]
    fn reads_in_order_fetch_ahead_and_random_ones_do_not() {
        let a = Ahead::default();
        let size = 100 << 20;
        assert!(matches!(a.plan(0, 1000, size, &same), Plan::Direct));
        // The next member, past its header: a chunk, which the members after it share
        // (fetched once, by whoever comes first); the second read in it asks for the
        // chunk after it to be fetched now (two random members side by side do not).
        let first = a.plan(1536, 3000, size, &same);
        let after = 1536 + FIRST;
        assert!(matches!(&first, Plan::Chunk { next: None, .. }));
        assert_eq!(chunk(first), (1536, after));
        let again = a.plan(3584, 5000, size, &same);
        assert!(
            matches!(&again, Plan::Chunk { next: Some((at, to, _)), .. } if (*at, *to) == (after, after + 2 * FIRST))
        );
        assert_eq!(chunk(again), (1536, after));
        assert!(
            matches!(
                a.plan(5100, 5200, size, &same),
                Plan::Chunk { next: None, .. }
            ),
            "asked once"
        );
        // In the chunk fetched behind: served from it, and the one after it asked for.
        let behind = a.plan(after + 512, after + 1000, size, &same);
        assert!(
            matches!(&behind, Plan::Chunk { next: Some((at, to, _)), .. } if (*at, *to) == (after + 2 * FIRST, after + 6 * FIRST))
        );
        // A member far away: its own bytes only.
        assert!(matches!(
            a.plan(50 << 20, (50 << 20) + 10, size, &same),
            Plan::Direct
        ));
        // A chunk ends at a member's end (`snap`) and before a big member (`limit`).
        let at = (50 << 20) + 600;
        let snap = |x: u64| x.div_ceil(10_000) * 10_000;
        let (_, to) = chunk(a.plan(at, at + 10, size, &snap));
        assert_eq!(to % 10_000, 0);
        a.saw(70 << 20);
        let at = (70 << 20) + 512;
        assert_eq!(chunk(a.plan(at, at + 10, at + 100, &same)), (at, at + 100));
    }
}
