//! The format of an entry's two files, shared by every process on the directory (root.rs
//! opens the directory itself).
//!
//! An entry is two files. The data file, `<h>.<tag>.bytes`, holds exactly the object's
//! bytes at their own offsets (sparse: only cached chunks use space); its length is the
//! object's size, so that the kernel may read it directly in place of the FUSE file
//! (passthrough does not clamp reads to the FUSE file's size). The sidecar, `<h>.map`, is
//! the entry: a 4 KiB header (magic, size, the data file's tag, identity), one `u64` use
//! time per 1 MiB block (milliseconds, for LRU) and one `u32` word per 64 KiB chunk (bit
//! 0 present, the rest its generation, bitmap.rs). Every lock of the entry is on the
//! sidecar (shared.rs, entry/, pin.rs).
//!
//! The sidecar names its data file by a random tag, so that a sidecar is never paired
//! with another sidecar's data file: the data file is made first under its final (unique)
//! name, then the sidecar under a temporary name, linked into place last (`link` fails if
//! another process made it first; the loser removes its data file). A reader finds the
//! sidecar, then the data file through it. Removal goes the other way: the sidecar, then
//! the data file. A process killed in between leaves a data file no sidecar names, with
//! nothing cached in it (a file is removed only once nothing is present); the first
//! process on the directory removes it. A word is set only after the chunk's bytes are
//! written: a process killed at any moment leaves no word that vouches for bytes not there.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::{BLOCK_CHUNKS, CHUNK};

const MAGIC: &[u8; 8] = b"FLOWFSC3";
const HEADER: u64 = 4096;
const PAGE: u64 = 4096;
/// Magic, size, tag and the identity's length, before the identity.
const FIXED: usize = 28;

/// The sidecar's byte every process using the entry locks shared (an entry in use: only
/// unused sidecars are removed).
pub(super) const INUSE: u64 = 0;
/// The sidecar's byte a pin locks shared and eviction exclusively (pin.rs).
pub(super) const PIN: u64 = 1;

/// Where the parts of an entry's sidecar are, for an object of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    pub size: u64,
    pub chunks: u64,
    pub blocks: u64,
    stamps: u64,
    map: u64,
}

impl Layout {
    pub fn new(size: u64) -> Layout {
        let chunks = size.div_ceil(CHUNK);
        let blocks = chunks.div_ceil(BLOCK_CHUNKS);
        let stamps = HEADER;
        let map = stamps + (blocks * 8).next_multiple_of(PAGE);
        Layout {
            size,
            chunks,
            blocks,
            stamps,
            map,
        }
    }

    /// The sidecar's length.
    pub fn len(&self) -> u64 {
        self.map + self.chunks * 4
    }

    /// Offset of chunk `c`'s word in the sidecar (the range that fetch and eviction
    /// locks cover).
    pub fn word(&self, c: u64) -> u64 {
        self.map + c * 4
    }

    fn stamp(&self, b: u64) -> u64 {
        self.stamps + b * 8
    }
}

/// What names an object version in the cache: its identity (bucket, key, ETag and size,
/// kept in its header) and the hash of that, which names its file. A changed object is
/// another version: it never reads the bytes of the old one.
pub(super) fn identity(bucket: &str, key: &str, etag: &str, size: u64) -> (String, String) {
    let ident = format!("{bucket}\0{key}\0{etag}\0{size}");
    let d = Sha256::digest(ident.as_bytes());
    let hash = d.iter().take(16).map(|b| format!("{b:02x}")).collect();
    (ident, hash)
}

/// The sidecar of an entry: the entry itself, found by its name.
pub(super) fn map_path(dir: &Path, hash: &str) -> PathBuf {
    dir.join(format!("{hash}.map"))
}

/// The name of the data file the sidecar with `tag` names.
pub(super) fn data_name(hash: &str, tag: u64) -> String {
    format!("{hash}.{tag:016x}.bytes")
}

pub(super) fn data_path(dir: &Path, hash: &str, tag: u64) -> PathBuf {
    dir.join(data_name(hash, tag))
}

fn tmp_path(dir: &Path, hash: &str) -> PathBuf {
    let r: u32 = rand::random();
    dir.join(format!("{hash}.{}-{r:08x}.tmp", std::process::id()))
}

fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

fn invalid(what: &str) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, what.to_string())
}

/// What an entry's sidecar says of it.
pub(super) struct Header {
    pub ident: String,
    pub layout: Layout,
    /// Names the data file (`data_name`).
    pub tag: u64,
}

/// Writes the header of `l` into the sidecar `f` and gives it its length (the map all
/// zero: nothing present, unless `full`).
fn format(f: &File, l: &Layout, ident: &str, tag: u64, full: bool) -> io::Result<()> {
    if (ident.len() + FIXED) as u64 > HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "identity too long",
        ));
    }
    let mut h = Vec::with_capacity(HEADER as usize);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&l.size.to_le_bytes());
    h.extend_from_slice(&tag.to_le_bytes());
    h.extend_from_slice(&(ident.len() as u32).to_le_bytes());
    h.extend_from_slice(ident.as_bytes());
    f.set_len(l.len())?;
    f.write_all_at(&h, 0)?;
    if full {
        let words: Vec<u32> = (0..l.chunks).map(|_| 3).collect();
        write_words(f, l, 0, &words)?;
        let stamps = vec![now_ms(); l.blocks as usize];
        let raw: Vec<u8> = stamps.iter().flat_map(|s| s.to_le_bytes()).collect();
        f.write_all_at(&raw, l.stamp(0))?;
    }
    Ok(())
}

/// An entry's files as `open_entry` finds or makes them.
pub(super) struct OpenedEntry {
    /// The sidecar, read-write.
    pub map: File,
    /// Names the data file.
    pub tag: u64,
    /// The data file, read-write, when this call made the entry (else opened by the
    /// caller once it holds the entry in use).
    pub data: Option<File>,
}

/// The sidecar of an object version and its data file's tag, made (with an empty data
/// file) if there is none and `make` (else `Err` of kind `NotFound`); `Err` of kind
/// `InvalidData` if a sidecar of that name is another version's (it is left alone). An entry made here comes with its files as
/// made: the sidecar is not opened and read again (a cold object's open cost 10 system
/// calls more that way).
pub(super) fn open_entry(
    dir: &Path,
    hash: &str,
    ident: &str,
    size: u64,
    make: bool,
) -> io::Result<OpenedEntry> {
    let path = map_path(dir, hash);
    let l = Layout::new(size);
    let f = match open_rw(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound && make => {
            match make_entry(dir, hash, ident, &l)? {
                Some(made) => return Ok(made),
                // Another process made it first.
                None => open_rw(&path)?,
            }
        }
        Err(e) => return Err(e),
    };
    match read_header(&f) {
        Ok(h) if h.ident == ident && h.layout == l => Ok(OpenedEntry {
            map: f,
            tag: h.tag,
            data: None,
        }),
        Ok(_) => Err(invalid("another version's cache file")),
        Err(e) => Err(e),
    }
}

/// Makes an empty entry: its data file (the object's length, all hole) under its own
/// name, then its sidecar, linked into place last. Another process that made it first
/// wins (`None`); this one's data file goes.
fn make_entry(dir: &Path, hash: &str, ident: &str, l: &Layout) -> io::Result<Option<OpenedEntry>> {
    let tag: u64 = rand::random();
    let data = data_path(dir, hash, tag);
    let made = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&data)
        .and_then(|f| f.set_len(l.size).map(|()| f));
    let linked = made.and_then(|f| Ok((f, link_sidecar(dir, hash, ident, l, tag, false)?)));
    match linked {
        Ok((data, Some(map))) => Ok(Some(OpenedEntry {
            map,
            tag,
            data: Some(data),
        })),
        r => {
            let _ = fs::remove_file(&data);
            r.map(|_| None)
        }
    }
}

/// Makes the sidecar of the data file with `tag` (made already) under a temporary name
/// and links it into place: the sidecar, open read-write; `None` if the version has a
/// sidecar already.
fn link_sidecar(
    dir: &Path,
    hash: &str,
    ident: &str,
    l: &Layout,
    tag: u64,
    full: bool,
) -> io::Result<Option<File>> {
    let tmp = tmp_path(dir, hash);
    let made = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&tmp)
        .and_then(|f| format(&f, l, ident, tag, full).map(|()| f));
    let linked = made.and_then(|f| fs::hard_link(&tmp, map_path(dir, hash)).map(|()| f));
    let _ = fs::remove_file(&tmp);
    match linked {
        Ok(f) => Ok(Some(f)),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => Ok(None),
        Err(e) => Err(e),
    }
}

/// Makes the file at `src`, which holds all `size` bytes of the version, the data file
/// of a complete entry (a second link to it: `src` itself is left as it was). False if
/// the version has an entry already.
pub(super) fn adopt_file(
    dir: &Path,
    hash: &str,
    ident: &str,
    size: u64,
    src: &Path,
) -> io::Result<bool> {
    if fs::metadata(src)?.len() != size {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "the file is not the object's size",
        ));
    }
    let l = Layout::new(size);
    let tag: u64 = rand::random();
    let data = data_path(dir, hash, tag);
    fs::hard_link(src, &data)?;
    match link_sidecar(dir, hash, ident, &l, tag, true) {
        Ok(Some(_)) => Ok(true),
        r => {
            let _ = fs::remove_file(&data);
            r.map(|_| false)
        }
    }
}

/// The data file of the sidecar with `tag`; `InvalidData` if it is not the object's
/// length (damaged: the entry is made anew).
pub(super) fn open_data(dir: &Path, hash: &str, tag: u64, size: u64) -> io::Result<File> {
    let f = open_rw(&data_path(dir, hash, tag))?;
    if f.metadata()?.len() != size {
        return Err(invalid("cache data file of the wrong length"));
    }
    Ok(f)
}

/// Removes a damaged entry (its sidecar does not parse, or names a data file that is
/// not there): the sidecar, then the data file if the sidecar still names one.
pub(super) fn remove_damaged(dir: &Path, hash: &str) {
    let path = map_path(dir, hash);
    let tag = File::open(&path).ok().and_then(|f| read_header(&f).ok());
    let _ = fs::remove_file(&path);
    if let Some(h) = tag {
        let _ = fs::remove_file(data_path(dir, hash, h.tag));
    }
}

/// What a sidecar says it is.
pub(super) fn read_header(f: &File) -> io::Result<Header> {
    let len = f.metadata()?.len();
    let mut h = [0u8; FIXED];
    f.read_exact_at(&mut h, 0).map_err(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => invalid("short cache file"),
        _ => e,
    })?;
    let u64_at = |i: usize| {
        let mut b = [0u8; 8];
        b.copy_from_slice(&h[i..i + 8]);
        u64::from_le_bytes(b)
    };
    let (size, tag) = (u64_at(8), u64_at(16));
    let ilen = u32::from_le_bytes([h[24], h[25], h[26], h[27]]) as usize;
    let layout = Layout::new(size);
    if &h[..8] != MAGIC || layout.len() != len || (ilen + FIXED) as u64 > HEADER {
        return Err(invalid("bad cache file"));
    }
    let mut ident = vec![0u8; ilen];
    f.read_exact_at(&mut ident, FIXED as u64)?;
    let ident = String::from_utf8(ident).map_err(|_| invalid("bad cache file"))?;
    Ok(Header { ident, layout, tag })
}

/// The words of chunks `[c0, c1)`.
pub(super) fn read_words(f: &File, l: &Layout, c0: u64, c1: u64) -> io::Result<Vec<u32>> {
    let mut raw = vec![0u8; ((c1 - c0) * 4) as usize];
    f.read_exact_at(&mut raw, l.word(c0))?;
    Ok(raw
        .chunks_exact(4)
        .map(|w| u32::from_le_bytes([w[0], w[1], w[2], w[3]]))
        .collect())
}

/// Writes the words of chunks from `c0` on.
pub(super) fn write_words(f: &File, l: &Layout, c0: u64, words: &[u32]) -> io::Result<()> {
    let raw: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
    f.write_all_at(&raw, l.word(c0))
}

/// The use times of every block.
pub(super) fn read_stamps(f: &File, l: &Layout) -> io::Result<Vec<u64>> {
    let mut raw = vec![0u8; (l.blocks * 8) as usize];
    f.read_exact_at(&mut raw, l.stamp(0))?;
    Ok(raw
        .chunks_exact(8)
        .map(|w| u64::from_le_bytes(w.try_into().unwrap_or([0; 8])))
        .collect())
}

/// Block `b` was used at `ms`.
pub(super) fn write_stamp(f: &File, l: &Layout, b: u64, ms: u64) {
    let _ = f.write_all_at(&ms.to_le_bytes(), l.stamp(b));
}

pub(super) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// One entry as a scan finds it (its sidecar).
pub(super) struct Scanned {
    pub hash: String,
    pub ident: String,
    pub tag: u64,
    pub layout: Layout,
    pub words: Vec<u32>,
    pub stamps: Vec<u64>,
}

/// Reads one sidecar; `None` if it is not one (or went meanwhile).
pub(super) fn scan_one(path: &Path) -> Option<Scanned> {
    let hash = path
        .file_name()?
        .to_str()?
        .strip_suffix(".map")?
        .to_string();
    let f = File::open(path).ok()?;
    let h = read_header(&f).ok()?;
    let words = read_words(&f, &h.layout, 0, h.layout.chunks).ok()?;
    let stamps = read_stamps(&f, &h.layout).ok()?;
    Some(Scanned {
        hash,
        ident: h.ident,
        tag: h.tag,
        layout: h.layout,
        words,
        stamps,
    })
}

/// Every entry of `dir`.
pub(super) fn scan(dir: &Path) -> Vec<Scanned> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten().filter_map(|e| scan_one(&e.path())).collect()
}
