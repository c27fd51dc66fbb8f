//! The mount's GET budget (`--max-concurrency N`): the bytes of `N` part-sized GETs may be
//! in flight at once, and a smaller GET takes a share by its size, up to `4 × N` GETs. The
//! bound on memory stays `N × part size` (a GET's bytes are held until they are on the
//! cache disk), while small objects, whose cost is the store's latency and not their bytes,
//! get many more requests in flight: with 20 ms per request, 16 GETs of 64 KiB files kept
//! a `cp -r` of 1,000 such files at 2.82 s against s5cmd's 2.24 s; 64 in flight gave
//! 2.05 s (issue 27, BENCHMARKS.md).

use std::sync::Arc;

use tokio::sync::{AcquireError, OwnedSemaphorePermit, Semaphore};

use crate::cache::CHUNK;

/// The size of a share: the cache's chunk, the smallest GET there is.
const UNIT: u64 = CHUNK;
/// How many small GETs may run per part-sized one (s5cmd's 64 workers at the default 16).
const SMALL_PER_PART: usize = 4;

/// Shares of the mount's GET bytes and count, taken by every GET.
#[derive(Clone)]
pub(crate) struct GetBudget {
    count: Arc<Semaphore>,
    bytes: Arc<Semaphore>,
    units: u32,
}

/// A GET's place in the budget, given back when dropped.
pub(crate) struct GetPermit {
    _count: OwnedSemaphorePermit,
    _bytes: OwnedSemaphorePermit,
}

impl GetBudget {
    /// Room for `max_gets` GETs of `part_size` bytes, or more smaller ones.
    pub(crate) fn new(max_gets: usize, part_size: u64) -> GetBudget {
        let max_gets = max_gets.max(1);
        let per_part = part_size.div_ceil(UNIT).max(1);
        let units = (max_gets as u64 * per_part).min(Semaphore::MAX_PERMITS as u64 / 2) as u32;
        GetBudget {
            count: Arc::new(Semaphore::new(max_gets * SMALL_PER_PART)),
            bytes: Arc::new(Semaphore::new(units as usize)),
            units,
        }
    }

    /// Waits for the share of a GET of `bytes` (never more than the whole budget, so a GET
    /// larger than it runs alone). Every GET takes its count first, then its bytes: one
    /// order, so two waiters never hold what the other needs.
    pub(crate) async fn acquire(&self, bytes: u64) -> Result<GetPermit, AcquireError> {
        let units = bytes.div_ceil(UNIT).clamp(1, self.units as u64) as u32;
        let count = self.count.clone().acquire_owned().await?;
        let bytes = self.bytes.clone().acquire_many_owned(units).await?;
        Ok(GetPermit {
            _count: count,
            _bytes: bytes,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[tokio::test]
    async fn small_gets_share_what_one_part_takes_and_big_ones_are_capped() {
        let b = GetBudget::new(2, 1 << 20);
        // Two 1 MiB parts fill the bytes; eight 64 KiB GETs (4 per part) fill the count.
        let parts = [
            b.acquire(1 << 20).await.unwrap(),
            b.acquire(1 << 20).await.unwrap(),
        ];
        let more = tokio::time::timeout(Duration::from_millis(50), b.acquire(64 << 10));
        assert!(more.await.is_err(), "the bytes of two parts are taken");
        drop(parts);
        let mut small = Vec::new();
        for _ in 0..8 {
            small.push(b.acquire(64 << 10).await.unwrap());
        }
        assert_eq!(b.count.available_permits(), 0);
        assert_eq!(b.bytes.available_permits(), 32 - 8);
        drop(small);
        // A GET bigger than the whole budget waits for all of it, then runs.
        let part = b.acquire(1 << 20).await.unwrap();
        let big = tokio::time::timeout(Duration::from_millis(50), b.acquire(1 << 40));
        assert!(big.await.is_err(), "waits while a part holds some");
        drop(part);
        let big = b.acquire(1 << 40).await.unwrap();
        assert_eq!(b.bytes.available_permits(), 0);
        drop(big);
        assert_eq!(b.bytes.available_permits(), 32);
    }
}
