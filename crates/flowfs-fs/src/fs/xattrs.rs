//! Extended attributes: `user.*` only, kept in the object's metadata in s3fs's convention
//! (flowfs-client xattr.rs). They are part of a node's `Posix`, so they go where its mode
//! goes: an upload carries them, an object already in the bucket (or a directory's
//! marker) has its metadata rewritten (`change_posix`), a rename's copy keeps them, a
//! remount reads them in a HEAD. The other namespaces are the kernel's (`security.*`,
//! `system.*`: the kernel asks for `security.capability` before writes) or root's
//! (`trusted.*`), which a bucket cannot enforce: none is shown, none is kept.

use std::sync::Arc;

use flowfs_client::xattr::{self, Xattrs, METADATA_LIMIT, XATTR};
use flowfs_client::{ClientError, ObjectMeta};

use crate::error::{FsError, Result};
use crate::inode::{Kind, ROOT};
use crate::meta::Posix;

use super::remote::same_etag;
use super::Fs;
use super::WritePath;

/// Room kept in `METADATA_LIMIT` for the POSIX attributes beside the xattrs: every key
/// flowfs writes (mode, uid, gid, three times, rdev, link id) at its longest value.
const POSIX_ROOM: usize = 160;

/// Names flowfs gives itself (an object's checksum): read-only.
const OWN: &str = "user.flowfs.";

/// What a setxattr may do to a name (its flags).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum XattrMode {
    /// Create it or replace it.
    Set,
    /// `XATTR_CREATE`: only a name not there yet (EEXIST).
    Create,
    /// `XATTR_REPLACE`: only a name already there (ENODATA).
    Replace,
}

impl XattrMode {
    /// The mode setxattr's `flags` ask for.
    pub fn from_flags(flags: i32) -> Result<XattrMode> {
        match flags {
            0 => Ok(XattrMode::Set),
            libc::XATTR_CREATE => Ok(XattrMode::Create),
            libc::XATTR_REPLACE => Ok(XattrMode::Replace),
            _ => Err(FsError::Invalid("setxattr flags")),
        }
    }
}

/// Whether `name` is one flowfs keeps.
fn kept(name: &str) -> bool {
    name.starts_with("user.")
}

/// A name setxattr and removexattr may change.
fn changeable(name: &str) -> Result<()> {
    if !kept(name) {
        return Err(FsError::NotSupported(
            "extended attributes other than user.*",
        ));
    }
    if name.starts_with(OWN) {
        return Err(FsError::NotPermitted(
            "user.flowfs.* attributes are read-only",
        ));
    }
    Ok(())
}

/// E2BIG unless `x` and the POSIX attributes fit in the store's metadata.
fn fits(x: &Xattrs) -> Result<()> {
    // As `metadata_size` counts it: the key's bytes and the value's.
    let size = XATTR.len() + xattr::encode(x).len();
    if size + POSIX_ROOM > METADATA_LIMIT {
        return Err(FsError::AttrsTooBig(format!(
            "{size} bytes as stored, {} allowed beside the file's mode and times",
            METADATA_LIMIT - POSIX_ROOM
        )));
    }
    Ok(())
}

impl Fs {
    /// The value of the attribute `name` (ENODATA where there is none).
    pub async fn getxattr(self: &Arc<Self>, ino: u64, name: &str) -> Result<Vec<u8>> {
        if !kept(name) {
            return Err(FsError::NoAttr);
        }
        if let Some(algorithm) = name.strip_prefix(OWN) {
            return self.w.checksum_xattr(ino, algorithm).await;
        }
        let x = self.w.xattrs(ino).await?;
        x.get(name).cloned().ok_or(FsError::NoAttr)
    }

    /// The names of its attributes, each followed by a NUL, as listxattr answers: those
    /// flowfs keeps (s3fs also stores `trusted.*`, which flowfs neither shows nor drops).
    pub async fn listxattr(self: &Arc<Self>, ino: u64) -> Result<Vec<u8>> {
        let x = self.w.xattrs(ino).await?;
        let names = x.keys().filter(|k| kept(k));
        Ok(names.flat_map(|k| k.bytes().chain([0])).collect())
    }

    /// Sets the attribute `name` to `value` as `mode` allows.
    pub async fn setxattr(
        self: &Arc<Self>,
        ino: u64,
        name: &str,
        value: &[u8],
        mode: XattrMode,
    ) -> Result<()> {
        changeable(name)?;
        self.w.check_writable(ino)?;
        if ino == ROOT {
            // The root has no object of its own to keep them in.
            return Err(FsError::NotSupported(
                "extended attributes of the mount's root",
            ));
        }
        self.w.xattrs(ino).await?;
        self.w.change_posix(ino, |p| {
            let x = Arc::make_mut(p.xattrs.get_or_insert_with(xattr::none));
            match (mode, x.contains_key(name)) {
                (XattrMode::Create, true) => return Err(FsError::Exists),
                (XattrMode::Replace, false) => return Err(FsError::NoAttr),
                _ => {}
            }
            x.insert(name.to_string(), value.to_vec());
            fits(x)
        })
    }

    /// Removes the attribute `name` (ENODATA where there is none).
    pub async fn removexattr(self: &Arc<Self>, ino: u64, name: &str) -> Result<()> {
        changeable(name)?;
        self.w.check_writable(ino)?;
        self.w.xattrs(ino).await?;
        self.w.change_posix(ino, |p| {
            let x = Arc::make_mut(p.xattrs.get_or_insert_with(xattr::none));
            x.remove(name).map(drop).ok_or(FsError::NoAttr)
        })
    }
}

impl WritePath {
    /// The attributes of `ino`: what the node knows, else what its object's (or its
    /// marker's) metadata holds, read in one HEAD and kept while the object is the same.
    pub(super) async fn xattrs(self: &Arc<Self>, ino: u64) -> Result<Arc<Xattrs>> {
        let known = self.ns.read_maybe_at(ino, |n, path| {
            if let Some(x) = n.entry.posix.as_ref().and_then(|p| p.xattrs.clone()) {
                return Err(x);
            }
            let path = path.filter(|_| !n.is_unlinked());
            match (path, n.entry.kind, n.entry.etag.clone()) {
                (Some(p), Kind::File | Kind::Special(_), Some(etag)) => {
                    Ok((self.keys.key(&p), Some(etag)))
                }
                (Some(p), Kind::Dir, _) if ino != ROOT => {
                    Ok((format!("{}/", self.keys.key(&p)), None))
                }
                // Made here and not uploaded yet, or the root: none were set.
                _ => Err(xattr::none()),
            }
        });
        let (key, etag) = match known.ok_or(FsError::NotFound)? {
            Ok(asked) => asked,
            Err(known) => return Ok(known),
        };
        let head = match self.client.head(&key).await {
            Ok(head) => Some(head),
            Err(ClientError::NotFound(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(self.keep_xattrs(ino, etag.as_deref(), head.as_ref()))
    }

    /// Takes what a HEAD of the node's object (of the version `etag`; a directory's
    /// marker: `None`) says into the node, unless the node changed meanwhile.
    fn keep_xattrs(&self, ino: u64, etag: Option<&str>, head: Option<&ObjectMeta>) -> Arc<Xattrs> {
        let read = head.map(|h| Posix::decode(&h.metadata));
        let x = read
            .as_ref()
            .and_then(|p| p.xattrs.clone())
            .unwrap_or_else(xattr::none);
        self.ns.update(ino, |n| {
            let same = etag.is_none()
                || same_etag(n.entry.etag.as_deref(), head.map(|h| h.info.etag.as_str()));
            match n.entry.posix() {
                // Nothing known of its metadata: all of it is now (a file's, of this version).
                None if same && etag.is_some() => n.entry.set_posix(read),
                Some(p) if p.xattrs.is_none() && same => {
                    n.entry.posix_mut().xattrs = Some(x.clone())
                }
                _ => {}
            }
        });
        x
    }
}
