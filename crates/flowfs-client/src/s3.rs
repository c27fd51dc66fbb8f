//! The S3 backend: aws-sdk-s3 with the standard credential chain (env, profiles, SSO,
//! web identity, container and instance roles). A custom endpoint means path-style
//! requests, which is what SeaweedFS, MinIO and Ceph expect.

use std::collections::HashMap;
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use aws_config::retry::RetryConfig;
use aws_config::timeout::TimeoutConfig;
use aws_config::BehaviorVersion;
use aws_credential_types::provider::error::CredentialsError;
use aws_sdk_s3::config::{
    ProvideCredentials, RequestChecksumCalculation, ResponseChecksumValidation,
    SharedCredentialsProvider,
};
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{CompletedMultipartUpload, CompletedPart as SdkPart, EncodingType};
use bytes::Bytes;

mod errors;

use errors::{map_err, not_s3};

use crate::{
    short_body, AlignedBuf, ClientError, CompletedPart, ListPage, ObjectClient, ObjectInfo,
    ObjectMeta, PutResult, Result, UploadInfo,
};

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
}

/// The S3 backend (aws-sdk-s3): AWS, SeaweedFS, MinIO, Ceph.
pub struct S3Client {
    client: aws_sdk_s3::Client,
    bucket: String,
    /// The chain the SDK signs with, asked once at mount so that "no credentials" is
    /// said as such rather than as a request that could not be sent.
    credentials: Option<SharedCredentialsProvider>,
}

impl S3Client {
    /// Builds the SDK client from the environment, the AWS profiles and `cfg`.
    pub async fn new(cfg: &S3Config) -> S3Client {
        let mut loader = aws_config::defaults(BehaviorVersion::latest());
        if let Some(region) = &cfg.region {
            loader = loader.region(aws_config::Region::new(region.clone()));
        }
        if let Some(url) = &cfg.endpoint_url {
            loader = loader.endpoint_url(url.clone());
        }
        let shared = loader.load().await;
        let custom_endpoint = shared.endpoint_url().is_some();
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
            .response_checksum_validation(ResponseChecksumValidation::WhenRequired);
        if shared.region().is_none() {
            builder = builder.region(aws_config::Region::new("us-east-1"));
        }
        S3Client {
            client: aws_sdk_s3::Client::from_conf(builder.build()),
            bucket: cfg.bucket.clone(),
            credentials: shared.credentials_provider(),
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
            Err(e) => Err(ClientError::Credentials(
                aws_sdk_s3::error::DisplayErrorContext(&e).to_string(),
            )),
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

/// A key of a listing asked for with `EncodingType=url`: `%XX` is a byte and `+` a
/// space (form encoding, as AWS S3 and SeaweedFS write it, and as botocore reads it).
fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// Percent-encodes a key for the `x-amz-copy-source` header; `/` stays as it is.
fn encode_copy_source(bucket: &str, key: &str) -> String {
    let mut out = String::with_capacity(bucket.len() + key.len() + 1);
    out.push_str(bucket);
    out.push('/');
    for b in key.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~' | b'/') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl S3Client {
    async fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<String>,
        max_keys: Option<i32>,
        start_after: Option<&str>,
    ) -> Result<ListPage> {
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_string))
            .set_continuation_token(token)
            .set_max_keys(max_keys)
            .set_start_after(start_after.map(str::to_string))
            // XML 1.0 cannot carry bytes 0x01-0x1F (but tab, newline, CR): without this
            // a server sends them as U+FFFD, and such a key could never be named again.
            .encoding_type(EncodingType::Url)
            .send()
            .await
            .map_err(|e| map_err(&format!("list {prefix}"), e))?;
        // A server that ignores the request says no EncodingType: its keys are plain.
        let encoded = out.encoding_type() == Some(&EncodingType::Url);
        let name = |k: &str| {
            if encoded {
                url_decode(k)
            } else {
                k.to_string()
            }
        };
        let objects = out
            .contents()
            .iter()
            .filter_map(|o| {
                Some(ObjectInfo {
                    key: name(o.key()?),
                    size: o.size().unwrap_or(0).max(0) as u64,
                    etag: o.e_tag().unwrap_or("").to_string(),
                    last_modified: to_system_time(o.last_modified()),
                })
            })
            .collect();
        let prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(name))
            .collect();
        let next_token = if out.is_truncated().unwrap_or(false) {
            out.next_continuation_token().map(str::to_string)
        } else {
            None
        };
        Ok(ListPage {
            objects,
            prefixes,
            next_token,
        })
    }
}

#[async_trait]
impl ObjectClient for S3Client {
    async fn check_bucket(&self, prefix: &str) -> Result<()> {
        let r = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .max_keys(1)
            .send()
            .await;
        match r {
            // Every S3 ListBucketResult names its bucket.
            Ok(out) if out.name().is_none() => Err(ClientError::NotS3(
                "its answer to ListObjectsV2 is not a ListBucketResult".into(),
            )),
            Ok(_) => Ok(()),
            Err(e) => {
                Err(not_s3(&e).unwrap_or_else(|| map_err(&format!("bucket {}", self.bucket), e)))
            }
        }
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let out = self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(ObjectMeta {
            info: ObjectInfo {
                key: key.to_string(),
                size: out.content_length().unwrap_or(0).max(0) as u64,
                etag: out.e_tag().unwrap_or("").to_string(),
                last_modified: to_system_time(out.last_modified()),
            },
            metadata: out.metadata().cloned().unwrap_or_default(),
        })
    }

    async fn get_range(
        &self,
        key: &str,
        start: u64,
        end: u64,
        etag: Option<&str>,
    ) -> Result<Bytes> {
        let mut out = Bytes::new();
        if end > start {
            self.get_range_pieces(key, start, &[end], etag, &mut |_, b| out = b)
                .await?;
        }
        Ok(out)
    }

    async fn get_range_pieces(
        &self,
        key: &str,
        start: u64,
        cuts: &[u64],
        etag: Option<&str>,
        sink: &mut (dyn FnMut(usize, Bytes) + Send),
    ) -> Result<()> {
        let Some(&end) = cuts.last() else {
            return Ok(());
        };
        if end <= start {
            return Ok(());
        }
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", start, end - 1))
            .set_if_match(etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        // Each piece in a buffer of its own: the disk cache writes it while the next one
        // is still arriving.
        let mut body = out.body;
        let (mut i, mut from) = (0, start);
        let mut buf = AlignedBuf::with_capacity((cuts[0] - start) as usize);
        while i < cuts.len() {
            let Some(frame) = body
                .try_next()
                .await
                .map_err(|e| ClientError::Transient(format!("{key}: body: {e}")))?
            else {
                return Err(short_body(
                    key,
                    from - start + buf.len() as u64,
                    end - start,
                ));
            };
            let mut frame = &frame[..];
            while !frame.is_empty() && i < cuts.len() {
                let room = (cuts[i] - from) as usize - buf.len();
                let n = room.min(frame.len());
                buf.extend_from_slice(&frame[..n]);
                frame = &frame[n..];
                if buf.len() as u64 == cuts[i] - from {
                    from = cuts[i];
                    let next = cuts.get(i + 1).map_or(0, |&c| (c - from) as usize);
                    let full = std::mem::replace(&mut buf, AlignedBuf::with_capacity(next));
                    sink(i, full.into_bytes());
                    i += 1;
                }
            }
            // Bytes past the range (a server that ignored Range) are dropped.
        }
        Ok(())
    }

    async fn list_page(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<String>,
        max_keys: Option<i32>,
    ) -> Result<ListPage> {
        self.list(prefix, delimiter, token, max_keys, None).await
    }

    async fn list_after(
        &self,
        prefix: &str,
        start_after: &str,
        token: Option<String>,
    ) -> Result<ListPage> {
        self.list(prefix, Some("/"), token, None, Some(start_after))
            .await
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        metadata: &HashMap<String, String>,
    ) -> Result<PutResult> {
        let out = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .body(ByteStream::from(body))
            .set_metadata((!metadata.is_empty()).then(|| metadata.clone()))
            // See `upload_part`.
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(PutResult {
            etag: out.e_tag().unwrap_or("").to_string(),
        })
    }

    async fn create_multipart(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<String> {
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .set_metadata((!metadata.is_empty()).then(|| metadata.clone()))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        out.upload_id()
            .map(str::to_string)
            .ok_or_else(|| ClientError::Other(format!("{key}: no upload id in the answer")))
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String> {
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(part_number)
            .body(ByteStream::from(body))
            // A signed payload costs a SHA-256 of every byte on both ends (a fifth of
            // flowfs's CPU for a 2 GiB upload, and the server's): the bodies go as
            // UNSIGNED-PAYLOAD, as SDKs do over HTTPS; the headers stay signed.
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(out.e_tag().unwrap_or("").to_string())
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
    ) -> Result<PutResult> {
        let parts = parts
            .into_iter()
            .map(|p| {
                SdkPart::builder()
                    .part_number(p.part_number)
                    .e_tag(p.etag)
                    .build()
            })
            .collect();
        let out = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(PutResult {
            etag: out.e_tag().unwrap_or("").to_string(),
        })
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        (start, end): (u64, u64),
        etag: Option<&str>,
    ) -> Result<String> {
        let out = self
            .client
            .upload_part_copy()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .part_number(part_number)
            .copy_source(encode_copy_source(&self.bucket, key))
            .copy_source_range(format!("bytes={start}-{}", end.saturating_sub(1)))
            .set_copy_source_if_match(etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        let etag = out.copy_part_result().and_then(|r| r.e_tag()).unwrap_or("");
        Ok(quoted(etag))
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(upload_id)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| map_err(key, e))
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        let mut out = Vec::new();
        let mut marker: Option<(String, String)> = None;
        loop {
            let mut req = self
                .client
                .list_multipart_uploads()
                .bucket(&self.bucket)
                .prefix(key);
            if let Some((k, id)) = &marker {
                req = req.key_marker(k).upload_id_marker(id);
            }
            let page = req.send().await.map_err(|e| map_err(key, e))?;
            for u in page.uploads() {
                if let (Some(k), Some(id)) = (u.key(), u.upload_id()) {
                    if k == key {
                        out.push(UploadInfo {
                            upload_id: id.to_string(),
                            initiated: to_system_time(u.initiated()),
                        });
                    }
                }
            }
            marker = match (page.next_key_marker(), page.next_upload_id_marker()) {
                (Some(k), Some(id)) if page.is_truncated() == Some(true) => {
                    Some((k.to_string(), id.to_string()))
                }
                _ => return Ok(out),
            };
        }
    }

    async fn copy(&self, from: &str, to: &str) -> Result<PutResult> {
        let out = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(to)
            .copy_source(encode_copy_source(&self.bucket, from))
            .send()
            .await
            .map_err(|e| map_err(from, e))?;
        let etag = out
            .copy_object_result()
            .and_then(|r| r.e_tag())
            .unwrap_or("");
        Ok(PutResult { etag: quoted(etag) })
    }

    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
        etag: Option<&str>,
        size: u64,
    ) -> Result<PutResult> {
        if size > crate::copy::MAX_COPY {
            let limits = crate::copy::CopyLimits::default();
            return crate::copy::copy_in_parts(self, key, metadata, etag, size, limits).await;
        }
        let out = self
            .client
            .copy_object()
            .bucket(&self.bucket)
            .key(key)
            .copy_source(encode_copy_source(&self.bucket, key))
            .metadata_directive(aws_sdk_s3::types::MetadataDirective::Replace)
            .set_metadata(Some(metadata.clone()))
            .set_copy_source_if_match(etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        let etag = out
            .copy_object_result()
            .and_then(|r| r.e_tag())
            .unwrap_or("");
        Ok(PutResult { etag: quoted(etag) })
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| map_err(key, e))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_keys_are_url_decoded() {
        assert_eq!(url_decode("a%01b+c%2B%25%C3%BC"), "a\u{1}b c+%ü");
        assert_eq!(url_decode("50%"), "50%");
        assert_eq!(url_decode("x%zz%4"), "x%zz%4");
    }

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
