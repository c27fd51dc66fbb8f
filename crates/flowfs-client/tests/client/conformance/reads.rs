//! HEAD, GET and ranged GETs.

use flowfs_client::Version;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use flowfs_client::{ClientError, List, ObjectClient};

use super::{assert_not_found, data, err, get, meta, put};

pub async fn head_of_missing_key_is_not_found(c: &dyn ObjectClient, p: &str) {
    assert_not_found(c.head(&format!("{p}missing")).await, "head");
    assert_not_found(
        c.get_range(Version::any(&format!("{p}missing")).range(0, 10))
            .await,
        "get of a missing key",
    );
}

pub async fn put_get_round_trip_with_metadata(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let body = data(1000, 1);
    // S3 sends user metadata as x-amz-meta-* headers: names come back lowercase.
    let m = meta(&[("flowfs-mode", "100644"), ("flowfs-uid", "1000")]);
    let before = SystemTime::now() - Duration::from_secs(2);
    let put = c.put(&key, body.clone().into(), &m).await.expect("put");
    assert!(!put.etag.is_empty(), "put returns an ETag");
    let h = c.head(&key).await.expect("head");
    assert_eq!(h.info.key, key);
    assert_eq!(h.info.size, 1000);
    assert_eq!(h.info.etag, put.etag, "HEAD's ETag is PUT's");
    assert_eq!(h.metadata, m, "user metadata round trip");
    let after = SystemTime::now() + Duration::from_secs(2);
    assert!(
        h.info.last_modified >= before && h.info.last_modified <= after,
        "last_modified is about now: {:?}",
        h.info.last_modified
    );
    let got = get(c, &key, 0, 1000).await;
    assert_eq!(got, body);
}

pub async fn empty_object(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}empty");
    put(c, &key, Bytes::new()).await;
    let h = c.head(&key).await.expect("head");
    assert_eq!(h.info.size, 0);
    let got = c
        .get_range(Version::any(&key).range(0, 0))
        .await
        .expect("empty range");
    assert!(got.is_empty());
}

pub async fn overwrite_replaces_content_and_etag(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let first = put(c, &key, data(100, 1)).await;
    let second = put(c, &key, data(50, 2)).await;
    assert_ne!(first, second, "different content, different ETag");
    let h = c.head(&key).await.expect("head");
    assert_eq!((h.info.size, h.info.etag), (50, second));
    assert_eq!(get(c, &key, 0, 50).await, data(50, 2));
}

pub async fn ranged_get_inside_and_at_end(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let body = data(100, 3);
    put(c, &key, body.clone()).await;
    let inside = c
        .get_range(Version::any(&key).range(3, 10))
        .await
        .expect("inside");
    assert_eq!(inside, body.slice(3..10));
    let at_end = c
        .get_range(Version::any(&key).range(95, 100))
        .await
        .expect("at end");
    assert_eq!(at_end, body.slice(95..100));
    let last = c
        .get_range(Version::any(&key).range(99, 100))
        .await
        .expect("last byte");
    assert_eq!(last, body.slice(99..100));
}

/// S3 answers `bytes=95-109` of a 100-byte object with the 5 bytes it has (206); the
/// client asked for 15 and treats a body shorter than asked as an error (a reader never
/// takes a hole for data). It is the short-body kind, `Transient`, as for a connection
/// lost mid-body: the client cannot tell the two apart. The core never asks past the size
/// it knows.
pub async fn ranged_get_end_beyond_size_is_a_short_body(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    put(c, &key, data(100, 4)).await;
    let e = err(
        c.get_range(Version::any(&key).range(95, 110)).await,
        "end beyond size",
    );
    assert!(
        matches!(&e, ClientError::Transient(m) if m.contains("short read")),
        "expected a short-body Transient error, got {e:?}"
    );
}

/// A range starting at or after the end is not satisfiable: HTTP 416 `InvalidRange` on
/// AWS S3 and on SeaweedFS, which the client classifies as `Other` (not retryable). An
/// empty object has no satisfiable range at all.
pub async fn ranged_get_starting_at_or_past_end_is_invalid_range(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    put(c, &key, data(100, 5)).await;
    let empty = format!("{p}empty");
    put(c, &empty, Bytes::new()).await;
    for (k, start, end) in [(&key, 100, 110), (&key, 150, 160), (&empty, 0, 10)] {
        let e = err(
            c.get_range(Version::any(k).range(start, end)).await,
            "start past the end",
        );
        assert!(
            matches!(&e, ClientError::Other(m) if m.contains("416") && m.contains("InvalidRange")),
            "{k} [{start}, {end}): expected Other(.. 416 InvalidRange ..), got {e:?}"
        );
        assert!(!e.is_retryable());
    }
}

/// `[s, s)` is empty and needs no request, whatever `s`.
pub async fn empty_range_is_empty(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    put(c, &key, data(10, 6)).await;
    for s in [0, 5, 10, 20] {
        let got = c
            .get_range(Version::any(&key).range(s, s))
            .await
            .expect("empty range");
        assert!(got.is_empty());
    }
    let mut calls = 0;
    c.get_range_pieces(Version::any(&key).pieces(0, &[]), &mut |_, _| calls += 1)
        .await
        .expect("no cuts");
    assert_eq!(calls, 0);
}

pub async fn if_match_mismatch_is_precondition(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let old = put(c, &key, data(100, 7)).await;
    let got = c
        .get_range(Version::new(&key, Some(&old)).range(0, 10))
        .await
        .expect("matching");
    assert_eq!(got, data(100, 7).slice(0..10));
    put(c, &key, data(100, 8)).await;
    let e = err(
        c.get_range(Version::new(&key, Some(&old)).range(0, 10))
            .await,
        "stale etag",
    );
    assert!(matches!(e, ClientError::Precondition(_)), "got {e:?}");
    assert!(!e.is_retryable());
    let mut pieces = 0;
    let r = c
        .get_range_pieces(
            Version::new(&key, Some(&old)).pieces(0, &[5, 10]),
            &mut |_, _| pieces += 1,
        )
        .await;
    let e = err(r, "stale etag, pieces");
    assert!(matches!(e, ClientError::Precondition(_)), "got {e:?}");
    assert_eq!(pieces, 0, "no piece of the new version goes out");
}

pub async fn get_range_pieces_in_order(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let body = data(1 << 20, 9);
    put(c, &key, body.clone()).await;
    let cuts = [1000, 4096, 300_000, 1 << 20];
    let mut got: Vec<(usize, Bytes)> = Vec::new();
    c.get_range_pieces(Version::any(&key).pieces(10, &cuts), &mut |i, b| {
        got.push((i, b))
    })
    .await
    .expect("pieces");
    let idx: Vec<usize> = got.iter().map(|g| g.0).collect();
    assert_eq!(idx, vec![0, 1, 2, 3], "each piece once, in order");
    let mut from = 10;
    for ((_, b), &cut) in got.iter().zip(&cuts) {
        assert_eq!(
            b,
            &body.slice(from as usize..cut as usize),
            "piece ending at {cut}"
        );
        from = cut;
    }
}

/// Pieces inside the object arrive whole; the one the body cannot fill ends the call with
/// the short-body error.
pub async fn get_range_pieces_past_the_end(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let body = data(100, 10);
    put(c, &key, body.clone()).await;
    let mut got = Vec::new();
    let r = c
        .get_range_pieces(Version::any(&key).pieces(0, &[40, 80, 120]), &mut |i, b| {
            got.push((i, b))
        })
        .await;
    let e = err(r, "cut past the end");
    assert!(
        matches!(&e, ClientError::Transient(m) if m.contains("short read")),
        "got {e:?}"
    );
    assert_eq!(
        got,
        vec![(0, body.slice(0..40)), (1, body.slice(40..80))],
        "the whole pieces before the end"
    );
}

/// Keys are plain strings: spaces, `+`, `=`, `&`, non-ASCII go through unchanged.
pub async fn odd_key_characters(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}odd name +=&ü%20.txt");
    put(c, &key, data(10, 11)).await;
    assert_eq!(c.head(&key).await.expect("head").info.key, key);
    let page = c.list_page(List::dir(p)).await.expect("list");
    let keys: Vec<_> = page.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, vec![key.as_str()]);
    let copy = format!("{p}copy of ü+.txt");
    c.copy(Version::any(&key), &copy, None).await.expect("copy");
    assert_eq!(get(c, &copy, 0, 10).await, data(10, 11));
}
