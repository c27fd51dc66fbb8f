//! Small versions packed (issue 48): an admitted version of at most `SMALL` bytes is not
//! an entry of two files (two inodes, a sidecar's header, five lock calls; a quarter of
//! the mount's CPU in B11 went to ext4 making them) but a record appended to a segment,
//! `objects/small/<id>`, found through the index every process shares,
//! `objects/small/index`.
//!
//! Each process appends to a segment of its own, which it holds locked (flock) while it
//! may still append. A record (header, identity, bytes) is written whole before the
//! index's slot names it, and never changed: a slot never names bytes that are not there.
//! The index is a hint, as the record of opens is (admit.rs): 2^16 buckets of 8 slots of 32
//! bytes (16 MiB, sparse), a bucket per version by its hash, read and written with one
//! `pread` and one `pwrite`; a version pushed out of its bucket (by 8 others) is no longer
//! found, and is fetched again. (One slot per version lost 16 of 2,000 to collisions.) A
//! reader checks the record's header (hash, identity, size) before it uses its bytes.
//!
//! Eviction (evict.rs) takes whole segments, by their last write among the entries'
//! blocks by their last use (first in, first out: reading a small version does not renew
//! it), never one a live process may append to. A reader that has a segment open keeps
//! its bytes until it closes it. A process syncs its segment at its end (`sync`); after
//! an unclean reboot nothing of `small/` is kept (root.rs, `start`).

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use parking_lot::Mutex;

use crate::dirlock::try_lock;

/// The directory of the segments, under `objects/`.
pub(super) const DIR: &str = "small";
const INDEX: &str = "index";
const MAGIC: &[u8; 8] = b"FLOWFSS1";
/// A record's header: magic, the version's hash (64 hex digits), its size, the length of
/// its identity (which follows, then its bytes).
const HEAD: usize = 8 + 64 + 8 + 4;
const BUCKETS: u64 = 1 << 16;
const WAYS: usize = 8;
/// A slot: the version's tag (0: empty), its segment, the record's offset and length.
const SLOT: usize = 32;
const BUCKET: usize = WAYS * SLOT;
/// A segment is as large as this at most (or one record), and a 64th of the cache: an
/// eviction of one takes no more than that.
const SEGMENT_MAX: u64 = 16 << 20;

/// The packed versions of a cache directory.
pub(super) struct Small {
    dir: PathBuf,
    index: Option<File>,
    segment_max: u64,
    /// The segment this process appends to; only `put` takes it.
    writer: Mutex<Option<Segment>>,
}

/// A segment this process appends to: its file (locked while open) and its end.
struct Segment {
    id: u64,
    file: Arc<File>,
    end: u64,
}

/// Room reserved for a record: its segment's id and file, its offset, and the segment
/// this reservation found full, if any (synced at once; a record still being written to
/// it is synced by its own `put`).
struct Room {
    id: u64,
    file: Arc<File>,
    off: u64,
    full: Option<Arc<File>>,
}

/// Where the bytes of a packed version are: an open segment and their offset in it.
pub(super) struct Packed {
    file: Arc<File>,
    data: u64,
    size: u64,
}

impl Packed {
    /// Bytes `[off, off + len)` of the version (fewer at its end).
    pub(super) fn read(&self, off: u64, len: usize) -> io::Result<Vec<u8>> {
        let end = (off + len as u64).min(self.size);
        let mut buf = vec![0u8; end.saturating_sub(off) as usize];
        self.file.read_exact_at(&mut buf, self.data + off)?;
        Ok(buf)
    }
}

/// A segment as eviction sees it.
pub(super) struct SegmentFile {
    pub path: PathBuf,
    pub bytes: u64,
    /// Its last write, in milliseconds since the epoch (its blocks' use time).
    pub stamp: u64,
}

impl Small {
    /// Opens (or makes) `objects/small` under `objects` (`dir`). Without its index every
    /// version is fetched as if it had never been packed.
    pub(super) fn open(dir: &Path, capacity: u64) -> Small {
        let dir = dir.join(DIR);
        let index = fs::create_dir_all(&dir)
            .and_then(|()| open_private(&dir.join(INDEX), false))
            .and_then(|f| {
                if f.metadata()?.len() != BUCKETS * BUCKET as u64 {
                    f.set_len(BUCKETS * BUCKET as u64)?;
                }
                Ok(f)
            });
        let index = index
            .inspect_err(|e| tracing::warn!("the cache's index of small files cannot be used: {e}"))
            .ok();
        Small {
            dir,
            index,
            segment_max: (capacity / 64).clamp(1 << 20, SEGMENT_MAX),
            writer: Mutex::new(None),
        }
    }

    /// The record of the version `hash` (identity `ident`, `size` bytes), if a process
    /// packed it and its segment is still there: one `pread` of its slot, then an open and
    /// a `pread` of its header.
    pub(super) fn find(&self, hash: &str, ident: &str, size: u64) -> Option<Packed> {
        let (tag, at) = place(hash);
        let mut bucket = [0u8; BUCKET];
        self.index.as_ref()?.read_exact_at(&mut bucket, at).ok()?;
        let [_, id, off, _len] = slots(&bucket).find(|s| s[0] == tag)?;
        let file = File::open(self.dir.join(segment_name(id))).ok()?;
        let mut head = vec![0u8; HEAD + ident.len()];
        file.read_exact_at(&mut head, off).ok()?;
        if head != header(hash, ident, size) {
            return None;
        }
        Some(Packed {
            file: Arc::new(file),
            data: off + head.len() as u64,
            size,
        })
    }

    /// Appends the version `hash` (`parts`: all its bytes, in order) to this process's
    /// segment and names it in the index: its record, and the bytes the directory holds
    /// more. Blocks on the disk.
    pub(super) fn put(
        &self,
        hash: &str,
        ident: &str,
        parts: &[Bytes],
    ) -> io::Result<(Packed, u64)> {
        let size: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let head = header(hash, ident, size);
        let len = head.len() as u64 + size;
        let Room {
            id,
            file,
            off,
            full,
        } = self.reserve(len)?;
        file.write_all_at(&head, off)?;
        let mut at = off + head.len() as u64;
        for p in parts {
            file.write_all_at(p, at)?;
            at += p.len() as u64;
        }
        if let Some(full) = full {
            // No more records go to it: its bytes are made durable now, not at the end.
            let _ = full.sync_data();
        }
        if self.writer.lock().as_ref().is_some_and(|s| s.id != id) {
            // Another `put` found this segment full while this record was being written,
            // and may have synced it before: `sync` at the end no longer sees it.
            let _ = file.sync_data();
        }
        if let Some(index) = &self.index {
            name(index, hash, [id, off, len])?;
        }
        let data = off + head.len() as u64;
        Ok((Packed { file, data, size }, len))
    }

    /// Room for a record of `len` bytes in this process's segment (a new one when it is
    /// full). Only `put` takes the writer lock; a new segment is made under it.
    fn reserve(&self, len: u64) -> io::Result<Room> {
        let mut w = self.writer.lock();
        let full = match &*w {
            Some(s) if s.end == 0 || s.end + len <= self.segment_max => None,
            _ => {
                let new = self.new_segment()?;
                w.replace(new).map(|old| old.file)
            }
        };
        let s = w.as_mut().expect("a segment");
        let off = s.end;
        s.end += len;
        Ok(Room {
            id: s.id,
            file: s.file.clone(),
            off,
            full,
        })
    }

    /// A new segment of this process, locked before any other process can see it whole.
    fn new_segment(&self) -> io::Result<Segment> {
        loop {
            let id: u64 = rand::random();
            let file = match open_private(&self.dir.join(segment_name(id)), true) {
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                f => f?,
            };
            if !try_lock(&file) {
                return Err(io::Error::other(
                    "a new segment is locked by another process",
                ));
            }
            let file = Arc::new(file);
            return Ok(Segment { id, file, end: 0 });
        }
    }

    /// Makes what this process appended durable (at its end).
    pub(super) fn sync(&self) {
        if let Some(s) = &*self.writer.lock() {
            let _ = s.file.sync_data();
        }
        if let Some(index) = &self.index {
            let _ = index.sync_data();
        }
        if let Ok(d) = File::open(&self.dir) {
            let _ = d.sync_all();
        }
    }

    /// Every segment of the directory, for eviction.
    pub(super) fn segments(&self) -> Vec<SegmentFile> {
        segments(&self.dir)
    }

    /// Removes `s` unless a live process may still append to it: the bytes freed.
    pub(super) fn evict(&self, s: &SegmentFile) -> Option<u64> {
        let f = File::open(&s.path).ok()?;
        if !try_lock(&f) {
            return None;
        }
        fs::remove_file(&s.path).ok()?;
        Some(s.bytes)
    }
}

/// The segments under `small` (`dir`), with their sizes and last writes.
fn segments(dir: &Path) -> Vec<SegmentFile> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    let ms = |m: &fs::Metadata| {
        let t = m.modified().ok()?;
        let d = t.duration_since(std::time::UNIX_EPOCH).ok()?;
        Some(d.as_millis() as u64)
    };
    rd.flatten()
        .filter(|e| e.file_name() != INDEX)
        .filter_map(|e| {
            let m = e.metadata().ok()?;
            Some(SegmentFile {
                path: e.path(),
                bytes: m.len(),
                stamp: ms(&m).unwrap_or(0),
            })
        })
        .collect()
}

/// At the first process's start (root.rs): what earlier runs packed is kept if the
/// directory can be trusted, else removed; the bytes kept.
pub(super) fn start(objects: &Path, trusted: bool) -> u64 {
    let dir = objects.join(DIR);
    let mut kept = 0;
    for s in segments(&dir) {
        if trusted && s.bytes > 0 {
            kept += s.bytes;
        } else {
            let _ = fs::remove_file(&s.path);
        }
    }
    if !trusted {
        let _ = fs::remove_file(dir.join(INDEX));
    }
    kept
}

/// Removes every segment (`flowfs cache clear`): the bytes removed. The index stays (a
/// live process has it open; its slots now name no segment).
pub(super) fn clear(objects: &Path) -> u64 {
    let mut gone = 0;
    for s in segments(&objects.join(DIR)) {
        if fs::remove_file(&s.path).is_ok() {
            gone += s.bytes;
        }
    }
    gone
}

/// The identity and size of every version packed under `objects` (`flowfs cache
/// stats`): records are read one after another, up to the first that is not whole.
pub(super) fn records(objects: &Path) -> Vec<(String, u64)> {
    let mut out = Vec::new();
    for s in segments(&objects.join(DIR)) {
        let Ok(f) = File::open(&s.path) else {
            continue;
        };
        let mut off = 0;
        let mut head = [0u8; HEAD];
        while off + HEAD as u64 <= s.bytes && f.read_exact_at(&mut head, off).is_ok() {
            if &head[..8] != MAGIC {
                break;
            }
            let size = u64::from_le_bytes(head[72..80].try_into().expect("8 bytes"));
            let n = u32::from_le_bytes(head[80..84].try_into().expect("4 bytes")) as usize;
            let mut ident = vec![0u8; n];
            let end = off + (HEAD + n) as u64 + size;
            if end > s.bytes || f.read_exact_at(&mut ident, off + HEAD as u64).is_err() {
                break;
            }
            out.push((String::from_utf8_lossy(&ident).into_owned(), size));
            off = end;
        }
    }
    out
}

/// A record's header and identity, as written and as a reader expects them.
fn header(hash: &str, ident: &str, size: u64) -> Vec<u8> {
    let mut h = Vec::with_capacity(HEAD + ident.len());
    h.extend_from_slice(MAGIC);
    let mut hex = [b'0'; 64];
    let n = hash.len().min(64);
    hex[..n].copy_from_slice(&hash.as_bytes()[..n]);
    h.extend_from_slice(&hex);
    h.extend_from_slice(&size.to_le_bytes());
    h.extend_from_slice(&(ident.len() as u32).to_le_bytes());
    h.extend_from_slice(ident.as_bytes());
    h
}

/// Names the record `[segment, offset, length]` of the version `hash` in its bucket of
/// the index: in its own slot if it has one, else an empty one, else one of the 8 at
/// random (a read, then a write of 32 bytes: two processes naming two versions of one
/// bucket at once may both take one empty slot, and one of the two is fetched again).
fn name(index: &File, hash: &str, record: [u64; 3]) -> io::Result<()> {
    let (tag, at) = place(hash);
    let mut bucket = [0u8; BUCKET];
    index.read_exact_at(&mut bucket, at)?;
    let way = (slots(&bucket).position(|s| s[0] == tag))
        .or_else(|| slots(&bucket).position(|s| s[0] == 0))
        .unwrap_or_else(|| rand::random::<usize>() % WAYS);
    let mut slot = [0u8; SLOT];
    for (i, w) in [tag, record[0], record[1], record[2]].iter().enumerate() {
        slot[i * 8..i * 8 + 8].copy_from_slice(&w.to_le_bytes());
    }
    index.write_all_at(&slot, at + (way * SLOT) as u64)
}

/// The slots of a bucket, each as its four words.
fn slots(bucket: &[u8; BUCKET]) -> impl Iterator<Item = [u64; 4]> + '_ {
    bucket.chunks_exact(SLOT).map(|s| {
        std::array::from_fn(|i| u64::from_le_bytes(s[i * 8..i * 8 + 8].try_into().expect("8")))
    })
}

/// The tag of a version (never 0, an empty slot) and its bucket's offset in the index.
fn place(hash: &str) -> (u64, u64) {
    let (tag, bucket) = super::admit::slot_of(hash, BUCKETS);
    (tag, bucket * BUCKET as u64)
}

fn segment_name(id: u64) -> String {
    format!("{id:016x}")
}

/// A file readable by its owner only; `new`: it must not exist yet.
fn open_private(path: &Path, new: bool) -> io::Result<File> {
    let mut o = OpenOptions::new();
    o.read(true).write(true).mode(0o600);
    if new {
        o.create_new(true);
    } else {
        o.create(true).truncate(false);
    }
    o.open(path)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(i: u32) -> String {
        use sha2::{Digest, Sha256};
        let d = Sha256::digest(i.to_le_bytes());
        d.iter().map(|b| format!("{b:02x}")).collect()
    }

    #[test]
    fn thousands_of_versions_are_all_found_and_only_as_themselves() {
        let dir = tempfile::tempdir().unwrap();
        let small = Small::open(dir.path(), 1 << 30);
        let n = 3000;
        for i in 0..n {
            let data = Bytes::from(vec![i as u8; 100 + i as usize % 7]);
            small.put(&hash(i), &format!("b\0k{i}"), &[data]).unwrap();
        }
        // A new process on the directory.
        let other = Small::open(dir.path(), 1 << 30);
        for i in 0..n {
            let (h, ident, size) = (hash(i), format!("b\0k{i}"), 100 + i as u64 % 7);
            let p = other.find(&h, &ident, size).expect("found");
            assert_eq!(p.read(0, 1000).unwrap(), vec![i as u8; size as usize]);
            assert!(other.find(&h, &ident, size + 1).is_none(), "another size");
            assert!(
                other.find(&h, "b\0other", size).is_none(),
                "another identity"
            );
        }
        let mode = fs::metadata(dir.path().join(DIR).join(INDEX)).unwrap();
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(mode.permissions().mode() & 0o777, 0o600);
        assert_eq!(records(dir.path()).len(), n as usize);
    }
}
