//! Reading from the store: everything between a read of an open file and the GETs it
//! costs. One `Prefetcher` per mount (owned by `Fs`) holds what that needs: the client,
//! the cache, the `gets` semaphore and the sizes from the configuration. A `Reader` is
//! what one open handle needs: the object version it reads, its cache entry and its
//! sequential state, made at open.
//!
//! One job per file: `policy.rs` says what a read needs now and what to fetch ahead of
//! it (SeqState, the read-ahead window); `gets.rs` sizes GETs (claimed pieces grouped
//! into runs); `task.rs` runs one GET (each piece handed to its readers and written to
//! the cache as it arrives); `object.rs` fetches a whole object ahead of any reader (a
//! directory's next files, chosen by the namespace in fs/open.rs).
//!
//! Single flight: which chunks are in flight is kept by the cache entry
//! (`DiskCache::claim`), because eviction reserves the chunks it is punching in the same
//! map: a reader must see a GET and a punch under way in one look, or it would write
//! chunks into the file that the punch then zeroes. A GET owns the chunks it was handed
//! as `Claimed` pieces: each one's store (or drop) ends its claim and wakes its readers,
//! and `Claimed::fail_all` a failed GET's; nothing here touches the in-flight map.

#[cfg(test)]
mod admit_tests;
mod ahead;
mod gets;
mod object;
mod policy;
mod served;
mod task;
#[cfg(test)]
mod tests;
mod warm;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::budget::GetBudget;
use bytes::Bytes;
use flowfs_client::ObjectClient;
use parking_lot::Mutex;

use crate::cache::{CacheEntry, CacheError, DiskCache, Fetch, Pinned, CHUNK};
use crate::config::FsConfig;
use crate::error::{FsError, Result};
pub use ahead::AheadStats;
use gets::{Sizing, PIECE};
use policy::SeqState;
pub use served::ReadStats;
pub use warm::Warmer;

/// Reads of every open file of a mount, and the GETs they cost.
pub(crate) struct Prefetcher {
    client: Arc<dyn ObjectClient>,
    cache: Arc<DiskCache>,
    /// GETs in flight at once (`--max-concurrency`, a share by size), held until their
    /// pieces are on disk.
    gets: GetBudget,
    bucket: String,
    part_size: u64,
    max_readahead: u64,
    sizing: Sizing,
    /// A cache write failed (and was logged at warn level) in this mount.
    cache_write_warned: AtomicBool,
    /// Objects fetched ahead of readers, and which of them a reader opened.
    ahead: Mutex<ahead::Ledger>,
    /// How reads were answered: at once, or after waiting for the store.
    served: served::Served,
}

/// One object version as the store and the cache know it: what a GET task needs.
struct Object {
    key: String,
    /// Sent as If-Match: a GET never mixes the bytes of two versions.
    etag: Option<String>,
    size: u64,
    entry: Arc<CacheEntry>,
}

/// One open handle's reads of one object version.
pub(crate) struct Reader {
    obj: Arc<Object>,
    seq: Mutex<SeqState>,
}

impl Reader {
    /// The object version it reads: key, ETag (if known) and size.
    pub(crate) fn version(&self) -> (&str, Option<&str>, u64) {
        let o = &self.obj;
        (&o.key, o.etag.as_deref(), o.size)
    }
}

impl Prefetcher {
    /// The prefetcher of a mount over `client`, caching in `cache`.
    pub(crate) fn new(
        cfg: &FsConfig,
        client: Arc<dyn ObjectClient>,
        cache: Arc<DiskCache>,
    ) -> Prefetcher {
        Prefetcher {
            client,
            cache,
            gets: GetBudget::new(cfg.max_gets, cfg.part_size),
            bucket: cfg.bucket.clone(),
            part_size: cfg.part_size,
            max_readahead: cfg.max_readahead,
            sizing: Sizing::new(cfg.part_size, cfg.max_readahead),
            cache_write_warned: AtomicBool::new(false),
            ahead: Mutex::default(),
            served: served::Served::default(),
        }
    }

    /// Objects fetched ahead of readers since the mount started.
    pub(crate) fn ahead_stats(&self) -> AheadStats {
        self.ahead.lock().stats()
    }

    pub(crate) fn read_stats(&self) -> ReadStats {
        let mut r = self.served.stats();
        (r.evicted_blocks, r.evicted_bytes) = self.cache.evicted();
        r.not_admitted_bytes = self.cache.not_admitted();
        r
    }

    /// The GET permits: a whole-object download for writing (writeback/transfer.rs)
    /// counts against the same `--max-concurrency` as reads.
    pub(crate) fn gets(&self) -> &GetBudget {
        &self.gets
    }

    /// The object version `key` at `etag` (none: any), `size` bytes, with its cache entry
    /// open.
    fn version(&self, key: String, etag: Option<String>, size: u64) -> Arc<Object> {
        let version = etag.as_deref().unwrap_or("");
        let entry = self.cache.entry(&self.bucket, &key, version, size);
        Arc::new(Object {
            key,
            etag,
            size,
            entry,
        })
    }

    /// A reader of `key` at `etag` (none: any version), `size` bytes: an open handle.
    pub(crate) fn open(&self, key: String, etag: Option<String>, size: u64) -> Reader {
        self.open_as(key, etag, size, false)
    }

    /// `open`, shared as an open handle holds it, of the version `etag` the namespace keeps.
    pub(crate) fn reader(&self, key: String, etag: Option<Arc<str>>, size: u64) -> Arc<Reader> {
        Arc::new(self.open(key, etag.as_deref().map(String::from), size))
    }

    /// `open`; `explicit`: the bytes are read to be kept (`flowfs cache prefetch`), which
    /// admits them to the disk cache under every policy.
    pub(crate) fn open_as(
        &self,
        key: String,
        etag: Option<String>,
        size: u64,
        explicit: bool,
    ) -> Reader {
        self.ahead.lock().opened(&key);
        let obj = self.version(key, etag, size);
        self.cache.opened(&obj.entry, explicit);
        Reader {
            obj,
            seq: Mutex::new(SeqState::default()),
        }
    }

    /// The object `r` reads as one local file, held against eviction, when every byte
    /// of it is in the cache (for FUSE passthrough); none otherwise.
    pub(crate) fn pin(&self, r: &Reader) -> Option<Pinned> {
        match self.cache.pin_complete(&r.obj.entry) {
            Ok(p) => {
                let p = p.filter(|p| p.size() == r.obj.size)?;
                // The kernel's reads leave no use times: the whole object counts as used
                // now, or eviction would take a file read only through passthrough first.
                self.cache.touch(&r.obj.entry, 0, r.obj.size);
                Some(p)
            }
            Err(e) => {
                tracing::debug!(key = %r.obj.key, "cannot pin the cached object: {e}");
                None
            }
        }
    }

    /// Every byte of the small version `r` reads, if the cache has them (in memory, in
    /// its segment or its data file): no request is sent.
    pub(crate) fn cached_small(&self, r: &Reader) -> Option<Bytes> {
        if r.obj.size > crate::cache::SMALL {
            return None;
        }
        // All of them or none (`DiskCache::read`); their length is checked where they are
        // written (fs/copy_fill.rs).
        let got = self.cache.read(&r.obj.entry, 0, r.obj.size as usize);
        got.ok().flatten()
    }

    /// The handle of `r` closed: the last one on its cache entry saves its bitmap.
    pub(crate) fn close(&self, r: &Reader) {
        self.cache.release(&r.obj.entry);
    }

    /// Up to `len` bytes at `off`, from the cache or the store, with read-ahead.
    pub(crate) async fn read(self: &Arc<Self>, r: &Reader, off: u64, len: u32) -> Result<Bytes> {
        let obj = &r.obj;
        if off >= obj.size {
            return Ok(Bytes::new());
        }
        let len = (len as u64).min(obj.size - off);
        let plan = (r.seq.lock()).plan(off, len, obj.size, self.part_size, self.max_readahead);
        if let Some((a, b)) = plan.ahead {
            let claim = (self.cache).claim(&obj.entry, a / CHUNK, b.div_ceil(CHUNK), PIECE);
            self.spawn_gets(obj, claim.start, self.sizing.ahead_run());
        }
        let mut retried = false;
        let asked = std::time::Instant::now();
        for attempt in 0..4 {
            if let Some(data) = self.cache.read(&obj.entry, off, len as usize)? {
                self.cache.touch(&obj.entry, off, len);
                match attempt {
                    0 => self.served.hit(data.len()),
                    _ => self.served.waited(data.len(), asked.elapsed()),
                }
                return Ok(data);
            }
            match self
                .fetch(obj, plan.need, (off, off + len), attempt == 0)
                .await
            {
                Ok(()) => {}
                // A download that broke off after the client's own retries (a body cut
                // mid-stream is not retried there) is fetched once more before the
                // reader sees EIO.
                Err(e) if e.may_pass() && !retried => {
                    tracing::debug!(key = %obj.key, "fetching again after: {e}");
                    retried = true;
                }
                Err(e) => return Err(e),
            }
        }
        Err(FsError::Evicted)
    }

    /// Starts the GETs for what `need` (bytes) lacks, then waits for the pieces that
    /// cover `want`, in flight or new. `ready`: from memory as soon as they arrive.
    async fn fetch(
        self: &Arc<Self>,
        obj: &Arc<Object>,
        need: (u64, u64),
        want: (u64, u64),
        ready: bool,
    ) -> Result<()> {
        // Start what the plan wants, then wait only for the chunks asked for. One claim
        // for both: a GET started here is waited on even if it has ended by then. (A
        // second look, after starting it, found the chunks of a GET that had failed
        // meanwhile given up, and started another: the reader never saw the failure, and
        // a failing server cost a read three requests or more.)
        let (c0, c1) = (want.0 / CHUNK, want.1.div_ceil(CHUNK));
        let claim = (self.cache).claim(&obj.entry, need.0 / CHUNK, need.1.div_ceil(CHUNK), PIECE);
        let running = claim.wait.iter().map(|(s, e, f)| ((*s, *e), f));
        let started = claim.start.iter().map(|p| (p.chunks(), p.fetch()));
        let waits: Vec<Arc<Fetch>> = (running.chain(started))
            .filter(|((s, e), _)| *s < c1 && *e > c0)
            .map(|(_, f)| f.clone())
            .collect();
        self.spawn_gets(obj, claim.start, self.sizing.part_run());
        for w in waits {
            // First from memory as soon as it arrives; if another reader took it from
            // there meanwhile, from the file once written.
            if ready {
                w.wait_ready().await?;
            } else {
                w.wait().await?;
            }
        }
        Ok(())
    }

    fn cache_write_failed(&self, e: &CacheError) {
        // Once per mount at warn level: a full disk would otherwise log every fetch.
        if !self.cache_write_warned.swap(true, Ordering::Relaxed) {
            tracing::warn!("cannot write the disk cache, reading without it: {e}");
        } else {
            tracing::debug!("cannot write the disk cache: {e}");
        }
    }
}
