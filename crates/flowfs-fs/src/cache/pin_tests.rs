//! The entry's two files and pins: the data file is exactly the object's length, a pin
//! is given only for a complete entry and keeps every byte of it through another
//! process's eviction, and the first process removes what is not a whole entry.

use super::tests::{aligned, holding, insert, pattern};
use super::*;

/// Where `f` has its first hole (the implicit one at its end if it has none) and its
/// length.
fn first_hole(f: &File) -> (u64, u64) {
    use std::os::unix::io::AsRawFd;
    // SAFETY: lseek on an fd we own.
    let hole = unsafe { libc::lseek(f.as_raw_fd(), 0, libc::SEEK_HOLE) };
    (hole as u64, f.metadata().unwrap().len())
}

/// A pinned entry keeps every byte while another process's eviction needs room (newer
/// blocks go in its place), and goes first again once unpinned.
#[test]
fn a_pinned_entry_survives_eviction_by_another_process() {
    use std::os::unix::fs::FileExt;
    let dir = tempfile::tempdir().unwrap();
    let one = BLOCK_CHUNKS * CHUNK;
    let (data, limit) = (pattern(2 * one, 229), 3 * one + CHUNK);
    let a = DiskCache::open(dir.path(), limit, 0).unwrap();
    let b = DiskCache::open(dir.path(), limit, 0).unwrap();
    let ea = a.entry("b", "old", "\"v1\"", 2 * one);
    insert(&a, &ea, 0, aligned(&data));
    let pin = a
        .pin_complete(&ea)
        .unwrap()
        .expect("a complete entry is pinned");
    // The handle closes: the pin alone holds the entry.
    a.release(&ea);
    std::thread::sleep(std::time::Duration::from_millis(5)); // a later use time
    let eb = b.entry("b", "new", "\"v1\"", 2 * one);
    insert(&b, &eb, 0, aligned(&data));
    assert_eq!(first_hole(pin.file()), (2 * one, 2 * one));
    let mut got = vec![0u8; data.len()];
    pin.file().read_exact_at(&mut got, 0).unwrap();
    assert_eq!(got, data);
    // b's oldest block went instead: the limit holds.
    assert!(b.used() <= limit, "{} bytes in the directory", b.used());
    assert!(eb.try_read(0, 10).unwrap().is_none());
    // Pins are shared: another process pins it too.
    let fb = b.entry("b", "old", "\"v1\"", 2 * one);
    assert!(b.pin_complete(&fb).unwrap().is_some());
    b.release(&fb);
    drop(pin);
    std::thread::sleep(std::time::Duration::from_millis(5));
    let ec = b.entry("b", "newer", "\"v1\"", one);
    insert(&b, &ec, 0, aligned(&data[..one as usize]));
    let ea = a.entry("b", "old", "\"v1\"", 2 * one);
    assert!(
        ea.try_read(0, 10).unwrap().is_none(),
        "unpinned, it goes first"
    );
    assert!(a.pin_complete(&ea).unwrap().is_none());
    assert!(b.used() <= limit);
}

/// A pin is given only when the sidecar says every chunk is there, checked under the
/// pin (not this process's hint), and not while an eviction works on the entry.
#[test]
fn a_pin_needs_every_chunk() {
    let dir = tempfile::tempdir().unwrap();
    let one = BLOCK_CHUNKS * CHUNK;
    let data = pattern(2 * one + 5, 227);
    let size = data.len() as u64;
    let a = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let b = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let ea = a.entry("b", "k", "\"v1\"", size);
    assert!(a.pin_complete(&ea).unwrap().is_none());
    insert(&a, &ea, 0, aligned(&data[..2 * one as usize]));
    assert!(
        a.pin_complete(&ea).unwrap().is_none(),
        "its last chunk is missing"
    );
    insert(&a, &ea, 2 * one, aligned(&data[2 * one as usize..]));
    let eb = b.entry("b", "k", "\"v1\"", size);
    // An eviction holds the pin byte: no pin, and no waiting for it.
    let evicting = File::options()
        .read(true)
        .write(true)
        .open(eb.map_path())
        .unwrap();
    assert!(shared::ofd_lock(&evicting, shared::Lock::Exclusive, persist::PIN, 1, false).unwrap());
    assert!(b.pin_complete(&eb).unwrap().is_none());
    drop(evicting);
    let pin = b.pin_complete(&eb).unwrap().expect("complete");
    assert_eq!(
        (pin.size(), pin.file().metadata().unwrap().len()),
        (size, size)
    );
    drop(pin);
    // Another process punched a block; a's hint still says present.
    let punched = punch::punch_block(&eb.map_path(), &Layout::new(size), 1).unwrap();
    assert_eq!(punched, Some(one));
    assert!(
        a.pin_complete(&ea).unwrap().is_none(),
        "pinned on a stale hint"
    );
    let empty = a.entry("b", "empty", "\"v1\"", 0);
    assert!(a.pin_complete(&empty).unwrap().is_none());
}

/// The data file is exactly the object's length from its creation on (a passthrough
/// reader sees nothing past it), sparse until fetched, fetched or adopted. (Over 1 MiB:
/// a smaller version is packed, small.rs.)
#[test]
fn the_data_file_is_the_objects_length() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(16 * CHUNK + 5, 223);
    let size = data.len() as u64;
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    let e = cache.entry("b", "k", "\"v1\"", size);
    let path = e.data_path();
    let meta = fs::metadata(&path).unwrap();
    assert_eq!((meta.len(), meta.blocks()), (size, 0));
    insert(
        &cache,
        &e,
        CHUNK,
        aligned(&data[CHUNK as usize..2 * CHUNK as usize]),
    );
    assert_eq!(fs::metadata(&path).unwrap().len(), size);
    insert(&cache, &e, 2 * CHUNK, aligned(&data[2 * CHUNK as usize..]));
    insert(&cache, &e, 0, aligned(&data[..CHUNK as usize]));
    assert_eq!(fs::read(&path).unwrap(), data);
    let staged = dir.path().join("staged");
    fs::write(&staged, &data).unwrap();
    assert!(cache.adopt("b", "k2", "\"v1\"", size, &staged));
    let f = cache.entry("b", "k2", "\"v1\"", size);
    let pin = cache.pin_complete(&f).unwrap().expect("adopted whole");
    assert_eq!(first_hole(pin.file()), (size, size));
    assert_eq!(
        fs::read(&staged).unwrap(),
        data,
        "the staged file is left as it was"
    );
}

/// The first process removes what is not a whole entry of this format: files of the
/// one-file format (`<h>.cache`), data files no sidecar names, a sidecar whose data file
/// is gone, temporary files.
#[test]
fn other_formats_and_orphans_are_removed_at_open() {
    let dir = tempfile::tempdir().unwrap();
    let data = pattern(2 * CHUNK, 211);
    let (cache, e) = holding(dir.path(), &data);
    let g = cache.entry("b", "k2", "\"v1\"", CHUNK);
    insert(&cache, &g, 0, aligned(&data[..CHUNK as usize]));
    let (gone, gone_map) = (g.data_path(), g.map_path());
    cache.release(&e);
    cache.release(&g);
    cache.close();
    drop(cache);
    fs::remove_file(gone).unwrap();
    let o = dir.path().join("objects");
    let h = "0123456789abcdef0123456789abcdef";
    let strays = [
        o.join(format!("{h}.cache")),
        o.join(format!("{h}.00000000000000aa.bytes")),
        o.join(format!("{h}.1-0000abcd.tmp")),
    ];
    for p in &strays {
        fs::write(p, vec![1u8; 9000]).unwrap();
    }
    let cache = DiskCache::open(dir.path(), 1 << 30, 0).unwrap();
    assert!(strays.iter().all(|p| !p.exists()) && !gone_map.exists());
    assert_eq!(cache.used(), 2 * CHUNK);
    let e = cache.entry("b", "k", "\"v1\"", data.len() as u64);
    assert_eq!(e.try_read(0, data.len()).unwrap().unwrap(), data);
    let g = cache.entry("b", "k2", "\"v1\"", CHUNK);
    assert!(g.try_read(0, 1).unwrap().is_none());
    assert_eq!(fs::metadata(g.data_path()).unwrap().len(), CHUNK);
}

/// A pin taken while fetched bytes of the entry wait in memory for their first reader
/// (a sibling's prefetch) lets them go: the kernel reads the data file itself from then
/// on, and they would hold the memory budget until it pushed them out. The object counts
/// as one hit; later reads through flowfs come from the data file, byte for byte.
#[test]
fn a_pin_frees_fetched_bytes_waiting_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let one = BLOCK_CHUNKS * CHUNK;
    let data = pattern(one, 223);
    let cache = DiskCache::open(dir.path(), 1 << 30, 4 << 20).unwrap();
    let e = cache.entry("b", "k", "\"v1\"", one);
    insert(&cache, &e, 0, aligned(&data));
    assert_eq!(cache.mem.used(), one, "the fetched bytes wait in memory");
    let hits = || cache.hits.load(std::sync::atomic::Ordering::Relaxed);
    let pin = cache.pin_complete(&e).unwrap().expect("complete");
    assert_eq!(cache.mem.used(), 0, "the pin let them go");
    assert_eq!(hits(), one, "a pin the kernel reads counts the object once");
    let got = cache.read(&e, 0, one as usize).unwrap().expect("the bytes");
    assert_eq!(&got[..], &data[..]);
    drop(pin);
}
