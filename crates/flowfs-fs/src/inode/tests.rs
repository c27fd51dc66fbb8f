//! The inode table's own rules: the listing budget, and how long a node the kernel
//! forgot lives.

use super::*;
use std::time::Duration;

fn listing_of(n: usize) -> Listing {
    let entries = (0..n)
        .map(|i| (format!("f{i}").into(), Entry::dir(SystemTime::UNIX_EPOCH)))
        .collect();
    Listing {
        at: Instant::now(),
        entries: Arc::new(entries),
    }
}

#[test]
fn listings_beyond_the_bound_are_dropped_oldest_first_and_keep_their_size() {
    let mut t = Inodes::new();
    let per = MAX_LISTED / 4;
    let dirs: Vec<u64> = (0..6)
        .map(|i| t.upsert(ROOT, format!("d{i}"), &Entry::dir(SystemTime::now()), None))
        .collect();
    for &d in &dirs {
        t.set_listing(d, Some(listing_of(per)));
    }
    assert!(t.listed <= MAX_LISTED, "{} entries kept", t.listed);
    let kept = |t: &Inodes, d: u64| t.get(d).and_then(|n| n.listing()).is_some();
    assert!(
        !kept(&t, dirs[0]) && !kept(&t, dirs[1]),
        "the oldest two go"
    );
    assert!(
        dirs[2..].iter().all(|&d| kept(&t, d)),
        "the newest four stay"
    );
    assert_eq!(t.get(dirs[0]).and_then(|n| n.listed_len()), Some(per));
    let ttl = Duration::from_secs(60);
    let dropped = t.get(dirs[0]).and_then(|n| n.cached_child("f1", ttl));
    assert_eq!(dropped, None, "a dropped listing answers nothing");
    // Names put into a kept listing count; a listing replaced or forgotten gives its
    // entries back, and so does a directory that goes away.
    t.listing_put(dirs[5], "new", Some(Entry::dir(SystemTime::now())));
    assert_eq!(t.listed, 4 * per + 1);
    t.set_listing(dirs[5], None);
    assert_eq!(t.listed, 3 * per);
    t.detach(ROOT, "d4");
    assert_eq!(t.listed, 2 * per);
    assert_eq!(t.held.len(), 2);
}

/// A directory the kernel forgot stays, with its ancestors, while its listing is
/// kept, and goes with the listing: what it costs is bounded by `MAX_LISTED`.
#[test]
fn a_forgotten_directory_lives_as_long_as_its_listing() {
    let mut t = Inodes::new();
    let now = Some(Instant::now());
    let a = t.upsert(ROOT, "a", &Entry::dir(SystemTime::now()), now);
    let b = t.upsert(a, "b", &Entry::dir(SystemTime::now()), now);
    let plain = t.upsert(ROOT, "plain", &Entry::dir(SystemTime::now()), now);
    for ino in [a, b, plain] {
        t.get_mut(ino).unwrap().looked_up();
    }
    t.set_listing(b, Some(listing_of(10)));
    for ino in [b, a, plain] {
        t.forget(ino, 1);
    }
    assert_eq!(t.path(b).as_deref(), Some("a/b"), "kept, its path with it");
    assert_eq!(t.child(ROOT, "plain"), None, "nothing kept it");
    // Newer listings push b's out: b goes, and a, kept only for b, with it.
    for i in 0..2 {
        let d = t.upsert(ROOT, format!("n{i}"), &Entry::dir(SystemTime::now()), now);
        t.get_mut(d).unwrap().looked_up();
        t.set_listing(d, Some(listing_of(MAX_LISTED / 2)));
    }
    assert!(t.get(b).is_none() && t.get(a).is_none());
    assert_eq!(t.child(ROOT, "a"), None);
}

#[test]
fn one_listing_bigger_than_the_bound_is_kept() {
    let mut t = Inodes::new();
    let d = t.upsert(ROOT, "big", &Entry::dir(SystemTime::now()), None);
    t.set_listing(d, Some(listing_of(MAX_LISTED + 5)));
    assert!(t.get(d).and_then(|n| n.listing()).is_some());
}
