//! Extended attributes over the in-memory store (issue 49): `user.*` kept in the object's
//! metadata as s3fs keeps them, carried by uploads, rewritten in place on objects already
//! in the bucket, kept by renames, read back by another mount.

use std::sync::Arc;

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::{Fs, FsError, XattrMode, ROOT};

use crate::common::{fs_on, mount, path_ino, setup};

/// What s3fs 1.90 (`use_xattr`) wrote for `user.a` = `hi`.
const BY_S3FS: &str = "%7B%22user.a%22%3A%22aGk%3D%22%7D";

fn stored(mock: &MockClient, key: &str) -> Option<String> {
    mock.metadata(key).expect("object").get("xattr").cloned()
}

async fn set(fs: &Arc<Fs>, ino: u64, name: &str, value: &[u8]) -> Result<(), FsError> {
    fs.setxattr(ino, name, value, XattrMode::Set).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_carries_them_and_another_mount_reads_them() {
    let (dir, other) = crate::common::two_caches();
    let (mock, fs) = setup(dir.path(), "");
    let (a, fh) = fs.create(ROOT, "f", 0o644, None).await.unwrap();
    set(&fs, a.ino, "user.a", b"hi").await.unwrap();
    fs.write(fh, 0, b"data").unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(stored(&mock, "f").as_deref(), Some(BY_S3FS));
    assert_eq!(mock.count(Op::Copy), 0, "the upload carried them");

    let again = fs_on(&mock, other.path(), "");
    let ino = path_ino(&again, "f").await.unwrap();
    assert_eq!(again.getxattr(ino, "user.a").await.unwrap(), b"hi");
    assert_eq!(again.listxattr(ino).await.unwrap(), b"user.a\0");
    assert!(matches!(
        again.getxattr(ino, "user.b").await,
        Err(FsError::NoAttr)
    ));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_an_object_in_the_bucket_they_are_a_metadata_rewrite() {
    let (_dir, mock, fs) = mount("");
    mock.insert_with_metadata(
        "obj",
        vec![3u8; 5000],
        &[("xattr", BY_S3FS), ("other", "kept")],
    );
    let ino = path_ino(&fs, "obj").await.unwrap();
    assert_eq!(fs.getxattr(ino, "user.a").await.unwrap(), b"hi", "s3fs's");
    mock.reset_counts();
    set(&fs, ino, "user.b", b"\x00\xff").await.unwrap();
    fs.removexattr(ino, "user.a").await.unwrap();
    assert!(fs.flush_all().await.is_empty());
    let m = mock.metadata("obj").unwrap();
    assert_eq!(m.get("other").map(String::as_str), Some("kept"));
    let x = flowfs_client::xattr::decode(&m["xattr"]).unwrap();
    assert_eq!(x, [("user.b".to_string(), vec![0, 0xff])].into());
    assert_eq!(mock.object("obj").unwrap(), vec![3u8; 5000]);
    assert_eq!(
        mock.count(Op::Put) + mock.count(Op::UploadPart),
        0,
        "no data sent"
    );
    assert!(mock.count(Op::Copy) >= 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rename_keeps_them() {
    let (_dir, mock, fs) = mount("");
    mock.insert_with_metadata("a", vec![1u8; 10], &[("xattr", BY_S3FS)]);
    path_ino(&fs, "a").await.unwrap();
    fs.rename(ROOT, "a", ROOT, "b", false).await.unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(stored(&mock, "b").as_deref(), Some(BY_S3FS));
    let ino = path_ino(&fs, "b").await.unwrap();
    assert_eq!(fs.getxattr(ino, "user.a").await.unwrap(), b"hi");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn flags_namespaces_and_size_have_their_errnos() {
    let (_dir, mock, fs) = mount("");
    let (a, fh) = fs.create(ROOT, "f", 0o644, None).await.unwrap();
    let errno = |r: Result<(), FsError>| r.err().map(|e| e.errno());
    let create = fs.setxattr(a.ino, "user.a", b"1", XattrMode::Create);
    assert_eq!(errno(create.await), None);
    let again = fs.setxattr(a.ino, "user.a", b"2", XattrMode::Create);
    assert_eq!(errno(again.await), Some(libc::EEXIST));
    let replace = fs.setxattr(a.ino, "user.z", b"2", XattrMode::Replace);
    assert_eq!(errno(replace.await), Some(libc::ENODATA));
    assert_eq!(
        errno(set(&fs, a.ino, "trusted.a", b"1").await),
        Some(libc::ENOTSUP)
    );
    assert_eq!(
        errno(set(&fs, a.ino, "user.flowfs.crc64nvme", b"1").await),
        Some(libc::EPERM)
    );
    assert_eq!(
        errno(fs.removexattr(a.ino, "user.z").await),
        Some(libc::ENODATA)
    );
    let get = fs.getxattr(a.ino, "security.capability").await;
    assert_eq!(get.err().map(|e| e.errno()), Some(libc::ENODATA));
    // 1500 bytes are 2000 in base64: past what S3 keeps beside the mode and times.
    let big = set(&fs, a.ino, "user.big", &[7u8; 1500]).await;
    assert_eq!(errno(big), Some(libc::E2BIG));
    set(&fs, a.ino, "user.fits", &[7u8; 1000]).await.unwrap();
    assert_eq!(fs.listxattr(a.ino).await.unwrap(), b"user.a\0user.fits\0");
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    let m = mock.metadata("f").unwrap();
    let size = flowfs_client::xattr::metadata_size(&m);
    assert!(size <= flowfs_client::xattr::METADATA_LIMIT, "{size}");
    assert_eq!(fs.getxattr(a.ino, "user.a").await.unwrap(), b"1");
}
