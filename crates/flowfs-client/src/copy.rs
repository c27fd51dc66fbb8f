//! A copy of an object too large for one CopyObject (S3 copies at most 5 GiB in one
//! request), to another key or onto itself (a metadata rewrite): a multipart upload whose
//! parts are UploadPartCopy ranges of the source, so that no byte leaves the server.
//! Written once over the trait, so that the S3 backend and the mock run the same steps.

use std::future::Future;

use crate::{ClientError, CompletedPart, Metadata, ObjectClient, PutResult, Result};
use crate::{Rewrite, Upload, Version};

/// The largest object one CopyObject copies (S3's limit).
pub const MAX_COPY: u64 = 5 << 30;
/// Parts of a copy in parts: at least this large, so a 5 TiB object needs fewer than
/// S3's 10,000 parts (and each part is at most 5 GiB).
pub const COPY_PART: u64 = 1 << 30;
/// S3's most parts in one upload.
const MAX_PARTS: u64 = 10_000;

/// When a metadata rewrite copies in parts, and how large the parts are.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CopyLimits {
    /// Objects above this size are copied in parts.
    pub max_copy: u64,
    /// The smallest part of a copy in parts.
    pub part: u64,
}

impl Default for CopyLimits {
    fn default() -> CopyLimits {
        CopyLimits {
            max_copy: MAX_COPY,
            part: COPY_PART,
        }
    }
}

impl CopyLimits {
    /// The byte ranges `[start, end)` of the parts of an object of `size` bytes.
    pub fn ranges(&self, size: u64) -> Vec<(u64, u64)> {
        let part = self.part.max(size.div_ceil(MAX_PARTS)).max(1);
        (0..size.div_ceil(part))
            .map(|i| (i * part, ((i + 1) * part).min(size)))
            .collect()
    }
}

/// The message of S3's refusal of one CopyObject of more than 5 GiB (`InvalidRequest`,
/// "The specified copy source is larger than the maximum allowable size for a copy
/// source: 5368709120"), which the S3 backend turns into `Refused`.
pub const TOO_LARGE: &str = "copy source is larger than the maximum allowable size";

/// `single`, one copy of `src` to `to`; if the store refuses it for its size, the copy in
/// parts (a HEAD first, for the size and for the source's metadata where `meta` is none).
pub async fn copy_any_size<C: ObjectClient + ?Sized>(
    client: &C,
    src: Version<'_>,
    to: &str,
    meta: Option<&Metadata>,
    limits: CopyLimits,
    single: impl Future<Output = Result<PutResult>>,
) -> Result<PutResult> {
    match single.await {
        Err(ClientError::Refused(m)) if m.contains(TOO_LARGE) => {}
        r => return r,
    }
    let head = client.head(src.key).await?;
    if src.etag.is_some_and(|e| e != head.info.etag) {
        return Err(ClientError::Precondition(src.key.to_string()));
    }
    let meta = meta.unwrap_or(&head.metadata);
    let src = Version::new(src.key, Some(&head.info.etag));
    copy_in_parts(client, src, to, meta, head.info.size, limits).await
}

/// `replace_metadata` of an object too large for one copy: `copy_in_parts` of it onto
/// itself with the new metadata.
pub async fn rewrite_in_parts<C: ObjectClient + ?Sized>(
    client: &C,
    rw: Rewrite<'_>,
    limits: CopyLimits,
) -> Result<PutResult> {
    let Rewrite { object, .. } = rw;
    copy_in_parts(client, object, object.key, rw.metadata, rw.size, limits).await
}

/// Copies `src` (`size` bytes; of version `src.etag` if given) to `to` with a multipart
/// upload: CreateMultipartUpload with `metadata`, one UploadPartCopy per range of
/// `limits`, each conditional on that version, and the completion. On any failure the
/// upload is aborted and `to` stays as it was.
pub async fn copy_in_parts<C: ObjectClient + ?Sized>(
    client: &C,
    src: Version<'_>,
    to: &str,
    metadata: &Metadata,
    size: u64,
    limits: CopyLimits,
) -> Result<PutResult> {
    let key = to;
    let id = client.create_multipart(key, metadata).await?;
    let upload = Upload::new(key, &id);
    let copied = async {
        let mut parts = Vec::new();
        for (i, (start, end)) in limits.ranges(size).into_iter().enumerate() {
            let part_number = i as i32 + 1;
            let part = upload.part(part_number);
            let etag = client.upload_part_copy(part, src.range(start, end)).await?;
            parts.push(CompletedPart { part_number, etag });
        }
        client.complete_multipart(upload.completion(&parts)).await
    }
    .await;
    if copied.is_err() {
        if let Err(e) = client.abort_multipart(upload).await {
            tracing::warn!(%key, "cannot abort a copy in parts that failed: {e}");
        }
    }
    copied
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_cover_the_object_and_stay_within_ten_thousand() {
        let l = CopyLimits {
            max_copy: 10,
            part: 4,
        };
        assert_eq!(l.ranges(10), vec![(0, 4), (4, 8), (8, 10)]);
        assert_eq!(l.ranges(8), vec![(0, 4), (4, 8)]);
        let big = CopyLimits::default().ranges(20 << 40);
        assert!(big.len() <= 10_000, "{}", big.len());
        assert_eq!(big.last().map(|r| r.1), Some(20 << 40));
    }
}
