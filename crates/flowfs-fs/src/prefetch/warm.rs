//! `flowfs cache prefetch`: whole objects read into the node cache with no mount, through
//! the same reads, GETs and cross-process locks as a mount's (a mount reading the same
//! object meanwhile waits for these GETs rather than repeating them).

use std::sync::Arc;

use flowfs_client::ObjectClient;

use super::Prefetcher;
use crate::cache::{CacheError, DiskCache};
use crate::config::FsConfig;
use crate::error::{FsError, Result};

/// Reads objects of one bucket into a cache directory.
pub struct Warmer {
    pre: Arc<Prefetcher>,
    cache: Arc<DiskCache>,
    client: Arc<dyn ObjectClient>,
    step: u64,
}

impl Warmer {
    /// Opens the cache of `cfg.cache_dir` (shared with the mounts on it) for `cfg.bucket`.
    pub fn new(cfg: &FsConfig, client: Arc<dyn ObjectClient>) -> Result<Warmer> {
        let mem = cfg.max_readahead + 2 * cfg.part_size;
        let cache = DiskCache::open(&cfg.cache_dir, cfg.cache_size, mem)
            .map_err(|e| FsError::disk(format!("cache dir {}", cfg.cache_dir.display()), e))?
            .with_min_free(cfg.cache_min_free)
            .with_admission(cfg.cache_admit);
        let cache = Arc::new(cache);
        Ok(Warmer {
            pre: Arc::new(Prefetcher::new(cfg, client.clone(), cache.clone())),
            cache,
            client,
            step: cfg.part_size.clamp(1 << 20, 64 << 20),
        })
    }

    /// Reads all of `key` (its current version) into the cache; its size.
    pub async fn object(&self, key: &str) -> Result<u64> {
        self.object_progress(key, &mut |_, _| {}).await
    }

    /// As `object`, telling `progress` (bytes read so far, the object's size) after each
    /// step.
    pub async fn object_progress(
        &self,
        key: &str,
        progress: &mut (dyn FnMut(u64, u64) + Send),
    ) -> Result<u64> {
        let meta = self.client.head(key).await?;
        let size = meta.info.size;
        let r = (self.pre).open_as(key.to_string(), Some(meta.info.etag), size, true);
        let mut off = 0;
        let mut res = Ok(size);
        progress(0, size);
        while off < size {
            match self.pre.read(&r, off, self.step as u32).await {
                Ok(d) if !d.is_empty() => {
                    off += d.len() as u64;
                    progress(off, size);
                }
                Ok(_) => break,
                Err(e) => {
                    res = Err(e);
                    break;
                }
            }
        }
        if res.is_ok() {
            res = self.settled(&r).await.map(|()| size);
        }
        self.pre.close(&r);
        res
    }

    /// Until every byte `r` read is in the cache's data file, or an error if some are
    /// not. A read returns once its bytes are in memory; the cache's close turns away
    /// stores still queued behind it (`flowfs cache prefetch` of two objects left one
    /// uncached in 1 run of 3 before this).
    async fn settled(&self, r: &super::Reader) -> Result<()> {
        let e = &r.obj.entry;
        for last in [false, true] {
            let claim = self.cache.claim(e, 0, e.chunks(), u64::MAX);
            let chunks = claim.start.iter().map(|p| p.chunks());
            let missing: u64 = chunks.map(|(a, b)| b - a).sum();
            // Claimed only to count them: given back at once.
            drop(claim.start);
            if missing > 0 {
                return Err(FsError::Cache(
                    self.not_cached(missing * crate::cache::CHUNK),
                ));
            }
            if claim.wait.is_empty() || last {
                return Ok(());
            }
            for (_, _, f) in &claim.wait {
                f.wait().await?;
            }
        }
        Ok(())
    }

    /// Why `bytes` read were not stored: the free-space floor when it leaves the cache
    /// less than it was asked to hold (the usual reason on a full disk), else the log's.
    fn not_cached(&self, bytes: u64) -> CacheError {
        match self.cache.squeezed() {
            Some(room) => CacheError::NoRoom { bytes, room },
            None => CacheError::NotCached {
                bytes,
                why: "the log says why",
            },
        }
    }

    /// Ends the use of the cache (as an unmount does).
    pub fn close(&self) {
        self.cache.close();
    }
}
