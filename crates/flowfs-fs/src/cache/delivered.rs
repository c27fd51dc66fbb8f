//! `Delivered`: fetched bytes already handed to their readers, on their way to the disk
//! (stored, packed, or skipped when they are not admitted).

use std::sync::atomic::Ordering;
use std::sync::Arc;

use bytes::Bytes;

use super::{CacheError, Claimed, DiskCache, FetchLock, CHUNK};

/// Fetched bytes already handed to their readers, on their way to the data file: `store`
/// writes them under the fetch's lock and ends the piece's claim.
pub struct Delivered {
    cache: Arc<DiskCache>,
    piece: Claimed,
    data: Bytes,
    /// Its readers have the bytes in memory (else only the data file can serve them).
    in_memory: bool,
    /// Its fetch took no lock and made no files (`DiskCache::keeps_off_disk`).
    off_disk: bool,
}

impl Delivered {
    /// Whether `store` would write nothing: its readers have the bytes in memory and they
    /// are not admitted (or kept off the disk). Then `skip` ends it without I/O.
    pub fn in_memory_only(&self) -> bool {
        self.in_memory && (self.off_disk || !self.cache.admits(self.piece.entry()))
    }

    /// Ends it without writing (`in_memory_only`): its readers wake and read memory.
    pub fn skip(self) {
        let n = self.data.len() as u64;
        self.cache.not_admitted.fetch_add(n, Ordering::Relaxed);
    }

    /// Packs the deliveries of all the bytes of a small version, in order, as a record
    /// of a segment (`DiskCache::pack`); their claims end after it. Blocks on the disk.
    pub fn pack(all: Vec<Delivered>) {
        let Some(first) = all.first() else {
            return;
        };
        let parts: Vec<Bytes> = all.iter().map(|d| d.data.clone()).collect();
        first.cache.pack(first.piece.entry(), &parts);
    }

    /// Writes the bytes and marks them present (`lock`: none when the fetch could not
    /// lock them, and then they are not cached). Blocks on the disk. For a delivery that
    /// is not `in_memory_only` (the caller asked, once: each asking reads the record of
    /// opens; admission only grows, so the answer holds).
    pub fn store(self, lock: Option<&FetchLock>) -> Result<(), CacheError> {
        if self.off_disk {
            // The memory budget could not keep them: written after all, under a lock
            // taken now, so that their readers find them in the file.
            let (c0, c1) = self.piece.chunks();
            let late = self.cache.lock_fetch(self.piece.entry(), c0, c1, false)?;
            return self.cache.store(self.piece, late.as_ref(), &self.data);
        }
        self.cache.store(self.piece, lock, &self.data)
    }
}

impl DiskCache {
    /// Hands the fetched bytes of `p`, from its first chunk on, to its readers (from
    /// memory) at once; the `Delivered` it returns stores them (disk I/O: off the async
    /// workers), which ends the claim.
    /// `off_disk`: its fetch took no lock (`keeps_off_disk`).
    pub fn deliver(self: &Arc<Self>, p: Claimed, data: Bytes, off_disk: bool) -> Delivered {
        let in_memory = self.offer(&p, &data);
        Delivered {
            cache: self.clone(),
            piece: p,
            data,
            in_memory,
            off_disk,
        }
    }

    /// Hands the bytes of `p` to its readers from memory; false if the memory budget
    /// could not keep them.
    pub(super) fn offer(&self, p: &Claimed, data: &Bytes) -> bool {
        let kept = (self.mem).remember(p.entry().mem(), p.chunks().0 * CHUNK, data.clone());
        if kept {
            p.fetch().set_ready();
        }
        kept
    }

    /// Writes the fetched bytes of `p` into the data file and marks them present, under
    /// `lock` (none: the fetch could not lock them, the bytes are not cached), then ends
    /// the claim (its readers wake, whatever the outcome: they have the bytes in memory,
    /// or claim them again). Blocks on the disk: call it off the async workers.
    pub(super) fn store(
        &self,
        p: Claimed,
        lock: Option<&FetchLock>,
        data: &[u8],
    ) -> Result<(), CacheError> {
        let e = p.entry();
        let off = p.chunks().0 * CHUNK;
        let end = off + data.len() as u64;
        // A trailing partial chunk counts only when it reaches the end of the object.
        let (c0, c1) = (
            off / CHUNK,
            if end >= e.size {
                e.chunks()
            } else {
                end / CHUNK
            },
        );
        let open = self.open.read_recursive();
        let r = match lock {
            _ if !*open => Err(CacheError::Closed),
            None => Err(CacheError::NotCached {
                bytes: data.len() as u64,
                why: "another process held their chunks too long",
            }),
            Some(lock) => {
                // Noted before the bytes and words change: a process killed after it is
                // still counted as not synced (durable.rs).
                self.changes.note(&self.usage, Some(&e.map_path()));
                e.write(lock, off, data)
                    .and_then(|()| e.set_present(lock, c0, c1))
                    .map_err(CacheError::disk("cache write"))
            }
        };
        drop(p);
        let added = r?;
        self.usage.add(added as i64);
        self.fetched.fetch_add(added, Ordering::Relaxed);
        drop(open);
        self.evict();
        Ok(())
    }
}
