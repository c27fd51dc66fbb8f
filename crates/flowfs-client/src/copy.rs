//! A metadata rewrite of an object too large for one CopyObject (S3 copies at most 5 GiB
//! in one request): a multipart upload of the object onto itself whose parts are
//! UploadPartCopy ranges of it, so that no byte leaves the server. Written once over the
//! trait, so that the S3 backend and the mock run the same steps.

use std::collections::HashMap;

use crate::{CompletedPart, ObjectClient, PutResult, Result};

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

/// Replaces the metadata of `key` (`size` bytes, of version `etag` if given) with a
/// multipart upload onto itself: CreateMultipartUpload with `metadata`, one
/// UploadPartCopy per range of `limits`, each conditional on `etag`, and the completion.
/// On any failure the upload is aborted and the object stays as it was.
pub async fn copy_in_parts<C: ObjectClient + ?Sized>(
    client: &C,
    key: &str,
    metadata: &HashMap<String, String>,
    etag: Option<&str>,
    size: u64,
    limits: CopyLimits,
) -> Result<PutResult> {
    let id = client.create_multipart(key, metadata).await?;
    let copied = async {
        let mut parts = Vec::new();
        for (i, range) in limits.ranges(size).into_iter().enumerate() {
            let part_number = i as i32 + 1;
            let etag = client
                .upload_part_copy(key, &id, part_number, range, etag)
                .await?;
            parts.push(CompletedPart { part_number, etag });
        }
        client.complete_multipart(key, &id, parts).await
    }
    .await;
    if copied.is_err() {
        if let Err(e) = client.abort_multipart(key, &id).await {
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
