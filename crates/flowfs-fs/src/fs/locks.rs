//! Per-inode async locks, held across requests to the store, for operations on one
//! inode that must not overlap while those on different inodes never wait on each other:
//! `Locks::key` orders the operations that change an object's key or rewrite it in place
//! (a rename's copy and delete, an unlink, a metadata rewrite's copy onto itself: a
//! rewrite between a rename's copy and its delete wrote the name being left, and one
//! landing after the delete brought that name back as an object; rsync's and git's
//! temporary names stayed in the bucket, issue 26); `Locks::fill` the download of one
//! object opened for writing.

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::{Mutex as AsyncMutex, OwnedMutexGuard};

/// The mount's two per-inode orders.
#[derive(Default)]
pub(super) struct Locks {
    keys: InodeLocks,
    fills: InodeLocks,
}

impl Locks {
    /// Held by a rename, an unlink and a metadata rewrite of `ino`.
    pub(super) async fn key(&self, ino: u64) -> InodeHold<'_> {
        self.keys.hold(ino).await
    }

    /// Held by the download of `ino` opened for writing.
    pub(super) async fn fill(&self, ino: u64) -> InodeHold<'_> {
        self.fills.hold(ino).await
    }
}

/// The locks of the inodes someone holds or waits for; an entry lives only while used.
#[derive(Default)]
pub(super) struct InodeLocks {
    locks: Mutex<HashMap<u64, Arc<AsyncMutex<()>>>>,
}

/// Held: no other holder of the same inode's lock runs.
pub(super) struct InodeHold<'a> {
    owner: &'a InodeLocks,
    ino: u64,
    guard: Option<OwnedMutexGuard<()>>,
}

impl InodeLocks {
    /// Waits until no other holder of `ino`'s lock is left, then holds it.
    pub(super) async fn hold(&self, ino: u64) -> InodeHold<'_> {
        let lock = self.locks.lock().entry(ino).or_default().clone();
        let guard = lock.lock_owned().await;
        InodeHold {
            owner: self,
            ino,
            guard: Some(guard),
        }
    }

    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.locks.lock().len()
    }
}

impl Drop for InodeHold<'_> {
    fn drop(&mut self) {
        drop(self.guard.take());
        let mut locks = self.owner.locks.lock();
        // Only the map's own reference left: nobody holds or waits (waiters clone under
        // this lock), so the entry goes and the map stays as small as what is in use.
        if locks
            .get(&self.ino)
            .is_some_and(|l| Arc::strong_count(l) == 1)
        {
            locks.remove(&self.ino);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_holder_waits_and_the_map_empties() {
        let locks = Arc::new(InodeLocks::default());
        let first = locks.hold(7).await;
        let (tx, mut rx) = tokio::sync::oneshot::channel();
        let l2 = locks.clone();
        let waiter = tokio::spawn(async move {
            let _h = l2.hold(7).await;
            let _ = tx.send(());
        });
        tokio::task::yield_now().await;
        assert!(rx.try_recv().is_err(), "the second holder did not wait");
        let _other = locks.hold(8).await; // another inode is not held up
        drop(_other);
        drop(first);
        waiter.await.expect("waiter");
        assert_eq!(locks.len(), 0);
    }
}
