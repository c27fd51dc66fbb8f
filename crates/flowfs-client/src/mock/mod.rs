//! An in-memory bucket for unit tests of the file system core: request counters, injected
//! failures of the nth call of an operation, and a fixed latency per request.
//!
//! This file holds the bucket's state and the requests as S3 answers them; what a test
//! sets and reads besides requests is in harness.rs, the listing in listing.rs, and the
//! writes to the object table in objects.rs.

use crate::{ByteRange, Completion, List, ListAfter, Metadata, Part, Payload, Pieces, Rewrite};
use crate::{Sink, Upload, Version};
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use async_trait::async_trait;
use bytes::Bytes;
use parking_lot::Mutex;

use crate::copy::{copy_any_size, rewrite_in_parts, CopyLimits};
use crate::{
    AlignedBuf, ClientError, KeyRules, ListPage, ObjectClient, ObjectInfo, ObjectMeta, PutResult,
    Result, UploadInfo,
};

mod harness;
mod listing;
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

struct OpenUpload {
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
    uploads: Mutex<HashMap<String, OpenUpload>>,
    counts: Mutex<HashMap<Op, u64>>,
    /// (op, remaining calls before the failure, error to return, how many times)
    faults: Mutex<Vec<(Op, u64, ClientError, u64)>>,
    latency: Mutex<Duration>,
    /// Extra latency of one kind of request (see `set_latency_of`).
    op_latency: Mutex<HashMap<Op, Duration>>,
    get_bytes: AtomicU64,
    /// (bytes after which a body breaks, how many bodies): a connection lost mid-body.
    cut: Mutex<Option<(u64, u64)>>,
    /// GET bodies still to damage (one byte flipped on the way, `flip_bodies`).
    flips: AtomicU64,
    /// Uploads (PUTs, parts) that came without a checksum computed by their sender.
    unsummed: AtomicU64,
    next_id: AtomicU64,
    /// Keys in the order their objects became visible.
    visible: Mutex<Vec<String>>,
    /// Continuation tokens handed out: token -> (prefix, last entry of its page). Opaque
    /// as on S3, so that no caller can get away with making one from a key.
    tokens: Mutex<HashMap<String, (String, String)>>,
    /// S3's 5 GiB limit of one copy, lowered by tests (`with_copy_limits`).
    copy_limits: CopyLimits,
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
impl MockClient {
    /// The bytes of an upload whose checksum, when it carries one, matches them; refused
    /// as S3 refuses a wrong `x-amz-checksum-*` (`BadDigest`) otherwise.
    fn checked(&self, key: &str, body: Payload) -> Result<Bytes> {
        let Some(given) = body.given_checksum() else {
            self.unsummed.fetch_add(1, Ordering::Relaxed);
            return Ok(body.into_bytes());
        };
        let crc = crate::Crc::named(given.name).expect("flowfs sends checksums it computes");
        if *given != crc.of(body.bytes()) {
            return Err(ClientError::Corrupt(format!(
                "{key}: the body's {} is not the one sent with it",
                given.name
            )));
        }
        Ok(body.into_bytes())
    }
}

fn http_error(what: &str, status: u16, code: &str, msg: &str) -> ClientError {
    ClientError::Other(format!("{what}: HTTP {status} {code}: {msg}"))
}

/// The object of `v.key` as a request conditional on `v.etag` (if given) finds it:
/// `NotFound` when there is none, `Precondition` when it is another version, as on S3. One
/// lookup for the requests that read an object and the one that rewrites it in place.
fn version<'a>(objects: &'a mut BTreeMap<String, Obj>, v: Version<'_>) -> Result<&'a mut Obj> {
    let Version { key, etag } = v;
    let o = objects
        .get_mut(key)
        .ok_or_else(|| ClientError::NotFound(key.to_string()))?;
    if etag.is_some_and(|e| e != o.etag) {
        return Err(ClientError::Precondition(key.to_string()));
    }
    Ok(o)
}

/// What the mock does on the server side of a request: the checks and answers of S3.
impl MockClient {
    /// One ranged GET of `range`, `end > start`: as much of it as the object has,
    /// `InvalidRange` (416) when it starts at or after the end, as on S3.
    async fn fetch(&self, range: ByteRange<'_>) -> Result<Bytes> {
        let ByteRange { src, start, end } = range;
        let key = src.key;
        self.enter(Op::Get).await?;
        let mut objects = self.objects.lock();
        let o = version(&mut objects, src)?;
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
}

#[async_trait]
impl ObjectClient for MockClient {
    /// The mock is AWS S3: it keeps every key as sent.
    fn key_rules(&self) -> KeyRules {
        KeyRules::S3
    }

    /// S3's: uploads carry CRC-64/NVME, checked against their bytes (`checked`).
    fn upload_checksum(&self) -> Option<crate::Crc> {
        Some(crate::Crc::Crc64Nvme)
    }

    async fn check_bucket(&self, _prefix: &str) -> Result<()> {
        self.enter(Op::List).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        self.enter(Op::Head).await?;
        let mut objects = self.objects.lock();
        let o = version(&mut objects, Version::any(key))?;
        Ok(ObjectMeta {
            info: info(key, o),
            metadata: o.metadata.clone(),
            checksum: Some(crate::Crc::Crc64Nvme.of(&o.data)),
        })
    }

    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        // An empty range needs no request, as in the S3 backend.
        let Some(end) = get.end() else {
            return Ok(());
        };
        // A cut body is a short one: the pieces before the cut arrive, then the error.
        let data = self.cut(self.flip(self.fetch(get.src.range(get.start, end)).await?));
        crate::split_pieces(get, &data, sink)
    }

    /// The body is checked against the object's CRC-64/NVME, as S3's is.
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        let Some(end) = src.pieces(0, cuts).end() else {
            return Ok(());
        };
        let data = self.fetch(src.range(0, end)).await?;
        let want = crate::Crc::Crc64Nvme.of(&data);
        let got = self.cut(self.flip(data));
        let frames = crate::body::Whole(Some(got));
        crate::body::deliver_checked(frames, src.key, cuts, Some(want), sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        self.list(list, "").await
    }

    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        self.list(list.level(), list.start_after).await
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        self.enter(Op::Put).await?;
        let body = self.checked(key, body)?;
        Ok(PutResult {
            etag: self.store(key, body, lower(metadata)),
        })
    }

    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        self.enter(Op::CreateMultipart).await?;
        let id = format!("upload-{}", self.next_id.fetch_add(1, Ordering::Relaxed));
        self.uploads.lock().insert(
            id.clone(),
            OpenUpload {
                key: key.to_string(),
                initiated: SystemTime::now(),
                metadata: lower(metadata),
                parts: BTreeMap::new(),
            },
        );
        Ok(id)
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        self.enter(Op::UploadPart).await?;
        let body = self.checked(part.upload.key, body)?;
        self.add_part(part, "part", body)
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let (key, upload_id, parts) = (done.upload.key, done.upload.id, done.parts);
        self.enter(Op::CompleteMultipart).await?;
        let mut uploads = self.uploads.lock();
        let u = uploads
            .get(upload_id)
            .filter(|u| u.key == key)
            .ok_or_else(|| ClientError::NotFound(format!("upload {upload_id}")))?;
        // Each part must be there with the ETag its upload returned; a failed completion
        // leaves the upload open, as on S3.
        let mut data = Vec::new();
        for p in parts {
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

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        self.enter(Op::AbortMultipart).await?;
        self.uploads.lock().remove(upload.id);
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

    /// One copy of an object above the copy limit is refused, as by S3; then in parts.
    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        let single = self.copy_single(src, to, meta);
        copy_any_size(self, src, to, meta, self.copy_limits, single).await
    }

    /// A copy onto itself: the body and the ETag stay, as on SeaweedFS 4.48 (pinned by
    /// the conformance suite); the mock leaves the time as it was. Above its copy limit
    /// in parts, as S3 wants; one copy of an object above it is refused, as by S3.
    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        if rw.size > self.copy_limits.max_copy {
            return rewrite_in_parts(self, rw, self.copy_limits).await;
        }
        self.enter(Op::Copy).await?;
        self.rewrite(rw.object, rw.metadata)
    }

    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        self.enter(Op::UploadPartCopy).await?;
        self.part_copy(part, range)
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.enter(Op::Delete).await?;
        self.objects.lock().remove(key);
        Ok(())
    }
}
