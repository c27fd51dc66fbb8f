//! How keys name archives and their views: `hg38.tar.gz` is an archive, `hg38.tar.gz.d/`
//! its read-only view, `hg38.tar.gz.d/chr1.fa` a member below it (`place`), and the
//! directory marker a view's listing starts with.

use std::collections::HashMap;
use std::time::SystemTime;

use flowfs_client::meta::Posix;
use flowfs_client::ObjectInfo;

/// Names that make an object an archive with a view.
pub const ARCHIVE_NAMES: [&str; 3] = [".tar", ".tar.gz", ".tgz"];
/// What a view's name adds to its archive's: `hg38.tar.gz` → `hg38.tar.gz.d`.
pub const VIEW_SUFFIX: &str = ".d";
/// An object named as an archive (`x.tar`, not `.tar` alone).
pub fn archive_named(name: &str) -> bool {
    ARCHIVE_NAMES
        .iter()
        .any(|n| name.len() > n.len() && name.ends_with(n))
}

/// Where a key falls: below the view of archive `archive` (member key `member`), or not.
pub(crate) fn place(key: &str) -> Option<(&str, &str)> {
    let view_end = format!("{VIEW_SUFFIX}/");
    let mut from = 0;
    while let Some(i) = key[from..].find(&view_end).map(|i| i + from) {
        let name = &key[key[..i].rfind('/').map_or(0, |s| s + 1)..i];
        if archive_named(name) {
            return Some((&key[..i], &key[i + view_end.len()..]));
        }
        from = i + 1;
    }
    None
}

/// A view's root as a directory marker, listed first in its listing, so that the file
/// system reads its members' attributes (a HEAD of a member costs no request) as in any
/// directory with a marker (`--meta-heads marked`, the default).
pub(crate) fn root_marker_info(key: String, modified: SystemTime) -> ObjectInfo {
    ObjectInfo {
        key,
        size: 0,
        etag: "\"view\"".into(),
        last_modified: modified,
    }
}

/// The view's root: a directory nobody can write to, as old as its archive.
pub(crate) fn root_marker_meta(modified: SystemTime) -> HashMap<String, String> {
    let mut h = HashMap::new();
    let posix = Posix {
        mode: Some(libc::S_IFDIR | 0o555),
        mtime: Some(modified),
        ..Posix::default()
    };
    posix.encode_into(&mut h);
    h
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_below_a_view_name_its_archive_and_member() {
        assert_eq!(place("a/x.tar.d/b/c"), Some(("a/x.tar", "b/c")));
        assert_eq!(place("x.tgz.d/"), Some(("x.tgz", "")));
        assert_eq!(
            place("a/x.tar.gz.d/y.tar.d/z"),
            Some(("a/x.tar.gz", "y.tar.d/z"))
        );
        assert_eq!(place("a/.tar.d/b"), None);
        assert_eq!(place("a/x.tar.d"), None);
        assert_eq!(place("a/x.zip.d/b"), None);
        assert_eq!(place("a/notx.d/x.tar.d/b"), Some(("a/notx.d/x.tar", "b")));
    }
}
