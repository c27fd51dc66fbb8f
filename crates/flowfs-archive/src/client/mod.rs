//! `ArchiveClient`: an archive's members as a read-only bucket. Keys, listings and HEADs
//! come from the index; a file's bytes are a ranged GET of the archive at the member's
//! offset (tar), or the GET of the compressed span from the restart point before the
//! range to the one after it, inflated on a blocking thread (gzip). Every GET of the
//! archive is conditional on the ETag the index was built from: a changed archive is an
//! error (the next mount builds a new index), never another version's bytes.

mod spans;

use flowfs_client::{ByteRange, Completion, List, ListAfter, Metadata, Part, Payload, Pieces};
use flowfs_client::{Rewrite, Sink, Upload, Version};
use spans::Spans;
use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use bytes::Bytes;
use flowfs_client::meta::{percent_encode, Posix, SYMLINK_META};
use flowfs_client::{
    split_pieces, ClientError, ListPage, ObjectClient, ObjectInfo, ObjectMeta, PutResult, Result,
    UploadInfo,
};

use crate::ahead::{Ahead, Plan, SMALL};
use crate::error::ArchiveError;
use crate::index::{Format, Index, IndexFiles, Member, MemberKind};

/// Keys in one page of a listing, as S3 gives them.
const PAGE: usize = 1000;

/// The members of one archive object as an object store.
pub struct ArchiveClient {
    inner: Arc<dyn ObjectClient>,
    /// The archive's key in `inner`.
    key: String,
    /// When the archive object was written (a view's root shows it as its mtime).
    modified: SystemTime,
    index: Arc<Index>,
    /// Of a gzip archive: the spans inflated last.
    spans: Spans,
    /// Of a plain tar: bytes fetched ahead of members read in archive order, and where
    /// the members too big for that start, in order.
    ahead: Ahead,
    big_members: Vec<u64>,
    /// Where each file member's bytes start and end, in archive order.
    extents: Vec<(u64, u64)>,
}

impl ArchiveClient {
    /// The archive at `key`: `open_at` of what a HEAD of it says.
    pub async fn open(
        inner: Arc<dyn ObjectClient>,
        key: &str,
        ident: &str,
        cache_dir: &Path,
    ) -> std::result::Result<ArchiveClient, ArchiveError> {
        let meta = inner.head(key).await?;
        ArchiveClient::open_at(inner, &meta.info, ident, cache_dir).await
    }

    /// The archive `info` names: its index from `cache_dir` if this version's is there
    /// (no request), else built by one pass over the archive and kept there. `ident`
    /// names the archive across stores (its bucket and key).
    pub async fn open_at(
        inner: Arc<dyn ObjectClient>,
        info: &ObjectInfo,
        ident: &str,
        cache_dir: &Path,
    ) -> std::result::Result<ArchiveClient, ArchiveError> {
        let key = info.key.as_str();
        let files = IndexFiles::new(cache_dir, ident, &info.etag, info.size);
        let index = match files.load() {
            Some(ix) => ix,
            None => build_once(&inner, info, &files).await?,
        };
        let extents = extents(&index);
        Ok(ArchiveClient {
            inner,
            key: key.to_string(),
            modified: info.last_modified,
            spans: Spans::new(index.points.len()),
            ahead: Ahead::default(),
            big_members: big_members(&extents),
            extents,
            index: Arc::new(index),
        })
    }

    /// The archive's object, of the version its index was built from.
    fn indexed(&self) -> Version<'_> {
        Version::new(&self.key, Some(&self.index.etag))
    }

    /// Fetches archive bytes `[at, to)` into `cell` in the background (a reader that gets
    /// there first fetches them itself; a failure here is its to see, so it is dropped).
    fn fetch_behind(&self, at: u64, to: u64, cell: Arc<tokio::sync::OnceCell<Bytes>>) {
        let (inner, key, etag) = (
            self.inner.clone(),
            self.key.clone(),
            self.index.etag.clone(),
        );
        tokio::spawn(async move {
            let archive = Version::new(&key, Some(&etag));
            let fetch = || inner.get_range(archive.range(at, to));
            let _ = cell.get_or_try_init(fetch).await;
        });
    }

    /// Where a chunk of the archive ending at `x` should end instead: at the end of the
    /// member `x` falls in, so that no member is read from two chunks.
    fn member_end(&self, x: u64) -> u64 {
        let i = self.extents.partition_point(|&(start, _)| start <= x);
        match i.checked_sub(1).map(|i| self.extents[i]) {
            Some((_, end)) if end > x => end,
            _ => x,
        }
    }

    /// How far a fetch ahead from `from` may go: to the next big member (its bytes are
    /// read by the file system's own read-ahead, and fetching them here too would read
    /// them twice) or the archive's end.
    fn ahead_limit(&self, from: u64) -> u64 {
        let i = self.big_members.partition_point(|&o| o <= from);
        self.big_members.get(i).copied().unwrap_or(self.index.size)
    }

    /// When the archive object was written.
    pub fn modified(&self) -> SystemTime {
        self.modified
    }

    /// The index served.
    pub fn index(&self) -> &Index {
        &self.index
    }

    fn member(&self, key: &str) -> Result<&Member> {
        (self.index.get(key)).ok_or_else(|| ClientError::NotFound(key.to_string()))
    }

    /// A member's ETag: the archive's with where the member is, so that a member of
    /// another archive version is another object to the cache.
    fn etag_of(&self, m: &Member) -> String {
        let at = match m.kind {
            MemberKind::File { offset } => offset,
            _ => 0,
        };
        format!("\"{}:{at}\"", self.index.etag.trim_matches('"'))
    }

    fn info(&self, key: &str, m: &Member) -> ObjectInfo {
        ObjectInfo {
            key: key.to_string(),
            size: m.size,
            etag: self.etag_of(m),
            last_modified: mtime_of(m),
        }
    }

    /// The member's attributes and a symlink's target, in the metadata convention
    /// every flowfs store uses (flowfs-client meta.rs).
    fn metadata(m: &Member) -> HashMap<String, String> {
        let mut h = HashMap::new();
        let posix = Posix {
            mode: Some(m.mode),
            uid: Some(m.uid),
            gid: Some(m.gid),
            mtime: Some(mtime_of(m)),
            ..Posix::default()
        };
        posix.encode_into(&mut h);
        if let MemberKind::Symlink { target } = &m.kind {
            h.insert(SYMLINK_META.into(), percent_encode(target));
        }
        h
    }

    fn page(&self, prefix: &str, delimited: bool, after: Option<&str>, max: usize) -> ListPage {
        let l = self
            .index
            .list(prefix, delimited, after, max.clamp(1, PAGE));
        let objects = (l.objects.iter())
            .filter_map(|k| self.index.get(k).map(|m| self.info(k, m)))
            .collect();
        ListPage {
            next_token: l
                .truncated
                .then(|| l.last().unwrap_or_default().to_string()),
            objects,
            prefixes: l.prefixes,
            metadata: Default::default(),
        }
    }
}

/// Where the members bigger than `SMALL` start (their header's offset), in order: of
/// the members' `extents`, already in order.
fn big_members(extents: &[(u64, u64)]) -> Vec<u64> {
    (extents.iter())
        .filter(|(start, end)| end - start > SMALL)
        .map(|(start, _)| start.saturating_sub(512))
        .collect()
}

/// Where the file members' bytes start and end, in order.
fn extents(ix: &Index) -> Vec<(u64, u64)> {
    let mut v: Vec<(u64, u64)> = (ix.members.values())
        .filter_map(|m| match m.kind {
            MemberKind::File { offset } => Some((offset, offset + m.size)),
            _ => None,
        })
        .collect();
    v.sort_unstable();
    v
}

/// The index of the archive `info` names, built by this process unless another built it
/// while this one waited for the lock (`IndexFiles::lock`), and kept in `files`.
async fn build_once(
    inner: &Arc<dyn ObjectClient>,
    info: &ObjectInfo,
    files: &IndexFiles,
) -> std::result::Result<Index, ArchiveError> {
    let key = info.key.as_str();
    let locking = files.clone();
    let _lock = tokio::task::spawn_blocking(move || locking.lock())
        .await
        .map_err(|e| ArchiveError::Internal(format!("index lock task: {e}")))??;
    if let Some(ix) = files.load() {
        return Ok(ix);
    }
    let end = info.size.min(crate::SNIFF_LEN);
    let of = Version::new(key, Some(&info.etag));
    let head = inner.get_range(of.range(0, end)).await?;
    let format = crate::sniff(&head)
        .ok_or_else(|| ArchiveError::NotAnArchive("neither a tar nor gzip at its start".into()))?;
    let ix = crate::build::build(inner.clone(), info, format).await?;
    if let Err(e) = files.save(&ix) {
        tracing::warn!(key, "archive index not kept: {e}");
    }
    for s in &ix.skipped {
        tracing::warn!(key, "archive member skipped: {s}");
    }
    Ok(ix)
}

fn mtime_of(m: &Member) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(m.mtime)
}

fn read_only(what: &str) -> ClientError {
    ClientError::Refused(format!("{what}: an archive mount is read-only"))
}

#[async_trait]
impl ObjectClient for ArchiveClient {
    /// Read-only: every name is a member's, kept as the archive has it.
    fn key_rules(&self) -> flowfs_client::KeyRules {
        flowfs_client::KeyRules::S3
    }

    async fn check_bucket(&self, _prefix: &str) -> Result<()> {
        Ok(())
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let m = self.member(key)?;
        Ok(ObjectMeta {
            info: self.info(key, m),
            metadata: Self::metadata(m),
            checksum: None,
        })
    }

    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let (Version { key, etag }, start, cuts) = (get.src, get.start, get.cuts);
        let m = self.member(key)?;
        if etag.is_some_and(|e| e != self.etag_of(m)) {
            return Err(ClientError::Precondition(key.to_string()));
        }
        let Some(end) = get.end() else {
            return Ok(());
        };
        if end > m.size {
            let msg = format!("{key}: range past the member's end");
            return Err(ClientError::Other(msg));
        }
        // The bytes `[start, end)` of the member.
        let data = match (&m.kind, self.index.format) {
            (MemberKind::File { offset }, Format::Tar) => {
                let (from, to) = (start + offset, end + offset);
                let of_archive = self.indexed();
                // A big member is read ahead by the file system above, range by range.
                let plan = match m.size <= SMALL {
                    true => {
                        let snap = |x: u64| self.member_end(x);
                        // A read further into a member (the file system's next range of
                        // it) fetches no further than the member's end: a random member
                        // costs its own bytes, whatever its size.
                        let limit = match start {
                            0 => self.ahead_limit(from),
                            _ => self.ahead_limit(from).min(offset + m.size),
                        };
                        self.ahead.plan(from, to, limit, &snap)
                    }
                    false => {
                        self.ahead.saw(to);
                        Plan::Direct
                    }
                };
                match plan {
                    Plan::Chunk {
                        at,
                        to: end,
                        cell,
                        next,
                    } => {
                        if let Some((a, b, c)) = next {
                            self.fetch_behind(a, b, c);
                        }
                        let fetch = || self.inner.get_range(of_archive.range(at, end));
                        let got = cell.get_or_try_init(fetch).await?;
                        got.slice((from - at) as usize..(to - at) as usize)
                    }
                    Plan::Direct => {
                        // The archive's own bytes: one ranged GET, its pieces as they arrive.
                        let moved: Vec<u64> = cuts.iter().map(|c| c + offset).collect();
                        let get = of_archive.pieces(from, &moved);
                        return self.inner.get_range_pieces(get, sink).await;
                    }
                }
            }
            (MemberKind::File { offset }, Format::TarGz) => {
                self.inflate(offset + start, offset + end).await?
            }
            (MemberKind::Symlink { target }, _) => {
                Bytes::copy_from_slice(&target.as_bytes()[start as usize..end as usize])
            }
            _ => Bytes::new(),
        };
        split_pieces(get, &data, sink)
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        let max = list.max_keys.map_or(PAGE, |m| m.max(1) as usize);
        let dir = list.delimiter == Some("/");
        Ok(self.page(list.prefix, dir, list.token.as_deref(), max))
    }

    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        let after = list.token.as_deref().unwrap_or(list.start_after);
        Ok(self.page(list.prefix, true, Some(after), PAGE))
    }

    async fn put(&self, key: &str, _body: Payload, _metadata: &Metadata) -> Result<PutResult> {
        Err(read_only(key))
    }

    async fn create_multipart(&self, key: &str, _metadata: &Metadata) -> Result<String> {
        Err(read_only(key))
    }

    async fn upload_part(&self, part: Part<'_>, _body: Payload) -> Result<String> {
        Err(read_only(part.upload.key))
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        Err(read_only(done.upload.key))
    }

    async fn upload_part_copy(&self, part: Part<'_>, _range: ByteRange<'_>) -> Result<String> {
        Err(read_only(part.upload.key))
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        Err(read_only(upload.key))
    }

    async fn list_uploads(&self, _key: &str) -> Result<Vec<UploadInfo>> {
        Ok(Vec::new())
    }

    async fn copy(&self, _: Version<'_>, to: &str, _: Option<&Metadata>) -> Result<PutResult> {
        Err(read_only(to))
    }

    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        Err(read_only(rw.object.key))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        Err(read_only(key))
    }

    fn refuses_writes(&self, _key: &str) -> bool {
        true
    }

    fn heads_are_free(&self, _prefix: &str) -> bool {
        true
    }
}
