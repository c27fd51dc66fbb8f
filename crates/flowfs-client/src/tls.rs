//! TLS for every store: rustls with ring for reqwest (S3, Azure, GCS, the OTLP push),
//! which finds it as rustls's process default (`ready`). ring rather than aws-lc-rs:
//! aws-lc's C build was 74 s of the 917 s of CPU of a fresh release build (Cargo.toml).

/// Makes ring rustls's default provider for this process, before a reqwest client is
/// built (reqwest without a provider of its own panics without one). Idempotent.
pub fn ready() {
    // An Err means a provider is installed already: ring, by an earlier call.
    let _ = rustls::crypto::ring::default_provider().install_default();
}
