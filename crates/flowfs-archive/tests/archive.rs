//! The archive client over the in-memory store: members listed, stated and read as they
//! were put into the archive, for a tar and the same tar gzipped (restart points), with
//! the bytes each read costs counted.

// The fixtures are built in memory: a failure there is the test's own bug.
#![allow(clippy::unwrap_used)]

use std::io::Write;
use std::sync::Arc;

use bytes::Bytes;
use flowfs_archive::{sniff, ArchiveClient, Format, IndexFiles, SPAN};
use flowfs_client::mock::{MockClient, Op};
use flowfs_client::{ClientError, List, ObjectClient, Version};

/// Bytes that compress about 3:1, different for every `seed`.
fn text(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    (0..len)
        .map(|_| {
            x = x.wrapping_mul(6364136223846793005).wrapping_add(1);
            b"ACGT\n"[((x >> 33) % 5) as usize]
        })
        .collect()
}

struct Fixture {
    files: Vec<(String, Vec<u8>)>,
    tar: Vec<u8>,
}

/// A tar with a directory, nested files (one bigger than two restart spans), an empty
/// file, a symlink, a hard link and a long name (GNU long-name header).
fn fixture() -> Fixture {
    let long = format!("deep/{}/leaf.txt", "x".repeat(150));
    let files = vec![
        ("a.txt".to_string(), text(1, 1000)),
        ("dir/b.fa".to_string(), text(2, (2 * SPAN + 12345) as usize)),
        ("dir/empty".to_string(), Vec::new()),
        ("dir/sub/c.txt".to_string(), text(3, 70_000)),
        (long, text(4, 512)),
    ];
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Directory);
    h.set_mode(0o750);
    h.set_mtime(1_600_000_000);
    h.set_size(0);
    b.append_data(&mut h, "dir/", std::io::empty()).unwrap();
    for (name, data) in &files {
        let mut h = tar::Header::new_gnu();
        h.set_mode(0o640);
        h.set_uid(1234);
        h.set_mtime(1_700_000_000);
        h.set_size(data.len() as u64);
        b.append_data(&mut h, name, &data[..]).unwrap();
    }
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Symlink);
    h.set_size(0);
    b.append_link(&mut h, "dir/link", "../a.txt").unwrap();
    let mut h = tar::Header::new_gnu();
    h.set_entry_type(tar::EntryType::Link);
    h.set_size(0);
    b.append_link(&mut h, "hard", "dir/sub/c.txt").unwrap();
    Fixture {
        files,
        tar: b.into_inner().unwrap(),
    }
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    e.write_all(data).unwrap();
    e.finish().unwrap()
}

async fn open(mock: &Arc<MockClient>, key: &str, cache: &std::path::Path) -> ArchiveClient {
    ArchiveClient::open(mock.clone(), key, &format!("b/{key}"), cache)
        .await
        .unwrap()
}

async fn read(c: &ArchiveClient, key: &str) -> Vec<u8> {
    let size = c.head(key).await.unwrap().info.size;
    c.get_range(Version::any(key).range(0, size))
        .await
        .unwrap()
        .to_vec()
}

async fn members_read_back(
    key: &str,
    body: Vec<u8>,
    f: &Fixture,
) -> (Arc<MockClient>, ArchiveClient) {
    let mock = Arc::new(MockClient::new());
    mock.insert(key, body);
    let dir = tempfile::tempdir().unwrap();
    let c = open(&mock, key, dir.path()).await;
    for (name, data) in &f.files {
        assert_eq!(&read(&c, name).await, data, "{name}");
    }
    assert_eq!(read(&c, "hard").await, f.files[3].1);
    let link = c.head("dir/link").await.unwrap();
    assert_eq!(link.metadata["flowfs-symlink"], "../a.txt");
    assert_eq!(read(&c, "dir/link").await, b"../a.txt");
    let d = c.head("dir/").await.unwrap();
    assert_eq!(d.metadata["mode"], (libc::S_IFDIR | 0o750).to_string());
    let a = c.head("a.txt").await.unwrap();
    assert_eq!(a.metadata["mode"], (libc::S_IFREG | 0o640).to_string());
    assert_eq!(a.metadata["uid"], "1234");
    assert_eq!(a.metadata["mtime"], "1700000000");
    (mock, c)
}

#[tokio::test]
async fn a_tar_is_listed_and_read_member_by_member() {
    let f = fixture();
    assert_eq!(sniff(&f.tar), Some(Format::Tar));
    let (mock, c) = members_read_back("refs.tar", f.tar.clone(), &f).await;
    let root = c.list_page(List::dir("")).await.unwrap();
    let keys: Vec<_> = root.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["a.txt", "hard"]);
    assert_eq!(root.prefixes, ["deep/", "dir/"]);
    let dir = c.list_page(List::dir("dir/")).await.unwrap();
    let keys: Vec<_> = dir.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["dir/", "dir/b.fa", "dir/empty", "dir/link"]);
    assert_eq!(dir.prefixes, ["dir/sub/"]);
    // A member's read is a GET of its own bytes (a client opened again: the members
    // above, read in archive order, came from chunks fetched ahead).
    let dir = tempfile::tempdir().unwrap();
    let c = open(&mock, "refs.tar", dir.path()).await;
    mock.reset_counts();
    c.get_range(Version::any("dir/sub/c.txt").range(100, 200))
        .await
        .unwrap();
    assert_eq!((mock.count(Op::Get), mock.get_bytes()), (1, 100));
}

#[tokio::test]
async fn a_gzipped_tar_is_read_from_the_restart_point_before_each_range() {
    let f = fixture();
    let gz = gzip(&f.tar);
    assert_eq!(sniff(&gz), Some(Format::TarGz));
    let (mock, c) = members_read_back("refs.tar.gz", gz.clone(), &f).await;
    assert!(
        c.index().points.len() >= 3,
        "{} points",
        c.index().points.len()
    );
    // The end of the big member: one GET of about one span's compressed bytes (a client
    // opened again: nothing inflated yet).
    let dir = tempfile::tempdir().unwrap();
    let c = open(&mock, "refs.tar.gz", dir.path()).await;
    mock.reset_counts();
    let big = &f.files[1].1;
    let n = big.len() as u64;
    let range = Version::any("dir/b.fa").range(n - 5000, n);
    let got = c.get_range(range).await.unwrap();
    assert_eq!(&got[..], &big[big.len() - 5000..]);
    assert_eq!(mock.count(Op::Get), 1);
    assert!(
        mock.get_bytes() < gz.len() as u64 / 2,
        "{} of {}",
        mock.get_bytes(),
        gz.len()
    );
    // The span is kept: another read in it costs no request.
    let range = Version::any("dir/b.fa").range(n - 9000, n - 8000);
    let got = c.get_range(range).await.unwrap();
    assert_eq!(&got[..], &big[big.len() - 9000..big.len() - 8000]);
    assert_eq!(mock.count(Op::Get), 1);
}

#[tokio::test]
async fn pages_of_a_big_directory_follow_each_other() {
    let mut b = tar::Builder::new(Vec::new());
    for i in 0..2500 {
        let mut h = tar::Header::new_gnu();
        h.set_size(1);
        h.set_mode(0o644);
        b.append_data(&mut h, format!("d/f{i:05}"), &b"x"[..])
            .unwrap();
    }
    let mock = Arc::new(MockClient::new());
    mock.insert("many.tar", b.into_inner().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let c = open(&mock, "many.tar", dir.path()).await;
    let (mut seen, mut token) = (Vec::new(), None);
    loop {
        let p = c.list_page(List::dir("d/").token(token)).await.unwrap();
        seen.extend(p.objects.into_iter().map(|o| o.key));
        token = p.next_token;
        if token.is_none() {
            break;
        }
    }
    let want: Vec<_> = (0..2500).map(|i| format!("d/f{i:05}")).collect();
    assert_eq!(seen, want);
}

#[tokio::test]
async fn the_index_is_built_once_per_archive_version() {
    let f = fixture();
    let mock = Arc::new(MockClient::new());
    mock.insert("r.tar", f.tar.clone());
    let dir = tempfile::tempdir().unwrap();
    open(&mock, "r.tar", dir.path()).await;
    mock.reset_counts();
    let again = open(&mock, "r.tar", dir.path()).await;
    assert_eq!(
        mock.count(Op::Get),
        0,
        "the second open reads the kept index"
    );
    assert_eq!(read(&again, "a.txt").await, f.files[0].1);
    // A changed archive: a new index, and the old one's members are gone.
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_size(3);
    b.append_data(&mut h, "new.txt", &b"new"[..]).unwrap();
    mock.insert("r.tar", b.into_inner().unwrap());
    let changed = open(&mock, "r.tar", dir.path()).await;
    assert_eq!(read(&changed, "new.txt").await, b"new");
    assert!(matches!(
        changed.head("a.txt").await,
        Err(ClientError::NotFound(_))
    ));
    // The first client's reads now fail rather than return the new version's bytes.
    let range = Version::any("a.txt").range(0, 10);
    let e = again.get_range(range).await.unwrap_err();
    assert!(matches!(e, ClientError::Precondition(_)), "{e:?}");
    let meta = mock.head("r.tar").await.unwrap();
    let files = IndexFiles::new(dir.path(), "b/r.tar", &meta.info.etag, meta.info.size);
    let json = std::fs::metadata(files.json()).unwrap().len();
    assert!(json < 200, "index of one member: {json} bytes");
    // The old version's index is dropped from the cache when the new one is kept: a
    // reference archive replaced every release would otherwise leave its indexes (a
    // 20 GB .tar.gz's restart points are ~160 MiB) on every node for good.
    let mut kept: Vec<String> = std::fs::read_dir(dir.path().join("archives"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| !n.ends_with(".lock"))
        .collect();
    kept.sort();
    let name = files.json().file_name().unwrap().to_string_lossy();
    assert_eq!(kept, vec![name.into_owned()]);
}

#[tokio::test]
async fn damaged_archives_are_errors_not_bytes() {
    let f = fixture();
    let mock = Arc::new(MockClient::new());
    let dir = tempfile::tempdir().unwrap();
    mock.insert(
        "not.tar",
        Bytes::from_static(b"hello, not an archive at all"),
    );
    let e = ArchiveClient::open(mock.clone(), "not.tar", "b/not.tar", dir.path()).await;
    assert!(e.is_err_and(|e| e.to_string().contains("not a tar")));
    // A gzip cut in the middle: the index build names it.
    let gz = gzip(&f.tar);
    mock.insert("cut.tar.gz", gz[..gz.len() / 2].to_vec());
    let e = ArchiveClient::open(mock.clone(), "cut.tar.gz", "b/cut", dir.path()).await;
    assert!(e.is_err_and(|e| e.to_string().contains("truncated")));
    // Damage after indexing: a member read fails (EIO), it never returns other bytes.
    mock.insert("bad.tar.gz", gz.clone());
    let c = open(&mock, "bad.tar.gz", dir.path()).await;
    let mut bad = gz.clone();
    let mid = bad.len() / 2;
    for b in &mut bad[mid..mid + 4096] {
        *b ^= 0x5a;
    }
    // Same ETag rules as S3 (the mock's ETag is of the content): the damaged version is
    // another object, so replace it under the index's ETag by hand.
    mock.insert("bad.tar.gz", bad);
    let range = Version::any("dir/b.fa").range(0, SPAN * 2);
    let e = c.get_range(range).await.unwrap_err();
    assert!(
        matches!(e, ClientError::Precondition(_) | ClientError::Other(_)),
        "{e:?}"
    );
}

#[tokio::test]
async fn a_store_failure_while_indexing_is_the_stores_error_not_damage() {
    let f = fixture();
    for (key, body) in [("s.tar", f.tar.clone()), ("s.tar.gz", gzip(&f.tar))] {
        let mock = Arc::new(MockClient::new());
        mock.insert(key, body);
        let dir = tempfile::tempdir().unwrap();
        // The first GET (the sniff of the first bytes) passes, the index pass's fail.
        let denied = ClientError::AccessDenied("test".into());
        mock.fail(Op::Get, 1, denied.clone(), u64::MAX);
        let e = ArchiveClient::open(mock.clone(), key, "b/s", dir.path())
            .await
            .err()
            .expect("the index pass fails");
        assert!(
            matches!(&e, flowfs_archive::ArchiveError::Store(c) if *c == denied),
            "{key}: {e:?}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_opens_on_one_cache_dir_build_the_index_once() {
    let f = fixture();
    let mock = Arc::new(MockClient::new());
    mock.insert("refs.tar", f.tar.clone());
    let dir = tempfile::tempdir().unwrap();
    let (a, b) = tokio::join!(
        open(&mock, "refs.tar", dir.path()),
        open(&mock, "refs.tar", dir.path())
    );
    assert_eq!(a.index().members, b.index().members);
    // One pass over the archive (and one sniff of its first 512 bytes), not two.
    assert!(
        mock.get_bytes() <= f.tar.len() as u64 + 512,
        "{} bytes read for a {}-byte archive",
        mock.get_bytes(),
        f.tar.len()
    );
}
