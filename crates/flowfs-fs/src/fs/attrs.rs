//! POSIX attributes: what getattr reports (`Attr`), what an upload writes into the
//! object's metadata (meta.rs), setattr (a truncation included; the change itself and its
//! way to the bucket: changes.rs) and mknod of a special file, whose type and device live
//! in the attributes.

use std::sync::Arc;
use std::time::SystemTime;

use crate::config::FsConfig;
use crate::error::{FsError, Result};
use crate::inode::{Entry, Kind};
use crate::meta::{Posix, S_IFMT, S_IFREG};
use crate::writeback::NewFile;

use super::WritePath;
use super::{valid_name, Access, Fs};

/// A symlink's type bits, as s3fs writes them for its own symlinks (whose content is
/// the target too, so s3fs shows flowfs's symlinks as symlinks).
const S_IFLNK: u32 = 0o120_000;

/// The attributes of one node, as getattr and lookup report them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// File, directory or symlink.
    pub kind: Kind,
    /// Bytes (the target's length for a symlink).
    pub size: u64,
    /// Last modification of the content (or what utimens set).
    pub mtime: SystemTime,
    /// Last access as utimens set it (the mount is `noatime`), else mtime.
    pub atime: SystemTime,
    /// Last change of content or attributes, else mtime.
    pub ctime: SystemTime,
    /// Permission bits.
    pub perm: u16,
    /// Owner (the mounting user).
    pub uid: u32,
    /// Group (the mounting user's).
    pub gid: u32,
    /// 0 for a file whose name was removed while it is open (fstat after unlink).
    pub nlink: u32,
    /// The device of a device node.
    pub rdev: u32,
}

/// One directory entry of a readdir answer.
#[derive(Debug, Clone)]
pub struct DirItem {
    /// Offset of the item after this one, as readdir wants it.
    pub next: u64,
    /// Entry name.
    pub name: String,
    /// Its inode number.
    pub ino: u64,
    /// Its kind, for the d_type of readdir.
    pub kind: Kind,
    /// Set by `readdir(plus = true)`, which counts a lookup for every such item.
    pub attr: Option<Attr>,
}

/// What one setattr changes beside the size.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct AttrChanges {
    /// New permission bits (the file type bits are ignored).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New access time (kept in metadata).
    pub atime: Option<SystemTime>,
    /// New modification time.
    pub mtime: Option<SystemTime>,
    /// Drop setuid, and setgid where the group may execute (a file's, not a directory's),
    /// as the kernel asks of a file system that handles it (`FUSE_HANDLE_KILLPRIV_V2`):
    /// on chown, and on a truncation or a write by a caller without `CAP_FSETID`.
    pub kill_suidgid: bool,
}

impl AttrChanges {
    pub(super) fn any(&self) -> bool {
        *self != AttrChanges::default()
    }
}

/// What a node shows where its object's metadata says nothing: the mount's modes and
/// owner (`--file-mode`, `--dir-mode`, `--uid`, `--gid`).
#[derive(Clone)]
pub(super) struct Defaults {
    file_mode: u16,
    dir_mode: u16,
    uid: u32,
    gid: u32,
}

impl Defaults {
    pub(super) fn new(cfg: &FsConfig) -> Defaults {
        Defaults {
            file_mode: cfg.file_mode,
            dir_mode: cfg.dir_mode,
            uid: cfg.uid,
            gid: cfg.gid,
        }
    }

    /// The attributes entry `e` of node `ino` shows.
    pub(super) fn attr(&self, ino: u64, e: &Entry) -> Attr {
        let (perm, size) = match e.kind {
            Kind::Dir => (self.dir_mode, 0),
            Kind::File | Kind::Special(_) => (self.file_mode, e.size),
            Kind::Symlink => (0o777, e.target.as_ref().map_or(e.size, |t| t.len() as u64)),
        };
        // What the object's metadata (or this mount) says, else the mount's defaults.
        let p = e.posix().unwrap_or_default();
        let mtime = e.shown_mtime();
        Attr {
            ino,
            kind: e.kind,
            size,
            mtime,
            atime: p.atime.unwrap_or(mtime),
            ctime: p.ctime.unwrap_or(mtime),
            perm: p.perm().filter(|_| e.kind != Kind::Symlink).unwrap_or(perm),
            uid: p.uid.unwrap_or(self.uid),
            gid: p.gid.unwrap_or(self.gid),
            nlink: if e.kind == Kind::Dir { 2 } else { 1 },
            rdev: p.rdev.unwrap_or(0),
        }
    }

    /// Every attribute an object written now carries: what the node holds (its metadata
    /// or this mount's changes), the mount's defaults for the rest, and its type bits.
    pub(super) fn full_posix(&self, e: &Entry) -> Posix {
        let mut p = e.posix().unwrap_or_default();
        let (kind, default) = match e.kind {
            Kind::Symlink => (S_IFLNK, 0o777),
            Kind::Dir => (libc::S_IFDIR, u32::from(self.dir_mode)),
            Kind::File => (S_IFREG, u32::from(self.file_mode)),
            Kind::Special(bits) => (bits, u32::from(self.file_mode)),
        };
        let perm = p.perm().map_or(default, u32::from);
        let kind = p
            .mode
            .map(|m| m & S_IFMT)
            .filter(|k| *k != 0)
            .unwrap_or(kind);
        p.mode = Some(kind | perm);
        p.uid = Some(p.uid.unwrap_or(self.uid));
        p.gid = Some(p.gid.unwrap_or(self.gid));
        p
    }

    /// The attributes of a new node made by the user `owner` (uid, gid) with `mode`.
    pub(super) fn new_posix(&self, mode: u32, owner: Option<(u32, u32)>) -> Posix {
        let (uid, gid) = owner.unwrap_or((self.uid, self.gid));
        Posix {
            mode: Some(mode),
            uid: Some(uid),
            gid: Some(gid),
            ctime: Some(SystemTime::now()),
            ..Posix::default()
        }
    }
}

impl Fs {
    /// Changes mode bits, size (truncation, staged) or mtime.
    pub async fn setattr(
        self: &Arc<Self>,
        ino: u64,
        mode: Option<u32>,
        size: Option<u64>,
        mtime: Option<SystemTime>,
        fh: Option<u64>,
    ) -> Result<Attr> {
        self.wb.refresh_passthrough(Some(ino));
        let c = AttrChanges {
            mode,
            mtime,
            ..AttrChanges::default()
        };
        self.setattr_with(ino, size, c, fh).await
    }

    /// Changes the size (truncation, staged) and the attributes in `c` (see attrs.rs).
    pub async fn setattr_with(
        self: &Arc<Self>,
        ino: u64,
        size: Option<u64>,
        mut c: AttrChanges,
        fh: Option<u64>,
    ) -> Result<Attr> {
        c.kill_suidgid &= self.w.has_privs(ino);
        if size.is_some() || c.any() {
            self.w.check_writable(ino)?;
        }
        if let Some(size) = size {
            let kind = self.ns.read(ino, |n| n.entry.kind);
            match kind {
                Some(Kind::File) => {}
                Some(Kind::Dir) => return Err(FsError::IsDir),
                _ => return Err(FsError::Invalid("size of a non-file")),
            }
            self.truncate(ino, size, fh).await?;
        }
        self.w.change_attrs(ino, c)?;
        self.w.attr_now(ino)
    }

    /// truncate(2) and ftruncate(2): the staged content gets its new length; without an
    /// open writer it is uploaded as a file closed just now would be.
    async fn truncate(self: &Arc<Self>, ino: u64, size: u64, fh: Option<u64>) -> Result<()> {
        if let Some(fh) = fh.filter(|fh| self.needs_stage(*fh)) {
            // An ftruncate is its writer's first change: only what it keeps is fetched.
            let staged = self.stage(fh, size).await?;
            return self.w.truncate_staged(ino, &staged, size);
        }
        let writer = fh.and_then(|fh| self.handles.writer(fh)).map(|(_, s)| s);
        if let Some(staged) = writer {
            return self.w.truncate_staged(ino, &staged, size);
        }
        // As a writer of its own, released at once: that queues the upload.
        let staged = self.open_staged(ino, true, size).await?;
        let fh = self.open_local(ino, staged.clone(), Access::Write);
        let r = self.w.truncate_staged(ino, &staged, size);
        self.release(fh)?;
        r
    }
}

impl WritePath {
    /// mknod of a FIFO, socket or device node: an empty object whose metadata holds its
    /// mode (type bits included) and rdev, staged and uploaded in the background like a
    /// symlink. The kernel opens, reads and writes it locally, never through flowfs.
    pub(super) async fn mknod_special(
        self: &Arc<Self>,
        (parent, name): (u64, &str),
        (mode, rdev): (u32, u32),
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        self.check_writable_in(parent, name)?;
        valid_name(name)?;
        let mut posix = self.shown.new_posix(mode, owner);
        posix.rdev = (rdev != 0).then_some(rdev);
        let e = Entry {
            kind: Kind::Special(mode & S_IFMT),
            size: 0,
            mtime: SystemTime::now(),
            etag: None,
            target: None,
            posix: Some(Arc::new(posix)),
        };
        let (ino, _) = self.add_new(parent, name, e, NewFile::Closed, b"")?;
        if let Some((_, true)) = self.wb.request_upload(ino) {
            self.spawn_upload(ino);
        }
        self.attr_now(ino)
    }
}
