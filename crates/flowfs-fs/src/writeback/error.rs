//! `UploadError`: why a staged file is not in the bucket, kept with its cause.

use std::sync::Arc;

use flowfs_client::ClientError;

/// Why a staged file is not in the bucket: kept by `Phase::Failed` with its cause, and
/// reported by fsync, close, `flowfs status` and the unmount as `KEY: reason`.
#[derive(Debug, Clone, thiserror::Error)]
pub enum UploadError {
    /// The store did not take the upload of `key`.
    #[error("{key}: upload failed: {source}")]
    Store {
        key: String,
        #[source]
        source: Arc<ClientError>,
    },
    /// Not sent: an output of the same task (a file beside its completion marker) is not
    /// in the bucket, and whoever sees the marker may read the outputs.
    #[error("not uploaded because an output of its task failed: {source}")]
    Upstream {
        /// The failure of that output (an `FsError`, kept whole: this module does not
        /// name the crate's error, which wraps this one).
        #[source]
        source: Arc<dyn std::error::Error + Send + Sync>,
    },
}

impl UploadError {
    /// Whether sending it again later may succeed (the store was down or throttling).
    pub fn may_pass(&self) -> bool {
        match self {
            UploadError::Store { source, .. } => source.is_retryable(),
            UploadError::Upstream { .. } => false,
        }
    }
}
