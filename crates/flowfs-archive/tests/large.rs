//! A member of more than 8 GiB (the limit of the tar header's octal size field: GNU tar
//! writes its size in base-256) indexed and read at its far end, from a store that makes
//! the archive's bytes up as they are asked for: 8 GiB of zeros need no memory or disk.

#![allow(clippy::unwrap_used)]

use flowfs_client::{ByteRange, Completion, List, ListAfter, Metadata, Part, Payload, Pieces};
use flowfs_client::{Rewrite, Sink, Upload, Version};
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::SystemTime;

use async_trait::async_trait;
use bytes::Bytes;
use flowfs_archive::{ArchiveClient, MemberKind};
use flowfs_client::{
    ClientError, ListPage, ObjectClient, ObjectInfo, ObjectMeta, PutResult, Result, UploadInfo,
};

/// Bytes of the big member: past 8 GiB - 1, what an octal size field holds.
const BIG: u64 = (8 << 30) + 4096 + 17;
const TAIL: &[u8] = b"the member after the big one\n";

/// A GNU header for `name` of `size` bytes, the size in base-256 when it needs it.
fn header(name: &str, size: u64) -> [u8; 512] {
    let mut h = tar::Header::new_gnu();
    h.set_path(name).unwrap();
    h.set_mode(0o644);
    h.set_mtime(1_700_000_000);
    h.set_size(size);
    h.set_cksum();
    *h.as_bytes()
}

/// The archive: big.bin (zeros but for its last 8 bytes, its length), after.txt, end.
struct Synthetic {
    parts: Vec<(u64, Vec<u8>)>,
    size: u64,
    read: AtomicU64,
}

impl Synthetic {
    fn new() -> Synthetic {
        let pad = |n: u64| n.div_ceil(512) * 512;
        let after = 512 + pad(BIG);
        let parts = vec![
            (0, header("big.bin", BIG).to_vec()),
            (512 + BIG - 8, BIG.to_le_bytes().to_vec()),
            (after, header("after.txt", TAIL.len() as u64).to_vec()),
            (after + 512, TAIL.to_vec()),
        ];
        let size = after + 512 + pad(TAIL.len() as u64) + 1024;
        Synthetic {
            parts,
            size,
            read: AtomicU64::new(0),
        }
    }

    fn bytes(&self, start: u64, end: u64) -> Vec<u8> {
        let mut out = vec![0u8; (end - start) as usize];
        for (at, data) in &self.parts {
            let (lo, hi) = ((*at).max(start), (at + data.len() as u64).min(end));
            if lo < hi {
                out[(lo - start) as usize..(hi - start) as usize]
                    .copy_from_slice(&data[(lo - at) as usize..(hi - at) as usize]);
            }
        }
        out
    }
}

fn refused() -> ClientError {
    ClientError::Refused("a read-only test store".into())
}

#[async_trait]
impl ObjectClient for Synthetic {
    fn key_rules(&self) -> flowfs_client::KeyRules {
        flowfs_client::KeyRules::S3
    }
    async fn check_bucket(&self, _: &str) -> Result<()> {
        Ok(())
    }
    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        Ok(ObjectMeta {
            info: ObjectInfo {
                key: key.into(),
                size: self.size,
                etag: "\"big\"".into(),
                last_modified: SystemTime::UNIX_EPOCH,
            },
            metadata: HashMap::new(),
            checksum: None,
        })
    }
    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let mut from = get.start;
        for (i, &c) in get.cuts.iter().enumerate() {
            self.read.fetch_add(c - from, Ordering::Relaxed);
            sink(i, Bytes::from(self.bytes(from, c)));
            from = c;
        }
        Ok(())
    }
    async fn list_page(&self, _: List<'_>) -> Result<ListPage> {
        Ok(ListPage::default())
    }
    async fn list_after(&self, _: ListAfter<'_>) -> Result<ListPage> {
        Ok(ListPage::default())
    }
    async fn put(&self, _: &str, _: Payload, _: &Metadata) -> Result<PutResult> {
        Err(refused())
    }
    async fn create_multipart(&self, _: &str, _: &Metadata) -> Result<String> {
        Err(refused())
    }
    async fn upload_part(&self, _: Part<'_>, _: Payload) -> Result<String> {
        Err(refused())
    }
    async fn complete_multipart(&self, _: Completion<'_>) -> Result<PutResult> {
        Err(refused())
    }
    async fn upload_part_copy(&self, _: Part<'_>, _: ByteRange<'_>) -> Result<String> {
        Err(refused())
    }
    async fn abort_multipart(&self, _: Upload<'_>) -> Result<()> {
        Err(refused())
    }
    async fn list_uploads(&self, _: &str) -> Result<Vec<UploadInfo>> {
        Ok(Vec::new())
    }
    async fn copy(&self, _: Version<'_>, _: &str, _: Option<&Metadata>) -> Result<PutResult> {
        Err(refused())
    }
    async fn replace_metadata(&self, _: Rewrite<'_>) -> Result<PutResult> {
        Err(refused())
    }
    async fn delete(&self, _: &str) -> Result<()> {
        Err(refused())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_over_8_gib_is_indexed_and_read_at_its_end() {
    let store = Arc::new(Synthetic::new());
    let dir = tempfile::tempdir().unwrap();
    let c = ArchiveClient::open(store.clone(), "big.tar", "b/big.tar", dir.path())
        .await
        .unwrap();
    let big = &c.index().members["big.bin"];
    assert_eq!(big.size, BIG);
    assert_eq!(big.kind, MemberKind::File { offset: 512 });
    let after = &c.index().members["after.txt"];
    assert!(matches!(after.kind, MemberKind::File { offset } if offset > 8 << 30));
    // The member after it, then its last bytes: a GET of just those bytes each (in this
    // order: a read right after the big member's end would fetch ahead to the archive's end).
    store.read.store(0, Ordering::Relaxed);
    let tail = Version::any("after.txt").range(0, TAIL.len() as u64);
    let tail = c.get_range(tail).await.unwrap();
    assert_eq!(&tail[..], TAIL);
    let end = Version::any("big.bin").range(BIG - 8, BIG);
    let end = c.get_range(end).await.unwrap();
    assert_eq!(&end[..], &BIG.to_le_bytes());
    assert_eq!(store.read.load(Ordering::Relaxed), 8 + TAIL.len() as u64);
}
