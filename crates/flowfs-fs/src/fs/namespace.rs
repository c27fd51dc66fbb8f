//! New names: create, mknod, mkdir, symlink, and the one `add_new` that create, symlink
//! and special files share (unlink and rmdir are in remove.rs, rename in rename.rs).

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use crate::error::{FsError, Result};
use crate::inode::{Entry, Kind};
use crate::writeback::{NewFile, StagedFile};

use super::WritePath;
use super::{valid_name, Access, Attr, Backing, Fs, OpenHints, MAX_SYMLINK};

impl Fs {
    pub(super) async fn resolve(self: &Arc<Self>, parent: u64, name: &str) -> Result<u64> {
        if let Some(ino) = self.ns.child(parent, name) {
            return Ok(ino);
        }
        let a = self.lookup(parent, name).await?;
        // The lookup above is ours, not the kernel's.
        self.ns.lookup_undone(a.ino);
        Ok(a.ino)
    }

    /// Creates an empty file (staged locally, uploaded at its last close) and opens it for
    /// writing; it belongs to the user `owner` (uid, gid: the caller's), whose object
    /// carries them (`None`: the mounting user).
    pub async fn create(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<(Attr, u64)> {
        let (attr, fh, _) = self.create_io(parent, name, mode, owner, false).await?;
        Ok((attr, fh))
    }

    /// `create`; `passthrough`: as for `open_as`, the writer may be served by the kernel
    /// from the staged file offered in the hints.
    pub async fn create_io(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
        passthrough: bool,
    ) -> Result<(Attr, u64, OpenHints)> {
        self.w.check_writable_in(parent, name)?;
        valid_name(name)?;
        let e = Entry {
            kind: Kind::File,
            size: 0,
            mtime: SystemTime::now(),
            etag: None,
            target: None,
            posix: Some(Arc::new(
                self.shown
                    .new_posix(crate::meta::S_IFREG | mode & 0o7777, owner),
            )),
        };
        let (ino, staged) = self.w.add_new(parent, name, e, NewFile::Created, b"")?;
        self.lists.list_unlisted_behind(parent);
        let access = if passthrough {
            Access::Passthrough
        } else {
            Access::Write
        };
        let fh = self.open_local(ino, staged.clone(), access);
        if passthrough {
            if let Err(e) = self.w.begin_passthrough(ino, &staged) {
                let _ = self.release(fh);
                return Err(e);
            }
        }
        let attr = self.w.attr_now(ino)?;
        let hints = OpenHints {
            backing: passthrough.then(|| Backing::Staged(staged)),
            ..OpenHints::default()
        };
        Ok((attr, fh, hints))
    }

    /// mknod of a regular file: an empty file, uploaded at once.
    pub async fn mknod(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        mode: u32,
        rdev: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        let bits = mode & libc::S_IFMT;
        if [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK].contains(&bits) {
            return (self.w)
                .mknod_special((parent, name), (mode, rdev), owner)
                .await;
        }
        if bits != libc::S_IFREG && bits != 0 {
            return Err(FsError::Invalid("mknod of this file type"));
        }
        let (attr, fh) = self.create(parent, name, mode, owner).await?;
        self.release(fh)?;
        Ok(attr)
    }

    /// Creates a directory as an empty marker object `name/`, so that it survives a remount
    /// while empty; it belongs to the user `owner` (uid, gid: the caller's), whose marker
    /// carries them (`None`: the mounting user).
    pub async fn mkdir(
        &self,
        parent: u64,
        name: &str,
        mode: u32,
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        self.w.check_writable_in(parent, name)?;
        valid_name(name)?;
        // The kernel's lookup just before found nothing: from a listing or a negative
        // entry younger than the TTL, that answer stands without a second round trip
        // (Nextflow makes two directories per task).
        let (path, known_absent) = self.ns.new_name(parent, name, self.cfg.metadata_ttl)?;
        self.keys.check(&path, true)?;
        if !known_absent && self.lists.in_store(&path).await? {
            return Err(FsError::Exists);
        }
        // The marker object makes an empty directory survive a remount; its metadata
        // holds the directory's attributes (as s3fs writes them), and tells a listing of
        // it that its objects may carry theirs.
        let mut e = Entry::dir(SystemTime::now());
        e.set_posix(Some(
            self.shown.new_posix(libc::S_IFDIR | mode & 0o7777, owner),
        ));
        let mut metadata = HashMap::new();
        let mut posix = self.shown.full_posix(&e);
        posix.mtime = Some(e.mtime);
        posix.encode_into(&mut metadata);
        let marker = self.keys.dir_prefix(&path);
        // A stray's task may delete this marker again (remove.rs): not after this PUT.
        let keys = self.up.keys();
        let _held = keys.hold(&marker).await;
        keys.remade(&marker);
        self.client
            .put(&marker, Default::default(), &metadata)
            .await?;
        let ino = self.ns.dir_made(parent, name, e);
        self.w.attr_now(ino)
    }

    /// Creates a symlink: staged and uploaded like a file, as a small object whose metadata
    /// holds the target; it belongs to `owner` (uid, gid: the caller's; `None`: the
    /// mounting user).
    pub async fn symlink(
        self: &Arc<Self>,
        parent: u64,
        name: &str,
        target: &str,
        owner: Option<(u32, u32)>,
    ) -> Result<Attr> {
        self.w.check_writable_in(parent, name)?;
        valid_name(name)?;
        if target.len() as u64 > MAX_SYMLINK {
            return Err(FsError::NameTooLong);
        }
        // The kernel looked the name up just before (and found nothing), as for create:
        // no second round trip to the server here. Like a file, the symlink is staged and
        // uploaded in the background (Nextflow makes one per input of every task).
        let e = Entry {
            kind: Kind::Symlink,
            size: target.len() as u64,
            mtime: SystemTime::now(),
            etag: None,
            target: Some(target.into()),
            posix: Some(Arc::new(self.shown.new_posix(0o120_777, owner))),
        };
        let (ino, _) = self
            .w
            .add_new(parent, name, e, NewFile::Closed, target.as_bytes())?;
        if let Some((_, true)) = self.wb.request_upload(ino) {
            self.w.spawn_upload(ino);
        }
        self.w.attr_now(ino)
    }
}

impl WritePath {
    /// Adds a new node `name` in `parent` for entry `e` (a file, symlink or special file
    /// made by this mount), with its staged file of `content` and its journal record. The
    /// kernel looked the name up just before and found nothing: no round trip to the
    /// store here.
    pub(super) fn add_new(
        &self,
        parent: u64,
        name: &str,
        e: Entry,
        kind: NewFile,
        content: &[u8],
    ) -> Result<(u64, Arc<StagedFile>)> {
        let ino = self
            .ns
            .add(parent, name, e, |path| self.keys.check(path, false))?;
        match self.new_staged(ino, kind, content) {
            Ok(staged) => Ok((ino, staged)),
            Err(e) => {
                self.ns.undo_add(parent, name, ino);
                Err(e)
            }
        }
    }

    /// Gives `ino`, just created, its staged file and journal record.
    fn new_staged(&self, ino: u64, kind: NewFile, content: &[u8]) -> Result<Arc<StagedFile>> {
        let file = self.wb.insert_new(ino, kind, content)?;
        if let Err(e) = self.journal(ino) {
            self.wb.remove_new(ino);
            return Err(e);
        }
        Ok(file)
    }
}
