//! TLS for every store: rustls with ring, for the AWS SDK (`sdk_http_client`) and for
//! reqwest (Azure, GCS, the OTLP push), which finds it as rustls's process default
//! (`ready`). ring rather than the SDK's default aws-lc-rs: aws-lc's C build was 74 s of
//! the 917 s of CPU of a fresh release build (Cargo.toml says more).

use aws_smithy_http_client::tls::{self, rustls_provider::CryptoMode};
use aws_smithy_runtime_api::client::http::SharedHttpClient;

/// Makes ring rustls's default provider for this process, before a reqwest client is
/// built (reqwest without a provider of its own panics without one). Idempotent.
pub fn ready() {
    // An Err means a provider is installed already: ring, by an earlier call.
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// The HTTP client of the AWS SDK: hyper over rustls with ring, trusting the system's
/// roots. Given to the config loader, it serves the credential chain's own requests
/// (SSO, STS, instance metadata) as well as S3's.
pub fn sdk_http_client() -> SharedHttpClient {
    aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(CryptoMode::Ring))
        .build_https()
}
