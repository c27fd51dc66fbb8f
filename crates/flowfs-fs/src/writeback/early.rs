//! Early upload of a file still being written: once a new file written front to back is a
//! whole part past a part, that part goes up in the background, so that at `close()` only
//! the tail is left to send. A large output is then durable about when its writer is done
//! instead of one whole upload later.
//!
//! Nothing becomes visible early: the multipart upload completes only at the file's
//! upload (close or fsync), with the file's final content. A change to bytes already sent
//! drops the early upload (it is aborted) and the file goes up whole as before.

use std::collections::HashMap;
use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use flowfs_client::{ClientError, CompletedPart, ObjectClient, Upload};
use parking_lot::Mutex;
use tokio::sync::{Notify, OnceCell, Semaphore};
use tokio::task::JoinHandle;

use super::staging::StagedFile;
use super::transfer::{read_part_async, upload_parts, Note};

/// Counts early uploads alive and the aborts of those given up, so that an unmount
/// waits for them: an abort left unsent at exit would leave the upload's parts billed
/// until the next mount with the same cache dir.
#[derive(Default, Clone)]
pub struct Aborts(Arc<AbortsInner>);

#[derive(Default)]
pub struct AbortsInner {
    busy: Mutex<usize>,
    idle: Notify,
}

/// One early upload alive, or one abort in flight.
struct Busy(Arc<AbortsInner>);

impl Drop for Busy {
    fn drop(&mut self) {
        let mut n = self.0.busy.lock();
        *n -= 1;
        if *n == 0 {
            self.0.idle.notify_waiters();
        }
    }
}

impl Aborts {
    fn busy(&self) -> Busy {
        *self.0.busy.lock() += 1;
        Busy(self.0.clone())
    }

    /// Returns once no early upload is alive and every abort has been answered.
    pub async fn wait(&self) {
        crate::wait::until(&self.0.idle, || (*self.0.busy.lock() == 0).then_some(())).await
    }
}

pub struct Early {
    client: Arc<dyn ObjectClient>,
    aborts: Aborts,
    /// Held while this upload is alive (its part tasks hold it).
    _alive: Busy,
    bucket: String,
    pub key: String,
    /// Holds the upload id while the upload is open (`StagedFile::upload_note_path`).
    note: PathBuf,
    /// What CreateMultipartUpload gives the object (mode, owner; the time of the last
    /// write is not known this early).
    metadata: HashMap<String, String>,
    upload_id: OnceCell<String>,
    parts: Mutex<Vec<CompletedPart>>,
    failed: Mutex<Option<ClientError>>,
    tasks: Mutex<Vec<JoinHandle<()>>>,
    /// Completed or aborted by `finish`: nothing left for `Drop` to abort.
    settled: AtomicBool,
}

impl std::fmt::Debug for Early {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Early({})", self.key)
    }
}

impl Early {
    pub fn new(
        client: Arc<dyn ObjectClient>,
        bucket: &str,
        key: String,
        note: PathBuf,
        aborts: Aborts,
        metadata: HashMap<String, String>,
    ) -> Arc<Early> {
        Arc::new(Early {
            client,
            _alive: aborts.busy(),
            aborts,
            bucket: bucket.to_string(),
            key,
            note,
            metadata,
            upload_id: OnceCell::new(),
            parts: Mutex::new(Vec::new()),
            failed: Mutex::new(None),
            tasks: Mutex::new(Vec::new()),
            settled: AtomicBool::new(false),
        })
    }

    /// Where this upload's id is noted while it is open.
    fn note(&self) -> Note<'_> {
        Note {
            path: self.note.clone(),
            bucket: &self.bucket,
        }
    }

    /// Uploads part `index` (from 0) of `staged` in the background, once a part slot is
    /// free (the slot bounds the memory it holds).
    pub fn send(
        self: &Arc<Self>,
        staged: Arc<StagedFile>,
        index: u64,
        part_size: u64,
        slots: Arc<Semaphore>,
    ) {
        let e = self.clone();
        let task = tokio::spawn(async move {
            let r = async {
                let permit = slots
                    .acquire_owned()
                    .await
                    .map_err(|err| ClientError::Other(err.to_string()))?;
                // A failed part dooms the rest; a removed file needs none of them (the
                // upload is aborted once the last task lets go of it).
                if e.failed.lock().is_some() || staged.stop.load(Ordering::Acquire) {
                    return Ok(());
                }
                let id = e
                    .upload_id
                    .get_or_try_init(|| async {
                        // If this process dies from now on, the next mount aborts the upload.
                        e.note().create(&e.client, &e.key, &e.metadata).await
                    })
                    .await?
                    .clone();
                let (off, crc) = (index * part_size, e.client.upload_checksum());
                let body = read_part_async(&staged.file, &e.key, off, part_size, crc).await?;
                let etag = e
                    .client
                    .upload_part(Upload::new(&e.key, &id).part(index as i32 + 1), body)
                    .await?;
                e.parts.lock().push(CompletedPart {
                    part_number: index as i32 + 1,
                    etag,
                });
                drop(permit);
                let st = staged.clone();
                let _ = tokio::task::spawn_blocking(move || {
                    release_pages(&st.file, index * part_size, part_size)
                })
                .await;
                Ok::<(), ClientError>(())
            }
            .await;
            if let Err(err) = r {
                tracing::debug!(key = %e.key, "early part upload failed: {err}");
                e.failed.lock().get_or_insert(err);
            }
        });
        self.tasks.lock().push(task);
    }

    /// Sends what is left of `[0, size)` and completes the upload. `None` when the early
    /// parts failed: the caller uploads the file whole (this upload is aborted on drop).
    pub async fn finish(
        &self,
        staged: &StagedFile,
        size: u64,
        part_size: u64,
        slots: &Arc<Semaphore>,
    ) -> Option<Result<String, ClientError>> {
        let tasks = std::mem::take(&mut *self.tasks.lock());
        for t in tasks {
            let _ = t.await;
        }
        if self.failed.lock().is_some() {
            return None;
        }
        let id = self.upload_id.get()?.clone();
        let mut done = std::mem::take(&mut *self.parts.lock());
        done.sort_by_key(|p| p.part_number);
        let contiguous = done
            .iter()
            .enumerate()
            .all(|(i, p)| p.part_number == i as i32 + 1);
        if !contiguous || done.len() as u64 * part_size > size {
            return None;
        }
        // Whatever happens now, upload_parts completes or aborts it.
        self.settled.store(true, Ordering::Relaxed);
        let r = upload_parts(
            &self.client,
            &self.key,
            &id,
            &staged.file,
            size,
            part_size,
            slots,
            done,
            &staged.stop,
        )
        .await;
        self.note().remove().await;
        Some(r)
    }
}

impl Drop for Early {
    fn drop(&mut self) {
        if self.settled.load(Ordering::Relaxed) {
            return;
        }
        let Some(id) = self.upload_id.get().cloned() else {
            return;
        };
        let (client, key, note) = (self.client.clone(), self.key.clone(), self.note.clone());
        match tokio::runtime::Handle::try_current() {
            Ok(rt) => {
                let busy = self.aborts.busy();
                rt.spawn(async move {
                    let _busy = busy;
                    match client.abort_multipart(Upload::new(&key, &id)).await {
                        Ok(()) => {
                            let _ = std::fs::remove_file(&note);
                        }
                        Err(err) => {
                            tracing::warn!(%key, "abort of an early multipart upload failed: {err}")
                        }
                    }
                });
            }
            Err(_) => tracing::warn!(%key, "an early multipart upload was left open"),
        }
    }
}

/// Writes a sent part's staged bytes to disk and drops them from the page cache, so that
/// the pages are reused for the next parts of the writer. On a VM that hands freed memory
/// back to its host, filling fresh page-cache pages was most of the CPU of a large write
/// (about 700 MB/s); recycled pages are filled several times faster. Nothing is lost:
/// the bytes stay in the staging file, and pages written meanwhile (dirty) are kept.
fn release_pages(file: &File, off: u64, len: u64) {
    use std::os::fd::AsRawFd;
    let fd = file.as_raw_fd();
    // SAFETY: plain syscalls on an fd we own.
    unsafe {
        libc::sync_file_range(
            fd,
            off as i64,
            len as i64,
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        );
        libc::posix_fadvise(fd, off as i64, len as i64, libc::POSIX_FADV_DONTNEED);
    }
}
