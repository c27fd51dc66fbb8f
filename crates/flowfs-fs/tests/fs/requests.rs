//! Requests a pipeline's work directory does not need (issue 17, B7): a file read by the
//! next task right after its upload, and the re-check of directories on each path walk.

use std::sync::Arc;
use std::time::Duration;

use flowfs_client::mock::{MockClient, Op};
use flowfs_fs::{Fs, FsConfig, Kind, ROOT};

use crate::common::{data, read_all};

fn fs_ttl(mock: &Arc<MockClient>, cache: &std::path::Path, ttl: Duration) -> Arc<Fs> {
    let mut cfg = FsConfig::new("b", "", cache.to_path_buf());
    cfg.metadata_ttl = ttl;
    Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
}

/// `samtools sort -o x.bam; samtools index x.bam`: the index reads the file while its
/// upload runs, so the upload ends with a reader open. At that reader's close the staged
/// copy, the very version uploaded, goes to the cache: the next task reads it with no GET.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_uploaded_while_a_reader_had_it_open_is_read_from_the_cache_after() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    let fs = fs_ttl(&mock, dir.path(), Duration::from_secs(60));
    let body = data(300 << 10, 7);
    let (a, w) = fs.create(ROOT, "x.bam", 0o644).await.expect("create");
    fs.write(w, 0, &body).expect("write");
    let (r, _) = fs
        .open(a.ino, false, false)
        .await
        .expect("open for reading");
    fs.release(w).expect("release the writer");
    assert!(fs.flush_all().await.is_empty(), "uploaded");
    assert_eq!(fs.read(r, 0, 4096).await.expect("read"), body[..4096]);
    fs.release(r).expect("release the reader");
    mock.reset_counts();
    assert_eq!(read_all(&fs, a.ino).await, body);
    assert_eq!(mock.count(Op::Get), 0, "read from the cache");
}

/// A directory looked up again after the TTL is re-checked with its LIST alone; the
/// HEAD goes out only once nothing is below it, and then tells what the name is now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_known_directory_is_re_checked_without_a_head() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mock = Arc::new(MockClient::new());
    mock.insert("work/a/.exitcode", b"0".to_vec());
    let fs = fs_ttl(&mock, dir.path(), Duration::ZERO);
    let w = fs.lookup(ROOT, "work").await.expect("lookup");
    assert_eq!(w.kind, Kind::Dir);
    mock.reset_counts();
    assert_eq!(fs.lookup(ROOT, "work").await.expect("again").ino, w.ino);
    assert_eq!((mock.count(Op::List), mock.count(Op::Head)), (1, 0));
    // Another client replaces the directory with a file of its name.
    mock.remove("work/a/.exitcode");
    mock.insert("work", b"now a file".to_vec());
    mock.reset_counts();
    let f = fs.lookup(ROOT, "work").await.expect("a file now");
    assert_eq!(f.kind, Kind::File);
    assert_ne!(f.ino, w.ino);
    assert_eq!((mock.count(Op::List), mock.count(Op::Head)), (1, 1));
}
