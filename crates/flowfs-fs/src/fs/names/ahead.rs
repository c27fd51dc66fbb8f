//! What a reader will want next: a reader that opens a directory's files one after
//! another in listing order (cp -r, cat *, tar) gets the next small files fetched ahead,
//! a walk (find, du) the listings of the next directories (fs/walk.rs).

use std::ops::Bound::{Excluded, Included, Unbounded};

use std::sync::Arc;
use std::time::Duration;

use super::Namespace;
use crate::fs::walk::AHEAD;
use crate::fs::{join, SIBLING_PREFETCH};
use crate::inode::{Entry, Inodes, Kind, Listing, ROOT};

impl Namespace {
    /// The files after `ino` in its directory's listing to fetch now, by path, when its
    /// open follows the one before in listing order: at most SIBLING_PREFETCH files and
    /// `window` bytes ahead (what is fetched waits in memory for its reader), each of at
    /// most `part` bytes, none offered twice.
    pub(in crate::fs) fn next_siblings(
        &self,
        ino: u64,
        window: u64,
        part: u64,
    ) -> Vec<(String, Entry)> {
        let mut t = self.table();
        let Some(n) = t.get(ino) else {
            return Vec::new();
        };
        let (parent, name) = (n.parent(), n.name().to_string());
        let Some(dir) = t.path(parent) else {
            return Vec::new();
        };
        let Some(p) = t.get_mut(parent) else {
            return Vec::new();
        };
        let Some((l, last, prefetched_to)) = p.opened_child(&name) else {
            return Vec::new();
        };
        let in_order = last.is_some_and(|lo| {
            lo < name
                && l.entries
                    .range::<str, _>((Included(lo.as_str()), Excluded(name.as_str())))
                    .take(6)
                    .count()
                    <= 5
        });
        if !in_order {
            return Vec::new();
        }
        // At most SIBLING_PREFETCH files and --max-readahead bytes ahead: what is
        // fetched waits in memory for its reader.
        let mut bytes = 0u64;
        let window_end = l
            .entries
            .range::<str, _>((Included(name.as_str()), Unbounded))
            .enumerate()
            .find(|(i, (_, e))| {
                bytes += e.size;
                *i >= SIBLING_PREFETCH || bytes > window
            })
            .map(|(_, (k, _))| k.clone());
        let from = prefetched_to.filter(|f| *f > name).unwrap_or(name.clone());
        let mut out = Vec::new();
        for (k, e) in l
            .entries
            .range::<str, _>((Excluded(from.as_str()), Unbounded))
        {
            if window_end.as_ref().is_some_and(|w| k > w) {
                // Keys come in order: the rest lie beyond the window too.
                break;
            }
            p.set_prefetched_to(k.to_string());
            if e.kind == Kind::File && e.size > 0 && e.size <= part {
                out.push((join(&dir, k), e.clone()));
            }
        }
        out
    }

    /// Directory `ino` is read from its start with `listing`: the directories a walk
    /// reads next, to list ahead (fs/walk.rs), as nodes: its first `AHEAD`
    /// subdirectories and the `AHEAD` directories after it in its parent's listing
    /// that have no listing younger than `ttl`.
    pub(in crate::fs) fn dirs_ahead(&self, ino: u64, listing: &Listing, ttl: Duration) -> Vec<u64> {
        let mut t = self.table();
        let mut todo = dirs_to_list(&mut t, (ino, listing), listing.entries.iter(), ttl);
        let Some(n) = t.get(ino).filter(|_| ino != ROOT) else {
            return todo;
        };
        let (parent, name) = (n.parent(), n.name().clone());
        let Some(l) = t.get(parent).and_then(|p| p.listing()).cloned() else {
            return todo;
        };
        let next = l.entries.range::<str, _>((Excluded(&*name), Unbounded));
        todo.extend(dirs_to_list(&mut t, (parent, &l), next, ttl));
        todo
    }
}

/// Of `entries` of `dir`'s listing `l`, the first `AHEAD` directories, as nodes, that
/// have no listing younger than `ttl`.
fn dirs_to_list<'a>(
    t: &mut Inodes,
    (dir, l): (u64, &Listing),
    entries: impl Iterator<Item = (&'a Arc<str>, &'a Entry)>,
    ttl: Duration,
) -> Vec<u64> {
    entries
        .filter(|(_, e)| e.kind == Kind::Dir)
        .take(AHEAD)
        .filter_map(|(k, e)| {
            let d = t.upsert(dir, k.clone(), e, Some(l.at));
            let fresh = t.get(d).and_then(|n| n.fresh_listing(ttl)).is_some();
            (!fresh).then_some(d)
        })
        .collect()
}
