//! A reference model of what docs/SEMANTICS.md promises, checked by property tests
//! (issue 13): random sequences of operations run on the core over the in-memory store
//! and on a plain model (names → inodes → bytes), compared after every step, and the
//! bucket compared with the model after the last one.
//!
//! Each mount runs on its own single-threaded runtime, so background uploads progress only
//! where the sequence says (`Yield`), and a crash is the runtime and the `Fs` dropped at
//! that point. A close is the FUSE close: `flush` now, `release` later, when the sequence
//! delivers it (the kernel sends RELEASE after close() has returned). Failures that
//! proptest shrinks are pinned as named tests at the bottom.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use flowfs_client::mock::{MockClient, Op as MockOp};
use flowfs_client::ClientError;
use flowfs_fs::{Fs, FsConfig, FsError};
use flowfs_fs::{OpenMode, ROOT};
use proptest::prelude::*;
use tokio::runtime::Runtime;

const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// Small parts, so that multipart and early uploads happen with small files.
const PART: u64 = 64 << 10;

#[derive(Debug, Clone)]
pub enum Step {
    Create(usize),
    Open {
        name: usize,
        write: bool,
        trunc: bool,
    },
    Write {
        h: usize,
        off: u32,
        len: u16,
        seed: u8,
    },
    Read {
        h: usize,
    },
    Truncate {
        h: usize,
        size: u32,
    },
    TruncatePath {
        name: usize,
        size: u32,
    },
    Fsync(usize),
    Close(usize),
    DeliverRelease(usize),
    Rename(usize, usize),
    Unlink(usize),
    RemotePut {
        name: usize,
        len: u16,
        seed: u8,
    },
    /// Another client deletes an object this mount never changed and has no handle on.
    RemoteDelete(usize),
    FailNextUpload,
    Yield(u8),
    /// The kernel drops its dentries (`drop_caches`, memory pressure): it forgets every
    /// inode no open file holds.
    Forget,
    Crash,
}

fn step() -> impl Strategy<Value = Step> {
    let n = 0..NAMES.len();
    let h = 0usize..4;
    prop_oneof![
        2 => n.clone().prop_map(Step::Create),
        3 => (n.clone(), any::<bool>(), any::<bool>())
            .prop_map(|(name, write, trunc)| Step::Open { name, write, trunc }),
        6 => (h.clone(), 0u32..200_000, 1u16..40_000, any::<u8>())
            .prop_map(|(h, off, len, seed)| Step::Write { h, off, len, seed }),
        2 => h.clone().prop_map(|h| Step::Read { h }),
        2 => (h.clone(), 0u32..200_000).prop_map(|(h, size)| Step::Truncate { h, size }),
        1 => (n.clone(), 0u32..200_000).prop_map(|(name, size)| Step::TruncatePath { name, size }),
        2 => h.clone().prop_map(Step::Fsync),
        4 => h.clone().prop_map(Step::Close),
        3 => (0usize..4).prop_map(Step::DeliverRelease),
        1 => (n.clone(), n.clone()).prop_map(|(a, b)| Step::Rename(a, b)),
        1 => n.clone().prop_map(Step::Unlink),
        1 => (n.clone(), 0u16..20_000, any::<u8>())
            .prop_map(|(name, len, seed)| Step::RemotePut { name, len, seed }),
        1 => n.clone().prop_map(Step::RemoteDelete),
        1 => Just(Step::FailNextUpload),
        3 => (1u8..20).prop_map(Step::Yield),
        1 => Just(Step::Forget),
        1 => Just(Step::Crash),
    ]
}

fn bytes(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seed))
        .collect()
}

struct Handle {
    fh: u64,
    ino: u64,
    /// Model inode.
    file: usize,
    write: bool,
    /// The model file's version at open: a read-only handle of a file changed since
    /// by another handle may see either version (SEMANTICS.md, "Consistency").
    version: u64,
}

#[derive(Default, Clone)]
struct MFile {
    data: Vec<u8>,
    version: u64,
    /// Put by another client and not touched by this mount since (opened for writing,
    /// truncated, renamed): another client may delete it.
    remote: bool,
}

/// What POSIX and SEMANTICS.md say the files are.
#[derive(Default)]
struct Model {
    files: Vec<MFile>,
    names: BTreeMap<String, usize>,
}

struct Mount {
    rt: Runtime,
    fs: Arc<Fs>,
    handles: Vec<Handle>,
    /// Closed (flushed) handles whose RELEASE the kernel has not delivered yet.
    releases: Vec<(u64, u64)>,
    /// The kernel's references per inode (one per lookup or create answered).
    looked: HashMap<u64, u64>,
}

struct World {
    dir: tempfile::TempDir,
    mock: Arc<MockClient>,
    model: Model,
    mount: Option<Mount>,
}

fn new_mount(mock: &Arc<MockClient>, cache: &std::path::Path) -> Mount {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
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
    }
}

impl World {
    fn new() -> World {
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

    fn m(&mut self) -> &mut Mount {
        self.mount.as_mut().expect("mounted")
    }

    fn ino_of(&mut self, name: &str) -> std::result::Result<u64, FsError> {
        let m = self.m();
        let fs = m.fs.clone();
        let ino = m.rt.block_on(fs.lookup(ROOT, name)).map(|a| a.ino)?;
        *m.looked.entry(ino).or_default() += 1;
        Ok(ino)
    }

    fn forget(&mut self) {
        let Some(m) = self.mount.as_mut() else { return };
        let held: Vec<u64> = (m.handles.iter().map(|h| h.ino))
            .chain(m.releases.iter().map(|r| r.1))
            .collect();
        let gone: Vec<(u64, u64)> = (m.looked.iter())
            .filter(|(ino, _)| !held.contains(ino))
            .map(|(&ino, &n)| (ino, n))
            .collect();
        for (ino, n) in gone {
            m.looked.remove(&ino);
            m.fs.forget(ino, n);
        }
    }

    fn open(&mut self, name: usize, write: bool, trunc: bool) {
        let n = NAMES[name];
        let Some(&file) = self.model.names.get(n) else {
            assert!(
                matches!(self.ino_of(n), Err(FsError::NotFound)),
                "{n} exists"
            );
            return;
        };
        let ino = self.ino_of(n).expect("lookup");
        let m = self.m();
        let fs = m.fs.clone();
        let (fh, _) =
            m.rt.block_on(fs.open(ino, OpenMode::of(write, write && trunc)))
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

    fn create(&mut self, name: usize) {
        let n = NAMES[name];
        if self.model.names.contains_key(n) {
            return self.open(name, true, true);
        }
        let m = self.m();
        let fs = m.fs.clone();
        let (a, fh) = m.rt.block_on(fs.create(ROOT, n, 0o644)).expect("create");
        *m.looked.entry(a.ino).or_default() += 1;
        self.model.files.push(MFile::default());
        let file = self.model.files.len() - 1;
        self.model.names.insert(n.to_string(), file);
        self.m().handles.push(Handle {
            fh,
            ino: a.ino,
            file,
            write: true,
            version: 0,
        });
    }

    fn handle(&mut self, h: usize) -> Option<(u64, u64, usize, bool)> {
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
        let m = self.m();
        let fs = m.fs.clone();
        m.rt.block_on(fs.setattr(ino, None, Some(size as u64), None, fh))
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

    /// What the kernel does before an unlink or a rename of a name whose entry has timed
    /// out (the model's TTL is 0): it looks the name up again, and a name another client
    /// deleted is ENOENT there, before flowfs is asked to remove it.
    fn revalidate(&mut self, name: &str) -> bool {
        match self.ino_of(name) {
            Err(FsError::NotFound) => {
                assert!(!self.model.names.contains_key(name), "{name} lost");
                false
            }
            r => {
                r.expect("lookup");
                true
            }
        }
    }

    fn rename(&mut self, a: usize, b: usize) {
        let (from, to) = (NAMES[a], NAMES[b]);
        if !self.revalidate(from) {
            return;
        }
        let m = self.m();
        let fs = m.fs.clone();
        let r = m.rt.block_on(fs.rename(ROOT, from, ROOT, to, false));
        match self.model.names.remove(from) {
            None => assert!(
                matches!(r, Err(FsError::NotFound)),
                "rename of nothing: {r:?}"
            ),
            Some(f) => {
                r.expect("rename");
                self.model.files[f].remote = false;
                self.model.names.insert(to.to_string(), f);
            }
        }
    }

    fn unlink(&mut self, name: usize) {
        let n = NAMES[name];
        if !self.revalidate(n) {
            return;
        }
        let m = self.m();
        let fs = m.fs.clone();
        let r = m.rt.block_on(fs.unlink(ROOT, n));
        match self.model.names.remove(n) {
            None => assert!(
                matches!(r, Err(FsError::NotFound)),
                "unlink of nothing: {r:?}"
            ),
            Some(_) => r.expect("unlink"),
        }
    }

    fn remote_put(&mut self, name: usize, len: u16, seed: u8) {
        // Another client writes a name this mount does not hold (a conflict with a
        // name written here has no promised winner).
        let n = NAMES[name];
        if self.model.names.contains_key(n) {
            return;
        }
        let data = bytes(len as usize, seed);
        self.mock.insert(n, data.clone());
        self.model.files.push(MFile {
            data,
            version: 0,
            remote: true,
        });
        self.model
            .names
            .insert(n.to_string(), self.model.files.len() - 1);
    }

    fn remote_delete(&mut self, name: usize) {
        let n = NAMES[name];
        let Some(&file) = self.model.names.get(n) else {
            return;
        };
        // An open reader of an object deleted under it has no promised outcome; a closed
        // one's late RELEASE reads nothing.
        let used = (self.mount.as_ref()).is_some_and(|m| m.handles.iter().any(|h| h.file == file));
        if !self.model.files[file].remote || used {
            return;
        }
        self.mock.remove(n);
        self.model.names.remove(n);
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
    }

    fn apply(&mut self, s: &Step) {
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
                if let Some(&file) = self.model.names.get(NAMES[name]) {
                    let ino = self.ino_of(NAMES[name]).expect("lookup");
                    self.truncate(ino, None, file, size);
                }
            }
            Step::Fsync(h) => {
                if let Some((fh, ..)) = self.handle(h) {
                    let m = self.m();
                    let fs = m.fs.clone();
                    // May report an injected upload failure; nothing is lost by it.
                    let _ = m.rt.block_on(fs.fsync(fh));
                }
            }
            Step::Close(h) => self.close(h),
            Step::DeliverRelease(i) => self.deliver_release(i),
            Step::Rename(a, b) => self.rename(a, b),
            Step::Unlink(n) => self.unlink(n),
            Step::RemotePut { name, len, seed } => self.remote_put(name, len, seed),
            Step::RemoteDelete(n) => self.remote_delete(n),
            Step::FailNextUpload => {
                let e = || ClientError::Transient("injected".into());
                self.mock.fail(MockOp::Put, 0, e(), 1);
                self.mock.fail(MockOp::UploadPart, 0, e(), 1);
            }
            Step::Yield(n) => {
                let m = self.m();
                m.rt.block_on(async {
                    for _ in 0..n {
                        tokio::task::yield_now().await;
                    }
                });
            }
            Step::Forget => self.forget(),
            Step::Crash => self.crash(),
        }
    }

    /// An open handle reads what the model says its file holds.
    fn check_handle(&mut self, h: usize) {
        let Some(m) = self.mount.as_ref() else { return };
        let Some(x) = m.handles.get(h % m.handles.len().max(1)) else {
            return;
        };
        let f = &self.model.files[x.file];
        if !x.write && x.version != f.version {
            return;
        }
        let got =
            m.rt.block_on(m.fs.read(x.fh, 0, f.data.len() as u32 + 1))
                .expect("read");
        assert!(
            got[..] == f.data[..],
            "handle {h}: {} bytes, model {}",
            got.len(),
            f.data.len()
        );
    }

    /// Every name of the model, and only those, with its size and bytes.
    fn check_names(&mut self) {
        let want: Vec<(String, usize)> = self.model.names.clone().into_iter().collect();
        let m = self.m();
        let fs = m.fs.clone();
        let listed = m.rt.block_on(crate::common::names(&fs, ROOT));
        let names: Vec<&String> = want.iter().map(|(n, _)| n).collect();
        assert_eq!(listed.iter().collect::<Vec<_>>(), names, "listing");
        for (name, file) in want {
            let ino = self
                .ino_of(&name)
                .unwrap_or_else(|e| panic!("lookup {name}: {e:?}"));
            let f = &self.model.files[file];
            let m = self.mount.as_ref().expect("mounted");
            let fs = m.fs.clone();
            let a = m.rt.block_on(fs.getattr(ino)).expect("getattr");
            assert_eq!(a.size, f.data.len() as u64, "size of {name}");
            let got = m.rt.block_on(crate::common::read_all(&fs, ino));
            assert!(
                got == f.data,
                "bytes of {name}: {} vs {}",
                got.len(),
                f.data.len()
            );
        }
    }

    /// After an unmount (releases delivered, every upload waited for), the bucket holds
    /// exactly the model.
    fn check_bucket(&mut self) {
        self.mock.clear_faults();
        let m = self.mount.take().expect("mounted");
        let _e = m.rt.enter();
        for h in &m.handles {
            let _ = m.fs.flush(h.fh);
            m.fs.release(h.fh).expect("release");
        }
        for (fh, _) in &m.releases {
            m.fs.release(*fh).expect("release");
        }
        let failed = m.rt.block_on(m.fs.flush_all());
        assert!(failed.is_empty(), "unmount: {failed:?}");
        let want: HashMap<String, Vec<u8>> = self
            .model
            .names
            .iter()
            .map(|(n, f)| (n.clone(), self.model.files[*f].data.clone()))
            .collect();
        let mut keys = self.mock.keys();
        keys.sort();
        let mut names: Vec<&String> = want.keys().collect();
        names.sort();
        assert_eq!(keys.iter().collect::<Vec<_>>(), names, "keys in the bucket");
        for (n, d) in &want {
            assert!(self.mock.object(n).as_deref() == Some(&d[..]), "object {n}");
        }
        assert_eq!(self.mock.open_uploads(), 0, "multipart uploads left open");
    }
}

fn run(steps: &[Step]) {
    let mut w = World::new();
    for s in steps {
        w.apply(s);
        w.check_names();
    }
    w.check_bucket();
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: 96,
        failure_persistence: None,
        ..ProptestConfig::default()
    })]
    #[test]
    fn the_core_behaves_as_the_model(steps in proptest::collection::vec(step(), 1..40)) {
        run(&steps);
    }
}

// ---- shrunk failures, pinned -------------------------------------------------------

/// A file not uploaded yet, renamed over another client's object and then unlinked, left
/// that object in the bucket: the unlink thought nothing of the file had been uploaded.
#[test]
fn an_unlinked_file_renamed_over_a_remote_object_takes_it_along() {
    use Step::*;
    run(&[
        Create(0),
        RemotePut {
            name: 3,
            len: 0,
            seed: 0,
        },
        Rename(0, 3),
        Unlink(3),
    ]);
}

/// An early upload dropped by a change to its sent bytes was aborted by a task the
/// unmount did not wait for: the upload stayed open in the bucket.
#[test]
fn an_early_upload_given_up_is_aborted_before_unmount_returns() {
    use Step::*;
    run(&[
        Create(0),
        Write {
            h: 0,
            off: 107_669,
            len: 23_403,
            seed: 0,
        },
        Write {
            h: 0,
            off: 0,
            len: 1,
            seed: 0,
        },
    ]);
}

/// `flowfs unmount` reported a failed upload of a name the file had left: the failure
/// was kept by key, and the file, renamed, went up under its new name.
#[test]
fn a_failure_before_a_rename_is_not_reported_once_the_file_is_uploaded() {
    use Step::*;
    run(&[Create(0), Create(0), FailNextUpload, Fsync(0), Rename(0, 1)]);
}

/// A file created over another client's object and renamed, then looked up once the TTL
/// had passed: the lookup asked the bucket by name (a HEAD and a one-key LIST, no longer
/// a listing merged with what is staged here), which holds nothing under the new name
/// before the upload.
#[test]
fn a_staged_file_renamed_is_found_by_a_lookup_after_the_ttl() {
    use Step::*;
    run(&[
        RemotePut {
            name: 0,
            len: 0,
            seed: 0,
        },
        Create(0),
        Rename(0, 1),
    ]);
}

/// A file staged by a truncate whose upload failed, renamed, then its attributes asked
/// after the TTL: the bucket had nothing under its new name.
#[test]
fn a_staged_file_renamed_after_a_failed_upload_keeps_its_attributes() {
    use Step::*;
    run(&[
        RemotePut {
            name: 2,
            len: 0,
            seed: 0,
        },
        TruncatePath { name: 2, size: 0 },
        FailNextUpload,
        Rename(2, 0),
    ]);
}

/// A file changed by a truncate (its upload queued, not yet sent), then forgotten by the
/// kernel (`drop_caches`): the node went with the kernel's last reference, and the next
/// lookup made a new one from the bucket's older copy, its size and bytes, while the
/// change was still on its way up.
#[test]
fn a_changed_file_the_kernel_forgot_shows_its_change_until_it_is_uploaded() {
    use Step::*;
    run(&[Create(3), Crash, TruncatePath { name: 3, size: 1 }, Forget]);
}
