//! The object's checksum as a read-only xattr (issue 49): `getfattr -n
//! user.flowfs.crc64nvme f` on S3 (`user.flowfs.crc32c` on GCS) answers with the value
//! the store keeps for the file's object, base64 as the store gives it, in one HEAD and
//! without reading the file. A file closed but still uploading is waited for first, as
//! an fsync would; one still open for writing has no object of its bytes yet (ENODATA).
//! It is not listed: `cp --preserve=xattr` would try to set it on the copy.

use std::sync::Arc;

use crate::error::{FsError, Result};
use crate::inode::Kind;

use super::names::Which;
use super::remote::same_etag;

use super::WritePath;

impl WritePath {
    /// The value of `user.flowfs.<algorithm>` of `ino`: ENODATA where its store keeps
    /// no such checksum for it.
    pub(super) async fn checksum_xattr(
        self: &Arc<Self>,
        ino: u64,
        algorithm: &str,
    ) -> Result<Vec<u8>> {
        let staged = self.ns.pick(self.wb.staged(true), Which::Node(ino));
        self.wait_all_durable(staged).await?;
        if self.wb.stat(ino).is_some() {
            return Err(FsError::NoAttr);
        }
        let known = self.ns.read_maybe_at(ino, |n, path| {
            let path = path.filter(|_| !n.is_unlinked());
            match (path, n.entry.kind, n.entry.etag.clone()) {
                (Some(p), Kind::File, Some(etag)) => Ok((self.keys.key(&p), etag)),
                _ => Err(FsError::NoAttr),
            }
        });
        let (key, etag) = known.ok_or(FsError::NotFound)??;
        let head = self.client.head(&key).await?;
        if !same_etag(Some(&etag), Some(&head.info.etag)) {
            // Changed in the bucket since it was looked up: not this file's bytes.
            return Err(FsError::Stale);
        }
        match head.checksum {
            Some(c) if c.name == algorithm => Ok(c.value.into_bytes()),
            _ => Err(FsError::NoAttr),
        }
    }
}
