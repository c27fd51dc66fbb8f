//! How a FUSE request is answered: its span (the operation and what it is about), its
//! error mapped to the one errno of `FsError::errno` and logged at debug level inside that
//! span, and the core's attributes and hints in fuser's types.

use std::ffi::OsStr;
use std::fmt;

use fuser::{
    Errno, FileAttr, FileType, FopenFlags, INodeNo, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyWrite, ReplyXattr,
};
use tracing::Span;

use super::ops::Op;
use crate::error::{FsError, Result};
use crate::fs::{Attr, OpenHints};
use crate::inode::Kind;

/// What a request is about, recorded in its span (and so in the log line of its failure).
#[derive(Clone, Copy)]
pub(super) enum About<'a> {
    Ino(u64),
    Handle(u64, u64),
    Entry(u64, &'a OsStr),
    Rename(u64, &'a OsStr, u64, &'a OsStr),
}

impl fmt::Display for About<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            About::Ino(ino) => write!(f, "ino {ino}"),
            About::Handle(ino, fh) => write!(f, "ino {ino} fh {fh}"),
            About::Entry(parent, name) => write!(f, "parent {parent} name {name:?}"),
            About::Rename(p, n, np, nn) => {
                write!(f, "parent {p} name {n:?} newparent {np} newname {nn:?}")
            }
        }
    }
}

/// The span of one request. Cheap when debug logging is off: the callsite is disabled
/// once and `about` is never formatted.
pub(super) fn span(op: Op, about: About) -> Span {
    tracing::debug_span!("fuse", op = %op.name(), about = %about)
}

/// A fuser reply that can carry an errno (each reply type has its own `error`).
pub(super) trait Replies: Sized {
    fn send_error(self, e: Errno);
}

macro_rules! replies {
    ($($t:ty),*) => {
        $(impl Replies for $t {
            fn send_error(self, e: Errno) {
                self.error(e)
            }
        })*
    };
}

replies!(
    ReplyAttr,
    ReplyCreate,
    ReplyData,
    ReplyDirectory,
    ReplyDirectoryPlus,
    ReplyEmpty,
    ReplyEntry,
    ReplyOpen,
    ReplyWrite,
    ReplyXattr
);

/// Answers `reply` with the outcome of its operation: a value goes to `ok`; an error is
/// logged (debug, in the request's span) and answered with its one errno.
pub(super) fn answer<R: Replies, T>(reply: R, r: Result<T>, ok: impl FnOnce(R, T)) {
    match r {
        Ok(v) => ok(reply, v),
        Err(e) => {
            let errno = e.errno();
            if let FsError::KeyRefused { .. } = e {
                // Not the program's mistake but the store's limit: said where users look.
                tracing::warn!(errno, error = %e, "refused a name");
            } else {
                tracing::debug!(errno, error = %e, "failed");
            }
            reply.send_error(Errno::from_i32(errno));
        }
    }
}

/// A name as the core takes it: file names are UTF-8 in the bucket's keys.
pub(super) fn utf8(name: &OsStr) -> Result<String> {
    name.to_str()
        .map(str::to_string)
        .ok_or(FsError::Invalid("a name that is not UTF-8"))
}

pub(super) fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
        Kind::Symlink => FileType::Symlink,
        Kind::Special(bits) => match bits {
            libc::S_IFIFO => FileType::NamedPipe,
            libc::S_IFSOCK => FileType::Socket,
            libc::S_IFCHR => FileType::CharDevice,
            _ => FileType::BlockDevice,
        },
    }
}

pub(super) fn to_fuse(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.atime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.mtime,
        kind: file_type(a.kind),
        perm: a.perm,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev,
        blksize: 1 << 20,
        flags: 0,
    }
}

pub(super) fn open_flags(hints: &OpenHints) -> FopenFlags {
    let mut f = FopenFlags::empty();
    if hints.keep_cache {
        f |= FopenFlags::FOPEN_KEEP_CACHE;
    }
    // One round trip less per close of a file read from the bucket (kernels before 5.16
    // ignore the flag and send it anyway).
    if hints.no_flush {
        f |= FopenFlags::FOPEN_NOFLUSH;
    }
    f
}

/// The answer of an operation that returns nothing but success.
pub(super) fn done(r: ReplyEmpty, (): ()) {
    r.ok()
}
