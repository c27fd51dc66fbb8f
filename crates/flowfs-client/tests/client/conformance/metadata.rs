//! User metadata: names, values, and replacing it in place (CopyObject onto itself with
//! `MetadataDirective: REPLACE`), which is how chmod, chown and utimens reach an object.
//! What SeaweedFS 4.48 does is pinned here; AWS S3 documents the same (metadata names are
//! lower-cased, a copy of a non-multipart object keeps its MD5 ETag).

use flowfs_client::copy::{copy_in_parts, CopyLimits};
use flowfs_client::{ClientError, ObjectClient, Version};

use super::{assert_not_found, complete, data, err, get, meta, upload};

/// S3's smallest part but the last.
const PART: usize = 5 << 20;

/// Names come back in lower case (they travel as HTTP headers); values verbatim, and
/// the s3fs-fuse convention's values (decimal mode, seconds with nanoseconds) survive.
pub async fn metadata_names_come_back_lower_case(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let sent = meta(&[
        ("Mode", "33261"),
        ("MTime", "1600000000.000000500"),
        ("uid", "0"),
    ]);
    c.put(&key, data(100, 1).into(), &sent).await.expect("put");
    let h = c.head(&key).await.expect("head");
    let want = meta(&[
        ("mode", "33261"),
        ("mtime", "1600000000.000000500"),
        ("uid", "0"),
    ]);
    assert_eq!(h.metadata, want);
}

/// A copy onto itself with REPLACE changes the metadata only: same body, the old keys
/// gone, and on S3 the same ETag (Azure's Set Blob Metadata gives a new one).
pub async fn replace_metadata_keeps_body_and_etag(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let put = c
        .put(
            &key,
            data(3000, 2).into(),
            &meta(&[("mode", "33261"), ("other", "x")]),
        )
        .await
        .expect("put");
    let done = c
        .replace_metadata(
            Version::new(&key, Some(&put.etag)).rewrite(&meta(&[("mode", "33188")]), 3000),
        )
        .await
        .expect("replace");
    // S3 keeps an object's ETag (its body's MD5); Azure gives the blob a new one.
    if super::s3_etags() {
        assert_eq!(done.etag, put.etag, "the ETag stays");
    }
    let h = c.head(&key).await.expect("head");
    assert_eq!(h.info.etag, done.etag, "HEAD's ETag is the one returned");
    assert_eq!(
        h.metadata,
        meta(&[("mode", "33188")]),
        "replaced, not merged"
    );
    let got = get(c, &key, 0, 3000).await;
    assert_eq!(got, data(3000, 2));
}

/// A multipart object keeps its `-N` ETag and its body too (SeaweedFS 4.48; AWS S3 gives
/// a copy of a multipart object a new ETag, which is why callers take the one returned).
pub async fn replace_metadata_of_a_multipart_object(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}big");
    let id = c
        .create_multipart(&key, &meta(&[("mode", "33261")]))
        .await
        .expect("create");
    let parts = vec![
        upload(c, &key, &id, 1, data(PART, 3)).await,
        upload(c, &key, &id, 2, data(10, 4)).await,
    ];
    let done = complete(c, &key, &id, &parts).await;
    let r = c
        .replace_metadata(
            Version::new(&key, Some(&done.etag))
                .rewrite(&meta(&[("mode", "33188")]), PART as u64 + 10),
        )
        .await
        .expect("replace");
    let h = c.head(&key).await.expect("head");
    assert_eq!(h.info.etag, r.etag, "HEAD's ETag is the one returned");
    assert_eq!(h.metadata, meta(&[("mode", "33188")]));
    let tail = get(c, &key, PART as u64, PART as u64 + 10).await;
    assert_eq!(tail, data(10, 4));
}

/// Conditional on a version that is gone: `Precondition`, and nothing changes.
pub async fn replace_metadata_of_a_changed_object_is_precondition(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    c.put(&key, data(10, 5).into(), &meta(&[("mode", "33261")]))
        .await
        .expect("put");
    let r = c
        .replace_metadata(
            Version::new(&key, Some("\"0123456789abcdef\"")).rewrite(&meta(&[("mode", "1")]), 10),
        )
        .await;
    let e = err(r, "stale ETag");
    assert!(matches!(e, ClientError::Precondition(_)), "{e:?}");
    let h = c.head(&key).await.expect("head");
    assert_eq!(h.metadata, meta(&[("mode", "33261")]), "unchanged");
}

pub async fn replace_metadata_of_a_missing_key_is_not_found(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}missing");
    assert_not_found(
        c.replace_metadata(Version::any(&key).rewrite(&meta(&[("mode", "1")]), 1))
            .await,
        "replace of a missing key",
    );
    assert_not_found(c.head(&key).await, "nothing appears");
}

/// A copy onto itself in parts (UploadPartCopy, what a metadata rewrite above 5 GiB
/// does), here with parts of PART bytes: the body stays, the metadata is replaced, and a
/// stale ETag fails it with `Precondition`, leaving no upload open.
pub async fn copy_in_parts_replaces_metadata_and_keeps_the_body(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}large");
    let size = 2 * PART + 10;
    let put = c
        .put(&key, data(size, 6).into(), &meta(&[("mode", "33261")]))
        .await
        .expect("put");
    let limits = CopyLimits {
        max_copy: PART as u64,
        part: PART as u64,
    };
    let other = meta(&[("mode", "1")]);
    let old = Version::new(&key, Some("\"0\""));
    let stale = copy_in_parts(c, old, &key, &other, size as u64, limits);
    let e = err(stale.await, "stale ETag");
    assert!(matches!(e, ClientError::Precondition(_)), "{e:?}");
    assert!(
        c.list_uploads(&key).await.expect("list").is_empty(),
        "aborted"
    );
    let m = meta(&[("mode", "33188")]);
    let this = Version::new(&key, Some(&put.etag));
    let done = copy_in_parts(c, this, &key, &m, size as u64, limits)
        .await
        .expect("copy in parts");
    let h = c.head(&key).await.expect("head");
    assert_eq!(
        (h.info.etag.as_str(), h.info.size),
        (done.etag.as_str(), size as u64)
    );
    assert_eq!(h.metadata, m);
    let got = get(c, &key, 0, size as u64).await;
    assert_eq!(got, data(size, 6));
}

/// A copy to another key in parts (what a copy or a rename above 5 GiB does): the
/// destination has the source's body and the metadata given; the source stays.
pub async fn copy_in_parts_to_another_key(c: &dyn ObjectClient, p: &str) {
    let (from, to) = (format!("{p}src"), format!("{p}dst"));
    let size = PART + 10;
    let put = c
        .put(&from, data(size, 7).into(), &meta(&[("mode", "33261")]))
        .await;
    let put = put.expect("put");
    let limits = CopyLimits {
        max_copy: PART as u64,
        part: PART as u64,
    };
    let src = Version::new(&from, Some(&put.etag));
    let m = meta(&[("mode", "33188")]);
    copy_in_parts(c, src, &to, &m, size as u64, limits)
        .await
        .expect("copy in parts");
    let h = c.head(&to).await.expect("head");
    assert_eq!((h.info.size, &h.metadata), (size as u64, &m));
    let got = get(c, &to, 0, size as u64).await;
    assert_eq!(got, data(size, 7));
    assert_eq!(c.head(&from).await.expect("source").info.etag, put.etag);
}
