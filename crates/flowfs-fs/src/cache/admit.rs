//! Admission to the node cache (issue 48): which fetched bytes earn a place on disk.
//! Writing every byte served cost half the mount's CPU in a cold `cp -r` (the copy into
//! the page cache of the data files), and most task inputs are read once. Under `Reuse`
//! a version's bytes are written only once it is opened a second time on the node (by
//! any process on the cache dir), or when it is fetched on purpose (`flowfs cache
//! prefetch`); a file this node wrote is adopted after its upload whatever the policy.
//! Bytes not admitted go to their readers from the download buffers alone.
//!
//! The record of what was opened once (`Seen`) is the file `objects/seen`: 2^20 slots of
//! 8 bytes (8 MiB, sparse), a slot per version by its hash, holding a tag of the hash and
//! a bit for "opened again". A version whose slot another one took is forgotten (seen
//! once more, it is admitted at its next open): the record never grows. Slots are read
//! and written with `pread`/`pwrite` (two system calls per open): two processes opening
//! the same version at the same instant may both count it as a first open, which costs
//! a later admission, never a wrong byte.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::Path;

/// Slots in the record: a million versions opened once, in 8 MiB.
const SLOTS: u64 = 1 << 20;
/// The bit of a slot that says its version was opened again.
const AGAIN: u64 = 1;

/// Which fetched bytes the node cache writes to disk (`--cache-admit`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// A version opened a second time on the node, or prefetched on purpose.
    Reuse,
    /// Every byte fetched (the behaviour before issue 48).
    Always,
    /// Only what is prefetched on purpose (and files this node wrote).
    Never,
}

impl std::str::FromStr for Admit {
    type Err = String;

    fn from_str(s: &str) -> Result<Admit, String> {
        match s {
            "reuse" => Ok(Admit::Reuse),
            "always" => Ok(Admit::Always),
            "never" => Ok(Admit::Never),
            _ => Err(format!(
                "{s:?}: the cache admission is reuse, always or never"
            )),
        }
    }
}

/// The record of the versions opened on this node (see the module's comment).
pub(super) struct Seen {
    file: Option<File>,
}

impl Seen {
    /// Opens (or makes) `dir/seen`, readable by its owner only. Without it, every open
    /// counts as a second one: the cache then admits what it fetches, as before.
    pub(super) fn open(dir: &Path) -> Seen {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(dir.join("seen"))
            .and_then(|f| {
                if f.metadata()?.len() != SLOTS * 8 {
                    f.set_len(SLOTS * 8)?;
                }
                Ok(f)
            });
        match file {
            Ok(f) => Seen { file: Some(f) },
            Err(e) => {
                tracing::warn!("the cache's record of opened objects cannot be used: {e}");
                Seen { file: None }
            }
        }
    }

    /// Records an open of the version `hash` (an entry's hex name); true if it was opened
    /// on this node before.
    pub(super) fn opened(&self, hash: &str) -> bool {
        let Some(s) = self.slot(hash) else {
            return true;
        };
        let before = s.value & !AGAIN == s.tag;
        let now = if before { s.tag | AGAIN } else { s.tag };
        if now != s.value && s.file.write_all_at(&now.to_le_bytes(), s.at).is_err() {
            return true;
        }
        before
    }

    /// Whether the version `hash` was opened on this node before (once or more), without
    /// counting an open: a fetch ahead of a reader stands for the open it expects.
    pub(super) fn known(&self, hash: &str) -> bool {
        self.slot(hash).is_none_or(|s| s.value & !AGAIN == s.tag)
    }

    /// Whether the version `hash` was opened a second time (by any process) since.
    pub(super) fn again(&self, hash: &str) -> bool {
        self.slot(hash).is_none_or(|s| s.value == s.tag | AGAIN)
    }

    /// The slot of `hash` as it is now; none when the record cannot be read (every open
    /// then counts as a second one).
    fn slot(&self, hash: &str) -> Option<Slot<'_>> {
        let file = self.file.as_ref()?;
        let (tag, slot) = slot_of(hash, SLOTS);
        let at = slot * 8;
        let value = read_slot(file, at).ok()?;
        Some(Slot {
            file,
            value,
            tag,
            at,
        })
    }
}

/// One slot of the record, read: its value, the tag of the version asked about, and
/// where it lies in the file.
struct Slot<'a> {
    file: &'a File,
    value: u64,
    tag: u64,
    at: u64,
}

fn read_slot(f: &File, at: u64) -> io::Result<u64> {
    let mut b = [0u8; 8];
    f.read_exact_at(&mut b, at)?;
    Ok(u64::from_le_bytes(b))
}

/// The tag kept for a version (never 0, an empty slot; its low bit clear) and its slot
/// among `slots`, both from its hash (hex of a SHA-256: uniformly spread). The index of
/// small versions (small.rs) places them the same way.
pub(super) fn slot_of(hash: &str, slots: u64) -> (u64, u64) {
    let hex = |s: &str| u64::from_str_radix(s, 16).unwrap_or(0);
    let (a, b) = hash.split_at(hash.len().min(16));
    let tag = (hex(a) | 2) & !AGAIN;
    (tag, hex(&b[..b.len().min(16)]) % slots)
}

#[cfg(test)]
mod tests {
    use super::*;

    const V1: &str = "0123456789abcdef00112233445566ff";
    const V2: &str = "fedcba98765432100011223344556677";

    #[test]
    fn a_version_is_admitted_at_its_second_open_by_any_process() {
        let dir = tempfile::tempdir().unwrap();
        let (a, b) = (Seen::open(dir.path()), Seen::open(dir.path()));
        assert!(!a.known(V1));
        assert!(!a.opened(V1), "first open");
        assert!(b.known(V1), "known, not counted");
        assert!(!a.again(V1) && !b.again(V1));
        assert!(b.opened(V1), "second open, by another process");
        assert!(a.again(V1), "the first process sees it");
        assert!(a.opened(V1), "and later opens");
        assert!(!a.opened(V2) && !a.again(V2), "another version is its own");
    }

    #[test]
    fn a_version_whose_slot_was_taken_starts_again_and_the_record_keeps_its_size() {
        let dir = tempfile::tempdir().unwrap();
        let s = Seen::open(dir.path());
        // Same slot (the second half of the hash), another tag.
        let other = "7777777777777777".to_string() + &V1[16..];
        assert!(!s.opened(V1));
        assert!(!s.opened(&other));
        assert!(!s.opened(V1), "forgotten: a first open again");
        let len = std::fs::metadata(dir.path().join("seen")).unwrap().len();
        assert_eq!(len, SLOTS * 8);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(dir.path().join("seen"))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600);
    }

    #[test]
    fn policies_parse_and_others_are_refused_with_the_choices() {
        assert_eq!("reuse".parse::<Admit>(), Ok(Admit::Reuse));
        assert_eq!("never".parse::<Admit>(), Ok(Admit::Never));
        let e = "sometimes".parse::<Admit>().unwrap_err();
        assert!(e.contains("reuse, always or never"), "{e}");
    }
}
