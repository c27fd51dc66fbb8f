//! How a node's attributes change (chmod, chown, utimens, setxattr: `change_posix`, the
//! one way) and how the change reaches the bucket: carried by the upload to come, or a
//! metadata rewrite of an object already there (a copy onto itself, in the background,
//! coalesced per inode by the Uploader; an unmount waits for them). Also the setuid and
//! setgid bits a write or chown drops (`kill_privs`, the kernel's KILLPRIV_V2).

use std::sync::Arc;
use std::time::SystemTime;

use flowfs_client::ClientError;

use crate::error::{FsError, Result};
use crate::inode::{Kind, ROOT};
use crate::meta::{Posix, S_IFMT};

use super::WritePath;
use super::{AttrChanges, Fs};

/// `mode` without the setuid and setgid bits a change of its file drops (setgid stays
/// where the group may not execute: it marks mandatory locking there).
fn without_privs(mode: u32) -> u32 {
    let mut m = mode & !libc::S_ISUID;
    if m & libc::S_IXGRP != 0 {
        m &= !libc::S_ISGID;
    }
    m
}

impl Fs {
    /// A write by a caller without `CAP_FSETID` (the kernel's `FUSE_WRITE_KILL_SUIDGID`):
    /// a file's setuid and setgid bits go, as a local file system drops them. One look
    /// under the namespace lock when it has none (the common case).
    pub fn kill_privs(self: &Arc<Self>, ino: u64) -> Result<()> {
        if !self.w.has_privs(ino) {
            return Ok(());
        }
        let c = AttrChanges {
            kill_suidgid: true,
            ..AttrChanges::default()
        };
        self.w.change_attrs(ino, c)
    }
}

impl WritePath {
    /// chmod, chown, utimens: the node takes them at once, and its ctime is now
    /// (`change_posix`).
    pub(super) fn change_attrs(self: &Arc<Self>, ino: u64, c: AttrChanges) -> Result<()> {
        if !c.any() {
            return Ok(());
        }
        if let Some(m) = c.mtime {
            // What a passthrough writer wrote before this utimens is taken in first, so
            // that its close does not take the time of that write for a later change
            // (GNU tar sets the mtime on the open file before close: issue 26).
            self.wb.refresh_passthrough(Some(ino));
            self.wb.set_mtime(ino, m);
        }
        self.change_posix(ino, |p| {
            if let Some(m) = c.mode {
                p.mode = Some(p.mode.unwrap_or(0) & S_IFMT | m & 0o7777);
            }
            p.uid = c.uid.or(p.uid);
            p.gid = c.gid.or(p.gid);
            p.atime = c.atime.or(p.atime);
            p.mtime = c.mtime.or(p.mtime);
            if let Some(m) = p
                .mode
                .filter(|m| c.kill_suidgid && m & S_IFMT != libc::S_IFDIR)
            {
                p.mode = Some(without_privs(m));
            }
            Ok(())
        })
    }

    /// Whether a change that drops setuid and setgid (`kill_suidgid`) would change `ino`.
    pub(super) fn has_privs(&self, ino: u64) -> bool {
        let mode = self
            .ns
            .read(ino, |n| n.entry.posix.as_ref()?.mode)
            .flatten();
        mode.is_some_and(|m| m & S_IFMT != libc::S_IFDIR && without_privs(m) != m)
    }

    /// Changes the attributes of `ino` by `change` (nothing changes where it fails) and
    /// makes its ctime now. A staged file's upload carries them; an object already in the
    /// bucket, or a directory's marker, has its metadata rewritten in the background.
    pub(super) fn change_posix(
        self: &Arc<Self>,
        ino: u64,
        change: impl FnOnce(&mut Posix) -> Result<()>,
    ) -> Result<()> {
        let changed = self.ns.update_listed(ino, |n| -> Result<bool> {
            let mut p = n.entry.posix().unwrap_or_default();
            change(&mut p)?;
            p.ctime = Some(SystemTime::now());
            n.entry.set_posix(Some(p));
            let e = &n.entry;
            // A directory rewrites its marker, if it has one (a HEAD tells). An object
            // rewrites its metadata unless an upload to come carries them (one in flight
            // is compared with them at its end, `finish_upload`): a staged file already
            // uploaded and still open (fchmod after fsync) has none to come.
            let durable = (e.kind == Kind::Dir && ino != ROOT)
                || (e.etag.is_some() && !self.wb.carries_attrs(ino));
            Ok(durable && !self.cfg.read_only)
        });
        let rewrite = changed.ok_or(FsError::NotFound)??;
        if rewrite && self.up.rewrite_due(ino) {
            let fs = self.clone();
            tokio::spawn(async move { fs.rewrite_meta(ino).await });
        }
        Ok(())
    }

    /// Rounds of metadata rewrites of `ino` until no setattr came during the last.
    pub(super) async fn rewrite_meta(self: Arc<Self>, ino: u64) {
        loop {
            if let Err(e) = self.rewrite_once(ino).await {
                tracing::warn!(ino, "attributes not stored in the bucket: {e}");
            }
            if !self.up.rewrite_again(ino) {
                return;
            }
        }
    }

    /// One HEAD (the object's other metadata, which a copy with REPLACE would drop, and
    /// the version to change) and one copy onto itself, conditional on that version.
    async fn rewrite_once(&self, ino: u64) -> std::result::Result<(), ClientError> {
        // The key is read and written while no rename or unlink of the node runs, and
        // while no directory above it moves (key first: a directory's rename holds its
        // own key, then the moves).
        let _key = self.ns.locks().key(ino).await;
        let _moves = self.up.hold_shared().await;
        // A staged file's coming upload carries them too; an upload landing first
        // makes the copy's condition fail, and one landing later carries them.
        let known = self.ns.read_at(ino, |n, path| {
            let key = match n.entry.kind {
                Kind::Dir => format!("{}/", self.keys.key(&path)),
                _ => self.keys.key(&path),
            };
            // The copy gets a new LastModified: the time shown so far goes with it.
            let mut posix = self.shown.full_posix(&n.entry);
            posix.mtime = Some(n.entry.shown_mtime());
            (!n.is_unlinked()).then_some((key, posix))
        });
        let Some((key, posix)) = known.flatten() else {
            return Ok(());
        };
        let head = match self.client.head(&key).await {
            Err(ClientError::NotFound(_)) => return Ok(()),
            r => r?,
        };
        let mut metadata = head.metadata.clone();
        posix.encode_into(&mut metadata);
        if metadata == head.metadata {
            return Ok(());
        }
        let etag = head.info.etag.as_str();
        match self
            .client
            .replace_metadata(
                flowfs_client::Version::new(&key, Some(etag)).rewrite(&metadata, head.info.size),
            )
            .await
        {
            Ok(put) => {
                // The body is the same: what the kernel and the cache hold stays good.
                self.ns.update(ino, |n| {
                    if n.entry.etag.as_deref() == Some(etag) {
                        n.retag(put.etag.as_str().into());
                    }
                });
                Ok(())
            }
            // Changed meanwhile (an upload, which carried the attributes, or another
            // client), or gone: nothing of ours to keep there.
            Err(ClientError::Precondition(_) | ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
