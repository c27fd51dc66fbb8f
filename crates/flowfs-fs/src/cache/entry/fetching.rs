//! An entry's chunks fetched and evicted: claims of missing chunks for fetches in this
//! process (`claim`, `end_claim`), the cross-process lock of a fetch and the writes under
//! it (`lock_fetch`, `write`, `set_present`), and this process's eviction of a block
//! (`take_block`, `end_punch`). The locks are described in mod.rs.

use super::*;

impl CacheEntry {
    /// Marks the missing chunks of `[c0, c1)` as in flight in runs of at most `max_run`
    /// chunks, and returns those runs (each `Claimed`, whose drop ends it) together with
    /// the fetches already running.
    pub(in crate::cache) fn claim(self: &Arc<Self>, c0: u64, c1: u64, max_run: u64) -> Claim {
        let mut claim = Claim {
            wait: Vec::new(),
            start: Vec::new(),
        };
        if self.is_packed() {
            return claim;
        }
        // Fetched bytes not written to the disk are only in memory until read: those not
        // admitted, and a small version's without files (written as a record once whole).
        let mem_only = !self.admitted() || (self.size <= SMALL && self.absent());
        let mut inflight = self.inflight.lock();
        let state = self.state.read();
        let mut run: Option<u64> = None;
        let c1 = c1.min(self.chunks());
        let mut c = c0;
        let in_memory =
            |c: u64| mem_only && self.mem.holds(c * CHUNK, ((c + 1) * CHUNK).min(self.size));
        let close = |run: &mut Option<u64>,
                     c: u64,
                     claim: &mut Claim,
                     inflight: &mut HashMap<u64, Arc<Fetch>>| {
            if let Some(s) = run.take() {
                let f = Arc::new(Fetch::default());
                for i in s..c {
                    inflight.insert(i, f.clone());
                }
                claim.start.push(Claimed::new(self.clone(), s, c, f));
            }
        };
        while c < c1 {
            if state.has(c) || in_memory(c) {
                close(&mut run, c, &mut claim, &mut inflight);
            } else if let Some(f) = inflight.get(&c).cloned() {
                close(&mut run, c, &mut claim, &mut inflight);
                match claim.wait.last_mut() {
                    Some(w) if w.1 == c && Arc::ptr_eq(&w.2, &f) => w.1 = c + 1,
                    _ => claim.wait.push((c, c + 1, f)),
                }
            } else {
                match run {
                    Some(s) if c - s >= max_run => {
                        close(&mut run, c, &mut claim, &mut inflight);
                        run = Some(c);
                    }
                    Some(_) => {}
                    None => run = Some(c),
                }
            }
            c += 1;
        }
        close(&mut run, c1, &mut claim, &mut inflight);
        claim
    }

    /// Ends the claim of `fetch` on chunks `[c0, c1)` (those another fetch or a punch
    /// holds now stay theirs).
    pub(in crate::cache) fn end_claim(&self, c0: u64, c1: u64, fetch: &Arc<Fetch>) {
        let mut inflight = self.inflight.lock();
        for c in c0..c1 {
            if inflight.get(&c).is_some_and(|f| Arc::ptr_eq(f, fetch)) {
                inflight.remove(&c);
            }
        }
    }

    /// Locks chunks `[c0, c1)` for a fetch: at once if no other fetch or eviction holds
    /// any of them, else (`wait`) when they are done, or `None` (not `wait`).
    pub(in crate::cache) fn lock_fetch(
        &self,
        c0: u64,
        c1: u64,
        wait: bool,
    ) -> io::Result<Option<FetchLock>> {
        let files = self.made_files()?;
        let fd = reopen(&files.map)?;
        let (start, len) = (self.layout.word(c0), (c1 - c0) * 4);
        let locked = ofd_lock(&fd, Lock::Exclusive, start, len, false)?
            || (wait && ofd_lock(&fd, Lock::Exclusive, start, len, true)?);
        if !locked {
            return Ok(None);
        }
        // Under the lock: which chunks are present (the sidecar's words, taken into the
        // hint: chunks another process fetched meanwhile are read from the file).
        let words = persist::read_words(&files.map, &self.layout, c0, c1)?;
        self.state.write().update(c0, &words, |_| false);
        Ok(Some(FetchLock {
            _fd: fd,
            files,
            c0,
            c1,
            present: words.iter().map(|w| w & 1 == 1).collect(),
        }))
    }

    /// Writes fetched bytes at `off` (under `lock`), through the page cache: a file whose
    /// bytes are all here is read by the kernel itself (FUSE passthrough), which then finds
    /// them in memory. Written with `O_DIRECT` they were not, and B3's second read of a
    /// 2 GiB object took 4.1 s from the disk against 1.9 s (1.5 s for the build before
    /// passthrough, from the FUSE file's pages; its cold read was also 0.83x faster).
    pub(in crate::cache) fn write(
        &self,
        lock: &FetchLock,
        off: u64,
        data: &[u8],
    ) -> io::Result<()> {
        lock.files.data.write_all_at(data, off)?;
        crate::cache::disk::start_writeback(&lock.files.data, off, data.len());
        Ok(())
    }

    /// Sets the words of chunks `[c0, c1)`, just written under `lock`: present, one
    /// generation on. The bytes that made present (0 for chunks that were).
    pub(in crate::cache) fn set_present(
        &self,
        lock: &FetchLock,
        c0: u64,
        c1: u64,
    ) -> io::Result<u64> {
        debug_assert!(lock.c0 <= c0 && c1 <= lock.c1);
        let f = &lock.files.map;
        let old = persist::read_words(f, &self.layout, c0, c1)?;
        let new: Vec<u32> = old.iter().map(|&w| made_present(w)).collect();
        persist::write_words(f, &self.layout, c0, &new)?;
        let now = now_ms();
        for b in c0 / BLOCK_CHUNKS..c1.div_ceil(BLOCK_CHUNKS) {
            persist::write_stamp(f, &self.layout, b, now);
        }
        self.state.write().update(c0, &new, |_| false);
        Ok((c1 - c0 - present(&old)) * CHUNK)
    }

    /// Eviction takes block `b` here: its chunks leave the hint and are reserved until
    /// `end_punch`.
    pub(in crate::cache) fn take_block(&self, b: u64) -> Taken {
        let mut inflight = self.inflight.lock();
        let mut st = self.state.write();
        let (c0, c1) = (
            b * BLOCK_CHUNKS,
            ((b + 1) * BLOCK_CHUNKS).min(self.chunks()),
        );
        let runs = st.clear_range(c0, c1);
        let punch = Arc::new(Fetch::default());
        for &(s, c) in &runs {
            for i in s..c {
                inflight.insert(i, punch.clone());
            }
        }
        Taken { runs, punch }
    }

    /// Ends the reservations of taken chunks: readers waiting on them fetch them again.
    pub(in crate::cache) fn end_punch(&self, t: &Taken) {
        for &(s, c) in &t.runs {
            self.end_claim(s, c, &t.punch);
        }
        t.punch.finish(Ok(()));
    }
}
