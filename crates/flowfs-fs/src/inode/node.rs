//! A node of the inode table: what the core knows of one file or directory, and what
//! only a directory has (`DirState`, made on first use). Its fields are private to the
//! namespace (`inode/`): the core changes them through the methods here or through
//! `Inodes`, which keeps the child index in step with names and parents.

use std::collections::HashMap;
use std::num::NonZeroU64;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use super::{Entry, Listing};

#[derive(Debug)]
pub struct Node {
    /// Changed only by `Inodes`, together with the child index.
    pub(super) parent: u64,
    /// One allocation shared with the parent's child index.
    pub(super) name: Arc<str>,
    /// The attributes: a plain value that the core reads and replaces freely.
    pub entry: Entry,
    /// When the attributes were last confirmed; `None` for nodes this mount owns.
    validated: Option<Stamp>,
    /// The kernel's references (LOOKUP minus FORGET) and this mount's open handles:
    /// the node leaves the table when both are zero and no name leads to it.
    pub(super) lookups: u64,
    pub(super) open: u32,
    /// ETag of the bytes the kernel may still hold in its page cache. Boxed, as
    /// `validated` is a `Stamp`: with both, a node takes a 144-byte block, not 160
    /// (measured on the scale probe at 100,000 files seen: 421 -> 407 bytes per file).
    page_cache_etag: Option<Box<Arc<str>>>,
    /// Its name was removed (unlink, replaced by a rename) while it is still open or
    /// known to the kernel: no name leads to it any more.
    pub(super) unlinked: bool,
    /// Its names beyond the first (hard links, links.rs).
    pub(super) links: u16,
    /// What only a directory has, made on first use: most nodes are files, and what
    /// every node carries is paid a million times over (issue 15: 1,000,000 files seen
    /// in 400 MiB; the directory fields inline cost a file 200 bytes of its 905).
    pub(super) dir: Option<Box<DirState>>,
}

/// A directory's own state: its cached listing, its negative entries, the lock that
/// makes one LIST serve every lookup waiting on it, and where the prefetch of its files
/// in listing order stands.
#[derive(Debug, Default)]
pub(super) struct DirState {
    pub(super) listing: Option<Cached>,
    pub(super) negative: HashMap<String, Instant>,
    pub(super) list_lock: Arc<tokio::sync::Mutex<()>>,
    /// The last file opened here and how far its siblings were prefetched.
    pub(super) last_open: Option<String>,
    pub(super) prefetched_to: Option<String>,
    /// Its marker object `dir/` is known to exist (made by mkdir here, or shown by its
    /// last listing): a listing of a marked directory reads the metadata of every object
    /// it does not know, so a symlink here needs no `-1` ETag to be told (one PUT).
    pub(super) marked: bool,
}

/// What is left of a directory's listing.
#[derive(Debug)]
pub(super) enum Cached {
    /// Kept, as number `seq` in the order listings were stored (`Inodes::held`), with
    /// how many of its entries are directories (its nlink is 2 more).
    Held {
        listing: Listing,
        seq: u64,
        subdirs: usize,
    },
    /// Dropped to keep listings within `MAX_LISTED`, or never kept for being bigger than
    /// a lookup lists (`set_too_big_to_list`): how many entries it had, at least.
    Dropped { len: usize },
}

impl Node {
    pub(super) fn new(
        parent: u64,
        name: Arc<str>,
        entry: Entry,
        validated: Option<Instant>,
    ) -> Node {
        Node {
            parent,
            name,
            entry,
            validated: validated.map(Stamp::of),
            lookups: 0,
            open: 0,
            page_cache_etag: None,
            unlinked: false,
            links: 0,
            dir: None,
        }
    }

    /// The directory it is in.
    pub fn parent(&self) -> u64 {
        self.parent
    }

    /// Its name in that directory.
    pub fn name(&self) -> &Arc<str> {
        &self.name
    }

    /// Its link count: how many names lead to it (a file's; a directory counts its
    /// subdirectories instead).
    pub fn nlink(&self) -> u32 {
        1 + u32::from(self.links)
    }

    /// The kernel took one more reference (a LOOKUP answered, or a create).
    pub fn looked_up(&mut self) {
        self.lookups += 1;
    }

    /// The kernel dropped one reference without a FORGET (an answer it never got).
    pub fn lookup_undone(&mut self) {
        self.lookups = self.lookups.saturating_sub(1);
    }

    /// A handle was opened on it.
    pub fn opened(&mut self) {
        self.open += 1;
    }

    /// A handle on it was closed.
    pub fn closed(&mut self) {
        self.open = self.open.saturating_sub(1);
    }

    /// Whether a handle is open on it.
    pub fn is_open(&self) -> bool {
        self.open > 0
    }

    /// When its attributes were last confirmed (`None`: this mount owns them).
    pub fn validated(&self) -> Option<Instant> {
        self.validated.map(Stamp::instant)
    }

    /// Its attributes were confirmed at `at` (`None`: this mount owns them now).
    pub(super) fn set_validated(&mut self, at: Option<Instant>) {
        self.validated = at.map(Stamp::of);
    }

    /// This mount owns its attributes now (its content is staged here, a change the
    /// bucket lacks): no listing or lookup replaces them, and no forget of the kernel
    /// removes the node, until `confirm` says the bucket holds them again.
    pub fn own(&mut self) {
        self.validated = None;
    }

    /// Its attributes were confirmed at `at`.
    pub fn confirm(&mut self, at: Instant) {
        self.validated = Some(Stamp::of(at));
    }

    /// Its attributes, confirmed before, were confirmed again now (a node this mount
    /// owns stays owned).
    pub fn reconfirm(&mut self) {
        if self.validated.is_some() {
            self.validated = Some(Stamp::of(Instant::now()));
        }
    }

    /// The ETag of the bytes the kernel may hold in its page cache for it.
    pub fn page_cache_etag(&self) -> Option<&Arc<str>> {
        self.page_cache_etag.as_deref()
    }

    /// The kernel's page cache now holds (or will hold) `etag`'s bytes.
    pub fn set_page_cache_etag(&mut self, etag: Option<Arc<str>>) {
        self.page_cache_etag = etag.map(Box::new);
    }

    /// The same bytes under a new ETag (its metadata rewritten, or its object copied
    /// to a new name): what the kernel's page cache holds of the old one stays good.
    pub fn retag(&mut self, etag: Arc<str>) {
        if self.page_cache_etag().is_some() && self.page_cache_etag() == self.entry.etag.as_ref() {
            self.set_page_cache_etag(Some(etag.clone()));
        }
        self.entry.etag = Some(etag);
    }

    /// No name leads to it any more (unlinked or replaced while still in use).
    pub fn is_unlinked(&self) -> bool {
        self.unlinked
    }

    pub(super) fn dir_mut(&mut self) -> &mut DirState {
        self.dir.get_or_insert_with(Box::default)
    }

    /// The directory's cached listing, however old, unless it was dropped.
    pub fn listing(&self) -> Option<&Listing> {
        match self.dir.as_ref()?.listing.as_ref()? {
            Cached::Held { listing, .. } => Some(listing),
            Cached::Dropped { .. } => None,
        }
    }

    /// How many subdirectories its kept listing shows (with what this mount changed
    /// since), or `None` when it has no listing kept.
    pub fn subdirs(&self) -> Option<usize> {
        match self.dir.as_ref()?.listing.as_ref()? {
            Cached::Held { subdirs, .. } => Some(*subdirs),
            Cached::Dropped { .. } => None,
        }
    }

    /// How many entries the directory's last listing had, kept or dropped.
    pub fn listed_len(&self) -> Option<usize> {
        match self.dir.as_ref()?.listing.as_ref()? {
            Cached::Held { listing, .. } => Some(listing.entries.len()),
            Cached::Dropped { len } => Some(*len),
        }
    }

    /// Takes the listing out; a kept one returns its size and number.
    pub(super) fn take_listing(&mut self) -> Option<(usize, u64)> {
        match self.dir.as_mut()?.listing.take()? {
            Cached::Held { listing, seq, .. } => Some((listing.entries.len(), seq)),
            Cached::Dropped { .. } => None,
        }
    }

    /// The lock one listing of this directory at a time holds.
    pub fn list_lock(&mut self) -> Arc<tokio::sync::Mutex<()>> {
        self.dir_mut().list_lock.clone()
    }

    /// Drops the negative entries from before `at` and returns the names of the newer
    /// ones: a listing taken at `at` must not bring those names back.
    pub fn negatives_after(&mut self, at: Instant) -> Vec<String> {
        let Some(d) = self.dir.as_mut() else {
            return Vec::new();
        };
        d.negative.retain(|_, when| *when > at);
        d.negative.keys().cloned().collect()
    }

    pub(super) fn remove_negative(&mut self, name: &str) {
        if let Some(d) = self.dir.as_mut() {
            d.negative.remove(name);
        }
    }

    /// Records that `name` was opened here; returns the listing, the file opened before
    /// it and how far siblings were prefetched, for the choice of what to fetch next.
    pub fn opened_child(
        &mut self,
        name: &str,
    ) -> Option<(Listing, Option<String>, Option<String>)> {
        let l = self.listing()?.clone();
        let d = self.dir.as_mut()?;
        let last = d.last_open.replace(name.to_string());
        Some((l, last, d.prefetched_to.clone()))
    }

    /// Whether its marker object is known to exist (see `DirState::marked`).
    pub fn is_marked(&self) -> bool {
        self.dir.as_ref().is_some_and(|d| d.marked)
    }

    /// Its marker object was made here, or a listing showed it (or showed none).
    pub fn set_marked(&mut self, marked: bool) {
        self.dir_mut().marked = marked;
    }

    pub fn set_prefetched_to(&mut self, name: String) {
        self.dir_mut().prefetched_to = Some(name);
    }

    pub fn fresh(&self, ttl: Duration) -> bool {
        self.validated().is_none_or(|t| t.elapsed() < ttl)
    }

    /// This directory's listing, if it was taken less than `ttl` ago.
    pub fn fresh_listing(&self, ttl: Duration) -> Option<&Listing> {
        self.listing().filter(|l| l.at.elapsed() < ttl)
    }

    /// What this directory's listing or negative entries younger than `ttl` say of
    /// `name`: `Some(Some((entry, listed at)))` there, `Some(None)` absent, `None` unknown.
    pub fn cached_child(&self, name: &str, ttl: Duration) -> Option<Option<(Entry, Instant)>> {
        if let Some(l) = self.fresh_listing(ttl) {
            return Some(l.entries.get(name).map(|e| (e.clone(), l.at)));
        }
        self.dir
            .as_ref()?
            .negative
            .get(name)
            .is_some_and(|at| at.elapsed() < ttl)
            .then_some(None)
    }
}

/// An `Instant` in 8 bytes, not 16: nanoseconds since the first one taken (584 years).
/// A node carries one, and what every node carries is paid per file seen.
#[derive(Debug, Clone, Copy)]
pub(super) struct Stamp(NonZeroU64);

static EPOCH: OnceLock<Instant> = OnceLock::new();

impl Stamp {
    /// The start of the clock; taken when the first inode table is made, before any
    /// instant a stamp is made of (one from before it counts as the start).
    pub(super) fn start() {
        EPOCH.get_or_init(Instant::now);
    }

    fn of(at: Instant) -> Stamp {
        let epoch = *EPOCH.get_or_init(Instant::now);
        let nanos = at.saturating_duration_since(epoch).as_nanos();
        let nanos = u64::try_from(nanos).unwrap_or(u64::MAX).saturating_add(1);
        Stamp(NonZeroU64::new(nanos).unwrap_or(NonZeroU64::MAX))
    }

    fn instant(self) -> Instant {
        let epoch = *EPOCH.get_or_init(Instant::now);
        epoch + Duration::from_nanos(self.0.get() - 1)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamp_gives_back_its_instant_and_a_node_stays_small() {
        Stamp::start();
        let a = Instant::now();
        let b = a + Duration::from_nanos(1);
        assert_eq!(Stamp::of(a).instant(), a);
        assert_eq!(Stamp::of(b).instant(), b);
        let later = a + Duration::from_secs(86_400 * 365 * 100);
        assert_eq!(Stamp::of(later).instant(), later);
        // What every node carries is paid per file seen: 136 bytes take a 144-byte block.
        assert!(
            std::mem::size_of::<Node>() <= 136,
            "{}",
            std::mem::size_of::<Node>()
        );
        assert_eq!(std::mem::size_of::<Option<Stamp>>(), 8);
    }
}
