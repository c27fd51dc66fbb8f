//! The bucket's `LastModified` of objects just uploaded, which becomes their mtime so that
//! a file keeps one mtime in every mount (see SEMANTICS.md, write).
//!
//! One upload alone costs a HEAD. Uploads that finish close together in one directory
//! share LISTs instead: a task writing a thousand small files costs a few LISTs, not a
//! thousand HEADs. A key the LIST does not show with the uploaded ETag gets a HEAD.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::SystemTime;

use flowfs_client::ObjectClient;
use parking_lot::Mutex;
use tokio::sync::oneshot;

/// Fewer keys than this waiting in one directory are asked for one by one.
const HEAD_BELOW: usize = 3;
/// Keys a listing page holds; a batch may read a page more than its keys need.
const PAGE: usize = 1000;

type Waiter = (String, String, oneshot::Sender<Option<SystemTime>>);

#[derive(Default)]
pub struct Stamps {
    /// Directory prefix -> keys waiting (key, ETag, answer); present while a leader runs.
    pending: Mutex<HashMap<String, Vec<Waiter>>>,
}

fn dir_of(key: &str) -> &str {
    key.rfind('/').map_or("", |i| &key[..=i])
}

/// A key just below `key` in byte order, for StartAfter: `key` without its last character.
fn before(key: &str) -> &str {
    key.char_indices().last().map_or("", |(i, _)| &key[..i])
}

impl Stamps {
    /// The `LastModified` of `key` as uploaded with `etag`, or `None` if the bucket no
    /// longer shows that version (or cannot be asked).
    pub async fn last_modified(
        self: &Arc<Self>,
        client: &Arc<dyn ObjectClient>,
        key: &str,
        etag: &str,
    ) -> Option<SystemTime> {
        let dir = dir_of(key).to_string();
        let (tx, rx) = oneshot::channel();
        let lead = {
            let mut p = self.pending.lock();
            match p.get_mut(&dir) {
                Some(w) => {
                    w.push((key.to_string(), etag.to_string(), tx));
                    false
                }
                None => {
                    p.insert(dir.clone(), vec![(key.to_string(), etag.to_string(), tx)]);
                    true
                }
            }
        };
        if lead {
            // Answers batches until none is left; keys arriving while one is asked for
            // make the next. A task of its own, so that no upload waits for others.
            let (stamps, client) = (self.clone(), client.clone());
            tokio::spawn(async move {
                loop {
                    let batch = {
                        let mut p = stamps.pending.lock();
                        let Some(w) = p.get_mut(&dir) else { break };
                        if w.is_empty() {
                            p.remove(&dir);
                            break;
                        }
                        std::mem::take(w)
                    };
                    Self::answer(&client, &dir, batch).await;
                }
            });
        }
        rx.await.ok().flatten()
    }

    async fn answer(client: &Arc<dyn ObjectClient>, dir: &str, batch: Vec<Waiter>) {
        let mut left: Vec<Waiter> = Vec::new();
        if batch.len() < HEAD_BELOW {
            left = batch;
        } else {
            let mut want: HashMap<String, Waiter> =
                batch.into_iter().map(|w| (w.0.clone(), w)).collect();
            let first = want.keys().min().cloned().unwrap_or_default();
            let last = want.keys().max().cloned().unwrap_or_default();
            let mut token = None;
            // Enough pages for the keys themselves and some others between them.
            for _ in 0..want.len().div_ceil(PAGE) + 1 {
                let Ok(page) = client.list_after(dir, before(&first), token).await else {
                    break;
                };
                for o in &page.objects {
                    if let Some((_, etag, _)) = want.get(&o.key) {
                        if *etag == o.etag {
                            if let Some((_, _, tx)) = want.remove(&o.key) {
                                let _ = tx.send(Some(o.last_modified));
                            }
                        }
                    }
                }
                let seen = page.objects.last().map(|o| o.key.clone());
                token = page.next_token;
                if want.is_empty() || token.is_none() || seen.is_some_and(|k| k >= last) {
                    break;
                }
            }
            left.extend(want.into_values());
        }
        let mut set = tokio::task::JoinSet::new();
        for (key, etag, tx) in left {
            let client = client.clone();
            set.spawn(async move {
                let t = match client.head(&key).await {
                    Ok(m) if m.info.etag == etag => Some(m.info.last_modified),
                    _ => None,
                };
                let _ = tx.send(t);
            });
        }
        while set.join_next().await.is_some() {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_bounds() {
        assert_eq!(dir_of("a/b/c"), "a/b/");
        assert_eq!(dir_of("c"), "");
        assert_eq!(before("a/f0001"), "a/f000");
        assert!(before("a/é") < "a/é");
        assert_eq!(before(""), "");
    }
}
