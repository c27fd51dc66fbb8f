//! The cache as a whole: reads, eviction, restarts, two mounts, free space, memory.

use super::*;
use flowfs_client::AlignedBuf;

/// What a fetch does with the bytes it got: to the readers, then into the file.
fn insert(cache: &DiskCache, e: &Arc<CacheEntry>, off: u64, data: Bytes) {
    cache.offer(e, off, data.clone(), &Fetch::default());
    cache.store(e, off, &data).unwrap();
}

fn aligned(data: &[u8]) -> Bytes {
    AlignedBuf::from_slice(data).into_bytes()
}

#[test]
fn insert_read_and_evict() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 4 << 20, 0).unwrap();
    let size = 6 << 20;
    let e = cache.entry("b", "k", "\"e\"", size).unwrap();
    assert!(e.try_read(0, 10).unwrap().is_none());
    let claim = e.claim(0, e.chunks(), 32);
    assert_eq!(claim.start.len(), 3);
    let data: Vec<u8> = (0..size).map(|i| (i % 251) as u8).collect();
    insert(&cache, &e, 0, aligned(&data[..2 << 20]));
    assert_eq!(e.try_read(100, 1000).unwrap().unwrap(), data[100..1100]);
    insert(&cache, &e, 2 << 20, aligned(&data[2 << 20..]));
    // 6 MiB do not fit in 4 MiB: the oldest blocks went, the newest stayed.
    assert!(cache.used() <= 4 << 20);
    assert!(e.try_read(0, 10).unwrap().is_none());
    assert_eq!(
        e.try_read(5 << 20, 4096).unwrap().unwrap(),
        data[5 << 20..(5 << 20) + 4096]
    );
}

/// A cache (1 GiB) on `dir` that holds `data` as version v1 of `b/k`, its entry open.
fn holding(dir: &Path, data: &[u8]) -> (DiskCache, Arc<CacheEntry>) {
    let cache = DiskCache::open(dir, 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    insert(&cache, &e, 0, aligned(data));
    (cache, e)
}

/// A cache that holds `data` as version v1 of `b/k`, read and closed as at unmount.
fn cached_and_closed(dir: &Path, data: &[u8]) -> DiskCache {
    let (cache, e) = holding(dir, data);
    cache.release(&e);
    cache.close();
    cache
}

#[test]
fn survives_reopen_and_keys_by_etag() {
    let dir = tempfile::tempdir().unwrap();
    let data = vec![7u8; 100_000];
    drop(cached_and_closed(dir.path(), &data));
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert_eq!(cache.used(), 2 * CHUNK);
    let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
    let other = cache.entry("b", "k", "\"v2\"", data.len() as u64).unwrap();
    assert!(other.try_read(0, 1).unwrap().is_none());
}

/// A cache as a killed mount leaves it: bitmaps saved at release, no `persist_all`.
fn killed_mount(dir: &Path, data: &[u8]) {
    let cache = DiskCache::open(dir, 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    insert(&cache, &e, 0, aligned(data));
    cache.release(&e);
}

#[test]
fn a_killed_mounts_cache_is_kept_until_a_reboot() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..3 * CHUNK).map(|i| (i % 249) as u8).collect();
    killed_mount(dir.path(), &data);
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert_eq!(cache.used(), 3 * CHUNK);
    let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
    drop(cache);

    // The same, but the machine went down: unsynced data may be gone.
    let dir = tempfile::tempdir().unwrap();
    killed_mount(dir.path(), &data);
    fs::write(dir.path().join("objects/state"), "another-boot dirty").unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert_eq!(cache.used(), 0);
    let e = cache.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    assert!(e.try_read(0, 1).unwrap().is_none());
}

/// A fetch has written its chunk but not yet marked it present when eviction takes
/// the rest of the block: the chunk must keep its bytes, in this process and in the
/// bitmap the next one reads.
#[test]
fn eviction_spares_a_chunk_written_but_not_yet_marked() {
    let dir = tempfile::tempdir().unwrap();
    let one = BLOCK_CHUNKS * CHUNK;
    let a: Vec<u8> = (0..2 * one).map(|i| (i % 241) as u8).collect();
    let chunk = |c: u64| aligned(&a[(c * CHUNK) as usize..((c + 1) * CHUNK) as usize]);
    {
        // Room for one block and one chunk.
        let cache = DiskCache::open(dir.path(), one + CHUNK, 0).unwrap();
        let e = cache.entry("b", "a", "\"e\"", a.len() as u64).unwrap();
        insert(&cache, &e, 0, chunk(0));
        insert(&cache, &e, one, chunk(BLOCK_CHUNKS));
        // The last handle closed while a read-ahead of chunk 1 is still running.
        cache.release(&e);
        assert_eq!(e.claim(1, 2, 1).start.len(), 1);
        cache.write_data(&e, CHUNK, &chunk(1)).unwrap();
        // Another file fills the cache: block 0 of a (chunk 0) is the oldest.
        let f = cache.entry("b", "f", "\"e\"", one).unwrap();
        insert(&cache, &f, 0, aligned(&vec![9; one as usize]));
        assert!(
            e.try_read(0, 1).unwrap().is_none(),
            "chunk 0 was not evicted"
        );
        cache.mark(&e, CHUNK, 2 * CHUNK);
        let got = e.try_read(CHUNK, CHUNK as usize).unwrap();
        assert!(
            got.as_deref() == Some(&chunk(1)[..]),
            "chunk 1 lost its bytes"
        );
        cache.release(&f);
        // killed: no persist_all
    }
    let cache = DiskCache::open(dir.path(), 4 * one, 0).unwrap();
    let e = cache.entry("b", "a", "\"e\"", a.len() as u64).unwrap();
    let got = e.try_read(CHUNK, CHUNK as usize).unwrap();
    assert!(
        got.as_deref() == Some(&chunk(1)[..]),
        "the next mount reads wrong bytes"
    );
    assert!(e.try_read(0, 1).unwrap().is_none());
}

#[test]
fn a_second_live_mount_gets_a_private_cache() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..2 * CHUNK).map(|i| (i % 239) as u8).collect();
    let (first, e) = holding(dir.path(), &data);
    first.release(&e);
    {
        let second = DiskCache::open(dir.path(), CHUNK, 0).unwrap();
        assert!(second.private);
        assert_eq!(
            second.used(),
            0,
            "the second mount indexed the first one's files"
        );
        // Its eviction (capacity one chunk) must not touch the first mount's files.
        let f = second.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
        insert(&second, &f, 0, aligned(&data));
        second.release(&f);
        second.persist_all();
        let left: Vec<_> = fs::read_dir(dir.path().join("objects.private"))
            .unwrap()
            .collect();
        assert!(
            left.is_empty(),
            "the private cache was not removed at unmount"
        );
    }
    let e = first.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
    first.release(&e);
    first.persist_all();
    drop(first);
    // One at a time, mounts share objects/.
    let third = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert!(!third.private);
    assert_eq!(third.used(), 2 * CHUNK);
}

#[test]
fn a_killed_mounts_private_cache_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let dead = dir.path().join("objects.private/123-0badf00d");
    fs::create_dir_all(&dead).unwrap();
    fs::write(dead.join("lock"), "").unwrap();
    fs::write(dead.join("x.data"), "left behind").unwrap();
    let _cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert!(!dead.exists());
}

#[test]
fn the_cache_gives_way_to_free_space() {
    let dir = tempfile::tempdir().unwrap();
    let data: Vec<u8> = (0..4 * CHUNK).map(|i| (i % 233) as u8).collect();
    let (cache, e) = holding(dir.path(), &data);
    assert_eq!(cache.used(), 4 * CHUNK);
    // A staged write found the disk full: asking for more room than the disk has
    // empties the cache.
    cache.make_room(u64::MAX / 4);
    assert_eq!(cache.used(), 0);
    assert!(e.try_read(0, 1).unwrap().is_none());
    cache.release(&e);
    // A floor above the disk's free space: nothing is kept, nothing adopted.
    let cache = cache.with_min_free(u64::MAX / 4);
    let e = cache.entry("b", "k2", "\"v1\"", data.len() as u64).unwrap();
    insert(&cache, &e, 0, aligned(&data));
    assert_eq!(cache.used(), 0);
    let staged = dir.path().join("staged");
    fs::write(&staged, &data).unwrap();
    assert!(!cache.adopt("b", "k3", "\"v1\"", data.len() as u64, &staged));
    assert!(staged.exists());
}

#[test]
fn claims_are_shared_between_readers() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"e\"", 10 * CHUNK).unwrap();
    let first = e.claim(0, 4, 128);
    assert_eq!(first.start.len(), 1);
    let second = e.claim(2, 6, 128);
    assert_eq!(second.wait.len(), 1);
    assert_eq!((second.start[0].0, second.start[0].1), (4, 6));
}

#[test]
fn fetched_ranges_are_read_from_memory_once_then_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // 3 MiB of memory: the oldest range goes when a fourth comes.
    let cache = DiskCache::open(dir.path(), 1 << 30, 3 << 20).unwrap();
    // An odd size: the last range ends in a partial page, written through the page cache.
    let size = (4 << 20) + 1234;
    let data: Vec<u8> = (0..size).map(|i| (i % 253) as u8).collect();
    let e = cache.entry("b", "k", "\"e\"", size as u64).unwrap();
    for off in (0..size).step_by(1 << 20) {
        let end = (off + (1 << 20)).min(size);
        insert(&cache, &e, off as u64, aligned(&data[off..end]));
    }
    assert!(cache.mem_used() <= 3 << 20);
    // Ranges 1.. are in memory; reading one whole frees it.
    let before = cache.mem_used();
    let got = cache
        .read(&e, (2 << 20) - 100, (1 << 20) + 200)
        .unwrap()
        .unwrap();
    assert_eq!(got, data[(2 << 20) - 100..(3 << 20) + 100]);
    assert_eq!(
        cache.read_mem(&e, 2 << 20, 1 << 20).unwrap(),
        data[2 << 20..3 << 20]
    );
    assert_eq!(cache.mem_used(), before - (1 << 20));
    assert!(cache.read_mem(&e, 2 << 20, 10).is_none());
    // Everything, evicted from memory or read, is in the file too.
    assert_eq!(e.try_read(0, size).unwrap().unwrap(), data);
    assert!(cache.read_mem(&e, 0, 10).is_none());
    assert_eq!(cache.read(&e, 0, size).unwrap().unwrap(), data);
    cache.release(&e);
    cache.forget_mem(&e);
    assert_eq!(cache.mem_used(), 0);
    let len = fs::metadata(e.data_path()).unwrap().len();
    assert_eq!(len, size as u64);
}

/// Chunks eviction took stay reserved until they are punched: a reader meanwhile waits
/// for the punch (then fetches them) instead of writing them into the file where the
/// punch would zero them.
#[test]
fn chunks_being_punched_are_waited_for_not_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let data = vec![1u8; 2 * CHUNK as usize];
    let e = cache.entry("b", "k", "\"e\"", data.len() as u64).unwrap();
    insert(&cache, &e, 0, aligned(&data));
    let taken = e.take_block(0);
    assert!(e.try_read(0, 1).unwrap().is_none());
    let claim = e.claim(0, 2, 128);
    assert_eq!((claim.wait.len(), claim.start.len()), (1, 0));
    e.punch(&[taken]);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(claim.wait[0].2.wait()).unwrap();
    let claim = e.claim(0, 2, 128);
    assert_eq!((claim.wait.len(), claim.start.len()), (0, 1));
}

/// While an entry's files are created or removed outside the lock (its name is busy), an
/// open of that version waits for the end of it.
#[test]
fn an_open_waits_for_a_busy_name() {
    let dir = tempfile::tempdir().unwrap();
    let cache = Arc::new(DiskCache::open(dir.path(), 1 << 30, 0).unwrap());
    let (_, hash) = identity("b", "k", "\"e\"", 10);
    assert!(cache.inner.lock().index.reserve(&hash));
    let (tx, rx) = std::sync::mpsc::channel();
    let c = cache.clone();
    let opener = std::thread::spawn(move || {
        let e = c.entry("b", "k", "\"e\"", 10).unwrap();
        tx.send(()).unwrap();
        e
    });
    let waited = rx.recv_timeout(std::time::Duration::from_millis(100));
    assert!(waited.is_err(), "the open did not wait for the busy name");
    cache.inner.lock().index.unreserve(&hash);
    cache.names.notify_all();
    let e = opener.join().unwrap();
    assert_eq!(cache.inner.lock().index.lookup(&hash), Lookup::Open(e.id()));
}

/// `flowfs unmount` answers once the cache is closed, and the process exits a moment
/// later: a mount started in that moment must get `objects/`, with what the first one
/// cached, not a private cache that fetches everything again (CI met this). Once closed,
/// the first cache writes nothing more to the directory.
#[test]
fn a_closed_cache_is_handed_on_before_the_process_ends() {
    let dir = tempfile::tempdir().unwrap();
    let data = vec![5u8; 100_000];
    let first = cached_and_closed(dir.path(), &data);
    // `first` lives on, as the process does for a moment after its answer.
    let second = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert!(!second.private, "the next mount got a private cache");
    assert_eq!(second.used(), 2 * CHUNK);
    let f = second.entry("b", "k", "\"v1\"", data.len() as u64).unwrap();
    assert_eq!(f.try_read(0, data.len()).unwrap().unwrap(), data);
    // The closed cache neither stores, adopts nor saves into the directory any more.
    let g = first
        .entry("b", "other", "\"v1\"", data.len() as u64)
        .unwrap();
    assert!(first.store(&g, 0, &data).is_err());
    let src = dir.path().join("staged");
    fs::write(&src, &data).unwrap();
    assert!(!first.adopt("b", "adopted", "\"v1\"", data.len() as u64, &src));
    assert!(src.exists(), "a refused adoption leaves its file alone");
    first.release(&g);
    second.release(&f);
    second.close();
    drop(first);
    let third = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert_eq!(
        third.used(),
        2 * CHUNK,
        "only what the open cache stored is there"
    );
}
