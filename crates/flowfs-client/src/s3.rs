//! The S3 backend: the REST calls of docs/STORES.md's table, signed with SigV4 by reqsign
//! (credentials found as the AWS tools find them: the environment, the profiles' keys,
//! SSO and `credential_process`, web identity, container and instance roles) and sent by
//! reqwest, as the Azure and GCS backends are. Not aws-sdk-s3: its stack was 300 s of the
//! 822 s of CPU a fresh release build took (`cargo build --timings`, docs/STORES.md), for
//! thirteen requests flowfs sends in a fixed form.
//!
//! This file builds the client and sends a signed request; where the bucket is comes from
//! endpoint.rs, the trait's methods are in requests.rs, the two paged listings in
//! listing.rs, the XML in xml.rs and the answers' errors in errors.rs.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::SystemTime;

use reqsign_aws_v4::{
    Credential, DefaultCredentialProvider, RequestSigner, StaticCredentialProvider,
};
use reqsign_core::{ErrorKind, Signer};

mod endpoint;
mod errors;
mod listing;
mod requests;
mod xml;

use crate::metrics::StoreMetrics;
use crate::percent::{query_value, unreserved_or_slash};
use crate::rest::Call;
use crate::{ClientError, Result};

/// User metadata headers.
const META: &str = "x-amz-meta-";

/// Where and how to reach the bucket; credentials come from the AWS chain, never from here.
/// The client makes one attempt per call: the retry layer (retry.rs) decides the others.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Bucket name (no `s3://`).
    pub bucket: String,
    /// Overrides `AWS_ENDPOINT_URL`; either one switches to path-style requests.
    pub endpoint_url: Option<String>,
    /// Overrides the region from the environment or profile.
    pub region: Option<String>,
    /// Where each HTTP request sent is counted.
    pub metrics: Arc<StoreMetrics>,
}

/// The S3 backend: AWS, SeaweedFS, MinIO, Ceph.
pub struct S3Client {
    http: reqwest::Client,
    signer: Signer<Credential>,
    place: endpoint::Endpoint,
    bucket: String,
    /// The server's name from its first answer's `Server` header (`key_rules`).
    server: OnceLock<String>,
    metrics: Arc<StoreMetrics>,
}

impl S3Client {
    /// The client for `cfg`, with its region, endpoint and credential chain found; no
    /// request.
    pub fn new(cfg: &S3Config) -> Result<S3Client> {
        S3Client::build(cfg, None)
    }

    /// A client signing with these keys, not the chain (test harnesses).
    pub fn with_keys(cfg: &S3Config, access_key: &str, secret_key: &str) -> Result<S3Client> {
        S3Client::build(cfg, Some((access_key, secret_key)))
    }

    fn build(cfg: &S3Config, keys: Option<(&str, &str)>) -> Result<S3Client> {
        let env = |k: &str| std::env::var(k).ok();
        let place = endpoint::resolve(
            &cfg.bucket,
            cfg.region.as_deref(),
            cfg.endpoint_url.as_deref(),
            &env,
        );
        let http = crate::rest::http_client()?;
        let ctx = crate::rest::signing_context(&http);
        let signer = Signer::new(ctx, chain(keys), RequestSigner::new("s3", &place.region));
        Ok(S3Client {
            http,
            signer,
            place,
            bucket: cfg.bucket.clone(),
            server: OnceLock::new(),
            metrics: cfg.metrics.clone(),
        })
    }

    /// Whether the credential chain yields credentials; never returns or logs them. Asked
    /// through the signer, which keeps what it found for the requests after (a
    /// `credential_process` or an instance role is asked once, not twice). The chain passes
    /// over a source that fails, so its failure is that no source had credentials (or, in
    /// reqsign's same kind, that the one found expires within seconds).
    pub async fn check_credentials(&self) -> Result<()> {
        let mut head = http::Request::get(&self.place.bucket_url)
            .body(())
            .map_err(|e| ClientError::Other(format!("bucket {}: {e}", self.bucket)))?
            .into_parts()
            .0;
        match self.signer.sign(&mut head, None).await {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == ErrorKind::CredentialInvalid => Err(ClientError::NoCredentials),
            Err(e) => Err(ClientError::Credentials(format!("AWS: {e}"))),
        }
    }

    /// Creates the bucket if it is not there (test set-ups; a mount never creates one).
    pub async fn create_bucket(&self) -> Result<()> {
        let what = format!("create bucket {}", self.bucket);
        let url = self.place.bucket_url.clone();
        let call = Call::new(http::Method::PUT, &url, &what);
        match self.send(call, "CreateBucket").await {
            Ok(_) => Ok(()),
            Err(ClientError::Other(m)) if m.contains("BucketAlreadyOwnedByYou") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The URL of object `key` with `query` (already encoded) added.
    fn url(&self, key: &str, query: &str) -> String {
        let base = &self.place.object_base;
        let mut u = String::with_capacity(base.len() + key.len() * 3 + query.len() + 2);
        u.push_str(base);
        u.push('/');
        crate::percent::percent_escape(&mut u, key, unreserved_or_slash);
        if !query.is_empty() {
            u.push('?');
            u.push_str(query);
        }
        u
    }

    /// The bucket's URL with `query` (already encoded).
    fn bucket_url(&self, query: &str) -> String {
        format!("{}?{query}", self.place.bucket_url)
    }

    /// Signs and sends one request, counted as `op` (S3's name of it); an answer that is
    /// not a success becomes its `ClientError` (errors.rs).
    async fn send(&self, call: Call<'_>, op: &'static str) -> Result<reqwest::Response> {
        let what = call.what;
        let resp = self.send_unchecked(call, op).await?;
        errors::check(resp, what).await
    }

    /// `send` without turning a failure's answer into an error (the bucket check reads it).
    async fn send_unchecked(&self, call: Call<'_>, op: &'static str) -> Result<reqwest::Response> {
        let mut head = call.head()?;
        crate::rest::sign(&self.signer, &mut head, "AWS").await?;
        let resp = call.execute(&self.http, &self.metrics, head, op).await?;
        if self.server.get().is_none() {
            if let Some(s) = resp.headers().get("server").and_then(|v| v.to_str().ok()) {
                let _ = self.server.set(s.to_string());
            }
        }
        Ok(resp)
    }
}

/// The AWS tools' credential chain, or only `keys`.
fn chain(keys: Option<(&str, &str)>) -> DefaultCredentialProvider {
    match keys {
        None => DefaultCredentialProvider::new(),
        Some((key, secret)) => DefaultCredentialProvider::with_chain(
            reqsign_core::ProvideCredentialChain::new()
                .push(StaticCredentialProvider::new(key, secret)),
        ),
    }
}

/// Whole seconds: HEAD's Last-Modified (an HTTP date) has no fraction and LIST's may,
/// and a file must show the same time whichever of the two described it (Nextflow's
/// -resume and make-like tools compare them).
fn whole_seconds(t: SystemTime) -> SystemTime {
    let secs = t
        .duration_since(SystemTime::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(secs)
}

/// A time as LIST gives it (RFC 3339), to whole seconds; the epoch if unreadable.
fn list_time(s: &str) -> SystemTime {
    (s.parse::<jiff::Timestamp>()).map_or(SystemTime::UNIX_EPOCH, |t| {
        whole_seconds(SystemTime::from(t))
    })
}

/// An ETag in the quoted form HEAD, GET and LIST give. SeaweedFS 4.48 leaves the quotes
/// off the ETag of a CopyObjectResult (AWS S3 keeps them), so the copy's ETag would not
/// equal the HEAD of the copy without this.
fn quoted(etag: &str) -> String {
    if etag.is_empty() || etag.starts_with('"') || etag.starts_with("W/") {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}

/// Percent-encodes a key for the `x-amz-copy-source` header; `/` stays as it is.
fn encode_copy_source(bucket: &str, key: &str) -> String {
    let mut out = String::with_capacity(bucket.len() + key.len() + 1);
    out.push_str(bucket);
    out.push('/');
    crate::percent::percent_escape(&mut out, key, unreserved_or_slash);
    out
}

/// `x-amz-meta-*` headers for `metadata`.
fn meta_headers(metadata: &HashMap<String, String>) -> Vec<(String, String)> {
    (metadata.iter())
        .map(|(k, v)| (format!("{META}{k}"), v.clone()))
        .collect()
}

/// The user metadata of an answer's headers (names come lower-cased).
fn meta_of(headers: &http::HeaderMap) -> HashMap<String, String> {
    (headers.iter())
        .filter_map(|(k, v)| {
            let name = k.as_str().strip_prefix(META)?;
            Some((name.to_string(), v.to_str().ok()?.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn copy_source_is_percent_encoded() {
        assert_eq!(
            encode_copy_source("b", "a b/ü+=&.txt"),
            "b/a%20b/%C3%BC%2B%3D%26.txt"
        );
    }

    #[test]
    fn etags_are_quoted() {
        assert_eq!(quoted("abc"), "\"abc\"");
        assert_eq!(quoted("\"abc\""), "\"abc\"");
        assert_eq!(quoted(""), "");
    }

    #[test]
    fn keys_are_encoded_into_urls_as_they_are() {
        let cfg = |endpoint: Option<&str>, bucket: &str| S3Config {
            bucket: bucket.into(),
            endpoint_url: endpoint.map(str::to_string),
            region: Some("eu-west-1".into()),
            metrics: Default::default(),
        };
        let c = S3Client::with_keys(&cfg(Some("http://h:1"), "b"), "k", "s").unwrap();
        assert_eq!(c.url("dir/", ""), "http://h:1/b/dir/");
        assert_eq!(
            c.url("a//b c+%", "uploads"),
            "http://h:1/b/a//b%20c%2B%25?uploads"
        );
        assert_eq!(c.bucket_url("list-type=2"), "http://h:1/b?list-type=2");
        let aws = S3Client::with_keys(&cfg(None, "b"), "k", "s").unwrap();
        assert_eq!(aws.url("k", ""), "https://b.s3.eu-west-1.amazonaws.com/k");
        assert_eq!(
            aws.bucket_url("x"),
            "https://b.s3.eu-west-1.amazonaws.com/?x"
        );
    }

    #[test]
    fn list_times_are_whole_seconds() {
        let t = list_time("2026-12-07T10:00:01.750Z");
        assert_eq!(
            t,
            httpdate::parse_http_date("Mon, 07 Dec 2026 10:00:01 GMT").unwrap()
        );
        assert_eq!(list_time("not a time"), SystemTime::UNIX_EPOCH);
    }
}
