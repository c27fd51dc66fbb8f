//! The keys of a mount's names: the prefix a path goes below, the store's key rules
//! (flowfs-client rules.rs) and which keys refuse writes (a read-only mount, an
//! archive's view), and which names are completion markers.

use std::sync::Arc;

use flowfs_client::ObjectClient;

use crate::config::FsConfig;
use crate::error::{FsError, Result};

/// Longest object key the store accepts: 1,024 bytes on S3. A longer name is refused
/// with ENAMETOOLONG before anything is staged; an upload to such a key could never
/// succeed, and it used to stay in the journal failing every later mount.
const MAX_KEY: usize = 1024;

#[derive(Clone)]
pub(super) struct Keys {
    /// Empty or ending in `/` (`FsConfig::prefix`).
    prefix: String,
    client: Arc<dyn ObjectClient>,
    read_only: bool,
    markers: Vec<String>,
}

impl Keys {
    pub(super) fn new(cfg: &FsConfig, client: Arc<dyn ObjectClient>) -> Keys {
        Keys {
            prefix: cfg.prefix.clone(),
            client,
            read_only: cfg.read_only,
            markers: cfg.completion_markers.clone(),
        }
    }

    /// The key of the file at `path` below the mount root.
    pub(super) fn key(&self, path: &str) -> String {
        format!("{}{path}", self.prefix)
    }

    /// The prefix of the keys below the directory at `path` (`""`: the mount root).
    pub(super) fn dir_prefix(&self, path: &str) -> String {
        if path.is_empty() {
            self.prefix.clone()
        } else {
            format!("{}{path}/", self.prefix)
        }
    }

    /// Refuses a path whose key (with a directory marker's `/` for `dir`) the store
    /// cannot hold, or would change or refuse by its key rules: such a file would vanish
    /// after its upload or never be uploaded (issue 47).
    pub(super) fn check(&self, path: &str, dir: bool) -> Result<()> {
        if self.prefix.len() + path.len() + usize::from(dir) > MAX_KEY {
            return Err(FsError::NameTooLong);
        }
        let rules = self.client.key_rules();
        let key = self.key(path);
        match rules.check(&key) {
            Ok(()) => Ok(()),
            Err(rule) => Err(FsError::KeyRefused {
                key,
                store: rules.store,
                rule,
            }),
        }
    }

    /// EROFS where writes are refused: the whole mount is read-only, or the store
    /// refuses writes of this key (an archive's view, `--archives`).
    pub(super) fn check_writable(&self, key: &str) -> Result<()> {
        if self.read_only || self.client.refuses_writes(key) {
            return Err(FsError::ReadOnly);
        }
        Ok(())
    }

    /// Whether `name` is a completion marker (`--completion-marker`): its upload waits
    /// for the outputs beside it.
    pub(super) fn is_marker(&self, name: &str) -> bool {
        self.markers.iter().any(|m| m == name)
    }
}
