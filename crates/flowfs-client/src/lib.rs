//! Object storage access for flowfs: one trait (`ObjectClient`) over the S3, GCS and Azure
//! Blob backends, and an in-memory one with request counters and fault injection for unit
//! tests. Keys are plain strings: nothing here rewrites `dir/`, `a//b` or unicode.

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
pub mod tls;
pub mod xattr;
mod xml;

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

/// Hands `data`, the bytes of `get.src` from `get.start` on, to `sink` in the pieces of
/// `get`. A piece `data` does not hold whole ends it with a short-body error.
pub fn split_pieces(get: Pieces<'_>, data: &Bytes, sink: Sink<'_>) -> Result<()> {
    let Pieces { src, start, cuts } = get;
    let want = cuts.last().map_or(0, |&end| end - start);
    let mut from = 0;
    for (i, &cut) in cuts.iter().enumerate() {
        let to = (cut - start) as usize;
        if to > data.len() {
            return Err(short_body(src.key, data.len() as u64, want));
        }
        sink(i, data.slice(from..to));
        from = to;
    }
    Ok(())
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

/// One version of an object as a read or a copy names it: its key and, when given, the
/// ETag it must still have (`Precondition` when the object is another version now).
#[derive(Debug, Clone, Copy)]
pub struct Version<'a> {
    /// The object's key.
    pub key: &'a str,
    /// The ETag it must still have (`None`: whatever it holds).
    pub etag: Option<&'a str>,
}

impl<'a> Version<'a> {
    /// The version of `key` whose ETag is `etag` (`None`: whatever it holds).
    pub fn new(key: &'a str, etag: Option<&'a str>) -> Version<'a> {
        Version { key, etag }
    }

    /// Whatever version `key` holds.
    pub fn any(key: &'a str) -> Version<'a> {
        Version { key, etag: None }
    }

    /// Its bytes `[start, end)`.
    pub fn range(self, start: u64, end: u64) -> ByteRange<'a> {
        ByteRange {
            src: self,
            start,
            end,
        }
    }

    /// Its bytes from `start` on, in the pieces that end at `cuts`.
    pub fn pieces(self, start: u64, cuts: &'a [u64]) -> Pieces<'a> {
        Pieces {
            src: self,
            start,
            cuts,
        }
    }

    /// The rewrite of its user metadata to `metadata`; `size` is its length.
    pub fn rewrite(self, metadata: &'a Metadata, size: u64) -> Rewrite<'a> {
        Rewrite {
            object: self,
            metadata,
            size,
        }
    }
}

/// Bytes `[start, end)` of a version: what `get_range` reads, `upload_part_copy` copies.
#[derive(Debug, Clone, Copy)]
pub struct ByteRange<'a> {
    /// The object, and the ETag it must still have.
    pub src: Version<'a>,
    /// The first byte.
    pub start: u64,
    /// The byte after the last.
    pub end: u64,
}

/// One GET of `[start, cuts.last())` of a version, handed over in pieces: piece `i` ends at
/// `cuts[i]` (`get_range_pieces`).
#[derive(Debug, Clone, Copy)]
pub struct Pieces<'a> {
    /// The object, and the ETag it must still have.
    pub src: Version<'a>,
    /// Where the first piece begins.
    pub start: u64,
    /// Where each piece ends, ascending.
    pub cuts: &'a [u64],
}

impl Pieces<'_> {
    /// The end of the GET, `None` when it asks for no byte: an empty range needs no
    /// request.
    pub fn end(&self) -> Option<u64> {
        self.cuts.last().copied().filter(|&end| end > self.start)
    }
}

/// Where the pieces of a GET go as they arrive: `sink(i, bytes)` for piece `i`.
pub type Sink<'a> = &'a mut (dyn FnMut(usize, Bytes) + Send);

/// One page of a listing (ListObjectsV2): the keys below `prefix`, grouped at `delimiter`
/// into common prefixes.
#[derive(Debug, Clone, Default)]
pub struct List<'a> {
    /// What every key listed begins with.
    pub prefix: &'a str,
    /// Where keys are rolled up into common prefixes (`None`: every key below `prefix`).
    pub delimiter: Option<&'a str>,
    /// The `next_token` of the page before (`None`: the first page).
    pub token: Option<String>,
    /// The most entries on the page (`None`: the store's page size).
    pub max_keys: Option<i32>,
}

impl<'a> List<'a> {
    /// The first page of the entries directly below `prefix` (delimiter `/`).
    pub fn dir(prefix: &'a str) -> List<'a> {
        List {
            prefix,
            delimiter: Some("/"),
            ..List::default()
        }
    }

    /// The first page of every key below `prefix` (no delimiter).
    pub fn flat(prefix: &'a str) -> List<'a> {
        List {
            prefix,
            ..List::default()
        }
    }

    /// The page after the one that gave `token` (`None`: the first).
    pub fn token(self, token: Option<String>) -> List<'a> {
        List { token, ..self }
    }

    /// At most `n` entries on the page.
    pub fn max_keys(self, n: i32) -> List<'a> {
        List {
            max_keys: Some(n),
            ..self
        }
    }
}

/// One page of the entries directly below `prefix` (delimiter `/`) whose keys sort after
/// `start_after` (`list_after`).
#[derive(Debug, Clone)]
pub struct ListAfter<'a> {
    /// What every key listed begins with.
    pub prefix: &'a str,
    /// Only what sorts after this is listed.
    pub start_after: &'a str,
    /// The `next_token` of the page before (`None`: the first page).
    pub token: Option<String>,
}

impl<'a> ListAfter<'a> {
    /// The first page of the entries directly below `prefix` that sort after `start_after`.
    pub fn new(prefix: &'a str, start_after: &'a str) -> ListAfter<'a> {
        ListAfter {
            prefix,
            start_after,
            token: None,
        }
    }

    /// The page after the one that gave `token` (`None`: the first).
    pub fn token(self, token: Option<String>) -> ListAfter<'a> {
        ListAfter { token, ..self }
    }

    /// The same level's page without the start: what a store that cannot start a listing
    /// elsewhere lists and filters, and what S3's StartAfter is sent with.
    pub fn level(&self) -> List<'a> {
        List {
            token: self.token.clone(),
            ..List::dir(self.prefix)
        }
    }
}

/// An open multipart upload: the key it writes and the id `create_multipart` gave it.
#[derive(Debug, Clone, Copy)]
pub struct Upload<'a> {
    /// The key the upload writes.
    pub key: &'a str,
    /// The upload's id.
    pub id: &'a str,
}

impl<'a> Upload<'a> {
    /// The upload `id` of `key`.
    pub fn new(key: &'a str, id: &'a str) -> Upload<'a> {
        Upload { key, id }
    }

    /// Its part `number` (from 1).
    pub fn part(self, number: i32) -> Part<'a> {
        Part {
            upload: self,
            number,
        }
    }

    /// Its completion from `parts`, sorted by number.
    pub fn completion(self, parts: &'a [CompletedPart]) -> Completion<'a> {
        Completion {
            upload: self,
            parts,
        }
    }
}

/// One part of an open multipart upload.
#[derive(Debug, Clone, Copy)]
pub struct Part<'a> {
    /// The upload.
    pub upload: Upload<'a>,
    /// The part's number, from 1.
    pub number: i32,
}

/// The completion of an upload from its parts, sorted by number (`complete_multipart`).
#[derive(Debug, Clone, Copy)]
pub struct Completion<'a> {
    /// The upload.
    pub upload: Upload<'a>,
    /// Its parts, each with the ETag the store gave it.
    pub parts: &'a [CompletedPart],
}

/// A rewrite of an object's user metadata that keeps its body (`replace_metadata`).
#[derive(Debug, Clone, Copy)]
pub struct Rewrite<'a> {
    /// The object, and the ETag it must still have.
    pub object: Version<'a>,
    /// The new user metadata, in place of all the old.
    pub metadata: &'a Metadata,
    /// The object's length (an object above one copy's limit is copied in parts).
    pub size: u64,
}

/// The operations flowfs needs from an object store; every backend (S3, the mock, the retry
/// layer) implements them with the same semantics, checked by the conformance suite. An
/// operation of several arguments takes them as one request (`Pieces`, `List`, `Part`...).
#[async_trait]
pub trait ObjectClient: Send + Sync + 'static {
    /// Cheap request that proves the bucket exists and the credentials work.
    async fn check_bucket(&self, prefix: &str) -> Result<()>;
    /// Size, ETag, time and user metadata of `key`; `NotFound` if absent.
    async fn head(&self, key: &str) -> Result<ObjectMeta>;
    /// Bytes `[start, end)` of `range.src`. With an ETag, fails with `Precondition` if
    /// the object changed since, so a reader never mixes two versions. The range as one
    /// piece of `get_range_pieces`: every backend sends the same request for both.
    async fn get_range(&self, range: ByteRange<'_>) -> Result<Bytes> {
        let mut out = Bytes::new();
        let cuts = [range.end];
        let get = range.src.pieces(range.start, &cuts);
        self.get_range_pieces(get, &mut |_, b| out = b).await?;
        Ok(out)
    }
    /// One GET of `[get.start, get.cuts.last())` handed over in pieces as the body arrives:
    /// piece `i` ends at `cuts[i]` and goes to `sink(i, bytes)` once complete, so that a
    /// reader waiting on the front of a long range does not wait for its end. With an
    /// ETag, `Precondition` as `get_range`. Pieces delivered before an error are whole and
    /// right; the error covers the rest. An empty range (`Pieces::end` is `None`) sends no
    /// request.
    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()>;
    /// The whole object `src` (`cuts.last()` bytes), as `get_range_pieces` from 0 gives
    /// it; a store that keeps a full-object checksum is asked for it and the body is
    /// checked against it before any piece is handed over: a mismatch is `Corrupt`,
    /// never data (issue 49). Stores without one read the range.
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        self.get_range_pieces(src.pieces(0, cuts), sink).await
    }
    /// One page of the keys below `list.prefix`, grouped at `list.delimiter` into common
    /// prefixes.
    async fn list_page(&self, list: List<'_>) -> Result<ListPage>;
    /// One page of the entries directly below `list.prefix` (delimiter `/`) whose keys
    /// sort after `list.start_after`: the LastModified of many keys close together in
    /// one request.
    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage>;
    /// Writes `body` as `key` in one request; returns the new ETag.
    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult>;
    /// Starts a multipart upload of `key` and returns its upload id.
    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String>;
    /// Sends `part` of an open upload and returns its ETag.
    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String>;
    /// Makes the object of an upload visible from its parts.
    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult>;
    /// Sends `part` of an open upload as a server-side copy of `range` (UploadPartCopy;
    /// of the upload's key itself for a metadata rewrite), conditional on its ETag
    /// (`Precondition` when that object changed); returns the part's ETag.
    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String>;
    /// Drops an open upload and its parts (they are billed until then).
    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()>;
    /// The multipart uploads open on exactly `key`: how an upload whose id never reached
    /// its creator (it died while CreateMultipartUpload was answered) is found again.
    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>>;
    /// Server-side copy of `src` to `to` (a rename is a copy and a delete). With an ETag,
    /// only of that version: `Precondition` (or `NotFound`, where the store names an old
    /// version so) when `src` is another one now, and nothing is written. With `meta`,
    /// the copy has it instead of the source's metadata.
    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult>;
    /// Replaces the user metadata of `rw.object` with `rw.metadata` and keeps its body: a
    /// CopyObject onto itself with `MetadataDirective: REPLACE`, so no byte is sent again
    /// (chmod, chown, utimens of an object). With an ETag, fails with `Precondition` when
    /// the object is no longer that version, so a newer upload is never overwritten by an
    /// old body. S3 copies at most 5 GiB in one request: an object of more than that
    /// (`rw.size`, its length) is copied in parts (copy.rs), its ETag then a multipart
    /// one. Returns the ETag the object has afterwards.
    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult>;
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
