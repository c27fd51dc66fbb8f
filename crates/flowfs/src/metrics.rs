//! The mount's Prometheus endpoint (`--metrics-addr`): the store's request counts and
//! bytes (flowfs_client::metrics), how reads were answered, what waits for upload and
//! what was fetched ahead, encoded by prometheus-client at each scrape and served over
//! plain HTTP by one thread. Nothing is listened on unless asked.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use flowfs_client::metrics::encode_one;
use flowfs_fs::{OpStats, OP_BUCKETS};
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{
    DescriptorEncoder, EncodeCounterValue, EncodeGaugeValue, EncodeMetric, MetricEncoder,
    NoLabelSet,
};
use prometheus_client::metrics::counter::ConstCounter;
use prometheus_client::metrics::gauge::ConstGauge;
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit};

use crate::stop::Ending;

/// The address of `--metrics-addr`: `IP:PORT`, or a port alone for 127.0.0.1 (the
/// endpoint stays on this host unless an address beyond it is given).
pub fn parse_addr(s: &str) -> Result<SocketAddr> {
    if let Ok(port) = s.parse::<u16>() {
        return Ok(SocketAddr::from(([127, 0, 0, 1], port)));
    }
    s.parse::<SocketAddr>().with_context(|| {
        format!("--metrics-addr must be PORT or IP:PORT, like 127.0.0.1:9100, not {s:?}")
    })
}

/// Every metric of the mount of `ending`, whose FUSE requests `ops` counts.
pub fn registry(ending: &Arc<Ending>, ops: Arc<OpStats>) -> Registry {
    let mut reg = Registry::with_prefix("flowfs");
    if let Some(client) = &ending.retries {
        client.metrics().register(&mut reg);
    }
    reg.register_collector(Box::new(FsCollector(ending.clone())));
    reg.register_collector(Box::new(FuseCollector(ops)));
    reg
}

/// The FUSE requests by operation: a histogram of their latencies each.
#[derive(Debug)]
struct FuseCollector(Arc<OpStats>);

/// One histogram read now (prometheus-client has no constant histogram).
#[derive(Debug)]
struct ConstHistogram {
    sum: f64,
    count: u64,
    /// (upper bound, requests in that bucket alone); the last bound is +Inf.
    buckets: Vec<(f64, u64)>,
}

impl EncodeMetric for ConstHistogram {
    fn encode(&self, mut e: MetricEncoder) -> std::fmt::Result {
        e.encode_histogram::<NoLabelSet>(self.sum, self.count, &self.buckets, None)
    }

    fn metric_type(&self) -> MetricType {
        MetricType::Histogram
    }
}

impl Collector for FuseCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let snapshot = self.0.snapshot();
        let mut fam = e.encode_descriptor(
            "fuse_request",
            "FUSE requests by operation: time from arrival to answer",
            Some(&Unit::Seconds),
            MetricType::Histogram,
        )?;
        for c in snapshot {
            let bounds = OP_BUCKETS.iter().copied().chain([f64::INFINITY]);
            let h = ConstHistogram {
                sum: c.sum_secs,
                count: c.count,
                buckets: bounds.zip(c.buckets.iter().copied()).collect(),
            };
            h.encode(fam.encode_family(&[("op", c.op.name())])?)?;
        }
        Ok(())
    }
}

/// The file system's own counts, read at each scrape.
struct FsCollector(Arc<Ending>);

impl std::fmt::Debug for FsCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("FsCollector")
    }
}

fn counter<N: EncodeCounterValue + Send + Sync + std::fmt::Debug>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: N,
) -> std::fmt::Result {
    encode_one(e, name, help, unit, ConstCounter::new(v))
}

fn gauge<N: EncodeGaugeValue + Send + Sync + std::fmt::Debug>(
    e: &mut DescriptorEncoder,
    name: &str,
    help: &str,
    unit: Option<&Unit>,
    v: N,
) -> std::fmt::Result {
    encode_one(e, name, help, unit, ConstGauge::new(v))
}

impl Collector for FsCollector {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        let fs = &self.0.fs;
        let bytes = Some(&Unit::Bytes);
        let secs = Some(&Unit::Seconds);
        let r = fs.read_stats();
        counter(
            &mut e,
            "cache_hits",
            "Reads answered at once from the node cache or fetched-ahead memory",
            None,
            r.hits,
        )?;
        counter(
            &mut e,
            "cache_hit",
            "Bytes of reads answered at once from the node cache",
            bytes,
            r.hit_bytes,
        )?;
        counter(
            &mut e,
            "cache_misses",
            "Reads that waited for the store",
            None,
            r.misses,
        )?;
        counter(
            &mut e,
            "cache_miss",
            "Bytes of reads that waited for the store",
            bytes,
            r.miss_bytes,
        )?;
        counter(
            &mut e,
            "read_wait",
            "Time reads waited for the store, summed",
            secs,
            r.wait_micros as f64 / 1e6,
        )?;
        let a = fs.read_ahead();
        counter(
            &mut e,
            "prefetch_files",
            "Small files fetched ahead of a reader of their directory",
            None,
            a.files.files,
        )?;
        counter(
            &mut e,
            "prefetch",
            "Bytes of files fetched ahead",
            bytes,
            a.files.bytes,
        )?;
        let wasted = a.files.bytes.saturating_sub(a.files.bytes_read);
        gauge(
            &mut e,
            "prefetch_unread",
            "Bytes fetched ahead that no reader opened (so far: the prefetch's waste)",
            bytes,
            wasted as i64,
        )?;
        let s = fs.status();
        let uploading = (s.pending.iter())
            .filter(|p| matches!(p.state, flowfs_fs::PendingState::Uploading))
            .count();
        gauge(
            &mut e,
            "writeback_files",
            "Files written here and not in the store yet",
            None,
            s.pending.len() as i64,
        )?;
        gauge(
            &mut e,
            "writeback",
            "Bytes written here and not in the store yet",
            bytes,
            s.pending_bytes() as i64,
        )?;
        let oldest = s
            .oldest()
            .and_then(|t| t.elapsed().ok())
            .map_or(0.0, |d| d.as_secs_f64());
        gauge(
            &mut e,
            "writeback_oldest_age",
            "Age of the oldest content not in the store yet",
            secs,
            oldest,
        )?;
        gauge(
            &mut e,
            "uploads_in_flight",
            "Files being uploaded now",
            None,
            uploading as i64,
        )?;
        gauge(
            &mut e,
            "upload_failures",
            "Files whose upload failed for good",
            None,
            s.failures.len() as i64,
        )?;
        Ok(())
    }
}

/// Serves `/metrics` on `addr` from a thread of its own; returns the address bound (a
/// port 0 is chosen by the kernel).
pub fn serve(addr: SocketAddr, ending: Arc<Ending>, ops: Arc<OpStats>) -> Result<SocketAddr> {
    let listener =
        TcpListener::bind(addr).with_context(|| format!("--metrics-addr {addr}: cannot listen"))?;
    let bound = listener.local_addr()?;
    if !bound.ip().is_loopback() {
        tracing::warn!("metrics are served on {bound}, beyond this host");
    }
    let reg = registry(&ending, ops);
    std::thread::Builder::new()
        .name("flowfs-metrics".into())
        .spawn(move || {
            for conn in listener.incoming().flatten() {
                if let Err(e) = answer(conn, &reg) {
                    tracing::debug!("metrics request: {e}");
                }
            }
        })?;
    Ok(bound)
}

/// One HTTP/1.x request, then the connection is closed. A client that says nothing for
/// 5 s is dropped: it cannot hold the endpoint.
fn answer(conn: TcpStream, reg: &Registry) -> std::io::Result<()> {
    conn.set_read_timeout(Some(Duration::from_secs(5)))?;
    conn.set_write_timeout(Some(Duration::from_secs(5)))?;
    let mut r = BufReader::new(&conn);
    let mut first = String::new();
    r.read_line(&mut first)?;
    // The headers, up to the blank line (bounded: at most 100 lines are read).
    for _ in 0..100 {
        let mut h = String::new();
        if r.read_line(&mut h)? == 0 || h.trim().is_empty() {
            break;
        }
    }
    let mut parts = first.split_whitespace();
    let (method, path) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = path.split('?').next().unwrap_or("");
    let (status, ctype, body) = match (method, path) {
        ("GET", "/metrics") => {
            let mut text = String::new();
            match prometheus_client::encoding::text::encode(&mut text, reg) {
                Ok(()) => (
                    "200 OK",
                    "application/openmetrics-text; version=1.0.0; charset=utf-8",
                    text,
                ),
                Err(_) => (
                    "500 Internal Server Error",
                    "text/plain",
                    "cannot encode\n".into(),
                ),
            }
        }
        ("GET", _) => (
            "404 Not Found",
            "text/plain",
            "metrics are at /metrics\n".into(),
        ),
        _ => ("405 Method Not Allowed", "text/plain", "GET only\n".into()),
    };
    let mut w = &conn;
    write!(
        w,
        "HTTP/1.1 {status}\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    w.flush()
}
