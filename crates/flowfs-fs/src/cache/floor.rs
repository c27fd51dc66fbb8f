//! Whether the free-space floor (`--cache-min-free`) leaves the cache room, as every
//! admission asks (cache/keep.rs): from memory, with the disk asked again (a statvfs and
//! the directory's count) at most once a `RECHECK`. Asked per delivered piece, on the
//! async workers that receive a GET's body, it was two system calls a piece.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::time::{Duration, Instant};

/// How long an answer stands: a disk that frees up is used again within this.
const RECHECK: Duration = Duration::from_secs(1);
/// `asked_ms` before the first question.
const NEVER: u64 = u64::MAX;

pub(super) struct Floor {
    start: Instant,
    /// When the disk was last asked, in ms since `start` (`NEVER`: not yet).
    asked_ms: AtomicU64,
    room: AtomicBool,
}

impl Floor {
    pub(super) fn new() -> Floor {
        Floor {
            start: Instant::now(),
            asked_ms: AtomicU64::new(NEVER),
            room: AtomicBool::new(true),
        }
    }

    /// The last answer if it is younger than `RECHECK`, else `ask`'s, kept for the next.
    pub(super) fn has_room(&self, ask: impl FnOnce() -> bool) -> bool {
        let now = self.start.elapsed().as_millis() as u64;
        let asked = self.asked_ms.load(Relaxed);
        if asked != NEVER && now.saturating_sub(asked) < RECHECK.as_millis() as u64 {
            return self.room.load(Relaxed);
        }
        // Whoever finds it stale asks; another asking at the same moment asks too.
        let room = ask();
        self.room.store(room, Relaxed);
        self.asked_ms.store(now, Relaxed);
        room
    }

    /// The next question asks the disk (the floor changed).
    pub(super) fn forget(&self) {
        self.asked_ms.store(NEVER, Relaxed);
    }
}

#[cfg(test)]
mod tests {
    use super::Floor;

    #[test]
    fn the_disk_is_asked_once_within_a_second_and_again_after_a_forget() {
        let f = Floor::new();
        let mut asked = 0;
        for _ in 0..100 {
            assert!(!f.has_room(|| {
                asked += 1;
                false
            }));
        }
        assert_eq!(asked, 1);
        f.forget();
        assert!(f.has_room(|| true));
    }
}
