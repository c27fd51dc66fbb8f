//! What the namespace knows of one name (`Entry`: its kind, size, ETag, times and POSIX
//! metadata, as the server or this mount says), a directory's `Listing`, and how much of
//! the objects' metadata a listing is asked to fetch (`MetaHeads`).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Instant, SystemTime};

use crate::meta::Posix;

/// What a node is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// A regular file: one object.
    File,
    /// A directory: a common prefix, or a name this mount created.
    Dir,
    /// A symbolic link: an object with its target in the metadata.
    Symlink,
    /// A FIFO, socket or device node (its `S_IFMT` bits): an empty object whose metadata
    /// holds its mode and rdev, as s3fs writes them. The kernel does its I/O locally.
    Special(u32),
}

/// What the server (or this mount) says about one name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Entry {
    pub kind: Kind,
    pub size: u64,
    pub mtime: SystemTime,
    /// Shared, not copied, between a listing and the node made from it (an ETag is 34
    /// bytes and a million files are seen twice: issue 15).
    pub etag: Option<Arc<str>>,
    pub target: Option<Box<str>>,
    /// The POSIX attributes its metadata holds (`Some(Posix::default())` when it holds
    /// none), or what this mount gave a node it made; `None` while unknown (a listing
    /// tells no metadata), which shows the mount's defaults. Behind a pointer: most
    /// entries have none, and inline it cost every entry 80 bytes, a listing's and its
    /// node's both (issue 15: 366 -> 451 bytes per file seen at a million, over the 400 MiB
    /// target). Shared (`Arc`) by a listing's entry and the node made from it.
    pub posix: Option<Arc<Posix>>,
}

impl Entry {
    /// Takes what the server says now. A directory keeps its time (the mount's start, or
    /// its mkdir) and attributes, under what its marker says (`Posix::merged_over`). An
    /// object still of the same ETag keeps the attributes read from its metadata when
    /// the news (a listing) tells none.
    pub fn refresh(&mut self, new: &Entry) {
        let (mtime, posix) = (self.mtime, self.posix.take());
        let same = self.etag.is_some() && self.etag == new.etag;
        *self = new.clone();
        if new.kind == Kind::Dir {
            self.mtime = mtime;
            if let Some(p) = new.posix() {
                self.set_posix(Some(p.merged_over(posix.as_deref().cloned())));
            } else {
                self.posix = posix;
            }
        } else if new.posix.is_none() && same {
            self.posix = posix;
        }
    }

    /// The time to show as mtime: the metadata's, else the object's `LastModified`.
    pub fn shown_mtime(&self) -> SystemTime {
        self.posix().and_then(|p| p.mtime).unwrap_or(self.mtime)
    }

    /// Its attributes, if known.
    pub fn posix(&self) -> Option<Posix> {
        self.posix.as_deref().cloned()
    }

    /// Sets (or forgets) its attributes.
    pub fn set_posix(&mut self, p: Option<Posix>) {
        self.posix = p.map(Arc::new);
    }

    /// Its attributes to change, made (all unknown) if there were none.
    pub fn posix_mut(&mut self) -> &mut Posix {
        Arc::make_mut(self.posix.get_or_insert_with(Arc::default))
    }

    pub fn dir(mtime: SystemTime) -> Entry {
        Entry {
            kind: Kind::Dir,
            size: 0,
            mtime,
            etag: None,
            target: None,
            posix: None,
        }
    }
}

#[derive(Debug, Clone)]
pub struct Listing {
    pub at: Instant,
    /// Keyed by the same allocation the node made from an entry takes as its name.
    pub entries: Arc<BTreeMap<Arc<str>, Entry>>,
}

/// What a directory's listing is asked to tell of its objects' metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MetaHeads {
    /// A HEAD per object whose metadata is not known yet, in directories whose listing
    /// shows their own marker (made by `mkdir` on flowfs or s3fs).
    Marked,
    /// A HEAD per object whose metadata is not known yet, in every directory, and one
    /// per subdirectory's marker.
    Always,
    /// Never: listings show the defaults (and symlinks as before).
    Never,
}
