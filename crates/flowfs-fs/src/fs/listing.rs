//! A directory's entries from the store (`Fs::list_remote`): all its listing pages, with
//! the HEADs that tell symlinks and, where `--meta-heads` asks, attributes kept in
//! objects' metadata, and the attributes of its subdirectories' markers
//! (`Remote::head_dirs`), sent together with `batched`; but for what the namespace knows
//! already under the same ETag (`known_heads`).

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::Arc;

use flowfs_client::{ClientError, ListPage, ObjectClient, ObjectInfo, ObjectMeta};

use crate::error::Result;
use crate::inode::{Entry, Kind, MetaHeads};
use crate::meta::Posix;

use super::names::DirView;
use super::remote::{file_entry, meta_entry, same_etag, Remote};
use super::Listings;
use super::{batched, pages, valid_name, MAX_SYMLINK, RELIST_MAX};

/// A listing's entries, and which of them a HEAD may tell more of.
#[derive(Default)]
struct Listed {
    entries: BTreeMap<String, Entry>,
    /// Objects that may be flowfs symlinks (a HEAD each, always).
    candidates: Vec<(String, String)>,
    /// Objects that may carry attributes in their metadata, asked for only where
    /// `--meta-heads` says: a listing of plain objects costs no HEAD.
    others: Vec<(String, String)>,
    /// The directory has its own marker (flowfs's mkdir, s3fs).
    marked: bool,
    /// Subdirectories whose markers are asked for their attributes (`always`).
    dirs: Vec<(String, String)>,
}

/// Only small objects written as single-part multipart uploads can be flowfs symlinks
/// (that is how flowfs writes them), so a listing needs a HEAD for those alone.
fn maybe_symlink(info: &ObjectInfo) -> bool {
    info.size <= MAX_SYMLINK && info.etag.trim_matches('"').ends_with("-1")
}

/// A HEAD of `key`, answered with the `name` it is for (a batch of a listing's names).
fn head_named(
    client: &Arc<dyn ObjectClient>,
    (name, key): &(String, String),
) -> impl Future<Output = (String, std::result::Result<ObjectMeta, ClientError>)> {
    let (client, name, key) = (client.clone(), name.clone(), key.clone());
    async move { (name, client.head(&key).await) }
}

/// Adds to the HEADs of a listing (`candidates`, the possible `-1` symlinks) the
/// objects whose metadata `--meta-heads` asks for: every one in a marked directory
/// (`marked`), or in every directory (`always`).
fn meta_candidates(
    heads: MetaHeads,
    marked: bool,
    entries: &BTreeMap<String, Entry>,
    candidates: &mut Vec<(String, String)>,
    mut others: Vec<(String, String)>,
) {
    match heads {
        MetaHeads::Always => {}
        MetaHeads::Marked if marked => {}
        // A symlink written into a marked directory is one PUT, with no `-1` ETag (a
        // listing there reads every object's metadata unless `--meta-heads never`):
        // with `never`, the small objects there are its candidates.
        MetaHeads::Never if marked => {
            others.retain(|(name, _)| entries.get(name).is_some_and(|e| e.size <= MAX_SYMLINK));
        }
        MetaHeads::Marked | MetaHeads::Never => return,
    }
    candidates.append(&mut others);
}

/// Drops from `dirs` (name, marker key) the subdirectories whose attributes directory
/// `d` knows already, as for its own marker.
fn unknown_dirs(d: &DirView<'_>, dirs: &mut Vec<(String, String)>) {
    dirs.retain(|(name, _)| {
        let known = d.child_entry(name).and_then(|e| e.posix());
        known.is_none_or(|p| p.mode.is_none())
    })
}

/// Drops from `candidates` (name, key) of a listing of `d` those its `entries` show as
/// directories and those directory `d` knows under the same ETag (a node, or its previous
/// listing), whose kind, target and attributes it copies into `entries`: a pipeline's
/// task directories hold many symlinks (Nextflow stages inputs so), each a HEAD else.
fn known_heads(
    d: &DirView<'_>,
    candidates: &mut Vec<(String, String)>,
    entries: &mut BTreeMap<String, Entry>,
) {
    // An object listed before the prefix of the same name was replaced above only if the
    // prefix came later.
    candidates.retain(|(n, _)| entries.get(n).is_some_and(|e| e.kind != Kind::Dir));
    let before = d.listing();
    let resolved = |e: &Entry| (e.kind == Kind::Symlink && e.target.is_some()) || e.posix.is_some();
    candidates.retain(|(name, _)| {
        let node = d.child_entry(name);
        let listed_before = before.and_then(|l| l.entries.get(name.as_str()));
        let Some(listed) = entries.get_mut(name) else {
            return false;
        };
        let known = [node, listed_before].into_iter().flatten().find(|k| {
            k.kind != Kind::Dir
                && resolved(k)
                && same_etag(k.etag.as_deref(), listed.etag.as_deref())
        });
        match known {
            Some(k) => {
                listed.kind = k.kind;
                listed.target = k.target.clone();
                listed.posix = k.posix.clone();
                false
            }
            None => true,
        }
    });
}

impl Listings {
    /// Whether the store has an object or a directory at `path` (one HEAD, then a LIST).
    pub(super) async fn in_store(&self, path: &str) -> Result<bool> {
        Ok(self
            .remote
            .stat(&self.keys.key(path), false)
            .await?
            .is_some())
    }

    /// Every entry of a directory, all listing pages, with symlinks resolved, the
    /// attributes its own marker holds (`marker_posix`), and whether it has a marker.
    /// `None` when it has more than `max_pages` pages of keys: a listing fetched ahead of
    /// a walk gives up on a directory that big.
    pub(super) async fn list_remote(
        &self,
        ino: u64,
        path: &str,
        max_pages: usize,
    ) -> Result<Option<(BTreeMap<String, Entry>, Option<Posix>, bool)>> {
        let prefix = self.keys.dir_prefix(path);
        let splits = self.ns.read_dir(ino, |d| {
            let last = d.listing().filter(|l| l.entries.len() <= RELIST_MAX);
            last.map(pages::splits_of).unwrap_or_default()
        });
        let Some(pages) = self.remote.list_pages(&prefix, &splits, max_pages).await? else {
            return Ok(None);
        };
        let heads = self.remote.heads_in(&prefix);
        let Listed {
            mut entries,
            mut candidates,
            others,
            marked,
            mut dirs,
        } = self.remote.entries_of(&prefix, &pages, heads);
        meta_candidates(heads, marked, &entries, &mut candidates, others);
        // What this mount knows needs no HEAD: the directory's own attributes too.
        let known = self.ns.read_dir(ino, |d| {
            unknown_dirs(d, &mut dirs);
            known_heads(d, &mut candidates, &mut entries);
            d.entry()
                .and_then(|e| e.posix())
                .is_some_and(|p| p.mode.is_some())
        });
        let marker = async {
            match marked && !known {
                true => self.remote.marker_posix(&prefix).await,
                false => Ok(None),
            }
        };
        // The three sets of HEADs at once: one round trip of latency, not three.
        let (heads, marker, subdirs) = tokio::join!(
            self.remote.head_candidates(candidates, &mut entries),
            marker,
            self.remote.head_dirs(dirs)
        );
        heads?;
        for (name, p) in subdirs? {
            if let Some(e) = entries.get_mut(&name) {
                e.set_posix(Some(p));
            }
        }
        Ok(Some((entries, marker?, marked)))
    }
}

impl Remote {
    /// The entries of a listing's pages under `prefix` (a valid name each; a directory wins
    /// over a file of its name; objects still landing for removed files left out), and
    /// which of them a HEAD may tell more of (`heads`, `--meta-heads`).
    fn entries_of(&self, prefix: &str, pages: &[ListPage], heads: MetaHeads) -> Listed {
        let mut l = Listed::default();
        // Objects of removed files still landing, deleted once they have: not shown.
        let strays = self.in_flight().strays();
        for page in pages {
            for p in &page.prefixes {
                let name = &p[prefix.len()..p.len() - 1];
                if valid_name(name).is_ok() {
                    l.entries.insert(name.to_string(), self.dir_entry());
                    if heads == MetaHeads::Always {
                        l.dirs.push((name.to_string(), p.clone()));
                    }
                }
            }
            for o in &page.objects {
                let name = &o.key[prefix.len()..];
                // The directory's own marker (flowfs's mkdir, s3fs): its objects may
                // well carry attributes.
                l.marked |= name.is_empty() && !prefix.is_empty();
                if valid_name(name).is_err() || strays.contains(&o.key) {
                    continue;
                }
                if l.entries
                    .get(name)
                    .is_some_and(|e: &Entry| e.kind == Kind::Dir)
                {
                    continue;
                }
                // The listing gave its metadata (Azure): all a HEAD would.
                if let Some(m) = page.metadata.get(&o.key) {
                    let meta = ObjectMeta {
                        info: o.clone(),
                        metadata: m.clone(),
                        checksum: None,
                    };
                    l.entries.insert(name.to_string(), meta_entry(&meta));
                    continue;
                }
                if maybe_symlink(o) {
                    l.candidates.push((name.to_string(), o.key.clone()));
                } else {
                    l.others.push((name.to_string(), o.key.clone()));
                }
                l.entries.insert(name.to_string(), file_entry(o));
            }
        }
        l
    }

    /// The attributes of subdirectories `dirs` (name, marker key) of a listing, from
    /// their markers, a HEAD each (`--meta-heads always`; an archive's index answers them
    /// without a request). A directory without a marker keeps `--dir-mode`.
    async fn head_dirs(&self, dirs: Vec<(String, String)>) -> Result<Vec<(String, Posix)>> {
        let client = self.client();
        let mut found = Vec::new();
        batched(
            &dirs,
            |named| head_named(client, named),
            |(name, head)| {
                match head {
                    Ok(meta) => found.push((name, self.dir_posix(&meta.metadata))),
                    // No marker: `--dir-mode`, known now, so that it is not asked again.
                    Err(ClientError::NotFound(_)) => {
                        found.push((name, self.dir_posix(&HashMap::new())))
                    }
                    Err(e) => return Err(e.into()),
                }
                Ok(())
            },
        )
        .await?;
        Ok(found)
    }

    /// Reads the metadata of `candidates` (name, key) of a listing into `entries`:
    /// symlinks and attributes, a HEAD each; a name gone since is dropped.
    async fn head_candidates(
        &self,
        candidates: Vec<(String, String)>,
        entries: &mut BTreeMap<String, Entry>,
    ) -> Result<()> {
        let client = self.client();
        batched(
            &candidates,
            |named| head_named(client, named),
            |(name, head)| {
                match head {
                    Ok(meta) => {
                        entries.insert(name, meta_entry(&meta));
                    }
                    Err(ClientError::NotFound(_)) => {
                        entries.remove(&name);
                    }
                    Err(e) => return Err(e.into()),
                }
                Ok(())
            },
        )
        .await
    }
}
