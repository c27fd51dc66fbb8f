//! `copy_file_range` onto a writer the kernel serves itself (FUSE passthrough, the default
//! as root): the kernel reads and writes that file's staged file directly, so the copy's
//! bytes must be there. A source written on this node, whose staged file the bucket holds
//! as it is (`settled_source`: a task's output being published), is copied into it on local
//! disk (`copy_file_range` between two local files: no network), and the destination's
//! upload at its close is a copy of the source's object on the server
//! (`UploadJob::copy_of`); the bytes are sent only if the store refuses that copy (the
//! source removed or replaced by then). So is a source whose every byte is in the node
//! cache (its upload landed before it was opened, and left it there; or it was read and
//! kept): the staged file is filled from the cache's data file, pinned meanwhile. Any other
//! source read from the bucket is left to the kernel: its bytes would have to come down.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

use bytes::Bytes;

use crate::cache::Pinned;
use crate::error::{FsError, Result};
use crate::writeback::{CopySource, StagedFile};

use super::copy::SourceVersion;
use super::{Access, CopyRange, Fs};

impl Fs {
    /// The copy `c` of `source` (`source_version`) onto a passthrough writer, if it is a
    /// whole source held on this node (`local_source`) onto an empty file: its bytes, or
    /// `None` (the kernel copies them).
    pub(super) async fn fill_copy(
        self: &Arc<Self>,
        c: &CopyRange,
        (src, key, etag, size): SourceVersion,
    ) -> Result<Option<u64>> {
        let Some(from) = self.local_source(c.from.0) else {
            return Ok(None);
        };
        let Some((ino, staged)) = self.handles.local(Access::Passthrough, c.to.0) else {
            return Ok(None);
        };
        let whole = c.from.1 == 0 && c.to.1 == 0 && c.len >= size && size > 0;
        let fits = whole && ino != src && self.wb.fill_target(ino, &staged);
        if !fits || !self.ns.edit(ino, |t| self.w.copyable_target(&t)) {
            return Ok(None);
        }
        let to = staged.clone();
        // The pin of a cached source goes with `from`, once its bytes are copied.
        let copied = tokio::task::spawn_blocking(move || from.copy_into(&to.file, size))
            .await
            .map_err(|e| FsError::Internal(format!("local copy task: {e}")))?;
        if let Err(e) = copied {
            tracing::info!(ino, "local copy failed, the kernel copies the bytes: {e}");
            // Empty again, as the kernel's copy expects it.
            staged.file.set_len(0)?;
            return Ok(None);
        }
        self.wb
            .filled_by_copy(ino, &staged, size, CopySource { key, etag })?;
        Ok(Some(size))
    }

    /// Where every byte the source handle `fh` reads is on this node: its staged file
    /// (written here, durable: `settled_source`), its data file in the node cache (pinned
    /// against eviction), or, for a small version, its bytes read from the cache.
    fn local_source(&self, fh: u64) -> Option<LocalSource> {
        if let Some((_, staged)) = self.handles.local(Access::Read, fh) {
            return Some(LocalSource::Staged(staged));
        }
        let (_, reader) = self.handles.bucket_reader(fh)?;
        if let Some(pin) = self.prefetch.pin(&reader) {
            return Some(LocalSource::Cached(pin));
        }
        self.prefetch.cached_small(&reader).map(LocalSource::Bytes)
    }
}

/// A copy's source on this node (`Fs::local_source`).
enum LocalSource {
    /// Its staged file.
    Staged(Arc<StagedFile>),
    /// Its data file in the node cache, pinned whole while this is held.
    Cached(Pinned),
    /// A small version's bytes.
    Bytes(Bytes),
}

impl LocalSource {
    /// Its first `size` bytes into `to` from offset 0.
    fn copy_into(self, to: &File, size: u64) -> io::Result<()> {
        match self {
            LocalSource::Staged(from) => copy_local(&from.file, to, size),
            LocalSource::Cached(pin) => copy_local(pin.file(), to, size),
            LocalSource::Bytes(b) if b.len() as u64 == size => to.write_all_at(&b, 0),
            LocalSource::Bytes(_) => Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                "cached bytes of another length",
            )),
        }
    }
}

/// The first `size` bytes of `from` into `to` from offset 0, in the kernel (no copy through
/// user space; a reflink where the file system shares extents).
fn copy_local(from: &File, to: &File, size: u64) -> io::Result<()> {
    let (mut off_in, mut off_out): (i64, i64) = (0, 0);
    while (off_in as u64) < size {
        let left = usize::try_from(size - off_in as u64).unwrap_or(usize::MAX);
        // SAFETY: two open descriptors and offsets this frame owns.
        let n = unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                &mut off_out,
                left,
                0,
            )
        };
        match n {
            n if n < 0 => return Err(io::Error::last_os_error()),
            0 => {
                return Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "source shorter than its size",
                ))
            }
            _ => {}
        }
    }
    Ok(())
}
