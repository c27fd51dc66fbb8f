//! Object storage access for flowfs: one trait over S3-compatible stores, an S3 backend
//! and an in-memory backend with request counters and fault injection for unit tests.
//!
//! Keys are plain strings: nothing here rewrites `dir/`, `a//b` or unicode.

#![warn(missing_docs)]

pub mod azure;
mod body;
mod buf;
pub mod checksum;
pub mod copy;
mod error;
pub mod gcs;
mod limiter;
pub mod meta;
pub mod metrics;
pub mod mock;
mod percent;
mod rest;
pub mod retry;
mod rules;
pub mod s3;
pub mod xattr;

use std::collections::HashMap;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;

pub use buf::{AlignedBuf, ALIGN};
pub use checksum::{Checksum, Crc, Payload, Summing};
pub use error::{ClientError, Result};
pub use rules::{KeyRule, KeyRules};

/// The error of a body that ended before the range it was asked for.
pub fn short_body(key: &str, got: u64, want: u64) -> ClientError {
    ClientError::Transient(format!(
        "{key}: short read from the server ({got} of {want} bytes)"
    ))
}

/// Hands `data`, the bytes from `start` on, to `sink` in the pieces that end at `cuts`. A
/// piece `data` does not hold whole ends it with a short-body error.
pub fn split_pieces(
    key: &str,
    start: u64,
    cuts: &[u64],
    data: &Bytes,
    sink: &mut (dyn FnMut(usize, Bytes) + Send),
) -> Result<()> {
    let want = cuts.last().map_or(0, |&end| end - start);
    let mut from = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let to = (cut - start) as usize;
        if to > data.len() {
            return Err(short_body(key, data.len() as u64, want));
        }
        sink(i, data.slice(from..to));
        from = to;
    }
    Ok(())
}

/// The end of a `get_range_pieces` request, `None` when it asks for no byte: an empty
/// range needs no request.
pub(crate) fn pieces_end(start: u64, cuts: &[u64]) -> Option<u64> {
    cuts.last().copied().filter(|&end| end > start)
}

/// What a listing or a HEAD tells about one object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectInfo {
    /// The full key, prefix included.
    pub key: String,
    /// Object size in bytes.
    pub size: u64,
    /// The ETag as the server sends it (quoted); a multipart upload's ends in `-N`.
    pub etag: String,
    /// When the object was last written.
    pub last_modified: SystemTime,
}

/// HEAD adds the user metadata (`x-amz-meta-*`) to what a listing gives.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// What a listing would say about the object.
    pub info: ObjectInfo,
    /// User metadata, keys without the `x-amz-meta-` prefix.
    pub metadata: HashMap<String, String>,
    /// The full-object checksum the store keeps, where it keeps one (checksum.rs).
    pub checksum: Option<Checksum>,
}

/// One page of ListObjectsV2 with a delimiter.
#[derive(Debug, Clone, Default)]
pub struct ListPage {
    /// Objects directly below the prefix (or all of them without a delimiter).
    pub objects: Vec<ObjectInfo>,
    /// Full common prefixes, each ending in the delimiter.
    pub prefixes: Vec<String>,
    /// Token for the next page; `None` on the last one.
    pub next_token: Option<String>,
    /// The user metadata of listed objects, by key, where the store's listing carries it
    /// (Azure's List Blobs with `include=metadata`): a file system above needs no HEAD
    /// for their attributes. Empty where it does not (S3).
    pub metadata: HashMap<String, HashMap<String, String>>,
}

/// Result of a completed upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PutResult {
    /// ETag of the new object.
    pub etag: String,
}

/// A multipart upload open on a key, as ListMultipartUploads tells.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadInfo {
    /// The id AbortMultipartUpload wants.
    pub upload_id: String,
    /// When the server began it, by its clock.
    pub initiated: SystemTime,
}

/// One uploaded part of a multipart upload, as CompleteMultipartUpload wants it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CompletedPart {
    /// Part number, from 1.
    pub part_number: i32,
    /// ETag the store gave the part.
    pub etag: String,
}

/// An object's user metadata: names (without the store's prefix) to values.
pub type Metadata = HashMap<String, String>;

/// One version of an object as a copy reads it: its key and, when given, the ETag it must
/// still have.
#[derive(Debug, Clone, Copy)]
pub struct Version<'a> {
    /// The object's key.
    pub key: &'a str,
    /// The ETag it must still have (`None`: whatever it holds).
    pub etag: Option<&'a str>,
}

impl<'a> Version<'a> {
    /// Whatever version `key` holds.
    pub fn any(key: &'a str) -> Version<'a> {
        Version { key, etag: None }
    }
}

/// The operations flowfs needs from an object store; every backend (S3, the mock, the retry
/// layer) implements them with the same semantics, checked by the conformance suite.
#[async_trait]
pub trait ObjectClient: Send + Sync + 'static {
    /// Cheap request that proves the bucket exists and the credentials work.
    async fn check_bucket(&self, prefix: &str) -> Result<()>;
    /// Size, ETag, time and user metadata of `key`; `NotFound` if absent.
    async fn head(&self, key: &str) -> Result<ObjectMeta>;
    /// Bytes `[start, end)` of `key`. With `etag`, fails with `Precondition` if the object
    /// changed since, so a reader never mixes two versions. The range as one piece of
    /// `get_range_pieces`: every backend sends the same request for both.
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
    /// One GET of `[start, cuts.last())` handed over in pieces as the body arrives: piece
    /// `i` ends at `cuts[i]` and goes to `sink(i, bytes)` once complete, so that a reader
    /// waiting on the front of a long range does not wait for its end. Pieces delivered
    /// before an error are whole and right; the error covers the rest. An empty range
    /// (`pieces_end` is `None`) sends no request.
    async fn get_range_pieces(
        &self,
        key: &str,
        start: u64,
        cuts: &[u64],
        etag: Option<&str>,
        sink: &mut (dyn FnMut(usize, Bytes) + Send),
    ) -> Result<()>;
    /// The whole object `key` (`cuts.last()` bytes), as `get_range_pieces` from 0 gives
    /// it; a store that keeps a full-object checksum is asked for it and the body is
    /// checked against it before any piece is handed over: a mismatch is `Corrupt`,
    /// never data (issue 49). Stores without one read the range.
    async fn get_whole_pieces(
        &self,
        key: &str,
        cuts: &[u64],
        etag: Option<&str>,
        sink: &mut (dyn FnMut(usize, Bytes) + Send),
    ) -> Result<()> {
        self.get_range_pieces(key, 0, cuts, etag, sink).await
    }
    /// One page of the keys below `prefix`, grouped at `delimiter` into common prefixes.
    async fn list_page(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<String>,
        max_keys: Option<i32>,
    ) -> Result<ListPage>;
    /// One page of the entries directly below `prefix` (delimiter `/`) whose keys sort
    /// after `start_after`: the LastModified of many keys close together in one request.
    async fn list_after(
        &self,
        prefix: &str,
        start_after: &str,
        token: Option<String>,
    ) -> Result<ListPage>;
    /// Writes `body` as `key` in one request; returns the new ETag.
    async fn put(
        &self,
        key: &str,
        body: Payload,
        metadata: &HashMap<String, String>,
    ) -> Result<PutResult>;
    /// Starts a multipart upload of `key` and returns its upload id.
    async fn create_multipart(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<String>;
    /// Sends part `part_number` (from 1) of an open upload and returns its ETag.
    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Payload,
    ) -> Result<String>;
    /// Makes the object of an upload visible from `parts` (sorted by number).
    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
    ) -> Result<PutResult>;
    /// Sends part `part_number` of an open upload of `key` as a server-side copy of bytes
    /// `[start, end)` of `src` (UploadPartCopy; `key` itself for a metadata rewrite),
    /// conditional on `src.etag` (`Precondition` when that object changed); returns the
    /// part's ETag.
    async fn upload_part_copy(
        &self,
        src: Version<'_>,
        key: &str,
        upload_id: &str,
        part_number: i32,
        range: (u64, u64),
    ) -> Result<String>;
    /// Drops an open upload and its parts (they are billed until then).
    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()>;
    /// The multipart uploads open on exactly `key`: how an upload whose id never reached
    /// its creator (it died while CreateMultipartUpload was answered) is found again.
    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>>;
    /// Server-side copy of `src` to `to` (a rename is a copy and a delete). With an ETag,
    /// only of that version: `Precondition` (or `NotFound`, where the store names an old
    /// version so) when `src` is another one now, and nothing is written. With `meta`,
    /// the copy has it instead of the source's metadata.
    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult>;
    /// Replaces the user metadata of `key` and keeps its body: a CopyObject onto itself
    /// with `MetadataDirective: REPLACE`, so no byte is sent again (chmod, chown, utimens
    /// of an object). With `etag`, fails with `Precondition` when the object is no longer
    /// that version, so a newer upload is never overwritten by an old body. S3 copies at
    /// most 5 GiB in one request: an object of more than that (`size`, its length) is
    /// copied in parts (copy.rs), its ETag then a multipart one. Returns the ETag the
    /// object has afterwards.
    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
        etag: Option<&str>,
        size: u64,
    ) -> Result<PutResult>;
    /// Removes `key`; removing an absent key succeeds, as on S3.
    async fn delete(&self, key: &str) -> Result<()>;
    /// The keys this store changes or refuses (rules.rs): a file system above refuses
    /// such names before any byte is accepted under them. Known once the store has
    /// answered (`check_bucket`) where it depends on the server.
    fn key_rules(&self) -> KeyRules;
    /// Whether this store refuses every write of `key` (a file system above answers
    /// EROFS before it accepts any byte): none does, except a read-only view within a
    /// writable bucket (flowfs-archive's `ArchiveViews`).
    fn refuses_writes(&self, _key: &str) -> bool {
        false
    }
    /// Whether a HEAD of a key below `prefix` costs no request: a file system above
    /// then reads every listed entry's attributes (`--meta-heads always` there). None
    /// does, except an archive's index (flowfs-archive).
    fn heads_are_free(&self, _prefix: &str) -> bool {
        false
    }
    /// The checksum this store's uploads carry (S3 CRC-64/NVME, GCS CRC-32C; none on
    /// Azure): a caller that reads the bytes of a `put` or a part computes it on the way
    /// (`Payload`), where it costs least.
    fn upload_checksum(&self) -> Option<Crc> {
        None
    }
}
