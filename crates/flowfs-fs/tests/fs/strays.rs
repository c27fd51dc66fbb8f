//! Strays: objects that uploads of removed files land after the removal, and what
//! `rmdir` does around them without waiting for those uploads.

use std::sync::Arc;
use std::time::Duration;

use flowfs_client::mock::Op;
use flowfs_fs::{Fs, FsError, ROOT};

use crate::common::{await_count, mount};

/// Writes `name` in `dir` and closes it: its upload starts.
async fn closed(fs: &Arc<Fs>, dir: u64, name: &str) {
    let (_, fh) = fs.create(dir, name, 0o644, None).await.expect("create");
    fs.write(fh, 0, b"short-lived\n").expect("write");
    fs.release(fh).expect("release");
}

/// `rm -rf d` of files just written, beside another client's object in d: a page of
/// strays does not hide that object (rmdir read two keys, and took two strays for an
/// empty directory).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rmdir_sees_an_object_behind_a_page_of_strays() {
    let (_dir, mock, fs) = mount("");
    mock.insert("d/z-other", b"another client's\n".to_vec());
    let d = fs.lookup(ROOT, "d").await.expect("lookup").ino;
    mock.set_latency_of(Op::Put, Duration::from_millis(200));
    mock.set_latency_of(Op::Delete, Duration::from_millis(1500));
    for name in ["a", "b"] {
        closed(&fs, d, name).await;
    }
    await_count(&mock, Op::Put, 2).await;
    for name in ["a", "b"] {
        fs.unlink(d, name).await.expect("unlink");
    }
    // Both landed: their tasks are deleting them (slowly).
    await_count(&mock, Op::Delete, 2).await;
    assert!(mock.keys().contains(&"d/a".to_string()));
    let r = fs.rmdir(ROOT, "d").await;
    assert!(matches!(r, Err(FsError::NotEmpty)), "{r:?}");
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.keys(), ["d/z-other"]);
}

/// `rm d/f; rmdir d` with f's PUT in flight: the stray's task deletes d's marker again
/// after the stray (a PUT that lands after the marker's delete makes SeaweedFS the
/// folder again), unless `mkdir d` made it again meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stray_deletes_the_marker_of_its_removed_directory_again_unless_it_was_made_again() {
    for again in [false, true] {
        let (_dir, mock, fs) = mount("");
        let d = fs.mkdir(ROOT, "d", 0o755, None).await.expect("mkdir").ino;
        mock.set_latency_of(Op::Put, Duration::from_millis(300));
        closed(&fs, d, "f").await;
        await_count(&mock, Op::Put, 2).await; // the marker's and f's
        fs.unlink(d, "f").await.expect("unlink");
        fs.rmdir(ROOT, "d")
            .await
            .expect("rmdir does not wait for the upload");
        assert!(
            !mock.keys().contains(&"d/f".to_string()),
            "f's PUT is in flight"
        );
        if again {
            fs.mkdir(ROOT, "d", 0o755, None).await.expect("mkdir again");
        }
        assert!(fs.flush_all().await.is_empty());
        let deletes = mock.count(Op::Delete);
        let want: &[&str] = if again { &["d/"] } else { &[] };
        assert_eq!(mock.keys(), want, "mkdir again: {again}");
        // rmdir's, the stray's, and the marker's again (not after a mkdir).
        assert_eq!(deletes, if again { 2 } else { 3 }, "mkdir again: {again}");
    }
}
