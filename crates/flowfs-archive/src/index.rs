//! The index of one archive version: every member by its path, what it is and where its
//! bytes are in the archive's uncompressed stream, plus (for gzip) the restart points.
//! Kept in the node cache as `<archive>-<version>.idx` (JSON, one object per member) and
//! `.gzi` (the restart points, binary: each carries 32 KiB of window), `<archive>` a hash of
//! the archive's bucket and key and `<version>` of those and its ETag and size, so that a
//! changed archive is never served from a stale index; written by rename so that a reader
//! never sees half of one, and the other versions' files dropped when a new one is kept.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::error::ArchiveError;
use crate::gzip::Point;

/// What the archive's bytes are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Format {
    /// A plain tar: a member's bytes are a range of the object.
    Tar,
    /// A gzip-compressed tar (`.tar.gz`, `.tgz`): a member is inflated from the nearest
    /// restart point before it.
    TarGz,
}

/// What a member is.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum MemberKind {
    /// A regular file (or a hard link to one): its bytes start at `offset` of the
    /// uncompressed tar stream.
    #[serde(rename = "f")]
    File {
        #[serde(rename = "o")]
        offset: u64,
    },
    /// A directory.
    #[serde(rename = "d")]
    Dir,
    /// A symbolic link to `target`.
    #[serde(rename = "l")]
    Symlink {
        #[serde(rename = "t")]
        target: String,
    },
    /// A FIFO or device node (its type is in the mode): no bytes.
    #[serde(rename = "s")]
    Special,
}

/// One member, with its attributes as the archive stores them.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Member {
    #[serde(rename = "k")]
    pub kind: MemberKind,
    /// Bytes of content (a symlink's: its target's length).
    #[serde(rename = "n")]
    pub size: u64,
    /// `st_mode`, type bits included.
    #[serde(rename = "m")]
    pub mode: u32,
    #[serde(rename = "u")]
    pub uid: u32,
    #[serde(rename = "g")]
    pub gid: u32,
    /// Seconds since the epoch.
    #[serde(rename = "t")]
    pub mtime: u64,
}

/// An archive's members, keyed as the object store would key them: a file by its path
/// (`a/b.txt`), a directory by its path and a slash (`a/`), so that a listing of the
/// index is a range of this map, as a LIST is a range of a bucket.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Index {
    pub format: Format,
    /// The archive's ETag and size: the version this index describes.
    pub etag: String,
    pub size: u64,
    pub members: BTreeMap<String, Member>,
    /// Members left out, each with why (a GNU sparse file, a name with `..`).
    pub skipped: Vec<String>,
    /// Restart points of a gzip archive, in order (not in the JSON file).
    #[serde(skip)]
    pub points: Vec<Point>,
}

/// The files an index of one archive version lives in, below the cache directory.
#[derive(Clone)]
pub struct IndexFiles {
    json: PathBuf,
    points: PathBuf,
}

impl IndexFiles {
    /// The files for the archive `ident` (its bucket and key) at `etag` and `size`:
    /// `<archive>-<version>.idx`, so that the files of the archive's other versions can be
    /// found and dropped.
    pub fn new(cache_dir: &Path, ident: &str, etag: &str, size: u64) -> IndexFiles {
        let short = |text: String| -> String {
            let d = Sha256::digest(text.as_bytes());
            d.iter().take(8).map(|b| format!("{b:02x}")).collect()
        };
        let archive = short(ident.to_string());
        let version = short(format!("{ident}\0{etag}\0{size}"));
        let dir = cache_dir.join("archives");
        IndexFiles {
            json: dir.join(format!("{archive}-{version}.idx")),
            points: dir.join(format!("{archive}-{version}.gzi")),
        }
    }

    /// The index kept for this version, if there is a whole one.
    pub fn load(&self) -> Option<Index> {
        let text = std::fs::read(&self.json).ok()?;
        let mut ix: Index = serde_json::from_slice(&text).ok()?;
        if ix.format == Format::TarGz {
            ix.points = read_points(&self.points).ok()?;
        }
        Some(ix)
    }

    /// Keeps `ix` for later mounts: points first, then the JSON, each by rename, so a
    /// JSON file present means its points are too.
    pub fn save(&self, ix: &Index) -> Result<(), ArchiveError> {
        let dir = self.json.parent().expect("index files live in a directory");
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::disk("index dir", e))?;
        if ix.format == Format::TarGz {
            write_atomic(&self.points, |f| write_points(f, &ix.points))?;
        }
        write_atomic(&self.json, |f| {
            serde_json::to_writer(std::io::BufWriter::new(f), ix).map_err(std::io::Error::other)
        })?;
        self.drop_other_versions();
        Ok(())
    }

    /// Removes the files of this archive's other versions (a mount still serving one has
    /// its index in memory). Best effort: a file left is only disk.
    fn drop_other_versions(&self) {
        let Some(stem) = self.json.file_stem().and_then(|s| s.to_str()) else {
            return;
        };
        let Some((archive, _)) = stem.split_once('-') else {
            return;
        };
        let prefix = format!("{archive}-");
        let dir = self.json.parent().expect("index files live in a directory");
        let Ok(entries) = std::fs::read_dir(dir) else {
            return;
        };
        for e in entries.flatten() {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let other = name.split_once('.').map_or(name, |(s, _)| s);
            if other.starts_with(&prefix) && other != stem {
                let _ = std::fs::remove_file(e.path());
            }
        }
    }

    /// The right to build this version's index, held until the file returned is dropped
    /// (or its process ends): two mounts or `flowfs run` tasks on one cache dir build an
    /// index once; the second waits for the first (a blocking `flock`, on a blocking
    /// thread) and then loads what it kept.
    pub fn lock(&self) -> Result<std::fs::File, ArchiveError> {
        use std::os::fd::AsRawFd;
        use std::os::unix::fs::OpenOptionsExt;
        let dir = self.json.parent().expect("index files live in a directory");
        std::fs::create_dir_all(dir).map_err(|e| ArchiveError::disk("index dir", e))?;
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .mode(0o600)
            .open(self.json.with_extension("lock"))
            .map_err(|e| ArchiveError::disk("index lock", e))?;
        loop {
            // SAFETY: flock on a descriptor this function owns.
            if unsafe { libc::flock(f.as_raw_fd(), libc::LOCK_EX) } == 0 {
                return Ok(f);
            }
            let e = std::io::Error::last_os_error();
            if e.kind() != std::io::ErrorKind::Interrupted {
                return Err(ArchiveError::disk("index lock", e));
            }
        }
    }

    /// The JSON file (tests, `cache stats`).
    pub fn json(&self) -> &Path {
        &self.json
    }
}

fn write_atomic(
    path: &Path,
    fill: impl FnOnce(&mut std::fs::File) -> std::io::Result<()>,
) -> Result<(), ArchiveError> {
    let tmp = path.with_extension(format!("tmp{}", std::process::id()));
    let done = (|| {
        let mut f = std::fs::File::create(&tmp)?;
        fill(&mut f)?;
        f.sync_all()?;
        std::fs::rename(&tmp, path)
    })();
    if done.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    done.map_err(|e| ArchiveError::disk("index file", e))
}

const POINTS_MAGIC: &[u8; 8] = b"FLOWGZI2";

fn write_points(f: &mut std::fs::File, points: &[Point]) -> std::io::Result<()> {
    let mut w = std::io::BufWriter::new(f);
    w.write_all(POINTS_MAGIC)?;
    w.write_all(&(points.len() as u64).to_le_bytes())?;
    for p in points {
        w.write_all(&p.input.to_le_bytes())?;
        w.write_all(&p.output.to_le_bytes())?;
        w.write_all(&[p.bits])?;
        w.write_all(&p.span.to_le_bytes())?;
        w.write_all(&p.crc.to_le_bytes())?;
        w.write_all(&(p.window.len() as u32).to_le_bytes())?;
        w.write_all(&p.window)?;
    }
    w.flush()
}

fn read_points(path: &Path) -> std::io::Result<Vec<Point>> {
    let mut r = std::io::BufReader::new(std::fs::File::open(path)?);
    let mut magic = [0u8; 8];
    r.read_exact(&mut magic)?;
    if &magic != POINTS_MAGIC {
        return Err(std::io::Error::other("not a restart point file"));
    }
    let n = read_u64(&mut r)?;
    let mut points = Vec::new();
    for _ in 0..n {
        let (input, output) = (read_u64(&mut r)?, read_u64(&mut r)?);
        let mut b = [0u8; 1];
        r.read_exact(&mut b)?;
        let span = read_u64(&mut r)?;
        let mut crc = [0u8; 4];
        r.read_exact(&mut crc)?;
        let mut len = [0u8; 4];
        r.read_exact(&mut len)?;
        let len = u32::from_le_bytes(len) as usize;
        if len > crate::gzip::WINDOW {
            return Err(std::io::Error::other("restart point window too long"));
        }
        let mut window = vec![0u8; len];
        r.read_exact(&mut window)?;
        points.push(Point {
            input,
            output,
            bits: b[0],
            window,
            span,
            crc: u32::from_le_bytes(crc),
        });
    }
    Ok(points)
}

fn read_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}

impl Index {
    /// The member at `key` (a directory's key ends in `/`).
    pub fn get(&self, key: &str) -> Option<&Member> {
        self.members.get(key)
    }

    /// The keys of a LIST of `prefix`, in key order from after `after`: with a
    /// delimiter `/`, a name below a subdirectory shows as that subdirectory's prefix
    /// once. At most `max` items (objects and prefixes); the last key returned is the
    /// token of the next page.
    pub fn list(&self, prefix: &str, delimited: bool, after: Option<&str>, max: usize) -> Listed {
        use std::ops::Bound::{Excluded, Included};
        let mut out = Listed::default();
        let mut from = match after {
            // After a common prefix: past every key below it ('/' + 1 is '0').
            Some(a) if delimited && a.len() > prefix.len() && a.ends_with('/') => {
                Included(format!("{}0", &a[..a.len() - 1]))
            }
            Some(a) if a >= prefix => Excluded(a.to_string()),
            _ => Included(prefix.to_string()),
        };
        loop {
            let Some((key, _)) = self
                .members
                .range((from.clone(), std::ops::Bound::Unbounded))
                .next()
            else {
                return out;
            };
            if !key.starts_with(prefix) {
                return out;
            }
            if out.len() == max {
                out.truncated = true;
                return out;
            }
            let rest = &key[prefix.len()..];
            match rest.find('/').filter(|_| delimited) {
                Some(i) => {
                    let common = format!("{prefix}{}", &rest[..=i]);
                    from = Included(format!("{}0", &common[..common.len() - 1]));
                    out.prefixes.push(common);
                }
                None => {
                    out.objects.push(key.clone());
                    from = Excluded(key.clone());
                }
            }
        }
    }
}

/// What `Index::list` found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Listed {
    pub objects: Vec<String>,
    pub prefixes: Vec<String>,
    /// More keys follow the last one here.
    pub truncated: bool,
}

impl Listed {
    fn len(&self) -> usize {
        self.objects.len() + self.prefixes.len()
    }

    /// The key a next page starts after.
    pub fn last(&self) -> Option<&str> {
        let o = self.objects.last().map(String::as_str);
        let p = self.prefixes.last().map(String::as_str);
        o.max(p)
    }
}
