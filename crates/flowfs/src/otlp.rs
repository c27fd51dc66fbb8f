//! The OTLP push: where a user sets the standard `OTEL_EXPORTER_OTLP_ENDPOINT` (or
//! `OTEL_EXPORTER_OTLP_METRICS_ENDPOINT`), the metrics of samples.rs go to that collector
//! every `OTEL_METRIC_EXPORT_INTERVAL` ms (60 s by default) and once more when the mount
//! ends, so that a short task's counts arrive too. OTLP/HTTP with protobuf bodies: the
//! protocol's message types (otlp_messages.rs), encoded by prost, sent by reqwest.
//! Cumulative temporality, as Prometheus counts. Headers (`OTEL_EXPORTER_OTLP_HEADERS`)
//! may hold an API key: they are sent, never logged.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{bail, Context, Result};
use flowfs_fs::OpStats;
use prost::Message;

use crate::otlp_messages::{
    AnyValue, AnyValueKind, Data, ExportMetricsServiceRequest, Gauge, Histogram,
    HistogramDataPoint, InstrumentationScope, KeyValue, Metric, NumberDataPoint, NumberValue,
    Resource, ResourceMetrics, ScopeMetrics, Sum, CUMULATIVE,
};

use crate::samples::{self, Kind, Sample, Unit, Value};
use crate::stop::Ending;

/// Where and how often to push, from the standard environment variables.
#[derive(Clone)]
pub struct OtlpConfig {
    /// The full URL metrics are POSTed to (`.../v1/metrics`).
    pub url: String,
    headers: Vec<(String, String)>,
    pub interval: Duration,
    pub timeout: Duration,
    service: String,
}

impl std::fmt::Debug for OtlpConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the headers' values: they may be credentials.
        let names: Vec<&str> = self.headers.iter().map(|(k, _)| k.as_str()).collect();
        write!(
            f,
            "OtlpConfig {{ url: {}, headers: {names:?}, interval: {:?} }}",
            self.url, self.interval
        )
    }
}

fn millis(env: &dyn Fn(&str) -> Option<String>, key: &str, default: u64) -> Result<Duration> {
    match env(key) {
        None => Ok(Duration::from_millis(default)),
        Some(v) => match v.trim().parse::<u64>() {
            Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
            _ => bail!("{key} must be a number of milliseconds above 0, not {v:?}"),
        },
    }
}

/// `k=v,k2=v2`, values percent-decoded, as the OTLP exporter specification reads it.
fn headers(s: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for pair in s.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        let Some((k, v)) = pair.split_once('=') else {
            bail!("OTEL_EXPORTER_OTLP_HEADERS must be key=value pairs separated by commas");
        };
        let v = flowfs_client::meta::percent_decode(v.trim());
        out.push((k.trim().to_string(), v));
    }
    Ok(out)
}

impl OtlpConfig {
    /// The push the environment asks for, `None` when it asks for none; a value that
    /// cannot be used is an error naming the variable (never its value, for headers).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<Option<OtlpConfig>> {
        let env = |k: &str| env(k).filter(|v| !v.trim().is_empty());
        if env("OTEL_SDK_DISABLED").is_some_and(|v| v.trim().eq_ignore_ascii_case("true")) {
            return Ok(None);
        }
        let url = match (
            env("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT"),
            env("OTEL_EXPORTER_OTLP_ENDPOINT"),
        ) {
            (Some(u), _) => u,
            (None, Some(base)) => format!("{}/v1/metrics", base.trim_end_matches('/')),
            (None, None) => return Ok(None),
        };
        if !(url.starts_with("http://") || url.starts_with("https://")) {
            bail!("the OTLP endpoint must be an http:// or https:// URL, not {url:?}");
        }
        let protocol = env("OTEL_EXPORTER_OTLP_METRICS_PROTOCOL")
            .or_else(|| env("OTEL_EXPORTER_OTLP_PROTOCOL"))
            .unwrap_or_else(|| "http/protobuf".into());
        if protocol != "http/protobuf" {
            bail!(
                "OTEL_EXPORTER_OTLP_PROTOCOL={protocol}: flowfs pushes OTLP over HTTP with protobuf \
                 (http/protobuf); point the endpoint at the collector's HTTP port (4318)"
            );
        }
        let raw =
            env("OTEL_EXPORTER_OTLP_METRICS_HEADERS").or_else(|| env("OTEL_EXPORTER_OTLP_HEADERS"));
        Ok(Some(OtlpConfig {
            url,
            headers: headers(raw.as_deref().unwrap_or(""))?,
            interval: millis(&env, "OTEL_METRIC_EXPORT_INTERVAL", 60_000)?,
            timeout: millis(&env, "OTEL_METRIC_EXPORT_TIMEOUT", 30_000)?,
            service: env("OTEL_SERVICE_NAME").unwrap_or_else(|| "flowfs".into()),
        }))
    }
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(AnyValue {
            value: Some(AnyValueKind::StringValue(v.to_string())),
        }),
    }
}

fn nanos(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// One sample as an OTLP metric, its points from `start` to `now`.
fn metric(s: &Sample, start: u64, now: u64) -> Metric {
    let attrs =
        |labels: &[(&str, String)]| labels.iter().map(|(k, v)| kv(k, v)).collect::<Vec<_>>();
    let number = |labels: &[(&str, String)], v: &Value| NumberDataPoint {
        attributes: attrs(labels),
        start_time_unix_nano: start,
        time_unix_nano: now,
        value: Some(match v {
            Value::Int(n) => NumberValue::AsInt(*n as i64),
            Value::Float(f) => NumberValue::AsDouble(*f),
            Value::Hist(h) => NumberValue::AsDouble(h.sum_secs),
        }),
    };
    let data = match s.kind {
        Kind::Counter => Data::Sum(Sum {
            data_points: s.points.iter().map(|(l, v)| number(l, v)).collect(),
            aggregation_temporality: CUMULATIVE,
            is_monotonic: true,
        }),
        Kind::Gauge => Data::Gauge(Gauge {
            data_points: s.points.iter().map(|(l, v)| number(l, v)).collect(),
        }),
        Kind::Histogram => Data::Histogram(Histogram {
            data_points: (s.points.iter())
                .filter_map(|(l, v)| match v {
                    Value::Hist(h) => Some(HistogramDataPoint {
                        attributes: attrs(l),
                        start_time_unix_nano: start,
                        time_unix_nano: now,
                        count: h.count,
                        sum: Some(h.sum_secs),
                        bucket_counts: h.buckets.clone(),
                        explicit_bounds: h.bounds.clone(),
                    }),
                    _ => None,
                })
                .collect(),
            aggregation_temporality: CUMULATIVE,
        }),
    };
    Metric {
        name: format!("flowfs.{}", s.name),
        description: s.help.to_string(),
        unit: match s.unit {
            Unit::Count => "1",
            Unit::Bytes => "By",
            Unit::Seconds => "s",
        }
        .to_string(),
        data: Some(data),
    }
}

/// The export request of `samples`.
pub fn request(
    samples: &[Sample],
    resource: &[(&str, String)],
    started: SystemTime,
    now: SystemTime,
) -> ExportMetricsServiceRequest {
    let (start, now) = (nanos(started), nanos(now));
    ExportMetricsServiceRequest {
        resource_metrics: vec![ResourceMetrics {
            resource: Some(Resource {
                attributes: resource.iter().map(|(k, v)| kv(k, v)).collect(),
            }),
            scope_metrics: vec![ScopeMetrics {
                scope: Some(InstrumentationScope {
                    name: "flowfs".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                }),
                metrics: samples.iter().map(|s| metric(s, start, now)).collect(),
            }],
        }],
    }
}

/// The push of one mount.
pub struct Otlp {
    cfg: OtlpConfig,
    http: reqwest::Client,
    ending: Arc<Ending>,
    ops: Arc<OpStats>,
    started: SystemTime,
    /// A failure was logged and no push has succeeded since (one warning per streak).
    failing: std::sync::atomic::AtomicBool,
}

impl Otlp {
    pub fn new(cfg: OtlpConfig, ending: Arc<Ending>, ops: Arc<OpStats>) -> Result<Arc<Otlp>> {
        flowfs_client::tls::ready();
        let http = reqwest::Client::builder()
            .timeout(cfg.timeout)
            .build()
            .context("cannot build the OTLP client")?;
        let started = SystemTime::now() - ending.started.elapsed();
        Ok(Arc::new(Otlp {
            cfg,
            http,
            ending,
            ops,
            started,
            failing: Default::default(),
        }))
    }

    /// Pushes the metrics now; a failure is logged (once until a push succeeds again).
    pub async fn push(&self) {
        use std::sync::atomic::Ordering::Relaxed;
        let resource = [
            ("service.name", self.cfg.service.clone()),
            ("flowfs.source", self.ending.source.clone()),
            ("flowfs.mountpoint", self.ending.dir.display().to_string()),
        ];
        let body = request(
            &samples::snapshot(&self.ending, &self.ops),
            &resource,
            self.started,
            SystemTime::now(),
        )
        .encode_to_vec();
        let mut req = self
            .http
            .post(&self.cfg.url)
            .header("content-type", "application/x-protobuf");
        for (k, v) in &self.cfg.headers {
            req = req.header(k, v);
        }
        let r = req.body(body).send().await;
        let failed = match r {
            Ok(resp) if resp.status().is_success() => None,
            Ok(resp) => Some(format!("the collector answered {}", resp.status())),
            Err(e) => Some(e.without_url().to_string()),
        };
        match failed {
            None => self.failing.store(false, Relaxed),
            Some(why) if !self.failing.swap(true, Relaxed) => {
                tracing::warn!("OTLP push to {} failed: {why}", self.cfg.url);
            }
            Some(_) => {}
        }
    }

    /// Pushes every interval until the runtime ends.
    pub fn spawn(self: &Arc<Self>, rt: &tokio::runtime::Handle) {
        let me = self.clone();
        rt.spawn(async move {
            let mut tick = tokio::time::interval(me.cfg.interval);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await; // the first tick is at once: nothing counted yet
            loop {
                tick.tick().await;
                me.push().await;
            }
        });
    }
}

/// The environment of this process, for `OtlpConfig::from_env`.
pub fn process_env(k: &str) -> Option<String> {
    std::env::var(k).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn the_standard_variables_say_where_and_how_often() {
        assert!(OtlpConfig::from_env(&env_of(&[])).unwrap().is_none());
        let c = OtlpConfig::from_env(&env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s%3Dcret, x=y"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "500"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.url, "http://127.0.0.1:4318/v1/metrics");
        assert_eq!(
            c.headers,
            [
                ("api-key".into(), "s=cret".into()),
                ("x".into(), "y".into())
            ]
        );
        assert_eq!(c.interval, Duration::from_millis(500));
        assert!(!format!("{c:?}").contains("cret"), "{c:?}");
        let c = OtlpConfig::from_env(&env_of(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a:4318"),
            ("OTEL_EXPORTER_OTLP_METRICS_ENDPOINT", "http://b:9/m"),
        ]))
        .unwrap()
        .unwrap();
        assert_eq!(c.url, "http://b:9/m");
        let off = [
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_SDK_DISABLED", "true"),
        ];
        assert!(OtlpConfig::from_env(&env_of(&off)).unwrap().is_none());
    }

    #[test]
    fn what_cannot_be_used_is_named() {
        let err = |pairs: &[(&str, &str)]| {
            format!("{:#}", OtlpConfig::from_env(&env_of(pairs)).unwrap_err())
        };
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"),
        ]);
        assert!(e.contains("http/protobuf") && e.contains("4318"), "{e}");
        let e = err(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "a:4318")]);
        assert!(e.contains("http:// or https://"), "{e}");
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_METRIC_EXPORT_INTERVAL", "soon"),
        ]);
        assert!(e.contains("OTEL_METRIC_EXPORT_INTERVAL"), "{e}");
        let e = err(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://a"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "secretvalue"),
        ]);
        assert!(e.contains("key=value") && !e.contains("secretvalue"), "{e}");
    }

    #[test]
    fn samples_become_metrics_of_their_kind() {
        let h = flowfs_client::metrics::Histogram::new(&[0.1, 1.0]);
        h.observe(Duration::from_millis(50));
        let s = vec![
            Sample {
                name: "requests",
                help: "h",
                kind: Kind::Counter,
                unit: Unit::Count,
                points: vec![(vec![("op", "GetObject".into())], Value::Int(7))],
            },
            Sample {
                name: "lat",
                help: "h",
                kind: Kind::Histogram,
                unit: Unit::Seconds,
                points: vec![(vec![], Value::Hist(h.counts()))],
            },
        ];
        let r = request(
            &s,
            &[("service.name", "flowfs".into())],
            UNIX_EPOCH,
            SystemTime::now(),
        );
        let back = ExportMetricsServiceRequest::decode(r.encode_to_vec().as_slice()).unwrap();
        let m = &back.resource_metrics[0].scope_metrics[0].metrics;
        assert_eq!(m[0].name, "flowfs.requests");
        let Some(Data::Sum(sum)) = &m[0].data else {
            panic!("not a sum")
        };
        assert!(sum.is_monotonic);
        assert_eq!(sum.data_points[0].value, Some(NumberValue::AsInt(7)));
        let Some(Data::Histogram(hist)) = &m[1].data else {
            panic!("not a histogram")
        };
        assert_eq!(hist.data_points[0].bucket_counts, [1, 0, 0]);
        assert_eq!(hist.data_points[0].explicit_bounds, [0.1, 1.0]);
    }
}
