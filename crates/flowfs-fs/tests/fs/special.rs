//! FIFOs, sockets and device nodes (issue 17): empty objects whose metadata holds their
//! mode and rdev, as s3fs-fuse writes them; the kernel does their I/O locally.

use flowfs_client::mock::Op;
use flowfs_fs::{Kind, ROOT};

use crate::common::{fs_on, setup};

const S_IFIFO: u32 = 0o010_000;
const S_IFCHR: u32 = 0o020_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifos_and_devices_are_empty_objects_with_mode_and_rdev() {
    let (one, two) = (
        tempfile::tempdir().expect("dir"),
        tempfile::tempdir().expect("dir"),
    );
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
