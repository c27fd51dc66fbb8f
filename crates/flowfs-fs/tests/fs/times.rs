//! Times that behave (issue 17, item 5): ctime apart from mtime, changed by chmod, chown,
//! utimens, writes, truncation and renames and never by an upload ending; the mtime of a
//! file uploaded early is its last write; a directory's times follow its entries, and its
//! attributes come back from its marker's metadata after a remount.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowfs_client::mock::Op;
use flowfs_fs::{AttrChanges, ROOT};

use crate::common::{data, fs_on, mount, setup, uploaded};

const OLD: u64 = 1_000_000_000;

fn chmod(mode: u32) -> AttrChanges {
    AttrChanges {
        mode: Some(mode),
        ..AttrChanges::default()
    }
}

/// chmod changes ctime and not mtime; utimens sets mtime and makes ctime now; the upload
/// that ends afterwards changes neither; a later mount shows both (x-amz-meta-ctime).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctime_moves_with_changes_and_not_with_uploads() {
    let (one, two) = crate::common::two_caches();
    let (mock, fs) = setup(one.path(), "");
    let (a, fh) = fs.create(ROOT, "f", 0o644, None).await.expect("create");
    fs.write(fh, 0, b"one\n").expect("write");
    let w = fs.getattr(a.ino).await.expect("getattr");
    assert_eq!(w.ctime, w.mtime, "a write changes both");
    fs.setattr_with(a.ino, None, chmod(0o600), Some(fh))
        .await
        .expect("chmod");
    let c = fs.getattr(a.ino).await.expect("getattr");
    assert_eq!(c.mtime, w.mtime, "chmod leaves mtime");
    assert!(c.ctime > w.ctime, "chmod changes ctime");
    fs.release(fh).expect("release");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    assert_eq!(mock.count(Op::Put), 1);
    let up = fs.getattr(a.ino).await.expect("getattr");
    assert_eq!(
        (up.mtime, up.ctime),
        (c.mtime, c.ctime),
        "the upload moves neither"
    );

    let old = UNIX_EPOCH + Duration::from_secs(OLD);
    let t = AttrChanges {
        mtime: Some(old),
        atime: Some(old + Duration::from_secs(5)),
        ..AttrChanges::default()
    };
    let before = SystemTime::now();
    let u = fs
        .setattr_with(a.ino, None, t, None)
        .await
        .expect("utimens");
    assert_eq!(u.mtime, old);
    assert_eq!(u.atime, old + Duration::from_secs(5), "atime as set");
    assert!(u.ctime >= before, "utimens makes ctime now");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    let later = fs_on(&mock, two.path(), "");
    let b = later.lookup(ROOT, "f").await.expect("lookup");
    assert_eq!((b.mtime, b.atime, b.ctime), (u.mtime, u.atime, u.ctime));
}

/// Truncation and rename change a file's ctime; rename leaves its mtime.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_and_rename_change_ctime() {
    let (_dir, _mock, fs) = mount("");
    let ino = uploaded(&fs, "f", b"0123456789").await;
    let before = fs.getattr(ino).await.expect("getattr");
    let t = fs
        .setattr_with(ino, Some(3), AttrChanges::default(), None)
        .await
        .expect("truncate");
    assert!(t.ctime > before.ctime && t.mtime > before.mtime, "{t:?}");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    fs.rename(ROOT, "f", ROOT, "g", false)
        .await
        .expect("rename");
    let r = fs.getattr(ino).await.expect("getattr");
    assert_eq!(r.mtime, t.mtime, "rename leaves mtime");
    assert!(r.ctime > t.ctime, "rename changes ctime");
}

/// A file uploaded early (its parts sent while it is written) gets the time of its last
/// write into its metadata after all, with one copy onto itself: a later mount shows it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_upload_carries_the_time_of_the_last_write() {
    let (one, two) = crate::common::two_caches();
    let (mock, fs) = setup(one.path(), "");
    let body = data(3 << 20, 9);
    let (a, fh) = fs.create(ROOT, "big", 0o640, None).await.expect("create");
    fs.write(fh, 0, &body).expect("write");
    crate::common::await_count(&mock, Op::UploadPart, 1).await;
    fs.write(fh, body.len() as u64, b"tail").expect("write");
    let last = fs.getattr(a.ino).await.expect("getattr").mtime;
    fs.release(fh).expect("release");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    assert_eq!(mock.count(Op::CreateMultipart), 1, "uploaded early");
    assert_eq!(mock.count(Op::Head), 0, "no read-back");
    let m = mock.metadata("big").expect("metadata");
    let secs = last.duration_since(UNIX_EPOCH).expect("epoch");
    let want = format!("{}.{:09}", secs.as_secs(), secs.subsec_nanos());
    assert_eq!(m.get("mtime"), Some(&want), "{m:?}");
    assert_eq!(fs.getattr(a.ino).await.expect("getattr").mtime, last);
    let later = fs_on(&mock, two.path(), "");
    let b = later.lookup(ROOT, "big").await.expect("lookup");
    assert_eq!(
        (b.mtime, b.perm, b.size),
        (last, 0o640, body.len() as u64 + 4)
    );
}

/// A directory's mtime and ctime change when entries are added, renamed or removed
/// through the mount; chmod and chown of it go into its marker's metadata, which a later
/// mount reads back (on AWS S3 and the mock; SeaweedFS keeps none on markers).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn directory_times_follow_entries_and_the_marker_keeps_attributes() {
    let (one, two) = crate::common::two_caches();
    let (mock, fs) = setup(one.path(), "");
    let d = fs.mkdir(ROOT, "d", 0o755, None).await.expect("mkdir");
    let mut last = fs.getattr(d.ino).await.expect("getattr");
    let mut changed = |now: flowfs_fs::Attr, what: &str| {
        assert!(
            now.mtime > last.mtime && now.ctime > last.ctime,
            "{what}: {now:?}"
        );
        last = now;
    };
    let (_, fh) = fs.create(d.ino, "a", 0o644, None).await.expect("create");
    fs.release(fh).expect("release");
    changed(fs.getattr(d.ino).await.expect("getattr"), "create");
    fs.rename(d.ino, "a", d.ino, "b", false)
        .await
        .expect("rename");
    changed(fs.getattr(d.ino).await.expect("getattr"), "rename");
    fs.unlink(d.ino, "b").await.expect("unlink");
    changed(fs.getattr(d.ino).await.expect("getattr"), "unlink");
    let c = AttrChanges {
        mode: Some(0o700),
        uid: Some(4321),
        ..AttrChanges::default()
    };
    let a = fs.setattr_with(d.ino, None, c, None).await.expect("chmod");
    assert!(
        a.ctime > last.ctime && a.mtime == last.mtime,
        "chmod: {a:?}"
    );
    assert!(fs.flush_all().await.is_empty(), "flushed");
    let m = mock.metadata("d/").expect("marker");
    assert_eq!(m.get("mode").map(String::as_str), Some("16832"), "{m:?}");
    let later = fs_on(&mock, two.path(), "");
    let b = later.lookup(ROOT, "d").await.expect("lookup");
    assert_eq!((b.perm, b.uid), (0o700, 4321));
    assert_eq!(b.mtime, a.mtime, "the marker's mtime");
}
