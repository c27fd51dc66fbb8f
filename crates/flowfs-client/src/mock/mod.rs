//! An in-memory bucket for unit tests of the file system core: request counters, injected
//! failures of the nth call of an operation, and a fixed latency per request.

use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::copy::{copy_in_parts, CopyLimits};
use crate::{
    AlignedBuf, ClientError, CompletedPart, ListPage, ObjectClient, ObjectInfo, ObjectMeta,
    PutResult, Result, UploadInfo,
};

mod objects;

use objects::lower;

/// A kind of request, for counters and injected failures.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// HeadObject.
    Head,
    /// GetObject (ranged or whole).
    Get,
    /// ListObjectsV2 (a page).
    List,
    /// PutObject.
    Put,
    /// CreateMultipartUpload.
    CreateMultipart,
    /// UploadPart.
    UploadPart,
    /// CompleteMultipartUpload.
    CompleteMultipart,
    /// AbortMultipartUpload.
    AbortMultipart,
    /// ListMultipartUploads.
    ListUploads,
    /// CopyObject (also of an object onto itself: a metadata rewrite).
    Copy,
    /// UploadPartCopy.
    UploadPartCopy,
    /// DeleteObject.
    Delete,
}

#[derive(Clone)]
struct Obj {
    data: Bytes,
    etag: String,
    modified: SystemTime,
    metadata: HashMap<String, String>,
}

struct Upload {
    key: String,
    initiated: SystemTime,
    metadata: HashMap<String, String>,
    /// part number -> (ETag, body)
    parts: BTreeMap<i32, (String, Bytes)>,
}

/// An in-memory bucket that counts requests and fails, cuts or delays them on demand.
#[derive(Default)]
pub struct MockClient {
    objects: Mutex<BTreeMap<String, Obj>>,
    uploads: Mutex<HashMap<String, Upload>>,
    counts: Mutex<HashMap<Op, u64>>,
    /// (op, remaining calls before the failure, error to return, how many times)
    faults: Mutex<Vec<(Op, u64, ClientError, u64)>>,
    latency: Mutex<Duration>,
    /// Extra latency of one kind of request (see `set_latency_of`).
    op_latency: Mutex<HashMap<Op, Duration>>,
    get_bytes: AtomicU64,
    /// (bytes after which a body breaks, how many bodies): a connection lost mid-body.
    cut: Mutex<Option<(u64, u64)>>,
    next_id: AtomicU64,
    /// Keys in the order their objects became visible.
    visible: Mutex<Vec<String>>,
    /// Continuation tokens handed out: token -> (prefix, last entry of its page). Opaque
    /// as on S3, so that no caller can get away with making one from a key.
    tokens: Mutex<HashMap<String, (String, String)>>,
    /// S3's 5 GiB limit of one copy, lowered by tests (`with_copy_limits`).
    copy_limits: CopyLimits,
}

impl MockClient {
    /// An empty bucket with no faults and no latency.
    pub fn new() -> MockClient {
        MockClient::default()
    }

    /// Puts an object as another S3 client would (no request is counted).
    pub fn insert(&self, key: &str, data: impl Into<Bytes>) {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.objects.lock().insert(
            key.to_string(),
            Obj {
                data: data.into(),
                etag: format!("\"mock{n}\""),
                modified: SystemTime::now(),
                metadata: HashMap::new(),
            },
        );
    }

    /// Puts an object with user metadata as another S3 client (s3fs, rclone) would; no
    /// request is counted.
    pub fn insert_with_metadata(
        &self,
        key: &str,
        data: impl Into<Bytes>,
        metadata: &[(&str, &str)],
    ) {
        self.insert(key, data);
        if let Some(o) = self.objects.lock().get_mut(key) {
            o.metadata = metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        }
    }

    /// Deletes an object as another client would (no request is counted).
    pub fn remove(&self, key: &str) {
        self.objects.lock().remove(key);
    }

    /// The content of `key`, if present.
    pub fn object(&self, key: &str) -> Option<Bytes> {
        self.objects.lock().get(key).map(|o| o.data.clone())
    }

    /// The user metadata of `key`, if present.
    pub fn metadata(&self, key: &str) -> Option<HashMap<String, String>> {
        self.objects.lock().get(key).map(|o| o.metadata.clone())
    }

    /// Every key in the bucket, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.objects.lock().keys().cloned().collect()
    }

    /// Requests of kind `op` received since the start or the last `reset_counts`.
    pub fn count(&self, op: Op) -> u64 {
        self.counts.lock().get(&op).copied().unwrap_or(0)
    }

    /// Body bytes returned by GETs so far.
    pub fn get_bytes(&self) -> u64 {
        self.get_bytes.load(Ordering::Relaxed)
    }

    /// Sets the request and byte counters back to zero.
    pub fn reset_counts(&self) {
        self.counts.lock().clear();
        self.get_bytes.store(0, Ordering::Relaxed);
    }

    /// Keys in the order their objects became visible (puts, completed uploads, copies).
    pub fn visible_order(&self) -> Vec<String> {
        self.visible.lock().clone()
    }

    /// Multipart uploads created and neither completed nor aborted.
    pub fn open_uploads(&self) -> usize {
        self.uploads.lock().len()
    }

    /// The call after `skip` more calls of `op` fails with `err`, `times` times in a row.
    pub fn fail(&self, op: Op, skip: u64, err: ClientError, times: u64) {
        self.faults.lock().push((op, skip, err, times));
    }

    /// Drops every failure not yet injected.
    pub fn clear_faults(&self) {
        self.faults.lock().clear();
    }

    /// The next `times` GET bodies break after `after` bytes, as a connection lost in
    /// the middle of a download; the pieces complete before that are delivered.
    pub fn cut_bodies(&self, after: u64, times: u64) {
        *self.cut.lock() = Some((after, times));
    }

    /// Every later request waits `d` before it is served.
    pub fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    /// Every later request of kind `op` waits `d` before it is served (on top of
    /// `set_latency`): holds a state open, such as a multipart upload whose parts hang.
    pub fn set_latency_of(&self, op: Op, d: Duration) {
        self.op_latency.lock().insert(op, d);
    }

    async fn enter(&self, op: Op) -> Result<()> {
        *self.counts.lock().entry(op).or_insert(0) += 1;
        let extra = self.op_latency.lock().get(&op).copied().unwrap_or_default();
        let latency = *self.latency.lock() + extra;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut faults = self.faults.lock();
        for f in faults.iter_mut().filter(|f| f.0 == op) {
            if f.1 > 0 {
                f.1 -= 1;
            } else if f.3 > 0 {
                f.3 -= 1;
                return Err(f.2.clone());
            }
        }
        faults.retain(|f| f.1 > 0 || f.3 > 0);
        Ok(())
    }
}

fn info(key: &str, o: &Obj) -> ObjectInfo {
    ObjectInfo {
        key: key.to_string(),
        size: o.data.len() as u64,
        etag: o.etag.clone(),
        last_modified: o.modified,
    }
}

/// The error the S3 backend makes of an HTTP error answer (see `s3::classify`).
fn http_error(what: &str, status: u16, code: &str, msg: &str) -> ClientError {
    ClientError::Other(format!("{what}: HTTP {status} {code}: {msg}"))
}

/// What the mock does on the server side of a request: the checks and answers of S3.
impl MockClient {
    /// One ranged GET of `[start, end)`, `end > start`: as much of it as the object has,
    /// `InvalidRange` (416) when it starts at or after the end, as on S3.
    async fn fetch(&self, key: &str, start: u64, end: u64, etag: Option<&str>) -> Result<Bytes> {
        self.enter(Op::Get).await?;
        let objects = self.objects.lock();
        let o = objects
            .get(key)
            .ok_or_else(|| ClientError::NotFound(key.to_string()))?;
        if etag.is_some_and(|e| e != o.etag) {
            return Err(ClientError::Precondition(key.to_string()));
        }
        let len = o.data.len() as u64;
        if start >= len {
            let msg = "The requested range is not satisfiable";
            return Err(http_error(key, 416, "InvalidRange", msg));
        }
        let (s, e) = (start as usize, end.min(len) as usize);
        self.get_bytes.fetch_add((e - s) as u64, Ordering::Relaxed);
        // Aligned like the S3 backend's, so that tests take the same cache write path.
        Ok(AlignedBuf::from_slice(&o.data[s..e]).into_bytes())
    }

    /// ListObjectsV2: keys after `start_after` are rolled up into common prefixes, then
    /// paged; `token` continues after the last entry of the page that handed it out.
    async fn list(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<String>,
        max_keys: Option<i32>,
        start_after: &str,
    ) -> Result<ListPage> {
        self.enter(Op::List).await?;
        let what = format!("list {prefix}");
        let after = match token {
            None => None,
            Some(t) => match self.tokens.lock().get(&t) {
                Some((p, last)) if p == prefix => Some(last.clone()),
                _ => {
                    let msg = "The continuation token provided is incorrect";
                    return Err(http_error(&what, 400, "InvalidArgument", msg));
                }
            },
        };
        let max = max_keys.unwrap_or(1000).max(1) as usize;
        let mut page = ListPage::default();
        let mut last: Option<String> = None;
        for (name, obj) in self.entries(prefix, delimiter, start_after) {
            if after.as_ref().is_some_and(|a| name.as_str() <= a.as_str()) {
                continue;
            }
            if page.objects.len() + page.prefixes.len() == max {
                let t = format!(
                    "mock-token-{}",
                    self.next_id.fetch_add(1, Ordering::Relaxed)
                );
                let last = last.unwrap_or_default();
                self.tokens
                    .lock()
                    .insert(t.clone(), (prefix.to_string(), last));
                page.next_token = Some(t);
                break;
            }
            match obj {
                Some(o) => page.objects.push(o),
                None => page.prefixes.push(name.clone()),
            }
            last = Some(name);
        }
        Ok(page)
    }

    /// Every entry below `prefix` after `start_after`, in key order, prefixes collapsed.
    fn entries(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        start_after: &str,
    ) -> Vec<(String, Option<ObjectInfo>)> {
        let objects = self.objects.lock();
        let mut entries: Vec<(String, Option<ObjectInfo>)> = Vec::new();
        for (key, o) in objects.range(prefix.to_string()..) {
            if !key.starts_with(prefix) {
                break;
            }
            if key.as_str() <= start_after {
                continue;
            }
            let rest = &key[prefix.len()..];
            match delimiter.and_then(|d| rest.find(d).map(|i| (i, d))) {
                Some((i, d)) => {
                    let p = format!("{prefix}{}{d}", &rest[..i]);
                    if entries.last().map(|e| &e.0) != Some(&p) {
                        entries.push((p, None));
                    }
                }
                None => entries.push((key.clone(), Some(info(key, o)))),
            }
        }
        entries
    }
}

#[async_trait]
impl ObjectClient for MockClient {
    async fn check_bucket(&self, _prefix: &str) -> Result<()> {
        self.enter(Op::List).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.enter(Op::Head).await?;
        let objects = self.objects.lock();
        let o = objects
            .get(key)
            .ok_or_else(|| ClientError::NotFound(key.to_string()))?;
        Ok(ObjectMeta {
            info: info(key, o),
            metadata: o.metadata.clone(),
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
        self.get_range_pieces(key, start, &[end], etag, &mut |_, b| out = b)
            .await?;
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
        // An empty range needs no request, as in the S3 backend.
        let Some(&end) = cuts.last().filter(|&&end| end > start) else {
            return Ok(());
        };
        let data = self.fetch(key, start, end, etag).await?;
        let cut = {
            let mut c = self.cut.lock();
            match *c {
                Some((after, times)) if times > 0 => {
                    *c = (times > 1).then_some((after, times - 1));
                    Some(after)
                }
                _ => None,
            }
        };
        // A cut body is a short one: the pieces before the cut arrive, then the error.
        let data = match cut {
            Some(after) => data.slice(..(after as usize).min(data.len())),
            None => data,
        };
        crate::split_pieces(key, start, cuts, &data, sink)
    }

    async fn list_page(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<String>,
        max_keys: Option<i32>,
    ) -> Result<ListPage> {
        self.list(prefix, delimiter, token, max_keys, "").await
    }

    async fn list_after(
        &self,
        prefix: &str,
        start_after: &str,
        token: Option<String>,
    ) -> Result<ListPage> {
        self.list(prefix, Some("/"), token, None, start_after).await
    }

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        metadata: &HashMap<String, String>,
    ) -> Result<PutResult> {
        self.enter(Op::Put).await?;
        Ok(PutResult {
            etag: self.store(key, body, lower(metadata)),
        })
    }

    async fn create_multipart(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<String> {
        self.enter(Op::CreateMultipart).await?;
        let id = format!("upload-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.uploads.lock().insert(
            id.clone(),
            Upload {
                key: key.to_string(),
                initiated: SystemTime::now(),
                metadata: lower(metadata),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String> {
        self.enter(Op::UploadPart).await?;
        self.add_part(key, upload_id, part_number, "part", body)
    }

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
    ) -> Result<PutResult> {
        self.enter(Op::CompleteMultipart).await?;
        let mut uploads = self.uploads.lock();
        let u = uploads
            .get(upload_id)
            .filter(|u| u.key == key)
            .ok_or_else(|| ClientError::NotFound(format!("upload {upload_id}")))?;
        // Each part must be there with the ETag its upload returned; a failed completion
        // leaves the upload open, as on S3.
        let mut data = Vec::new();
        for p in &parts {
            match u.parts.get(&p.part_number) {
                Some((etag, body)) if *etag == p.etag => data.extend_from_slice(body),
                _ => {
                    let msg = format!("part {} not found or its ETag differs", p.part_number);
                    return Err(http_error(key, 400, "InvalidPart", &msg));
                }
            }
        }
        let metadata = u.metadata.clone();
        uploads.remove(upload_id);
        drop(uploads);
        Ok(PutResult {
            etag: self.store_parts(key, Bytes::from(data), metadata, Some(parts.len())),
        })
    }

    async fn abort_multipart(&self, _key: &str, upload_id: &str) -> Result<()> {
        self.enter(Op::AbortMultipart).await?;
        self.uploads.lock().remove(upload_id);
        Ok(())
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        self.enter(Op::ListUploads).await?;
        let mut out: Vec<UploadInfo> = (self.uploads.lock().iter())
            .filter(|(_, u)| u.key == key)
            .map(|(id, u)| UploadInfo {
                upload_id: id.clone(),
                initiated: u.initiated,
            })
            .collect();
        out.sort_by(|a, b| a.upload_id.cmp(&b.upload_id));
        Ok(out)
    }

    async fn copy(&self, from: &str, to: &str) -> Result<PutResult> {
        self.enter(Op::Copy).await?;
        let o = self
            .objects
            .lock()
            .get(from)
            .cloned()
            .ok_or_else(|| ClientError::NotFound(from.to_string()))?;
        Ok(PutResult {
            etag: self.store(to, o.data, o.metadata),
        })
    }

    /// A copy onto itself: the body and the ETag stay, as on SeaweedFS 4.48 (pinned by
    /// the conformance suite); the mock leaves the time as it was. Above its copy limit
    /// in parts, as S3 wants; one copy of an object above it is refused, as by S3.
    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
        etag: Option<&str>,
        size: u64,
    ) -> Result<PutResult> {
        if size > self.copy_limits.max_copy {
            return copy_in_parts(self, key, metadata, etag, size, self.copy_limits).await;
        }
        self.enter(Op::Copy).await?;
        self.rewrite(key, metadata, etag)
    }

    async fn upload_part_copy(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        range: (u64, u64),
        etag: Option<&str>,
    ) -> Result<String> {
        self.enter(Op::UploadPartCopy).await?;
        self.part_copy(key, upload_id, part_number, range, etag)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.enter(Op::Delete).await?;
        self.objects.lock().remove(key);
        Ok(())
    }
}
