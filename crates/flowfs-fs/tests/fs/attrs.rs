//! POSIX attributes in object metadata (issue 17): what uploads carry, chmod/chown/utimens
//! of objects in the bucket, what listings cost, and what other tools' objects show.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::{AttrChanges, Fs, FsConfig, MetaHeads, ROOT};

use crate::common::{await_count, fs_on, mount, setup};

fn meta(mock: &MockClient, key: &str) -> HashMap<String, String> {
    mock.metadata(key).expect("object")
}

fn fs_with(mock: &Arc<MockClient>, cache: &std::path::Path, heads: MetaHeads) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", "", cache.to_path_buf());
    // Every readdir lists again: what a second listing costs is measured.
    cfg.metadata_ttl = Duration::ZERO;
    cfg.meta_heads = heads;
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

async fn readdir_plus(fs: &Arc<Fs>, ino: u64) -> Vec<flowfs_fs::Attr> {
    let items = crate::common::entries(fs, ino, true).await;
    items
        .into_iter()
        .map(|i| i.attr.expect("readdirplus attr"))
        .collect()
}

/// `c` set through the open handle `fh` (futimens, fchmod), then the file closed and its
/// uploads waited for, none failed.
async fn set_on_the_handle_and_closed(fs: &Arc<Fs>, ino: u64, fh: u64, c: AttrChanges) {
    fs.setattr_with(ino, None, c, Some(fh))
        .await
        .expect("setattr on the handle");
    fs.release(fh).expect("release");
    assert!(fs.flush_all().await.is_empty(), "flushed");
}

/// A new file `name` of `mode` written with `bytes` and closed, its upload's PUT sent
/// (made slow by the caller, so that it is still under way); its inode.
async fn being_uploaded(
    fs: &Arc<Fs>,
    mock: &MockClient,
    name: &str,
    mode: u32,
    bytes: &[u8],
) -> u64 {
    let (a, fh) = fs.create(ROOT, name, mode, None).await.expect("create");
    fs.write(fh, 0, bytes).expect("write");
    fs.release(fh).expect("release");
    await_count(mock, Op::Put, 1).await;
    a.ino
}

/// The PUT of a new file carries its mode (with the type bits), the caller's uid and
/// gid and the time of its last write; nothing reads the time back afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_carries_mode_owner_and_the_time_of_the_last_write() {
    let (_dir, mock, fs) = mount("");
    let (a, fh) = fs
        .create(ROOT, "run.sh", 0o755, Some((1234, 5678)))
        .await
        .expect("create");
    // The root's listing taken behind the first create here is no read-back.
    fs.read_ahead_settled().await;
    mock.reset_counts();
    fs.write(fh, 0, b"#!/bin/sh\n").expect("write");
    let written = fs.getattr(a.ino).await.expect("getattr").mtime;
    fs.fsync(fh).await.expect("fsync");
    fs.release(fh).expect("release");
    let m = meta(&mock, "run.sh");
    assert_eq!(m.get("mode").map(String::as_str), Some("33261"), "{m:?}");
    assert_eq!(m.get("uid").map(String::as_str), Some("1234"));
    assert_eq!(m.get("gid").map(String::as_str), Some("5678"));
    let secs = written.duration_since(UNIX_EPOCH).expect("epoch");
    let want = format!("{}.{:09}", secs.as_secs(), secs.subsec_nanos());
    assert_eq!(m.get("mtime"), Some(&want), "the time of the last write");
    assert_eq!(mock.count(Op::Put), 1);
    assert_eq!(
        mock.count(Op::Head) + mock.count(Op::List),
        0,
        "no read-back"
    );
    let after = fs.getattr(a.ino).await.expect("getattr");
    assert_eq!((after.mtime, after.perm, after.uid), (written, 0o755, 1234));
}

/// chmod, chown and utimens of an object in the bucket rewrite its metadata with a copy
/// onto itself: no byte is sent again, and other metadata stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setattr_of_a_durable_object_rewrites_its_metadata_only() {
    let (_dir, mock, fs) = mount("");
    mock.insert_with_metadata("obj", vec![7u8; 3000], &[("other", "kept")]);
    let a = fs.lookup(ROOT, "obj").await.expect("lookup");
    let old = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let c = AttrChanges {
        mode: Some(0o100_700),
        uid: Some(42),
        mtime: Some(old),
        ..AttrChanges::default()
    };
    let shown = fs
        .setattr_with(a.ino, None, c, None)
        .await
        .expect("setattr");
    assert_eq!((shown.perm, shown.uid, shown.mtime), (0o700, 42, old));
    assert!(fs.flush_all().await.is_empty(), "flushed");
    let m = meta(&mock, "obj");
    assert_eq!(m.get("mode").map(String::as_str), Some("33216"), "{m:?}");
    assert_eq!(m.get("uid").map(String::as_str), Some("42"));
    assert_eq!(m.get("mtime").map(String::as_str), Some("1000000000"));
    assert_eq!(m.get("other").map(String::as_str), Some("kept"));
    assert_eq!(mock.object("obj").expect("body"), vec![7u8; 3000]);
    assert_eq!(mock.count(Op::Copy), 1);
    assert_eq!(
        mock.count(Op::Put) + mock.count(Op::UploadPart),
        0,
        "no data sent"
    );
}

/// `cp -p` sends utimens, chown and chmod one after the other: they share rewrites.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setattrs_that_come_together_share_a_rewrite() {
    let (_dir, mock, fs) = mount("");
    mock.insert("obj", vec![1u8; 10]);
    let a = fs.lookup(ROOT, "obj").await.expect("lookup");
    mock.set_latency(Duration::from_millis(20));
    let changes = [
        AttrChanges {
            mtime: Some(UNIX_EPOCH + Duration::from_secs(5)),
            ..AttrChanges::default()
        },
        AttrChanges {
            uid: Some(7),
            gid: Some(8),
            ..AttrChanges::default()
        },
        AttrChanges {
            mode: Some(0o600),
            ..AttrChanges::default()
        },
    ];
    for c in changes {
        fs.setattr_with(a.ino, None, c, None)
            .await
            .expect("setattr");
    }
    assert!(fs.flush_all().await.is_empty(), "flushed");
    assert!(mock.count(Op::Copy) <= 2, "{} copies", mock.count(Op::Copy));
    let m = meta(&mock, "obj");
    for (k, v) in [
        ("mtime", "5"),
        ("uid", "7"),
        ("gid", "8"),
        ("mode", "33152"),
    ] {
        assert_eq!(m.get(k).map(String::as_str), Some(v), "{k}: {m:?}");
    }
}

/// `ls -l` of plain objects (no directory marker) costs the LIST pages and no HEAD.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ls_l_of_ten_thousand_plain_objects_sends_no_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    for i in 0..10_000 {
        mock.insert(&format!("d/f{i:05}"), vec![0u8; 10]);
    }
    let fs = fs_with(&mock, dir.path(), MetaHeads::Marked);
    let d = fs.lookup(ROOT, "d").await.expect("lookup");
    mock.reset_counts();
    let attrs = readdir_plus(&fs, d.ino).await;
    assert_eq!(attrs.len(), 10_000);
    assert!(attrs.iter().all(|a| a.perm == 0o644));
    assert_eq!(mock.count(Op::Head), 0);
    assert_eq!(mock.count(Op::List), 10, "LIST pages of 1,000");
}

/// In a directory with a marker (made by mkdir here or by s3fs), a listing HEADs each
/// object once for its attributes; a listing again of the same versions HEADs none.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_marked_directory_reads_attributes_once_per_version() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    mock.insert("m/", Vec::new());
    mock.insert_with_metadata(
        "m/run.sh",
        b"x".to_vec(),
        &[("mode", "33261"), ("uid", "9")],
    );
    mock.insert("m/plain", b"y".to_vec());
    let fs = fs_with(&mock, dir.path(), MetaHeads::Marked);
    let m = fs.lookup(ROOT, "m").await.expect("lookup");
    mock.reset_counts();
    let attrs = readdir_plus(&fs, m.ino).await;
    let perms: Vec<_> = attrs.iter().map(|a| (a.perm, a.uid)).collect();
    assert_eq!(perms[0].0, 0o644, "plain: the defaults");
    assert_eq!(perms[1], (0o755, 9), "run.sh: its metadata");
    assert_eq!(mock.count(Op::Head), 2);
    readdir_plus(&fs, m.ino).await;
    assert_eq!(
        mock.count(Op::Head),
        2,
        "known versions are not asked again"
    );
    assert_eq!(mock.count(Op::List), 2);
}

/// `--meta-heads always`: every directory's objects are asked, markers or not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_heads_always_reads_unmarked_directories() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    mock.insert_with_metadata("run.sh", b"x".to_vec(), &[("mode", "33261")]);
    let fs = fs_with(&mock, dir.path(), MetaHeads::Always);
    let attrs = readdir_plus(&fs, ROOT).await;
    assert_eq!(attrs[0].perm, 0o755);
    assert_eq!(mock.count(Op::Head), 1);
}

/// `--meta-heads always` reads a subdirectory's marker too (its mode and owner: an
/// archive's directories show theirs this way), once: a listing again asks nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn meta_heads_always_reads_subdirectories_markers_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    mock.insert_with_metadata("d/", Vec::new(), &[("mode", "16832"), ("uid", "42")]);
    mock.insert("d/x", b"x".to_vec());
    mock.insert("plain/y", b"y".to_vec());
    let fs = fs_with(&mock, dir.path(), MetaHeads::Always);
    let attrs = readdir_plus(&fs, ROOT).await;
    let perm_uid: Vec<_> = attrs.iter().map(|a| (a.perm, a.uid)).collect();
    // `d/` has a marker (0700, uid 42); `plain/` none, so it keeps --dir-mode.
    let plain = FsConfig::new("b", "", dir.path().to_path_buf());
    assert_eq!(perm_uid[0], (0o700, 42));
    assert_eq!(perm_uid[1].0, plain.dir_mode);
    assert_eq!(mock.count(Op::Head), 2, "a HEAD per subdirectory");
    mock.reset_counts();
    let again = readdir_plus(&fs, ROOT).await;
    assert_eq!((again[0].perm, again[0].uid), (0o700, 42));
    assert_eq!(
        mock.count(Op::Head),
        0,
        "each directory's marker is asked once"
    );
}

/// An object written by s3fs (or rclone's mtime) shows its mode, owner and time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn objects_of_other_tools_show_their_metadata() {
    let (_dir, mock, fs) = mount("");
    let s3fs = [
        ("mode", "33256"),
        ("uid", "42"),
        ("gid", "43"),
        ("mtime", "1600000000"),
    ];
    mock.insert_with_metadata("s3fs", b"a".to_vec(), &s3fs);
    mock.insert_with_metadata("rclone", b"b".to_vec(), &[("mtime", "1600000000.25")]);
    let a = fs.lookup(ROOT, "s3fs").await.expect("lookup");
    let t = UNIX_EPOCH + Duration::from_secs(1_600_000_000);
    assert_eq!((a.perm, a.uid, a.gid, a.mtime), (0o750, 42, 43, t));
    let r = fs.lookup(ROOT, "rclone").await.expect("lookup");
    assert_eq!(r.mtime, t + Duration::from_millis(250));
    assert_eq!(r.perm, 0o644, "no mode: the default");
}

/// What a mount wrote, a later mount shows: mode and the time of the last write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mode_and_mtime_survive_a_remount() {
    let (one, two) = crate::common::two_caches();
    let (mock, fs) = setup(one.path(), "");
    let d = fs.mkdir(ROOT, "task", 0o755, None).await.expect("mkdir");
    let (a, fh) = fs
        .create(d.ino, "run.sh", 0o644, None)
        .await
        .expect("create");
    fs.write(fh, 0, b"echo\n").expect("write");
    let old = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let c = AttrChanges {
        mode: Some(0o755),
        mtime: Some(old),
        ..AttrChanges::default()
    };
    set_on_the_handle_and_closed(&fs, a.ino, fh, c).await;
    assert_eq!(mock.count(Op::Copy), 0, "the upload carried them");
    let later = fs_on(&mock, two.path(), "");
    let d = later.lookup(ROOT, "task").await.expect("lookup");
    let attrs = readdir_plus(&later, d.ino).await;
    assert_eq!((attrs[0].perm, attrs[0].mtime), (0o755, old));
    assert!(SystemTime::now() > old);
}

/// `echo x > f; touch -d @T f`: the close starts the upload, the utimens comes while it
/// is under way and is not in its PUT, so it is rewritten afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_utimens_during_the_upload_is_rewritten_after_it() {
    let (_dir, mock, fs) = mount("");
    mock.set_latency_of(Op::Put, Duration::from_millis(100));
    let ino = being_uploaded(&fs, &mock, "f", 0o644, b"x\n").await;
    let old = UNIX_EPOCH + Duration::from_secs(1_000_000_000);
    let c = AttrChanges {
        mtime: Some(old),
        ..AttrChanges::default()
    };
    fs.setattr_with(ino, None, c, None).await.expect("setattr");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    assert_eq!(
        meta(&mock, "f").get("mtime").map(String::as_str),
        Some("1000000000")
    );
    assert_eq!((mock.count(Op::Put), mock.count(Op::Copy)), (1, 1));
    assert_eq!(fs.getattr(ino).await.expect("getattr").mtime, old);
}

/// chmod of an object above the single-copy limit (S3: 5 GiB; here lowered to 4 MiB)
/// rewrites its metadata by a copy in parts (UploadPartCopy): no byte is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn setattr_of_an_object_above_the_copy_limit_copies_it_in_parts() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limits = flowfs_client::copy::CopyLimits {
        max_copy: 4 << 20,
        part: 1 << 20,
    };
    let mock = Arc::new(MockClient::with_copy_limits(limits));
    let body: Vec<u8> = (0..(5 << 20) + 7).map(|i: u32| i as u8).collect();
    mock.insert_with_metadata("big", body.clone(), &[("other", "kept")]);
    let fs = fs_with(&mock, dir.path(), MetaHeads::Marked);
    let a = fs.lookup(ROOT, "big").await.expect("lookup");
    let c = AttrChanges {
        mode: Some(0o100_700),
        ..AttrChanges::default()
    };
    fs.setattr_with(a.ino, None, c, None).await.expect("chmod");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    let m = meta(&mock, "big");
    assert_eq!(m.get("mode").map(String::as_str), Some("33216"), "{m:?}");
    assert_eq!(m.get("other").map(String::as_str), Some("kept"));
    assert_eq!(mock.object("big").expect("object"), body);
    assert_eq!(
        mock.count(Op::UploadPartCopy),
        6,
        "six parts of 1 MiB or less"
    );
    assert_eq!((mock.count(Op::Copy), mock.count(Op::Put)), (0, 0));
    assert_eq!(mock.open_uploads(), 0);
}

/// rsync and git: write a temporary name, close (the upload starts), utimens and chmod it
/// (the upload in flight does not carry them), rename it into place. The rewrite those
/// call for after the upload ran beside the rename's copy and delete: it wrote the name
/// being left, so the new name kept the old attributes (issue 26: 2,361 of 3,002 files of
/// an rsync). Slow HEADs and copies widen the window; the bucket must end with the new
/// name only, carrying both changes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn attributes_set_during_the_upload_of_a_file_renamed_next_reach_the_new_name() {
    let (_dir, mock, fs) = mount("");
    mock.set_latency_of(Op::Put, Duration::from_millis(100));
    mock.set_latency_of(Op::Head, Duration::from_millis(50));
    mock.set_latency_of(Op::Copy, Duration::from_millis(50));
    let ino = being_uploaded(&fs, &mock, ".f.XXXX", 0o600, b"hello\n").await;
    let old = UNIX_EPOCH + Duration::from_secs(1_500_000_000);
    let c = AttrChanges {
        mtime: Some(old),
        atime: Some(old),
        mode: Some(0o755),
        ..AttrChanges::default()
    };
    fs.setattr_with(ino, None, c, None).await.expect("setattr");
    fs.rename(ROOT, ".f.XXXX", ROOT, "f", false)
        .await
        .expect("rename");
    assert!(fs.flush_all().await.is_empty(), "flushed");
    assert_eq!(mock.keys(), vec!["f".to_string()], "only the new name");
    let m = meta(&mock, "f");
    assert_eq!(m.get("mode").map(String::as_str), Some("33261"), "{m:?}");
    assert_eq!(
        m.get("mtime").map(String::as_str),
        Some("1500000000"),
        "{m:?}"
    );
    let later = fs_on(&mock, tempfile::tempdir().expect("tempdir").path(), "");
    let f = later.lookup(ROOT, "f").await.expect("lookup");
    assert_eq!((f.perm, f.mtime), (0o755, old));
}

/// A staged file already uploaded and still open (fsync, then fchmod, then close): no
/// upload is to come, so the change must be rewritten in the bucket. It was left to an
/// upload that never came, and lost at the close.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chmod_after_fsync_of_an_open_file_reaches_the_bucket() {
    let (_dir, mock, fs) = mount("");
    let (a, fh) = fs.create(ROOT, "g", 0o644, None).await.expect("create");
    fs.write(fh, 0, b"data\n").expect("write");
    fs.fsync(fh).await.expect("fsync");
    let c = AttrChanges {
        mode: Some(0o700),
        ..AttrChanges::default()
    };
    set_on_the_handle_and_closed(&fs, a.ino, fh, c).await;
    let m = meta(&mock, "g");
    assert_eq!(m.get("mode").map(String::as_str), Some("33216"), "{m:?}");
    assert_eq!(mock.object("g").as_deref(), Some(&b"data\n"[..]));
}
