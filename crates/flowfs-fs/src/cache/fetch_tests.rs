//! Fetches shared between readers and between processes: a claim is handed out once and
//! waited on by everyone else, a dropped or failed claim frees its chunks and wakes its
//! waiters, and what one process fetched (or is fetching, or punching) another reads
//! or waits for instead of fetching it again.

use super::tests::{aligned, claimed, holding, insert, pattern};
use super::*;
use crate::error::FsError;

#[test]
fn a_second_process_reads_what_the_first_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(40 * CHUNK + 123, 239);
    let (first, e) = holding(dir.path(), &data);
    let second = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let f = second.entry("b", "k", "\"v1\"", data.len() as u64);
    let got = second.read(&f, 5 * CHUNK + 7, 3 * CHUNK as usize).unwrap();
    assert_eq!(
        got.unwrap(),
        data[(5 * CHUNK + 7) as usize..(8 * CHUNK + 7) as usize]
    );
    // Fetched later by the first, while the second has the entry open: read on a miss.
    let g = first.entry("b", "k2", "\"v1\"", CHUNK);
    let h = second.entry("b", "k2", "\"v1\"", CHUNK);
    assert!(h.try_read(0, 10).unwrap().is_none());
    insert(&first, &g, 0, aligned(&data[..CHUNK as usize]));
    assert_eq!(h.try_read(0, 10).unwrap().unwrap(), data[..10]);
    assert_eq!(second.used(), first.used());
    assert_eq!(first.used(), 42 * CHUNK);
    first.release(&e);
}

/// Cross-process single flight: while one process fetches chunks, another waits for
/// its lock, then finds them present instead of fetching them.
#[test]
fn a_fetch_in_another_process_is_waited_for_not_repeated() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(4 * CHUNK, 233);
    let a = Arc::new(DiskCache::open(dir.path(), 1 << 30, 0).unwrap());
    let b = Arc::new(DiskCache::open(dir.path(), 1 << 30, 0).unwrap());
    let ea = a.entry("b", "k", "\"v1\"", data.len() as u64);
    let eb = b.entry("b", "k", "\"v1\"", data.len() as u64);
    let lock = a.lock_fetch(&ea, 0, 4, false).unwrap().unwrap();
    // Overlapping chunks: not at once.
    assert!(b
        .lock_fetch(&eb, 2, 6.min(eb.chunks()), false)
        .unwrap()
        .is_none());
    let (tx, rx) = std::sync::mpsc::channel();
    let (b2, eb2) = (b.clone(), eb.clone());
    let waiter = std::thread::spawn(move || {
        let l = b2.lock_fetch(&eb2, 2, 4, true).unwrap().unwrap();
        let have = l.present().to_vec();
        tx.send(()).unwrap();
        have
    });
    assert!(
        rx.recv_timeout(std::time::Duration::from_millis(100))
            .is_err(),
        "the second process did not wait for the fetch"
    );
    let p = claimed(&ea, 0, data.len());
    a.store(p, Some(&lock), &aligned(&data)).unwrap();
    drop(lock);
    assert_eq!(waiter.join().unwrap(), vec![true, true]);
    assert_eq!(eb.try_read(0, data.len()).unwrap().unwrap(), data);
}

#[test]
fn an_adopted_file_is_read_by_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(16 * CHUNK + 5, 223);
    let a = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let staged = dir.path().join("staged");
    fs::write(&staged, &data).unwrap();
    assert!(a.adopt("b", "k", "\"v1\"", data.len() as u64, &staged));
    let b = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = b.entry("b", "k", "\"v1\"", data.len() as u64);
    assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
    // Already cached: refused, the file left as it was.
    fs::write(&staged, &data).unwrap();
    assert!(!b.adopt("b", "k", "\"v1\"", data.len() as u64, &staged));
    assert_eq!(fs::read(&staged).unwrap(), data);
    assert_eq!(b.used(), 17 * CHUNK);
}

/// A small file adopted after its upload is packed (small.rs): no file of its own, read
/// by every process; adopted again, refused.
#[test]
fn a_small_adopted_file_is_packed_and_read_by_every_process() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(3 * CHUNK + 5, 223);
    let a = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let staged = dir.path().join("staged");
    fs::write(&staged, &data).unwrap();
    assert!(a.adopt("b", "k", "\"v1\"", data.len() as u64, &staged));
    let objects = fs::read_dir(dir.path().join("objects")).unwrap();
    let entries = (objects.flatten())
        .filter(|f| f.file_name().to_string_lossy().ends_with(".map"))
        .count();
    assert_eq!(entries, 0, "no entry of two files");
    let b = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = b.entry("b", "k", "\"v1\"", data.len() as u64);
    assert_eq!(b.read(&e, 0, data.len()).unwrap().unwrap(), data);
    assert_eq!(b.read(&e, 5, 10).unwrap().unwrap(), data[5..15]);
    assert!(!b.adopt("b", "k", "\"v1\"", data.len() as u64, &staged));
    assert!(b.used() > data.len() as u64 && b.used() < data.len() as u64 + 512);
}

#[test]
fn claims_are_shared_between_readers() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"e\"", 10 * CHUNK);
    let first = cache.claim(&e, 0, 4, 128);
    assert_eq!(first.start.len(), 1);
    let second = cache.claim(&e, 2, 6, 128);
    assert_eq!(second.wait.len(), 1);
    assert_eq!(second.start[0].chunks(), (4, 6));
}

/// A claim ends with its holder: given up (dropped), its chunks are free to claim again
/// and its readers wake; the next claim of them starts a new fetch.
#[test]
fn a_dropped_claim_frees_its_chunks_and_wakes_its_readers() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"e\"", 10 * CHUNK);
    let mut first = cache.claim(&e, 0, 4, 128);
    let reader = cache.claim(&e, 0, 4, 128);
    assert_eq!((reader.wait.len(), reader.start.len()), (1, 0));
    drop(first.start.pop());
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(reader.wait[0].2.wait()).unwrap();
    let again = cache.claim(&e, 0, 4, 128);
    assert_eq!((again.wait.len(), again.start.len()), (0, 1));
    assert!(!Arc::ptr_eq(again.start[0].fetch(), &reader.wait[0].2));
}

/// A failed GET's readers all wake with its error, and every piece of it is free to
/// claim again: a reader that fetches again starts its own GETs, it never waits on a
/// piece of the failed one. (That the claims end before any reader wakes is `fail_all`'s
/// order, which no single-threaded test can watch.)
#[test]
fn a_failed_fetch_frees_every_piece_and_wakes_its_readers_with_the_error() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"e\"", 10 * CHUNK);
    let get = cache.claim(&e, 0, 8, 4);
    assert_eq!(get.start.len(), 2);
    let readers = cache.claim(&e, 0, 8, 4);
    assert_eq!((readers.wait.len(), readers.start.len()), (2, 0));
    Claimed::fail_all(get.start, FsError::Internal("refused".into()));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    for (_, _, f) in &readers.wait {
        let r = rt.block_on(f.wait());
        assert!(matches!(r, Err(FsError::Internal(m)) if m == "refused"));
    }
    let again = cache.claim(&e, 0, 8, 4);
    assert_eq!((again.wait.len(), again.start.len()), (0, 2));
}

#[test]
fn fetched_ranges_are_read_from_memory_once_then_from_the_file() {
    let dir = tempfile::tempdir().unwrap();
    // 3 MiB of memory: the oldest range goes when a fourth comes.
    let cache = DiskCache::open(dir.path(), 1 << 30, 3 << 20).unwrap();
    // An odd size: the last range ends in a partial page, written through the page cache.
    let size = (4 << 20) + 1234;
    let data = pattern(size, 253);
    let e = cache.entry("b", "k", "\"e\"", size);
    let (map, file) = (e.map_path(), e.data_path());
    for off in (0..size).step_by(1 << 20) {
        let end = (off + (1 << 20)).min(size);
        insert(&cache, &e, off, aligned(&data[off as usize..end as usize]));
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
    assert_eq!(e.try_read(0, size as usize).unwrap().unwrap(), data);
    assert!(cache.read_mem(&e, 0, 10).is_none());
    assert_eq!(cache.read(&e, 0, size as usize).unwrap().unwrap(), data);
    cache.release(&e);
    assert_eq!(fs::metadata(file).unwrap().len(), size);
    assert_eq!(fs::metadata(map).unwrap().len(), Layout::new(size).len());
}

/// Chunks this process's eviction took stay reserved until punched: a reader meanwhile
/// waits for the punch (then fetches them) instead of writing them into the file where
/// the punch would zero them.
#[test]
fn chunks_being_punched_are_waited_for_not_fetched() {
    let dir = tempfile::tempdir().unwrap();
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let data = vec![1u8; 2 * CHUNK as usize];
    let e = cache.entry("b", "k", "\"e\"", data.len() as u64);
    insert(&cache, &e, 0, aligned(&data));
    let taken = e.take_block(0);
    let claim = cache.claim(&e, 0, 2, 128);
    assert_eq!((claim.wait.len(), claim.start.len()), (1, 0));
    punch::punch_block(&e.map_path(), &Layout::new(data.len() as u64), 0).unwrap();
    e.end_punch(&taken);
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    rt.block_on(claim.wait[0].2.wait()).unwrap();
    let claim = cache.claim(&e, 0, 2, 128);
    assert_eq!((claim.wait.len(), claim.start.len()), (0, 1));
}
