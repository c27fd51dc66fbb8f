//! What the write-back's methods tell their callers to do next (a journal record, an
//! upload, a dropped copy) and what they show of a staged file: the answers that let the
//! caller do the disk and network work after the table's lock is released.

use std::sync::Arc;
use std::time::SystemTime;

use super::{Early, StagedFile, UploadError};

/// What a write asks of its caller next.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Written {
    /// The file needs its journal record (its first change since it was durable).
    pub journal: bool,
    /// A whole part is left behind a front-to-back writer: claim the early parts.
    pub early_due: bool,
}

/// The early multipart upload of a new file written front to back.
/// While held, no upload of one staged file starts or is in flight
/// (`WriteBack::hold_name`).
pub struct NameHold {
    pub(super) _guard: tokio::sync::OwnedMutexGuard<()>,
}

/// How a new staged file starts.
pub enum NewFile {
    /// Created by `create`: one writer, nothing in the bucket, may go up early.
    Created,
    /// Closed as it is made, uploaded at once: a symlink (its target is the content) or a
    /// special file (empty).
    Closed,
}

/// What stat shows of a staged file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StagedStat {
    pub size: u64,
    /// The time of its last write, truncation or utimens.
    pub mtime: SystemTime,
    /// The time of its last write, truncation or utimens here (the epoch before any).
    pub ctime: SystemTime,
}

/// What a release asks its caller to do.
#[derive(Debug, PartialEq, Eq)]
pub enum Released {
    Nothing,
    /// Spawn the upload task (the phase is `Queued`).
    Upload,
    /// The staged file was given up (retired): the node follows the bucket again.
    Dropped,
    /// The staged file left the table unchanged since its upload (or its download): the
    /// node follows the bucket again, and the caller may hand the data, which is the
    /// object's version the node names, to the cache before it discards the file.
    Clean,
}

/// What `wait_durable` sees.
pub enum Durability {
    Done,
    Pending,
    Failed(UploadError),
    /// Idle with changes the bucket lacks (an upload that raced with a change ended
    /// while a writer was open): the waiter asks for an upload again.
    Stalled,
}

/// An object the bucket holds that has, byte for byte, what a staged file holds: its
/// upload is a copy of it on the server (a passthrough writer's `copy_file_range`, whose
/// bytes were also copied into the staged file for the kernel; fs/copy.rs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopySource {
    /// The object's key.
    pub key: String,
    /// Its version, which the copy asks for (a source changed since is not copied).
    pub etag: String,
}

/// One upload to run, taken by `begin_upload`.
pub struct UploadJob {
    pub file: Arc<StagedFile>,
    pub gen: u64,
    pub size: u64,
    pub early: Option<Arc<Early>>,
    /// Goes up as a single-part multipart upload, whose `-1` ETag tells a listing that
    /// it may be a symlink: a symlink outside a marked directory (set by the caller).
    pub one_part: bool,
    /// The bucket already holds these bytes as this object: the upload copies it there,
    /// and sends the bytes only if the store refuses the copy.
    pub copy_of: Option<CopySource>,
}

/// What the end of an upload asks its caller to do.
#[derive(Debug, Default)]
pub struct Finished {
    /// The bucket now holds the file as it is: the node takes the new ETag and size.
    pub durable: bool,
    /// The staged file left the table (no handle uses it): the cache may adopt its data.
    pub released: Option<Arc<StagedFile>>,
    /// The object just written belongs to a name given up meanwhile: delete it.
    pub stray: bool,
    /// Upload again (the file changed, or was renamed, while this upload ran).
    pub again: bool,
    pub error: Option<UploadError>,
    /// A background retry is due for this failure: the token `retry_due` takes.
    pub retry: Option<u64>,
}

/// What giving up a staged file (`WriteBack::retire`) leaves in the bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retired {
    /// The bucket may hold an object of it (an upload of it ended, or it was renamed over
    /// one): the caller deletes the key.
    pub remote: bool,
    /// An upload of it was in flight: what it already sent may still land, and its task
    /// deletes it then; until that task ends, the key is not this name's.
    pub in_flight: bool,
}
