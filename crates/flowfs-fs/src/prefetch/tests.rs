//! The prefetcher alone, without `Fs`: the in-memory store and a cache in a temporary
//! directory, and what each read costs in requests.

use std::time::Duration;

use flowfs_client::mock::{MockClient, Op};
use flowfs_client::ClientError;

use super::*;

const MIB: u64 = 1 << 20;

struct Setup {
    /// Kept for the cache's lifetime.
    _dir: tempfile::TempDir,
    mock: Arc<MockClient>,
    p: Arc<Prefetcher>,
}

/// A prefetcher with `part` and `max_readahead` over an empty bucket, with the cache
/// memory `Fs::new` gives it.
fn setup(part: u64, max_readahead: u64) -> Setup {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut cfg = FsConfig::new("b", "", dir.path().to_path_buf());
    cfg.part_size = part;
    cfg.max_readahead = max_readahead;
    let cache = DiskCache::open(dir.path(), 1 << 30, max_readahead + 2 * part).expect("cache");
    let mock = Arc::new(MockClient::new());
    let p = Prefetcher::new(&cfg, mock.clone(), Arc::new(cache));
    Setup {
        _dir: dir,
        mock,
        p: Arc::new(p),
    }
}

fn data(n: u64, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

impl Setup {
    /// Puts `n` bytes as `key`; returns them and the object's ETag. Counts no request.
    async fn put(&self, key: &str, n: u64, seed: u8) -> (Vec<u8>, Option<String>) {
        let bytes = data(n, seed);
        self.mock.insert(key, bytes.clone());
        let etag = self.mock.head(key).await.expect("head").info.etag;
        self.mock.reset_counts();
        (bytes, Some(etag))
    }

    fn open(&self, key: &str, etag: &Option<String>, size: u64) -> Reader {
        self.p.open(key.to_string(), etag.clone(), size)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_readers_of_one_range_cost_one_get() {
    let s = setup(8 * MIB, 64 * MIB);
    let size = 20 * MIB;
    let (obj, etag) = s.put("k", size, 1).await;
    // The GET is still in flight when the second reader asks for the same chunk.
    s.mock.set_latency(Duration::from_millis(20));
    let (a, b) = (s.open("k", &etag, size), s.open("k", &etag, size));
    let at = 5 * MIB + 100;
    let (x, y) = tokio::join!(s.p.read(&a, at, 4096), s.p.read(&b, at, 4096));
    let want = &obj[at as usize..at as usize + 4096];
    assert_eq!(x.expect("read a"), want);
    assert_eq!(y.expect("read b"), want);
    assert_eq!(s.mock.count(Op::Get), 1);
    // A first read far into a large object fetches its chunk, nothing ahead.
    assert_eq!(s.mock.get_bytes(), CHUNK);
    // Past the end: nothing, and no request.
    assert!(s.p.read(&a, size, 4096).await.expect("read").is_empty());
    assert_eq!(s.mock.count(Op::Get), 1);
    s.p.close(&a);
    s.p.close(&b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sequential_readers_gets_grow_to_the_window_and_no_further() {
    let (part, window) = (MIB, 8 * MIB);
    let s = setup(part, window);
    let size = 64 * MIB;
    let (obj, etag) = s.put("big", size, 2).await;
    let r = s.open("big", &etag, size);
    let step = 128 << 10;
    let mut gets_at_half = 0;
    for off in (0..size).step_by(step as usize) {
        let got = s.p.read(&r, off, step as u32).await.expect("read");
        assert_eq!(got, obj[off as usize..(off + step) as usize], "at {off}");
        // Never more than the window ahead of the reader: a GET's bytes are counted
        // when it is answered, after its range was claimed.
        let fetched = s.mock.get_bytes();
        assert!(fetched <= off + step + window, "{fetched} fetched at {off}");
        if off + step == size / 2 {
            gets_at_half = s.mock.count(Op::Get);
        }
    }
    // Every byte once, and the second half in GETs of half the window (4 MiB): the
    // window grew to its limit. (Part-sized GETs would be 32 for the 32 MiB.)
    assert_eq!(s.mock.get_bytes(), size);
    let late = s.mock.count(Op::Get) - gets_at_half;
    assert!(late <= 9, "{late} GETs for the second 32 MiB");
    assert!(
        gets_at_half <= 16,
        "{gets_at_half} GETs for the first 32 MiB"
    );
    s.p.close(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_server_costs_a_read_two_gets_then_eio() {
    let s = setup(MIB, 8 * MIB);
    let size = 16 * MIB;
    let (obj, etag) = s.put("k", size, 3).await;
    let r = s.open("k", &etag, size);
    s.mock
        .fail(Op::Get, 0, ClientError::Transient("down".into()), 2);
    let e =
        s.p.read(&r, 3 * MIB, 4096)
            .await
            .expect_err("the server is down");
    assert_eq!(e.errno(), libc::EIO, "{e}");
    assert_eq!(s.mock.count(Op::Get), 2);
    // Nothing of the failed GETs is left claimed: once the server is back, one GET.
    let got = s.p.read(&r, 3 * MIB, 4096).await.expect("read");
    assert_eq!(got, obj[3 << 20..(3 << 20) + 4096]);
    assert_eq!(s.mock.count(Op::Get), 3);
    s.p.close(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cut_body_keeps_its_first_pieces_and_is_fetched_once_more() {
    // One part is the whole object: the first read fetches it in one GET of 8 pieces.
    // That GET is checked against the object's checksum, so it hands over nothing before
    // its end: the cut body is fetched once more, whole, and every later read is cached.
    // (A ranged GET cut short keeps its first pieces: tests/fs reads.rs.)
    let s = setup(8 * MIB, 64 * MIB);
    let size = 8 * MIB;
    let (obj, etag) = s.put("k", size, 4).await;
    let r = s.open("k", &etag, size);
    s.mock.cut_bodies(3 * MIB + 5, 1);
    assert_eq!(s.p.read(&r, 0, 4096).await.expect("read"), obj[..4096]);
    // Past the break: fetched again, not EIO.
    let at = 6 << 20;
    let got = s.p.read(&r, at as u64, 4096).await.expect("read");
    assert_eq!(got, obj[at..at + 4096]);
    assert_eq!(s.mock.count(Op::Get), 2);
    // The three pieces before the break were kept.
    let at = 2 << 20;
    let got = s.p.read(&r, at as u64, 4096).await.expect("read");
    assert_eq!(got, obj[at..at + 4096]);
    assert_eq!(s.mock.count(Op::Get), 2);
    s.p.close(&r);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_object_request_fetches_once_and_its_reader_sends_nothing() {
    let s = setup(8 * MIB, 64 * MIB);
    let size = 3 * MIB + 17;
    let (obj, etag) = s.put("next", size, 5).await;
    s.mock.set_latency(Duration::from_millis(20));
    s.p.object("next".into(), etag.clone(), size);
    // Asked again while on its way (a second sibling's open): nothing more.
    s.p.object("next".into(), etag.clone(), size);
    let r = s.open("next", &etag, size);
    let mut got = Vec::new();
    loop {
        let b =
            s.p.read(&r, got.len() as u64, 128 << 10)
                .await
                .expect("read");
        if b.is_empty() {
            break;
        }
        got.extend_from_slice(&b);
    }
    assert_eq!(got, obj);
    // One GET of the whole object (its four 1 MiB pieces), every byte once.
    assert_eq!(s.mock.count(Op::Get), 1);
    assert_eq!(s.mock.get_bytes(), size);
    s.p.close(&r);
}
