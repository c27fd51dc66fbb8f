//! Admission to the node cache as readers see it (cache/admit.rs, issue 48): what each
//! policy writes to disk, and what a later open then costs in GETs.

use flowfs_client::mock::{MockClient, Op};

use super::*;
use crate::cache::Admit;

const MIB: u64 = 1 << 20;

struct Setup {
    _dir: tempfile::TempDir,
    mock: Arc<MockClient>,
    p: Arc<Prefetcher>,
}

fn setup(admit: Admit) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    setup_on(dir, mock, admit)
}

/// A new process on the cache directory `dir` over the store `mock`.
fn setup_on(dir: tempfile::TempDir, mock: Arc<MockClient>, admit: Admit) -> Setup {
    let cfg = FsConfig::new("b", "", dir.path().to_path_buf());
    let mem = cfg.max_readahead + 2 * cfg.part_size;
    let cache = DiskCache::open(dir.path(), 1 << 30, mem)
        .expect("cache")
        .with_admission(admit);
    let p = Prefetcher::new(&cfg, mock.clone(), Arc::new(cache));
    Setup {
        _dir: dir,
        mock,
        p: Arc::new(p),
    }
}

impl Setup {
    async fn put(&self, key: &str, n: u64) -> (Vec<u8>, Option<String>) {
        let salt = key.len() as u64 + key.bytes().map(u64::from).sum::<u64>();
        self.put_bytes(key, (0..n).map(|i| ((i + salt) % 251) as u8).collect())
            .await
    }

    async fn put_bytes(&self, key: &str, bytes: Vec<u8>) -> (Vec<u8>, Option<String>) {
        self.mock.insert(key, bytes.clone());
        let etag = self.mock.head(key).await.expect("head").info.etag;
        (bytes, Some(etag))
    }

    /// Opens `key` (`explicit`: as `flowfs cache prefetch` does), reads it front to back
    /// in 128 KiB reads as the kernel asks, closes it; its bytes and the GETs it took.
    async fn read_all(
        &self,
        key: &str,
        etag: &Option<String>,
        size: u64,
        explicit: bool,
    ) -> (Vec<u8>, u64) {
        let gets = self.mock.count(Op::Get);
        let r = self
            .p
            .open_as(key.to_string(), etag.clone(), size, explicit);
        let mut out = Vec::new();
        while (out.len() as u64) < size {
            let b = self
                .p
                .read(&r, out.len() as u64, 128 << 10)
                .await
                .expect("read");
            assert!(!b.is_empty(), "short read at {}", out.len());
            out.extend_from_slice(&b);
        }
        self.settle(&r).await;
        self.p.close(&r);
        (out, self.mock.count(Op::Get) - gets)
    }

    /// Until every store of the fetches `r` caused has ended: a read returns once its
    /// bytes are in memory, before they are written (or not).
    async fn settle(&self, r: &Reader) {
        let e = &r.obj.entry;
        let claim = self.p.cache.claim(e, 0, e.chunks(), u64::MAX);
        // Claimed only to find the fetches in flight: given back at once.
        drop(claim.start);
        for (_, _, f) in &claim.wait {
            f.wait().await.expect("stored or not");
        }
    }

    /// Bytes of object data on disk in the cache directory (counted just after a store
    /// ends its claim: exact only where nothing was stored).
    fn on_disk(&self) -> u64 {
        self.p.cache.used()
    }

    /// The segments of small versions (cache/small.rs) and the bytes they hold.
    fn segments(&self) -> (usize, u64) {
        let dir = self._dir.path().join("objects/small");
        let names = std::fs::read_dir(dir).expect("objects/small");
        let segs: Vec<_> = (names.flatten())
            .filter(|n| n.file_name() != "index")
            .map(|n| n.metadata().expect("segment").len())
            .collect();
        (segs.len(), segs.iter().sum())
    }

    /// The entry files (sidecars and data files) in the cache directory.
    fn entry_files(&self) -> usize {
        let objects = self._dir.path().join("objects");
        let names = std::fs::read_dir(objects).expect("objects/");
        (names.flatten())
            .filter(|n| {
                let n = n.file_name().to_string_lossy().to_string();
                n.ends_with(".map") || n.ends_with(".bytes")
            })
            .count()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_file_read_once_makes_no_cache_files_and_its_second_open_packs_it() {
    let s = setup(Admit::Reuse);
    let (obj, etag) = s.put("small", MIB).await;
    assert_eq!(s.read_all("small", &etag, MIB, false).await.0, obj);
    assert_eq!(s.entry_files(), 0, "no sidecar, no data file");
    // A larger one keeps its files (the lock that shares one fetch between processes).
    let (big, big_etag) = s.put("big", 2 * MIB).await;
    assert_eq!(s.read_all("big", &big_etag, 2 * MIB, false).await.0, big);
    assert_eq!(s.entry_files(), 2);
    assert_eq!(s.on_disk(), 0);
    assert_eq!(s.segments(), (0, 0));
    // The second open admits the small one: its bytes are written as a record of a
    // segment, not as an entry of two files.
    assert_eq!(s.read_all("small", &etag, MIB, false).await.0, obj);
    assert_eq!(s.entry_files(), 2, "the big one's only");
    let (segments, bytes) = s.segments();
    assert_eq!(segments, 1);
    assert!((MIB..MIB + 512).contains(&bytes), "{bytes}");
    assert_eq!(s.on_disk(), bytes);
    assert_eq!(
        s.read_all("small", &etag, MIB, false).await,
        (obj.clone(), 0),
        "from disk"
    );
    // Another process on the directory finds it in the segment.
    let other = setup_on(s._dir, s.mock.clone(), Admit::Reuse);
    assert_eq!(
        other.read_all("small", &etag, MIB, false).await,
        (obj, 0),
        "another process"
    );
    // A new version of the key is not the packed one.
    let (new, new_etag) = other.put_bytes("small", vec![7u8; 1000]).await;
    assert_eq!(
        other.read_all("small", &new_etag, 1000, false).await,
        (new, 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn packed_small_files_are_evicted_in_whole_segments_and_fetched_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    let cfg = FsConfig::new("b", "", dir.path().to_path_buf());
    let mem = cfg.max_readahead + 2 * cfg.part_size;
    // Room for 3 MiB: segments of 1 MiB (a 64th of the cache, at least 1 MiB).
    let cache = DiskCache::open(dir.path(), 3 * MIB, mem)
        .expect("cache")
        .with_admission(Admit::Always);
    let p = Arc::new(Prefetcher::new(&cfg, mock.clone(), Arc::new(cache)));
    let s = Setup { _dir: dir, mock, p };
    let mut files = Vec::new();
    for i in 0..12 {
        let key = format!("f{i}");
        let (obj, etag) = s.put(&key, 400 << 10).await;
        assert_eq!(
            s.read_all(&key, &etag, 400 << 10, false).await,
            (obj.clone(), 1)
        );
        files.push((key, obj, etag));
    }
    let (segments, bytes) = s.segments();
    assert!(bytes <= 3 * MIB, "within the cache's size: {bytes}");
    assert!(segments >= 2, "{segments}");
    assert_eq!(s.on_disk(), bytes);
    // The newest is still packed; the oldest went with its segment and is fetched again.
    let (key, obj, etag) = &files[11];
    assert_eq!(
        s.read_all(key, etag, 400 << 10, false).await,
        (obj.clone(), 0)
    );
    let (key, obj, etag) = &files[0];
    assert_eq!(
        s.read_all(key, etag, 400 << 10, false).await,
        (obj.clone(), 1)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_small_file_the_memory_budget_cannot_keep_is_written_after_all() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    let cfg = FsConfig::new("b", "", dir.path().to_path_buf());
    // No memory for fetched bytes: the readers can take them from the file only.
    let cache = DiskCache::open(dir.path(), 1 << 30, 0)
        .expect("cache")
        .with_admission(Admit::Reuse);
    let p = Arc::new(Prefetcher::new(&cfg, mock.clone(), Arc::new(cache)));
    let s = Setup { _dir: dir, mock, p };
    let size = 300 * 1024 + 3;
    let (obj, etag) = s.put("k", size).await;
    let (got, gets) = s.read_all("k", &etag, size, false).await;
    assert_eq!((got == obj, gets), (true, 1));
    assert_eq!(s.entry_files(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_reuse_a_file_read_once_is_not_written_and_its_second_open_is() {
    let s = setup(Admit::Reuse);
    let size = 3 * MIB + 17;
    let (obj, etag) = s.put("k", size).await;
    let (got, gets) = s.read_all("k", &etag, size, false).await;
    assert!(got == obj && gets >= 1);
    assert_eq!(s.on_disk(), 0, "read once: nothing written");
    assert_eq!(s.p.read_stats().not_admitted_bytes, size);
    // The second open admits it: fetched again, and written this time.
    let (got, gets) = s.read_all("k", &etag, size, false).await;
    assert!(got == obj && gets >= 1);
    // The third is read from the disk.
    let (got, gets) = s.read_all("k", &etag, size, false).await;
    assert_eq!((got == obj, gets), (true, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_always_every_fetched_byte_is_written_at_once() {
    let s = setup(Admit::Always);
    let size = 2 * MIB;
    let (obj, etag) = s.put("k", size).await;
    assert_eq!(s.read_all("k", &etag, size, false).await.0, obj);
    assert_eq!(s.p.read_stats().not_admitted_bytes, 0);
    assert_eq!(s.read_all("k", &etag, size, false).await.1, 0, "from disk");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn under_never_only_a_prefetch_asked_for_is_written() {
    let s = setup(Admit::Never);
    let size = MIB + 5;
    let (obj, etag) = s.put("k", size).await;
    for _ in 0..3 {
        assert_eq!(s.read_all("k", &etag, size, false).await.0, obj);
    }
    assert_eq!(s.on_disk(), 0);
    // Another version, prefetched on purpose (a prefetch right after unadmitted reads of
    // the same version may find their last piece's fetch still ending: issue 48's note).
    let (obj2, etag2) = s.put("k2", size).await;
    let (got, _) = s.read_all("k2", &etag2, size, true).await;
    assert_eq!(got, obj2);
    assert_eq!(
        s.read_all("k2", &etag2, size, false).await.1,
        0,
        "from disk"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_record_of_opens_outlives_the_process_that_made_it() {
    let s = setup(Admit::Reuse);
    let size = MIB;
    let (obj, etag) = s.put("k", size).await;
    assert_eq!(s.read_all("k", &etag, size, false).await.0, obj);
    assert_eq!(s.on_disk(), 0);
    let Setup { _dir, mock, p } = s;
    p.cache.close();
    drop(p);
    // The next process starts the directory anew (cache/root.rs `start`).
    let s = setup_on(_dir, mock, Admit::Reuse);
    assert_eq!(s.read_all("k", &etag, size, false).await.0, obj);
    // Its second open on the node admitted it: the next is read from the disk.
    assert_eq!(s.read_all("k", &etag, size, false).await.1, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fetches_ahead_stay_within_the_memory_budget_and_nothing_is_fetched_twice() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    let mut cfg = FsConfig::new("b", "", dir.path().to_path_buf());
    cfg.part_size = MIB;
    // 4 MiB of memory, 2 MiB of it kept for the readers' own fetches.
    let cache = DiskCache::open(dir.path(), 1 << 30, 4 * MIB)
        .expect("cache")
        .with_admission(Admit::Reuse);
    let p = Arc::new(Prefetcher::new(&cfg, mock.clone(), Arc::new(cache)));
    let s = Setup { _dir: dir, mock, p };
    let size = 512 * 1024;
    let mut objs = Vec::new();
    for i in 0..16 {
        objs.push(s.put(&format!("f{i:02}"), size).await);
    }
    for (i, (_, etag)) in objs.iter().enumerate() {
        s.p.object(format!("f{i:02}"), etag.clone(), size);
    }
    for (i, (_, etag)) in objs.iter().enumerate() {
        // Until its fetch ahead (if any) has ended.
        let o = s.p.version(format!("f{i:02}"), etag.clone(), size);
        let claim = s.p.cache.claim(&o.entry, 0, o.entry.chunks(), u64::MAX);
        drop(claim.start);
        for (_, _, f) in &claim.wait {
            f.wait().await.expect("fetched");
        }
        s.p.cache.release(&o.entry);
    }
    // At most 2 MiB (fewer when a promise was asked for while fetched bytes already
    // in memory were still promised too: counted twice for that moment).
    let ahead = s.mock.count(Op::Get);
    assert!((1..=4).contains(&ahead), "{ahead} objects fetched ahead");
    for (i, (obj, etag)) in objs.iter().enumerate() {
        assert_eq!(
            &s.read_all(&format!("f{i:02}"), etag, size, false).await.0,
            obj
        );
    }
    assert_eq!(s.mock.count(Op::Get), 16, "each object fetched once");
    assert_eq!(s.entry_files(), 0);
}
