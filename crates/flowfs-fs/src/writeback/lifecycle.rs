//! The transitions of a staged file's upload: asked for, started, ended; waits for
//! durability; giving a file up (unlink, replaced by a rename); the early upload.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::{
    Durability, Early, EarlyState, Finished, NameHold, Phase, Retired, StagedFile, UploadError,
    UploadJob, WriteBack,
};

impl WriteBack {
    /// `fsync`, unmount: the content as of now must go up. Returns the generation to wait
    /// for and whether the caller spawns the upload task (the phase is then `Queued`).
    pub fn request_upload(&self, ino: u64) -> Option<(u64, bool)> {
        self.request_upload_seen(ino)
            .map(|(gen, spawn, _)| (gen, spawn))
    }

    /// As `request_upload`, and whether an upload of that generation was in flight
    /// already (begun before the request, so not a try of the requester's own).
    pub fn request_upload_seen(&self, ino: u64) -> Option<(u64, bool, bool)> {
        let mut t = self.table.lock();
        let f = t.files.get_mut(&ino)?;
        let in_flight = matches!(f.phase, Phase::Uploading { gen, .. } if gen == f.gen);
        let spawn = match &f.phase {
            Phase::Idle | Phase::Failed { .. } if f.dirty() => {
                f.phase = Phase::Queued;
                true
            }
            Phase::Failed { .. } => {
                f.phase = Phase::Idle;
                false
            }
            Phase::Uploading { gen, .. } if *gen != f.gen => {
                f.phase = Phase::Uploading {
                    gen: *gen,
                    rerun: true,
                };
                false
            }
            _ => false,
        };
        Some((f.gen, spawn, in_flight))
    }

    /// Whether generation `target` of `file` is in the bucket (or no longer has to be).
    pub fn durability(&self, ino: u64, file: &Arc<StagedFile>, target: u64) -> Durability {
        let t = self.table.lock();
        let Some(f) = t.files.get(&ino).filter(|f| Arc::ptr_eq(&f.file, file)) else {
            // Given up, or durable and released: nothing of it is waiting any more.
            return Durability::Done;
        };
        match &f.phase {
            Phase::Retired => Durability::Done,
            Phase::Failed { error, .. } => Durability::Failed(error.clone()),
            Phase::Idle if f.durable_gen >= target => Durability::Done,
            Phase::Idle => Durability::Stalled,
            _ => Durability::Pending,
        }
    }

    /// The queued upload of `ino` starts, to `key`; `None` when there is nothing to do.
    pub fn begin_upload(&self, ino: u64, key: &str) -> Option<UploadJob> {
        let mut t = self.table.lock();
        let f = t.files.get_mut(&ino)?;
        if !matches!(f.phase, Phase::Queued) {
            return None;
        }
        if !f.dirty() {
            f.phase = Phase::Idle;
            f.early = EarlyState::Off;
            drop(t);
            return None;
        }
        f.phase = Phase::Uploading {
            gen: f.gen,
            rerun: false,
        };
        // Parts sent while the file was written count only under the name they went to.
        let early = match std::mem::replace(&mut f.early, EarlyState::Off) {
            EarlyState::On {
                upload: Some(e), ..
            } if e.key == key => Some(e),
            _ => None,
        };
        let copy_of = f.copy_of.clone().filter(|(_, gen)| *gen == f.gen);
        Some(UploadJob {
            file: f.file.clone(),
            gen: f.gen,
            size: f.size,
            early,
            one_part: false,
            copy_of: copy_of.map(|(source, _)| source),
        })
    }

    /// A queued upload that will not run (its name is gone, or a task it follows failed).
    pub fn cancel_queued(&self, ino: u64, error: Option<UploadError>) {
        let file = {
            let mut t = self.table.lock();
            let Some(f) = t
                .files
                .get_mut(&ino)
                .filter(|f| matches!(f.phase, Phase::Queued))
            else {
                return;
            };
            f.phase = error.map_or(Phase::Idle, |error| Phase::Failed {
                error,
                retry: None,
                gen: f.gen,
            });
            f.file.clone()
        };
        file.done.notify_waiters();
    }

    /// The upload of `job` ended with `result`; `named`: the key it went to is still
    /// the file's.
    pub fn finish_upload(
        &self,
        ino: u64,
        job: &UploadJob,
        result: Result<(), UploadError>,
        named: bool,
    ) -> Finished {
        let mut t = self.table.lock();
        let mut out = Finished::default();
        let Some(f) = t
            .files
            .get_mut(&ino)
            .filter(|f| Arc::ptr_eq(&f.file, &job.file))
        else {
            out.stray = result.is_ok();
            return out;
        };
        let rerun = matches!(f.phase, Phase::Uploading { rerun: true, .. });
        let retired = matches!(f.phase, Phase::Retired);
        let again = !retired && (f.writers == 0 || rerun);
        match result {
            Ok(()) if retired || !named => {
                // Renamed or unlinked while uploading: the object does not belong there.
                out.stray = true;
                out.again = !retired;
            }
            Ok(()) => {
                f.durable_gen = job.gen;
                out.durable = f.gen == job.gen;
                out.again = !out.durable && again;
            }
            // The file changed while it was read for the upload (a rewrite with O_TRUNC
            // shrinks it under the reader): that upload is moot, the next one carries it.
            Err(_) if f.gen != job.gen && !retired => out.again = again,
            // Given up (stopped, most likely): nobody waits for that content any more.
            Err(_) if retired => {}
            Err(e) => {
                if e.may_pass() && !retired {
                    t.retries += 1;
                    out.retry = Some(t.retries);
                }
                out.error = Some(e);
            }
        }
        let Some(f) = t.files.get_mut(&ino) else {
            return out;
        };
        if !retired {
            f.phase = match (&out.error, out.again) {
                (Some(e), _) => Phase::Failed {
                    error: e.clone(),
                    retry: out.retry,
                    gen: job.gen,
                },
                (None, true) => Phase::Queued,
                (None, false) => Phase::Idle,
            };
        }
        let idle_clean = |f: &super::FileWb| {
            matches!(f.phase, Phase::Idle) && !f.dirty() && f.writers == 0 && f.readers == 0
        };
        if t.files.get(&ino).is_some_and(idle_clean) {
            out.released = t.files.remove(&ino).map(|f| f.file);
        }
        drop(t);
        job.file.done.notify_waiters();
        out
    }

    /// Holds the name of `ino`'s staged file (see `StagedFile::naming`): returns once no
    /// upload of it is in flight, and none starts until the guard is dropped. `None`: the
    /// file is not staged.
    pub async fn hold_name(&self, ino: u64) -> Option<NameHold> {
        loop {
            let file = self.table.lock().files.get(&ino).map(|f| f.file.clone())?;
            let hold = file.naming.clone().lock_owned().await;
            // The file may have left the table (and come back anew) while we waited.
            let same = self
                .table
                .lock()
                .files
                .get(&ino)
                .is_some_and(|f| Arc::ptr_eq(&f.file, &file));
            if same {
                return Some(NameHold { _guard: hold });
            }
        }
    }

    /// Gives up `ino`'s staged file (its name is removed or replaced), at once: no upload
    /// of it starts again, and one in flight sends nothing more (`StagedFile::stop`); what
    /// it had already sent and still lands (a PUT, a completion) its task deletes as a
    /// stray. Nothing waits for the store here: an unlink of a 5 GiB file being uploaded
    /// took 59.6 s when it waited the upload out (issue 47). `None`: `ino` had no staged
    /// file.
    pub fn retire(&self, ino: u64) -> Option<Retired> {
        let mut t = self.table.lock();
        let f = t.files.get_mut(&ino)?;
        let out = Retired {
            remote: f.durable_gen > 0 || f.shadows,
            in_flight: f.uploading(),
        };
        f.phase = Phase::Retired;
        f.early = EarlyState::Off;
        let file = f.file.clone();
        if f.writers == 0 && f.readers == 0 {
            t.files.remove(&ino);
        }
        drop(t);
        file.stop.store(true, Ordering::Release);
        // Open handles keep the unlinked data file; the record goes at once.
        file.discard();
        file.done.notify_waiters();
        Some(out)
    }

    /// For a rename: whether the bucket holds an older version, and whether the staged
    /// content differs from it (or an upload is in flight).
    pub fn remote_state(&self, ino: u64) -> Option<(bool, bool)> {
        let t = self.table.lock();
        let f = t.files.get(&ino)?;
        Some((f.durable_gen > 0 || f.shadows, f.dirty() || f.uploading()))
    }

    /// Inodes with a staged file, and with no open writer when `closed`.
    pub fn staged(&self, closed: bool) -> Vec<(u64, Arc<StagedFile>)> {
        let t = self.table.lock();
        t.files
            .iter()
            .filter(|(_, f)| !closed || f.writers == 0)
            .filter(|(_, f)| !matches!(f.phase, Phase::Retired))
            .map(|(i, f)| (*i, f.file.clone()))
            .collect()
    }

    /// The error of the last upload of `file`, reported at close: only while the content
    /// that failed is the content staged now (a rewrite since is a new upload's to try).
    pub fn error(&self, ino: u64, file: &Arc<StagedFile>) -> Option<UploadError> {
        let t = self.table.lock();
        let f = t.files.get(&ino).filter(|f| Arc::ptr_eq(&f.file, file))?;
        match &f.phase {
            Phase::Failed { error, gen, .. } if *gen == f.gen => Some(error.clone()),
            _ => None,
        }
    }

    /// The background retry `token` of `ino`'s failed upload is due: queues the upload
    /// if the file still waits for that retry (an fsync or a new write may have
    /// queued it meanwhile). The caller then runs the upload.
    pub fn retry_due(&self, ino: u64, token: u64) -> bool {
        let mut t = self.table.lock();
        let Some(f) = t.files.get_mut(&ino) else {
            return false;
        };
        if !matches!(f.phase, Phase::Failed { retry: Some(r), .. } if r == token) {
            return false;
        }
        f.phase = Phase::Queued;
        true
    }

    /// A staged file of a dead mount that recovery could not upload.
    pub fn fail_key(&self, key: &str, error: String) {
        self.table.lock().failed.insert(key.to_string(), error);
    }

    pub fn forget_key(&self, key: &str) {
        self.table.lock().failed.remove(key);
    }

    /// Parts a front-to-back writer has left a whole part behind, claimed for the early
    /// upload (created for `key` with the first): the caller sends them. The slack spares
    /// writers that patch what they have just written.
    pub fn claim_early_parts(
        &self,
        ino: u64,
        part_size: u64,
        new_upload: impl FnOnce(&StagedFile) -> Arc<Early>,
    ) -> Option<(Arc<Early>, Arc<StagedFile>, Vec<u64>)> {
        let mut t = self.table.lock();
        let f = t.files.get_mut(&ino)?;
        let size = f.size;
        let EarlyState::On { sent, upload } = &mut f.early else {
            return None;
        };
        if size < *sent + 2 * part_size {
            return None;
        }
        let e = upload.get_or_insert_with(|| new_upload(&f.file)).clone();
        let mut parts = Vec::new();
        while size >= *sent + 2 * part_size {
            parts.push(*sent / part_size);
            *sent += part_size;
        }
        Some((e, f.file.clone(), parts))
    }
}
