//! Fetches in flight: one ranged GET (or one eviction punching chunks) that readers of
//! its chunks wait on, and the claim that tells a reader which to wait for and which to
//! run itself.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};

use tokio::sync::Notify;

use crate::error::Result;

/// One ranged GET in flight; every reader that needs its chunks waits on it.
#[derive(Default)]
pub struct Fetch {
    notify: Notify,
    /// The bytes are in memory (readers can take them) but maybe not yet in the file.
    ready: AtomicBool,
    result: OnceLock<Result<()>>,
}

impl Fetch {
    /// Until the bytes are in the data file (or the fetch failed).
    pub async fn wait(&self) -> Result<()> {
        self.wait_for(false).await
    }

    /// Until the bytes can be read, from memory if not yet from the file.
    pub async fn wait_ready(&self) -> Result<()> {
        self.wait_for(true).await
    }

    async fn wait_for(&self, ready: bool) -> Result<()> {
        loop {
            let notified = self.notify.notified();
            if let Some(r) = self.result.get() {
                return r.clone();
            }
            if ready && self.ready.load(Ordering::Acquire) {
                return Ok(());
            }
            notified.await;
        }
    }

    pub(super) fn set_ready(&self) {
        self.ready.store(true, Ordering::Release);
        self.notify.notify_waiters();
    }

    pub(super) fn finish(&self, r: Result<()>) {
        let _ = self.result.set(r);
        self.notify.notify_waiters();
    }
}

/// What a reader must do to get a chunk range: wait for fetches already running and
/// run the ones it was handed, each with the chunks of the range it covers (start chunk,
/// end chunk, fetch).
pub struct Claim {
    pub wait: Vec<(u64, u64, Arc<Fetch>)>,
    pub start: Vec<(u64, u64, Arc<Fetch>)>,
}
