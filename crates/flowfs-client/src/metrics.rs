//! What a mount asked of its store (`StoreMetrics`): one count per HTTP request sent, by
//! the store's own name for the request and its outcome, the time to each answer's head,
//! the object bytes moved and what the retry layer did. Counted where the requests are
//! sent (the S3 SDK's interceptor, s3/counting.rs; `rest::execute` for Azure and GCS) and
//! where bytes are handed over (`Retrying`), so that the numbers are the ones a proxy in
//! front of the store would see. Read by the mount's `/metrics` endpoint (the Prometheus
//! text format, encoded by prometheus-client) and by its cost report (`snapshot`).

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeLabelSet, EncodeMetric};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use prometheus_client::registry::{Registry, Unit};
use serde::{Deserialize, Serialize};

/// How one HTTP request ended, as `flowfs_requests_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Outcome {
    /// The store answered: a success, or an answer the file system asks for (404: no
    /// such key; 412: the object changed; 304, 416).
    Ok,
    /// A failure the retry layer sends again while its budget lasts (5xx, 408, a
    /// request without an answer). The ones it gave up on are also
    /// `flowfs_retry_give_ups_total`.
    Retried,
    /// Throttling (429, 503: SlowDown, ServerBusy); also retried.
    Throttled,
    /// Refused for good (403, 400, 409, ...).
    Failed,
}

impl Outcome {
    /// The outcome of an answer with `status`, or of no answer (`None`).
    pub fn of_status(status: Option<u16>) -> Outcome {
        match status {
            None | Some(408) => Outcome::Retried,
            Some(429 | 503) => Outcome::Throttled,
            Some(s) if s >= 500 => Outcome::Retried,
            Some(s) if s < 400 => Outcome::Ok,
            Some(404 | 412 | 416) => Outcome::Ok,
            Some(_) => Outcome::Failed,
        }
    }

    /// The label value.
    pub fn name(self) -> &'static str {
        match self {
            Outcome::Ok => "ok",
            Outcome::Retried => "retried",
            Outcome::Throttled => "throttled",
            Outcome::Failed => "failed",
        }
    }
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct OpLabel {
    op: &'static str,
}

fn first_byte_histogram() -> Histogram {
    // 1 ms to 16 s: a loopback server's answer to a slow store's worst.
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// The requests a mount sent and the bytes it moved, since it started.
#[derive(Debug)]
pub struct StoreMetrics {
    /// (op, outcome) → requests. A lock per request is nothing beside the request.
    requests: Mutex<BTreeMap<(&'static str, Outcome), u64>>,
    first_byte: Family<OpLabel, Histogram, fn() -> Histogram>,
    /// Seconds spent waiting for answers' heads, all ops (the report's store wait).
    waited_micros: AtomicU64,
    bytes_down: AtomicU64,
    bytes_up: AtomicU64,
    retries: AtomicU64,
    throttled: AtomicU64,
    gave_up: AtomicU64,
}

impl Default for StoreMetrics {
    fn default() -> StoreMetrics {
        StoreMetrics {
            requests: Mutex::default(),
            first_byte: Family::new_with_constructor(first_byte_histogram),
            waited_micros: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
        }
    }
}

/// The counts of `StoreMetrics` at one moment, for reports and `flowfs status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreCounts {
    /// op → HTTP requests sent, every outcome.
    pub requests: BTreeMap<String, u64>,
    /// outcome → HTTP requests sent, every op.
    pub outcomes: BTreeMap<String, u64>,
    /// Object bytes received (GET bodies).
    pub bytes_down: u64,
    /// Object bytes sent (PUT and part bodies).
    pub bytes_up: u64,
    /// Time from sending each request to its answer's head, summed over requests.
    pub store_wait_secs: f64,
    /// Calls sent again after a retryable failure.
    pub retries: u64,
    /// Retryable failures that were throttling.
    pub throttled: u64,
    /// Calls that failed although retryable (budget or attempts spent).
    pub gave_up: u64,
}

/// What the retry layer did with one failed attempt.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryEvent {
    /// It will be sent again.
    Retried,
    /// It failed for good though retryable: the budget or the attempts were spent.
    GaveUp,
}

impl StoreMetrics {
    /// A new set, all zero.
    pub fn new() -> Arc<StoreMetrics> {
        Arc::new(StoreMetrics::default())
    }

    /// One HTTP request: `op` the store's name for it, the time to its answer's head.
    pub fn request(&self, op: &'static str, outcome: Outcome, first_byte: Duration) {
        *self.requests.lock().entry((op, outcome)).or_insert(0) += 1;
        self.first_byte
            .get_or_create(&OpLabel { op })
            .observe(first_byte.as_secs_f64());
        let micros = first_byte.as_micros().min(u64::MAX as u128) as u64;
        self.waited_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// Object bytes received (a GET's body).
    pub fn downloaded(&self, n: usize) {
        self.bytes_down.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Object bytes sent (a PUT's or a part's body).
    pub fn uploaded(&self, n: usize) {
        self.bytes_up.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// A retryable failure of one call, and whether it was throttling.
    pub fn retry(&self, event: RetryEvent, throttled: bool) {
        if throttled {
            self.throttled.fetch_add(1, Ordering::Relaxed);
        }
        let c = match event {
            RetryEvent::Retried => &self.retries,
            RetryEvent::GaveUp => &self.gave_up,
        };
        c.fetch_add(1, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn snapshot(&self) -> StoreCounts {
        let mut c = StoreCounts::default();
        for (&(op, outcome), &n) in self.requests.lock().iter() {
            *c.requests.entry(op.to_string()).or_insert(0) += n;
            *c.outcomes.entry(outcome.name().to_string()).or_insert(0) += n;
        }
        c.bytes_down = self.bytes_down.load(Ordering::Relaxed);
        c.bytes_up = self.bytes_up.load(Ordering::Relaxed);
        c.store_wait_secs = self.waited_micros.load(Ordering::Relaxed) as f64 / 1e6;
        c.retries = self.retries.load(Ordering::Relaxed);
        c.throttled = self.throttled.load(Ordering::Relaxed);
        c.gave_up = self.gave_up.load(Ordering::Relaxed);
        c
    }

    /// Adds these metrics to `registry` (names without the registry's `flowfs_` prefix).
    pub fn register(self: &Arc<Self>, registry: &mut Registry) {
        registry.register_with_unit(
            "request_first_byte",
            "Time from sending a request to its answer's head (a GET's first byte), by op",
            Unit::Seconds,
            self.first_byte.clone(),
        );
        registry.register_collector(Box::new(Counts(self.clone())));
    }
}

/// The counters, encoded at each scrape from `StoreMetrics`.
#[derive(Debug)]
struct Counts(Arc<StoreMetrics>);

/// Encodes one metric of its own (a `ConstCounter` or `ConstGauge` of a value read now)
/// for a `Collector`.
pub fn encode_one(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    m: impl EncodeMetric,
) -> std::fmt::Result {
    m.encode(enc.encode_descriptor(name, help, unit, m.metric_type())?)
}

fn counter(
    enc: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: u64,
) -> std::fmt::Result {
    encode_one(enc, name, help, unit, ConstCounter::new(v))
}

impl Collector for Counts {
    fn encode(&self, mut enc: DescriptorEncoder) -> std::fmt::Result {
        let m = &self.0;
        let requests: Vec<_> = m.requests.lock().iter().map(|(k, n)| (*k, *n)).collect();
        let c = ConstCounter::new(0u64);
        let mut fam = enc.encode_descriptor(
            "requests",
            "HTTP requests sent to the store, retries included, by the store's name for them and how they ended",
            None,
            c.metric_type(),
        )?;
        for ((op, outcome), n) in requests {
            let labels = [("op", op), ("outcome", outcome.name())];
            ConstCounter::new(n).encode(fam.encode_family(&labels)?)?;
        }
        let load = |a: &AtomicU64| a.load(Ordering::Relaxed);
        let bytes = Some(&Unit::Bytes);
        counter(
            &mut enc,
            "store_read",
            "Object bytes received from the store",
            bytes,
            load(&m.bytes_down),
        )?;
        counter(
            &mut enc,
            "store_written",
            "Object bytes sent to the store",
            bytes,
            load(&m.bytes_up),
        )?;
        counter(
            &mut enc,
            "retries",
            "Calls sent again after a retryable failure",
            None,
            load(&m.retries),
        )?;
        counter(
            &mut enc,
            "retry_throttled",
            "Retryable failures that were throttling",
            None,
            load(&m.throttled),
        )?;
        counter(
            &mut enc,
            "retry_give_ups",
            "Calls that failed although retryable: the retry budget or the attempts were spent",
            None,
            load(&m.gave_up),
        )?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_follow_the_status() {
        use Outcome::*;
        let of = |s| Outcome::of_status(s);
        assert_eq!(
            [of(Some(200)), of(Some(206)), of(Some(404)), of(Some(412))],
            [Ok; 4]
        );
        assert_eq!([of(Some(503)), of(Some(429))], [Throttled; 2]);
        assert_eq!([of(Some(500)), of(Some(408)), of(None)], [Retried; 3]);
        assert_eq!([of(Some(403)), of(Some(400))], [Failed; 2]);
    }

    #[test]
    fn counts_are_by_op_and_outcome_and_encoded_so() {
        let m = StoreMetrics::new();
        let ms = Duration::from_millis(1);
        m.request("GetObject", Outcome::Ok, ms);
        m.request("GetObject", Outcome::Ok, ms);
        m.request("GetObject", Outcome::Throttled, ms);
        m.request("PutObject", Outcome::Ok, ms);
        m.downloaded(10);
        m.uploaded(7);
        let c = m.snapshot();
        assert_eq!(c.requests["GetObject"], 3);
        assert_eq!(c.outcomes["ok"], 3);
        assert_eq!((c.bytes_down, c.bytes_up), (10, 7));
        assert!((c.store_wait_secs - 0.004).abs() < 1e-9);
        let mut reg = Registry::with_prefix("flowfs");
        m.register(&mut reg);
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &reg).unwrap();
        assert!(text.contains("flowfs_requests_total{op=\"GetObject\",outcome=\"ok\"} 2\n"));
        assert!(text.contains("flowfs_requests_total{op=\"GetObject\",outcome=\"throttled\"} 1\n"));
        assert!(text.contains("flowfs_store_read_bytes_total 10\n"));
        assert!(text.contains("flowfs_request_first_byte_seconds_count{op=\"PutObject\"} 1\n"));
    }
}
