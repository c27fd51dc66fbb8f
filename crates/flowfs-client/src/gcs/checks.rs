//! GCS's CRC-32C end to end (issue 49). An upload names the CRC-32C of its bytes (in the
//! resource of a multipart upload, in `x-goog-hash` of a media one), which GCS checks
//! before it makes the object; the answer's `crc32c` (the object's, as stored) is checked
//! here too, for a server that does not check (fake-gcs-server stores what arrives). A
//! whole GET is checked against the `x-goog-hash` of its answer.

use http::Method;

use super::json::Object;
use super::GcsClient;
use crate::{ByteRange, Checksum, ClientError, Crc, Result, Version};

/// The header that names an upload's CRC-32C.
pub(super) fn hash_header(sent: &Checksum) -> (&'static str, String) {
    ("x-goog-hash", format!("crc32c={}", sent.value))
}

/// `Corrupt` unless the object GCS made holds the bytes sent (a server that gives no
/// CRC-32C is taken at its word).
pub(super) fn stored_as_sent(o: &Object, sent: &Checksum, what: &str) -> Result<()> {
    match &o.crc32c {
        Some(v) if *v != sent.value => Err(ClientError::Corrupt(format!(
            "{what}: the store holds CRC-32C {v}, the bytes sent have {}",
            sent.value
        ))),
        _ => Ok(()),
    }
}

/// The object's CRC-32C from a GET's `x-goog-hash: crc32c=...,md5=...`, if the answer
/// holds the whole object, `size` bytes (`content-range: bytes 0-N/size`): the hash is of
/// the whole object also when a range was asked for.
pub(super) fn of_answer(r: &reqwest::Response, size: u64) -> Option<Checksum> {
    let range = r
        .headers()
        .get("content-range")
        .and_then(|v| v.to_str().ok());
    let total = range.and_then(|v| v.rsplit('/').next()?.parse::<u64>().ok());
    if total.is_some_and(|t| t != size) {
        return None;
    }
    let hashes = r.headers().get_all("x-goog-hash");
    let mut values = hashes.iter().filter_map(|v| v.to_str().ok());
    let all = values.by_ref().flat_map(|v| v.split(','));
    let crc = all
        .filter_map(|h| h.trim().strip_prefix("crc32c="))
        .next()?;
    Some(Checksum {
        name: Crc::Crc32c.name(),
        value: crc.to_string(),
    })
}

impl GcsClient {
    /// A GET of `range` (of the generation in its ETag), as sent: the stored bytes, not
    /// unpacked where the object is gzip-encoded.
    pub(super) async fn get_answer(&self, range: ByteRange<'_>) -> Result<reqwest::Response> {
        let (Version { key, etag }, start, end) = (range.src, range.start, range.end);
        let mut query = String::from("alt=media");
        if let Some(e) = etag {
            let Some(g) = super::generation_of(e) else {
                return Err(ClientError::Precondition(format!("{key}: version {e}")));
            };
            query.push_str(&format!("&generation={g}"));
        }
        let url = self.object_url(key, &query);
        let h = [
            ("range", format!("bytes={start}-{}", end - 1)),
            ("accept-encoding", "gzip".to_string()),
        ];
        match self
            .send(crate::rest::Call::new(Method::GET, &url, key).headers(&h))
            .await
        {
            Err(ClientError::NotFound(m)) if etag.is_some() => Err(ClientError::Precondition(m)),
            r => r,
        }
    }
}
