//! What the store says about names (`Remote`): an entry by HEAD and LIST together
//! (`stat`), and what an object's HEAD tells of it (`meta_entry`: attributes, symlinks,
//! special files). A directory's entries from its listing are listing.rs's, its pages
//! pages.rs's. (A symlink's target is kept in metadata by flowfs-client's meta.rs.)

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use flowfs_client::meta::percent_decode;
use flowfs_client::{ClientError, ListPage, ObjectClient, ObjectInfo, ObjectMeta};

use crate::config::FsConfig;
use crate::error::Result;
use crate::inode::{Entry, Kind, MetaHeads};
use crate::meta::Posix;
use crate::writeback::Keys as InFlight;

use super::SYMLINK_META;

pub(super) fn file_entry(info: &ObjectInfo) -> Entry {
    Entry {
        kind: Kind::File,
        size: info.size,
        mtime: info.last_modified,
        etag: Some(info.etag.as_str().into()),
        target: None,
        posix: None,
    }
}

/// ETags compared without the quotes some servers and SDKs keep around them.
pub(super) fn same_etag(a: Option<&str>, b: Option<&str>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.trim_matches('"') == b.trim_matches('"'),
        _ => false,
    }
}

/// What a HEAD of a name says: an object, or nothing.
fn head_entry(head: std::result::Result<ObjectMeta, ClientError>) -> Result<Option<Entry>> {
    match head {
        Ok(meta) => Ok(Some(meta_entry(&meta))),
        Err(ClientError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

pub(super) fn meta_entry(meta: &ObjectMeta) -> Entry {
    let mut e = file_entry(&meta.info);
    let posix = Posix::decode(&meta.metadata);
    let mode = posix.mode;
    e.set_posix(Some(posix));
    if let Some(bits) = mode.map(|m| m & crate::meta::S_IFMT) {
        if [libc::S_IFIFO, libc::S_IFSOCK, libc::S_IFCHR, libc::S_IFBLK].contains(&bits) {
            e.kind = Kind::Special(bits);
        }
    }
    if let Some(t) = meta.metadata.get(SYMLINK_META) {
        e.kind = Kind::Symlink;
        e.target = Some(percent_decode(t).into());
    }
    e
}

/// Asks the store about names: HEADs and LISTs, and the entries their answers give. It
/// keeps nothing between questions (the namespace keeps the answers); a key is the
/// caller's (`Keys`).
pub(super) struct Remote {
    client: Arc<dyn ObjectClient>,
    /// The uploads' keys in flight: objects of removed files still landing are not shown.
    in_flight: InFlight,
    meta_heads: MetaHeads,
    dir_mode: u16,
    /// When the mount started: the time a directory shows (S3 keeps none for them).
    started: SystemTime,
}

impl Remote {
    pub(super) fn new(
        cfg: &FsConfig,
        client: Arc<dyn ObjectClient>,
        in_flight: InFlight,
    ) -> Remote {
        Remote {
            client,
            in_flight,
            meta_heads: cfg.meta_heads,
            dir_mode: cfg.dir_mode,
            started: SystemTime::now(),
        }
    }

    pub(super) fn client(&self) -> &Arc<dyn ObjectClient> {
        &self.client
    }

    pub(super) fn in_flight(&self) -> &InFlight {
        &self.in_flight
    }

    /// A directory as a listing shows it.
    pub(super) fn dir_entry(&self) -> Entry {
        Entry::dir(self.started)
    }

    /// Which HEADs a listing of `prefix` sends (`--meta-heads`): all where attributes
    /// cost no request (an archive's members).
    pub(super) fn heads_in(&self, prefix: &str) -> MetaHeads {
        match self.client.heads_are_free(prefix) {
            true => MetaHeads::Always,
            false => self.meta_heads,
        }
    }

    /// What the server holds at `key`: a directory (a common prefix or a `key/`
    /// marker) wins over an object of the same name. `marker`: a directory's marker is
    /// read for its attributes (this mount does not know them yet).
    pub(super) async fn stat(&self, key: &str, marker: bool) -> Result<Option<Entry>> {
        let dir = format!("{key}/");
        let (head, list) = tokio::join!(
            self.client.head(key),
            self.client
                .list_page(flowfs_client::List::dir(&dir).max_keys(1))
        );
        if let Some(e) = self.listed_dir(&dir, &list?, marker).await? {
            return Ok(Some(e));
        }
        self.unless_stray(key, head_entry(head))
    }

    /// An object at `key` that is a stray of a removed file, about to be deleted
    /// (writeback/keys.rs), is not shown.
    fn unless_stray(&self, key: &str, e: Result<Option<Entry>>) -> Result<Option<Entry>> {
        match e {
            Ok(Some(e)) if e.kind != Kind::Dir && self.in_flight.is_stray(key) => Ok(None),
            other => other,
        }
    }

    /// `stat` of a name this mount knows as a directory: while it is one, its LIST alone
    /// answers (a directory wins over an object of its name), so the HEAD is sent only
    /// when nothing is below it any more. A walk into a deep work directory re-checks
    /// each of its directories once a TTL: one request each, not two.
    pub(super) async fn stat_dir(&self, key: &str, marker: bool) -> Result<Option<Entry>> {
        let dir = format!("{key}/");
        let list = self
            .client
            .list_page(flowfs_client::List::dir(&dir).max_keys(1))
            .await?;
        if let Some(e) = self.listed_dir(&dir, &list, marker).await? {
            return Ok(Some(e));
        }
        self.unless_stray(key, head_entry(self.client.head(key).await))
    }

    /// The directory a one-key LIST of `dir` (its prefix) shows, if any.
    async fn listed_dir(&self, dir: &str, list: &ListPage, marker: bool) -> Result<Option<Entry>> {
        if list.objects.is_empty() && list.prefixes.is_empty() {
            return Ok(None);
        }
        let mut e = self.dir_entry();
        // The marker (listed first) holds the directory's own attributes.
        if marker && list.objects.first().is_some_and(|o| o.key == dir) {
            e.set_posix(self.marker_posix(dir).await?);
        }
        Ok(Some(e))
    }

    /// The attributes a directory's marker `dir` (its key, with the `/`) holds, unless
    /// `--meta-heads never`: one HEAD. A marker without them (SeaweedFS keeps no
    /// metadata on markers) gives `--dir-mode`, so that the directory is not asked again.
    pub(super) async fn marker_posix(&self, dir: &str) -> Result<Option<Posix>> {
        if self.meta_heads == MetaHeads::Never {
            return Ok(None);
        }
        match self.client.head(dir).await {
            Ok(meta) => Ok(Some(self.dir_posix(&meta.metadata))),
            Err(ClientError::NotFound(_)) => Ok(None),
            Err(e) => Err(e.into()),
        }
    }

    /// A directory's attributes from its marker's metadata; `--dir-mode` where it has
    /// no mode.
    pub(super) fn dir_posix(&self, metadata: &HashMap<String, String>) -> Posix {
        let mut p = Posix::decode(metadata);
        let default = libc::S_IFDIR | u32::from(self.dir_mode);
        p.mode = Some(p.mode.unwrap_or(default));
        p
    }
}
