//! Interleavings inside one transition, which no caller can produce on purpose: each
//! test runs the steps of a transition and another's in the order that once failed.

use super::transfer::read_part;
use super::*;

fn failure(e: flowfs_client::ClientError) -> UploadError {
    UploadError::Store {
        key: "k".into(),
        source: Arc::new(e),
    }
}

fn with_closed_file(content: &[u8]) -> (tempfile::TempDir, WriteBack, Arc<StagedFile>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let wb = WriteBack::new(Staging::open(dir.path()).expect("staging"));
    let file = wb.insert_new(7, NewFile::Created, b"").expect("insert");
    wb.write(7, &file, (0, content), 1 << 20).expect("write");
    assert!(matches!(wb.release(7, &file, true), Released::Upload));
    (dir, wb, file)
}

/// `bwa index` closes a file and at once reopens it with O_TRUNC. An upload that begins
/// after the truncation was decided but reads before it is done must not fail on the
/// short file: CI saw EIO at the close of the rewrite (test_rewrite_right_after_close).
#[test]
fn an_upload_begun_during_a_truncation_reads_only_bytes_that_are_there() {
    let (_dir, wb, file) = with_closed_file(&[5u8; 1 << 20]);
    assert!(wb.open(7, true).is_some());
    let before = wb.resize_begin(7, 0);
    let job = wb.begin_upload(7, "k").expect("the queued upload starts");
    file.file.set_len(0).expect("truncate");
    let read = read_part(&job.file.file, "k", 0, job.size, None).map(|_| ());
    let fin = wb.finish_upload(7, &job, read.map_err(failure), true);
    wb.resize_end(7, 0, before, true);
    assert!(fin.error.is_none());
    assert!(wb.error(7, &file).is_none());
}

/// The truncation ends while that upload is still reading: the upload is stale.
#[test]
fn an_upload_that_reads_across_a_truncation_is_run_again_not_failed() {
    let (_dir, wb, file) = with_closed_file(&[5u8; 1 << 20]);
    let job = wb.begin_upload(7, "k").expect("the queued upload starts");
    wb.set_len(7, &file, 0).expect("truncate");
    let read = read_part(&job.file.file, "k", 0, job.size, None).map(|_| ());
    assert!(read.is_err(), "the old size is no longer there to read");
    let fin = wb.finish_upload(7, &job, read.map_err(failure), true);
    assert!(fin.error.is_none());
    assert!(fin.again, "the truncated content still has to go up");
}

/// A truncation that fails leaves the size as it was, never smaller than the file.
#[test]
fn a_failed_truncation_keeps_the_size() {
    let (_dir, wb, _file) = with_closed_file(&[5u8; 4096]);
    let before = wb.resize_begin(7, 10);
    wb.resize_end(7, 10, before, false);
    assert_eq!(wb.stat(7).map(|st| st.size), Some(4096));
}

/// The lock order is namespace (`Namespace::inodes`) → write-back table, never the other way:
/// the upload task takes the table under the namespace lock (begin_upload, finish_upload).
/// It holds because write-back knows nothing of the namespace: none of its files names it.
#[test]
fn write_back_never_names_the_namespace() {
    let files = [
        ("mod.rs", include_str!("mod.rs")),
        ("lifecycle.rs", include_str!("lifecycle.rs")),
        ("passthrough.rs", include_str!("passthrough.rs")),
        ("early.rs", include_str!("early.rs")),
        ("report.rs", include_str!("report.rs")),
        ("spares.rs", include_str!("spares.rs")),
        ("staging.rs", include_str!("staging.rs")),
        ("transfer.rs", include_str!("transfer.rs")),
        ("uploader.rs", include_str!("uploader.rs")),
    ];
    for (name, text) in files {
        for forbidden in ["crate::inode", "crate::fs", "Inodes>", "inodes.lock"] {
            assert!(
                !text.contains(forbidden),
                "writeback/{name} names {forbidden}: the lock order inodes -> table breaks"
            );
        }
    }
}

/// Mounts starting together on one cache dir: each one's scan for dead mounts' staging
/// directories must never take another's directory, half made, for a dead one (CI saw a
/// `flowfs run` fail with "staging dir ...: No such file or directory": another start
/// had removed its directory before its lock file was there).
#[test]
fn staging_directories_made_at_once_are_never_taken_for_dead_ones() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().to_path_buf();
    let threads: Vec<_> = (0..6)
        .map(|_| {
            let root = root.clone();
            std::thread::spawn(move || {
                for _ in 0..100 {
                    let s = Staging::open(&root).map_err(|e| format!("open: {e}"))?;
                    s.open_uploads(&root, "b");
                    s.create().map_err(|e| format!("create: {e}"))?;
                }
                Ok::<(), String>(())
            })
        })
        .collect();
    for t in threads {
        t.join()
            .expect("thread")
            .expect("a staging dir opened and used");
    }
}

/// A hidden directory a process died making is removed once old; a young one, whose
/// maker may be about to lock it, is left alone.
#[test]
fn a_half_made_staging_directory_is_removed_only_when_old() {
    let dir = tempfile::tempdir().expect("tempdir");
    let root = dir.path().join("staging");
    let (young, old) = (root.join(".1-young.new"), root.join(".2-old.new"));
    for d in [&young, &old] {
        std::fs::create_dir_all(d).expect("mkdir");
    }
    let ten_hours = std::time::Duration::from_secs(36_000);
    let then = std::time::SystemTime::now() - ten_hours;
    std::fs::File::open(&old)
        .and_then(|f| f.set_modified(then))
        .expect("age the directory");
    let s = Staging::open(dir.path()).expect("staging");
    assert!(s.open_uploads(dir.path(), "b").is_empty());
    assert!(young.exists(), "a young half-made directory is kept");
    assert!(!old.exists(), "an old one is removed");
}

/// A store that refuses an upload for good (SeaweedFS's 400 for a `..\` segment) must
/// leave the file usable: a rewrite's close reports nothing of the old content's failure
/// (it was EIO, issue 47), and the new content is uploaded at its release.
#[test]
fn a_rewrite_after_a_refused_upload_is_not_failed_by_it_and_is_tried() {
    let (_dir, wb, file) = with_closed_file(b"one");
    let job = wb.begin_upload(7, "k").expect("the queued upload starts");
    let refused = flowfs_client::ClientError::Refused("400 InvalidRequest".into());
    let fin = wb.finish_upload(7, &job, Err(failure(refused)), true);
    assert!(
        fin.error.is_some() && fin.retry.is_none(),
        "a refusal is not retried"
    );
    assert!(
        wb.error(7, &file).is_some(),
        "the close of that content reports it"
    );
    assert!(wb.open(7, true).is_some());
    wb.set_len(7, &file, 0).expect("O_TRUNC");
    wb.write(7, &file, (0, b"three"), 1 << 20).expect("write");
    assert!(
        wb.error(7, &file).is_none(),
        "the new content has not failed"
    );
    assert!(matches!(wb.release(7, &file, true), Released::Upload));
    let job = wb.begin_upload(7, "k").expect("the new content goes up");
    assert_eq!(job.size, 5);
}

/// Giving up a file whose upload is in flight returns at once (an unlink waited for the
/// whole upload: 59.6 s for 5 GiB, issue 47), tells the upload to stop, and what that
/// upload still lands is a stray for its task to delete.
#[tokio::test]
async fn retiring_a_file_being_uploaded_returns_at_once_and_stops_the_upload() {
    let (_dir, wb, file) = with_closed_file(&[5u8; 3 << 20]);
    let job = wb.begin_upload(7, "k").expect("the queued upload starts");
    let r = wb.retire(7).expect("it was staged");
    assert_eq!(
        r,
        Retired {
            remote: false,
            in_flight: true
        }
    );
    assert!(file.stop.load(std::sync::atomic::Ordering::Acquire));
    let client: Arc<dyn flowfs_client::ObjectClient> =
        Arc::new(flowfs_client::mock::MockClient::new());
    let parts = Arc::new(tokio::sync::Semaphore::new(2));
    let sent = transfer::upload_parts(
        &client,
        "k",
        &client
            .create_multipart("k", &Default::default())
            .await
            .unwrap(),
        &job.file.file,
        job.size,
        1 << 20,
        &parts,
        Vec::new(),
        &job.file.stop,
    )
    .await;
    assert_eq!(sent.unwrap_err().to_string(), transfer::GIVEN_UP);
    assert!(client.head("k").await.is_err(), "nothing was completed");
    let fin = wb.finish_upload(7, &job, Ok(()), true);
    assert!(fin.stray && !fin.again && fin.error.is_none());
}
