//! Durability waits: fsync of a file, of a directory, and of a tree (a completion marker
//! waits for the outputs beside it). An upload is asked for and awaited here; it runs in
//! upload.rs.

use std::sync::Arc;

use crate::error::{FsError, Result};
use crate::writeback::{Durability, StagedFile};

use super::names::Which;
use super::WritePath;
use super::{Fs, Handle};

impl Fs {
    /// Returns once the file's content as of now is durable in the bucket.
    pub async fn fsync(self: &Arc<Self>, fh: u64) -> Result<()> {
        let (ino, staged) = match self.handles.get(fh)? {
            Handle::Local { ino, staged, .. } => (ino, staged),
            // The file was staged through another handle: fsync is of the file.
            // Or the object holds more than the file (a copy made ahead, cut short).
            Handle::Unstaged { ino, ahead, .. }
                if ahead.is_some() || self.wb.stat(ino).is_some() =>
            {
                (ino, self.stage(fh, u64::MAX).await?)
            }
            // Nothing changed through it: nothing of it to make durable.
            Handle::Remote { .. } | Handle::Empty { .. } | Handle::Unstaged { .. } => return Ok(()),
        };
        // What a passthrough writer wrote so far is what must become durable.
        self.wb.refresh_passthrough(Some(ino));
        self.w.wait_durable(ino, &staged).await
    }

    /// `fsync` of a directory: the names in it that this mount wrote back (symlinks,
    /// closed files) are in the bucket when it returns, or it fails with their error.
    pub async fn fsyncdir(self: &Arc<Self>, ino: u64) -> Result<()> {
        let staged = self.ns.pick(self.wb.staged(true), Which::NamedIn(ino));
        self.w.wait_all_durable(staged).await
    }
}

impl WritePath {
    pub(super) async fn wait_durable(
        self: &Arc<Self>,
        ino: u64,
        staged: &Arc<StagedFile>,
    ) -> Result<()> {
        self.wait_durable_tried(ino, staged, false).await
    }

    /// `wait_durable`; `own_try`: a failure counts only for an upload begun after this
    /// call (the unmount's "failed uploads are retried once more", SEMANTICS.md): one in
    /// flight already that fails is followed by one more. (Without it, an upload failing
    /// just before the unmount was retried and one failing just after it began was not.)
    pub(super) async fn wait_durable_tried(
        self: &Arc<Self>,
        ino: u64,
        staged: &Arc<StagedFile>,
        own_try: bool,
    ) -> Result<()> {
        let Some((target, spawn, in_flight)) = self.wb.request_upload_seen(ino) else {
            return Ok(());
        };
        let mut owed = own_try && in_flight;
        if spawn {
            self.spawn_upload(ino);
        }
        loop {
            let notified = staged.done.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            match self.wb.durability(ino, staged, target) {
                Durability::Done => return Ok(()),
                Durability::Failed(_) if owed => {
                    owed = false;
                    if let Some((_, true)) = self.wb.request_upload(ino) {
                        self.spawn_upload(ino);
                    }
                }
                Durability::Failed(e) => return Err(FsError::Upload(e)),
                Durability::Pending => notified.await,
                Durability::Stalled => {
                    if let Some((_, true)) = self.wb.request_upload(ino) {
                        self.spawn_upload(ino);
                    }
                }
            }
        }
    }

    /// Waits until every file closed so far below `dir` (but `except`) is durable.
    pub(super) async fn wait_tree(self: &Arc<Self>, dir: u64, except: u64) -> Result<()> {
        let staged = self
            .ns
            .pick(self.wb.staged(true), Which::Below { dir, except });
        self.wait_all_durable(staged).await
    }

    pub(super) async fn wait_all_durable(
        self: &Arc<Self>,
        staged: Vec<(u64, Arc<StagedFile>)>,
    ) -> Result<()> {
        for (i, s) in staged {
            self.wait_durable(i, &s).await?;
        }
        Ok(())
    }
}
