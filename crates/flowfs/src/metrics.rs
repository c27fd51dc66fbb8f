//! The mount's Prometheus endpoint (`--metrics-addr`): the metrics of samples.rs, encoded
//! by prometheus-client at each scrape and served over plain HTTP by one thread. Nothing
//! is listened on unless asked.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use flowfs_fs::OpStats;
use prometheus_client::collector::Collector;
use prometheus_client::encoding::{DescriptorEncoder, EncodeMetric, MetricEncoder, NoLabelSet};
use prometheus_client::metrics::MetricType;
use prometheus_client::registry::{Registry, Unit as PromUnit};

use crate::samples::{self, Kind, Value};
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

/// Every metric of the mount of `ending`, whose FUSE requests `ops` counts: the list of
/// samples.rs, encoded at each scrape.
pub fn registry(ending: &Arc<Ending>, ops: Arc<OpStats>) -> Registry {
    let mut reg = Registry::with_prefix("flowfs");
    reg.register_collector(Box::new(Samples(ending.clone(), ops)));
    reg
}

struct Samples(Arc<Ending>, Arc<OpStats>);

impl std::fmt::Debug for Samples {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Samples")
    }
}

/// One value read now, of the type its metric has (prometheus-client has constant
/// counters and gauges, but no constant histogram).
#[derive(Debug)]
struct Point<'a>(Kind, &'a Value);

impl EncodeMetric for Point<'_> {
    fn encode(&self, mut e: MetricEncoder) -> std::fmt::Result {
        match (self.0, self.1) {
            (Kind::Counter, Value::Int(v)) => e.encode_counter::<NoLabelSet, _, u64>(v, None),
            (Kind::Counter, Value::Float(v)) => e.encode_counter::<NoLabelSet, _, f64>(v, None),
            (_, Value::Int(v)) => e.encode_gauge(&(*v as i64)),
            (_, Value::Float(v)) => e.encode_gauge(v),
            (_, Value::Hist(h)) => {
                let bounds = h.bounds.iter().copied().chain([f64::INFINITY]);
                let buckets: Vec<(f64, u64)> = bounds.zip(h.buckets.iter().copied()).collect();
                e.encode_histogram::<NoLabelSet>(h.sum_secs, h.count, &buckets, None)
            }
        }
    }

    fn metric_type(&self) -> MetricType {
        metric_type(self.0)
    }
}

fn metric_type(kind: Kind) -> MetricType {
    match kind {
        Kind::Counter => MetricType::Counter,
        Kind::Gauge => MetricType::Gauge,
        Kind::Histogram => MetricType::Histogram,
    }
}

impl Collector for Samples {
    fn encode(&self, mut e: DescriptorEncoder) -> std::fmt::Result {
        for s in samples::snapshot(&self.0, &self.1) {
            let unit = match s.unit {
                samples::Unit::Count => None,
                samples::Unit::Bytes => Some(&PromUnit::Bytes),
                samples::Unit::Seconds => Some(&PromUnit::Seconds),
            };
            let mut m = e.encode_descriptor(s.name, s.help, unit, metric_type(s.kind))?;
            for (labels, v) in &s.points {
                let p = Point(s.kind, v);
                match labels.is_empty() {
                    true => p.encode(m.encode_family(&NO_LABELS)?)?,
                    false => p.encode(m.encode_family(labels)?)?,
                }
            }
        }
        Ok(())
    }
}

const NO_LABELS: [(&str, &str); 0] = [];

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
