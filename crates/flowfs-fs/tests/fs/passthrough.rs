//! Writers served by the kernel itself (FUSE passthrough): their writes reach the staged
//! file without a `write` call. These tests write to the offered backing file as the
//! kernel would and check what flowfs makes of it: sizes, uploads, the journal.

use std::os::unix::fs::FileExt;

use flowfs_client::mock::Op;
use flowfs_fs::OpenMode;
use flowfs_fs::{Backing, ROOT};

use crate::common::{copy_whole, data, mount, uploaded, written};

/// A new file in the root created with passthrough asked for: its attributes, handle
/// and hints (a backing file among them).
async fn created(
    fs: &std::sync::Arc<flowfs_fs::Fs>,
    name: &str,
) -> (flowfs_fs::Attr, u64, flowfs_fs::OpenHints) {
    fs.create_io(ROOT, name, 0o644, None, true)
        .await
        .expect("create")
}

fn backing_file(b: &Option<Backing>) -> &std::fs::File {
    b.as_ref().expect("a backing file is offered").file()
}

/// Whether the backing file offered holds exactly `bytes` from its start.
fn holds(b: &Option<Backing>, bytes: &[u8]) -> bool {
    let mut local = vec![0u8; bytes.len()];
    backing_file(b)
        .read_exact_at(&mut local, 0)
        .expect("read the backing file");
    local == bytes
}

/// A new file written only through its backing file is uploaded whole at its close,
/// and stat shows its size while the writer is open.
#[tokio::test]
async fn a_passthrough_writer_s_bytes_are_uploaded_at_its_close() {
    let (_dir, mock, fs) = mount("");
    let (a, fh, hints) = created(&fs, "out.bin").await;
    let bytes = data(3 << 20, 5);
    let f = backing_file(&hints.backing);
    f.write_all_at(&bytes[..1 << 20], 0).unwrap();
    f.write_all_at(&bytes[1 << 20..], 1 << 20).unwrap();
    assert_eq!(fs.getattr(a.ino).await.unwrap().size, bytes.len() as u64);
    // Three parts were left behind by a front-to-back writer: flowfs never saw them.
    assert_eq!(mock.count(Op::CreateMultipart), 0, "nothing went up early");
    fs.release(fh).unwrap();
    let failed = fs.flush_all().await;
    assert!(failed.is_empty(), "{failed:?}");
    assert!(mock.object("out.bin").expect("uploaded")[..] == bytes[..]);
}

/// A mount killed while a passthrough writer is open has journaled the file at its open
/// (flowfs never sees its writes): the next mount uploads what the file holds.
#[tokio::test]
async fn a_passthrough_writer_s_file_is_recovered_after_a_crash() {
    let (dir, mock, fs) = mount("");
    let (_, _fh, hints) = created(&fs, "log.txt").await;
    backing_file(&hints.backing)
        .write_all_at(b"line 1\n", 0)
        .unwrap();
    drop(hints);
    crate::common::crash(fs).await;
    let fs = crate::common::fs_on(&mock, dir.path(), "");
    let (recovered, failed) = fs.recover().await;
    assert_eq!((recovered, failed), (vec!["log.txt".to_string()], vec![]));
    assert_eq!(mock.object("log.txt").as_deref(), Some(&b"line 1\n"[..]));
}

/// fsync makes durable what the writer wrote before it; what it writes after goes up at
/// its close (an fsync's upload never stands for the final content).
#[tokio::test]
async fn fsync_and_close_of_a_passthrough_writer_upload_each_state() {
    let (_dir, mock, fs) = mount("");
    let (_, fh, hints) = created(&fs, "f").await;
    let f = backing_file(&hints.backing);
    f.write_all_at(b"first", 0).unwrap();
    fs.fsync(fh).await.unwrap();
    assert_eq!(mock.object("f").as_deref(), Some(&b"first"[..]));
    // Same length, same second: only a new generation tells this write from none.
    f.write_all_at(b"FIRST", 0).unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("f").as_deref(), Some(&b"FIRST"[..]));
}

/// A passthrough writer that fsyncs and then closes without writing again uploads its
/// file once, as a writer flowfs serves does (bcftools and samtools outputs in B7 went up
/// twice: the close was compared with the open, not with the fsync's look).
#[tokio::test]
async fn fsync_then_close_without_a_write_uploads_once() {
    let (_dir, mock, fs) = mount("");
    let (_, fh, hints) = created(&fs, "calls.vcf.gz").await;
    let bytes = data(300 << 10, 7);
    backing_file(&hints.backing)
        .write_all_at(&bytes, 0)
        .unwrap();
    fs.fsync(fh).await.unwrap();
    assert_eq!(mock.count(Op::Put), 1);
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(
        mock.count(Op::Put),
        1,
        "the fsync's upload was the final content"
    );
    assert!(mock.object("calls.vcf.gz").expect("uploaded")[..] == bytes[..]);
}

/// An existing object staged by a writer (`Fs::open` stages at once): a passthrough
/// writer and a reader opened meanwhile are offered the same backing file, as the kernel
/// requires of every open of one inode served by passthrough.
#[tokio::test]
async fn every_open_of_a_staged_file_is_offered_the_same_backing_file() {
    let (_dir, mock, fs) = mount("");
    let ino = crate::common::remote(&mock, &fs, "in.txt", &b"hello world"[..]).await;
    let (pre, _) = fs.open(ino, OpenMode::Write).await.unwrap();
    let (wfh, w) = fs.open_as(ino, OpenMode::Write, true).await.unwrap();
    let (rfh, r) = fs.open_as(ino, OpenMode::Read, true).await.unwrap();
    let (w, r) = (w.backing.expect("writer"), r.backing.expect("reader"));
    assert_eq!(w.key(), r.key());
    let mut buf = [0u8; 11];
    r.file().read_exact_at(&mut buf, 0).unwrap();
    assert_eq!(&buf, b"hello world", "the staged copy holds the object");
    w.file().write_all_at(b"HELLO", 0).unwrap();
    fs.release(rfh).unwrap();
    fs.release(wfh).unwrap();
    fs.release(pre).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("in.txt").as_deref(), Some(&b"HELLO world"[..]));
}

/// Without passthrough nothing is offered, and an object opened for reading only is
/// never given a backing file here (its bytes are not all local).
#[tokio::test]
async fn no_backing_file_is_offered_unless_asked_or_when_bytes_are_remote() {
    let (_dir, mock, fs) = mount("");
    let ino = crate::common::remote(&mock, &fs, "r.txt", &b"remote"[..]).await;
    let (fh, h) = fs.open_as(ino, OpenMode::Read, true).await.unwrap();
    assert!(h.backing.is_none());
    fs.release(fh).unwrap();
    let (_, fh, h) = fs.create_io(ROOT, "w", 0o644, None, false).await.unwrap();
    assert!(h.backing.is_none());
    fs.release(fh).unwrap();
}

/// A file whose every byte is in the cache is offered the cache's data file: exactly the
/// object's bytes, as long as the object. The same open before it was read is not.
#[tokio::test]
async fn a_fully_cached_file_is_offered_its_cache_data_file() {
    let (_dir, mock, fs) = mount("");
    let bytes = data((2 << 20) + 777, 9);
    let ino = crate::common::remote(&mock, &fs, "ref.fa", bytes.clone()).await;
    let (fh, h) = fs.open_as(ino, OpenMode::Read, true).await.unwrap();
    assert!(h.backing.is_none(), "nothing is cached yet");
    fs.release(fh).unwrap();
    assert!(crate::common::read_all(&fs, ino).await == bytes);
    let gets = mock.count(Op::Get);
    let (fh, b) = cached_backing(&fs, ino).await;
    assert!(matches!(b.key(), flowfs_fs::BackingKey::Cached(_)));
    let f = b.file();
    assert_eq!(f.metadata().unwrap().len(), bytes.len() as u64);
    let mut got = vec![0u8; bytes.len()];
    f.read_exact_at(&mut got, 0).unwrap();
    assert!(got == bytes);
    assert_eq!(
        mock.count(Op::Get),
        gets,
        "no GET for a pinned, cached file"
    );
    fs.release(fh).unwrap();
}

/// Opens `ino` until it is offered its cache file: a read hands its bytes to the reader
/// before they are written to the cache file (at most 10 s).
async fn cached_backing(fs: &std::sync::Arc<flowfs_fs::Fs>, ino: u64) -> (u64, Backing) {
    let until = std::time::Instant::now() + std::time::Duration::from_secs(10);
    loop {
        let (fh, h) = fs.open_as(ino, OpenMode::Read, true).await.expect("open");
        if let Some(b) = h.backing {
            return (fh, b);
        }
        fs.release(fh).expect("release");
        assert!(
            std::time::Instant::now() < until,
            "never offered its cache file"
        );
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
}

/// A file opened for writing by a passthrough writer and closed without a change is not
/// uploaded again (B7 uploaded 47 such files and two big ones twice, 46 MiB of 139), and
/// one that was changed is, even when its size stayed.
#[tokio::test]
async fn a_passthrough_writer_that_changes_nothing_uploads_nothing() {
    let (_dir, mock, fs) = mount("");
    let ino = crate::common::remote(&mock, &fs, "same.txt", &b"unchanged"[..]).await;
    let (pre, _) = fs.open(ino, OpenMode::Write).await.unwrap();
    let (fh, h) = fs.open_as(ino, OpenMode::Write, true).await.unwrap();
    assert!(h.backing.is_some());
    fs.release(fh).unwrap();
    fs.release(pre).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put), 0, "an unchanged file went up again");
    let (pre, _) = fs.open(ino, OpenMode::Write).await.unwrap();
    let (fh, h) = fs.open_as(ino, OpenMode::Write, true).await.unwrap();
    backing_file(&h.backing).write_all_at(b"UN", 0).unwrap();
    fs.release(fh).unwrap();
    fs.release(pre).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("same.txt").as_deref(), Some(&b"UNchanged"[..]));
}

/// GNU tar writes a file, sets its mtime on the open descriptor, then closes it. With a
/// passthrough writer the write is unseen when the utimens comes: the close took the
/// staged file's own time (that of the write) for a later change and uploaded it,
/// losing the mtime (issue 26: every file of an extracted tree failed `tar --compare`).
#[tokio::test]
async fn a_utimens_before_the_close_of_a_passthrough_writer_is_kept() {
    let (_dir, mock, fs) = mount("");
    let (a, fh, hints) = created(&fs, "f").await;
    backing_file(&hints.backing)
        .write_all_at(&[b'x'; 100], 0)
        .unwrap();
    let old = std::time::UNIX_EPOCH + std::time::Duration::from_secs(1_500_000_000);
    let c = flowfs_fs::AttrChanges {
        mtime: Some(old),
        atime: Some(old),
        ..Default::default()
    };
    fs.setattr_with(a.ino, None, c, Some(fh)).await.unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("f").as_deref(), Some(&[b'x'; 100][..]));
    let m = mock.metadata("f").expect("object");
    assert_eq!(
        m.get("mtime").map(String::as_str),
        Some("1500000000"),
        "{m:?}"
    );
    assert_eq!(fs.getattr(a.ino).await.unwrap().mtime, old);
}

/// An existing object opened for writing without O_TRUNC is fetched only at its first
/// change (it was fetched whole at the open, issue 26): an open that never changes it
/// fetches nothing and uploads nothing, reads go to the bucket, an `ftruncate` fetches
/// what it keeps, a write stages the whole object. Such a writer is offered no backing.
#[tokio::test]
async fn an_existing_object_opened_for_writing_is_fetched_at_its_first_change() {
    let (_dir, mock, fs) = mount("");
    let body = data(3 << 20, 9);
    for k in ["touched", "cut", "patched"] {
        mock.insert(k, body.clone());
    }
    let none = flowfs_fs::AttrChanges::default();
    let ino = crate::common::path_ino(&fs, "touched").await.unwrap();
    let (fh, h) = fs.open_as(ino, OpenMode::Write, true).await.unwrap();
    assert!(h.backing.is_none());
    assert_eq!(fs.read(fh, 100, 10).await.unwrap()[..], body[100..110]);
    fs.fsync(fh).await.unwrap();
    fs.release(fh).unwrap();
    assert!(
        mock.get_bytes() < 1 << 20,
        "{} bytes for a read of 10",
        mock.get_bytes()
    );
    let before = mock.get_bytes();
    let ino = crate::common::path_ino(&fs, "cut").await.unwrap();
    let (fh, _) = fs.open_as(ino, OpenMode::Write, true).await.unwrap();
    fs.setattr_with(ino, Some(4096), none, Some(fh))
        .await
        .unwrap();
    fs.release(fh).unwrap();
    assert_eq!(
        mock.get_bytes() - before,
        4096,
        "ftruncate fetches what it keeps"
    );
    let ino = crate::common::path_ino(&fs, "patched").await.unwrap();
    let (fh, _) = fs.open_as(ino, OpenMode::Write, true).await.unwrap();
    assert!(fs.needs_stage(fh));
    fs.stage(fh, u64::MAX).await.unwrap();
    assert!(!fs.needs_stage(fh));
    fs.write(fh, 1, b"XY").unwrap();
    assert_eq!(
        fs.read(fh, 0, 4).await.unwrap()[..],
        [body[0], b'X', b'Y', body[3]]
    );
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put) + mock.count(Op::CompleteMultipart), 2);
    assert_eq!(mock.object("touched").as_deref(), Some(&body[..]));
    assert_eq!(mock.object("cut").as_deref(), Some(&body[..4096]));
    let mut patched = body.clone();
    patched[1..3].copy_from_slice(b"XY");
    assert_eq!(mock.object("patched").as_deref(), Some(&patched[..]));
}

/// fsync is of the file, not of the descriptor: a writer that has changed nothing yet
/// waits for what another handle wrote, as it did when every writer staged at its open.
#[tokio::test]
async fn fsync_of_an_unstaged_writer_makes_the_file_durable() {
    let (_dir, mock, fs) = mount("");
    let ino = crate::common::remote(&mock, &fs, "shared", &b"old content"[..]).await;
    let (lazy, _) = fs.open_as(ino, OpenMode::Write, false).await.unwrap();
    assert!(fs.needs_stage(lazy));
    let (eager, _) = fs.open(ino, OpenMode::Write).await.unwrap();
    fs.write(eager, 0, b"NEW").unwrap();
    fs.fsync(lazy).await.unwrap();
    assert_eq!(mock.object("shared").as_deref(), Some(&b"NEW content"[..]));
    fs.release(eager).unwrap();
    fs.release(lazy).unwrap();
    assert!(fs.flush_all().await.is_empty());
}

/// `copy_file_range` of a file written on this node onto a passthrough writer (`cp` as
/// root publishing a task's output): the staged file gets the bytes on local disk, for the
/// kernel, and the upload at the close is a copy on the server: no byte goes up again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_onto_a_passthrough_writer_is_filled_locally_and_copied_on_the_server() {
    let (_dir, mock, fs) = mount("");
    let bytes = data(3 << 20, 8);
    let (_, src) = written(&fs, "out", &bytes).await;
    let (d, dst, hints) = created(&fs, "pub").await;
    assert_eq!(copy_whole(&fs, src, dst).await, Some(bytes.len() as u64));
    assert!(
        holds(&hints.backing, &bytes),
        "the kernel reads the copy's bytes from the staged file"
    );
    assert_eq!(fs.getattr(d.ino).await.unwrap().size, bytes.len() as u64);
    let sent = mock.count(Op::UploadPart) + mock.count(Op::Put);
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(
        mock.count(Op::UploadPart) + mock.count(Op::Put),
        sent,
        "no byte went up again"
    );
    assert!(mock.object("pub").unwrap() == bytes);
}

/// The same copy when the source's upload landed before the source was opened (a fast
/// upload, or a publish that comes later: the JDK opens its source after the task ended).
/// The source is then read from the node cache, where its upload left it: the staged
/// file is filled from the cache's data file, and the upload is still the server's copy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_of_an_uploaded_source_onto_a_passthrough_writer_is_filled_from_the_cache() {
    let (_dir, mock, fs) = mount("");
    let bytes = data(3 << 20, 11);
    let ino = uploaded(&fs, "out", &bytes).await;
    let (src, _) = fs.open(ino, OpenMode::Read).await.unwrap();
    let (_, dst, hints) = created(&fs, "pub").await;
    let sent = mock.count(Op::UploadPart) + mock.count(Op::Put);
    let got = mock.count(Op::Get);
    assert_eq!(copy_whole(&fs, src, dst).await, Some(bytes.len() as u64));
    assert!(
        holds(&hints.backing, &bytes),
        "the kernel reads the copy's bytes from the staged file"
    );
    fs.release(dst).unwrap();
    fs.release(src).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(
        mock.count(Op::UploadPart) + mock.count(Op::Put),
        sent,
        "no byte went up again"
    );
    assert_eq!(mock.count(Op::Get), got, "nor came down");
    assert!(mock.count(Op::Copy) >= 1);
    assert!(mock.object("pub").unwrap() == bytes);
}

/// The source removed before the copy's upload: the store refuses the copy, and the bytes
/// staged for the kernel are sent instead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_filled_copy_whose_source_is_gone_sends_its_bytes() {
    let (_dir, mock, fs) = mount("");
    let bytes = data(200_000, 9);
    let (_, src) = written(&fs, "out", &bytes).await;
    let (_, dst, _hints) = created(&fs, "pub").await;
    assert_eq!(copy_whole(&fs, src, dst).await, Some(bytes.len() as u64));
    fs.release(src).unwrap();
    fs.unlink(ROOT, "out").await.unwrap();
    assert!(fs.flush_all().await.is_empty(), "out's delete done");
    fs.release(dst).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert!(mock.object("pub").unwrap() == bytes);
    assert!(mock.object("out").is_none());
}
