//! The steps that change names: rename and unlink of files, mkdir, rmdir and rename of
//! directories, and another client's puts and deletes, each done to the core as the kernel
//! asks it (a path walked, a timed-out name looked up again first) and to the model.

use flowfs_fs::{FsError, ROOT};

use super::world::{MFile, World};
use super::{bytes, path, split, DIRS};

impl World {
    /// What the kernel does before an unlink or a rename of a name whose entry has timed
    /// out (the model's TTL is 0): it walks the path again, and a name another client
    /// deleted is ENOENT there, before flowfs is asked to remove it. The parent's inode,
    /// if the name is there.
    fn revalidate(&mut self, path: &str) -> Option<u64> {
        let (dir, leaf) = split(path);
        let parent = self.dir_ino(dir)?;
        match self.lookup(parent, leaf) {
            Err(FsError::NotFound) => {
                assert!(!self.model.names.contains_key(path), "{path} lost");
                None
            }
            r => {
                r.expect("lookup");
                Some(parent)
            }
        }
    }

    pub(super) fn rename(&mut self, a: usize, b: usize) {
        let (from, to) = (path(a), path(b));
        let Some(parent) = self.revalidate(&from) else {
            return;
        };
        let (dir, leaf) = split(&to);
        let Some(newparent) = self.dir_ino(dir) else {
            return;
        };
        let old = split(&from).1;
        let r =
            self.block(|fs| async move { fs.rename(parent, old, newparent, leaf, false).await });
        r.expect("rename");
        // Two names of one file: rename(2) does nothing.
        if self.model.names.get(&from) == self.model.names.get(&to) {
            return;
        }
        let f = self.model.names.remove(&from).expect("revalidated");
        self.model.files[f].remote = false;
        self.model.names.insert(to, f);
    }

    /// `link`: the model file gets one more name. A link made while the file's upload
    /// fails (it makes the content durable first) fails with nothing changed.
    pub(super) fn link(&mut self, a: usize, b: usize) {
        let (from, to) = (path(a), path(b));
        let Some(&file) = self.model.names.get(&from) else {
            return;
        };
        let ino = self.ino_of(&from).expect("lookup");
        let (dir, leaf) = split(&to);
        let Some(newparent) = self.dir_ino(dir) else {
            return;
        };
        // The kernel looks the new name up first and answers EEXIST itself.
        match self.lookup(newparent, leaf) {
            Err(FsError::NotFound) => assert!(!self.model.names.contains_key(&to), "{to} lost"),
            r => {
                r.expect("lookup");
                assert!(self.model.names.contains_key(&to), "{to} exists");
                return;
            }
        }
        let r = self.block(|fs| async move { fs.link(ino, newparent, leaf).await });
        match r {
            Err(FsError::Upload(_) | FsError::Store(_)) => return,
            r => r.unwrap_or_else(|e| panic!("link {from} {to}: {e:?}")),
        };
        *self.m().looked.entry(ino).or_default() += 1;
        self.model.files[file].remote = false;
        self.model.names.insert(to, file);
    }

    /// After a remount, names of one file are one file again only where the mount joined
    /// them (same link id and ETag, SEMANTICS.md "Hard links"); the others are files of
    /// their own, with the same bytes. The model follows what the mount shows.
    pub(super) fn split_unjoined_links(&mut self) {
        let mut by_file: std::collections::BTreeMap<usize, Vec<String>> = Default::default();
        for (n, &f) in &self.model.names {
            by_file.entry(f).or_default().push(n.clone());
        }
        for (file, names) in by_file.into_iter().filter(|(_, v)| v.len() > 1) {
            let mut first_ino = None;
            for n in names {
                let ino = self.ino_of(&n).expect("lookup of a linked name");
                match first_ino {
                    None => first_ino = Some(ino),
                    Some(i) if i == ino => {}
                    Some(_) => {
                        let copy = self.model.files[file].clone();
                        self.model.files.push(copy);
                        let new = self.model.files.len() - 1;
                        self.model.names.insert(n, new);
                    }
                }
            }
        }
    }

    pub(super) fn unlink(&mut self, p: usize) {
        let n = path(p);
        let Some(parent) = self.revalidate(&n) else {
            return;
        };
        let leaf = split(&n).1;
        self.block(|fs| async move { fs.unlink(parent, leaf).await })
            .expect("unlink");
        self.model.names.remove(&n).expect("revalidated");
    }

    pub(super) fn mkdir(&mut self, d: usize) {
        let name = DIRS[d];
        // The kernel looks the name up first and answers EEXIST itself.
        if self.dir_ino(Some(name)).is_some() {
            return;
        }
        let a = match self.block(|fs| async move { fs.mkdir(ROOT, name, 0o755, None).await }) {
            // The marker's PUT failed (FailNextUpload): no directory, here or in the bucket.
            Err(FsError::Store(_)) => return,
            r => r.expect("mkdir"),
        };
        let m = self.m();
        *m.looked.entry(a.ino).or_default() += 1;
        m.dir_inos.insert(a.ino);
        self.model.dirs.insert(name.to_string());
    }

    pub(super) fn rmdir(&mut self, d: usize) {
        let name = DIRS[d];
        if self.dir_ino(Some(name)).is_none() {
            return;
        }
        let r = self.block(|fs| async move { fs.rmdir(ROOT, name).await });
        if self.model.files_below(name).is_empty() {
            r.unwrap_or_else(|e| panic!("rmdir {name}: {e:?}"));
            self.model.dirs.remove(name);
        } else {
            assert!(matches!(r, Err(FsError::NotEmpty)), "rmdir {name}: {r:?}");
        }
    }

    pub(super) fn rename_dir(&mut self, a: usize, b: usize) {
        let (from, to) = (DIRS[a], DIRS[b]);
        if a == b || self.dir_ino(Some(from)).is_none() {
            return;
        }
        let target = self.dir_ino(Some(to)).is_some();
        // A failure part-way leaves keys under both names (SEMANTICS.md): not modelled.
        self.mock.clear_faults();
        let r = self.block(|fs| async move { fs.rename(ROOT, from, ROOT, to, false).await });
        if target && !self.model.files_below(to).is_empty() {
            assert!(
                matches!(r, Err(FsError::NotEmpty)),
                "rename {from} {to}: {r:?}"
            );
            return;
        }
        r.unwrap_or_else(|e| panic!("rename {from} {to}: {e:?}"));
        for old in self.model.files_below(from) {
            let f = self.model.names.remove(&old).expect("listed");
            self.model.files[f].remote = false;
            let new = format!("{to}{}", &old[from.len()..]);
            self.model.names.insert(new, f);
        }
        self.model.dirs.remove(from);
        self.model.dirs.insert(to.to_string());
    }

    pub(super) fn remote_put(&mut self, p: usize, len: u16, seed: u8) {
        // Another client writes a name this mount does not hold (a conflict with a
        // name written here has no promised winner), in a directory that exists.
        let n = path(p);
        if self.model.names.contains_key(&n) || !self.model.has_dir(split(&n).0) {
            return;
        }
        let data = bytes(len as usize, seed);
        self.mock.insert(&n, data.clone());
        self.model.files.push(MFile {
            data,
            version: 0,
            remote: true,
        });
        self.model.names.insert(n, self.model.files.len() - 1);
    }

    pub(super) fn remote_delete(&mut self, p: usize) {
        let n = path(p);
        let Some(&file) = self.model.names.get(&n) else {
            return;
        };
        // An open reader of an object deleted under it has no promised outcome; a closed
        // one's late RELEASE reads nothing.
        let used = (self.mount.as_ref()).is_some_and(|m| m.handles.iter().any(|h| h.file == file));
        if !self.model.files[file].remote || used {
            return;
        }
        self.mock.remove(&n);
        self.model.names.remove(&n);
    }
}
