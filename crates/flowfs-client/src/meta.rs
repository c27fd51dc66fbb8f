//! POSIX attributes kept in object metadata, in the convention of s3fs-fuse (which rclone
//! shares for `mtime`), so that other tools read what flowfs writes and the other way round,
//! and a symlink's target (`SYMLINK_META`). One owner for every store and every writer
//! (the file system, the archive client). Pure data: no I/O. See SEMANTICS.md, "Attributes", for what is written and read.
//!
//! | key (`x-amz-meta-`) | written by flowfs | read |
//! |---|---|---|
//! | `mode` | decimal `st_mode`, file type bits included (`33261` = `0100755`) | decimal; with a leading `0`, or when no `st_mode` as decimal (rclone's `100755`), octal |
//! | `uid`, `gid` | decimal | decimal |
//! | `mtime` | seconds since the epoch, `.` and nine digits of nanoseconds when not whole | seconds with an optional fraction of 1 to 9 digits (rclone writes fewer) |
//! | `atime`, `ctime` | only when set explicitly, as `mtime` | as `mtime` |
//! | `rdev` | special files only, decimal | decimal |
//! | `flowfs-link` | names made by `link`: 16 hex digits, the same on every name of the file | hex |
//! | `xattr` | extended attributes, as s3fs's `use_xattr` writes them (xattr.rs) | the same |

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

pub use crate::percent::{percent_decode, percent_encode};
use crate::xattr::{self, Xattrs, XATTR};

/// Metadata names without the `x-amz-meta-` prefix (S3 hands them back in lower case):
/// `st_mode`.
pub const MODE: &str = "mode";
/// Owner's user id.
pub const UID: &str = "uid";
/// Owner's group id.
pub const GID: &str = "gid";
/// Last change of the content.
pub const MTIME: &str = "mtime";
/// Last access, written only when set explicitly.
pub const ATIME: &str = "atime";
/// Last change of the attributes, written only when set explicitly.
pub const CTIME: &str = "ctime";
/// Device number of a special file.
pub const RDEV: &str = "rdev";
/// Marks an object as a symbolic link; its value is the target, percent-encoded
/// (`percent_encode`), and the object's content is the plain target too.
pub const SYMLINK_META: &str = "flowfs-symlink";
/// Marks the names of one file made by `link` (hard links): every name's object
/// carries the same random id, and a mount that finds two names with the same id and
/// the same ETag shows them as one file again.
pub const LINK: &str = "flowfs-link";
const KEYS: [&str; 8] = [MODE, UID, GID, MTIME, ATIME, CTIME, RDEV, LINK];

/// The file type bits of a mode.
pub const S_IFMT: u32 = 0o170_000;
/// A regular file's type bits.
pub const S_IFREG: u32 = 0o100_000;

/// What an object's metadata says of its POSIX attributes; `None` where it says nothing
/// (an object written by a tool that keeps none shows the mount's defaults there).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Posix {
    /// `st_mode`: file type bits and permission bits.
    pub mode: Option<u32>,
    /// Owner's user id.
    pub uid: Option<u32>,
    /// Owner's group id.
    pub gid: Option<u32>,
    /// Last change of the content.
    pub mtime: Option<SystemTime>,
    /// Last access.
    pub atime: Option<SystemTime>,
    /// Last change of the attributes.
    pub ctime: Option<SystemTime>,
    /// Device number of a special file.
    pub rdev: Option<u32>,
    /// The hard-link group of the file (`LINK`): set once a second name was linked.
    pub link: Option<u64>,
    /// Its extended attributes (`XATTR`); `None` where the metadata was not read (a
    /// node this mount made, or changed before it knew them), which a rewrite of the
    /// metadata leaves as the object has them. Shared: a node's attributes are
    /// cloned for every upload and comparison, its xattrs seldom change.
    pub xattrs: Option<Arc<Xattrs>>,
}

impl Posix {
    /// Reads the keys above from user metadata (names compared without case); a value
    /// that does not parse counts as absent rather than as a failure of the object.
    pub fn decode(metadata: &HashMap<String, String>) -> Posix {
        let get = |name: &str| {
            metadata
                .iter()
                .find(|(k, _)| k.eq_ignore_ascii_case(name))
                .map(|(_, v)| v.trim())
        };
        Posix {
            mode: get(MODE).and_then(parse_mode),
            uid: get(UID).and_then(|v| v.parse().ok()),
            gid: get(GID).and_then(|v| v.parse().ok()),
            mtime: get(MTIME).and_then(parse_time),
            atime: get(ATIME).and_then(parse_time),
            ctime: get(CTIME).and_then(parse_time),
            rdev: get(RDEV).and_then(|v| v.parse().ok()),
            link: get(LINK).and_then(|v| u64::from_str_radix(v, 16).ok()),
            xattrs: Some(xattr::read(get(XATTR))),
        }
    }

    /// Writes every attribute it holds into `metadata`, replacing earlier values of these
    /// keys (in any case) and keeping every other key.
    pub fn encode_into(&self, metadata: &mut HashMap<String, String>) {
        metadata.retain(|k, _| !KEYS.iter().any(|n| k.eq_ignore_ascii_case(n)));
        let mut put = |k: &str, v: Option<String>| {
            if let Some(v) = v {
                metadata.insert(k.to_string(), v);
            }
        };
        put(MODE, self.mode.map(|m| m.to_string()));
        put(UID, self.uid.map(|u| u.to_string()));
        put(GID, self.gid.map(|g| g.to_string()));
        put(MTIME, self.mtime.map(format_time));
        put(ATIME, self.atime.map(format_time));
        put(CTIME, self.ctime.map(format_time));
        put(RDEV, self.rdev.map(|r| r.to_string()));
        put(LINK, self.link.map(|l| format!("{l:016x}")));
        if let Some(x) = &self.xattrs {
            metadata.retain(|k, _| !k.eq_ignore_ascii_case(XATTR));
            if !x.is_empty() {
                metadata.insert(XATTR.to_string(), xattr::encode(x));
            }
        }
    }

    /// What a directory shows when its marker says `self` and this mount knew `old`: the
    /// marker's values where it has them, and the later of each time (entries added
    /// here change a directory's times in memory only).
    pub fn merged_over(self, old: Option<Posix>) -> Posix {
        let Some(old) = old else {
            return self;
        };
        let later = |a: Option<SystemTime>, b: Option<SystemTime>| a.max(b);
        Posix {
            mode: self.mode.or(old.mode),
            uid: self.uid.or(old.uid),
            gid: self.gid.or(old.gid),
            mtime: later(self.mtime, old.mtime),
            atime: self.atime.or(old.atime),
            ctime: later(self.ctime, old.ctime),
            rdev: self.rdev.or(old.rdev),
            link: self.link.or(old.link),
            xattrs: self.xattrs.or(old.xattrs),
        }
    }

    /// The permission bits (and setuid, setgid, sticky) of `mode`, if known.
    pub fn perm(&self) -> Option<u16> {
        self.mode.map(|m| (m & 0o7777) as u16)
    }
}

/// `st_mode`: decimal as s3fs writes it (`33261`), octal with a leading `0`, or octal as
/// rclone's `--metadata` writes it (`100755`): a number read as decimal that is no
/// `st_mode` (above `0o177777`, or file type bits that name no type) is read as octal.
pub fn parse_mode(s: &str) -> Option<u32> {
    if s.len() > 1 && s.starts_with('0') {
        return u32::from_str_radix(&s[1..], 8).ok();
    }
    let typed = |m: &u32| {
        *m <= 0o177_777
            && [0o01, 0o02, 0o04, 0o06, 0o10, 0o12, 0o14].contains(&((m & S_IFMT) >> 12))
    };
    let dec = s.parse::<u32>().ok();
    if let Some(d) = dec.filter(typed) {
        return Some(d);
    }
    u32::from_str_radix(s, 8)
        .ok()
        .filter(|m| typed(m) || *m <= 0o7777)
        .or(dec.filter(|d| *d <= 0o7777))
}

/// Seconds since the epoch, and nine digits of nanoseconds when there are any: what s3fs
/// writes, and what both s3fs (which takes the digits after the point as nanoseconds)
/// and rclone (a decimal fraction) read as the same time.
pub fn format_time(t: SystemTime) -> String {
    let d = t.duration_since(UNIX_EPOCH).unwrap_or_default();
    match d.subsec_nanos() {
        0 => d.as_secs().to_string(),
        n => format!("{}.{n:09}", d.as_secs()),
    }
}

/// `secs` or `secs.fraction` (a decimal fraction of 1 to 9 digits, as rclone writes it).
/// Times before the epoch, and anything else, are not understood.
pub fn parse_time(s: &str) -> Option<SystemTime> {
    let (secs, frac) = s.split_once('.').unwrap_or((s, ""));
    if secs.is_empty() || !secs.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    if frac.len() > 9 || !frac.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let nanos = if frac.is_empty() {
        0
    } else {
        format!("{frac:0<9}").parse::<u32>().ok()?
    };
    let secs: u64 = secs.parse().ok()?;
    UNIX_EPOCH.checked_add(Duration::new(secs, nanos))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_symlink_target_is_kept_in_ascii_and_read_back_whole() {
        let target = "../dir with space/100%/é\tx";
        let enc = percent_encode(target);
        assert_eq!(enc, "../dir%20with%20space/100%25/%C3%A9%09x");
        assert_eq!(percent_decode(&enc), target);
    }

    fn at(secs: u64, nanos: u32) -> SystemTime {
        UNIX_EPOCH + Duration::new(secs, nanos)
    }

    fn map(pairs: &[(&str, &str)]) -> HashMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn times_are_seconds_with_nine_digit_nanoseconds() {
        assert_eq!(format_time(at(1_600_000_000, 0)), "1600000000");
        assert_eq!(format_time(at(1_600_000_000, 5)), "1600000000.000000005");
        assert_eq!(
            format_time(at(1_600_000_000, 500_000_000)),
            "1600000000.500000000"
        );
    }

    #[test]
    fn times_read_as_s3fs_and_rclone_write_them() {
        assert_eq!(parse_time("1600000000"), Some(at(1_600_000_000, 0)));
        assert_eq!(
            parse_time("1600000000.000000005"),
            Some(at(1_600_000_000, 5))
        );
        // rclone drops trailing zeros: a decimal fraction, not a count of nanoseconds.
        assert_eq!(
            parse_time("1600000000.5"),
            Some(at(1_600_000_000, 500_000_000))
        );
        // An empty fraction is no fraction, as s3fs reads it.
        assert_eq!(parse_time("1."), Some(at(1, 0)));
        for bad in ["", "-1", "1.2.3", "x", "1.1234567890", "1e9", ".5"] {
            assert_eq!(parse_time(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn modes_are_decimal_or_octal_with_a_leading_zero() {
        assert_eq!(parse_mode("33261"), Some(0o100_755));
        assert_eq!(parse_mode("16877"), Some(0o040_755));
        assert_eq!(parse_mode("4516"), Some(0o010_644));
        assert_eq!(parse_mode("0100644"), Some(0o100_644));
        // rclone --metadata: octal without the 0.
        assert_eq!(parse_mode("100755"), Some(0o100_755));
        assert_eq!(parse_mode("40700"), Some(0o040_700));
        assert_eq!(parse_mode("120777"), Some(0o120_777));
        assert_eq!(parse_mode("644"), Some(0o644));
        assert_eq!(parse_mode("0"), Some(0));
        assert_eq!(parse_mode("rwx"), None);
        assert_eq!(parse_mode("09"), None);
    }

    #[test]
    fn encode_then_decode_is_the_same_and_keeps_other_keys() {
        let p = Posix {
            mode: Some(0o100_755),
            uid: Some(1000),
            gid: Some(100),
            mtime: Some(at(1_000_000_000, 123)),
            atime: None,
            ctime: Some(at(1_000_000_001, 0)),
            rdev: None,
            link: Some(0xab),
            xattrs: Some(Arc::new([("user.a".to_string(), b"hi".to_vec())].into())),
        };
        let mut m = map(&[("flowfs-symlink", "t"), ("MODE", "1"), ("XATTR", "old")]);
        p.encode_into(&mut m);
        assert_eq!(
            m,
            map(&[
                ("flowfs-symlink", "t"),
                ("mode", "33261"),
                ("uid", "1000"),
                ("gid", "100"),
                ("mtime", "1000000000.000000123"),
                ("ctime", "1000000001"),
                ("flowfs-link", "00000000000000ab"),
                ("xattr", "%7B%22user.a%22%3A%22aGk%3D%22%7D"),
            ])
        );
        assert_eq!(Posix::decode(&m), p);
        assert_eq!(p.perm(), Some(0o755));
        // Unknown xattrs leave the object's as they are; known and none removes them.
        let unknown = Posix {
            xattrs: None,
            ..p.clone()
        };
        unknown.encode_into(&mut m);
        assert!(m.contains_key("xattr"));
        let none = Posix {
            xattrs: Some(Arc::default()),
            ..p
        };
        none.encode_into(&mut m);
        assert!(!m.contains_key("xattr"));
    }

    #[test]
    fn decode_ignores_case_and_bad_values() {
        let p = Posix::decode(&map(&[("Mode", "33188"), ("UID", "x"), ("Mtime", "12")]));
        assert_eq!(p.mode, Some(0o100_644));
        assert_eq!(p.uid, None);
        assert_eq!(p.mtime, Some(at(12, 0)));
        let none = Posix {
            xattrs: Some(Arc::default()),
            ..Posix::default()
        };
        assert_eq!(Posix::decode(&HashMap::new()), none);
    }
}
