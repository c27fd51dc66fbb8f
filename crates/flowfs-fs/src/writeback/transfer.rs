//! Moving bytes between a staged file and the store: one PUT for a small file, a
//! parallel multipart upload for a large one (aborted on failure, so no partial object is
//! ever visible), and the download of a whole object into a staged file. Mechanisms only:
//! which file goes up when is decided by the write-back state machine (`super`).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use flowfs_client::{AlignedBuf, ClientError, CompletedPart, Crc, ObjectClient, Payload, Summing};
use flowfs_client::{Upload, Version};
use tokio::sync::Semaphore;

use crate::budget::GetBudget;

use super::staging::note_upload;

/// Bytes of small files (one PUT each) held in memory by uploads at once, over the mount.
const SMALL_BUDGET_KIB: u32 = 64 << 10;
/// What one small upload counts against that budget at least: it also bounds how many
/// PUTs (and connections) are in flight when thousands of tiny files close together.
const SMALL_MIN_KIB: u32 = 256;

/// What an upload that was told to stop ends with: the file it carried was removed
/// (unlink, renamed over), so the rest would only make an object to delete.
pub const GIVEN_UP: &str = "not sent: the file was removed";

/// Fails with `GIVEN_UP` once `stop` is set: checked before every request that would
/// send more of a given-up file or complete it, so that only requests already in flight
/// reach the store (issue 47: an unlink waited 59.6 s for a 5 GiB upload).
fn check_stop(stop: &AtomicBool) -> Result<(), ClientError> {
    if stop.load(Ordering::Acquire) {
        return Err(ClientError::Other(GIVEN_UP.into()));
    }
    Ok(())
}

/// The bounds on upload memory, shared by every upload of a mount.
#[derive(Clone)]
pub struct UploadSlots {
    /// Parts of multipart uploads whose bytes are in memory.
    pub parts: Arc<Semaphore>,
    /// Small files in flight, weighted by size in KiB.
    small: Arc<Semaphore>,
}

impl UploadSlots {
    pub fn new(parts: usize) -> UploadSlots {
        UploadSlots {
            parts: Arc::new(Semaphore::new(parts.max(1))),
            small: Arc::new(Semaphore::new(SMALL_BUDGET_KIB as usize)),
        }
    }
}

/// Uploads `body` as a multipart upload of one part, so that the object's ETag ends in
/// `-1` (how a listing tells symlink candidates apart); aborted if it fails.
pub async fn upload_single_part(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    body: Payload,
    metadata: &HashMap<String, String>,
    note: &Note<'_>,
) -> Result<String, ClientError> {
    let id = note.create(client, key, metadata).await?;
    let r = async {
        let upload = Upload::new(key, &id);
        let etag = client.upload_part(upload.part(1), body).await?;
        client
            .complete_multipart(upload.completion(&[CompletedPart {
                part_number: 1,
                etag,
            }]))
            .await
    }
    .await;
    match r {
        Ok(p) => {
            note.remove().await;
            Ok(p.etag)
        }
        Err(e) => {
            let _ = (client.abort_multipart(Upload::new(key, &id))).await;
            Err(e)
        }
    }
}

/// Where a multipart upload's id is noted while it is open, so that if this process
/// dies the next mount with the cache dir aborts it (an open upload keeps its parts,
/// billed, until aborted).
pub struct Note<'a> {
    pub path: PathBuf,
    pub bucket: &'a str,
}

impl Note<'_> {
    /// Creates a multipart upload of `key`, noted before it is asked for and again with
    /// its id (see `note_upload`).
    pub(super) async fn create(
        &self,
        client: &Arc<dyn ObjectClient>,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<String, ClientError> {
        create_noted(client, &self.path, self.bucket, key, metadata).await
    }

    pub(super) async fn remove(&self) {
        let path = self.path.clone();
        let _ = tokio::task::spawn_blocking(move || std::fs::remove_file(path)).await;
    }
}

/// CreateMultipartUpload of `key`, noted at `note` first without the id and then with it,
/// so that the next mount finds the upload even if this one dies before the answer.
/// The notes are written off the async workers: small file writes, but file writes.
async fn create_noted(
    client: &Arc<dyn ObjectClient>,
    note: &Path,
    bucket: &str,
    key: &str,
    metadata: &HashMap<String, String>,
) -> Result<String, ClientError> {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    write_note(note, bucket, key, None, since).await;
    let id = client.create_multipart(key, metadata).await?;
    write_note(note, bucket, key, Some(&id), since).await;
    Ok(id)
}

async fn write_note(path: &Path, bucket: &str, key: &str, id: Option<&str>, since: u64) {
    let (path, bucket, key) = (path.to_path_buf(), bucket.to_string(), key.to_string());
    let id = id.map(str::to_string);
    let r = tokio::task::spawn_blocking(move || {
        note_upload(&path, &bucket, &key, id.as_deref(), since)
    })
    .await;
    if !matches!(r, Ok(Ok(()))) {
        tracing::warn!("cannot note a multipart upload: {r:?}");
    }
}

/// Uploads `size` bytes of `file` to `key`. Parts of a large file go in parallel, each
/// holding a permit of `parts` while its bytes are in memory; a small file holds its
/// weight of the small-file budget until its PUT is answered: memory stays bounded.
/// `one_part` (symlinks, which are tiny) makes it a single-part multipart upload. A
/// multipart upload is noted at `note` while open; a note stays when the upload failed
/// (its abort may have failed too), and the next mount aborts it if it is still open.
#[allow(clippy::too_many_arguments)]
pub async fn upload_file(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    file: &File,
    size: u64,
    part_size: u64,
    slots: &UploadSlots,
    metadata: &HashMap<String, String>,
    one_part: bool,
    note: Note<'_>,
    stop: &AtomicBool,
) -> Result<String, ClientError> {
    let parts = &slots.parts;
    check_stop(stop)?;
    if one_part {
        let body = read_part_async(file, key, 0, size, client.upload_checksum()).await?;
        return upload_single_part(client, key, body, metadata, &note).await;
    }
    if size <= part_size {
        let kib = u32::try_from(size.div_ceil(1024))
            .unwrap_or(u32::MAX)
            .clamp(SMALL_MIN_KIB, SMALL_BUDGET_KIB);
        let _permit = slots
            .small
            .acquire_many(kib)
            .await
            .map_err(|e| ClientError::Other(e.to_string()))?;
        check_stop(stop)?;
        let body = read_part_async(file, key, 0, size, client.upload_checksum()).await?;
        return Ok(client.put(key, body, metadata).await?.etag);
    }
    let upload_id = note.create(client, key, metadata).await?;
    let r = upload_parts(
        client,
        key,
        &upload_id,
        file,
        size,
        part_size,
        parts,
        Vec::new(),
        stop,
    )
    .await;
    if r.is_ok() {
        note.remove().await;
    }
    r
}

/// The chunks a part is read in, each summed right after its `pread` while it is still in
/// the CPU's cache: a 2 GiB file's CRC-64/NVME cost 0.05 s of CPU so, against 0.10 s as a
/// pass over each 8 MiB part after it was read whole (measured here; 1 MiB chunks: 0.07 s).
const SUM_CHUNK: u64 = 256 << 10;

/// Reads `len` staged bytes at `off` into one buffer, for a PUT or a part, with their
/// checksum by `crc` (the store's, `ObjectClient::upload_checksum`).
pub fn read_part(
    file: &File,
    key: &str,
    off: u64,
    len: u64,
    crc: Option<Crc>,
) -> Result<Payload, ClientError> {
    // A pooled buffer: a fresh 8 MiB one per part had every page faulted in anew.
    let mut buf = AlignedBuf::with_capacity(len as usize);
    let mut sum = crc.map(Summing::new);
    let mut at = 0;
    while at < len {
        let n = (len - at).min(SUM_CHUNK) as usize;
        buf.fill(n, |b| {
            file.read_exact_at(b, off + at)?;
            if let Some(sum) = sum.as_mut() {
                sum.update(b);
            }
            Ok::<_, std::io::Error>(b.len())
        })
        .map_err(|e| ClientError::Other(format!("reading staged data of {key}: {e}")))?;
        at += n as u64;
    }
    Ok(Payload::new(buf.into_bytes(), sum.map(|s| s.finish())))
}

/// `read_part` on tokio's blocking pool: a part is megabytes of `pread`, which must not
/// hold up an async worker and every task queued behind it.
pub async fn read_part_async(
    file: &File,
    key: &str,
    off: u64,
    len: u64,
    crc: Option<Crc>,
) -> Result<Payload, ClientError> {
    let file = file
        .try_clone()
        .map_err(|e| ClientError::Other(format!("reading staged data of {key}: {e}")))?;
    let key = key.to_string();
    tokio::task::spawn_blocking(move || read_part(&file, &key, off, len, crc))
        .await
        .map_err(|e| ClientError::Other(e.to_string()))?
}

/// Uploads the parts of `[0, size)` not in `done` (which holds parts 1..=k, in order)
/// and completes the upload; aborts it on failure, or once `stop` is set, so nothing
/// partial is ever visible.
#[allow(clippy::too_many_arguments)]
pub async fn upload_parts(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    upload_id: &str,
    file: &File,
    size: u64,
    part_size: u64,
    parts: &Arc<Semaphore>,
    mut done: Vec<CompletedPart>,
    stop: &AtomicBool,
) -> Result<String, ClientError> {
    let n = size.div_ceil(part_size).max(1);
    let mut set = tokio::task::JoinSet::new();
    let mut failure = None;
    for i in done.len() as u64..n {
        let permit = match parts.clone().acquire_owned().await {
            Ok(p) => p,
            Err(e) => {
                failure = Some(ClientError::Other(e.to_string()));
                break;
            }
        };
        if let Err(e) = check_stop(stop) {
            failure = Some(e);
            break;
        }
        let off = i * part_size;
        let len = part_size.min(size - off);
        let body = match read_part_async(file, key, off, len, client.upload_checksum()).await {
            Ok(b) => b,
            Err(e) => {
                failure = Some(e);
                break;
            }
        };
        let (client, key, id) = (client.clone(), key.to_string(), upload_id.to_string());
        set.spawn(async move {
            let r = (client.upload_part(Upload::new(&key, &id).part(i as i32 + 1), body)).await;
            drop(permit);
            r.map(|etag| CompletedPart {
                part_number: i as i32 + 1,
                etag,
            })
        });
        // Collect finished parts as we go so that a failure stops the loop early.
        while let Some(r) = set.try_join_next() {
            match r {
                Ok(Ok(p)) => done.push(p),
                Ok(Err(e)) => failure = failure.or(Some(e)),
                Err(e) => failure = failure.or(Some(ClientError::Other(e.to_string()))),
            }
        }
        if failure.is_some() {
            break;
        }
    }
    while let Some(r) = set.join_next().await {
        match r {
            Ok(Ok(p)) => done.push(p),
            Ok(Err(e)) => failure = failure.or(Some(e)),
            Err(e) => failure = failure.or(Some(ClientError::Other(e.to_string()))),
        }
    }
    failure = failure.or(check_stop(stop).err());
    let upload = Upload::new(key, upload_id);
    if let Some(e) = failure {
        if let Err(abort) = client.abort_multipart(upload).await {
            tracing::warn!(%key, "abort of a failed multipart upload failed: {abort}");
        }
        return Err(e);
    }
    done.sort_by_key(|p| p.part_number);
    match client.complete_multipart(upload.completion(&done)).await {
        Ok(r) => Ok(r.etag),
        Err(e) => {
            let _ = client.abort_multipart(upload).await;
            Err(e)
        }
    }
}

/// Bytes `[off, end)` of an object of `size` bytes; a GET of all of it is checked
/// against the store's checksum (`get_whole_pieces`, issue 49).
async fn get_part(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    (off, end): (u64, u64),
    size: u64,
    etag: Option<&str>,
) -> Result<Bytes, ClientError> {
    let src = Version::new(key, etag);
    if off > 0 || end < size {
        return client.get_range(src.range(off, end)).await;
    }
    let mut out = Bytes::new();
    (client.get_whole_pieces(src, &[end], &mut |_, b| out = b)).await?;
    Ok(out)
}

/// Downloads a whole object into a staging file (to modify a file in place).
pub async fn download_into(
    client: &Arc<dyn ObjectClient>,
    key: &str,
    etag: Option<&str>,
    size: u64,
    part_size: u64,
    gets: &GetBudget,
    file: &File,
) -> Result<(), ClientError> {
    let mut set = tokio::task::JoinSet::new();
    let mut off = 0;
    while off < size {
        let end = (off + part_size).min(size);
        let (client, key, etag, gets) = (
            client.clone(),
            key.to_string(),
            etag.map(str::to_string),
            gets.clone(),
        );
        set.spawn(async move {
            let _p = gets
                .acquire(end - off)
                .await
                .map_err(|e| ClientError::Other(e.to_string()))?;
            get_part(&client, &key, (off, end), size, etag.as_deref())
                .await
                .map(|b| (off, b))
        });
        off = end;
    }
    let staging = |e: std::io::Error| ClientError::Other(format!("staging {key}: {e}"));
    // The writes go to the blocking pool, off the async workers, one at a time.
    let file = Arc::new(file.try_clone().map_err(staging)?);
    while let Some(r) = set.join_next().await {
        let (off, data) = r.map_err(|e| ClientError::Other(e.to_string()))??;
        let f = file.clone();
        tokio::task::spawn_blocking(move || f.write_all_at(&data, off))
            .await
            .map_err(|e| ClientError::Other(e.to_string()))?
            .map_err(staging)?;
    }
    Ok(())
}
