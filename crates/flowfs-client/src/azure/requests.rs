//! `impl ObjectClient for AzureClient`: each method is the Azure Blob REST call of
//! docs/STORES.md's table (multipart uploads: uploads.rs).

use crate::rest::{header, text, Call};
use crate::{ByteRange, Completion, List, ListAfter, Metadata, Part, Payload, Pieces, Rewrite};
use crate::{Sink, Upload, Version};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use http::Method;

use super::uploads::{self, Block};
use super::{meta_headers, meta_of, query_value, quoted, xml, AzureClient};
use crate::{
    ClientError, KeyRules, ListPage, ObjectClient, ObjectInfo, ObjectMeta, PutResult, Result,
    UploadInfo,
};

/// How long a server-side copy the service finishes in the background is waited for
/// (within an account it is done at once; across accounts it may take a while).
const COPY_WAIT: Duration = Duration::from_secs(600);

impl AzureClient {
    /// A request without a body whose answer is all that matters.
    async fn call(
        &self,
        method: Method,
        key: &str,
        query: &str,
        headers: &[(&str, String)],
        what: &str,
    ) -> Result<reqwest::Response> {
        let url = self.url(key, query);
        self.send(Call::new(method, &url, what).headers(headers))
            .await
    }

    /// A PUT of `body`: a blob, a block, a block list.
    async fn put_body(
        &self,
        key: &str,
        query: &str,
        headers: &[(&str, String)],
        body: Bytes,
        what: &str,
    ) -> Result<reqwest::Response> {
        let url = self.url(key, query);
        let call = Call::new(Method::PUT, &url, what).headers(headers);
        self.send(call.body(body)).await
    }

    /// One page of List Blobs below `prefix`, its entries in key order.
    async fn list_blobs(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        marker: Option<&str>,
        max: Option<i32>,
    ) -> Result<xml::BlobPage> {
        // An empty `prefix=` is left out: reqsign signs it as no value, Azurite as empty.
        // Each blob's metadata comes with it: attributes and symlinks without a HEAD each.
        let mut q = String::from("restype=container&comp=list&include=metadata");
        if !prefix.is_empty() {
            q.push_str(&format!("&prefix={}", query_value(prefix)));
        }
        if let Some(d) = delimiter {
            q.push_str(&format!("&delimiter={}", query_value(d)));
        }
        if let Some(m) = marker {
            q.push_str(&format!("&marker={}", query_value(m)));
        }
        if let Some(n) = max {
            q.push_str(&format!("&maxresults={}", n.clamp(1, 5000)));
        }
        let what = format!("list of {}/{prefix}", self.container);
        let r = self.call(Method::GET, "", &q, &[], &what).await?;
        let body = text(r, &what).await?;
        if !body.contains("<EnumerationResults") {
            return Err(ClientError::Other(format!(
                "{what}: the endpoint does not answer like Azure Blob storage"
            )));
        }
        let mut page = xml::blob_page(&body)?;
        page.blobs.sort_by(|a, b| a.key.cmp(&b.key));
        page.prefixes.sort();
        Ok(page)
    }

    /// Whether a key below `prefix` sorts after `start_after` (a flat listing from the
    /// prefix: Azure cannot start one elsewhere).
    async fn key_after(&self, prefix: &str, start_after: &str) -> Result<bool> {
        let mut marker = None;
        loop {
            let page = self
                .list_blobs(prefix, None, marker.as_deref(), None)
                .await?;
            if page.blobs.iter().any(|b| b.key.as_str() > start_after) {
                return Ok(true);
            }
            match page.next_marker {
                Some(m) => marker = Some(m),
                None => return Ok(false),
            }
        }
    }

    /// Stages `block` of upload `id` of `key`.
    async fn put_block(&self, key: &str, id: &str, block: Block, body: Bytes) -> Result<String> {
        let block_id = uploads::block_id(id, block);
        let q = format!("comp=block&blockid={}", query_value(&block_id));
        let what = format!("block of upload {id} of {key}");
        self.put_body(key, &q, &[], body, &what).await?;
        Ok(block_id)
    }

    /// Waits for a copy the service finishes in the background; the copy's ETag.
    async fn copy_done(&self, to: &str) -> Result<String> {
        let deadline = tokio::time::Instant::now() + COPY_WAIT;
        let mut pause = Duration::from_millis(50);
        loop {
            let r = self.call(Method::HEAD, to, "", &[], to).await?;
            match header(r.headers(), "x-ms-copy-status") {
                "success" => return Ok(quoted(header(r.headers(), "etag"))),
                "pending" if tokio::time::Instant::now() < deadline => {}
                status => return Err(ClientError::Other(format!("copy to {to}: status {status}"))),
            }
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(Duration::from_secs(2));
        }
    }
}

fn put_result(r: &reqwest::Response) -> PutResult {
    PutResult {
        etag: quoted(header(r.headers(), "etag")),
    }
}

/// Whole seconds, as the S3 backend gives them: a HEAD and a listing agree.
fn modified(r: &reqwest::Response) -> SystemTime {
    httpdate::parse_http_date(header(r.headers(), "last-modified"))
        .unwrap_or(SystemTime::UNIX_EPOCH)
}

fn not_open(key: &str, id: &str) -> ClientError {
    ClientError::NotFound(format!("upload {id} of {key}"))
}

/// `x-ms-meta-*` headers as the request builder takes them.
fn with_meta<'a>(
    base: &[(&'a str, String)],
    meta: &'a [(String, String)],
) -> Vec<(&'a str, String)> {
    let mut h = base.to_vec();
    h.extend(meta.iter().map(|(k, v)| (k.as_str(), v.clone())));
    h
}

#[async_trait]
impl ObjectClient for AzureClient {
    fn key_rules(&self) -> KeyRules {
        KeyRules::AZURE
    }

    async fn check_bucket(&self, prefix: &str) -> Result<()> {
        self.list_blobs(prefix, None, None, Some(1))
            .await
            .map(|_| ())
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let r = self.call(Method::HEAD, key, "", &[], key).await?;
        let size = header(r.headers(), "content-length").parse().unwrap_or(0);
        Ok(ObjectMeta {
            info: ObjectInfo {
                key: key.to_string(),
                size,
                etag: quoted(header(r.headers(), "etag")),
                last_modified: modified(&r),
            },
            metadata: meta_of(r.headers()),
            checksum: None,
        })
    }

    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let Some(end) = get.end() else {
            return Ok(());
        };
        let Version { key, etag } = get.src;
        let mut h = vec![("x-ms-range", format!("bytes={}-{}", get.start, end - 1))];
        if let Some(e) = etag {
            h.push(("if-match", e.to_string()));
        }
        let r = self.call(Method::GET, key, "", &h, key).await?;
        crate::body::deliver(crate::rest::Answer { r, key }, get, sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        let (prefix, delimiter) = (list.prefix, list.delimiter);
        let (token, max_keys) = (list.token, list.max_keys);
        let page = self
            .list_blobs(prefix, delimiter, token.as_deref(), max_keys)
            .await?;
        Ok(ListPage {
            objects: page.blobs,
            prefixes: page.prefixes,
            next_token: page.next_marker,
            metadata: page.metadata,
        })
    }

    /// List Blobs has no start-after: the listing runs from the prefix and what sorts
    /// at or before `start_after` is left out (a cost that grows with the entries before
    /// it; S3 and GCS start there).
    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        let start_after = list.start_after;
        let mut page = self.list_page(list.level()).await?;
        page.objects.retain(|o| o.key.as_str() > start_after);
        let mut kept = Vec::with_capacity(page.prefixes.len());
        for p in std::mem::take(&mut page.prefixes) {
            // A prefix holding `start_after` is listed when a key in it comes after.
            let after = p.as_str() > start_after
                || (start_after.starts_with(&p) && self.key_after(&p, start_after).await?);
            if after {
                kept.push(p);
            }
        }
        page.prefixes = kept;
        Ok(page)
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        let meta = meta_headers(metadata);
        let h = with_meta(&[("x-ms-blob-type", "BlockBlob".to_string())], &meta);
        let r = self.put_body(key, "", &h, body.into_bytes(), key).await?;
        Ok(put_result(&r))
    }

    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        let id = self.uploads.begin(key, metadata);
        // One byte: a block is never empty. It is never committed.
        let staged = self.put_block(key, &id, Block::Opened, Bytes::from_static(b"o"));
        if let Err(e) = staged.await {
            self.uploads.end(key, &id);
            return Err(e);
        }
        Ok(id)
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        let Upload { key, id } = part.upload;
        if !self.uploads.is_open(key, id) {
            return Err(not_open(key, id));
        }
        let body = body.into_bytes();
        self.put_block(key, id, Block::Part(part.number), body)
            .await
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let (key, upload_id, parts) = (done.upload.key, done.upload.id, done.parts);
        let Some((metadata, ())) = self.uploads.get(key, upload_id) else {
            return Err(not_open(key, upload_id));
        };
        let mut ids = Vec::with_capacity(parts.len());
        for p in parts {
            let want = uploads::block_id(upload_id, Block::Part(p.part_number));
            if p.etag != want {
                return Err(ClientError::Other(format!(
                    "InvalidPart: part {} of upload {upload_id} of {key} was not staged as {}",
                    p.part_number, p.etag
                )));
            }
            ids.push(want);
        }
        let meta = meta_headers(&metadata);
        let h = with_meta(&[], &meta);
        let body = Bytes::from(xml::block_list(&ids));
        let what = format!("block list of upload {upload_id} of {key}");
        let r = self
            .put_body(key, "comp=blocklist", &h, body, &what)
            .await?;
        self.uploads.end(key, upload_id);
        Ok(put_result(&r))
    }

    /// Put Block From URL would copy on the service's side, but it reads its source as an
    /// anonymous client unless given a SAS or an Entra token: the part is read and sent
    /// again instead (its bytes down and up), conditional on `etag` as S3's copy is.
    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        let Upload { key, id } = part.upload;
        if !self.uploads.is_open(key, id) {
            return Err(not_open(key, id));
        }
        let bytes = self.get_range(range).await?;
        self.put_block(key, id, Block::Part(part.number), bytes)
            .await
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        let Upload { key, id: upload_id } = upload;
        if !crate::rest::valid_upload_id(upload_id) {
            return Err(not_open(key, upload_id));
        }
        self.uploads.end(key, upload_id);
        let marked = self.put_block(key, upload_id, Block::Aborted, Bytes::from_static(b"x"));
        marked.await.map(|_| ())
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        let q = "comp=blocklist&blocklisttype=uncommitted";
        let what = format!("block list of {key}");
        let r = match self.call(Method::GET, key, q, &[], &what).await {
            Err(ClientError::NotFound(_)) => return Ok(Vec::new()),
            r => r?,
        };
        let blocks = xml::uncommitted_blocks(&text(r, &what).await?)?;
        Ok(uploads::open_uploads(&blocks))
    }

    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        let Version { key: from, etag } = src;
        let mut cond = vec![("x-ms-copy-source", self.url(from, ""))];
        if let Some(e) = etag {
            cond.push(("x-ms-source-if-match", e.to_string()));
        }
        let meta = meta.map(meta_headers).unwrap_or_default();
        let h = with_meta(&cond, &meta);
        let what = format!("copy of {from} to {to}");
        let r = match self.put_body(to, "", &h, Bytes::new(), &what).await {
            // The service names the source's absence as such, or as a source it cannot
            // verify (CannotVerifyCopySource, 404).
            Err(ClientError::NotFound(_)) => return Err(ClientError::NotFound(from.to_string())),
            r => r?,
        };
        match header(r.headers(), "x-ms-copy-status") {
            "pending" => Ok(PutResult {
                etag: self.copy_done(to).await?,
            }),
            _ => Ok(put_result(&r)),
        }
    }

    /// Set Blob Metadata: the body stays, the ETag changes (S3's copy onto itself keeps
    /// it); `size` is not needed, no object is too big for it.
    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        let Version { key, etag } = rw.object;
        let meta = meta_headers(rw.metadata);
        let cond: Vec<(&str, String)> = etag
            .map(|e| ("if-match", e.to_string()))
            .into_iter()
            .collect();
        let h = with_meta(&cond, &meta);
        let r = self
            .put_body(key, "comp=metadata", &h, Bytes::new(), key)
            .await?;
        Ok(put_result(&r))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        match self.call(Method::DELETE, key, "", &[], key).await {
            Ok(_) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
