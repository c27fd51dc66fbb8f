//! Full-object checksums (issue 49): what a store keeps of an upload's bytes, named in a
//! HEAD, and a whole GET checked against it.

use std::collections::HashMap;

use bytes::Bytes;
use flowfs_client::{ClientError, Crc, ObjectClient, Payload, Upload, Version};

use super::{complete, data, open_upload, put, upload};

/// S3's smallest part but the last.
const PART: usize = 5 << 20;

/// The HEAD of `key` names a checksum flowfs computes, of exactly `body`; a whole GET
/// gives `body` in its pieces.
async fn holds(c: &dyn ObjectClient, key: &str, body: &Bytes) {
    let h = c.head(key).await.expect("head");
    let sum = h
        .checksum
        .unwrap_or_else(|| panic!("{key}: no checksum in the HEAD"));
    let crc = Crc::named(sum.name).unwrap_or_else(|| panic!("{key}: checksum {}", sum.name));
    assert_eq!(
        sum,
        crc.of(body),
        "{key}: the store's checksum is of the bytes sent"
    );
    let n = body.len() as u64;
    let cuts = [n / 3, n];
    let mut got = Vec::new();
    (c.get_whole_pieces(Version::new(key, Some(&h.info.etag)), &cuts, &mut |_, b| {
        got.push(b)
    }))
    .await
    .expect("whole get");
    assert_eq!(got.len(), 2, "{key}: one piece per cut");
    assert_eq!(got.concat(), body.to_vec(), "{key}: whole get");
}

/// One PUT and a multipart upload of two parts: each object has a full-object checksum.
pub async fn every_upload_has_a_full_object_checksum(c: &dyn ObjectClient, p: &str) {
    let small = data(1000, 3);
    put(c, &format!("{p}small"), small.clone()).await;
    holds(c, &format!("{p}small"), &small).await;
    let key = format!("{p}big");
    let id = open_upload(c, &key).await;
    let (a, b) = (data(PART, 4), data(1000, 5));
    let parts = vec![
        upload(c, &key, &id, 1, a.clone()).await,
        upload(c, &key, &id, 2, b.clone()).await,
    ];
    complete(c, &key, &id, &parts).await;
    let whole: Vec<u8> = a.iter().chain(b.iter()).copied().collect();
    holds(c, &key, &Bytes::from(whole)).await;
}

/// An upload whose checksum (`Payload`, computed by the writeback as it reads the staged
/// file) is not of its bytes is refused, a PUT and a part alike: a body damaged between
/// the read and the socket never becomes the object.
pub async fn an_upload_whose_checksum_is_not_of_its_bytes_is_refused(
    c: &dyn ObjectClient,
    p: &str,
) {
    let crc = c
        .upload_checksum()
        .expect("the store's uploads carry a checksum");
    let (body, other) = (data(3000, 6), data(3000, 7));
    let wrong = || Payload::new(body.clone(), Some(crc.of(&other)));
    let key = format!("{p}refused");
    let r = c.put(&key, wrong(), &HashMap::new()).await;
    assert!(matches!(r, Err(ClientError::Corrupt(_))), "put: {r:?}");
    let id = open_upload(c, &key).await;
    let r = c.upload_part(Upload::new(&key, &id).part(1), wrong()).await;
    assert!(matches!(r, Err(ClientError::Corrupt(_))), "part: {r:?}");
    c.abort_multipart(Upload::new(&key, &id))
        .await
        .expect("abort");
    // The right one is taken.
    let right = Payload::new(body.clone(), Some(crc.of(&body)));
    c.put(&key, right, &HashMap::new()).await.expect("put");
    holds(c, &key, &body).await;
}
