//! The world a sequence runs in: the store, the mount (its runtime, its open handles, the
//! releases the kernel has yet to deliver, the references the kernel holds) and the model,
//! and each step done to both the way the kernel would ask it of the core.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use flowfs_client::mock::{MockClient, Op as MockOp};
use flowfs_client::ClientError;
use flowfs_fs::{Fs, FsConfig, FsError};
use flowfs_fs::{OpenMode, ROOT};
use tokio::runtime::Runtime;

use super::{bytes, path, split, Step, PART};

pub(super) struct Handle {
    pub(super) fh: u64,
    pub(super) ino: u64,
    /// Model file.
    pub(super) file: usize,
    pub(super) write: bool,
    /// The model file's version at open: a read-only handle of a file changed since
    /// by another handle may see either version (SEMANTICS.md, "Consistency").
    pub(super) version: u64,
}

#[derive(Default, Clone)]
pub(super) struct MFile {
    pub(super) data: Vec<u8>,
    pub(super) version: u64,
    /// Put by another client and not touched by this mount since (opened for writing,
    /// truncated, renamed): another client may delete it.
    pub(super) remote: bool,
}

/// What POSIX and SEMANTICS.md say the files are.
#[derive(Default)]
pub(super) struct Model {
    pub(super) files: Vec<MFile>,
    /// Every file's path (`x/a` below a directory).
    pub(super) names: BTreeMap<String, usize>,
    /// The directories made by `mkdir` (each has its marker in the bucket).
    pub(super) dirs: BTreeSet<String>,
}

impl Model {
    pub(super) fn has_dir(&self, dir: Option<&str>) -> bool {
        dir.is_none_or(|d| self.dirs.contains(d))
    }

    pub(super) fn files_below(&self, dir: &str) -> Vec<String> {
        let prefix = format!("{dir}/");
        (self.names.keys())
            .filter(|n| n.starts_with(&prefix))
            .cloned()
            .collect()
    }
}

pub(super) struct Mount {
    pub(super) rt: Runtime,
    pub(super) fs: Arc<Fs>,
    pub(super) handles: Vec<Handle>,
    /// Closed (flushed) handles whose RELEASE the kernel has not delivered yet.
    pub(super) releases: Vec<(u64, u64)>,
    /// The kernel's references per inode (one per lookup or create answered).
    pub(super) looked: HashMap<u64, u64>,
    /// The directories' inodes: the kernel keeps a directory while a file below it is
    /// open (the file's dentry holds its parent's).
    pub(super) dir_inos: HashSet<u64>,
}

pub(super) struct World {
    dir: tempfile::TempDir,
    pub(super) mock: Arc<MockClient>,
    pub(super) model: Model,
    pub(super) mount: Option<Mount>,
}

fn new_mount(mock: &Arc<MockClient>, cache: &std::path::Path) -> Mount {
    let rt = crate::common::current_thread();
    let mut cfg = FsConfig::new("b", "", cache.to_path_buf());
    cfg.part_size = PART;
    // Every open and lookup asks the store: another client's puts are seen at once.
    cfg.metadata_ttl = Duration::ZERO;
    let fs = {
        let _e = rt.enter();
        Arc::new(Fs::new(cfg, mock.clone()).expect("fs"))
    };
    let (_, failed) = rt.block_on(fs.recover());
    assert!(failed.is_empty(), "recovery failed: {failed:?}");
    Mount {
        rt,
        fs,
        handles: Vec::new(),
        releases: Vec::new(),
        looked: HashMap::new(),
        dir_inos: HashSet::new(),
    }
}

impl World {
    pub(super) fn new() -> World {
        let dir = tempfile::tempdir().expect("tempdir");
        let mock = Arc::new(MockClient::new());
        let mount = new_mount(&mock, dir.path());
        World {
            dir,
            mock,
            model: Model::default(),
            mount: Some(mount),
        }
    }

    /// Runs a synchronous call of the core inside the runtime, as the FUSE threads do.
    fn sync<R>(&self, f: impl FnOnce(&Arc<Fs>) -> R) -> R {
        let m = self.mount.as_ref().expect("mounted");
        let _e = m.rt.enter();
        f(&m.fs)
    }

    pub(super) fn m(&mut self) -> &mut Mount {
        self.mount.as_mut().expect("mounted")
    }

    /// Runs an async call of the core to its end.
    pub(super) fn block<R, F: std::future::Future<Output = R>>(
        &mut self,
        f: impl FnOnce(Arc<Fs>) -> F,
    ) -> R {
        let m = self.m();
        let fs = m.fs.clone();
        m.rt.block_on(f(fs))
    }

    /// A lookup as the kernel sends it: an answered one is a reference the kernel holds.
    pub(super) fn lookup(&mut self, parent: u64, name: &str) -> Result<u64, FsError> {
        let a = self.block(|fs| async move { fs.lookup(parent, name).await })?;
        let m = self.m();
        *m.looked.entry(a.ino).or_default() += 1;
        if a.kind == flowfs_fs::Kind::Dir {
            m.dir_inos.insert(a.ino);
        }
        Ok(a.ino)
    }

    /// The inode of directory `dir` (the root for `None`), looked up as the kernel walks a
    /// path; `None` (after checking the core agrees) if the model has no such directory.
    pub(super) fn dir_ino(&mut self, dir: Option<&str>) -> Option<u64> {
        let Some(d) = dir else { return Some(ROOT) };
        let r = self.lookup(ROOT, d);
        if self.model.dirs.contains(d) {
            Some(r.unwrap_or_else(|e| panic!("lookup of directory {d}: {e:?}")))
        } else {
            assert!(matches!(r, Err(FsError::NotFound)), "{d} exists: {r:?}");
            None
        }
    }

    pub(super) fn ino_of(&mut self, path: &str) -> Result<u64, FsError> {
        let (dir, leaf) = split(path);
        let parent = match dir {
            None => ROOT,
            Some(d) => self.lookup(ROOT, d)?,
        };
        self.lookup(parent, leaf)
    }

    fn forget(&mut self) {
        let Some(m) = self.mount.as_mut() else { return };
        let mut held: HashSet<u64> = (m.handles.iter().map(|h| h.ino))
            .chain(m.releases.iter().map(|r| r.1))
            .collect();
        if !held.is_empty() {
            // A directory may hold an open file: the model keeps every one then.
            held.extend(m.dir_inos.iter().copied());
        }
        let gone: Vec<(u64, u64)> = (m.looked.iter())
            .filter(|(ino, _)| !held.contains(ino))
            .map(|(&ino, &n)| (ino, n))
            .collect();
        for (ino, n) in gone {
            m.looked.remove(&ino);
            m.fs.forget(ino, n);
        }
    }

    fn open(&mut self, p: usize, write: bool, trunc: bool) {
        let n = path(p);
        let Some(&file) = self.model.names.get(&n) else {
            let r = self.ino_of(&n);
            assert!(matches!(r, Err(FsError::NotFound)), "{n} exists: {r:?}");
            return;
        };
        let ino = self.ino_of(&n).expect("lookup");
        let mode = OpenMode::of(write, write && trunc);
        let (fh, _) = self
            .block(|fs| async move { fs.open(ino, mode).await })
            .expect("open");
        if write {
            self.model.files[file].remote = false;
        }
        if write && trunc {
            let f = &mut self.model.files[file];
            f.data.clear();
            f.version += 1;
        }
        let version = self.model.files[file].version;
        self.m().handles.push(Handle {
            fh,
            ino,
            file,
            write,
            version,
        });
    }

    fn create(&mut self, p: usize) {
        let n = path(p);
        if self.model.names.contains_key(&n) {
            return self.open(p, true, true);
        }
        let (dir, leaf) = split(&n);
        let Some(parent) = self.dir_ino(dir) else {
            return;
        };
        let (a, fh) = self
            .block(|fs| async move { fs.create(parent, leaf, 0o644, None).await })
            .expect("create");
        *self.m().looked.entry(a.ino).or_default() += 1;
        self.model.files.push(MFile::default());
        let file = self.model.files.len() - 1;
        self.model.names.insert(n.clone(), file);
        self.m().handles.push(Handle {
            fh,
            ino: a.ino,
            file,
            write: true,
            version: 0,
        });
    }

    pub(super) fn handle(&mut self, h: usize) -> Option<(u64, u64, usize, bool)> {
        let m = self.mount.as_ref()?;
        let x = m.handles.get(h % m.handles.len().max(1))?;
        Some((x.fh, x.ino, x.file, x.write))
    }

    fn write(&mut self, h: usize, off: u32, len: u16, seed: u8) {
        let Some((fh, _, file, true)) = self.handle(h) else {
            return;
        };
        let data = bytes(len as usize, seed);
        self.sync(|fs| fs.write(fh, off as u64, &data))
            .expect("write");
        let f = &mut self.model.files[file];
        let end = off as usize + data.len();
        if f.data.len() < end {
            f.data.resize(end, 0);
        }
        f.data[off as usize..end].copy_from_slice(&data);
        f.version += 1;
    }

    fn truncate(&mut self, ino: u64, fh: Option<u64>, file: usize, size: u32) {
        self.block(|fs| async move { fs.setattr(ino, None, Some(size as u64), None, fh).await })
            .expect("truncate");
        let f = &mut self.model.files[file];
        f.data.resize(size as usize, 0);
        f.version += 1;
        f.remote = false;
    }

    fn close(&mut self, h: usize) {
        let Some((fh, ino, ..)) = self.handle(h) else {
            return;
        };
        let m = self.m();
        let i = m.handles.iter().position(|x| x.fh == fh).expect("handle");
        m.handles.remove(i);
        m.releases.push((fh, ino));
        // An upload failure may be reported here; the data stays staged.
        let _ = self.sync(|fs| fs.flush(fh));
    }

    fn deliver_release(&mut self, i: usize) {
        let Some(m) = self.mount.as_mut() else { return };
        if m.releases.is_empty() {
            return;
        }
        let (fh, _) = m.releases.remove(i % m.releases.len());
        self.sync(|fs| fs.release(fh)).expect("release");
    }

    fn crash(&mut self) {
        let Some(m) = self.mount.take() else { return };
        let Mount { rt, fs, .. } = m;
        // The runtime goes first: its tasks hold the Fs, and with it the staging lock.
        drop(rt);
        assert_eq!(Arc::strong_count(&fs), 1, "a task outlived its runtime");
        drop(fs);
        self.mock.clear_faults();
        self.mount = Some(new_mount(&self.mock, self.dir.path()));
        self.split_unjoined_links();
    }

    fn fsync(&mut self, h: usize) {
        if let Some((fh, ..)) = self.handle(h) {
            // May report an injected upload failure; nothing is lost by it.
            let _ = self.block(|fs| async move { fs.fsync(fh).await });
        }
    }

    fn fail_next_upload(&mut self) {
        let e = || ClientError::Transient("injected".into());
        self.mock.fail(MockOp::Put, 0, e(), 1);
        self.mock.fail(MockOp::UploadPart, 0, e(), 1);
    }

    fn yield_now(&mut self, n: u8) {
        self.block(|_| async move {
            for _ in 0..n {
                tokio::task::yield_now().await;
            }
        });
    }

    pub(super) fn apply(&mut self, s: &Step) {
        match *s {
            Step::Create(n) => self.create(n),
            Step::Open { name, write, trunc } => self.open(name, write, trunc),
            Step::Write { h, off, len, seed } => self.write(h, off, len, seed),
            Step::Read { h } => self.check_handle(h),
            Step::Truncate { h, size } => {
                if let Some((fh, ino, file, true)) = self.handle(h) {
                    self.truncate(ino, Some(fh), file, size);
                }
            }
            Step::TruncatePath { name, size } => {
                if let Some(&file) = self.model.names.get(&path(name)) {
                    let ino = self.ino_of(&path(name)).expect("lookup");
                    self.truncate(ino, None, file, size);
                }
            }
            Step::Fsync(h) => self.fsync(h),
            Step::Close(h) => self.close(h),
            Step::DeliverRelease(i) => self.deliver_release(i),
            Step::Rename(a, b) => self.rename(a, b),
            Step::Link(a, b) => self.link(a, b),
            Step::Unlink(n) => self.unlink(n),
            Step::Mkdir(d) => self.mkdir(d),
            Step::Rmdir(d) => self.rmdir(d),
            Step::RenameDir(a, b) => self.rename_dir(a, b),
            Step::RemotePut { name, len, seed } => self.remote_put(name, len, seed),
            Step::RemoteDelete(n) => self.remote_delete(n),
            Step::FailNextUpload => self.fail_next_upload(),
            Step::Yield(n) => self.yield_now(n),
            Step::Forget => self.forget(),
            Step::Crash => self.crash(),
        }
    }
}
