//! A benchmark, not a test (ignored; `make bench-scale-core`): issue 15's scale targets
//! measured on the core over the in-memory store, where a million files can be made in
//! seconds (populating SeaweedFS took 587 s for 100,000). PROBE_DIRS directories of 1,000
//! empty objects each (default 100); it prints the time of a `find`-like walk (lookup and
//! readdirplus of every directory), the RSS it added per file seen, and the median
//! re-listing of one directory after its TTL on this core against a fresh core that has
//! seen only that directory. The mount itself is measured by bench/scale.py.
use std::sync::Arc;
use std::time::{Duration, Instant};

use flowfs_client::mock::MockClient;
use flowfs_fs::{Fs, FsConfig, ROOT};

fn fs(mock: &Arc<MockClient>, dir: &std::path::Path) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", "", dir.to_path_buf());
    cfg.metadata_ttl = Duration::from_millis(1);
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

async fn list_plus(fs: &Arc<Fs>, ino: u64) -> Vec<flowfs_fs::DirItem> {
    let fh = fs.opendir(ino).expect("opendir");
    let items = fs.readdir(ino, fh, 0, true).await.expect("readdir");
    fs.releasedir(fh);
    items
}

async fn relist(fs: &Arc<Fs>, ino: u64, runs: usize) -> Duration {
    let mut t = Vec::new();
    for _ in 0..runs {
        tokio::time::sleep(Duration::from_millis(2)).await;
        let s = Instant::now();
        let items = list_plus(fs, ino).await;
        t.push(s.elapsed());
        for i in items.iter().skip(2) {
            fs.forget(i.ino, 1);
        }
    }
    t.sort();
    t[runs / 2]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore]
async fn relisting_cost_big_and_small() {
    let dirs: usize = std::env::var("PROBE_DIRS").map_or(100, |v| v.parse().expect("n"));
    let mock = Arc::new(MockClient::new());
    for d in 0..dirs {
        for i in 0..1000 {
            mock.insert(&format!("d{d:03}/f{i:06}"), Vec::new());
        }
    }
    let a = tempfile::tempdir().expect("tmp");
    let big = fs(&mock, a.path());
    let r0 = rss();
    let mut target = 0;
    let t0 = Instant::now();
    for d in 0..dirs {
        let ino = big
            .lookup(ROOT, &format!("d{d:03}"))
            .await
            .expect("lookup")
            .ino;
        let _ = list_plus(&big, ino).await;
        if d == dirs / 2 {
            target = ino;
        }
    }
    eprintln!(
        "find-like walk of {} files: {:?}; rss per file seen: {} bytes",
        dirs * 1000,
        t0.elapsed(),
        (rss() - r0) / (dirs as u64 * 1000)
    );
    let tb = relist(&big, target, 31).await;
    let b = tempfile::tempdir().expect("tmp");
    let small = fs(&mock, b.path());
    let ino = small
        .lookup(ROOT, &format!("d{:03}", dirs / 2))
        .await
        .expect("lookup")
        .ino;
    let _ = list_plus(&small, ino).await;
    let ts = relist(&small, ino, 31).await;
    eprintln!(
        "big {tb:?} small {ts:?} ratio {:.2}",
        tb.as_secs_f64() / ts.as_secs_f64()
    );
}

fn rss() -> u64 {
    let s = std::fs::read_to_string("/proc/self/statm").expect("statm");
    let pages: u64 = s
        .split_whitespace()
        .nth(1)
        .expect("rss")
        .parse()
        .expect("n");
    pages * 4096
}
