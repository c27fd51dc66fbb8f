//! The keys uploads are sending to: one upload per key at a time, and the keys whose
//! upload in flight belongs to a name removed meanwhile (strays).
//!
//! An unlink no longer waits for the upload of the file it removes (issue 47): that
//! upload stops sending, but a PUT or a completion already sent may still land, and its
//! task then deletes the object. Until that task ends, the key is not the removed name's
//! any more and not yet anybody else's: a new file's upload to it waits (else the stray's
//! delete could remove the new object, or the stray land over it), and listings and
//! lookups do not show the stray object.
//!
//! A directory removed while a stray below it may still land keeps a list on that stray
//! of the markers deleted (`emptied`): on SeaweedFS the stray's PUT makes the folder
//! again, and an emptied folder stays listed, so the stray's task deletes those markers
//! again after the stray. A marker is held as a key while it is deleted or made, so a
//! `mkdir` of the same name (`remade`) is never undone by a late delete.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::Notify;

use crate::wait::until;

/// Where an upload's key stands.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Sending {
    /// The upload of the file that has this name (or a directory marker being made or
    /// deleted).
    Named,
    /// The file was removed while it was uploaded: what lands is deleted, and then the
    /// markers of directories removed above it meanwhile.
    Stray { emptied: Vec<String> },
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
        if matches!(was, Some(Sending::Stray { .. })) {
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
            *s = Sending::Stray {
                emptied: Vec::new(),
            };
            self.0.strays.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Whether an object at `key` may be a stray about to be deleted.
    pub fn is_stray(&self, key: &str) -> bool {
        self.0.strays.load(Ordering::Relaxed) > 0
            && matches!(self.0.keys.lock().get(key), Some(Sending::Stray { .. }))
    }

    /// The stray keys now (empty, with no lock taken, when there are none).
    pub fn strays(&self) -> Vec<String> {
        if self.0.strays.load(Ordering::Relaxed) == 0 {
            return Vec::new();
        }
        let k = self.0.keys.lock();
        k.iter()
            .filter(|(_, s)| matches!(s, Sending::Stray { .. }))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The directory whose keys start with `marker` was removed (its marker is being
    /// deleted, held): every stray below it deletes the marker again after itself.
    pub fn emptied(&self, marker: &str) {
        self.each_stray_below(marker, |emptied| emptied.push(marker.to_string()));
    }

    /// `marker` is made again (a `mkdir`, held), or its delete failed: no stray deletes it.
    pub fn remade(&self, marker: &str) {
        self.each_stray_below(marker, |emptied| emptied.retain(|m| m != marker));
    }

    /// The markers the stray at `key` deletes after itself, the deepest first.
    pub fn emptied_above(&self, key: &str) -> Vec<String> {
        let mut out = match self.0.keys.lock().get(key) {
            Some(Sending::Stray { emptied }) => emptied.clone(),
            _ => Vec::new(),
        };
        out.sort_by_key(|m| std::cmp::Reverse(m.len()));
        out
    }

    /// Takes `marker` off the list of the stray at `key`: whether it was still on it (the
    /// caller holds `marker`, so no `mkdir` of it runs until the delete is done).
    pub fn take_emptied(&self, key: &str, marker: &str) -> bool {
        match self.0.keys.lock().get_mut(key) {
            Some(Sending::Stray { emptied }) => {
                let had = emptied.len();
                emptied.retain(|m| m != marker);
                emptied.len() < had
            }
            _ => false,
        }
    }

    fn each_stray_below(&self, marker: &str, mut f: impl FnMut(&mut Vec<String>)) {
        if self.0.strays.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut k = self.0.keys.lock();
        for (key, s) in k.iter_mut() {
            match s {
                Sending::Stray { emptied } if key.starts_with(marker) => f(emptied),
                _ => {}
            }
        }
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

    #[tokio::test]
    async fn a_stray_deletes_the_markers_removed_above_it_unless_one_was_made_again() {
        let keys = Keys::default();
        let stray = keys.hold("a/d/f").await;
        let other = keys.hold("b/g").await;
        keys.doom("a/d/f");
        keys.doom("b/g");
        keys.emptied("a/d/");
        keys.emptied("a/");
        keys.emptied("c/"); // nothing below it in flight
        assert_eq!(keys.emptied_above("a/d/f"), ["a/d/", "a/"]);
        assert!(keys.emptied_above("b/g").is_empty());
        keys.remade("a/"); // mkdir a again: its marker stays
        assert_eq!(keys.emptied_above("a/d/f"), ["a/d/"]);
        assert!(keys.take_emptied("a/d/f", "a/d/"));
        assert!(!keys.take_emptied("a/d/f", "a/d/"), "taken once");
        drop((stray, other));
        assert!(keys.emptied_above("a/d/f").is_empty());
    }
}
