//! Writes to the mock's object table: stored objects, copies of an object onto itself
//! (a metadata rewrite in one request) and the parts of a copy in parts (crate::copy),
//! with S3's limits (lowered by tests).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::SystemTime;

use bytes::Bytes;

use crate::copy::CopyLimits;
use crate::{ByteRange, ClientError, Metadata, Part, PutResult, Result, Version};

use super::{http_error, version, MockClient, Obj, Op};

impl MockClient {
    /// A mock whose single copies stop at `limits.max_copy` bytes (S3: 5 GiB), so that a
    /// test makes a copy in parts with small objects.
    pub fn with_copy_limits(limits: CopyLimits) -> MockClient {
        MockClient {
            copy_limits: limits,
            ..MockClient::default()
        }
    }

    /// One CopyObject of `object` onto itself with new metadata.
    pub(super) fn rewrite(&self, object: Version<'_>, metadata: &Metadata) -> Result<PutResult> {
        let key = object.key;
        let mut objects = self.objects.lock();
        let o = version(&mut objects, object)?;
        if o.data.len() as u64 > self.copy_limits.max_copy {
            let msg = "The specified copy source is larger than the maximum allowable size";
            return Err(http_error(key, 400, "InvalidRequest", msg));
        }
        o.metadata = lower(metadata);
        Ok(PutResult {
            etag: o.etag.clone(),
        })
    }

    /// One CopyObject of `src` to `to` (with `meta` instead of the source's, if given):
    /// refused above the copy limit, as S3 refuses one of more than 5 GiB.
    pub(super) async fn copy_single(
        &self,
        src: Version<'_>,
        to: &str,
        meta: Option<&HashMap<String, String>>,
    ) -> Result<PutResult> {
        self.enter(Op::Copy).await?;
        let mut o = version(&mut self.objects.lock(), src)?.clone();
        if o.data.len() as u64 > self.copy_limits.max_copy {
            let msg = format!("The specified {}", crate::copy::TOO_LARGE);
            return Err(ClientError::Refused(format!("{}: {msg}", src.key)));
        }
        if let Some(m) = meta {
            o.metadata = m.clone();
        }
        // A single-part object's ETag is its bytes' MD5 on S3: the copy has it too (the
        // conformance suite pins it); a multipart one's copy is one part.
        let etag = match o.etag.contains('-') {
            true => self.store(to, o.data, o.metadata),
            false => self.store_as(to, o.data, o.metadata, o.etag),
        };
        Ok(PutResult { etag })
    }

    /// One UploadPartCopy: bytes `range` as `part`.
    pub(super) fn part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        let ByteRange { src, start, end } = range;
        let body = {
            let mut objects = self.objects.lock();
            let o = version(&mut objects, src)?;
            if start >= end || end > o.data.len() as u64 {
                return Err(http_error(src.key, 400, "InvalidRange", "bad copy range"));
            }
            o.data.slice(start as usize..end as usize)
        };
        self.add_part(part, "copy", body)
    }

    /// Puts `body` as `part` of an open upload; its ETag, distinct for every part
    /// uploaded, as S3's (an MD5 of the body) are in practice.
    pub(super) fn add_part(&self, part: Part<'_>, kind: &str, body: Bytes) -> Result<String> {
        let (key, upload_id, part_number) = (part.upload.key, part.upload.id, part.number);
        let mut uploads = self.uploads.lock();
        let u = uploads
            .get_mut(upload_id)
            .filter(|u| u.key == key)
            .ok_or_else(|| ClientError::NotFound(format!("upload {upload_id}")))?;
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let etag = format!("\"{kind}-{part_number}-{n}\"");
        u.parts.insert(part_number, (etag.clone(), body));
        Ok(etag)
    }

    pub(super) fn store(
        &self,
        key: &str,
        data: Bytes,
        metadata: HashMap<String, String>,
    ) -> String {
        self.store_parts(key, data, metadata, None)
    }

    /// Multipart objects get an ETag ending in `-PARTS`, as on S3.
    pub(super) fn store_parts(
        &self,
        key: &str,
        data: Bytes,
        metadata: HashMap<String, String>,
        parts: Option<usize>,
    ) -> String {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        let etag = match parts {
            Some(p) => format!("\"mock-{n}-{p}\""),
            None => format!("\"mock{n}\""),
        };
        self.store_as(key, data, metadata, etag)
    }

    /// Stores an object with the ETag `etag`.
    pub(super) fn store_as(
        &self,
        key: &str,
        data: Bytes,
        metadata: HashMap<String, String>,
        etag: String,
    ) -> String {
        self.visible.lock().push(key.to_string());
        self.objects.lock().insert(
            key.to_string(),
            Obj {
                data,
                etag: etag.clone(),
                modified: SystemTime::now(),
                metadata,
            },
        );
        etag
    }
}

/// User metadata as S3 keeps it: names travel as HTTP headers and come back lower-cased.
pub(super) fn lower(metadata: &HashMap<String, String>) -> HashMap<String, String> {
    metadata
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.clone()))
        .collect()
}
