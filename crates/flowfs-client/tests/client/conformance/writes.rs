//! DELETE, multipart uploads, COPY.

use flowfs_client::Version;
use std::collections::HashMap;

use bytes::Bytes;
use flowfs_client::{ClientError, List, ObjectClient, Upload};

use super::{assert_not_found, complete, data, err, get, meta, open_upload, put, upload};

/// S3's smallest part but the last.
const PART: usize = 5 << 20;

/// DELETE of a key that does not exist succeeds (204), as on S3.
pub async fn delete_of_missing_key_succeeds(c: &dyn ObjectClient, p: &str) {
    c.delete(&format!("{p}never"))
        .await
        .expect("delete missing");
}

pub async fn delete_removes_the_object(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    put(c, &key, data(10, 1)).await;
    c.delete(&key).await.expect("delete");
    assert_not_found(c.head(&key).await, "head after delete");
    c.delete(&key).await.expect("delete again");
    // SeaweedFS 4.48 keeps the directory its filer made for `p` and lists it as an
    // object `p` itself (size 0, ETag `""`) once the last key below it is gone; AWS S3
    // lists nothing. Any other key left is a failure on both.
    let page = c.list_page(List::dir(p)).await.expect("list");
    assert!(
        page.objects.iter().all(|o| o.key == p && o.size == 0),
        "listed after delete: {page:?}"
    );
}

pub async fn multipart_round_trip(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}big");
    let m = meta(&[("flowfs-mode", "100600")]);
    let id = c.create_multipart(&key, &m).await.expect("create");
    assert!(!id.is_empty());
    let (a, b) = (data(PART, 1), data(1000, 2));
    let parts = vec![
        upload(c, &key, &id, 1, a.clone()).await,
        upload(c, &key, &id, 2, b.clone()).await,
    ];
    assert_not_found(c.head(&key).await, "not visible before completion");
    let done = complete(c, &key, &id, &parts).await;
    let h = c.head(&key).await.expect("head");
    assert_eq!(h.info.size, (PART + 1000) as u64);
    assert_eq!(h.info.etag, done.etag, "HEAD's ETag is the completion's");
    // A multipart ETag is "<md5 of the part md5s>-<parts>" on S3 and SeaweedFS.
    assert!(
        !super::s3_etags() || h.info.etag.ends_with("-2\""),
        "multipart ETag: {}",
        h.info.etag
    );
    assert_eq!(h.metadata, m, "metadata given at creation");
    let got = get(c, &key, PART as u64 - 10, PART as u64 + 1000).await;
    let want: Vec<u8> = a[PART - 10..].iter().chain(b.iter()).copied().collect();
    assert_eq!(got, Bytes::from(want));
    let again = c
        .complete_multipart(Upload::new(&key, &id).completion(&[]))
        .await;
    let e = err(again, "completing a completed upload");
    assert!(!e.is_retryable(), "got {e:?}");
}

/// After an abort the upload id is gone: parts and completion fail with `NoSuchUpload`
/// (404, `NotFound`) and no object appears.
pub async fn multipart_abort_forgets_the_upload(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}aborted");
    let id = open_upload(c, &key).await;
    let part = upload(c, &key, &id, 1, data(1000, 3)).await;
    c.abort_multipart(Upload::new(&key, &id))
        .await
        .expect("abort");
    assert_not_found(
        c.upload_part(Upload::new(&key, &id).part(2), data(10, 4).into())
            .await,
        "upload_part after abort",
    );
    assert_not_found(
        c.complete_multipart(Upload::new(&key, &id).completion(&[part]))
            .await,
        "complete after abort",
    );
    assert_not_found(c.head(&key).await, "no object from an aborted upload");
}

/// `list_uploads` names the open uploads of exactly one key (not of keys it prefixes),
/// with a start time from the server's clock, and forgets an aborted or completed one.
pub async fn list_uploads_names_the_open_uploads_of_one_key(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}open");
    let no_meta = HashMap::new();
    let a = c.create_multipart(&key, &no_meta).await.expect("create a");
    let b = c.create_multipart(&key, &no_meta).await.expect("create b");
    let other = c
        .create_multipart(&format!("{key}2"), &no_meta)
        .await
        .expect("create other");
    let mut ids: Vec<_> = c
        .list_uploads(&key)
        .await
        .expect("list")
        .into_iter()
        .collect();
    ids.sort_by(|x, y| x.upload_id.cmp(&y.upload_id));
    let mut want = vec![a.clone(), b.clone()];
    want.sort();
    let got: Vec<_> = ids.iter().map(|u| u.upload_id.clone()).collect();
    assert_eq!(got, want);
    let now = std::time::SystemTime::now();
    for u in &ids {
        let age = now.duration_since(u.initiated).unwrap_or_default();
        assert!(
            age.as_secs() < 600,
            "initiated {:?}, now {now:?}",
            u.initiated
        );
    }
    c.abort_multipart(Upload::new(&key, &a))
        .await
        .expect("abort a");
    let part = upload(c, &key, &b, 1, data(1000, 5)).await;
    c.complete_multipart(Upload::new(&key, &b).completion(&[part]))
        .await
        .expect("complete b");
    assert!(c.list_uploads(&key).await.expect("list").is_empty());
    c.abort_multipart(Upload::new(&format!("{key}2"), &other))
        .await
        .expect("abort other");
}

pub async fn multipart_unknown_upload_id_is_not_found(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let real = open_upload(c, &key).await;
    let bogus = format!("{real}x");
    assert_not_found(
        c.upload_part(Upload::new(&key, &bogus).part(1), data(10, 5).into())
            .await,
        "upload_part with an unknown id",
    );
    c.abort_multipart(Upload::new(&key, &real))
        .await
        .expect("abort");
}

/// Completion checks each part's ETag: a wrong one is `InvalidPart` (400, `Other`).
pub async fn multipart_complete_with_wrong_etag_fails(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let id = open_upload(c, &key).await;
    let mut part = upload(c, &key, &id, 1, data(1000, 6)).await;
    part.etag = "\"0123456789abcdef0123456789abcdef\"".to_string();
    let e = err(
        c.complete_multipart(Upload::new(&key, &id).completion(&[part]))
            .await,
        "complete with a wrong ETag",
    );
    assert!(
        matches!(&e, ClientError::Other(m) if m.contains("InvalidPart")),
        "expected Other(.. InvalidPart ..), got {e:?}"
    );
    assert_not_found(c.head(&key).await, "no object from a failed completion");
    c.abort_multipart(Upload::new(&key, &id))
        .await
        .expect("abort");
}

pub async fn copy_keeps_content_and_metadata(c: &dyn ObjectClient, p: &str) {
    let (from, to) = (format!("{p}from"), format!("{p}to"));
    let m = meta(&[("flowfs-mode", "100755")]);
    c.put(&from, data(3000, 7).into(), &m).await.expect("put");
    let done = c.copy(Version::any(&from), &to, None).await.expect("copy");
    let h = c.head(&to).await.expect("head");
    assert_eq!(h.info.size, 3000);
    assert_eq!(h.info.etag, done.etag, "HEAD's ETag is the copy's");
    assert_eq!(h.metadata, m, "metadata copied");
    assert_eq!(get(c, &to, 0, 3000).await, data(3000, 7));
    assert_eq!(c.head(&from).await.expect("source stays").info.size, 3000);
}

/// A copy of an object uploaded in one request has the source's ETag on S3 (the MD5 of
/// the bytes); on GCS (the ETag flowfs reads is the generation) and Azure (every blob
/// version has its own) it has a new one. A mount shows two hard-linked names as one file
/// again only while their ETags are equal (flowfs-fs inode/links.rs): on S3 only.
pub async fn a_copy_keeps_the_etag_of_a_single_part_object(c: &dyn ObjectClient, p: &str) {
    let (from, to) = (format!("{p}from"), format!("{p}to"));
    let put = c
        .put(&from, data(2000, 9).into(), &HashMap::new())
        .await
        .expect("put");
    let copy = c.copy(Version::any(&from), &to, None).await.expect("copy");
    let head = c.head(&to).await.expect("head");
    assert_eq!(head.info.etag, copy.etag, "HEAD's ETag is the copy's");
    let store = c.key_rules().store;
    println!("  copy[{store}]: source {}, copy {}", put.etag, copy.etag);
    if store == "Azure Blob" || store == "GCS" {
        assert_ne!(copy.etag, put.etag, "{store}: a copy is a new version");
    } else {
        assert_eq!(copy.etag, put.etag, "{store}: a copy keeps the ETag");
    }
}

/// A copy of one version (`copy_file_range` copies the version its source was opened at),
/// with the destination's own metadata (its mode and time, not the source's):
/// of the version the source is, done; of another, refused (`Precondition`, or
/// `NotFound` on GCS, where an old generation is gone), and nothing written.
pub async fn a_copy_of_a_version_copies_only_that_version(c: &dyn ObjectClient, p: &str) {
    let (from, to) = (format!("{p}from"), format!("{p}to"));
    let old = put(c, &from, data(1500, 3)).await;
    let new = put(c, &from, data(1700, 4)).await;
    let refused = c.copy(Version::new(&from, Some(&old)), &to, None).await;
    assert!(
        matches!(
            refused,
            Err(ClientError::Precondition(_)) | Err(ClientError::NotFound(_))
        ),
        "copy of a version the source no longer is: {refused:?}"
    );
    assert_not_found(c.head(&to).await, "no copy of an old version appears");
    let m = meta(&[("flowfs-mode", "100600")]);
    let done = c
        .copy(Version::new(&from, Some(&new)), &to, Some(&m))
        .await
        .expect("copy");
    let h = c.head(&to).await.expect("head");
    assert_eq!(h.info.etag, done.etag);
    assert_eq!(
        h.metadata, m,
        "the copy has the metadata given, not the source's"
    );
    assert_eq!(get(c, &to, 0, 1700).await, data(1700, 4));
}

pub async fn copy_of_missing_key_is_not_found(c: &dyn ObjectClient, p: &str) {
    assert_not_found(
        c.copy(
            Version::any(&format!("{p}missing")),
            &format!("{p}to"),
            None,
        )
        .await,
        "copy of a missing key",
    );
    assert_not_found(c.head(&format!("{p}to")).await, "no copy appears");
}

/// An upload in parts over an existing key is a new version: a new ETag, its bytes read
/// by it, and a read of the old version refused (fake-gcs-server gives a compose onto an
/// existing object the old generation: a reader keyed by ETag would serve old bytes).
pub async fn multipart_over_an_existing_key_is_a_new_version(c: &dyn ObjectClient, p: &str) {
    let key = format!("{p}obj");
    let old = put(c, &key, data(2000, 1)).await;
    let id = open_upload(c, &key).await;
    let parts = vec![
        upload(c, &key, &id, 1, data(PART, 2)).await,
        upload(c, &key, &id, 2, data(10, 3)).await,
    ];
    let new = complete(c, &key, &id, &parts).await;
    assert_ne!(new.etag, old, "a new version, a new ETag");
    let head = c.head(&key).await.expect("head");
    assert_eq!(
        (head.info.etag.as_str(), head.info.size),
        (new.etag.as_str(), PART as u64 + 10)
    );
    let got = c
        .get_range(Version::new(&key, Some(&new.etag)).range(0, 100))
        .await
        .expect("get new");
    assert_eq!(got, data(PART, 2).slice(..100));
    let e = err(
        c.get_range(Version::new(&key, Some(&old)).range(0, 100))
            .await,
        "get of the old version",
    );
    assert!(matches!(e, ClientError::Precondition(_)), "got {e:?}");
}
