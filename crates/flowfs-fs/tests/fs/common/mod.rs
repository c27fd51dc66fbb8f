//! Helpers shared by the core's test files: a file system over the in-memory store.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::{Duration, Instant};

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::{CopyRange, Fs, FsConfig, FsError};
use flowfs_fs::{OpenMode, ROOT};

pub fn setup(cache: &std::path::Path, prefix: &str) -> (Arc<MockClient>, Arc<Fs>) {
    let mock = Arc::new(MockClient::new());
    let fs = fs_on(&mock, cache, prefix);
    (mock, fs)
}

/// `setup` with its cache in a new temporary directory, handed back with the mount: the
/// directory is removed when the test drops it, so it must outlive the mount's use.
pub fn mount(prefix: &str) -> (tempfile::TempDir, Arc<MockClient>, Arc<Fs>) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs) = setup(dir.path(), prefix);
    (dir, mock, fs)
}

/// A file system over a new in-memory store, its configuration the defaults changed by
/// `set`.
pub fn setup_with(
    cache: &std::path::Path,
    prefix: &str,
    set: impl FnOnce(&mut FsConfig),
) -> (Arc<MockClient>, Arc<Fs>) {
    let mock = Arc::new(MockClient::new());
    let mut cfg = FsConfig::new("b", prefix, cache.to_path_buf());
    set(&mut cfg);
    let fs = Arc::new(Fs::new(cfg, mock.clone()).expect("fs"));
    (mock, fs)
}

/// Two cache directories: one for a mount, one for the mount after it (a remount on
/// another node, which shares nothing with the first but the bucket).
pub fn two_caches() -> (tempfile::TempDir, tempfile::TempDir) {
    let dir = || tempfile::tempdir().expect("dir");
    (dir(), dir())
}

/// Puts `data` in the bucket as another client would, and looks up its inode.
pub async fn remote(
    mock: &MockClient,
    fs: &Arc<Fs>,
    key: &str,
    data: impl Into<bytes::Bytes>,
) -> u64 {
    mock.insert(key, data);
    path_ino(fs, key).await.expect("lookup")
}

pub fn fs_on(mock: &Arc<MockClient>, cache: &std::path::Path, prefix: &str) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", prefix, cache.to_path_buf());
    cfg.part_size = 1 << 20;
    cfg.metadata_ttl = Duration::from_secs(60);
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

pub fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

pub async fn read_all(fs: &Arc<Fs>, ino: u64) -> Vec<u8> {
    let (fh, _) = fs.open(ino, OpenMode::Read).await.expect("open");
    let mut out = Vec::new();
    loop {
        let chunk = fs
            .read(fh, out.len() as u64, 128 << 10)
            .await
            .expect("read");
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    fs.release(fh).expect("release");
    out
}

pub async fn path_ino(fs: &Arc<Fs>, path: &str) -> Result<u64, FsError> {
    let mut ino = ROOT;
    for part in path.split('/') {
        ino = fs.lookup(ino, part).await?.ino;
    }
    Ok(ino)
}

/// The entries of directory `ino` but `.` and `..`, from readdir (`plus`: readdirplus).
pub async fn entries(fs: &Arc<Fs>, ino: u64, plus: bool) -> Vec<flowfs_fs::DirItem> {
    let fh = fs.opendir(ino).expect("opendir");
    let items = fs.readdir(ino, fh, 0, plus).await.expect("readdir");
    fs.releasedir(fh);
    items
        .into_iter()
        .filter(|i| i.name != "." && i.name != "..")
        .collect()
}

pub async fn names(fs: &Arc<Fs>, ino: u64) -> Vec<String> {
    entries(fs, ino, false)
        .await
        .into_iter()
        .map(|i| i.name)
        .collect()
}

/// Drops `fs` as a crash (kill -9) would leave it, and returns once it is gone: a task
/// may still hold a part of it for a moment after the call that woke the test (an upload
/// task records its failure, wakes `flush_all`, then ends), and until then its staging
/// directory stays locked, so that the next mount takes it for a live one and recovers
/// nothing. In a real crash the process and its lock are gone at once. Gone is what the
/// next mount sees: no staging directory's lock held.
pub async fn crash(fs: Arc<Fs>) {
    let staging = fs.config().cache_dir.join("staging");
    drop(fs);
    let until = Instant::now() + Duration::from_secs(10);
    while staging_locked(&staging) {
        assert!(
            Instant::now() < until,
            "a task still holds the crashed mount's staging directory after 10 s"
        );
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Whether a staging directory under `staging` is locked (`flock`, as its mount holds it).
fn staging_locked(staging: &std::path::Path) -> bool {
    use std::os::fd::AsRawFd;
    let dirs = std::fs::read_dir(staging).into_iter().flatten().flatten();
    dirs.filter_map(|d| std::fs::File::open(d.path().join("lock")).ok())
        .any(|lock| {
            // SAFETY: flock on a descriptor this frame owns; closing it releases the lock.
            unsafe { libc::flock(lock.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) != 0 }
        })
}

/// Waits (at most 10 s) until the mock has received `n` requests of kind `op`.
pub async fn await_count(mock: &MockClient, op: Op, n: u64) {
    let until = Instant::now() + Duration::from_secs(10);
    while mock.count(op) < n {
        assert!(
            Instant::now() < until,
            "{} {op:?} requests after 10 s, waiting for {n}",
            mock.count(op)
        );
        tokio::task::yield_now().await;
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// A runtime of one thread: its tasks run only while the test blocks on it.
pub fn current_thread() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime")
}

/// A mount whose tasks run on `rt`: dropping `rt` kills them, as a crash would.
pub fn mount_in(
    rt: &tokio::runtime::Runtime,
    mock: &Arc<MockClient>,
    dir: &std::path::Path,
) -> Arc<Fs> {
    let _e = rt.enter();
    crate::common::fs_on(mock, dir, "")
}

/// The most one FUSE call copies (the kernel's `UINT_MAX & PAGE_MASK`).
pub const CALL_MAX: u64 = (1 << 32) - 4096;

/// The whole of `from` (open for reading) onto `to`, as `cp` asks for it.
pub async fn copy_whole(fs: &Arc<Fs>, from: u64, to: u64) -> Option<u64> {
    let c = CopyRange {
        from: (from, 0),
        to: (to, 0),
        len: CALL_MAX,
    };
    fs.copy_range(c).await.expect("copy_range")
}

/// A file `name` in the root written with `bytes` through this mount, closed and
/// uploaded (`flush_all` found nothing failed), and its inode.
pub async fn uploaded(fs: &Arc<Fs>, name: &str, bytes: &[u8]) -> u64 {
    let (a, fh) = fs.create(ROOT, name, 0o644, None).await.expect("create");
    fs.write(fh, 0, bytes).expect("write");
    fs.release(fh).expect("release");
    assert!(fs.flush_all().await.is_empty(), "{name} uploaded");
    a.ino
}

/// A file `name` in the root written with `bytes` through this mount and closed (its
/// upload under way), and a reader's handle on it: a task's output about to be published.
pub async fn written(fs: &Arc<Fs>, name: &str, bytes: &[u8]) -> (u64, u64) {
    let (a, w) = fs.create(ROOT, name, 0o644, None).await.expect("create");
    fs.write(w, 0, bytes).expect("write");
    fs.release(w).expect("release");
    let (r, _) = fs.open(a.ino, OpenMode::Read).await.expect("open");
    (a.ino, r)
}
