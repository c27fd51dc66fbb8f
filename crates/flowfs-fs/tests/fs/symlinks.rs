//! How a symlink goes up and how listings tell it: one PUT in a directory with a marker
//! (a listing there reads every object's metadata), a single-part multipart upload with
//! a `-1` ETag elsewhere (a listing of plain objects HEADs only those).

use std::sync::Arc;
use std::time::Duration;

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::{Fs, FsConfig, Kind, MetaHeads, ROOT};

use crate::common::path_ino;

fn fs_with(mock: &Arc<MockClient>, cache: &std::path::Path, heads: MetaHeads) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", "", cache.to_path_buf());
    cfg.metadata_ttl = Duration::ZERO;
    cfg.meta_heads = heads;
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

/// (name, kind) of every entry, from readdirplus.
async fn kinds(fs: &Arc<Fs>, ino: u64) -> Vec<(String, Kind)> {
    let items = crate::common::entries(fs, ino, true).await;
    items.into_iter().map(|i| (i.name, i.kind)).collect()
}

/// A symlink in a directory made by mkdir is one PUT; another mount's listing of that
/// directory tells it from the small files beside it with every `--meta-heads` setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_in_a_marked_directory_is_one_put_and_listings_still_tell_it() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    let fs = fs_with(&mock, &dir.path().join("w"), MetaHeads::Marked);
    let task = fs
        .mkdir(ROOT, "task", 0o755, None)
        .await
        .expect("mkdir")
        .ino;
    mock.reset_counts();
    fs.symlink(task, "in.bam", "/data/in.bam", None)
        .await
        .expect("symlink");
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put), 1);
    let multipart = mock.count(Op::CreateMultipart) + mock.count(Op::UploadPart);
    assert_eq!(multipart + mock.count(Op::CompleteMultipart), 0);
    // An exit code a tool wrote: small, like a symlink, but plain.
    mock.insert("task/.exitcode", b"0".to_vec());
    for heads in [MetaHeads::Marked, MetaHeads::Always, MetaHeads::Never] {
        let other = dir.path().join(format!("{heads:?}"));
        let fs2 = fs_with(&mock, &other, heads);
        let d = path_ino(&fs2, "task").await.expect("lookup");
        mock.reset_counts();
        let want = vec![
            (".exitcode".to_string(), Kind::File),
            ("in.bam".to_string(), Kind::Symlink),
        ];
        assert_eq!(kinds(&fs2, d).await, want, "{heads:?}");
        assert_eq!(mock.count(Op::Head), 2, "{heads:?}: each object once");
    }
}

/// Outside a marked directory a symlink keeps its `-1` ETag (three requests), so that an
/// `ls -l` of plain objects there HEADs the symlink alone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_symlink_in_an_unmarked_directory_keeps_its_single_part_upload() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    for i in 0..20 {
        mock.insert(&format!("d/f{i:02}"), vec![b'x'; 10]);
    }
    let fs = fs_with(&mock, &dir.path().join("w"), MetaHeads::Marked);
    let d = path_ino(&fs, "d").await.expect("lookup");
    kinds(&fs, d).await;
    mock.reset_counts();
    fs.symlink(d, "link", "f00", None).await.expect("symlink");
    assert!(fs.flush_all().await.is_empty());
    assert_eq!(mock.count(Op::Put), 0);
    assert_eq!(mock.count(Op::CreateMultipart), 1);
    assert_eq!(mock.count(Op::UploadPart), 1);
    assert_eq!(mock.count(Op::CompleteMultipart), 1);
    let fs2 = fs_with(&mock, &dir.path().join("second"), MetaHeads::Marked);
    let d2 = path_ino(&fs2, "d").await.expect("lookup");
    mock.reset_counts();
    let listed = kinds(&fs2, d2).await;
    assert_eq!(listed.len(), 21);
    assert!(listed.contains(&("link".to_string(), Kind::Symlink)));
    assert_eq!(mock.count(Op::Head), 1, "the symlink alone");
}
