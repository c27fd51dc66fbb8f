//! `impl ObjectClient for S3Client`: each method is the S3 REST call of docs/STORES.md's
//! table (the listings' is in listing.rs), with the bucket filled in and a failed answer
//! turned into a `ClientError` (errors.rs).

use crate::rest::{header, text, Answer, Call};
use crate::{ByteRange, Completion, List, ListAfter, Metadata, Part, Payload, Pieces, Rewrite};
use crate::{Sink, Upload, Version};

use async_trait::async_trait;
use http::Method;

use super::errors::Failure;
use super::{encode_copy_source, meta_headers, meta_of, query_value, xml, S3Client};
use crate::{
    Checksum, ClientError, Crc, KeyRules, ListPage, ObjectClient, ObjectInfo, ObjectMeta,
    PutResult, Result, UploadInfo,
};

/// The header that carries a body's CRC-64/NVME (issue 49).
const CRC64: &str = "x-amz-checksum-crc64nvme";

impl S3Client {
    /// A request of `method` to object `key` with `query`, `headers` and `body`.
    async fn object(
        &self,
        method: Method,
        (key, query): (&str, &str),
        headers: &[(&str, String)],
        body: Payload,
        (what, op): (&str, &'static str),
    ) -> Result<reqwest::Response> {
        let url = self.url(key, query);
        let call = Call::new(method, &url, what).headers(headers);
        self.send(call.body(body.into_bytes()), op).await
    }

    /// A request without a body whose answer is all that matters.
    async fn call(
        &self,
        method: Method,
        (key, query): (&str, &str),
        headers: &[(&str, String)],
        op: &'static str,
    ) -> Result<reqwest::Response> {
        let url = self.url(key, query);
        self.send(Call::new(method, &url, key).headers(headers), op)
            .await
    }

    /// A request whose 200 answer is XML that may still be an `<Error>` (a copy, the
    /// completion of an upload); the ETag in its `root` element.
    async fn etag_of_answer(&self, r: reqwest::Response, what: &str, root: &str) -> Result<String> {
        let body = text(r, what).await?;
        if let Some(f) = Failure::in_body(&body) {
            return Err(f.error(what));
        }
        xml::etag_in(&body, what, root)
    }

    /// A CopyObject of `src` to `to`, with new metadata if `meta`.
    async fn copy_object(
        &self,
        src: Version<'_>,
        to: &str,
        meta: Option<&Metadata>,
    ) -> Result<PutResult> {
        let mut headers = vec![(
            "x-amz-copy-source",
            encode_copy_source(&self.bucket, src.key),
        )];
        if let Some(etag) = src.etag {
            headers.push(("x-amz-copy-source-if-match", etag.to_string()));
        }
        // New metadata replaces all of it; without, the copy keeps the source's.
        let replaced = meta.map(meta_headers);
        if let Some(m) = &replaced {
            headers.push(("x-amz-metadata-directive", "REPLACE".to_string()));
            headers.extend(m.iter().map(|(k, v)| (k.as_str(), v.clone())));
        }
        let what = src.key;
        let r = self
            .call(Method::PUT, (to, ""), &headers, "CopyObject")
            .await?;
        let etag = self.etag_of_answer(r, what, "CopyObjectResult").await?;
        Ok(PutResult { etag })
    }
}

/// The object's checksum among those a HEAD or GET gives (with `x-amz-checksum-mode`),
/// CRC-64/NVME first: what flowfs sends, and what AWS adds to objects sent without one.
fn checksum_of(headers: &http::HeaderMap) -> Option<Checksum> {
    let named = [
        (Crc::Crc64Nvme, CRC64),
        (Crc::Crc32c, "x-amz-checksum-crc32c"),
        (Crc::Crc32, "x-amz-checksum-crc32"),
    ];
    named.into_iter().find_map(|(crc, h)| {
        let v = header(headers, h);
        (!v.is_empty()).then(|| Checksum {
            name: crc.name(),
            value: v.to_string(),
        })
    })
}

/// The length an answer's head says.
fn length_of(headers: &http::HeaderMap) -> u64 {
    header(headers, "content-length").parse().unwrap_or(0)
}

fn if_match(etag: Option<&str>) -> Vec<(&'static str, String)> {
    etag.map(|e| ("if-match", e.to_string()))
        .into_iter()
        .collect()
}

/// The ETag header of an answer.
fn etag(r: &reqwest::Response) -> String {
    header(r.headers(), "etag").to_string()
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
        let what = format!("bucket {}", self.bucket);
        let list = List {
            prefix,
            delimiter: None,
            token: None,
            max_keys: Some(1),
        };
        let url = self.list_url(&list, None);
        let call = Call::new(Method::GET, &url, &what);
        let r = self.send_unchecked(call, "ListObjectsV2").await?;
        if !r.status().is_success() {
            let f = Failure::read(r, &what).await?;
            return Err(f.not_s3().unwrap_or_else(|| f.error(&what)));
        }
        let body = text(r, &what).await?;
        match xml::object_page(&body) {
            Ok(page) if page.named => Ok(()),
            _ => Err(ClientError::NotS3(
                "its answer to ListObjectsV2 is not a ListBucketResult".into(),
            )),
        }
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let mode = [("x-amz-checksum-mode", "ENABLED".to_string())];
        let r = self
            .call(Method::HEAD, (key, ""), &mode, "HeadObject")
            .await?;
        let h = r.headers();
        let modified = httpdate::parse_http_date(header(h, "last-modified"));
        Ok(ObjectMeta {
            info: ObjectInfo {
                key: key.to_string(),
                size: length_of(h),
                etag: etag(&r),
                last_modified: super::whole_seconds(modified.unwrap_or(std::time::UNIX_EPOCH)),
            },
            metadata: meta_of(h),
            checksum: checksum_of(h),
        })
    }

    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let Some(end) = get.end() else {
            return Ok(());
        };
        let Version { key, etag } = get.src;
        let mut headers = if_match(etag);
        headers.push(("range", format!("bytes={}-{}", get.start, end - 1)));
        let r = self
            .call(Method::GET, (key, ""), &headers, "GetObject")
            .await?;
        crate::body::deliver(Answer { r, key }, get, sink).await
    }

    /// A GET without a Range: S3 gives the full-object checksum only then.
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        let Some(end) = src.pieces(0, cuts).end() else {
            return Ok(());
        };
        let key = src.key;
        let mut headers = if_match(src.etag);
        headers.push(("x-amz-checksum-mode", "ENABLED".to_string()));
        let r = self
            .call(Method::GET, (key, ""), &headers, "GetObject")
            .await?;
        // Not the whole object after all (a caller that reads a prefix of a version): the
        // range, unchecked, rather than bytes nobody asked for.
        if length_of(r.headers()) != end {
            drop(r);
            return self.get_range_pieces(src.pieces(0, cuts), sink).await;
        }
        let want = checksum_of(r.headers());
        crate::body::deliver_checked(Answer { r, key }, key, cuts, want, sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        self.list(list, None).await
    }

    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        self.list(list.level(), Some(list.start_after)).await
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        let meta = meta_headers(metadata);
        let mut headers = vec![(CRC64, body.checksum(Crc::Crc64Nvme).value)];
        headers.extend(meta.iter().map(|(k, v)| (k.as_str(), v.clone())));
        // The body goes as UNSIGNED-PAYLOAD (reqsign's default), as SDKs send it over
        // HTTPS: a signed payload costs a SHA-256 of every byte on both ends (a fifth of
        // flowfs's CPU for a 2 GiB upload, and the server's). Its CRC-64 is checked.
        let r = (self.object(Method::PUT, (key, ""), &headers, body, (key, "PutObject"))).await?;
        Ok(PutResult { etag: etag(&r) })
    }

    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        let meta = meta_headers(metadata);
        // Each part carries its CRC-64/NVME and the store combines them into the object's:
        // a full-object checksum, as a single PUT's is.
        let mut headers = vec![
            ("x-amz-checksum-algorithm", "CRC64NVME".to_string()),
            ("x-amz-checksum-type", "FULL_OBJECT".to_string()),
        ];
        headers.extend(meta.iter().map(|(k, v)| (k.as_str(), v.clone())));
        let op = "CreateMultipartUpload";
        let r = self
            .call(Method::POST, (key, "uploads"), &headers, op)
            .await?;
        let body = text(r, key).await?;
        let id = xml::field(&body, op, "/InitiateMultipartUploadResult/UploadId")?;
        id.ok_or_else(|| ClientError::Other(format!("{key}: no upload id in the answer")))
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        let key = part.upload.key;
        let q = part_query(part);
        let headers = [(CRC64, body.checksum(Crc::Crc64Nvme).value)];
        let r = (self.object(Method::PUT, (key, &q), &headers, body, (key, "UploadPart"))).await?;
        Ok(etag(&r))
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let Upload { key, id } = done.upload;
        let parts: Vec<_> = (done.parts.iter())
            .map(|p| (p.part_number, p.etag.as_str()))
            .collect();
        let body = bytes::Bytes::from(xml::complete_body(&parts));
        let url = self.url(key, &format!("uploadId={}", query_value(id)));
        let call = Call::new(Method::POST, &url, key).body(body);
        let r = self.send(call, "CompleteMultipartUpload").await?;
        let etag = self
            .etag_of_answer(r, key, "CompleteMultipartUploadResult")
            .await?;
        Ok(PutResult { etag })
    }

    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        let ByteRange { src, start, end } = range;
        let key = part.upload.key;
        let mut headers = vec![
            (
                "x-amz-copy-source",
                encode_copy_source(&self.bucket, src.key),
            ),
            (
                "x-amz-copy-source-range",
                format!("bytes={start}-{}", end.saturating_sub(1)),
            ),
        ];
        if let Some(etag) = src.etag {
            headers.push(("x-amz-copy-source-if-match", etag.to_string()));
        }
        let q = part_query(part);
        let r = self
            .call(Method::PUT, (key, &q), &headers, "UploadPartCopy")
            .await?;
        self.etag_of_answer(r, key, "CopyPartResult").await
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        let q = format!("uploadId={}", query_value(upload.id));
        let op = "AbortMultipartUpload";
        self.call(Method::DELETE, (upload.key, &q), &[], op)
            .await
            .map(drop)
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        let mut out = Vec::new();
        let mut marker: Option<(String, String)> = None;
        loop {
            let mut q = format!("uploads&prefix={}", query_value(key));
            if let Some((k, id)) = &marker {
                q.push_str(&format!("&key-marker={}", query_value(k)));
                q.push_str(&format!("&upload-id-marker={}", query_value(id)));
            }
            let url = self.bucket_url(&q);
            let r = self
                .send(Call::new(Method::GET, &url, key), "ListMultipartUploads")
                .await?;
            let body = text(r, key).await?;
            let page = xml::upload_page(&body, key)?;
            out.extend(page.uploads);
            match page.next {
                Some(next) => marker = Some(next),
                None => return Ok(out),
            }
        }
    }

    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        let limits = crate::copy::CopyLimits::default();
        let one = self.copy_object(src, to, meta);
        crate::copy::copy_any_size(self, src, to, meta, limits, one).await
    }

    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        if rw.size > crate::copy::MAX_COPY {
            let limits = crate::copy::CopyLimits::default();
            return crate::copy::rewrite_in_parts(self, rw, limits).await;
        }
        self.copy_object(rw.object, rw.object.key, Some(rw.metadata))
            .await
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.call(Method::DELETE, (key, ""), &[], "DeleteObject")
            .await
            .map(drop)
    }
}

/// The query of part `part` of its upload.
fn part_query(part: Part<'_>) -> String {
    format!(
        "partNumber={}&uploadId={}",
        part.number,
        query_value(part.upload.id)
    )
}
