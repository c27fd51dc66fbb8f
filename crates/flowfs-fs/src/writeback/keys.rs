//! The keys uploads are sending to: one upload per key at a time, and the keys whose
//! upload in flight belongs to a name removed meanwhile (strays).
//!
//! An unlink no longer waits for the upload of the file it removes (issue 47): that
//! upload stops sending, but a PUT or a completion already sent may still land, and its
//! task then deletes the object. Until that task ends, the key is not the removed name's
//! any more and not yet anybody else's: a new file's upload to it waits (else the stray's
//! delete could remove the new object, or the stray land over it), and listings and
//! lookups do not show the stray object.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::wait::until;

/// Where an upload's key stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Sending {
    /// The upload of the file that has this name.
    Named,
    /// The file was removed while it was uploaded: what lands is deleted.
    Stray,
}

#[derive(Default)]
struct Inner {
    keys: Mutex<HashMap<String, Sending>>,
    /// How many keys are `Stray`: a listing with none looks nothing up.
    strays: AtomicUsize,
    freed: Notify,
}

/// The keys in flight of one mount's uploads.
#[derive(Default, Clone)]
pub struct Keys(Arc<Inner>);

/// An upload's hold of its key, from before its first request until its end is recorded
/// (and a stray object deleted).
pub struct KeyHold {
    keys: Arc<Inner>,
    key: String,
}

impl Drop for KeyHold {
    fn drop(&mut self) {
        let was = self.keys.keys.lock().remove(&self.key);
        if was == Some(Sending::Stray) {
            self.keys.strays.fetch_sub(1, Ordering::Relaxed);
        }
        self.keys.freed.notify_waiters();
    }
}

impl Keys {
    /// Returns once no other upload holds `key`, holding it.
    pub async fn hold(&self, key: &str) -> KeyHold {
        let take = || {
            let mut k = self.0.keys.lock();
            (!k.contains_key(key)).then(|| {
                k.insert(key.to_string(), Sending::Named);
                KeyHold {
                    keys: self.0.clone(),
                    key: key.to_string(),
                }
            })
        };
        until(&self.0.freed, take).await
    }

    /// The name of `key` was removed while an upload to it may be in flight: what that
    /// upload still lands is a stray, hidden from listings until its task deletes it.
    pub fn doom(&self, key: &str) {
        let mut k = self.0.keys.lock();
        if let Some(s) = k.get_mut(key).filter(|s| **s == Sending::Named) {
            *s = Sending::Stray;
            self.0.strays.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether an object at `key` may be a stray about to be deleted.
    pub fn is_stray(&self, key: &str) -> bool {
        self.0.strays.load(Ordering::Relaxed) > 0
            && self.0.keys.lock().get(key) == Some(&Sending::Stray)
    }

    /// The stray keys now (empty, with no lock taken, when there are none).
    pub fn strays(&self) -> Vec<String> {
        if self.0.strays.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let k = self.0.keys.lock();
        k.iter()
            .filter(|(_, s)| **s == Sending::Stray)
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// Returns once no upload holds a key (an unmount waits for the strays' deletes).
    pub async fn idle(&self) {
        until(&self.0.freed, || {
            self.0.keys.lock().is_empty().then_some(())
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_second_upload_of_a_key_waits_for_the_first_and_a_doomed_key_is_stray_until_then() {
        let keys = Keys::default();
        let first = keys.hold("a").await;
        assert!(!keys.is_stray("a"));
        keys.doom("a");
        keys.doom("b"); // not held: nothing to hide
        assert!(keys.is_stray("a") && !keys.is_stray("b"));
        assert_eq!(keys.strays(), vec!["a".to_string()]);
        let k2 = keys.clone();
        let second = tokio::spawn(async move {
            let _h = k2.hold("a").await;
            k2.is_stray("a")
        });
        tokio::task::yield_now().await;
        assert!(
            !second.is_finished(),
            "the second upload went ahead of the first"
        );
        let other = keys.hold("b").await; // another key does not wait
        drop(other);
        drop(first);
        assert!(
            !second.await.unwrap(),
            "the new upload's key is not a stray"
        );
        keys.idle().await;
        assert!(keys.strays().is_empty());
    }
}
