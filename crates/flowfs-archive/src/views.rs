//! `ArchiveViews` (`--archives`): a bucket in which every `*.tar`, `*.tar.gz` and `*.tgz`
//! object also shows as a read-only directory `NAME.d/` beside it, its members inside.
//! It wraps the bucket's client: a key below a view (`refs/hg38.tar.gz.d/chr1.fa`) goes
//! to that archive's `ArchiveClient` (opened, and its index built or loaded, on first
//! use, once however many callers ask at once), any other key to the bucket. A
//! delimited listing of the bucket gets each archive's view as a common prefix, in key
//! order (a view that sorts past the end of a page is carried to the next one in its
//! token), so the file system above lists, looks up and walks views as any directory.

use flowfs_client::{ByteRange, Completion, Crc, List, ListAfter, Metadata, Part, Payload};
use flowfs_client::{Pieces, Rewrite, Sink, Upload, Version};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use async_trait::async_trait;
use flowfs_client::{
    ClientError, ListPage, ObjectClient, ObjectMeta, PutResult, Result, UploadInfo,
};
use parking_lot::Mutex;
use tokio::sync::OnceCell;

use crate::client::ArchiveClient;
use crate::names::{
    archive_named, place, root_marker_info, root_marker_meta, ARCHIVE_NAMES, VIEW_SUFFIX,
};

/// Starts a token of ours: views carried to the next page, then the bucket's token.
const CARRY: &str = "flowfs-views:";

/// The bucket, with a read-only view of each archive in it.
pub struct ArchiveViews {
    inner: Arc<dyn ObjectClient>,
    /// Names the bucket in index file names, so two buckets' archives never share one.
    bucket: String,
    cache_dir: PathBuf,
    /// The archives opened so far, by key: one open (index build) per archive version
    /// however many callers ask at once. Grows with the archives used, not the bucket.
    open: Mutex<HashMap<String, Arc<OnceCell<Arc<ArchiveClient>>>>>,
}

impl ArchiveViews {
    pub fn new(inner: Arc<dyn ObjectClient>, bucket: &str, cache_dir: &Path) -> ArchiveViews {
        ArchiveViews {
            inner,
            bucket: bucket.to_string(),
            cache_dir: cache_dir.to_path_buf(),
            open: Mutex::new(HashMap::new()),
        }
    }

    /// The archive at `key`, opened once: its index loaded from the cache or built.
    async fn archive(&self, key: &str) -> Result<Arc<ArchiveClient>> {
        let cell = self.open.lock().entry(key.to_string()).or_default().clone();
        let ident = format!("{}/{key}", self.bucket);
        let opened = cell
            .get_or_try_init(|| async {
                let a = ArchiveClient::open(self.inner.clone(), key, &ident, &self.cache_dir)
                    .await
                    .map_err(ClientError::from)
                    .inspect_err(|e| {
                        if !matches!(e, ClientError::NotFound(_)) {
                            tracing::warn!(key, "archive view not served: {e}");
                        }
                    })?;
                Ok::<_, ClientError>(Arc::new(a))
            })
            .await?;
        Ok(opened.clone())
    }

    /// Forgets the archive at `key` (written, deleted, or found at another version):
    /// its next use opens it again, at the version the bucket has then.
    fn forget(&self, key: &str) {
        self.open.lock().remove(key);
    }

    /// Forgets an archive a listing shows at another ETag than the one served.
    fn forget_changed(&self, key: &str, etag: &str) {
        let mut open = self.open.lock();
        let stale = (open.get(key).and_then(|c| c.get())).is_some_and(|a| a.index().etag != etag);
        if stale {
            open.remove(key);
        }
    }

    /// A call on an archive's member failed: a changed archive (`Precondition`) is
    /// opened again at its next use.
    fn after<T>(&self, archive: &str, r: Result<T>) -> Result<T> {
        if matches!(r, Err(ClientError::Precondition(_))) {
            self.forget(archive);
        }
        r
    }

    /// A page of the listing of a view (`archive`'s): `page` lists its members as the
    /// archive names them; the keys returned are the bucket's. A view whose archive is
    /// gone lists nothing, as an absent directory.
    /// `root_marker`: the page starts at the view's root, whose marker comes first.
    async fn view_page<F, Fut>(&self, archive: &str, root_marker: bool, page: F) -> Result<ListPage>
    where
        F: FnOnce(Arc<ArchiveClient>) -> Fut,
        Fut: std::future::Future<Output = Result<ListPage>>,
    {
        let a = match self.archive(archive).await {
            Err(ClientError::NotFound(_)) => return Ok(ListPage::default()),
            r => r?,
        };
        let modified = a.modified();
        let mut p = self.after(archive, page(a).await)?;
        let root = format!("{archive}{VIEW_SUFFIX}/");
        for o in &mut p.objects {
            o.key.insert_str(0, &root);
        }
        for q in &mut p.prefixes {
            q.insert_str(0, &root);
        }
        if root_marker {
            p.objects.insert(0, root_marker_info(root, modified));
        }
        Ok(p)
    }

    /// The bucket's page with the views of the archives in it (and those `carried`
    /// from the page before) among its common prefixes, where key order puts them; a
    /// view past the page's last key goes to the next page, in its token.
    fn with_views(&self, prefix: &str, mut page: ListPage, mut views: Vec<String>) -> ListPage {
        for o in &page.objects {
            let name = &o.key[prefix.len().min(o.key.len())..];
            if !name.contains('/') && archive_named(name) {
                self.forget_changed(&o.key, &o.etag);
                views.push(format!("{}{VIEW_SUFFIX}/", o.key));
            }
        }
        let last = (page.objects.last().map(|o| o.key.clone())).max(page.prefixes.last().cloned());
        let (here, later): (Vec<String>, Vec<String>) = views.into_iter().partition(|v| {
            page.next_token.is_none() || last.as_deref().is_some_and(|l| v.as_str() <= l)
        });
        page.prefixes.extend(here);
        page.prefixes.sort();
        page.prefixes.dedup();
        if !later.is_empty() {
            let inner = page.next_token.take().unwrap_or_default();
            let token = serde_json::to_string(&(later, inner)).unwrap_or_default();
            page.next_token = Some(format!("{CARRY}{token}"));
        }
        page
    }

    /// The bucket's token and the views carried in ours.
    fn untoken(token: Option<String>) -> (Option<String>, Vec<String>) {
        let carried = (token.as_deref())
            .and_then(|t| t.strip_prefix(CARRY))
            .and_then(|t| serde_json::from_str::<(Vec<String>, String)>(t).ok());
        match carried {
            Some((views, inner)) => ((!inner.is_empty()).then_some(inner), views),
            None => (token, Vec::new()),
        }
    }

    /// Views a listing from `start_after` must show although their archive sorts before
    /// it: `x.tar` <= `x.tar.c` < `x.tar.d/`. Their archive's name starts `start_after`:
    /// a HEAD each (none in the common case, a name that is not an archive's and more).
    async fn views_straddling(&self, prefix: &str, start_after: &str) -> Vec<String> {
        let Some(rest) = start_after.strip_prefix(prefix) else {
            return Vec::new();
        };
        let mut views = Vec::new();
        for (i, _) in rest.match_indices('.') {
            let name = &rest[..i];
            let tail = &rest[i..];
            let candidate = ARCHIVE_NAMES
                .iter()
                .find(|n| tail.starts_with(*n) && archive_named(&rest[..i + n.len()]));
            let Some(n) = candidate else { continue };
            let key = format!("{prefix}{name}{n}");
            let view = format!("{key}{VIEW_SUFFIX}/");
            if key.as_str() <= start_after && view.as_str() > start_after {
                if let Ok(m) = self.inner.head(&key).await {
                    self.forget_changed(&key, &m.info.etag);
                    views.push(view);
                }
            }
        }
        views
    }

    /// A write below a view: refused, as the view is read-only.
    fn refused(key: &str) -> ClientError {
        ClientError::Refused(format!("{key}: an archive's view is read-only"))
    }

    /// Before a write of `key` outside the views: refuse one below a view, and forget
    /// the archive it replaces.
    fn writing(&self, key: &str) -> Result<()> {
        if self.refuses_writes(key) {
            return Err(Self::refused(key));
        }
        if archive_named(key.rsplit('/').next().unwrap_or(key)) {
            self.forget(key);
        }
        Ok(())
    }
}

#[async_trait]
impl ObjectClient for ArchiveViews {
    /// The bucket's: a name outside the views is an object of it.
    fn key_rules(&self) -> flowfs_client::KeyRules {
        self.inner.key_rules()
    }

    fn upload_checksum(&self) -> Option<Crc> {
        self.inner.upload_checksum()
    }

    async fn check_bucket(&self, prefix: &str) -> Result<()> {
        self.inner.check_bucket(prefix).await
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let Some((archive, member)) = place(key) else {
            return self.inner.head(key).await;
        };
        let a = self.archive(archive).await?;
        if member.is_empty() {
            return Ok(ObjectMeta {
                info: root_marker_info(key.to_string(), a.modified()),
                metadata: root_marker_meta(a.modified()),
                checksum: None,
            });
        }
        let mut m = self.after(archive, a.head(member).await)?;
        m.info.key = key.to_string();
        Ok(m)
    }

    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let Some((archive, member)) = place(get.src.key) else {
            return self.inner.get_range_pieces(get, sink).await;
        };
        let a = self.archive(archive).await?;
        let of_member = Version::new(member, get.src.etag).pieces(get.start, get.cuts);
        let r = a.get_range_pieces(of_member, sink).await;
        self.after(archive, r)
    }

    /// An object of the bucket is checked as the store checks it; a member of an
    /// archive is a range of it, read as such.
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        if place(src.key).is_none() {
            return self.inner.get_whole_pieces(src, cuts, sink).await;
        }
        self.get_range_pieces(src.pieces(0, cuts), sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        let prefix = list.prefix;
        if let Some((archive, member)) = place(prefix) {
            let root_marker = member.is_empty() && list.token.is_none();
            let of_member = List {
                prefix: member,
                ..list
            };
            let page = |a: Arc<ArchiveClient>| async move { a.list_page(of_member).await };
            return self.view_page(archive, root_marker, page).await;
        }
        if list.delimiter != Some("/") {
            // A flat listing (a rename of a directory) names the bucket's keys only.
            return self.inner.list_page(list).await;
        }
        let (token, carried) = Self::untoken(list.token.clone());
        let page = self.inner.list_page(List { token, ..list }).await?;
        Ok(self.with_views(prefix, page, carried))
    }

    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        let (prefix, start_after, token) = (list.prefix, list.start_after, list.token);
        if let Some((archive, member)) = place(prefix) {
            let after = start_after.get(prefix.len() - member.len()..).unwrap_or("");
            let of_member = ListAfter::new(member, after).token(token);
            let page = |a: Arc<ArchiveClient>| async move { a.list_after(of_member).await };
            return self.view_page(archive, false, page).await;
        }
        let (inner_token, carried) = Self::untoken(token.clone());
        let views = if token.is_none() {
            self.views_straddling(prefix, start_after).await
        } else {
            carried
        };
        let inner = ListAfter::new(prefix, start_after).token(inner_token);
        let page = self.inner.list_after(inner).await?;
        Ok(self.with_views(prefix, page, views))
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        self.writing(key)?;
        self.inner.put(key, body, metadata).await
    }

    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        self.writing(key)?;
        self.inner.create_multipart(key, metadata).await
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        self.writing(part.upload.key)?;
        self.inner.upload_part(part, body).await
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let key = done.upload.key;
        self.writing(key)?;
        let r = self.inner.complete_multipart(done).await;
        // Forgotten after it too: a use in between may have opened the old version.
        self.forget(key);
        r
    }

    /// A range of an archive's member is read and sent: the store cannot copy it.
    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        self.writing(part.upload.key)?;
        if place(range.src.key).is_some() {
            let bytes = self.get_range(range).await?;
            return self.inner.upload_part(part, bytes.into()).await;
        }
        self.inner.upload_part_copy(part, range).await
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        self.writing(upload.key)?;
        self.inner.abort_multipart(upload).await
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        if self.refuses_writes(key) {
            return Ok(Vec::new());
        }
        self.inner.list_uploads(key).await
    }

    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        if place(src.key).is_some() {
            return Err(Self::refused(src.key));
        }
        self.writing(to)?;
        let r = self.inner.copy(src, to, meta).await;
        self.forget(to);
        r
    }

    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        let key = rw.object.key;
        self.writing(key)?;
        let r = self.inner.replace_metadata(rw).await;
        self.forget(key);
        r
    }

    async fn delete(&self, key: &str) -> Result<()> {
        self.writing(key)?;
        self.inner.delete(key).await
    }

    fn heads_are_free(&self, prefix: &str) -> bool {
        place(prefix).is_some()
    }

    fn refuses_writes(&self, key: &str) -> bool {
        (key.trim_end_matches('/').split('/'))
            .any(|seg| seg.strip_suffix(VIEW_SUFFIX).is_some_and(archive_named))
    }
}
