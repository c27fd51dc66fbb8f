//! A rename never races with an upload of the file it moves: an upload that starts while
//! a rename is under way goes to the new name, never to the one being left.

use std::time::Duration;

use crate::common::await_count;
use flowfs_client::mock::Op;
use flowfs_fs::{OpenMode, ROOT};

/// A durable file changed and renamed: the rename deletes the old object (slow here),
/// and an fsync asks for the upload of the change meanwhile. The upload used to start at
/// once, under the old name, and the rename's delete then removed what it had uploaded:
/// fsync returned success, and the bucket held the file under neither name.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_asked_for_during_a_rename_goes_to_the_new_name() {
    let (_dir, mock, fs) = crate::common::mount("");
    let (attr, fh) = fs.create(ROOT, "a", 0o644, None).await.unwrap();
    fs.write(fh, 0, b"first version").unwrap();
    fs.fsync(fh).await.unwrap();
    assert_eq!(mock.object("a").as_deref(), Some(&b"first version"[..]));
    fs.write(fh, 0, b"second version").unwrap();

    mock.set_latency_of(Op::Delete, Duration::from_millis(300));
    let deletes = mock.count(Op::Delete);
    let renaming = {
        let fs = fs.clone();
        tokio::spawn(async move { fs.rename(ROOT, "a", ROOT, "b", false).await })
    };
    // The rename is deleting the old object: ask for the change to go up now.
    await_count(&mock, Op::Delete, deletes + 1).await;
    let syncing = {
        let fs = fs.clone();
        tokio::spawn(async move { fs.fsync(fh).await })
    };
    renaming.await.unwrap().expect("rename");
    syncing.await.unwrap().expect("fsync");
    mock.set_latency_of(Op::Delete, Duration::ZERO);
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());

    assert_eq!(
        mock.object("b").as_deref(),
        Some(&b"second version"[..]),
        "the renamed file is in the bucket under its new name"
    );
    assert_eq!(mock.object("a"), None, "nothing is left under the old name");
    assert_eq!(
        crate::common::read_all(&fs, attr.ino).await,
        b"second version"
    );
}

/// git's lock-file dance many times over: create `config.lock`, write, close, rename it
/// over `config`. Every rename succeeds and the bucket ends with the last version only.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_file_renamed_over_its_target_again_and_again_loses_nothing() {
    let (_dir, mock, fs) = crate::common::mount("");
    mock.set_latency_of(Op::Put, Duration::from_millis(2));
    mock.set_latency_of(Op::Delete, Duration::from_millis(3));
    for i in 0..200 {
        let body = format!("config version {i}\n");
        let (_, fh) = fs.create(ROOT, "config.lock", 0o644, None).await.unwrap();
        fs.write(fh, 0, body.as_bytes()).unwrap();
        fs.release(fh).unwrap();
        if i % 3 == 0 {
            // Sometimes the upload has begun before the rename.
            tokio::task::yield_now().await;
        }
        fs.rename(ROOT, "config.lock", ROOT, "config", false)
            .await
            .unwrap_or_else(|e| panic!("rename {i}: {e}"));
    }
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(
        mock.object("config").as_deref(),
        Some(&b"config version 199\n"[..])
    );
    assert_eq!(mock.object("config.lock"), None);
}

/// A durable file renamed is a copy in the bucket, and a copy's ETag is not always its
/// source's (S3's copy of a multipart object, Azure's of any blob, the mock's of any):
/// the node took the new name but kept the old ETag, so changing the file within the
/// metadata TTL read its bytes with a stale If-Match and failed with ESTALE (seen on
/// Azure by test_write_mix: a write-then-rename, then a truncate of the result).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_renamed_file_can_be_changed_at_once() {
    let (_dir, mock, fs) = crate::common::mount("");
    // A directory from the bucket, whose `g` is listed (the listing kept) but never
    // looked up: no node for it when its directory moves.
    mock.insert("d/sub/g", &b"deeper\n"[..]);
    for (name, body) in [("out.tmp", &b"new result\n"[..]), ("d.tmp", b"in a dir\n")] {
        let (_, fh) = fs.create(ROOT, name, 0o644, None).await.unwrap();
        fs.write(fh, 0, body).unwrap();
        fs.fsync(fh).await.unwrap();
        fs.release(fh).unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
    let d = fs.lookup(ROOT, "d").await.unwrap();
    let sub = fs.lookup(d.ino, "sub").await.unwrap();
    assert_eq!(crate::common::names(&fs, sub.ino).await, ["g"]);
    fs.rename(ROOT, "d.tmp", d.ino, "f", false).await.unwrap();
    fs.rename(ROOT, "d", ROOT, "moved", false).await.unwrap();
    fs.rename(ROOT, "out.tmp", ROOT, "out.txt", false)
        .await
        .unwrap();
    let files = [
        (ROOT, "out.txt", "out.txt"),
        (d.ino, "f", "moved/f"),
        (sub.ino, "g", "moved/sub/g"),
    ];
    for (parent, name, path) in files {
        let a = fs.lookup(parent, name).await.unwrap();
        let (fh, _) = fs.open(a.ino, OpenMode::Write).await.unwrap();
        fs.setattr(a.ino, None, Some(3), None, Some(fh))
            .await
            .unwrap_or_else(|e| panic!("truncate of {path} just after its rename: {e}"));
        fs.write(fh, 3, b"!").unwrap();
        fs.release(fh).unwrap();
        assert!(fs.flush_all().await.is_empty());
        assert_eq!(mock.object(path).map(|b| b.len()), Some(4), "{path}");
    }
}
