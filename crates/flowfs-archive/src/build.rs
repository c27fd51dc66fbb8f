//! Building an index: one sequential pass over the archive, read by ranged GETs of
//! `PART` bytes with `DEPTH` of them in flight (as a cold read of a big file is), handed in
//! order to a blocking thread that inflates (gzip) and walks the tar headers.

use std::collections::{BTreeMap, VecDeque};
use std::io::Read;
use std::path::{Component, Path};
use std::sync::Arc;

use bytes::Bytes;
use flowfs_client::{ClientError, ObjectClient, ObjectInfo, Version};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

use crate::error::ArchiveError;
use crate::gzip::Indexer;
use crate::index::{Format, Index, Member, MemberKind};

/// Bytes per GET of the pass.
const PART: u64 = 8 << 20;
/// GETs in flight: 64 MiB ahead of the parser at most.
const DEPTH: usize = 8;

/// Reads the whole of `info` (the archive object) and indexes its members.
pub async fn build(
    client: Arc<dyn ObjectClient>,
    info: &ObjectInfo,
    format: Format,
) -> Result<Index, ArchiveError> {
    let (tx, rx) = mpsc::channel(DEPTH);
    let feed = tokio::spawn(feed(client, info.clone(), tx));
    let (etag, size) = (info.etag.clone(), info.size);
    let parse = tokio::task::spawn_blocking(move || {
        let stream = ObjectStream {
            rx,
            cur: Bytes::new(),
        };
        index_stream(stream, format, etag, size)
    });
    let ix = parse
        .await
        .map_err(|e| ArchiveError::Internal(format!("index task: {e}")))?;
    // The parser may stop before the end (tar's end blocks, zero padding): the feed then
    // finds its receiver gone and stops too.
    feed.abort();
    ix
}

/// Sends the object's bytes in order, `DEPTH` GETs ahead.
async fn feed(
    client: Arc<dyn ObjectClient>,
    info: ObjectInfo,
    tx: mpsc::Sender<Result<Bytes, ClientError>>,
) {
    let mut next = 0u64;
    let mut flight = Flight::default();
    loop {
        while flight.0.len() < DEPTH && next < info.size {
            let (c, key, etag) = (client.clone(), info.key.clone(), info.etag.clone());
            let end = (next + PART).min(info.size);
            let start = next;
            flight.0.push_back(tokio::spawn(async move {
                let of = Version::new(&key, Some(&etag));
                c.get_range(of.range(start, end)).await
            }));
            next = end;
        }
        let Some(front) = flight.0.pop_front() else {
            return;
        };
        let got = match front.await {
            Ok(r) => r,
            Err(e) => Err(ClientError::Other(format!("GET task: {e}"))),
        };
        let failed = got.is_err();
        if tx.send(got).await.is_err() || failed {
            return;
        }
    }
}

/// The feed's GETs in flight, in order; those left when the feed ends (the parser is
/// done, or failed) are aborted, not left to download for nobody.
#[derive(Default)]
struct Flight(VecDeque<JoinHandle<Result<Bytes, ClientError>>>);

impl Drop for Flight {
    fn drop(&mut self) {
        self.0.iter().for_each(JoinHandle::abort);
    }
}

/// The archive's bytes as a `Read`, from the feed.
struct ObjectStream {
    rx: mpsc::Receiver<Result<Bytes, ClientError>>,
    cur: Bytes,
}

impl Read for ObjectStream {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                None => return Ok(0),
                Some(Ok(b)) => self.cur = b,
                Some(Err(e)) => return Err(std::io::Error::other(e)),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur[..n]);
        bytes::Buf::advance(&mut self.cur, n);
        Ok(n)
    }
}

fn index_stream(
    stream: ObjectStream,
    format: Format,
    etag: String,
    size: u64,
) -> Result<Index, ArchiveError> {
    let mut ix = Index {
        format,
        etag,
        size,
        members: BTreeMap::new(),
        skipped: Vec::new(),
        points: Vec::new(),
    };
    match format {
        Format::Tar => walk(stream, &mut ix)?,
        Format::TarGz => {
            let mut gz = Indexer::new(stream).map_err(ArchiveError::from_io)?;
            walk(&mut gz, &mut ix)?;
            ix.points = gz.into_points().map_err(ArchiveError::from_io)?;
        }
    }
    Ok(ix)
}

/// Every header of the tar in `r`, into `ix`.
fn walk(r: impl Read, ix: &mut Index) -> Result<(), ArchiveError> {
    let mut ar = tar::Archive::new(r);
    for e in ar.entries().map_err(ArchiveError::from_io)? {
        let e = e.map_err(ArchiveError::from_io)?;
        add(&e, ix).map_err(ArchiveError::from_io)?;
    }
    if ix.members.is_empty() && ix.skipped.is_empty() {
        return Err(ArchiveError::NotAnArchive("no tar header in it".into()));
    }
    Ok(())
}

/// One tar entry into the index: its path made relative and clean, a hard link resolved
/// to its target's bytes, a GNU sparse file skipped with its reason.
fn add<R: Read>(e: &tar::Entry<'_, R>, ix: &mut Index) -> std::io::Result<()> {
    let path = e.path()?;
    let Some(name) = clean(&path) else {
        ix.skipped.push(format!(
            "{}: a name with `..` or not UTF-8 (not served)",
            path.display()
        ));
        return Ok(());
    };
    if name.is_empty() {
        // The archive's root (`./`): the mount point is the root.
        return Ok(());
    }
    let h = e.header();
    let member = |kind: MemberKind, mode_type: u32, size: u64| Member {
        kind,
        size,
        mode: mode_type | (h.mode().unwrap_or(0o644) & 0o7777),
        uid: h.uid().unwrap_or(0) as u32,
        gid: h.gid().unwrap_or(0) as u32,
        mtime: h.mtime().unwrap_or(0),
    };
    use tar::EntryType as T;
    let (key, member) = match h.entry_type() {
        T::Regular | T::Continuous => {
            let offset = e.raw_file_position();
            (
                name,
                member(MemberKind::File { offset }, libc::S_IFREG, e.size()),
            )
        }
        T::Directory => (
            format!("{name}/"),
            member(MemberKind::Dir, libc::S_IFDIR, 0),
        ),
        T::Symlink => {
            let target = e
                .link_name()?
                .map(|t| t.to_string_lossy().into_owned())
                .unwrap_or_default();
            let size = target.len() as u64;
            (
                name,
                member(MemberKind::Symlink { target }, libc::S_IFLNK, size),
            )
        }
        T::Link => {
            let target = e.link_name()?.and_then(|t| clean(&t));
            match target.and_then(|t| ix.members.get(&t).cloned()) {
                Some(m) => (name, m),
                None => {
                    ix.skipped
                        .push(format!("{name}: a hard link to a member not before it"));
                    return Ok(());
                }
            }
        }
        T::Fifo => (name, member(MemberKind::Special, libc::S_IFIFO, 0)),
        T::Char => (name, member(MemberKind::Special, libc::S_IFCHR, 0)),
        T::Block => (name, member(MemberKind::Special, libc::S_IFBLK, 0)),
        T::GNUSparse => {
            ix.skipped
                .push(format!("{name}: a GNU sparse file (not served)"));
            return Ok(());
        }
        other => {
            ix.skipped
                .push(format!("{name}: tar entry type {:?} (not served)", other));
            return Ok(());
        }
    };
    // A later member of the same name replaces an earlier one, as extraction does.
    ix.members.insert(key, member);
    Ok(())
}

/// A member's path as a key: relative, without `.` parts (empty for the root); `None`
/// for a name with `..` or not UTF-8.
fn clean(p: &Path) -> Option<String> {
    let mut parts = Vec::new();
    for c in p.components() {
        match c {
            Component::Normal(s) => parts.push(s.to_str()?.to_string()),
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
            Component::ParentDir => return None,
        }
    }
    Some(parts.join("/"))
}
