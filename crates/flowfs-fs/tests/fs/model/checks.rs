//! What is compared after every step (every listing, name, size and byte; an open handle's
//! bytes when the step reads) and after the last one (the bucket, once unmounted).

use std::collections::HashMap;

use flowfs_fs::ROOT;

use super::split;
use super::world::World;

impl World {
    /// An open handle reads what the model says its file holds.
    pub(super) fn check_handle(&mut self, h: usize) {
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

    /// What the model says a listing of `dir` (the root for `None`) shows, sorted.
    fn model_listing(&self, dir: Option<&str>) -> Vec<String> {
        let mut want: Vec<String> = (self.model.names.keys())
            .filter_map(|p| match split(p) {
                (d, leaf) if d == dir => Some(leaf.to_string()),
                _ => None,
            })
            .collect();
        if dir.is_none() {
            want.extend(self.model.dirs.iter().cloned());
        }
        want.sort();
        want
    }

    /// Every listing shows the model's names and only those; every file has its size and
    /// bytes.
    pub(super) fn check_names(&mut self) {
        let dirs: Vec<String> = self.model.dirs.iter().cloned().collect();
        self.check_listing(None, ROOT);
        for d in dirs {
            let ino = self
                .ino_of(&d)
                .unwrap_or_else(|e| panic!("lookup of directory {d}: {e:?}"));
            self.check_listing(Some(&d), ino);
        }
        let want: Vec<(String, usize)> = self.model.names.clone().into_iter().collect();
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

    fn check_listing(&mut self, dir: Option<&str>, ino: u64) {
        let want = self.model_listing(dir);
        let listed = self.block(|fs| async move { crate::common::names(&fs, ino).await });
        assert_eq!(listed, want, "listing of {}", dir.unwrap_or("/"));
    }

    /// After an unmount (releases delivered, every upload waited for), the bucket holds
    /// exactly the model: its files and its directories' markers.
    pub(super) fn check_bucket(&mut self) {
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
        let mut want: HashMap<String, Vec<u8>> = (self.model.names.iter())
            .map(|(n, f)| (n.clone(), self.model.files[*f].data.clone()))
            .collect();
        for d in &self.model.dirs {
            want.insert(format!("{d}/"), Vec::new());
        }
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
