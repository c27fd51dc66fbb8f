//! What the cache keeps on disk, shared by every process on the directory: `objects/`
//! and its lock, the boot state that says whether the files can be trusted, and the
//! format of an entry's one file.
//!
//! An entry is one file, `<h>.cache`: the object's bytes at their own offsets (sparse:
//! only cached chunks use space), then, from the next 4 KiB boundary, a header (magic,
//! size, identity), one `u64` use time per 1 MiB block (milliseconds, for LRU), one
//! `u32` word per 64 KiB chunk (bit 0 present, the rest its generation, bitmap.rs) and
//! an 8-byte trailer with the header's offset. A file appears whole or not at all: it is
//! made under a temporary name and linked into place (`link` fails if another process
//! made it first). A word is set only after the chunk's bytes are written: a process
//! killed at any moment leaves no word that vouches for bytes not there.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use sha2::{Digest, Sha256};

use super::bitmap::present;
use super::shared::Usage;
use super::{BLOCK_CHUNKS, CHUNK};
use crate::dirlock::{open_lock, try_lock};

const MAGIC: &[u8; 8] = b"FLOWFSC2";
const HEADER: u64 = 4096;
const PAGE: u64 = 4096;

/// Where the parts of an entry's file are, for an object of `size` bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Layout {
    pub size: u64,
    pub chunks: u64,
    pub blocks: u64,
    /// The header; its first byte is what users lock shared (an entry in use).
    pub head: u64,
    stamps: u64,
    map: u64,
}

impl Layout {
    pub fn new(size: u64) -> Layout {
        let chunks = size.div_ceil(CHUNK);
        let blocks = chunks.div_ceil(BLOCK_CHUNKS);
        let head = size.next_multiple_of(PAGE);
        let stamps = head + HEADER;
        let map = stamps + (blocks * 8).next_multiple_of(PAGE);
        Layout {
            size,
            chunks,
            blocks,
            head,
            stamps,
            map,
        }
    }

    /// The file's length.
    pub fn len(&self) -> u64 {
        self.map + self.chunks * 4 + 8
    }

    /// Offset of chunk `c`'s word (the range that fetch and eviction locks cover).
    pub fn word(&self, c: u64) -> u64 {
        self.map + c * 4
    }

    fn stamp(&self, b: u64) -> u64 {
        self.stamps + b * 8
    }
}

/// `objects/` under a cache directory, with the lock every live process holds shared.
pub(super) struct Root {
    pub dir: PathBuf,
    pub lock: File,
    pub usage: Usage,
}

/// Opens `objects/` under `cache_dir`. The first process (none holds the lock) checks what
/// earlier runs left (`start`), then every process holds the lock shared until it ends.
pub(super) fn lock_root(cache_dir: &Path) -> io::Result<Root> {
    let dir = cache_dir.join("objects");
    fs::create_dir_all(&dir)?;
    let lock = open_lock(&dir)?;
    let usage = Usage::open(&dir)?;
    if try_lock(&lock) {
        remove_private(&cache_dir.join("objects.private"));
        start(&dir, &usage)?;
    }
    // From exclusive (alone) or nothing to shared. A process clearing the directory
    // holds it exclusively only for that long.
    // SAFETY: flock on an fd we own.
    if unsafe { libc::flock(std::os::unix::io::AsRawFd::as_raw_fd(&lock), libc::LOCK_SH) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(Root { dir, lock, usage })
}

/// Whether no other live process uses the directory whose lock is `lock` (held shared by
/// this one): true leaves it held exclusively.
pub(super) fn alone(lock: &File) -> bool {
    try_lock(lock)
}

/// Private caches of an older flowfs (one per concurrent mount): their mounts are gone.
fn remove_private(root: &Path) {
    let Ok(dirs) = fs::read_dir(root) else {
        return;
    };
    for d in dirs.flatten() {
        let free = File::open(d.path().join("lock")).map_or(true, |l| try_lock(&l));
        if free {
            let _ = fs::remove_dir_all(d.path());
        }
    }
    let _ = fs::remove_dir(root);
}

/// Starts the first run on `dir` (held exclusively): what earlier runs left is kept if it
/// can be trusted, the rest removed, and the byte count set to what is there.
fn start(dir: &Path, usage: &Usage) -> io::Result<()> {
    // Words are written without fsync, and only ever vouch for chunks already written
    // (and stop before a chunk is punched): a killed process loses nothing, the page
    // cache survives it. A machine that went down uncleanly may have lost data a word
    // vouches for, so after a reboot only a clean end is trusted.
    let boot = boot_id();
    let state = fs::read_to_string(dir.join("state")).unwrap_or_default();
    let same_boot = !boot.is_empty() && state.starts_with(&format!("{boot} "));
    let trusted = same_boot || state.ends_with(" clean");
    fs::write(dir.join("state"), format!("{boot} dirty"))?;
    let mut used = 0;
    for e in fs::read_dir(dir)?.flatten() {
        let name = e.file_name().to_string_lossy().to_string();
        if ["lock", "state", "usage"].contains(&name.as_str()) {
            continue;
        }
        let keep = trusted && name.ends_with(".cache");
        match keep.then(|| scan_one(&e.path())).flatten() {
            Some(s) => used += present(&s.words) * CHUNK,
            // Not the lock: a new file of that name would be a second, free lock.
            None => {
                let _ = fs::remove_file(e.path());
            }
        }
    }
    usage.set(used);
    Ok(())
}

/// The last process ends cleanly: what is on disk may be trusted after a reboot.
pub(super) fn mark_clean(dir: &Path) {
    let _ = fs::write(dir.join("state"), format!("{} clean", boot_id()));
}

fn boot_id() -> String {
    fs::read_to_string("/proc/sys/kernel/random/boot_id")
        .map(|s| s.trim().to_string())
        .unwrap_or_default()
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

pub(super) fn entry_path(dir: &Path, hash: &str) -> PathBuf {
    dir.join(format!("{hash}.cache"))
}

fn tmp_path(dir: &Path, hash: &str) -> PathBuf {
    let r: u32 = rand::random();
    dir.join(format!("{hash}.{}-{r:08x}.tmp", std::process::id()))
}

fn open_rw(path: &Path) -> io::Result<File> {
    OpenOptions::new().read(true).write(true).open(path)
}

/// Writes the header and trailer of `l` into `f` and gives it its length (the map all
/// zero: nothing present, unless `full`).
fn format(f: &File, l: &Layout, ident: &str, full: bool) -> io::Result<()> {
    if ident.len() as u64 + 20 > HEADER {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "identity too long",
        ));
    }
    let mut h = Vec::with_capacity(HEADER as usize);
    h.extend_from_slice(MAGIC);
    h.extend_from_slice(&l.size.to_le_bytes());
    h.extend_from_slice(&(ident.len() as u32).to_le_bytes());
    h.extend_from_slice(ident.as_bytes());
    f.set_len(l.len())?;
    f.write_all_at(&h, l.head)?;
    f.write_all_at(&l.head.to_le_bytes(), l.len() - 8)?;
    if full {
        let words: Vec<u32> = (0..l.chunks).map(|_| 3).collect();
        write_words(f, l, 0, &words)?;
        let stamps = vec![now_ms(); l.blocks as usize];
        let raw: Vec<u8> = stamps.iter().flat_map(|s| s.to_le_bytes()).collect();
        f.write_all_at(&raw, l.stamp(0))?;
    }
    Ok(())
}

/// The entry file of an object version, made (empty) if there is none; `Err` of kind
/// `InvalidData` if a file of that name is another version's (it is left alone).
pub(super) fn open_entry(dir: &Path, hash: &str, ident: &str, size: u64) -> io::Result<File> {
    let path = entry_path(dir, hash);
    let l = Layout::new(size);
    let f = match open_rw(&path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            let tmp = tmp_path(dir, hash);
            let made = File::create(&tmp).and_then(|f| format(&f, &l, ident, false));
            let linked = made.and_then(|()| fs::hard_link(&tmp, &path));
            let _ = fs::remove_file(&tmp);
            match linked {
                Ok(()) => {}
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {}
                Err(e) => return Err(e),
            }
            open_rw(&path)?
        }
        Err(e) => return Err(e),
    };
    match read_header(&f) {
        Ok((id2, l2)) if id2 == ident && l2 == l => Ok(f),
        _ => Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "another version's cache file",
        )),
    }
}

/// Makes the file at `src`, which holds all `size` bytes of the version, its complete
/// entry file. False (and `src` as it was) if the version has a file already.
pub(super) fn adopt_file(
    dir: &Path,
    hash: &str,
    ident: &str,
    size: u64,
    src: &Path,
) -> io::Result<bool> {
    let l = Layout::new(size);
    let f = open_rw(src)?;
    format(&f, &l, ident, true)?;
    match fs::hard_link(src, entry_path(dir, hash)) {
        Ok(()) => Ok(true),
        Err(e) => {
            f.set_len(size)?;
            if e.kind() == io::ErrorKind::AlreadyExists {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// The identity and layout an entry file says it has.
pub(super) fn read_header(f: &File) -> io::Result<(String, Layout)> {
    let bad = || io::Error::new(io::ErrorKind::InvalidData, "bad cache file");
    let len = f.metadata()?.len();
    let mut t = [0u8; 8];
    f.read_exact_at(&mut t, len.checked_sub(8).ok_or_else(bad)?)?;
    let head = u64::from_le_bytes(t);
    let mut h = vec![0u8; 20];
    f.read_exact_at(&mut h, head)?;
    if &h[..8] != MAGIC {
        return Err(bad());
    }
    let size = u64::from_le_bytes(h[8..16].try_into().map_err(|_| bad())?);
    let ilen = u32::from_le_bytes(h[16..20].try_into().map_err(|_| bad())?) as usize;
    let l = Layout::new(size);
    if l.head != head || l.len() != len || ilen as u64 + 20 > HEADER {
        return Err(bad());
    }
    let mut ident = vec![0u8; ilen];
    f.read_exact_at(&mut ident, head + 20)?;
    Ok((String::from_utf8(ident).map_err(|_| bad())?, l))
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

/// One entry file as a scan finds it.
pub(super) struct Scanned {
    pub hash: String,
    pub ident: String,
    pub layout: Layout,
    pub words: Vec<u32>,
    pub stamps: Vec<u64>,
}

/// Reads one entry file; `None` if it is not one (or went meanwhile).
pub(super) fn scan_one(path: &Path) -> Option<Scanned> {
    let hash = path
        .file_name()?
        .to_str()?
        .strip_suffix(".cache")?
        .to_string();
    let f = File::open(path).ok()?;
    let (ident, layout) = read_header(&f).ok()?;
    let words = read_words(&f, &layout, 0, layout.chunks).ok()?;
    let stamps = read_stamps(&f, &layout).ok()?;
    Some(Scanned {
        hash,
        ident,
        layout,
        words,
        stamps,
    })
}

/// Every entry file of `dir`.
pub(super) fn scan(dir: &Path) -> Vec<Scanned> {
    let Ok(rd) = fs::read_dir(dir) else {
        return Vec::new();
    };
    rd.flatten().filter_map(|e| scan_one(&e.path())).collect()
}
