//! FIFOs, sockets and device nodes (issue 17): empty objects whose metadata holds their
//! mode and rdev, as s3fs-fuse writes them; the kernel does their I/O locally.

use std::sync::Arc;

use flowfs_client::mock::{MockClient, Op};
use flowfs_client::ClientError;
use flowfs_fs::{Kind, ROOT};

use crate::common::{crash, fs_on, setup};

const S_IFIFO: u32 = 0o010_000;
const S_IFCHR: u32 = 0o020_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_devices_are_empty_objects_with_mode_and_rdev() {
    let (one, two) = crate::common::two_caches();
    let (mock, fs) = setup(one.path(), "");
    let p = fs
        .mknod(ROOT, "pipe", S_IFIFO | 0o640, 0, Some((5, 6)))
        .await
        .expect("mkfifo");
    assert_eq!((p.kind, p.perm, p.uid), (Kind::Special(S_IFIFO), 0o640, 5));
    let c = fs
        .mknod(ROOT, "tty", S_IFCHR | 0o600, 0x0102, None)
        .await
        .expect("mknod c");
    assert_eq!((c.kind, c.rdev), (Kind::Special(S_IFCHR), 0x0102));
    assert!(fs.flush_all().await.is_empty(), "flushed");
    assert_eq!(mock.count(Op::Put), 2);
    assert!(mock.object("pipe").expect("object").is_empty());
    let m = mock.metadata("pipe").expect("metadata");
    assert_eq!(m.get("mode").map(String::as_str), Some("4512"), "{m:?}");
    let m = mock.metadata("tty").expect("metadata");
    assert_eq!(m.get("rdev").map(String::as_str), Some("258"), "{m:?}");
    let later = fs_on(&mock, two.path(), "");
    let p = later.lookup(ROOT, "pipe").await.expect("lookup");
    assert_eq!((p.kind, p.perm, p.uid), (Kind::Special(S_IFIFO), 0o640, 5));
    let c = later.lookup(ROOT, "tty").await.expect("lookup");
    assert_eq!((c.kind, c.rdev), (Kind::Special(S_IFCHR), 0x0102));
}

/// A FIFO (or an executable) left in the journal by a crashed mount is recovered with
/// its mode, type bits included: the record carries them (it came back as a plain file).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_mounts_fifo_is_recovered_as_a_fifo() {
    let dir = tempfile::tempdir().expect("dir");
    let mock = Arc::new(MockClient::new());
    {
        let fs = fs_on(&mock, dir.path(), "");
        mock.fail(Op::Put, 0, ClientError::Transient("down".into()), 1000);
        fs.mknod(ROOT, "pipe", S_IFIFO | 0o640, 0, Some((5, 6)))
            .await
            .expect("mkfifo");
        let (_, fh) = fs
            .create(ROOT, "run.sh", 0o750, Some((7, 8)))
            .await
            .expect("create");
        fs.write(fh, 0, b"#!/bin/sh\n").expect("write");
        fs.release(fh).expect("release");
        assert_eq!(fs.flush_all().await.len(), 2, "both left in the journal");
        crash(fs).await;
    }
    let mock2 = Arc::new(MockClient::new());
    let fs = fs_on(&mock2, dir.path(), "");
    let (mut ok, failed) = fs.recover().await;
    ok.sort();
    assert_eq!(
        (ok, failed.len()),
        (vec!["pipe".into(), "run.sh".into()], 0)
    );
    let m = mock2.metadata("pipe").expect("metadata");
    assert_eq!(m.get("mode").map(String::as_str), Some("4512"), "{m:?}");
    let p = fs.lookup(ROOT, "pipe").await.expect("lookup");
    assert_eq!((p.kind, p.perm, p.uid), (Kind::Special(S_IFIFO), 0o640, 5));
    let r = fs.lookup(ROOT, "run.sh").await.expect("lookup");
    assert_eq!((r.kind, r.perm, r.uid, r.gid), (Kind::File, 0o750, 7, 8));
    assert!(mock2
        .metadata("run.sh")
        .expect("meta")
        .contains_key("mtime"));
}
