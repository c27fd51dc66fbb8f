//! The OTLP metrics messages the push sends, as prost messages: the fields of
//! opentelemetry-proto's `metrics/v1`, `common/v1`, `resource/v1` and the collector's
//! `ExportMetricsServiceRequest` that otlp.rs fills, with the protocol's field numbers.
//!
//! Why not the opentelemetry-proto crate: its metric types exist only with its `metrics`
//! feature, which compiles opentelemetry and opentelemetry_sdk (their metrics SDK, 16 s of
//! a fresh release build's CPU here, `cargo build --timings`) for the struct definitions
//! alone. prost is the same encoder that crate uses. The fields left out (exemplars, flags,
//! schema URLs, min and max) are optional in the protocol: a receiver reads their absence as
//! their default. tests/integration/test_metrics.py decodes what a mount pushes with the
//! protocol's own Python classes, and the test below compares a request's encoding byte for
//! byte with what those classes encode.

// prost writes fields in the order they are declared here: field-number order, as the
// protocol's reference encoders do, so that the test vector below is byte for byte theirs.

use prost::{Message, Oneof};

/// `opentelemetry.proto.collector.metrics.v1.ExportMetricsServiceRequest`.
#[derive(Clone, PartialEq, Message)]
pub struct ExportMetricsServiceRequest {
    #[prost(message, repeated, tag = "1")]
    pub resource_metrics: Vec<ResourceMetrics>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ResourceMetrics {
    #[prost(message, optional, tag = "1")]
    pub resource: Option<Resource>,
    #[prost(message, repeated, tag = "2")]
    pub scope_metrics: Vec<ScopeMetrics>,
}

/// `opentelemetry.proto.resource.v1.Resource`.
#[derive(Clone, PartialEq, Message)]
pub struct Resource {
    #[prost(message, repeated, tag = "1")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct ScopeMetrics {
    #[prost(message, optional, tag = "1")]
    pub scope: Option<InstrumentationScope>,
    #[prost(message, repeated, tag = "2")]
    pub metrics: Vec<Metric>,
}

/// `opentelemetry.proto.common.v1.InstrumentationScope`.
#[derive(Clone, PartialEq, Message)]
pub struct InstrumentationScope {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub version: String,
}

/// `opentelemetry.proto.common.v1.KeyValue`, its value a string (all flowfs sends).
#[derive(Clone, PartialEq, Message)]
pub struct KeyValue {
    #[prost(string, tag = "1")]
    pub key: String,
    #[prost(message, optional, tag = "2")]
    pub value: Option<AnyValue>,
}

#[derive(Clone, PartialEq, Message)]
pub struct AnyValue {
    #[prost(oneof = "AnyValueKind", tags = "1")]
    pub value: Option<AnyValueKind>,
}

#[derive(Clone, PartialEq, Oneof)]
pub enum AnyValueKind {
    #[prost(string, tag = "1")]
    StringValue(String),
}

#[derive(Clone, PartialEq, Message)]
pub struct Metric {
    #[prost(string, tag = "1")]
    pub name: String,
    #[prost(string, tag = "2")]
    pub description: String,
    #[prost(string, tag = "3")]
    pub unit: String,
    #[prost(oneof = "Data", tags = "5, 7, 9")]
    pub data: Option<Data>,
}

#[derive(Clone, PartialEq, Oneof)]
pub enum Data {
    #[prost(message, tag = "5")]
    Gauge(Gauge),
    #[prost(message, tag = "7")]
    Sum(Sum),
    #[prost(message, tag = "9")]
    Histogram(Histogram),
}

/// The protocol's `AGGREGATION_TEMPORALITY_CUMULATIVE`, as Prometheus counts.
pub const CUMULATIVE: i32 = 2;

#[derive(Clone, PartialEq, Message)]
pub struct Gauge {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
}

#[derive(Clone, PartialEq, Message)]
pub struct Sum {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<NumberDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
    #[prost(bool, tag = "3")]
    pub is_monotonic: bool,
}

#[derive(Clone, PartialEq, Message)]
pub struct Histogram {
    #[prost(message, repeated, tag = "1")]
    pub data_points: Vec<HistogramDataPoint>,
    #[prost(int32, tag = "2")]
    pub aggregation_temporality: i32,
}

#[derive(Clone, PartialEq, Message)]
pub struct NumberDataPoint {
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(oneof = "NumberValue", tags = "4, 6")]
    pub value: Option<NumberValue>,
    #[prost(message, repeated, tag = "7")]
    pub attributes: Vec<KeyValue>,
}

#[derive(Clone, PartialEq, Oneof)]
pub enum NumberValue {
    #[prost(double, tag = "4")]
    AsDouble(f64),
    #[prost(sfixed64, tag = "6")]
    AsInt(i64),
}

#[derive(Clone, PartialEq, Message)]
pub struct HistogramDataPoint {
    #[prost(fixed64, tag = "2")]
    pub start_time_unix_nano: u64,
    #[prost(fixed64, tag = "3")]
    pub time_unix_nano: u64,
    #[prost(fixed64, tag = "4")]
    pub count: u64,
    #[prost(double, optional, tag = "5")]
    pub sum: Option<f64>,
    #[prost(fixed64, repeated, tag = "6")]
    pub bucket_counts: Vec<u64>,
    #[prost(double, repeated, tag = "7")]
    pub explicit_bounds: Vec<f64>,
    #[prost(message, repeated, tag = "9")]
    pub attributes: Vec<KeyValue>,
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, UNIX_EPOCH};

    use flowfs_client::metrics::HistogramCounts;

    use crate::otlp::request;
    use crate::samples::{one as sample, Kind, Unit, Value};

    /// A counter, a gauge and a histogram, as the protocol's Python classes
    /// (opentelemetry-proto 1.39.1, `SerializeToString(deterministic=True)`) encode them.
    const REFERENCE: &str = concat!(
        "0a9e020a1a0a180a0c736572766963652e6e616d6512080a06666c6f77667312ff010a0f0a06666c6f7766731205302e",
        "312e30124d0a0f666c6f7766732e72657175657374731201681a01313a340a2e1100ca9a3b0000000019009435770000",
        "00003107000000000000003a110a026f70120b0a094765744f626a6563741002180112330a0b666c6f7766732e6f7065",
        "6e1201671a0242792a1d0a1b1100ca9a3b0000000019009435770000000021000000000000044012680a0a666c6f7766",
        "732e6c617412016c1a01734a540a501100ca9a3b00000000190094357700000000210100000000000000290000000000",
        "00d03f32180000000000000000010000000000000000000000000000003a109a9999999999b93f000000000000f03f10",
        "02",
    );

    #[test]
    fn a_request_is_byte_for_byte_what_the_protocols_own_classes_encode() {
        let mut requests = sample("requests", "h", Kind::Counter, Unit::Count, Value::Int(7));
        requests.points[0].0.push(("op", "GetObject".into()));
        let hist = HistogramCounts {
            bounds: vec![0.1, 1.0],
            buckets: vec![0, 1, 0],
            count: 1,
            sum_secs: 0.25,
        };
        let samples = [
            requests,
            sample("open", "g", Kind::Gauge, Unit::Bytes, Value::Float(2.5)),
            sample(
                "lat",
                "l",
                Kind::Histogram,
                Unit::Seconds,
                Value::Hist(hist),
            ),
        ];
        let (start, now) = (
            UNIX_EPOCH + Duration::from_secs(1),
            UNIX_EPOCH + Duration::from_secs(2),
        );
        let r = request(&samples, &[("service.name", "flowfs".into())], start, now);
        let hex: String = prost::Message::encode_to_vec(&r)
            .iter()
            .map(|b| format!("{b:02x}"))
            .collect();
        assert_eq!(hex, REFERENCE);
    }
}
