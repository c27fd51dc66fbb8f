//! Listings fetched ahead of a directory walk (fs/walk.rs): a `find` over many
//! directories costs about N / depth round trips, not N, and what a walk fetches for
//! directories nobody reads is bounded.

use std::time::Duration;

use flowfs_client::mock::Op;

use crate::common::*;

/// `find` as it reads: each directory from its start, in listing order, every name in
/// it looked up (its `stat`).
async fn find(fs: &std::sync::Arc<flowfs_fs::Fs>, dir: u64) -> usize {
    let mut seen = 0;
    for item in entries(fs, dir, false).await {
        let a = fs.lookup(dir, &item.name).await.expect("lookup");
        seen += 1;
        if item.kind == flowfs_fs::Kind::Dir {
            seen += Box::pin(find(fs, a.ino)).await;
        }
    }
    seen
}

/// 128 directories of 4 files at 20 ms per request (paused clock): one LIST after
/// another took 128 round trips (2.6 s); listed ahead, 16 at once, about a tenth.
#[tokio::test(start_paused = true)]
async fn a_walk_of_many_directories_costs_a_round_trip_per_many_listings() {
    let (_dir, mock, fs) = mount("p");
    for d in 0..128 {
        for f in 0..4 {
            mock.insert(&format!("p/w/d{d:03}/f{f}"), b"x".to_vec());
        }
    }
    mock.set_latency(Duration::from_millis(20));
    let w = path_ino(&fs, "w").await.unwrap();
    mock.reset_counts();
    let t0 = tokio::time::Instant::now();
    assert_eq!(find(&fs, w).await, 128 * 5);
    let took = t0.elapsed();
    eprintln!("find over 128 directories at 20 ms per request: {took:?}");
    // Every directory listed once: nothing fetched twice, nothing beyond the tree.
    assert_eq!(mock.count(Op::List), 129);
    assert_eq!(mock.count(Op::Head), 0);
    assert!(took < Duration::from_millis(400), "took {took:?}");
    let a = fs.read_ahead();
    assert_eq!((a.walks.listed, a.walks.too_big), (128, 0));
}

/// An `ls` of a directory of 1,000 subdirectories lists 32 of them ahead, not 1,000; a
/// subdirectory of more than one page of keys is given up (and listed in full when the
/// walker reaches it).
#[tokio::test(start_paused = true)]
async fn what_a_walk_lists_ahead_is_bounded() {
    let (_dir, mock, fs) = mount("p");
    for d in 0..1000 {
        mock.insert(&format!("p/top/d{d:04}/f"), b"x".to_vec());
    }
    for f in 0..1500 {
        mock.insert(&format!("p/top/d0000/g{f:04}"), b"y".to_vec());
    }
    let top = path_ino(&fs, "top").await.unwrap();
    mock.reset_counts();
    assert_eq!(entries(&fs, top, false).await.len(), 1000);
    fs.read_ahead_settled().await;
    // top's own 1 page + 32 subdirectories, the big one given up after its first page.
    assert_eq!(mock.count(Op::List), 1 + 32);
    let a = fs.read_ahead();
    assert_eq!((a.walks.listed, a.walks.too_big), (32, 1));
    let d0 = fs.lookup(top, "d0000").await.unwrap().ino;
    mock.reset_counts();
    assert_eq!(entries(&fs, d0, false).await.len(), 1501);
    assert_eq!(mock.count(Op::List), 2, "listed in full when reached");
}
