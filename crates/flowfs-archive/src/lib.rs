//! Archives read in place: a tar or tar.gz object in the bucket served as a read-only
//! tree, member by member, without downloading or extracting it. `ArchiveClient` is an
//! `ObjectClient` whose keys are the members: the file system above it (lookups,
//! listings, the node cache, read-ahead) is the one every mount uses, and a member's read
//! is a ranged GET of the archive (tar) or an inflate from the nearest restart point
//! (gzip, gzip.rs). The index (index.rs) is built once per archive version by one pass
//! (build.rs) and kept in the node cache.

mod ahead;
mod build;
mod client;
mod error;
mod gzip;
mod index;
mod names;
mod views;

pub use client::ArchiveClient;
pub use error::ArchiveError;
pub use gzip::{Point, SPAN, WINDOW};
pub use index::{Format, Index, IndexFiles, Listed, Member, MemberKind};
pub use names::{archive_named, ARCHIVE_NAMES, VIEW_SUFFIX};
pub use views::ArchiveViews;

/// What the first bytes of an object say it is: gzip (its magic; whether a tar is inside
/// is found by the index build), a tar (a header whose checksum holds), or neither.
pub fn sniff(head: &[u8]) -> Option<Format> {
    if head.starts_with(&[0x1f, 0x8b]) {
        return Some(Format::TarGz);
    }
    let h = head.get(..512)?;
    let stored = std::str::from_utf8(&h[148..156])
        .ok()
        .map(|s| s.trim_matches(|c: char| c == '\0' || c == ' '))
        .and_then(|s| u32::from_str_radix(s, 8).ok())?;
    let sum: u32 = h
        .iter()
        .enumerate()
        .map(|(i, &b)| {
            if (148..156).contains(&i) {
                u32::from(b' ')
            } else {
                u32::from(b)
            }
        })
        .sum();
    (sum == stored && h[0] != 0).then_some(Format::Tar)
}

/// Bytes `sniff` needs.
pub const SNIFF_LEN: u64 = 512;
