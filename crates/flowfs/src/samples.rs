//! Every metric of a mount at one moment, in one list (`snapshot`): the store's requests,
//! bytes and retries (flowfs_client::metrics), how reads were answered, what was fetched
//! ahead, what waits for upload, and the FUSE requests by operation. The one place that
//! names them: the Prometheus endpoint (metrics.rs) and the OTLP push (otlp.rs) both
//! encode this list.

use flowfs_client::metrics::{HistogramCounts, StoreCounts};
use flowfs_fs::{AheadStats, OpStats, ReadStats, Status};

use crate::stop::Ending;

/// What a metric measures, as both formats type it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up, from the mount's start.
    Counter,
    /// A value now.
    Gauge,
    /// Latencies, in buckets.
    Histogram,
}

/// The unit of a metric's values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unit {
    Count,
    Bytes,
    Seconds,
}

/// One value of a metric, under its labels.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Int(u64),
    Float(f64),
    Hist(HistogramCounts),
}

/// One metric: its name (`requests`: `flowfs_requests_total` in Prometheus,
/// `flowfs.requests` in OTLP), its help, and its points.
#[derive(Debug, Clone, PartialEq)]
pub struct Sample {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
    pub unit: Unit,
    pub points: Vec<(Vec<(&'static str, String)>, Value)>,
}

/// A sample of one point without labels.
pub(crate) fn one(
    name: &'static str,
    help: &'static str,
    kind: Kind,
    unit: Unit,
    v: Value,
) -> Sample {
    Sample {
        name,
        help,
        kind,
        unit,
        points: vec![(vec![], v)],
    }
}

fn secs(micros: u64) -> Value {
    Value::Float(micros as f64 / 1e6)
}

/// Every metric of the mount of `ending`, whose FUSE requests `ops` counts.
pub fn snapshot(ending: &Ending, ops: &OpStats) -> Vec<Sample> {
    let mut out = Vec::new();
    if let Some(client) = &ending.retries {
        out.extend(store_samples(&client.metrics().snapshot()));
    }
    let fs = &ending.fs;
    out.extend(cache_samples(&fs.read_stats()));
    out.extend(ahead_samples(&fs.read_ahead().files));
    out.extend(writeback_samples(&fs.status()));
    out.push(fuse_sample(ops));
    out
}

/// The store's requests, bytes and retries.
fn store_samples(c: &StoreCounts) -> Vec<Sample> {
    use Kind::*;
    use Unit::*;
    use Value::Int;
    let mut out = Vec::new();
    let mut requests = Vec::new();
    let mut first_byte = Vec::new();
    for op in &c.by_op {
        for (o, n) in &op.outcomes {
            let labels = vec![("op", op.op.clone()), ("outcome", o.name().to_string())];
            requests.push((labels, Int(*n)));
        }
        first_byte.push((
            vec![("op", op.op.clone())],
            Value::Hist(op.first_byte.clone()),
        ));
    }
    out.push(Sample {
        name: "requests",
        help: "HTTP requests sent to the store, retries included, by the store's name for them and how they ended",
        kind: Counter,
        unit: Count,
        points: requests,
    });
    out.push(Sample {
        name: "request_first_byte",
        help: "Time from sending a request to its answer's head (a GET's first byte), by op",
        kind: Histogram,
        unit: Seconds,
        points: first_byte,
    });
    out.push(one(
        "store_read",
        "Object bytes received from the store",
        Counter,
        Bytes,
        Int(c.bytes_down),
    ));
    out.push(one(
        "store_written",
        "Object bytes sent to the store",
        Counter,
        Bytes,
        Int(c.bytes_up),
    ));
    out.push(one(
        "retries",
        "Calls sent again after a retryable failure",
        Counter,
        Count,
        Int(c.retries),
    ));
    out.push(one(
        "retry_throttled",
        "Retryable failures that were throttling",
        Counter,
        Count,
        Int(c.throttled),
    ));
    out.push(one(
        "retry_give_ups",
        "Calls that failed although retryable: the retry budget or the attempts were spent",
        Counter,
        Count,
        Int(c.gave_up),
    ));
    out.push(one(
        "retry_backoff",
        "Time the retry layer slept between attempts (the retry budget spent)",
        Counter,
        Seconds,
        Value::Float(c.backoff_secs),
    ));
    out
}

/// How reads were answered, and what the node cache did for this mount.
fn cache_samples(r: &ReadStats) -> Vec<Sample> {
    use Kind::*;
    use Unit::*;
    use Value::Int;
    vec![
        one(
            "cache_hits",
            "Reads answered at once from the node cache or fetched-ahead memory",
            Counter,
            Count,
            Int(r.hits),
        ),
        one(
            "cache_hit",
            "Bytes of reads answered at once from the node cache",
            Counter,
            Bytes,
            Int(r.hit_bytes),
        ),
        one(
            "cache_misses",
            "Reads that waited for the store",
            Counter,
            Count,
            Int(r.misses),
        ),
        one(
            "cache_miss",
            "Bytes of reads that waited for the store",
            Counter,
            Bytes,
            Int(r.miss_bytes),
        ),
        one(
            "read_wait",
            "Time reads waited for the store, summed",
            Counter,
            Seconds,
            secs(r.wait_micros),
        ),
        one(
            "cache_other_process_waits",
            "GETs that waited for another process on the cache dir fetching their bytes",
            Counter,
            Count,
            Int(r.other_process_waits),
        ),
        one(
            "cache_evicted_blocks",
            "Blocks of the node cache this mount evicted",
            Counter,
            Count,
            Int(r.evicted_blocks),
        ),
        one(
            "cache_evicted",
            "Bytes of the node cache this mount evicted",
            Counter,
            Bytes,
            Int(r.evicted_bytes),
        ),
        one(
            "cache_not_admitted",
            "Bytes fetched and served without being written to the node cache (--cache-admit)",
            Counter,
            Bytes,
            Int(r.not_admitted_bytes),
        ),
    ]
}

/// What was fetched ahead of readers of a directory's files.
fn ahead_samples(a: &AheadStats) -> Vec<Sample> {
    use Kind::*;
    use Unit::*;
    use Value::Int;
    let mut out = Vec::new();
    out.push(one(
        "prefetch_files",
        "Small files fetched ahead of a reader of their directory",
        Counter,
        Count,
        Int(a.files),
    ));
    out.push(one(
        "prefetch",
        "Bytes of files fetched ahead",
        Counter,
        Bytes,
        Int(a.bytes),
    ));
    let unread = a.bytes.saturating_sub(a.bytes_read);
    out.push(one(
        "prefetch_unread",
        "Bytes fetched ahead that no reader opened (so far: the prefetch's waste)",
        Gauge,
        Bytes,
        Int(unread),
    ));
    out
}

/// What waits for upload, and the journal.
fn writeback_samples(s: &Status) -> Vec<Sample> {
    let j = &s.journal;
    use Kind::*;
    use Unit::*;
    use Value::Int;
    let mut out = Vec::new();
    let uploading = (s.pending.iter())
        .filter(|p| matches!(p.state, flowfs_fs::PendingState::Uploading))
        .count();
    let oldest = (s.oldest())
        .and_then(|t| t.elapsed().ok())
        .map_or(0.0, |d| d.as_secs_f64());
    out.push(one(
        "writeback_files",
        "Files written here and not in the store yet",
        Gauge,
        Count,
        Int(s.pending.len() as u64),
    ));
    out.push(one(
        "writeback",
        "Bytes written here and not in the store yet",
        Gauge,
        Bytes,
        Int(s.pending_bytes()),
    ));
    out.push(one(
        "writeback_oldest_age",
        "Age of the oldest content not in the store yet",
        Gauge,
        Seconds,
        Value::Float(oldest),
    ));
    out.push(one(
        "uploads_in_flight",
        "Files being uploaded now",
        Gauge,
        Count,
        Int(uploading as u64),
    ));
    out.push(one(
        "journal_records_written",
        "Journal records written (a file's first change after it was durable, a rename of one not yet)",
        Counter,
        Count,
        Int(j.written),
    ));
    out.push(one(
        "journal_records",
        "Journal records present: files a recovery would upload if this mount died now",
        Gauge,
        Count,
        Int(j.present),
    ));
    out.push(one(
        "upload_failures",
        "Files whose upload failed for good",
        Gauge,
        Count,
        Int(s.failures.len() as u64),
    ));
    out
}

/// The FUSE requests by operation.
fn fuse_sample(ops: &OpStats) -> Sample {
    use Kind::*;
    use Unit::*;
    let fuse = ops.snapshot().into_iter().map(|c| {
        (
            vec![("op", c.op.name().to_string())],
            Value::Hist(c.latency),
        )
    });
    Sample {
        name: "fuse_request",
        help: "FUSE requests by operation: time from arrival to answer",
        kind: Histogram,
        unit: Seconds,
        points: fuse.collect(),
    }
}
