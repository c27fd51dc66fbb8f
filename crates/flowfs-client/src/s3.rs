//! The S3 backend: aws-sdk-s3 with the standard credential chain (env, profiles, SSO,
//! web identity, container and instance roles). A custom endpoint means path-style
//! requests, which is what SeaweedFS, MinIO and Ceph expect.
//!
//! This file builds the client and holds the small formats its requests share; the
//! requests themselves are in s3/requests.rs (the trait's methods), s3/listing.rs (the
//! two paged listings) and s3/body.rs (a GET body cut into pieces as it arrives).

use std::sync::{Arc, OnceLock};
use std::time::{Duration, SystemTime};

use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_s3::config::{
    ProvideCredentials, RequestChecksumCalculation, ResponseChecksumValidation,
    SharedCredentialsProvider,
};

mod body;
mod counting;
mod errors;
mod listing;
mod requests;
mod server;

use crate::{ClientError, Result};

/// Where and how to reach the bucket; credentials come from the AWS chain, never from here.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// Bucket name (no `s3://`).
    pub bucket: String,
    /// Overrides `AWS_ENDPOINT_URL`; either one switches to path-style requests.
    pub endpoint_url: Option<String>,
    /// Overrides the region from the environment or profile.
    pub region: Option<String>,
    /// Attempts per request, the first included (exponential backoff with jitter between).
    pub max_attempts: u32,
    /// Where each HTTP request sent is counted.
    pub metrics: std::sync::Arc<crate::metrics::StoreMetrics>,
}

/// The S3 backend (aws-sdk-s3): AWS, SeaweedFS, MinIO, Ceph.
pub struct S3Client {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// The chain the SDK signs with, asked once at mount so that "no credentials" is
    /// said as such rather than as a request that could not be sent.
    credentials: Option<SharedCredentialsProvider>,
    /// The server's name from its first answer's `Server` header (`key_rules`).
    server: Arc<OnceLock<String>>,
}

impl S3Client {
    /// Builds the SDK client from the environment, the AWS profiles and `cfg`.
    pub async fn new(cfg: &S3Config) -> S3Client {
        let mut loader = aws_config::defaults(BehaviorVersion::latest())
            .http_client(crate::tls::sdk_http_client());
        if let Some(region) = &cfg.region {
            loader = loader.region(aws_config::Region::new(region.clone()));
        }
        if let Some(url) = &cfg.endpoint_url {
            loader = loader.endpoint_url(url.clone());
        }
        let shared = loader.load().await;
        let custom_endpoint = shared.endpoint_url().is_some();
        let server = Arc::new(OnceLock::new());
        let mut builder = aws_sdk_s3::config::Builder::from(&shared)
            .force_path_style(custom_endpoint)
            .retry_config(RetryConfig::standard().with_max_attempts(cfg.max_attempts.max(1)))
            .timeout_config(
                TimeoutConfig::builder()
                    .connect_timeout(Duration::from_secs(5))
                    .read_timeout(Duration::from_secs(60))
                    .build(),
            )
            // Our own integrity comes from ETags and exact lengths; the extra trailing
            // checksums of new SDKs are not understood by every S3-compatible server.
            .request_checksum_calculation(RequestChecksumCalculation::WhenRequired)
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired)
            .interceptor(counting::Counting(cfg.metrics.clone()))
            .interceptor(server::ServerName(server.clone()));
        if shared.region().is_none() {
            builder = builder.region(aws_config::Region::new("us-east-1"));
        }
        S3Client {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: cfg.bucket.clone(),
            credentials: shared.credentials_provider(),
            server,
        }
    }

    /// Whether the credential chain yields credentials; never returns or logs them.
    pub async fn check_credentials(&self) -> Result<()> {
        let Some(provider) = &self.credentials else {
            return Err(ClientError::NoCredentials);
        };
        match provider.provide_credentials().await {
            Ok(_) => Ok(()),
            Err(CredentialsError::CredentialsNotLoaded(_)) => Err(ClientError::NoCredentials),
            Err(e) => Err(ClientError::Credentials(format!(
                "AWS: {}",
                aws_sdk_s3::error::DisplayErrorContext(&e)
            ))),
        }
    }
}

/// Whole seconds: HEAD's Last-Modified (an HTTP date) has no fraction and LIST's may,
/// and a file must show the same time whichever of the two described it (Nextflow's
/// -resume and make-like tools compare them).
fn to_system_time(t: Option<&aws_sdk_s3::primitives::DateTime>) -> SystemTime {
    t.and_then(|t| u64::try_from(t.secs()).ok())
        .map_or(SystemTime::UNIX_EPOCH, |s| {
            SystemTime::UNIX_EPOCH + std::time::Duration::from_secs(s)
        })
}

/// The ETag of an answer, as the server sent it; an answer without one gives `""`, which
/// no conditional request matches.
fn etag_of(etag: Option<&str>) -> String {
    etag.unwrap_or("").to_string()
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
    crate::percent::percent_escape(&mut out, key, |b| {
        b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/')
    });
    out
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
}
