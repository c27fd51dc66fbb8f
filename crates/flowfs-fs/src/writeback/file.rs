//! One staged file's state in the write-back table (`FileWb`: size, generations, open
//! writers and readers, upload phase (`Phase`, the state machine of its way to the bucket),
//! journal key, early upload, passthrough writers) and the table itself, under the write-back's one lock (mod.rs). Plain data: every change is
//! a method of `WriteBack` (mod.rs, lifecycle.rs, passthrough.rs).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::SystemTime;

use super::{CopySource, Early, StagedFile, UploadError};

/// Where a staged file stands on its way to the bucket.
#[derive(Debug, Clone)]
pub enum Phase {
    /// No upload queued or in flight. Durable when `durable_gen == gen`, else dirty.
    Idle,
    /// An upload task is spawned and has not started.
    Queued,
    /// An upload of generation `gen` is in flight; `rerun`: asked for again meanwhile.
    Uploading { gen: u64, rerun: bool },
    /// The last upload failed with `error`; kept until an upload is asked for again.
    /// `retry`: the token of the background retry scheduled for a failure that may go
    /// away (the store was down or throttling), `None` for one that will not by itself.
    /// `gen`: the generation that failed; a close after later changes reports nothing of
    /// it (a rewrite of a file whose upload was refused for good got EIO, issue 47).
    Failed {
        error: UploadError,
        retry: Option<u64>,
        gen: u64,
    },
    /// Its name was removed or replaced: never uploaded again.
    Retired,
    /// Empty, and being replaced by a copy on the server (fs/copy.rs): it has no journal
    /// record meanwhile, so that a crash leaves the copy or nothing, never the empty file
    /// over it. Idle again if the copy is not taken.
    Copying,
}

#[derive(Debug)]
pub(super) enum EarlyState {
    /// Not for this file (not written front to back, renamed, or already uploading).
    Off,
    /// Bytes `[0, sent)` are claimed by `upload` (created with its first part).
    On {
        sent: u64,
        upload: Option<Arc<Early>>,
    },
}

#[derive(Debug)]
pub(super) struct FileWb {
    pub(super) file: Arc<StagedFile>,
    pub(super) size: u64,
    /// The time of the last change of content or size (what stat shows while staged).
    pub(super) mtime: SystemTime,
    /// The time of the last change of content, size or mtime here (ctime; the node's
    /// own may be later: a chmod). The epoch until the first.
    pub(super) ctime: SystemTime,
    /// Bumped by every change of content or size.
    pub(super) gen: u64,
    /// The generation the bucket holds (0: none).
    pub(super) durable_gen: u64,
    pub(super) writers: u32,
    pub(super) readers: u32,
    pub(super) phase: Phase,
    /// The key the journal record names, if there is one.
    pub(super) journaled: Option<String>,
    /// The bucket holds an object at this file's key that is not one of its uploads
    /// (it was renamed over it): an unlink must delete that key too.
    pub(super) shadows: bool,
    pub(super) early: EarlyState,
    pub(super) passthrough: KernelWrites,
    /// The content of generation `.1` is the object `.0` (`WriteBack::filled_by_copy`).
    pub(super) copy_of: Option<(CopySource, u64)>,
}

/// What the staging file showed (`fstat`) when flowfs last looked: the changes of a
/// passthrough writer are seen only there.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct DiskStat {
    pub(super) len: u64,
    pub(super) mtime: SystemTime,
    pub(super) ctime: (i64, i64),
}

/// Whether the kernel writes this file itself (FUSE passthrough, passthrough.rs).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum KernelWrites {
    None,
    /// `writers` passthrough writers are open; `seen`: the file when last looked at
    /// (every change up to that look has moved the generation on).
    Writing {
        writers: u32,
        seen: DiskStat,
    },
}

impl FileWb {
    pub(super) fn new(
        file: Arc<StagedFile>,
        size: u64,
        durable: bool,
        mtime: SystemTime,
    ) -> FileWb {
        FileWb {
            file,
            size,
            mtime,
            ctime: SystemTime::UNIX_EPOCH,
            gen: 1,
            durable_gen: u64::from(durable),
            writers: 0,
            readers: 0,
            phase: Phase::Idle,
            journaled: None,
            shadows: false,
            early: EarlyState::Off,
            passthrough: KernelWrites::None,
            copy_of: None,
        }
    }

    pub(super) fn dirty(&self) -> bool {
        self.gen != self.durable_gen
    }

    pub(super) fn uploading(&self) -> bool {
        matches!(self.phase, Phase::Uploading { .. })
    }

    /// A change below `off`: bytes an early upload has sent are stale, so it is dropped
    /// (and aborted as it drops).
    pub(super) fn changed_below(&mut self, off: u64) {
        if let EarlyState::On { sent, .. } = self.early {
            if off < sent {
                self.early = EarlyState::Off;
            }
        }
    }

    /// Whether a whole part is left behind the early upload's last part (with the one
    /// after it, which may still change).
    pub(super) fn early_due(&self, part_size: u64) -> bool {
        match &self.early {
            EarlyState::On { sent, .. } => self.size >= sent + 2 * part_size,
            EarlyState::Off => false,
        }
    }
}

#[derive(Default)]
pub(super) struct Table {
    pub(super) files: HashMap<u64, FileWb>,
    /// Keys a recovery could not upload: key -> error, for `flowfs unmount`.
    pub(super) failed: BTreeMap<String, String>,
    /// The last token handed to a background retry.
    pub(super) retries: u64,
    /// The files with passthrough writers open (an index of `FileWb::passthrough`, so that
    /// stat needs not walk every staged file to find them).
    pub(super) passthrough: BTreeSet<u64>,
}
