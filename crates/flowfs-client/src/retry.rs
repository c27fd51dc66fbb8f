//! Retries that outlast a bad minute: every request to the store goes through
//! [`Retrying`], which sends it again after a retryable failure (503 SlowDown, 5xx, a
//! reset, a timeout) with exponential backoff and full jitter, until it succeeds, fails
//! for good (403, 404, a refused key), or its time budget is spent. Throttling also
//! slows the whole mount down for a while ([`Limiter`]), as the AWS SDKs' adaptive
//! mode does, so that thousands of tasks do not keep a throttled prefix throttled.
//!
//! Each store's client underneath makes one attempt per call: one policy, here, decides
//! them all.

use crate::{ByteRange, Completion, Crc, List, ListAfter, Metadata, Part, Payload, Pieces};
use crate::{Rewrite, Sink, Upload, Version};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;
use rand::Rng;
use tokio::time::Instant;

use crate::limiter::Limiter;
use crate::metrics::{RetryEvent, StoreMetrics};
use crate::{
    ClientError, KeyRules, ListPage, ObjectClient, ObjectMeta, PutResult, Result, UploadInfo,
};

/// When to send a failed request again.
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    /// Time from the first attempt after which no new attempt starts.
    pub budget: Duration,
    /// Attempts at most, the first included.
    pub max_attempts: u32,
    /// Backoff before the second attempt, at most (full jitter picks 0..=this).
    pub base: Duration,
    /// The longest backoff between two attempts.
    pub cap: Duration,
}

impl Default for RetryPolicy {
    fn default() -> RetryPolicy {
        RetryPolicy {
            budget: Duration::from_secs(60),
            max_attempts: 100,
            base: Duration::from_millis(50),
            cap: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    /// The pause before attempt `attempt + 1` (attempt counts from 1): uniform in
    /// `[0, min(cap, base·2^(attempt-1))]`, "full jitter", which spreads the retries of
    /// many clients failed together instead of sending them again in waves.
    pub fn backoff(&self, attempt: u32, rng: &mut impl Rng) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.saturating_sub(1).min(20));
        let top = exp.min(self.cap);
        top.mul_f64(rng.gen::<f64>())
    }

    /// The pause before sending again after failed attempt `attempt` (from 1), `elapsed`
    /// after the first began; `None` once the attempts or `budget` are spent.
    pub fn pause_within(
        &self,
        attempt: u32,
        elapsed: Duration,
        budget: Duration,
    ) -> Option<Duration> {
        let pause = self.backoff(attempt, &mut rand::thread_rng());
        (attempt < self.max_attempts && elapsed + pause <= budget).then_some(pause)
    }

    /// `pause_within` the policy's own budget.
    pub fn pause_after(&self, attempt: u32, elapsed: Duration) -> Option<Duration> {
        self.pause_within(attempt, elapsed, self.budget)
    }
}

/// What the retries of a mount have done so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetryStats {
    /// Attempts sent again after a retryable failure.
    pub retries: u64,
    /// Failures that were throttling (503 SlowDown, 429).
    pub throttled: u64,
    /// Requests that failed although retryable: budget or attempts spent.
    pub gave_up: u64,
}

/// An [`ObjectClient`] that retries the one it wraps.
pub struct Retrying {
    inner: Arc<dyn ObjectClient>,
    policy: RetryPolicy,
    limiter: Limiter,
    metrics: Arc<StoreMetrics>,
}

impl Retrying {
    /// Retries the requests of `inner` as `policy` says.
    pub fn new(inner: Arc<dyn ObjectClient>, policy: RetryPolicy) -> Retrying {
        Retrying {
            inner,
            policy,
            limiter: Limiter::default(),
            metrics: StoreMetrics::new(),
        }
    }

    /// Counts retries and bytes into `metrics` (the backend's own, which counts its
    /// requests) rather than a set of its own.
    pub fn with_metrics(mut self, metrics: Arc<StoreMetrics>) -> Retrying {
        self.metrics = metrics;
        self
    }

    /// The metrics it counts into.
    pub fn metrics(&self) -> &Arc<StoreMetrics> {
        &self.metrics
    }

    /// What the retries have done so far, for `flowfs status` and the unmount log.
    pub fn stats(&self) -> RetryStats {
        let c = self.metrics.snapshot();
        RetryStats {
            retries: c.retries,
            throttled: c.throttled,
            gave_up: c.gave_up,
        }
    }

    /// Sends `attempt` until it succeeds, fails for good, or the policy says stop.
    async fn run<T, F, Fut>(&self, what: &str, budget: Duration, mut attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let start = Instant::now();
        let mut n = 0u32;
        loop {
            self.limiter.acquire().await;
            n += 1;
            let e = match attempt().await {
                Ok(v) => {
                    self.limiter.succeeded();
                    return Ok(v);
                }
                Err(e) if !e.is_retryable() => return Err(e),
                Err(e) => e,
            };
            if let ClientError::Corrupt(why) = &e {
                tracing::warn!("{what}: a body damaged in transfer, sent again: {why}");
            }
            let throttled = matches!(e, ClientError::Throttled(_));
            if throttled {
                self.limiter.throttled();
            }
            let Some(pause) = self.policy.pause_within(n, start.elapsed(), budget) else {
                self.metrics.retry(RetryEvent::GaveUp, throttled);
                tracing::warn!("{what}: giving up after {n} attempts: {e}");
                return Err(e);
            };
            self.metrics.retry(RetryEvent::Retried, throttled);
            tracing::debug!("{what}: attempt {n} failed, again in {pause:?}: {e}");
            self.metrics.backed_off(pause);
            tokio::time::sleep(pause).await;
        }
    }

    /// `run` with the mount's budget. Each request is logged at debug level (target
    /// `flowfs::request`) inside the span of the FUSE operation that caused it, so that a
    /// benchmark's request counts can be traced back to their operations
    /// (`FLOWFS_LOG=flowfs::request=debug,flowfs_fs=debug`).
    async fn retry<T, F, Fut>(&self, op: &str, what: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        tracing::debug!(target: "flowfs::request", "{op} {what}");
        self.run(what, self.policy.budget, attempt).await
    }
}

impl Retrying {
    /// A retry asks only for the pieces not delivered yet: a reader is never handed
    /// the same piece twice, and a body cut near its end is not fetched again whole.
    async fn get_pieces(&self, get: Pieces<'_>, whole: bool, sink: Sink<'_>) -> Result<()> {
        let Pieces { src, start, cuts } = get;
        let done = Mutex::new(0usize);
        let sink = Mutex::new(sink);
        self.retry("GET_RANGE", src.key, || {
            let from = *done.lock();
            let begin = if from == 0 { start } else { cuts[from - 1] };
            let (done, sink) = (&done, &sink);
            async move {
                let mut relay = |i: usize, b: Bytes| {
                    self.metrics.downloaded(b.len());
                    let mut s = sink.lock();
                    (*s)(from + i, b);
                    *done.lock() = from + i + 1;
                };
                let rest = &cuts[from..];
                if whole && from == 0 {
                    return self.inner.get_whole_pieces(src, rest, &mut relay).await;
                }
                let rest = src.pieces(begin, rest);
                self.inner.get_range_pieces(rest, &mut relay).await
            }
        })
        .await
    }
}

/// How long the check at mount time keeps trying: a person is waiting for the answer,
/// and an endpoint that refuses connections is more often wrong than down.
const CHECK_BUDGET: Duration = Duration::from_secs(10);

#[async_trait]
impl ObjectClient for Retrying {
    fn key_rules(&self) -> KeyRules {
        self.inner.key_rules()
    }

    fn upload_checksum(&self) -> Option<Crc> {
        self.inner.upload_checksum()
    }

    async fn check_bucket(&self, prefix: &str) -> Result<()> {
        let budget = self.policy.budget.min(CHECK_BUDGET);
        self.run("bucket check", budget, || self.inner.check_bucket(prefix))
            .await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.retry("HEAD", key, || self.inner.head(key)).await
    }

    /// A retry asks only for the pieces not delivered yet: a reader is never handed
    /// the same piece twice, and a body cut near its end is not fetched again whole.
    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        self.get_pieces(get, false, sink).await
    }

    /// As `get_range_pieces`; while no piece has been handed over, a retry asks for the
    /// whole object again (a checked body is handed over whole or not at all).
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        self.get_pieces(src.pieces(0, cuts), true, sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        let prefix = list.prefix;
        (self.retry("LIST", prefix, || self.inner.list_page(list.clone()))).await
    }

    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        let prefix = list.prefix;
        (self.retry("LIST", prefix, || self.inner.list_after(list.clone()))).await
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        self.retry("PUT", key, || {
            self.metrics.uploaded(body.len());
            self.inner.put(key, body.clone(), metadata)
        })
        .await
    }

    /// Not idempotent: an attempt whose answer was lost leaves an upload nobody
    /// completes. It is retried anyway (a create that fails fails the whole file), and
    /// such an upload costs only its (empty) record until the bucket's lifecycle rule.
    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        self.retry("CREATE_MULTIPART", key, || {
            self.inner.create_multipart(key, metadata)
        })
        .await
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        self.retry("UPLOAD_PART", part.upload.key, || {
            self.metrics.uploaded(body.len());
            self.inner.upload_part(part, body.clone())
        })
        .await
    }

    /// An attempt that completed the upload but whose answer was lost makes the next
    /// one fail with NoSuchUpload: the file is then uploaded again whole, never lost.
    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let key = done.upload.key;
        (self.retry("COMPLETE_MULTIPART", key, || {
            self.inner.complete_multipart(done)
        }))
        .await
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        let key = upload.key;
        (self.retry("ABORT_MULTIPART", key, || {
            self.inner.abort_multipart(upload)
        }))
        .await
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        self.retry("LIST_MULTIPART", key, || self.inner.list_uploads(key))
            .await
    }

    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        self.retry("COPY", to, || self.inner.copy(src, to, meta))
            .await
    }

    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        if rw.size > crate::copy::MAX_COPY {
            // In parts, each of them retried here.
            let limits = crate::copy::CopyLimits::default();
            return crate::copy::rewrite_in_parts(self, rw, limits).await;
        }
        (self.retry("COPY", rw.object.key, || self.inner.replace_metadata(rw))).await
    }

    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        let key = part.upload.key;
        (self.retry("UPLOAD_PART_COPY", key, || {
            self.inner.upload_part_copy(part, range)
        }))
        .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.retry("DELETE", key, || self.inner.delete(key)).await
    }
}
