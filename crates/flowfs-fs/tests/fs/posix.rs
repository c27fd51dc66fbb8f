//! POSIX behaviour the external exercisers (fsx, pjdfstest) found wrong, each pinned
//! over the in-memory store (issue 13).

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use flowfs_client::mock::MockClient;
use flowfs_fs::{Fs, FsConfig, FsError};
use flowfs_fs::{OpenMode, ROOT};

fn fs_with_ttl(mock: &Arc<MockClient>, cache: &std::path::Path, ttl: Duration) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", "pre/", cache.to_path_buf());
    cfg.part_size = 1 << 20;
    cfg.metadata_ttl = ttl;
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

/// The shape fsx found: fsync, close, reopen before the kernel's RELEASE of the old
/// handle arrives, truncate down, write past the end.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reopen_before_the_old_release_keeps_every_write() {
    let (_dir, mock, fs) = mount("");
    let (a, fh1) = fs.create(ROOT, "f", 0o644, None).await.unwrap();
    fs.write(fh1, 0, &data(100_000, 1)).unwrap();
    fs.fsync(fh1).await.unwrap();
    let (fh2, _) = fs.open(a.ino, OpenMode::Write).await.unwrap();
    fs.release(fh1).unwrap();
    fs.setattr(a.ino, None, Some(30_000), None, Some(fh2))
        .await
        .unwrap();
    fs.write(fh2, 40_000, b"tail").unwrap();
    let mut want = data(100_000, 1)[..30_000].to_vec();
    want.resize(40_000, 0);
    want.extend_from_slice(b"tail");
    assert_eq!(fs.getattr(a.ino).await.unwrap().size, want.len() as u64);
    fs.release(fh2).unwrap();
    assert_eq!(read_all(&fs, a.ino).await, want);
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("f").as_deref(), Some(&want[..]));
}

/// S3 keys are at most 1,024 bytes: such a name is refused at once, instead of an
/// upload that fails forever and stays in the journal.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_whose_key_the_store_cannot_hold_is_enametoolong() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let fs = fs_with_ttl(&mock, dir.path(), Duration::from_secs(60));
    // "pre/" + 4 levels of 250 bytes with their slashes = 1,008 bytes of directories.
    let mut parent = ROOT;
    for i in 0..4u8 {
        let name = String::from_utf8(vec![b'a' + i; 250]).unwrap();
        parent = fs.mkdir(parent, &name, 0o755, None).await.unwrap().ino;
    }
    let fits = "f".repeat(1024 - 1008);
    let too_long = "f".repeat(1024 - 1008 + 1);
    assert!(matches!(
        fs.create(parent, &too_long, 0o644, None).await,
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(
        fs.mkdir(parent, &fits, 0o755, None).await,
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(
        fs.symlink(parent, &too_long, "t", None).await,
        Err(FsError::NameTooLong)
    ));
    assert!(matches!(
        fs.lookup(parent, &too_long).await,
        Err(FsError::NameTooLong)
    ));
    let (a, fh) = fs.create(parent, &fits, 0o644, None).await.unwrap();
    fs.write(fh, 0, b"x").unwrap();
    fs.release(fh).unwrap();
    assert!(matches!(
        fs.rename(parent, &fits, parent, &too_long, false).await,
        Err(FsError::NameTooLong)
    ));
    assert!(fs.flush_all().await.is_empty(), "nothing left failing");
    assert_eq!(fs.getattr(a.ino).await.unwrap().size, 1);
    assert!(mock.keys().iter().any(|k| k.len() == 1024));
    assert!(mock.keys().iter().all(|k| k.len() <= 1024));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_file_whose_name_is_removed_has_no_link() {
    let (_dir, mock, fs) = mount("");
    let (a, fh) = fs.create(ROOT, "gone", 0o644, None).await.unwrap();
    fs.write(fh, 0, b"still here").unwrap();
    assert_eq!(fs.getattr(a.ino).await.unwrap().nlink, 1);
    fs.unlink(ROOT, "gone").await.unwrap();
    assert_eq!(fs.getattr(a.ino).await.unwrap().nlink, 0);
    assert_eq!(&fs.read(fh, 0, 100).await.unwrap()[..], b"still here");
    fs.write(fh, 10, b"!").unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert!(mock.keys().is_empty(), "an unlinked file is never uploaded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_keeps_its_time_when_confirmed_again() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let fs = fs_with_ttl(&mock, dir.path(), Duration::ZERO);
    mock.insert("pre/old/x", b"x".to_vec());
    let made = fs.mkdir(ROOT, "new", 0o755, None).await.unwrap();
    let seen = fs.lookup(ROOT, "old").await.unwrap();
    for _ in 0..3 {
        // Every lookup goes to the store (TTL 0) and must not move the times.
        assert_eq!(fs.lookup(ROOT, "new").await.unwrap().mtime, made.mtime);
        assert_eq!(fs.lookup(ROOT, "old").await.unwrap().mtime, seen.mtime);
        let _ = names(&fs, ROOT).await;
        assert_eq!(fs.getattr(made.ino).await.unwrap().mtime, made.mtime);
    }
}

/// pjdfstest: a directory's mtime and ctime change when an entry is added or removed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_changes_its_time_when_entries_come_and_go() {
    let (_dir, _mock, fs) = mount("");
    let d = fs.mkdir(ROOT, "d", 0o755, None).await.unwrap();
    let mut last = d.mtime;
    let mut changed = |a: flowfs_fs::Attr, what: &str| {
        assert!(a.mtime > last, "{what} did not change the directory's time");
        last = a.mtime;
    };
    let (_, fh) = fs.create(d.ino, "f", 0o644, None).await.unwrap();
    fs.release(fh).unwrap();
    changed(fs.getattr(d.ino).await.unwrap(), "create");
    fs.mkdir(d.ino, "sub", 0o755, None).await.unwrap();
    changed(fs.getattr(d.ino).await.unwrap(), "mkdir");
    fs.rename(d.ino, "f", d.ino, "g", false).await.unwrap();
    changed(fs.getattr(d.ino).await.unwrap(), "rename");
    fs.unlink(d.ino, "g").await.unwrap();
    changed(fs.getattr(d.ino).await.unwrap(), "unlink");
    fs.rmdir(d.ino, "sub").await.unwrap();
    changed(fs.getattr(d.ino).await.unwrap(), "rmdir");
}

/// pjdfstest: a file's mtime is the time of its last write or truncation while it is
/// staged, and utimens sets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_shows_the_time_of_its_last_change() {
    let (_dir, _mock, fs) = mount("");
    let (a, fh) = fs.create(ROOT, "f", 0o644, None).await.unwrap();
    let t0 = fs.getattr(a.ino).await.unwrap().mtime;
    fs.write(fh, 0, b"abc").unwrap();
    let t1 = fs.getattr(a.ino).await.unwrap().mtime;
    assert!(t1 > t0, "write");
    fs.setattr(a.ino, None, Some(1), None, Some(fh))
        .await
        .unwrap();
    let t2 = fs.getattr(a.ino).await.unwrap().mtime;
    assert!(t2 > t1, "ftruncate");
    let old = std::time::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    fs.setattr(a.ino, None, None, Some(old), Some(fh))
        .await
        .unwrap();
    assert_eq!(fs.getattr(a.ino).await.unwrap().mtime, old, "utimens");
    fs.release(fh).unwrap();
}

/// A directory's nlink is 2 plus its subdirectories where this mount keeps its listing
/// (pjdfstest rename::updates_link_parent), and follows mkdir, rename and rmdir here; it
/// costs no request.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directorys_nlink_counts_its_subdirectories() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    mock.insert("pre/listed/s1/f", b"x".to_vec());
    mock.insert("pre/listed/s2/", Vec::new());
    mock.insert("pre/listed/file", b"x".to_vec());
    let fs = fs_with_ttl(&mock, dir.path(), Duration::from_secs(60));
    let listed = path_ino(&fs, "listed").await.unwrap();
    assert_eq!(names(&fs, listed).await.len(), 3);
    assert_eq!(fs.getattr(listed).await.unwrap().nlink, 4, "s1 and s2");
    let a = fs.mkdir(ROOT, "a", 0o755, None).await.unwrap().ino;
    let b = fs.mkdir(ROOT, "b", 0o755, None).await.unwrap().ino;
    fs.mkdir(a, "x", 0o755, None).await.unwrap();
    let (_, fh) = fs.create(a, "file", 0o644, None).await.unwrap();
    fs.release(fh).unwrap();
    assert_eq!(fs.getattr(a).await.unwrap().nlink, 3);
    assert_eq!(fs.getattr(b).await.unwrap().nlink, 2);
    fs.rename(a, "x", b, "x", false).await.unwrap();
    assert_eq!(fs.getattr(a).await.unwrap().nlink, 2);
    assert_eq!(fs.getattr(b).await.unwrap().nlink, 3);
    fs.rmdir(b, "x").await.unwrap();
    assert_eq!(fs.getattr(b).await.unwrap().nlink, 2);
}

/// SEMANTICS, *Names that cannot be shown*: keys with an empty component, a `.` or `..`
/// component, or a component over 255 bytes are left out of listings; `a//b` still makes
/// `a` a directory, which looks empty but is not (rmdir: ENOTEMPTY); a lookup of a name
/// over 255 bytes is ENAMETOOLONG.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keys_that_cannot_be_names_are_left_out_and_still_count_as_content() {
    let (_dir, mock, fs) = mount("");
    let long = "x".repeat(256);
    mock.insert("ok", b"1".to_vec());
    mock.insert("a//b", b"2".to_vec());
    mock.insert("/x", b"3".to_vec());
    mock.insert("d/./e", b"4".to_vec());
    mock.insert("d/../e", b"5".to_vec());
    mock.insert("d/f", b"6".to_vec());
    mock.insert(&format!("d/{long}"), b"7".to_vec());
    let mut root = names(&fs, ROOT).await;
    root.sort();
    assert_eq!(
        root,
        ["a", "d", "ok"],
        "the root shows what a name can show"
    );
    let a = fs.lookup(ROOT, "a").await.unwrap().ino;
    assert!(names(&fs, a).await.is_empty(), "a//b is not reachable");
    assert!(matches!(fs.rmdir(ROOT, "a").await, Err(FsError::NotEmpty)));
    assert_eq!(mock.object("a//b").as_deref(), Some(&b"2"[..]));
    let d = fs.lookup(ROOT, "d").await.unwrap().ino;
    assert_eq!(
        names(&fs, d).await,
        ["f"],
        "., .. and a 256-byte component are left out"
    );
    assert!(matches!(
        fs.lookup(d, &long).await,
        Err(FsError::NameTooLong)
    ));
}
