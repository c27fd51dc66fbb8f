//! What the next mount does with what a dead one left: its journal's staged files and
//! symlinks uploaded, multipart uploads it left open (or whose create was never
//! answered) aborted, records without data and spare records removed, a file the store
//! refuses for good set aside.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::*;
use flowfs_client::mock::{MockClient, Op};
use flowfs_client::ClientError;
use flowfs_fs::{Fs, Kind};
use flowfs_fs::{OpenMode, ROOT};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_mounts_staged_files_are_uploaded_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    {
        let fs = fs_on(&mock, dir.path(), "");
        mock.fail(
            Op::Put,
            0,
            ClientError::Transient("server down".into()),
            1000,
        );
        let (_, fh) = fs.create(ROOT, "result.txt", 0o644, None).await.unwrap();
        fs.write(fh, 0, b"computed for hours").unwrap();
        fs.release(fh).unwrap();
        assert_eq!(fs.flush_all().await.len(), 1);
        // Dropped without a clean shutdown: as after kill -9.
        crash(fs).await;
    }
    let mock2 = Arc::new(MockClient::new());
    let fs = fs_on(&mock2, dir.path(), "");
    let (ok, failed) = fs.recover().await;
    assert_eq!(ok, vec!["result.txt".to_string()]);
    assert!(failed.is_empty());
    assert_eq!(
        mock2.object("result.txt").unwrap(),
        b"computed for hours".to_vec()
    );
    assert!(fs.recover().await.0.is_empty(), "recovered once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_mounts_symlink_is_recovered_as_a_symlink() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    {
        let fs = fs_on(&mock, dir.path(), "");
        mock.fail(
            Op::CreateMultipart,
            0,
            ClientError::Transient("server down".into()),
            1000,
        );
        fs.symlink(ROOT, "ref.fa", "../genome/ref.fa", None)
            .await
            .unwrap();
        assert_eq!(fs.flush_all().await.len(), 1);
        assert!(mock.object("ref.fa").is_none());
        // Dropped without a clean shutdown: as after kill -9.
        crash(fs).await;
    }
    let mock2 = Arc::new(MockClient::new());
    let fs = fs_on(&mock2, dir.path(), "");
    let (ok, failed) = fs.recover().await;
    assert_eq!(ok, vec!["ref.fa".to_string()]);
    assert!(failed.is_empty());
    assert_eq!(
        mock2.object("ref.fa").unwrap(),
        b"../genome/ref.fa".to_vec()
    );
    let a = fs.lookup(ROOT, "ref.fa").await.unwrap();
    assert_eq!(a.kind, Kind::Symlink);
    assert_eq!(fs.readlink(a.ino).await.unwrap(), "../genome/ref.fa");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_early_upload_left_open_by_a_crashed_mount_is_aborted_by_the_next() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let body = data(4 << 20, 9);
    {
        // The mount on a runtime of its own, which dies with it. (It ran on the test's,
        // and a 50 ms sleep stood for "the part tasks are done": one still running when
        // the mount was dropped held the early upload, whose drop then aborted it.)
        let (mock, cache, body) = (mock.clone(), dir.path().to_path_buf(), body.clone());
        std::thread::spawn(move || {
            let rt = current_thread();
            let fs = mount_in(&rt, &mock, &cache);
            rt.block_on(async {
                let (_, fh) = fs.create(ROOT, "half.bam", 0o644, None).await.unwrap();
                fs.write(fh, 0, &body).unwrap();
                await_count(&mock, Op::UploadPart, 3).await;
            });
            // Gone without closing the file or aborting anything, as after kill -9: the
            // runtime goes first (its tasks end where they stand, no abort can start),
            // then the Fs.
            drop(rt);
            drop(fs);
        })
        .join()
        .unwrap();
    }
    // The three parts a whole part behind the writer went; the tail waited for the close.
    assert_eq!(mock.count(Op::UploadPart), 3);
    assert_eq!(mock.open_uploads(), 1, "the crash left the upload open");
    let fs = fs_on(&mock, dir.path(), "");
    let (ok, failed) = fs.recover().await;
    assert_eq!(ok, vec!["half.bam".to_string()]);
    assert!(failed.is_empty());
    assert_eq!(mock.object("half.bam").unwrap(), body);
    assert_eq!(mock.open_uploads(), 0, "the open upload was aborted");
    assert!(fs.recover().await.0.is_empty(), "recovered once");
    assert_eq!(mock.count(Op::AbortMultipart), 1);
}

/// A store holding `big.bin` ("old"), a mount of it on a runtime of its own (dropped to
/// kill the mount), and 3 MiB of new content (seeded) to rewrite it with.
fn big_file_to_rewrite(
    seed: u8,
) -> (
    tempfile::TempDir,
    Arc<MockClient>,
    Vec<u8>,
    tokio::runtime::Runtime,
    Arc<Fs>,
) {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    mock.insert("big.bin", "old");
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    (dir, mock, crate::common::data(3 << 20, seed), rt, fs)
}

/// A mount that dies while a closed file's multipart upload is open leaves that upload
/// in the bucket (its parts are billed until aborted): the next mount with the same
/// cache dir aborts it, and uploads the file whole from the journal.
#[test]
fn the_next_mount_aborts_a_multipart_upload_a_dead_mount_left_open() {
    let (dir, mock, new, rt, fs) = big_file_to_rewrite(9);
    rt.block_on(async {
        let ino = crate::common::path_ino(&fs, "big.bin").await.unwrap();
        // Rewritten, not created: the file goes up in three parts. The parts hang, so
        // that the upload stays open until the crash (with parts served at once, the
        // whole upload could begin and end between two looks at the mock, and this loop
        // waited for good: 1 run in 20).
        mock.set_latency_of(Op::UploadPart, Duration::from_secs(3600));
        let (fh, _) = fs.open(ino, OpenMode::Truncate).await.unwrap();
        fs.write(fh, 0, &new).unwrap();
        fs.release(fh).unwrap();
        let t0 = Instant::now();
        while mock.open_uploads() == 0 {
            assert!(
                t0.elapsed() < Duration::from_secs(30),
                "the upload never began"
            );
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    // The crash: the upload task ends where it stands, the staging lock goes.
    drop(rt);
    drop(fs);
    assert_eq!(mock.open_uploads(), 1);
    mock.set_latency_of(Op::UploadPart, Duration::ZERO);
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    let (recovered, failed) = rt.block_on(fs.recover());
    assert_eq!((recovered, failed), (vec!["big.bin".to_string()], vec![]));
    assert_eq!(mock.open_uploads(), 0, "the dead mount's upload is aborted");
    assert!(mock.object("big.bin").expect("uploaded")[..] == new[..]);
}

/// The paths of the entries of `dir` (which must exist).
fn paths_in(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let entries = std::fs::read_dir(dir).expect("read_dir");
    entries.flatten().map(|e| e.path()).collect()
}

/// The one staging directory under `cache` (a dead mount's, once its mount is gone).
fn the_staging_dir(cache: &std::path::Path) -> std::path::PathBuf {
    let dirs = paths_in(&cache.join("staging"));
    assert_eq!(dirs.len(), 1, "{dirs:?}");
    dirs.into_iter().next().expect("one")
}

/// Notes of multipart uploads under `cache`'s staging directories, with their lines.
fn upload_notes(cache: &std::path::Path) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    for d in std::fs::read_dir(cache.join("staging"))
        .into_iter()
        .flatten()
        .flatten()
    {
        for f in std::fs::read_dir(d.path()).into_iter().flatten().flatten() {
            if f.path().extension().is_some_and(|e| e == "mpu") {
                let text = std::fs::read_to_string(f.path()).unwrap_or_default();
                out.push(text.lines().map(str::to_string).collect());
            }
        }
    }
    out
}

/// Waits until the CreateMultipartUpload of `key` is sent (the mock now holds every
/// request for an hour), checks that it was noted without an id, and lets the mount die
/// there, as kill -9 would.
fn die_with_the_create_in_flight(
    rt: tokio::runtime::Runtime,
    fs: Arc<Fs>,
    mock: &MockClient,
    dir: &std::path::Path,
    key: &str,
) {
    rt.block_on(async {
        let t0 = Instant::now();
        while mock.count(Op::CreateMultipart) == 0 {
            assert!(t0.elapsed() < Duration::from_secs(30), "no create was sent");
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    });
    let notes = upload_notes(dir);
    assert_eq!(
        notes.len(),
        1,
        "the create is noted before it is sent: {notes:?}"
    );
    assert_eq!((notes[0][1].as_str(), notes[0][2].as_str()), (key, ""));
    drop(rt);
    drop(fs);
}

/// The server had created the upload of `key`, and its answer died with the mount: the
/// next mount recovers `key`, aborts that upload and leaves no note.
fn recover_after_the_lost_answer(mock: &Arc<MockClient>, dir: &std::path::Path, key: &str) {
    mock.set_latency(Duration::ZERO);
    let rt = current_thread();
    rt.block_on(async {
        use flowfs_client::ObjectClient;
        mock.create_multipart(key, &Default::default())
            .await
            .expect("the server's create");
    });
    assert_eq!(mock.open_uploads(), 1);
    let fs = mount_in(&rt, mock, dir);
    let (recovered, failed) = rt.block_on(fs.recover());
    assert_eq!((recovered, failed), (vec![key.to_string()], vec![]));
    assert_eq!(
        mock.open_uploads(),
        0,
        "the upload created for the dead mount is aborted"
    );
    let notes = upload_notes(dir);
    assert!(notes.is_empty(), "notes left: {notes:?}");
}

/// A mount that dies while CreateMultipartUpload is on its way never learns the id of
/// the upload the server may have created (kill -9 while the answer is in flight). The
/// create is noted before it is sent, and the next mount aborts the uploads of that key
/// begun since. (Before: the note was written after the answer, and the upload stayed
/// open for good.)
#[test]
fn the_next_mount_aborts_an_upload_whose_create_was_never_answered() {
    let (dir, mock, new, rt, fs) = big_file_to_rewrite(4);
    rt.block_on(async {
        let ino = crate::common::path_ino(&fs, "big.bin").await.unwrap();
        let (fh, _) = fs.open(ino, OpenMode::Truncate).await.unwrap();
        fs.write(fh, 0, &new).unwrap();
        mock.set_latency(Duration::from_secs(3600)); // the create is sent, never answered
        fs.release(fh).unwrap();
    });
    die_with_the_create_in_flight(rt, fs, &mock, dir.path(), "big.bin");
    recover_after_the_lost_answer(&mock, dir.path(), "big.bin");
    assert!(mock.object("big.bin").expect("uploaded")[..] == new[..]);
}

/// The same for a symlink, uploaded as a multipart upload of one part (its ETag ends in
/// `-1`): its create is noted too. (Before: it was not noted at all, and a kill during a
/// symlink's upload left that upload open; the crash rounds of test_crash_mix met it.)
#[test]
fn the_next_mount_aborts_a_symlink_upload_whose_create_was_never_answered() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    rt.block_on(async {
        mock.set_latency(Duration::from_secs(3600)); // the create is sent, never answered
        let fs2 = fs.clone();
        tokio::spawn(async move { fs2.symlink(ROOT, "ln", "some/target", None).await });
    });
    die_with_the_create_in_flight(rt, fs, &mock, dir.path(), "ln");
    recover_after_the_lost_answer(&mock, dir.path(), "ln");
}

/// A journal record whose data is gone (the mount died after the upload succeeded and
/// the data moved to the cache, before the record was removed) has nothing to upload:
/// the next mount removes it and the dead staging directory. (Before: it stayed, and so
/// did the directory, for every later mount.)
#[test]
fn a_record_without_data_is_removed_by_the_next_mount() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    mock.set_latency(Duration::from_secs(3600)); // the upload never ends
    rt.block_on(async {
        let (_, fh) = fs.create(ROOT, "out.txt", 0o644, None).await.unwrap();
        fs.write(fh, 0, b"done").unwrap();
        fs.release(fh).unwrap();
    });
    drop(rt);
    drop(fs);
    let dead = [the_staging_dir(dir.path())];
    let data: Vec<_> = (paths_in(&dead[0]).into_iter())
        .filter(|p| p.extension().is_some_and(|e| e == "data"))
        .collect();
    assert_eq!(data.len(), 1, "{data:?}");
    std::fs::remove_file(&data[0]).unwrap(); // as if adopted by the cache
    mock.set_latency(Duration::ZERO);
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    let (recovered, failed) = rt.block_on(fs.recover());
    assert_eq!((recovered, failed), (vec![], vec![]));
    assert!(
        !dead[0].exists(),
        "the dead staging directory is left: {:?}",
        dead[0]
    );
}

/// Records are written into reused spare files (writeback/spares.rs): a dead mount's
/// directory holding spares beside a record is recovered like any other, and removed
/// once its record is done, spares and all.
#[test]
fn a_dead_staging_directory_with_spare_records_is_recovered_and_removed() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    rt.block_on(async {
        // Two records at once, then none: two spares (one would be reused at once).
        let (_, a) = fs.create(ROOT, "a.txt", 0o644, None).await.unwrap();
        let (_, b) = fs.create(ROOT, "b.txt", 0o644, None).await.unwrap();
        for fh in [a, b] {
            fs.write(fh, 0, b"uploaded").unwrap();
            fs.fsync(fh).await.unwrap(); // durable: its record becomes a spare
            fs.release(fh).unwrap();
        }
        mock.set_latency(Duration::from_secs(3600)); // the next upload never ends
        let (_, fh) = fs.create(ROOT, "second.txt", 0o644, None).await.unwrap();
        fs.write(fh, 0, b"journaled").unwrap();
        fs.release(fh).unwrap();
    });
    drop(rt);
    drop(fs);
    let dead = [the_staging_dir(dir.path())];
    let exts: Vec<String> = (paths_in(&dead[0]).iter())
        .filter_map(|p| Some(p.extension()?.to_string_lossy().into_owned()))
        .collect();
    assert!(exts.iter().any(|e| e == "spare"), "{exts:?}");
    assert_eq!(exts.iter().filter(|e| *e == "rec").count(), 1, "{exts:?}");
    mock.set_latency(Duration::ZERO);
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    let (recovered, failed) = rt.block_on(fs.recover());
    assert_eq!(
        (recovered, failed),
        (vec!["second.txt".to_string()], vec![])
    );
    assert_eq!(
        mock.object("second.txt").as_deref(),
        Some(&b"journaled"[..])
    );
    assert!(
        !dead[0].exists(),
        "the dead staging directory is left: {:?}",
        dead[0]
    );
}

/// A file a crashed mount left in the journal that the store refuses for good (a key
/// too long for it) is moved to CACHE/failed/ with a note, reported once, and not tried
/// again by every later mount; its bytes are kept.
#[test]
fn a_recovery_the_store_refuses_for_good_is_set_aside_not_retried_forever() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let rt = current_thread();
    {
        let _e = rt.enter();
        let fs = crate::common::fs_on(&mock, dir.path(), "");
        mock.fail(Op::Put, 0, ClientError::Transient("down".into()), u64::MAX);
        rt.block_on(async {
            let (_, fh) = fs.create(ROOT, "refused.txt", 0o644, None).await.unwrap();
            fs.write(fh, 0, b"precious").unwrap();
            fs.release(fh).unwrap();
        });
    }
    drop(rt);
    mock.clear_faults();
    mock.fail(
        Op::Put,
        0,
        ClientError::Refused("KeyTooLongError".into()),
        1,
    );
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    let (ok, failed) = rt.block_on(fs.recover());
    assert!(ok.is_empty());
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0].contains("not tried again"), "{failed:?}");
    let kept: Vec<_> = std::fs::read_dir(dir.path().join("failed"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .collect();
    let data = kept
        .iter()
        .find(|p| p.extension().is_none_or(|e| e != "why"))
        .expect("the data is kept");
    assert_eq!(std::fs::read(data).unwrap(), b"precious");
    let why = std::fs::read_to_string(data.with_extension("why")).unwrap();
    assert!(why.contains("key: refused.txt"), "{why}");
    drop(fs);
    drop(rt);
    let puts = mock.count(Op::Put);
    let rt = current_thread();
    let fs = mount_in(&rt, &mock, dir.path());
    assert_eq!(rt.block_on(fs.recover()), (vec![], vec![]));
    assert_eq!(mock.count(Op::Put), puts, "not tried again");
}
