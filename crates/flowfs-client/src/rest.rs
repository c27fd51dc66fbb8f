//! What the two REST backends (Azure Blob, GCS) share over reqwest: the errors of a
//! request that got no answer or a body that broke off (never with the request's URL: a
//! SAS token is its query), a GET's answer read frame by frame, and the form of the
//! upload ids they make up (neither store has S3's: `SECS-NONCE`, when the upload began
//! and 64 random bits).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use crate::{ClientError, Result};

/// A request that got no answer.
pub(crate) fn send_error(what: &str, e: reqwest::Error) -> ClientError {
    let e = e.without_url();
    // reqwest's Display hides the cause (connection refused, reset): name it.
    let mut msg = format!("{what}: {e}");
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    if e.is_connect() || e.is_timeout() {
        ClientError::Unreachable(msg)
    } else {
        ClientError::Transient(msg)
    }
}

/// A body that broke off, as a retryable error.
pub(crate) fn body_error(what: &str, e: reqwest::Error) -> ClientError {
    ClientError::Transient(format!("{what}: body: {}", e.without_url()))
}

/// A GET's answer read frame by frame (body.rs hands it over in pieces).
pub(crate) struct Answer<'a> {
    pub r: reqwest::Response,
    pub key: &'a str,
}

impl crate::body::Frames for Answer<'_> {
    async fn next_frame(&mut self) -> Result<Option<Bytes>> {
        (self.r.chunk().await).map_err(|e| body_error(self.key, e))
    }
}

/// A new upload id: `SECS-NONCE`, 27 bytes.
pub(crate) fn new_upload_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("{secs:010}-{:016x}", rand::random::<u64>())
}

/// Whether `id` has the form of an upload id (an id from elsewhere is never sent on).
pub(crate) fn valid_upload_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 27
        && b[10] == b'-'
        && b[..10].iter().all(u8::is_ascii_digit)
        && b[11..].iter().all(u8::is_ascii_hexdigit)
}

/// When upload `id` began (by this clock).
pub(crate) fn upload_began(id: &str) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(id.get(..10).and_then(|s| s.parse().ok()).unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_have_one_form() {
        let id = new_upload_id();
        assert!(valid_upload_id(&id), "{id}");
        assert!(!valid_upload_id(&format!("{id}x")) && !valid_upload_id("0000000001-xyz"));
        let age = SystemTime::now().duration_since(upload_began(&id)).unwrap();
        assert!(age.as_secs() < 5);
    }

    #[tokio::test]
    async fn a_failed_request_says_nothing_of_its_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let url = format!("http://127.0.0.1:{port}/acct/c/k?sv=2025&sig=SECRETSIG");
        let e = reqwest::Client::new().get(&url).send().await.unwrap_err();
        let msg = send_error("GET k", e).to_string();
        assert!(!msg.contains("SECRETSIG") && !msg.contains("sig="), "{msg}");
        assert!(msg.contains("GET k"), "{msg}");
    }
}
