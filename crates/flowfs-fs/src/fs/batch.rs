//! Many small requests at once (HEADs of a listing, copies and deletes of a rename, the
//! pages of a listing split in ranges), shared by the modules that send them.

use std::future::Future;

use crate::error::{FsError, Result};

/// Requests in flight at once for a batch of small ones (HEADs, copies, deletes).
const BATCH: usize = 32;

/// Sends `request(item)` for every item, `BATCH` at a time (a batch waits for its
/// slowest), and hands each answer to `each` as it comes; the first error `each` returns
/// ends it, and the requests still in flight are dropped.
pub(super) async fn batched<I, T, Fut>(
    items: &[I],
    request: impl Fn(&I) -> Fut,
    mut each: impl FnMut(T) -> Result<()>,
) -> Result<()>
where
    Fut: Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    for batch in items.chunks(BATCH) {
        let mut set = tokio::task::JoinSet::new();
        for item in batch {
            set.spawn(request(item));
        }
        while let Some(r) = set.join_next().await {
            each(r.map_err(|e| FsError::Internal(format!("a request task: {e}")))?)?;
        }
    }
    Ok(())
}
