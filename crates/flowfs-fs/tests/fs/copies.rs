//! `copy_file_range` within a mount over the in-memory store (issue 49): a whole object
//! copied onto a file just created is one copy on the server and no byte through the node;
//! anything else is left to the kernel (`None`), which copies the bytes.

use std::sync::Arc;

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::{Attr, CopyRange, Fs, OpenMode, ROOT};

use crate::common::*;

/// An object put by another client, and a reader's handle on it.
async fn source(mock: &MockClient, fs: &Arc<Fs>, data: &[u8]) -> (u64, u64) {
    let ino = remote(mock, fs, "src", data.to_vec()).await;
    let (fh, _) = fs.open(ino, OpenMode::Read).await.expect("open");
    (ino, fh)
}

/// A copy's two ends: `data(n, seed)` as a `source` (its inode, a reader's handle), and a
/// new file `dst` (its attributes, a writer's handle).
async fn ends(
    mock: &MockClient,
    fs: &Arc<Fs>,
    n: usize,
    seed: u8,
) -> (Vec<u8>, (u64, u64), (Attr, u64)) {
    let bytes = data(n, seed);
    let src = source(mock, fs, &bytes).await;
    let dst = fs.create(ROOT, "dst", 0o644, None).await.expect("create");
    (bytes, src, dst)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_whole_object_onto_a_new_file_is_one_server_side_copy() {
    let (_dir, mock, fs) = mount("");
    let bytes = data(3 << 20, 5);
    let (_, src) = source(&mock, &fs, &bytes).await;
    let (attr, dst) = fs.create(ROOT, "dst", 0o600, None).await.unwrap();
    mock.reset_counts();
    assert_eq!(copy_whole(&fs, src, dst).await, Some(bytes.len() as u64));
    assert_eq!(mock.count(Op::Copy), 1);
    assert_eq!(
        mock.get_bytes(),
        0,
        "no byte of the source came to the node"
    );
    assert_eq!(fs.getattr(attr.ino).await.unwrap().size, bytes.len() as u64);
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put), 0, "nothing uploaded after the copy");
    assert_eq!(mock.object("dst").unwrap(), bytes);
    // The copy has the destination's mode, not the source's.
    let mode = mock.metadata("dst").unwrap().get("mode").cloned();
    assert_eq!(mode.as_deref(), Some("33152"), "0o100600");
    assert_eq!(read_all(&fs, attr.ino).await, bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_after_the_copy_changes_the_copy_only() {
    let (_dir, mock, fs) = mount("");
    let (bytes, (_, src), (attr, dst)) = ends(&mock, &fs, 100_000, 7).await;
    assert!(copy_whole(&fs, src, dst).await.is_some());
    // The handle stages the copy at its first change, as any writer of an object.
    assert!(fs.needs_stage(dst));
    fs.write_staging(dst, 10, b"changed".to_vec())
        .await
        .unwrap();
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    let mut want = bytes.clone();
    want[10..17].copy_from_slice(b"changed");
    assert_eq!(mock.object("dst").unwrap(), want);
    assert_eq!(
        mock.object("src").unwrap(),
        bytes,
        "the source is unchanged"
    );
    assert_eq!(read_all(&fs, attr.ino).await, want);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_copies_are_left_to_the_kernel() {
    let (_dir, mock, fs) = mount("");
    let (_, (src_ino, src), (_, dst)) = ends(&mock, &fs, 50_000, 9).await;
    let part = |from: u64, to: u64, len: u64| CopyRange {
        from: (src, from),
        to: (dst, to),
        len,
    };
    // A range: from an offset, to an offset, or not to the end.
    for c in [part(1, 0, 1 << 20), part(0, 1, 1 << 20), part(0, 0, 49_999)] {
        assert_eq!(fs.copy_range(c).await.unwrap(), None, "{c:?}");
    }
    // A destination with a byte in it.
    fs.write(dst, 0, b"x").unwrap();
    assert_eq!(copy_whole(&fs, src, dst).await, None);
    // A second handle on the destination.
    let (_, d2) = fs.create(ROOT, "d2", 0o644, None).await.unwrap();
    let d2_ino = path_ino(&fs, "d2").await.unwrap();
    let (other, _) = fs.open(d2_ino, OpenMode::Write).await.unwrap();
    assert_eq!(copy_whole(&fs, src, d2).await, None);
    fs.release(other).unwrap();
    // A source with staged changes: what the bucket holds is not what it reads.
    let (w, _) = fs.open(src_ino, OpenMode::Write).await.unwrap();
    fs.write(w, 0, b"new").unwrap();
    assert_eq!(copy_whole(&fs, src, d2).await, None);
    assert_eq!(mock.count(Op::Copy), 0);
    for fh in [w, src, dst, d2] {
        fs.release(fh).unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_changed_in_the_bucket_is_not_copied() {
    let (_dir, mock, fs) = mount("");
    let (_, src) = source(&mock, &fs, &data(20_000, 1)).await;
    // Another client replaces the object after the open: the handle reads the old version.
    mock.insert("src", data(30_000, 2));
    let (_, dst) = fs.create(ROOT, "dst", 0o644, None).await.unwrap();
    assert_eq!(copy_whole(&fs, src, dst).await, None);
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(
        mock.object("dst").unwrap(),
        Vec::<u8>::new(),
        "the empty file, not a copy"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_linked_file_or_a_completion_marker_is_copied_by_the_kernel() {
    let (_dir, mock, fs) = mount("");
    let (_, src) = source(&mock, &fs, &data(10_000, 3)).await;
    // Its upload waits for the outputs beside it; a copy would not.
    let (_, marker) = fs.create(ROOT, ".exitcode", 0o644, None).await.unwrap();
    // Every name of a linked file must get the bytes; a copy would reach one.
    let (a, fh) = fs.create(ROOT, "a", 0o644, None).await.unwrap();
    fs.write(fh, 0, b"x").unwrap();
    fs.release(fh).unwrap();
    fs.link(a.ino, ROOT, "b").await.unwrap();
    let (emptied, _) = fs.open(a.ino, OpenMode::Truncate).await.unwrap();
    mock.reset_counts();
    assert_eq!(copy_whole(&fs, src, marker).await, None);
    assert_eq!(copy_whole(&fs, src, emptied).await, None);
    assert_eq!(mock.count(Op::Copy), 0);
    for fh in [marker, emptied, src] {
        fs.release(fh).unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
}

/// A mount whose first `copy_file_range` call of `chunk` bytes or more is taken for the
/// first of several (the kernel's 4 GiB − 4 KiB, the JDK's 2 GiB; small here).
fn chunked(dir: &std::path::Path, chunk: u64) -> (Arc<MockClient>, Arc<Fs>) {
    setup_with(dir, "", |cfg| {
        cfg.part_size = 1 << 20;
        cfg.copy_chunk = chunk;
    })
}

fn call(src: u64, dst: u64, off: u64, len: u64) -> CopyRange {
    CopyRange {
        from: (src, off),
        to: (dst, off),
        len,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_asked_for_in_chunks_is_one_copy_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, fs) = chunked(dir.path(), 1000);
    let (bytes, (_, src), (attr, dst)) = ends(&mock, &fs, 2500, 4).await;
    mock.reset_counts();
    for (off, want) in [(0, 1000), (1000, 1000), (2000, 500)] {
        let got = fs.copy_range(call(src, dst, off, 1000)).await.unwrap();
        assert_eq!(got, Some(want), "call at {off}");
        // The file is what the calls were answered, not the whole copy.
        assert_eq!(fs.getattr(attr.ino).await.unwrap().size, off + want);
    }
    assert_eq!(mock.count(Op::Copy), 1);
    assert!(
        !fs.needs_settle(dst),
        "asked for whole: nothing to cut at close"
    );
    fs.settle(dst).await.unwrap();
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put), 0);
    assert_eq!(mock.object("dst").unwrap(), bytes);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_made_ahead_and_cut_short_is_what_was_answered() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, fs) = chunked(dir.path(), 1000);
    let bytes = data(2500, 6);
    let (_, src) = source(&mock, &fs, &bytes).await;
    // Closed after the first call (a killed `cp`): the file is its first 1000 bytes.
    let (_, a) = fs.create(ROOT, "a", 0o644, None).await.unwrap();
    assert_eq!(
        fs.copy_range(call(src, a, 0, 1000)).await.unwrap(),
        Some(1000)
    );
    assert!(fs.needs_settle(a));
    fs.settle(a).await.unwrap();
    fs.release(a).unwrap();
    // A call out of order: cut, then left to the kernel.
    let (_, b) = fs.create(ROOT, "b", 0o644, None).await.unwrap();
    assert_eq!(
        fs.copy_range(call(src, b, 0, 1000)).await.unwrap(),
        Some(1000)
    );
    assert_eq!(fs.copy_range(call(src, b, 1500, 1000)).await.unwrap(), None);
    assert!(!fs.needs_settle(b));
    fs.release(b).unwrap();
    // A write after the first call: on top of what was answered.
    let (_, c) = fs.create(ROOT, "c", 0o644, None).await.unwrap();
    assert_eq!(
        fs.copy_range(call(src, c, 0, 1000)).await.unwrap(),
        Some(1000)
    );
    assert!(fs.needs_stage(c));
    fs.write_staging(c, 1000, b"tail".to_vec()).await.unwrap();
    fs.release(c).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("a").unwrap(), bytes[..1000].to_vec());
    assert_eq!(mock.object("b").unwrap(), bytes[..1000].to_vec());
    assert_eq!(
        mock.object("c").unwrap(),
        [&bytes[..1000], b"tail"].concat()
    );
}

/// A task's output, closed and still being uploaded, published at once (`publishDir`): the
/// copy waits for the upload, then copies the object on the server; the bytes go up once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_closed_file_still_uploading_is_copied_once_it_lands() {
    let (_dir, mock, fs) = mount("");
    let bytes = data(3 << 20, 3);
    mock.set_latency_of(Op::Put, std::time::Duration::from_millis(300));
    mock.set_latency_of(Op::CompleteMultipart, std::time::Duration::from_millis(300));
    let (_, src) = written(&fs, "out", &bytes).await;
    let (pub_attr, dst) = fs.create(ROOT, "pub", 0o644, None).await.unwrap();
    // (The upload's own copies, an early upload's metadata stamp, are counted too.)
    assert_eq!(copy_whole(&fs, src, dst).await, Some(bytes.len() as u64));
    for fh in [src, dst] {
        fs.release(fh).unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("pub").unwrap(), bytes);
    assert_eq!(mock.object("out").unwrap(), bytes);
    let parts = mock.count(Op::UploadPart) + mock.count(Op::Put);
    assert_eq!(parts, 3, "the bytes went up once: 3 parts of 1 MiB");
    assert_eq!(read_all(&fs, pub_attr.ino).await, bytes);
}

/// A source still open for writing is copied by the kernel, from what it holds now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_still_open_for_writing_is_copied_by_the_kernel() {
    let (_dir, mock, fs) = mount("");
    let (a, w) = fs.create(ROOT, "out", 0o644, None).await.unwrap();
    fs.write(w, 0, &data(100_000, 4)).unwrap();
    let (src, _) = fs.open(a.ino, OpenMode::Read).await.unwrap();
    let (_, dst) = fs.create(ROOT, "pub", 0o644, None).await.unwrap();
    assert_eq!(copy_whole(&fs, src, dst).await, None);
    assert_eq!(mock.count(Op::Copy), 0);
    for fh in [w, src, dst] {
        fs.release(fh).unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
}

/// A mock whose single copies stop at 4 MiB (S3: 5 GiB), parts of 1 MiB.
fn limited(dir: &std::path::Path) -> (Arc<MockClient>, Arc<Fs>) {
    let limits = flowfs_client::copy::CopyLimits {
        max_copy: 4 << 20,
        part: 1 << 20,
    };
    let mock = Arc::new(MockClient::with_copy_limits(limits));
    let cfg = flowfs_fs::FsConfig::new("b", "", dir.to_path_buf());
    let fs = Arc::new(Fs::new(cfg, mock.clone()).expect("fs"));
    (mock, fs)
}

/// Above the store's single-copy limit the copy is made in parts (UploadPartCopy from the
/// source's key): still no byte through the node (before: the store refused the
/// CopyObject, and the call failed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_above_the_single_copy_limit_is_made_in_parts_on_the_server() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, fs) = limited(dir.path());
    let bytes = data((5 << 20) + 9, 6);
    let (_, src) = source(&mock, &fs, &bytes).await;
    let (attr, dst) = fs.create(ROOT, "dst", 0o600, None).await.unwrap();
    mock.reset_counts();
    assert_eq!(copy_whole(&fs, src, dst).await, Some(bytes.len() as u64));
    assert_eq!(
        mock.count(Op::UploadPartCopy),
        6,
        "5 MiB + 9 in parts of 1 MiB"
    );
    assert_eq!(
        mock.get_bytes(),
        0,
        "no byte of the source came to the node"
    );
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put) + mock.count(Op::UploadPart), 0);
    assert_eq!(mock.object("dst").unwrap(), bytes);
    let mode = mock.metadata("dst").unwrap().get("mode").cloned();
    assert_eq!(
        mode.as_deref(),
        Some("33152"),
        "the copy's own mode, 0o100600"
    );
    assert_eq!(read_all(&fs, attr.ino).await, bytes);
}

/// A rename of an object above the limit moves it in parts, and keeps its metadata.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_above_the_single_copy_limit_moves_it_in_parts() {
    let dir = tempfile::tempdir().unwrap();
    let (mock, fs) = limited(dir.path());
    let bytes = data((4 << 20) + 1, 7);
    mock.insert_with_metadata("big", bytes.clone(), &[("other", "kept")]);
    fs.lookup(ROOT, "big").await.unwrap();
    fs.rename(ROOT, "big", ROOT, "moved", false).await.unwrap();
    assert_eq!(mock.object("moved").unwrap(), bytes);
    assert!(mock.object("big").is_none());
    let other = mock.metadata("moved").unwrap().get("other").cloned();
    assert_eq!(other.as_deref(), Some("kept"));
    assert_eq!(mock.get_bytes(), 0);
}
