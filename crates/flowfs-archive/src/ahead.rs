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
/// fetched its bytes twice.
pub(crate) const SMALL: u64 = 1 << 20;
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
    },
    /// Fetch exactly them.
    Direct,
}

#[derive(Default)]
pub(crate) struct Ahead {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Chunks of the archive fetched ahead, or being fetched: (at, to, bytes), oldest first.
    kept: VecDeque<(u64, u64, Arc<OnceCell<Bytes>>)>,
    /// Where recent reads ended.
    ends: VecDeque<u64>,
    /// The next fetch ahead: grows while reads follow each other.
    window: u64,
}

impl Ahead {
    /// The plan for a read of `[start, end)`; a fetch ahead goes no further than `limit`
    /// (the archive's end, or a member too big to be read ahead here).
    pub(crate) fn plan(&self, start: u64, end: u64, limit: u64) -> Plan {
        let mut st = self.state.lock();
        let follows = st.follows(start);
        st.ended(end);
        let have = st
            .kept
            .iter()
            .find(|(at, to, _)| *at <= start && end <= *to);
        if let Some((at, to, cell)) = have {
            let (at, to, cell) = (*at, *to, cell.clone());
            return Plan::Chunk { at, to, cell };
        }
        if !follows {
            // The window is kept: a random member costs its own bytes whatever it is, and
            // members in order after it go on at the size they had reached.
            return Plan::Direct;
        }
        st.window = (st.window * 2).clamp(FIRST, MOST);
        let to = (start + st.window).min(limit).max(end);
        let cell = Arc::new(OnceCell::new());
        st.kept.push_back((start, to, cell.clone()));
        while st.kept.iter().map(|(at, to, _)| to - at).sum::<u64>() > KEPT {
            st.kept.pop_front();
        }
        Plan::Chunk {
            at: start,
            to,
            cell,
        }
    }

    /// A read of a big member, `[start, end)`: not fetched here, but the small member
    /// after it follows it.
    pub(crate) fn saw(&self, end: u64) {
        self.state.lock().ended(end);
    }
}

impl State {
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

    #[test]
    fn reads_in_order_fetch_ahead_and_random_ones_do_not() {
        let a = Ahead::default();
        let size = 100 << 20;
        assert!(matches!(a.plan(0, 1000, size), Plan::Direct));
        // The next member, past its header: a chunk ahead, which the members after it
        // share (fetched once, by whoever comes first).
        assert_eq!(chunk(a.plan(1536, 3000, size)), (1536, 1536 + FIRST));
        assert_eq!(chunk(a.plan(3584, 5000, size)), (1536, 1536 + FIRST));
        // A member running past the chunk, still in order: the window doubles.
        let past = 1536 + FIRST + 10;
        assert_eq!(chunk(a.plan(5512, past, size)), (5512, 5512 + 2 * FIRST));
        // A member far away: its own bytes only, and the window starts again.
        assert!(matches!(
            a.plan(50 << 20, (50 << 20) + 10, size),
            Plan::Direct
        ));
        // The limit (a big member, the archive's end) bounds a chunk.
        let at = (50 << 20) + 600;
        assert_eq!(chunk(a.plan(at, at + 10, at + 100)), (at, at + 100));
    }
}
