//! Test bodies over any `ObjectClient`, in mountpoint-s3's x_mock / x_s3 shape: each runs
//! here over the in-memory mock and in tests/fs_on_seaweedfs over the S3 backend and a
//! real SeaweedFS, so that what the core is trusted to do over the mock is checked
//! against the server it will meet (S3's 5 MiB least part, real LIST pages, real copies).

use std::collections::BTreeMap;
use std::sync::Arc;

use bytes::Bytes;
use flowfs_client::ObjectClient;
use flowfs_fs::OpenMode;
use flowfs_fs::{Fs, FsConfig, Kind, ROOT};

/// A core over `client` below `prefix`, with parts of 5 MiB (the least S3 accepts) so
/// that a file of a few parts goes multipart.
pub fn fs_over(client: Arc<dyn ObjectClient>, cache: &std::path::Path, prefix: &str) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", prefix, cache.to_path_buf());
    cfg.part_size = 5 << 20;
    Arc::new(Fs::new(cfg, client).expect("fs"))
}

fn data(n: usize, seed: u8) -> Vec<u8> {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 13) as u8)
        .collect()
}

async fn write_file(fs: &Arc<Fs>, parent: u64, name: &str, body: &[u8]) -> u64 {
    let (attr, fh) = fs.create(parent, name, 0o644, None).await.expect("create");
    for (i, c) in body.chunks(1 << 20).enumerate() {
        fs.write(fh, (i << 20) as u64, c).expect("write");
    }
    fs.release(fh).expect("release");
    attr.ino
}

async fn read_whole(fs: &Arc<Fs>, ino: u64) -> Vec<u8> {
    let (fh, _) = fs.open(ino, OpenMode::Read).await.expect("open");
    let mut out = Vec::new();
    loop {
        let chunk = fs.read(fh, out.len() as u64, 1 << 20).await.expect("read");
        if chunk.is_empty() {
            break;
        }
        out.extend_from_slice(&chunk);
    }
    fs.release(fh).expect("release");
    out
}

/// Every file below `ino`, by path, with its bytes, as a fresh core reads them.
async fn tree(fs: &Arc<Fs>, ino: u64, path: &str, out: &mut BTreeMap<String, Vec<u8>>) {
    let fh = fs.opendir(ino).expect("opendir");
    let items = fs.readdir(ino, fh, 0, false).await.expect("readdir");
    fs.releasedir(fh);
    for it in items
        .into_iter()
        .filter(|i| i.name != "." && i.name != "..")
    {
        let attr = fs.lookup(ino, &it.name).await.expect("lookup");
        let p = format!("{path}{}", it.name);
        match attr.kind {
            Kind::Dir => Box::pin(tree(fs, attr.ino, &format!("{p}/"), out)).await,
            _ => {
                out.insert(p, read_whole(fs, attr.ino).await);
            }
        }
    }
}

/// Files written (empty, small, multipart), a file and a directory renamed, one file
/// removed, the mount ended: a second mount on a fresh cache finds exactly those files
/// with exactly those bytes, and the bucket exactly those keys.
pub async fn written_renamed_and_read_back(client: Arc<dyn ObjectClient>, prefix: &str) {
    let (c1, c2) = (
        tempfile::tempdir().expect("tmp"),
        tempfile::tempdir().expect("tmp"),
    );
    let fs = fs_over(client.clone(), c1.path(), prefix);
    let big = data((12 << 20) + 5, 7);
    let dir = fs.mkdir(ROOT, "out", 0o755, None).await.expect("mkdir").ino;
    write_file(&fs, dir, "empty", b"").await;
    write_file(&fs, dir, "small.txt", b"one line\n").await;
    write_file(&fs, dir, "big.bin", &big).await;
    write_file(&fs, ROOT, "gone.tmp", b"temporary").await;
    fs.rename(dir, "small.txt", dir, "renamed.txt", false)
        .await
        .expect("rename file");
    fs.rename(ROOT, "out", ROOT, "results", false)
        .await
        .expect("rename dir");
    fs.unlink(ROOT, "gone.tmp").await.expect("unlink");
    assert!(fs.flush_all().await.is_empty(), "every file is durable");
    fs.shutdown();

    let again = fs_over(client.clone(), c2.path(), prefix);
    let mut got = BTreeMap::new();
    tree(&again, ROOT, "", &mut got).await;
    let want: BTreeMap<String, Vec<u8>> = [
        ("results/big.bin", big),
        ("results/empty", Vec::new()),
        ("results/renamed.txt", b"one line\n".to_vec()),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v))
    .collect();
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        want.keys().collect::<Vec<_>>()
    );
    for (k, v) in &want {
        assert!(
            got[k] == *v,
            "{k}: {} bytes read, {} written",
            got[k].len(),
            v.len()
        );
    }
    let page = (client.list_page(flowfs_client::List::flat(prefix)).await).expect("list");
    let mut keys: Vec<String> = page.objects.into_iter().map(|o| o.key).collect();
    keys.sort();
    let expected: Vec<String> = want.keys().map(|k| format!("{prefix}/{k}")).collect();
    // A directory this mount made may leave its marker (`results/`): nothing else.
    keys.retain(|k| !k.ends_with('/'));
    assert_eq!(keys, expected, "the bucket holds exactly the files");
}

/// A directory of 2,500 objects (three LIST pages) and a subdirectory, put straight into
/// the bucket: a listing gives each name once, in order, with its size.
pub async fn a_listing_spans_pages(client: Arc<dyn ObjectClient>, prefix: &str) {
    let none = std::collections::HashMap::new();
    for i in 0..2500usize {
        let body = Bytes::from(vec![b'x'; i % 7]);
        let key = format!("{prefix}/wide/f{i:05}");
        client.put(&key, body.into(), &none).await.expect("put");
    }
    let sub = format!("{prefix}/wide/sub/inner");
    client
        .put(&sub, Bytes::from_static(b"in").into(), &none)
        .await
        .expect("put");
    let cache = tempfile::tempdir().expect("tmp");
    let fs = fs_over(client, cache.path(), prefix);
    let wide = fs.lookup(ROOT, "wide").await.expect("lookup").ino;
    let fh = fs.opendir(wide).expect("opendir");
    let items = fs.readdir(wide, fh, 0, true).await.expect("readdir");
    fs.releasedir(fh);
    let names: Vec<(String, u64)> = items
        .iter()
        .filter(|i| i.name != "." && i.name != "..")
        .map(|i| (i.name.clone(), i.attr.as_ref().map_or(u64::MAX, |a| a.size)))
        .collect();
    let mut want: Vec<(String, u64)> = (0..2500)
        .map(|i| (format!("f{i:05}"), (i % 7) as u64))
        .collect();
    want.push(("sub".to_string(), 0));
    assert_eq!(names.len(), want.len(), "each name once");
    assert_eq!(names, want, "in order, with sizes");
}

/// A directory of 2,100 subdirectories listed again (metadata TTL 0: every readdir lists)
/// is split into ranges at the entries where its last listing's pages began; each split
/// falls on a subdirectory here, and each must be in the new listing (one at every split
/// was missing: stress-ng's chdir stressor found 8 of 8,192 new directories ENOENT).
pub async fn a_listing_taken_again_keeps_the_directories_it_is_split_at(
    client: Arc<dyn ObjectClient>,
    prefix: &str,
) {
    let none = std::collections::HashMap::new();
    let want: Vec<String> = (0..2100usize).map(|i| format!("d{i:05}")).collect();
    for d in &want {
        let key = format!("{prefix}/deep/{d}/x");
        client
            .put(&key, Bytes::new().into(), &none)
            .await
            .expect("put");
    }
    let cache = tempfile::tempdir().expect("tmp");
    let mut cfg = FsConfig::new("b", prefix, cache.path().to_path_buf());
    cfg.metadata_ttl = std::time::Duration::ZERO;
    let fs = Arc::new(Fs::new(cfg, client).expect("fs"));
    let deep = fs.lookup(ROOT, "deep").await.expect("lookup").ino;
    for round in 0..2 {
        let fh = fs.opendir(deep).expect("opendir");
        let items = fs.readdir(deep, fh, 0, false).await.expect("readdir");
        fs.releasedir(fh);
        let names: Vec<String> = (items.into_iter())
            .map(|i| i.name)
            .filter(|n| n != "." && n != "..")
            .collect();
        let missing: Vec<&String> = want.iter().filter(|w| !names.contains(w)).collect();
        assert!(missing.is_empty(), "listing {round}: missing {missing:?}");
        assert!(
            names == want,
            "listing {round}: each subdirectory once, in order"
        );
    }
    for d in ["d00999", "d01999"] {
        fs.lookup(deep, d)
            .await
            .expect("a directory at a split is found");
    }
}

/// A name whose key the store would change or refuse (SeaweedFS takes `\` for `/`: the
/// file vanished after its upload, issue 47) is refused at create and rename with EINVAL
/// and is absent at lookup; where the store keeps it (S3, the mock), it is a file whose
/// object has exactly that key. Either way the bucket holds only keys flowfs meant.
pub async fn names_the_store_would_change_are_refused_or_kept_exactly(
    client: Arc<dyn ObjectClient>,
    prefix: &str,
) {
    client.check_bucket(prefix).await.expect("bucket"); // S3: the server names itself
    let cache = tempfile::tempdir().expect("tmp");
    let fs = fs_over(client.clone(), cache.path(), prefix);
    let odd = "x\\y";
    let refused = client
        .key_rules()
        .check(&format!("{prefix}/{odd}"))
        .is_err();
    let mut want = vec![format!("{prefix}/plain")];
    write_file(&fs, ROOT, "plain", b"plain").await;
    match fs.create(ROOT, odd, 0o644, None).await {
        Err(e) if refused => assert_eq!(e.errno(), libc::EINVAL, "{e}"),
        Err(e) => panic!("create of {odd:?} on a store that keeps it: {e}"),
        Ok((_, fh)) if !refused => {
            fs.write(fh, 0, b"odd").expect("write");
            fs.release(fh).expect("release");
            want.push(format!("{prefix}/{odd}"));
        }
        Ok(_) => panic!("{odd:?} was created on a store that changes it"),
    }
    if refused {
        let e = fs.lookup(ROOT, odd).await.expect_err("absent");
        assert_eq!(e.errno(), libc::ENOENT, "{e}");
        let e = fs.rename(ROOT, "plain", ROOT, "a\\b", false).await;
        assert_eq!(e.expect_err("rename refused").errno(), libc::EINVAL);
        let e = fs
            .mkdir(ROOT, "d\\e", 0o755, None)
            .await
            .expect_err("mkdir refused");
        assert_eq!(e.errno(), libc::EINVAL);
    }
    assert!(fs.flush_all().await.is_empty(), "everything uploads");
    let page = client
        .list_page(flowfs_client::List::flat(&format!("{prefix}/")))
        .await
        .expect("list");
    let mut keys: Vec<String> = page.objects.into_iter().map(|o| o.key).collect();
    keys.sort();
    want.sort();
    assert_eq!(keys, want, "the bucket holds exactly the keys flowfs meant");
}
