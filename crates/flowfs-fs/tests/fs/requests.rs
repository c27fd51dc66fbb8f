//! Requests a pipeline's work directory does not need (issue 17, B7): a file read by the
//! next task right after its upload, and the re-check of directories on each path walk.

use std::sync::Arc;
use std::time::Duration;

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::OpenMode;
use flowfs_fs::{Fs, FsConfig, Kind, ROOT};

use crate::common::{data, read_all};

fn fs_ttl(mock: &Arc<MockClient>, cache: &std::path::Path, ttl: Duration) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", "", cache.to_path_buf());
    cfg.metadata_ttl = ttl;
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

/// `samtools sort -o x.bam; samtools index x.bam`: the index reads the file while its
/// upload runs, so the upload ends with a reader open. At that reader's close the staged
/// copy, the very version uploaded, goes to the cache: the next task reads it with no GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_uploaded_while_a_reader_had_it_open_is_read_from_the_cache_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    let fs = fs_ttl(&mock, dir.path(), Duration::from_secs(60));
    let body = data(300 << 10, 7);
    let (a, w) = fs.create(ROOT, "x.bam", 0o644, None).await.expect("create");
    fs.write(w, 0, &body).expect("write");
    let (r, _) = fs
        .open(a.ino, OpenMode::Read)
        .await
        .expect("open for reading");
    fs.release(w).expect("release the writer");
    assert!(fs.flush_all().await.is_empty(), "uploaded");
    assert_eq!(fs.read(r, 0, 4096).await.expect("read"), body[..4096]);
    fs.release(r).expect("release the reader");
    mock.reset_counts();
    assert_eq!(read_all(&fs, a.ino).await, body);
    assert_eq!(mock.count(Op::Get), 0, "read from the cache");
}

/// A directory looked up again after the TTL is re-checked with its LIST alone; the
/// HEAD goes out only once nothing is below it, and then tells what the name is now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_directory_is_re_checked_without_a_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    mock.insert("work/a/.exitcode", b"0".to_vec());
    let fs = fs_ttl(&mock, dir.path(), Duration::ZERO);
    let w = fs.lookup(ROOT, "work").await.expect("lookup");
    assert_eq!(w.kind, Kind::Dir);
    mock.reset_counts();
    assert_eq!(fs.lookup(ROOT, "work").await.expect("again").ino, w.ino);
    assert_eq!((mock.count(Op::List), mock.count(Op::Head)), (1, 0));
    // Another client replaces the directory with a file of its name.
    mock.remove("work/a/.exitcode");
    mock.insert("work", b"now a file".to_vec());
    mock.reset_counts();
    let f = fs.lookup(ROOT, "work").await.expect("a file now");
    assert_eq!(f.kind, Kind::File);
    assert_ne!(f.ino, w.ino);
    assert_eq!((mock.count(Op::List), mock.count(Op::Head)), (1, 1));
}

/// A directory `big` of 2,500 files (3 pages) listed once, its listing then older than
/// the TTL (50 ms), and every request from then on taking 20 ms.
async fn a_listing_aged_past_the_ttl(cache: &std::path::Path) -> (Arc<MockClient>, Arc<Fs>, u64) {
    let mock = Arc::new(MockClient::new());
    for i in 0..2500 {
        mock.insert(&format!("big/f{i:05}"), b"x".to_vec());
    }
    let ttl = Duration::from_millis(50);
    let fs = fs_ttl(&mock, cache, ttl);
    let big = fs.lookup(ROOT, "big").await.expect("big").ino;
    assert_eq!(crate::common::entries(&fs, big, false).await.len(), 2500);
    std::thread::sleep(ttl * 2); // the TTL is wall-clock time: the listing ages
    mock.set_latency(Duration::from_millis(20));
    mock.reset_counts();
    (mock, fs, big)
}

/// A loop creating files in a listed directory, once its listing is older than the TTL:
/// each new name's lookup waited for the whole directory to be listed again (3 pages
/// here; 180-350 ms for 1,000 keys on SeaweedFS). It now takes the first answer, a HEAD
/// and a one-key LIST of the name, while the listing is taken behind it for the lookups
/// after.
#[tokio::test(start_paused = true)]
async fn a_lookup_after_the_ttl_does_not_wait_for_a_big_directory_to_be_listed_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs, big) = a_listing_aged_past_the_ttl(dir.path()).await;
    let t0 = tokio::time::Instant::now();
    let e = fs.lookup(big, "new-1").await.expect_err("absent");
    assert!(matches!(e, flowfs_fs::FsError::NotFound), "{e:?}");
    let took = t0.elapsed();
    assert!(
        took < Duration::from_millis(30),
        "waited for 3 pages: {took:?}"
    );
    assert_eq!(mock.count(Op::Head), 1);
    // The listing taken behind it answers the next lookups, from memory.
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(
        mock.count(Op::List),
        1 + 3,
        "one-key LIST, then the 3 pages"
    );
    fs.lookup(big, "new-2").await.expect_err("absent");
    fs.lookup(big, "f01234").await.expect("listed");
    assert_eq!(mock.count(Op::Head) + mock.count(Op::List), 1 + 4);
}

/// `cp -r` of a big directory once its listing is older than the TTL: the names it looks
/// up were in that listing, so they wait for the listing taken again, which answers all
/// the lookups after it, instead of costing a HEAD and a LIST each (which cost B1s,
/// 10,000 files at 20 ms per request, 1,600 requests and a tenth more time).
#[tokio::test(start_paused = true)]
async fn a_listed_name_looked_up_after_the_ttl_costs_only_the_listing_again() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs, big) = a_listing_aged_past_the_ttl(dir.path()).await;
    let t0 = tokio::time::Instant::now();
    for i in 0..100 {
        fs.lookup(big, &format!("f{i:05}")).await.expect("listed");
    }
    assert_eq!(mock.count(Op::Head), 0);
    assert_eq!(mock.count(Op::List), 3, "the 3 pages once");
    // The 3 pages at once, split where the pages of the last listing began.
    let took = t0.elapsed();
    assert!(took < Duration::from_millis(30), "{took:?}");
}

/// A directory listed again in ranges split at the names of its last listing holds what
/// one listing from the start would: names added inside a range (one range then needs
/// two pages), names removed, a subdirectory named like a split point, a name sorting
/// just after one.
#[tokio::test(start_paused = true)]
async fn a_directory_listed_again_in_ranges_holds_what_the_bucket_holds() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs, big) = a_listing_aged_past_the_ttl(dir.path()).await;
    for i in 0..1200 {
        mock.insert(&format!("big/f01500-{i:04}"), b"y".to_vec());
    }
    for i in (0..2500).step_by(7) {
        mock.remove(&format!("big/f{i:05}"));
    }
    mock.insert("big/f00999/inner", b"d".to_vec());
    mock.insert("big/f00999.txt", b"t".to_vec());
    mock.insert("big/f01999-", b"u".to_vec());
    let mut want: Vec<String> = mock
        .keys()
        .iter()
        .filter_map(|k| k.strip_prefix("big/"))
        .map(|k| k.split('/').next().unwrap_or(k).to_string())
        .collect();
    want.sort();
    want.dedup();
    let got: Vec<String> = crate::common::entries(&fs, big, false)
        .await
        .into_iter()
        .map(|e| e.name)
        .filter(|n| n != "." && n != "..")
        .collect();
    assert_eq!(got.len(), want.len());
    assert!(got == want, "the listing differs from the bucket");
    let inner = fs.lookup(big, "f00999").await.expect("a directory");
    assert_eq!(inner.kind, flowfs_fs::Kind::Dir);
}

/// `cp` of a directory's files after the kernel dropped its dentries (`drop_caches`, or
/// memory pressure): the kernel forgets the files, their directory and its parent, then
/// looks each name up again. The directory's listing, a moment old, answers: no request.
/// (The directory's node went with its listing, and each name cost a HEAD and a one-key
/// LIST again: the seventeenth session counted 2 LOOKUPs, 2 HEADs, 2 LISTs per file.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_the_kernel_forgot_are_answered_by_the_listing_still_fresh() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    for i in 0..10 {
        mock.insert(&format!("in/d/f{i}"), b"x".to_vec());
    }
    let fs = fs_ttl(&mock, dir.path(), Duration::from_secs(60));
    let top = fs.lookup(ROOT, "in").await.expect("in").ino;
    let d = fs.lookup(top, "d").await.expect("d").ino;
    assert_eq!(crate::common::entries(&fs, d, false).await.len(), 10);
    let f0 = fs.lookup(d, "f0").await.expect("f0").ino;
    // What the kernel's dentry shrinker sends, children first.
    fs.forget(f0, 1);
    fs.forget(d, 1);
    fs.forget(top, 1);
    mock.reset_counts();
    assert_eq!(fs.lookup(ROOT, "in").await.expect("in again").ino, top);
    assert_eq!(fs.lookup(top, "d").await.expect("d again").ino, d);
    for f in ["f0", "f5"] {
        assert_eq!(
            fs.lookup(d, f).await.expect("a file again").kind,
            Kind::File
        );
    }
    let sent: u64 = [Op::Head, Op::List, Op::Get]
        .iter()
        .map(|&o| mock.count(o))
        .sum();
    assert_eq!(sent, 0, "answered from the listing kept");
}

/// A directory in the bucket before the mount, `n` files in it, never listed here; every
/// request from then on takes 20 ms.
async fn an_existing_directory(
    cache: &std::path::Path,
    n: usize,
) -> (Arc<MockClient>, Arc<Fs>, u64) {
    let mock = Arc::new(MockClient::new());
    for i in 0..n {
        mock.insert(&format!("out/old{i:05}"), b"x".to_vec());
    }
    let fs = fs_ttl(&mock, cache, Duration::from_secs(60));
    let out = fs.lookup(ROOT, "out").await.expect("out").ino;
    mock.set_latency(Duration::from_millis(20));
    mock.reset_counts();
    (mock, fs, out)
}

/// B5 into a directory that existed before the mount (a pipeline's `results/`): each
/// create's lookup cost a HEAD and a one-key LIST, 200 files 5.0 s at 20 ms per request.
/// The first create lists the directory behind it; the lookups after are answered from
/// that listing.
#[tokio::test(start_paused = true)]
async fn creates_in_a_directory_never_listed_ask_the_store_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs, out) = an_existing_directory(dir.path(), 30).await;
    let t0 = tokio::time::Instant::now();
    for i in 0..100 {
        create_after_a_lookup(&fs, out, &format!("new{i:03}")).await;
    }
    let took = t0.elapsed();
    assert!(
        mock.count(Op::Head) <= 4,
        "{} HEADs for 100 new names",
        mock.count(Op::Head)
    );
    assert!(took < Duration::from_millis(200), "{took:?}");
    // The listing is right: old names found, with no request.
    mock.reset_counts();
    assert_eq!(
        fs.lookup(out, "old00007").await.expect("old").kind,
        Kind::File
    );
    assert_eq!(mock.count(Op::Head) + mock.count(Op::List), 0);
    assert!(fs.flush_all().await.is_empty(), "uploaded");
}

/// As the kernel creates a file: a lookup that finds nothing, then the create.
async fn create_after_a_lookup(fs: &Arc<Fs>, dir: u64, name: &str) {
    let e = fs.lookup(dir, name).await.expect_err("absent");
    assert!(matches!(e, flowfs_fs::FsError::NotFound), "{e:?}");
    let (_, fh) = fs.create(dir, name, 0o644, None).await.expect("create");
    fs.release(fh).expect("release");
}

/// A directory bigger than a create lists (12,000 names: 12 pages) is listed behind the
/// first create only as far as 10 pages, then noted as too big: the names after are
/// asked one by one (a HEAD and a one-key LIST each), and no page is listed again.
#[tokio::test(start_paused = true)]
async fn a_directory_too_big_to_list_is_tried_once() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs, out) = an_existing_directory(dir.path(), 12_000).await;
    create_after_a_lookup(&fs, out, "new-0").await;
    fs.read_ahead_settled().await;
    let pages = mock.count(Op::List) - 1;
    assert!(
        (1..=10).contains(&pages),
        "{pages} pages listed behind one create"
    );
    mock.reset_counts();
    for i in 1..=5 {
        create_after_a_lookup(&fs, out, &format!("new-{i}")).await;
    }
    fs.read_ahead_settled().await;
    assert_eq!((mock.count(Op::Head), mock.count(Op::List)), (5, 5));
    fs.lookup(out, "old11999").await.expect("asked by name");
    assert!(fs.flush_all().await.is_empty(), "uploaded");
}

/// A name found absent, with no create after it, lists nothing: a reader waiting for
/// another client's file asks the store for each new name (no listing a TTL old says no).
#[tokio::test(start_paused = true)]
async fn a_name_found_absent_lists_nothing() {
    let dir = tempfile::tempdir().expect("tempdir");
    let (mock, fs, out) = an_existing_directory(dir.path(), 30).await;
    fs.lookup(out, "later").await.expect_err("absent");
    fs.read_ahead_settled().await;
    assert_eq!((mock.count(Op::Head), mock.count(Op::List)), (1, 1));
    mock.insert("out/other", b"y".to_vec());
    assert_eq!(
        fs.lookup(out, "other").await.expect("found").kind,
        Kind::File
    );
}
