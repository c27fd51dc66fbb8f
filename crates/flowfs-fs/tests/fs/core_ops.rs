//! The file system core over the in-memory store: no FUSE, no network.

use std::sync::Arc;
use std::time::Duration;

use crate::common::*;
use flowfs_client::mock::{MockClient, Op};
use flowfs_client::ClientError;
use flowfs_fs::ROOT;
use flowfs_fs::{Fs, FsConfig, FsError, Kind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listings_span_pages_and_directories_win() {
    let (_dir, mock, fs) = mount("");
    for i in 0..2500 {
        mock.insert(&format!("wide/f{i:05}"), vec![1u8; i % 7]);
    }
    mock.insert("both", b"object".to_vec());
    mock.insert("both/inner", b"x".to_vec());
    mock.insert("marker/", Vec::new());
    mock.insert("odd name +=&ü.txt", b"odd".to_vec());
    let root = names(&fs, ROOT).await;
    assert_eq!(root, vec!["both", "marker", "odd name +=&ü.txt", "wide"]);
    let wide = path_ino(&fs, "wide").await.unwrap();
    // The root's listing had "wide" listed ahead (fs/walk.rs): one page, given up.
    fs.read_ahead_settled().await;
    assert_eq!(fs.read_ahead().walks.too_big, 1);
    mock.reset_counts();
    let listed = names(&fs, wide).await;
    assert_eq!(listed.len(), 2500);
    assert_eq!(mock.count(Op::List), 3, "three pages of 1,000");
    let a = fs.lookup(wide, "f00013").await.unwrap();
    assert_eq!(a.size, 13 % 7);
    assert_eq!(mock.count(Op::Head), 0, "attributes come from the listing");
    assert_eq!(fs.lookup(ROOT, "both").await.unwrap().kind, Kind::Dir);
    assert_eq!(fs.lookup(ROOT, "marker").await.unwrap().kind, Kind::Dir);
    assert!(matches!(
        fs.lookup(ROOT, "missing").await,
        Err(FsError::NotFound)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_land_one_to_one_and_large_files_go_multipart() {
    let (_dir, mock, fs) = mount("run");
    let small = data(1000, 1);
    let (a, fh) = fs.create(ROOT, "small.txt", 0o644, None).await.unwrap();
    fs.write(fh, 0, &small).unwrap();
    // Read your writes before anything is uploaded.
    assert_eq!(fs.read(fh, 0, 4096).await.unwrap(), small);
    fs.release(fh).unwrap();

    let big = data((3 << 20) + 5, 2);
    let (_, fh) = fs.create(ROOT, "big.bin", 0o644, None).await.unwrap();
    for (i, c) in big.chunks(256 << 10).enumerate() {
        fs.write(fh, (i * (256 << 10)) as u64, c).unwrap();
    }
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("run/small.txt").unwrap(), small);
    assert_eq!(mock.object("run/big.bin").unwrap(), big);
    assert!(mock.count(Op::UploadPart) >= 4);
    // Each carried its checksum, summed as the staged file was read (and checked by the mock).
    assert_eq!(mock.unsummed_uploads(), 0);
    assert_eq!(mock.open_uploads(), 0);
    assert_eq!(read_all(&fs, a.ino).await, small);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_uploads_reach_fsync_and_are_kept_until_they_succeed() {
    let (_dir, mock, fs) = mount("");
    mock.fail(Op::Put, 0, ClientError::Transient("injected".into()), 1);
    let (_, fh) = fs.create(ROOT, "out.txt", 0o644, None).await.unwrap();
    fs.write(fh, 0, b"precious").unwrap();
    let e = fs.fsync(fh).await.expect_err("the PUT failed");
    assert!(matches!(e, FsError::Upload(_)), "{e:?}");
    assert!(e.to_string().starts_with("out.txt: upload failed: "), "{e}");
    // The store's error is kept as the cause, not only as words.
    let cause = std::error::Error::source(&e).expect("a cause");
    let client = cause
        .downcast_ref::<Arc<ClientError>>()
        .expect("the client's error");
    assert!(matches!(&**client, ClientError::Transient(_)), "{client:?}");
    assert!(matches!(fs.flush(fh), Err(FsError::Upload(_))));
    assert!(mock.object("out.txt").is_none());
    // The next fsync tries again, and the data was never lost.
    fs.fsync(fh).await.unwrap();
    assert_eq!(mock.object("out.txt").unwrap(), b"precious".to_vec());
    fs.release(fh).unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_multipart_upload_is_aborted_and_never_visible() {
    let (_dir, mock, fs) = mount("");
    mock.fail(
        Op::UploadPart,
        1,
        ClientError::Transient("injected".into()),
        1_000,
    );
    let (_, fh) = fs.create(ROOT, "big", 0o644, None).await.unwrap();
    fs.write(fh, 0, &data(3 << 20, 3)).unwrap();
    fs.release(fh).unwrap();
    let failed = fs.flush_all().await;
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].starts_with("big:"));
    assert!(mock.object("big").is_none());
    assert_eq!(mock.open_uploads(), 0, "aborted");
    mock.clear_faults();
    assert!(fs.flush_all().await.is_empty(), "a second flush retries");
    assert_eq!(mock.object("big").unwrap(), data(3 << 20, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn completion_marker_becomes_visible_after_the_outputs() {
    let (_dir, mock, fs) = mount("");
    mock.set_latency(Duration::from_millis(20));
    let task = fs.mkdir(ROOT, "task", 0o755, None).await.unwrap().ino;
    let sub = fs.mkdir(task, "sub", 0o755, None).await.unwrap().ino;
    for (parent, name, n) in [
        (task, "a.bam", 3 << 20),
        (sub, "b.vcf", 2000),
        (task, "c.log", 10),
    ] {
        let (_, fh) = fs.create(parent, name, 0o644, None).await.unwrap();
        fs.write(fh, 0, &data(n, 4)).unwrap();
        fs.release(fh).unwrap();
    }
    let (_, fh) = fs.create(task, ".exitcode", 0o644, None).await.unwrap();
    fs.write(fh, 0, b"0").unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    let order = mock.visible_order();
    let pos = |k: &str| {
        order
            .iter()
            .position(|x| x == k)
            .unwrap_or_else(|| panic!("{k} missing: {order:?}"))
    };
    let marker = pos("task/.exitcode");
    for k in ["task/a.bam", "task/sub/b.vcf", "task/c.log"] {
        assert!(pos(k) < marker, "{k} after the marker: {order:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn namespace_changes_move_objects() {
    let (_dir, mock, fs) = mount("");
    mock.insert("d/x", b"x".to_vec());
    mock.insert("d/sub/y", b"y".to_vec());
    mock.insert("f", b"f".to_vec());
    let d = path_ino(&fs, "d").await.unwrap();
    assert!(matches!(fs.rmdir(ROOT, "d").await, Err(FsError::NotEmpty)));
    fs.rename(ROOT, "d", ROOT, "e", false).await.unwrap();
    assert_eq!(mock.object("e/sub/y").unwrap(), b"y".to_vec());
    assert!(mock.object("d/x").is_none());
    assert_eq!(names(&fs, d).await, vec!["sub", "x"]);
    fs.rename(ROOT, "f", d, "g", false).await.unwrap();
    assert_eq!(mock.object("e/g").unwrap(), b"f".to_vec());
    fs.unlink(d, "g").await.unwrap();
    assert!(mock.object("e/g").is_none());
    assert!(matches!(fs.lookup(d, "g").await, Err(FsError::NotFound)));
    let l = fs.symlink(ROOT, "link", "e/x", None).await.unwrap();
    assert_eq!(fs.readlink(l.ino).await.unwrap(), "e/x");
    // uploaded in the background, like a file
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("link").unwrap(), b"e/x".to_vec());
    // Another mount tells the symlink from a file by its listing and metadata.
    let other = tempfile::tempdir().unwrap();
    let fs2 = fs_on(&mock, other.path(), "");
    let a = fs2.lookup(ROOT, "link").await.unwrap();
    assert_eq!(a.kind, Kind::Symlink);
    assert_eq!(fs2.readlink(a.ino).await.unwrap(), "e/x");
    let m = fs.mkdir(ROOT, "empty", 0o755, None).await.unwrap();
    assert_eq!(m.kind, Kind::Dir);
    assert!(
        mock.object("empty/").is_some(),
        "a marker keeps an empty directory"
    );
    fs.rmdir(ROOT, "empty").await.unwrap();
    assert!(mock.object("empty/").is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn symlinks_cost_their_upload_only_and_known_ones_no_head_in_listings() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    // A TTL of zero: every readdir lists the bucket again.
    let mut cfg = FsConfig::new("b", "", dir.path().join("own"));
    cfg.metadata_ttl = Duration::ZERO;
    let fs = Arc::new(Fs::new(cfg, mock.clone()).expect("fs"));
    let d = fs.mkdir(ROOT, "task", 0o755, None).await.unwrap().ino;
    mock.reset_counts();
    for i in 0..5 {
        fs.symlink(d, &format!("in{i}.bam"), &format!("/data/in{i}.bam"), None)
            .await
            .unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
    // One PUT each in a directory with a marker (its listings read every object's
    // metadata), which carries the mtime (no read-back of the bucket's time), and no HEAD
    // or LIST to check the name (the kernel did).
    let (heads, lists) = (mock.count(Op::Head), mock.count(Op::List));
    assert_eq!(heads + lists, 0, "{heads} HEADs and {lists} LISTs");
    assert_eq!(mock.count(Op::Put), 5);
    assert_eq!(mock.count(Op::CreateMultipart), 0);
    mock.insert("task/other.bam", b"plain".to_vec());
    // This mount's new listing recognises its own symlinks without a HEAD each (the one
    // HEAD: the new object, whose attributes a directory with a marker may hold)...
    mock.reset_counts();
    assert_eq!(names(&fs, d).await.len(), 6);
    assert!(mock.count(Op::List) >= 1);
    assert_eq!(mock.count(Op::Head), 1);
    // ...while another mount, which never saw them, HEADs each object once.
    let fs2 = fs_on(&mock, &dir.path().join("second"), "");
    let d2 = path_ino(&fs2, "task").await.unwrap();
    mock.reset_counts();
    assert_eq!(names(&fs2, d2).await.len(), 6);
    assert_eq!(mock.count(Op::Head), 6);
    let a = fs2.lookup(d2, "in3.bam").await.unwrap();
    assert_eq!(a.kind, Kind::Symlink);
    assert_eq!(fs2.readlink(a.ino).await.unwrap(), "/data/in3.bam");
    // and the first mount still shows them as symlinks
    let a = fs.lookup(d, "in0.bam").await.unwrap();
    assert_eq!(a.kind, Kind::Symlink);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_directory_renamed_while_a_file_below_uploads_keeps_it() {
    // The upload may land before, during or after the rename's LIST and copies: in every
    // case the file must end up under the new name only.
    for delay_ms in [0u64, 3, 8, 15, 25, 40] {
        let (_dir, mock, fs) = mount("");
        let a = fs.mkdir(ROOT, "a", 0o755, None).await.unwrap().ino;
        let b = fs.mkdir(a, "b", 0o755, None).await.unwrap().ino;
        for i in 0..3 {
            let (_, fh) = fs.create(b, &format!("old{i}"), 0o644, None).await.unwrap();
            fs.write(fh, 0, b"older").unwrap();
            fs.release(fh).unwrap();
        }
        assert!(fs.flush_all().await.is_empty());
        mock.set_latency(Duration::from_millis(10));
        // Multipart (three parts): it lands well after the upload starts.
        let body = data(5 << 19, delay_ms as u8);
        let (_, fh) = fs.create(b, "just_written", 0o644, None).await.unwrap();
        fs.write(fh, 0, &body).unwrap();
        fs.release(fh).unwrap();
        // The point of the test: the rename starts at varied times into the upload.
        tokio::time::sleep(Duration::from_millis(delay_ms)).await;
        fs.rename(ROOT, "a", ROOT, "z", false).await.unwrap();
        assert!(fs.flush_all().await.is_empty());
        mock.set_latency(Duration::ZERO);
        let keys = mock.keys();
        assert!(
            keys.iter().all(|k| !k.starts_with("a/")),
            "delay {delay_ms} ms: left under the old name: {keys:?}"
        );
        assert_eq!(
            mock.object("z/b/just_written").as_deref(),
            Some(&body[..]),
            "delay {delay_ms} ms: {keys:?}"
        );
        let cache2 = tempfile::tempdir().unwrap();
        let fresh = fs_on(&mock, cache2.path(), "");
        let ino = path_ino(&fresh, "z/b/just_written").await.unwrap();
        assert_eq!(read_all(&fresh, ino).await, body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_written_front_to_back_uploads_its_parts_while_written() {
    let (_dir, mock, fs) = mount("");
    let body = data((5 << 20) + 777, 3);
    let (_, fh) = fs.create(ROOT, "big.bam", 0o644, None).await.unwrap();
    for (i, c) in body.chunks(128 << 10).enumerate() {
        fs.write(fh, (i * (128 << 10)) as u64, c).unwrap();
    }
    // Parts a whole part behind the writer go up now; nothing is visible yet.
    await_count(&mock, Op::UploadPart, 4).await;
    assert_eq!(mock.count(Op::UploadPart), 4);
    assert_eq!(mock.open_uploads(), 1);
    assert!(mock.object("big.bam").is_none());
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("big.bam").unwrap(), body);
    // The tail went at close: six parts in all, one upload.
    assert_eq!(mock.count(Op::UploadPart), 6);
    assert_eq!(mock.count(Op::CreateMultipart), 1);
    assert_eq!(mock.open_uploads(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_to_sent_bytes_drops_the_early_upload() {
    let (_dir, mock, fs) = mount("");
    // Rewritten at the start after parts went (a header patched at the end).
    let mut body = data(4 << 20, 5);
    let (_, fh) = fs.create(ROOT, "patched", 0o644, None).await.unwrap();
    fs.write(fh, 0, &body).unwrap();
    await_count(&mock, Op::UploadPart, 1).await;
    assert!(mock.count(Op::UploadPart) >= 1);
    body[10..20].copy_from_slice(b"HEADER!!!!");
    fs.write(fh, 10, b"HEADER!!!!").unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("patched").unwrap(), body);
    // flush_all returns once the aborts of early uploads given up are answered.
    assert_eq!(mock.open_uploads(), 0);
    assert!(mock.count(Op::AbortMultipart) >= 1);
    // Truncated below what was sent, and unlinked while written: nothing left behind.
    let (a, fh) = fs.create(ROOT, "shrunk", 0o644, None).await.unwrap();
    let sent = mock.count(Op::UploadPart);
    fs.write(fh, 0, &data(4 << 20, 6)).unwrap();
    await_count(&mock, Op::UploadPart, sent + 1).await;
    fs.setattr(a.ino, None, Some(1000), None, Some(fh))
        .await
        .unwrap();
    fs.release(fh).unwrap();
    let (_, fh) = fs.create(ROOT, "gone", 0o644, None).await.unwrap();
    let sent = mock.count(Op::UploadPart);
    fs.write(fh, 0, &data(4 << 20, 7)).unwrap();
    await_count(&mock, Op::UploadPart, sent + 1).await;
    fs.unlink(ROOT, "gone").await.unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("shrunk").unwrap(), data(1000, 6));
    assert!(mock.object("gone").is_none());
    assert_eq!(mock.open_uploads(), 0);
}

/// Uploads carry their mtime in their metadata: none reads the bucket's time back
/// (before issue 17 each read its LastModified with a HEAD or a shared LIST), and a new
/// mount shows the same times.
#[tokio::test(start_paused = true)]
async fn many_uploads_in_one_directory_send_nothing_but_their_puts() {
    let (_dir, mock, fs) = mount("");
    let logs = fs.mkdir(ROOT, "logs", 0o755, None).await.unwrap().ino;
    // Some older objects in the directory, among the new names.
    for i in (0..60).step_by(7) {
        mock.insert(&format!("logs/a{i:03}.old"), vec![1u8; 10]);
    }
    assert!(fs.flush_all().await.is_empty());
    mock.set_latency(Duration::from_millis(5));
    mock.reset_counts();
    let mut inos = Vec::new();
    for i in 0..60 {
        let (a, fh) = fs
            .create(logs, &format!("a{i:03}.log"), 0o644, None)
            .await
            .unwrap();
        fs.write(fh, 0, format!("line {i}\n").as_bytes()).unwrap();
        fs.release(fh).unwrap();
        inos.push(a.ino);
    }
    assert!(fs.flush_all().await.is_empty());
    mock.set_latency(Duration::ZERO);
    assert_eq!(mock.count(Op::Put), 60);
    let (heads, lists) = (mock.count(Op::Head), mock.count(Op::List));
    assert_eq!(
        heads + lists,
        0,
        "{heads} HEADs and {lists} LISTs for 60 uploads"
    );
    // Every file shows the time in its metadata, the one a new mount sees.
    let cache2 = tempfile::tempdir().unwrap();
    let fresh = fs_on(&mock, cache2.path(), "");
    for (i, ino) in inos.iter().enumerate() {
        let here = fs.getattr(*ino).await.unwrap().mtime;
        let other = path_ino(&fresh, &format!("logs/a{i:03}.log"))
            .await
            .unwrap();
        assert_eq!(
            here,
            fresh.getattr(other).await.unwrap().mtime,
            "a{i:03}.log"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mkdir_after_a_lookup_found_nothing_sends_only_its_marker() {
    let (_dir, mock, fs) = mount("");
    mock.insert("taken/x", b"x".to_vec());
    // As the kernel does before mkdir: a lookup that finds nothing.
    assert!(matches!(
        fs.lookup(ROOT, "task").await,
        Err(FsError::NotFound)
    ));
    mock.reset_counts();
    let t = fs.mkdir(ROOT, "task", 0o755, None).await.unwrap();
    assert_eq!(mock.count(Op::Put), 1, "the marker");
    assert_eq!(mock.count(Op::Head) + mock.count(Op::List), 0);
    assert!(mock.object("task/").is_some());
    // Inside the new (empty) directory, the same holds without any lookup request.
    assert!(matches!(
        fs.lookup(t.ino, "a").await,
        Err(FsError::NotFound)
    ));
    fs.mkdir(t.ino, "a", 0o755, None).await.unwrap();
    assert_eq!(mock.count(Op::Head) + mock.count(Op::List), 0);
    // A name this mount knows nothing about is still checked: a directory made by
    // another client is EEXIST.
    assert!(matches!(
        fs.mkdir(ROOT, "taken", 0o755, None).await,
        Err(FsError::Exists)
    ));
    assert!(mock.count(Op::Head) + mock.count(Op::List) >= 1);
}
