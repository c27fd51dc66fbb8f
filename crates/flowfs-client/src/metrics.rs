//! What a mount asked of its store (`StoreMetrics`): one count per HTTP request sent, by
//! the store's own name for the request and its outcome, the time to each answer's head,
//! the object bytes moved and what the retry layer did. Counted where the requests are
//! sent (`rest::execute`, for every store) and
//! where bytes are handed over (`Retrying`), so that the numbers are the ones a proxy in
//! front of the store would see. Plain counts (`snapshot`): the binary encodes them for
//! Prometheus and OTLP and writes them into usage reports. `Histogram` is the latency
//! histogram both this and the file system's FUSE counts use.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

/// How one HTTP request ended, as `flowfs_requests_total` labels it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
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
    /// Sent, and its answer no longer wanted: flowfs dropped it (the losing one of two
    /// requests raced for one answer, a read abandoned by its reader).
    Cancelled,
}

impl Outcome {
    /// Every outcome, in the order of their index.
    pub const ALL: [Outcome; 5] = [
        Outcome::Ok,
        Outcome::Retried,
        Outcome::Throttled,
        Outcome::Failed,
        Outcome::Cancelled,
    ];

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
            Outcome::Cancelled => "cancelled",
        }
    }
}

/// Latency buckets: a fixed list of upper bounds (seconds), a count per bucket and the
/// sum, each an atomic add (no lock, no allocation: cheap enough for every FUSE request).
#[derive(Debug)]
pub struct Histogram {
    bounds: &'static [f64],
    /// One per bound, then one above the last.
    buckets: Vec<AtomicU64>,
    sum_nanos: AtomicU64,
}

/// A histogram's counts at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HistogramCounts {
    /// Upper bounds of the buckets, seconds; a last bucket above them all follows.
    pub bounds: Vec<f64>,
    /// Observations per bucket (not cumulative), `bounds.len() + 1` of them.
    pub buckets: Vec<u64>,
    /// Observations.
    pub count: u64,
    /// Their sum, seconds.
    pub sum_secs: f64,
}

/// The bounds of request latencies to the store: 1 ms (a loopback server) to 16 s.
pub const REQUEST_BOUNDS: &[f64] = &[
    0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096,
    8.192, 16.384,
];

impl Histogram {
    /// An empty histogram over `bounds` (ascending).
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram {
            bounds,
            buckets: (0..=bounds.len()).map(|_| AtomicU64::new(0)).collect(),
            sum_nanos: AtomicU64::new(0),
        }
    }

    /// Counts one observation.
    pub fn observe(&self, d: Duration) {
        let secs = d.as_secs_f64();
        let b = (self.bounds.iter())
            .position(|&ub| secs <= ub)
            .unwrap_or(self.bounds.len());
        self.buckets[b].fetch_add(1, Ordering::Relaxed);
        let nanos = d.as_nanos().min(u64::MAX as u128) as u64;
        self.sum_nanos.fetch_add(nanos, Ordering::Relaxed);
    }

    /// The counts now.
    pub fn counts(&self) -> HistogramCounts {
        let buckets: Vec<u64> = (self.buckets.iter())
            .map(|b| b.load(Ordering::Relaxed))
            .collect();
        HistogramCounts {
            bounds: self.bounds.to_vec(),
            count: buckets.iter().sum(),
            buckets,
            sum_secs: self.sum_nanos.load(Ordering::Relaxed) as f64 / 1e9,
        }
    }
}

/// One op's requests: by outcome, and the time to their answers' heads.
#[derive(Debug)]
struct OpEntry {
    outcomes: [u64; 5],
    first_byte: Histogram,
}

/// The requests a mount sent and the bytes it moved, since it started.
#[derive(Debug)]
pub struct StoreMetrics {
    /// op → its requests. A lock per request is nothing beside the request.
    ops: Mutex<BTreeMap<&'static str, OpEntry>>,
    /// Time waited for answers' heads, all ops (the report's store wait).
    waited_micros: AtomicU64,
    /// Requests sent and not answered yet (`began` minus `request`).
    in_flight: AtomicU64,
    bytes_down: AtomicU64,
    bytes_up: AtomicU64,
    retries: AtomicU64,
    throttled: AtomicU64,
    gave_up: AtomicU64,
    /// Time the retry layer slept between attempts.
    backoff_micros: AtomicU64,
}

impl Default for StoreMetrics {
    fn default() -> StoreMetrics {
        StoreMetrics {
            ops: Mutex::default(),
            waited_micros: AtomicU64::new(0),
            in_flight: AtomicU64::new(0),
            bytes_down: AtomicU64::new(0),
            bytes_up: AtomicU64::new(0),
            retries: AtomicU64::new(0),
            throttled: AtomicU64::new(0),
            gave_up: AtomicU64::new(0),
            backoff_micros: AtomicU64::new(0),
        }
    }
}

/// One op's requests at one moment.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpCounts {
    /// The store's name for the request.
    pub op: String,
    /// (outcome, requests), the outcomes seen.
    pub outcomes: Vec<(Outcome, u64)>,
    /// Time to the answers' heads.
    pub first_byte: HistogramCounts,
}

/// The counts of `StoreMetrics` at one moment, for reports and `flowfs status`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct StoreCounts {
    /// Each op's requests, by outcome, with their latencies.
    pub by_op: Vec<OpCounts>,
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
    /// Time the retry layer slept between attempts (the retry budget spent).
    pub backoff_secs: f64,
}

/// A request on its way (`StoreMetrics::sending`).
#[derive(Debug)]
pub struct Sending {
    metrics: Arc<StoreMetrics>,
    op: &'static str,
    started: std::time::Instant,
    done: bool,
}

impl Sending {
    /// Time since it was handed over.
    pub fn elapsed(&self) -> Duration {
        self.started.elapsed()
    }

    /// Counts it with its outcome and the time to its answer's head.
    pub fn done(mut self, outcome: Outcome, first_byte: Duration) {
        self.count(outcome, first_byte);
    }

    fn count(&mut self, outcome: Outcome, first_byte: Duration) {
        if !std::mem::replace(&mut self.done, true) {
            self.metrics.in_flight.fetch_sub(1, Ordering::Relaxed);
            self.metrics.request(self.op, outcome, first_byte);
        }
    }
}

impl Drop for Sending {
    fn drop(&mut self) {
        let took = self.started.elapsed();
        self.count(Outcome::Cancelled, took);
    }
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

    /// A request of `op` handed to the HTTP client: counted once, when `done`, or as
    /// `Cancelled` when dropped before (its future abandoned), so that every request a
    /// proxy sees is counted.
    pub fn sending(self: &Arc<Self>, op: &'static str) -> Sending {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
        Sending {
            metrics: self.clone(),
            op,
            started: std::time::Instant::now(),
            done: false,
        }
    }

    /// Requests handed to the HTTP client and not counted yet.
    pub fn in_flight(&self) -> u64 {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// One HTTP request: `op` the store's name for it, the time to its answer's head.
    pub fn request(&self, op: &'static str, outcome: Outcome, first_byte: Duration) {
        {
            let mut ops = self.ops.lock();
            let e = ops.entry(op).or_insert_with(|| OpEntry {
                outcomes: [0; 5],
                first_byte: Histogram::new(REQUEST_BOUNDS),
            });
            e.outcomes[outcome as usize] += 1;
            e.first_byte.observe(first_byte);
        }
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

    /// The retry layer sleeps `d` before the next attempt.
    pub fn backed_off(&self, d: Duration) {
        let micros = d.as_micros().min(u64::MAX as u128) as u64;
        self.backoff_micros.fetch_add(micros, Ordering::Relaxed);
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
        for (&op, e) in self.ops.lock().iter() {
            let outcomes: Vec<(Outcome, u64)> = (Outcome::ALL.iter().copied())
                .zip(e.outcomes)
                .filter(|(_, n)| *n > 0)
                .collect();
            for &(o, n) in &outcomes {
                *c.requests.entry(op.to_string()).or_insert(0) += n;
                *c.outcomes.entry(o.name().to_string()).or_insert(0) += n;
            }
            c.by_op.push(OpCounts {
                op: op.to_string(),
                outcomes,
                first_byte: e.first_byte.counts(),
            });
        }
        c.bytes_down = self.bytes_down.load(Ordering::Relaxed);
        c.bytes_up = self.bytes_up.load(Ordering::Relaxed);
        c.store_wait_secs = self.waited_micros.load(Ordering::Relaxed) as f64 / 1e6;
        c.retries = self.retries.load(Ordering::Relaxed);
        c.throttled = self.throttled.load(Ordering::Relaxed);
        c.gave_up = self.gave_up.load(Ordering::Relaxed);
        c.backoff_secs = self.backoff_micros.load(Ordering::Relaxed) as f64 / 1e6;
        c
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
    fn counts_are_by_op_and_outcome() {
        let m = StoreMetrics::new();
        let ms = Duration::from_millis(1);
        m.request("GetObject", Outcome::Ok, ms);
        m.request("GetObject", Outcome::Ok, Duration::from_secs(100));
        m.request("GetObject", Outcome::Throttled, ms);
        m.request("PutObject", Outcome::Ok, ms);
        m.downloaded(10);
        m.uploaded(7);
        let c = m.snapshot();
        assert_eq!(c.requests["GetObject"], 3);
        assert_eq!(c.outcomes["ok"], 3);
        assert_eq!((c.bytes_down, c.bytes_up), (10, 7));
        assert!((c.store_wait_secs - 100.003).abs() < 1e-9);
        let get = &c.by_op[0];
        assert_eq!(get.op, "GetObject");
        assert_eq!(get.outcomes, [(Outcome::Ok, 2), (Outcome::Throttled, 1)]);
        let h = &get.first_byte;
        assert_eq!(
            (h.count, h.buckets[0], *h.buckets.last().unwrap()),
            (3, 2, 1)
        );
        assert_eq!(h.buckets.len(), REQUEST_BOUNDS.len() + 1);
    }

    #[test]
    fn a_request_is_counted_once_answered_or_dropped() {
        let m = StoreMetrics::new();
        let a = m.sending("GetObject");
        let b = m.sending("HeadObject");
        assert_eq!(m.in_flight(), 2);
        a.done(Outcome::Ok, Duration::from_millis(1));
        drop(b);
        let c = m.snapshot();
        assert_eq!(m.in_flight(), 0);
        assert_eq!((c.outcomes["ok"], c.outcomes["cancelled"]), (1, 1));
        assert_eq!(c.requests["HeadObject"], 1);
    }
}
