//! Write-back under a store that does not answer (issue 14): nothing waits forever.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowfs_client::mock::MockClient;
use flowfs_fs::inode::ROOT;
use flowfs_fs::{Fs, FsConfig};

/// An unmount whose uploads do not finish gives up after `--unmount-timeout`, naming
/// every file not uploaded; their journal records stay for the next mount.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unmount_gives_up_after_its_timeout_and_names_what_is_not_uploaded() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    let mut cfg = FsConfig::new("b", "", dir.path().to_path_buf());
    cfg.unmount_timeout = Duration::from_millis(500);
    let fs = Arc::new(Fs::new(cfg, mock.clone()).expect("fs"));
    mock.set_latency(Duration::from_secs(3600));
    let (_, fh) = fs.create(ROOT, "stuck.txt", 0o644).await.unwrap();
    fs.write(fh, 0, b"never lands").unwrap();
    fs.release(fh).unwrap();
    let t = Instant::now();
    let failed = fs.flush_all().await;
    assert!(
        t.elapsed() < Duration::from_secs(10),
        "took {:?}",
        t.elapsed()
    );
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(
        failed[0].starts_with("stuck.txt: not uploaded after"),
        "{failed:?}"
    );
    let records = walk(&dir.path().join("staging"), "rec");
    assert_eq!(records, 1, "the journal record stays for the next mount");
}

fn walk(dir: &std::path::Path, ext: &str) -> usize {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            n += walk(&p, ext);
        } else if p.extension().is_some_and(|x| x == ext) {
            n += 1;
        }
    }
    n
}
