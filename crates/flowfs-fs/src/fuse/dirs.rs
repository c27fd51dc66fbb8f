//! Directories in fuser's types: how the core's `DirItem`s fill a readdir or readdirplus
//! answer, a rename's flags, and how a setattr's "now" becomes a time.

use std::ffi::OsStr;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    Generation, INodeNo, RenameFlags, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, TimeOrNow,
};

use super::reply::{done, file_type, to_fuse, utf8, About};
use super::{FuseAdapter, Op};
use crate::error::FsError;
use crate::fs::{DirItem, Fs};

impl FuseAdapter {
    /// rename of `from` (parent, name) to `to`: `RENAME_NOREPLACE` is kept; exchange and
    /// whiteout are refused (EINVAL).
    pub(super) fn rename_entry(
        &self,
        (parent, name): (INodeNo, &OsStr),
        (newparent, newname): (INodeNo, &OsStr),
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        let about = About::Rename(parent.0, name, newparent.0, newname);
        let span = self.req(Op::Rename, about);
        let (name, newname) = (utf8(name), utf8(newname));
        let exchange =
            flags.intersects(RenameFlags::RENAME_EXCHANGE | RenameFlags::RENAME_WHITEOUT);
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        let op = |fs: Arc<Fs>| async move {
            let (name, newname) = (name?, newname?);
            if exchange {
                return Err(FsError::Invalid("RENAME_EXCHANGE and RENAME_WHITEOUT"));
            }
            fs.rename(parent.0, &name, newparent.0, &newname, noreplace)
                .await
        };
        self.run(span, reply, op, done);
    }
}

/// Fills a readdir answer until the kernel's buffer is full.
pub(super) fn fill(mut r: ReplyDirectory, items: Vec<DirItem>) {
    for it in items {
        if r.add(INodeNo(it.ino), it.next, file_type(it.kind), &it.name) {
            break;
        }
    }
    r.ok()
}

/// Fills a readdirplus answer until the kernel's buffer is full. The core counted a lookup
/// for every item it listed; the kernel takes one only for the entries it received, so the
/// rest are forgotten again.
pub(super) fn fill_plus(mut r: ReplyDirectoryPlus, items: Vec<DirItem>, ttl: Duration, fs: &Fs) {
    let mut full = false;
    for it in items {
        let counted = it.name != "." && it.name != "..";
        if !full {
            if let Some(a) = &it.attr {
                let attr = to_fuse(a);
                let (ino, g) = (INodeNo(it.ino), Generation(0));
                full = r.add(ino, it.next, &it.name, &ttl, &attr, g);
            }
        }
        if full && counted {
            fs.forget(it.ino, 1);
        }
    }
    r.ok()
}

/// A setattr's time: the one given, or the moment of the request.
pub(super) fn time(t: Option<TimeOrNow>) -> Option<SystemTime> {
    t.map(|t| match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    })
}
