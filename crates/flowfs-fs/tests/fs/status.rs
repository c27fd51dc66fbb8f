//! `Fs::status` (issue 14, `flowfs status`): what is not durable yet, what failed, and
//! what the recovery of a dead mount's journal did, over the in-memory store.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::common::{fs_on, mount};
use flowfs_client::mock::{MockClient, Op};
use flowfs_client::ClientError;
use flowfs_fs::ROOT;
use flowfs_fs::{Fs, PendingState};

/// Files written and closed on `fs` while every PUT fails ("server down"): their uploads
/// have all failed when it returns.
async fn failed_uploads(mock: &MockClient, fs: &Arc<Fs>, files: &[(&str, &[u8])]) {
    let down = ClientError::Transient("server down".into());
    mock.fail(Op::Put, 0, down, 1000);
    for (name, bytes) in files {
        let (_, fh) = fs.create(ROOT, name, 0o644, None).await.expect("create");
        fs.write(fh, 0, bytes).expect("write");
        fs.release(fh).expect("release");
    }
    assert_eq!(fs.flush_all().await.len(), files.len());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_store_has_not_taken_is_pending_until_it_lands() {
    let (_dir, mock, fs) = mount("p");
    assert!(fs.status().durable(), "nothing written yet");

    mock.set_latency(Duration::from_millis(1500));
    let before = SystemTime::now() - Duration::from_secs(1);
    let (_, fh) = fs.create(ROOT, "out.bin", 0o644, None).await.unwrap();
    fs.write(fh, 0, &[7u8; 1000]).unwrap();
    let s = fs.status();
    assert_eq!(s.pending.len(), 1, "{s:?}");
    assert_eq!(s.pending[0].key, "p/out.bin");
    assert_eq!(s.pending[0].bytes, 1000);
    assert!(s.pending[0].open_for_writing);
    assert_eq!(s.pending[0].state, PendingState::Waiting);
    assert!(s.oldest().is_some_and(|t| t >= before), "{s:?}");

    fs.release(fh).unwrap();
    let s = fs.status();
    assert!(!s.durable());
    assert_eq!(s.pending_bytes(), 1000);
    assert!(!s.pending[0].open_for_writing);
    assert!(
        matches!(
            s.pending[0].state,
            PendingState::Queued | PendingState::Uploading
        ),
        "{s:?}"
    );
    assert!(s.failures.is_empty());

    // Once it lands, nothing is pending.
    let failed = fs.flush_all().await;
    assert!(failed.is_empty(), "{failed:?}");
    let s = fs.status();
    assert!(s.durable(), "{s:?}");
    assert_eq!(mock.object("p/out.bin").unwrap().len(), 1000);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_upload_is_reported_with_its_key_and_reason() {
    let (_dir, mock, fs) = mount("");
    failed_uploads(&mock, &fs, &[("r.txt", b"result")]).await;

    let s = fs.status();
    assert!(!s.durable());
    assert_eq!(s.pending.len(), 1);
    assert!(matches!(s.pending[0].state, PendingState::Failed(_)));
    assert_eq!(s.failures.len(), 1, "{s:?}");
    assert_eq!(s.failures[0].key, "r.txt");
    assert!(
        s.failures[0].reason.contains("server down") && !s.failures[0].reason.starts_with("r.txt"),
        "{:?}",
        s.failures[0]
    );
    assert_eq!(
        fs.status().not_uploaded(),
        vec!["r.txt (6 bytes)".to_string()]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_recovery_of_a_dead_mounts_journal_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    {
        let fs = fs_on(&mock, dir.path(), "");
        failed_uploads(&mock, &fs, &[("a.txt", b"a.txt"), ("b.txt", b"b.txt")]).await;
        // Dropped without a clean shutdown: as after kill -9.
        crate::common::crash(fs).await;
    }
    mock.clear_faults();
    // The recovery of b.txt fails (one PUT goes through, the next fails), a.txt's or
    // b.txt's first: whichever comes second fails.
    mock.fail(Op::Put, 1, ClientError::AccessDenied("no".into()), 1000);
    let fs = fs_on(&mock, dir.path(), "");
    let (ok, failed) = fs.recover().await;
    assert_eq!((ok.len(), failed.len()), (1, 1), "{ok:?} {failed:?}");

    let s = fs.status();
    assert!(s.pending.is_empty());
    assert_eq!(s.recovery.len(), 2, "{s:?}");
    let up: Vec<_> = s.recovery.iter().filter(|r| r.uploaded).collect();
    let lost: Vec<_> = s.recovery.iter().filter(|r| !r.uploaded).collect();
    assert_eq!(up[0].key, ok[0]);
    assert!(lost[0]
        .error
        .as_deref()
        .is_some_and(|e| e.contains("denied")));
    assert_eq!(s.failures.len(), 1, "a failed recovery is a failure: {s:?}");
    assert!(!s.durable());
}
