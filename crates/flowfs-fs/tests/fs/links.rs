//! Hard links over the in-memory store (issue 47): one node under several names, each
//! name an object copied on the server, joined again by another mount.

use std::sync::Arc;

use flowfs_client::mock::{MockClient, Op};
use flowfs_client::ClientError;
use flowfs_fs::{Fs, FsError, OpenMode, ROOT};

use crate::common::*;

/// A file `name` in `parent` written with `data` and closed; its inode.
async fn file(fs: &Arc<Fs>, parent: u64, name: &str, data: &[u8]) -> u64 {
    let (a, fh) = fs.create(parent, name, 0o644, None).await.expect("create");
    fs.write(fh, 0, data).expect("write");
    fs.release(fh).expect("release");
    a.ino
}

fn link_id(mock: &flowfs_client::mock::MockClient, key: &str) -> Option<String> {
    mock.metadata(key)?.get("flowfs-link").cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_is_one_node_whose_names_are_server_side_copies() {
    let (_dir, mock, fs) = mount("");
    let a = file(&fs, ROOT, "a", b"first").await;
    let d = fs.mkdir(ROOT, "d", 0o755, None).await.unwrap().ino;
    // The file's own upload lands first: counted before it, the PUTs told whether it had
    // landed before the link (a race under load), not what the link sent.
    assert!(fs.flush_all().await.is_empty());
    let puts = mock.count(Op::Put);
    let b = fs.link(a, d, "b").await.unwrap();
    assert_eq!((b.ino, b.nlink), (a, 2));
    assert_eq!(
        mock.count(Op::Put),
        puts,
        "no PUT: the new name is a server-side copy"
    );
    assert_eq!(mock.object("d/b").unwrap(), b"first".to_vec());
    assert!(link_id(&mock, "a").is_some() && link_id(&mock, "a") == link_id(&mock, "d/b"));
    assert!(matches!(fs.link(a, d, "b").await, Err(FsError::Exists)));
    assert!(matches!(
        fs.link(d, ROOT, "d2").await,
        Err(FsError::NotPermitted(_))
    ));

    // A write through one name is the file's: every name's object gets it.
    let (fh, _) = fs.open(b.ino, OpenMode::Truncate).await.unwrap();
    fs.write(fh, 0, b"second").unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.object("a").unwrap(), b"second".to_vec());
    assert_eq!(mock.object("d/b").unwrap(), b"second".to_vec());

    // The first name goes: the file lives on under the other, uploads go there.
    fs.unlink(ROOT, "a").await.unwrap();
    assert_eq!(fs.getattr(a).await.unwrap().nlink, 1);
    assert!(matches!(fs.lookup(ROOT, "a").await, Err(FsError::NotFound)));
    let (fh, _) = fs.open(a, OpenMode::Truncate).await.unwrap();
    fs.write(fh, 0, b"third").unwrap();
    fs.release(fh).unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.keys(), vec!["d/", "d/b"]);
    assert_eq!(mock.object("d/b").unwrap(), b"third".to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_mount_joins_names_while_their_etags_match() {
    let (_dir, mock, fs) = mount("");
    // Made by mkdir: its listing reads the metadata of each object (`--meta-heads marked`).
    let x = fs.mkdir(ROOT, "x", 0o755, None).await.unwrap().ino;
    for name in ["p", "q"] {
        let a = file(&fs, x, name, name.as_bytes()).await;
        fs.link(a, x, &format!("{name}2")).await.unwrap();
    }
    assert!(fs.flush_all().await.is_empty());
    // Another client's copy of other bytes keeps the metadata (S3's CopyObject does).
    let meta = mock.metadata("x/q2").unwrap();
    let pairs: Vec<(&str, &str)> = meta.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    mock.insert_with_metadata("x/q2", b"changed".to_vec(), &pairs);

    let other = tempfile::tempdir().unwrap();
    let fs2 = fs_on(&mock, other.path(), "");
    let x = path_ino(&fs2, "x").await.unwrap();
    let p = fs2.lookup(x, "p").await.unwrap();
    let p2 = fs2.lookup(x, "p2").await.unwrap();
    assert_eq!(
        (p2.ino, p2.nlink),
        (p.ino, 2),
        "same link id and ETag: one file"
    );
    let q = fs2.lookup(x, "q").await.unwrap();
    let q2 = fs2.lookup(x, "q2").await.unwrap();
    assert_ne!(q.ino, q2.ino, "another client changed q2: two files");
    assert_eq!(q2.nlink, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn renames_move_one_name_and_keep_the_others() {
    let (_dir, mock, fs) = mount("");
    let a = file(&fs, ROOT, "a", b"a").await;
    fs.link(a, ROOT, "b").await.unwrap();
    fs.rename(ROOT, "b", ROOT, "c", false).await.unwrap();
    let o = file(&fs, ROOT, "o", b"o").await;
    // Over a name of a linked file: that name goes, the file keeps its others.
    fs.rename(ROOT, "o", ROOT, "a", false).await.unwrap();
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(fs.lookup(ROOT, "a").await.unwrap().ino, o);
    let c = fs.lookup(ROOT, "c").await.unwrap();
    assert_eq!((c.ino, c.nlink), (a, 1));
    assert_eq!(mock.keys(), vec!["a", "c"]);
    assert_eq!(mock.object("a").unwrap(), b"o".to_vec());
    assert_eq!(mock.object("c").unwrap(), b"a".to_vec());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crashed_mounts_linked_file_is_recovered_under_every_name_it_had() {
    let dir = tempfile::tempdir().unwrap();
    let mock = Arc::new(MockClient::new());
    {
        let fs = fs_on(&mock, dir.path(), "");
        let a = file(&fs, ROOT, "a", b"one").await;
        fs.link(a, ROOT, "b").await.unwrap();
        fs.link(a, ROOT, "c").await.unwrap();
        fs.unlink(ROOT, "c").await.unwrap();
        mock.fail(Op::Put, 0, ClientError::Transient("down".into()), 1000);
        let (fh, _) = fs.open(a, OpenMode::Truncate).await.unwrap();
        fs.write(fh, 0, b"two").unwrap();
        fs.release(fh).unwrap();
        assert_eq!(fs.flush_all().await.len(), 1);
        crash(fs).await;
    }
    mock.clear_faults();
    let fs = fs_on(&mock, dir.path(), "");
    let (ok, failed) = fs.recover().await;
    assert_eq!((ok, failed), (vec!["a".to_string()], Vec::<String>::new()));
    assert_eq!(mock.keys(), vec!["a", "b"], "a removed name stays removed");
    assert_eq!(mock.object("a").unwrap(), b"two".to_vec());
    assert_eq!(mock.object("b").unwrap(), b"two".to_vec());
}
