//! `impl ObjectClient for S3Client`: each method is one SDK request (the listings' is in
//! listing.rs, the piece-by-piece reading of a GET body in body.rs), with the bucket
//! filled in and the SDK's failure turned into a `ClientError` (errors.rs).

use crate::{ByteRange, Completion, List, ListAfter, Metadata, Part, Payload, Pieces, Rewrite};
use crate::{Sink, Upload, Version};

use async_trait::async_trait;
use aws_sdk_s3::operation::copy_object::builders::CopyObjectFluentBuilder;
use aws_sdk_s3::primitives::ByteStream;
use aws_sdk_s3::types::{
    ChecksumAlgorithm, ChecksumMode, ChecksumType, CompletedMultipartUpload,
    CompletedPart as SdkPart, MetadataDirective,
};

use super::errors::{map_err, not_s3};
use super::{body, encode_copy_source, etag_of, quoted, to_system_time, S3Client};
use crate::{
    Checksum, ClientError, Crc, KeyRules, ListPage, ObjectClient, ObjectInfo, ObjectMeta,
    PutResult, Result, UploadInfo,
};

/// The two CopyObjects, a copy to another key and a metadata rewrite onto itself.
impl S3Client {
    /// A CopyObject of `from` to `to`, for the caller to add its conditions to.
    fn copy_object(&self, from: &str, to: &str) -> CopyObjectFluentBuilder {
        self.client
            .copy_object()
            .bucket(&self.bucket)
            .key(to)
            .copy_source(encode_copy_source(&self.bucket, from))
    }
}

/// The object's checksum among those a HEAD or GET gives (with `ChecksumMode::Enabled`),
/// CRC-64/NVME first: what flowfs sends, and what AWS adds to objects sent without one.
fn checksum_of(
    crc64nvme: Option<&str>,
    crc32c: Option<&str>,
    crc32: Option<&str>,
) -> Option<Checksum> {
    let named = [
        (Crc::Crc64Nvme, crc64nvme),
        (Crc::Crc32c, crc32c),
        (Crc::Crc32, crc32),
    ];
    named.into_iter().find_map(|(crc, v)| {
        v.map(|v| Checksum {
            name: crc.name(),
            value: v.to_string(),
        })
    })
}

/// Sends a CopyObject (`what` names it in errors); the ETag of the copy comes back quoted.
async fn send_copy(req: CopyObjectFluentBuilder, what: &str) -> Result<PutResult> {
    let out = req.send().await.map_err(|e| map_err(what, e))?;
    let etag = out
        .copy_object_result()
        .and_then(|r| r.e_tag())
        .unwrap_or("");
    Ok(PutResult { etag: quoted(etag) })
}

#[async_trait]
impl ObjectClient for S3Client {
    /// By the `Server` header of the store's answers (the bucket check is the first): a
    /// SeaweedFS changes keys that AWS S3 keeps.
    fn key_rules(&self) -> KeyRules {
        self.server
            .get()
            .map_or(KeyRules::S3, |s| KeyRules::of_s3_server(s))
    }

    fn upload_checksum(&self) -> Option<Crc> {
        Some(Crc::Crc64Nvme)
    }

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
            .checksum_mode(ChecksumMode::Enabled)
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(ObjectMeta {
            info: ObjectInfo {
                key: key.to_string(),
                size: out.content_length().unwrap_or(0).max(0) as u64,
                etag: etag_of(out.e_tag()),
                last_modified: to_system_time(out.last_modified()),
            },
            metadata: out.metadata().cloned().unwrap_or_default(),
            checksum: checksum_of(
                out.checksum_crc64_nvme(),
                out.checksum_crc32_c(),
                out.checksum_crc32(),
            ),
        })
    }

    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let Some(end) = get.end() else {
            return Ok(());
        };
        let Version { key, etag } = get.src;
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .range(format!("bytes={}-{}", get.start, end - 1))
            .set_if_match(etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        body::deliver(out.body, get, sink).await
    }

    /// A GET without a Range: S3 gives the full-object checksum only then.
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        let Some(end) = src.pieces(0, cuts).end() else {
            return Ok(());
        };
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(src.key)
            .checksum_mode(ChecksumMode::Enabled)
            .set_if_match(src.etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| map_err(src.key, e))?;
        // Not the whole object after all (a caller that reads a prefix of a version): the
        // range, unchecked, rather than bytes nobody asked for.
        if out.content_length() != Some(end as i64) {
            return self.get_range_pieces(src.pieces(0, cuts), sink).await;
        }
        let want = checksum_of(
            out.checksum_crc64_nvme(),
            out.checksum_crc32_c(),
            out.checksum_crc32(),
        );
        body::deliver_checked(out.body, src.key, cuts, want, sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        self.list(list, None).await
    }

    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        self.list(list.level(), Some(list.start_after)).await
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        let out = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .checksum_crc64_nvme(body.checksum(Crc::Crc64Nvme).value)
            .body(ByteStream::from(body.into_bytes()))
            .set_metadata((!metadata.is_empty()).then(|| metadata.clone()))
            // See `upload_part`.
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(PutResult {
            etag: etag_of(out.e_tag()),
        })
    }

    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        let out = self
            .client
            .create_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            // Each part carries its CRC-64/NVME and the store combines them into the
            // object's: a full-object checksum, as a single PUT's is.
            .checksum_algorithm(ChecksumAlgorithm::Crc64Nvme)
            .checksum_type(ChecksumType::FullObject)
            .set_metadata((!metadata.is_empty()).then(|| metadata.clone()))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        out.upload_id()
            .map(str::to_string)
            .ok_or_else(|| ClientError::Other(format!("{key}: no upload id in the answer")))
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        let key = part.upload.key;
        let out = self
            .client
            .upload_part()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(part.upload.id)
            .part_number(part.number)
            .checksum_crc64_nvme(body.checksum(Crc::Crc64Nvme).value)
            .body(ByteStream::from(body.into_bytes()))
            // A signed payload costs a SHA-256 of every byte on both ends (a fifth of
            // flowfs's CPU for a 2 GiB upload, and the server's): the bodies go as
            // UNSIGNED-PAYLOAD, as SDKs do over HTTPS; the headers stay signed.
            .customize()
            .disable_payload_signing()
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(etag_of(out.e_tag()))
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let Upload { key, id } = done.upload;
        let parts = (done.parts.iter())
            .map(|p| {
                SdkPart::builder()
                    .part_number(p.part_number)
                    .e_tag(&p.etag)
                    .build()
            })
            .collect();
        let out = self
            .client
            .complete_multipart_upload()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(id)
            .multipart_upload(
                CompletedMultipartUpload::builder()
                    .set_parts(Some(parts))
                    .build(),
            )
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        Ok(PutResult {
            etag: etag_of(out.e_tag()),
        })
    }

    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        let ByteRange { src, start, end } = range;
        let key = part.upload.key;
        let out = self
            .client
            .upload_part_copy()
            .bucket(&self.bucket)
            .key(key)
            .upload_id(part.upload.id)
            .part_number(part.number)
            .copy_source(encode_copy_source(&self.bucket, src.key))
            .copy_source_range(format!("bytes={start}-{}", end.saturating_sub(1)))
            .set_copy_source_if_match(src.etag.map(str::to_string))
            .send()
            .await
            .map_err(|e| map_err(key, e))?;
        let etag = out.copy_part_result().and_then(|r| r.e_tag()).unwrap_or("");
        Ok(quoted(etag))
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        self.client
            .abort_multipart_upload()
            .bucket(&self.bucket)
            .key(upload.key)
            .upload_id(upload.id)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| map_err(upload.key, e))
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

    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        let mut req = self.copy_object(src.key, to);
        if let Some(m) = meta {
            req = req
                .metadata_directive(MetadataDirective::Replace)
                .set_metadata(Some(m.clone()));
        }
        let req = req.set_copy_source_if_match(src.etag.map(str::to_string));
        let limits = crate::copy::CopyLimits::default();
        crate::copy::copy_any_size(self, src, to, meta, limits, send_copy(req, src.key)).await
    }

    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        if rw.size > crate::copy::MAX_COPY {
            let limits = crate::copy::CopyLimits::default();
            return crate::copy::rewrite_in_parts(self, rw, limits).await;
        }
        let (Version { key, etag }, metadata) = (rw.object, rw.metadata);
        let rewrite = self
            .copy_object(key, key)
            .metadata_directive(MetadataDirective::Replace)
            .set_metadata(Some(metadata.clone()))
            .set_copy_source_if_match(etag.map(str::to_string));
        send_copy(rewrite, key).await
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
