//! ListObjectsV2 of the mock: keys rolled up into common prefixes at the delimiter, pages
//! of at most `max_keys` entries, and continuation tokens as opaque as S3's.

use std::sync::atomic::Ordering;

use super::{http_error, info, MockClient, Op};
use crate::{List, ListPage, ObjectInfo, Result};

impl MockClient {
    /// ListObjectsV2: keys after `start_after` are rolled up into common prefixes, then
    /// paged; `token` continues after the last entry of the page that handed it out.
    pub(super) async fn list(&self, list: List<'_>, start_after: &str) -> Result<ListPage> {
        let (prefix, delimiter) = (list.prefix, list.delimiter);
        let (token, max_keys) = (list.token, list.max_keys);
        self.enter(Op::List).await?;
        let what = format!("list {prefix}");
        let after = match token {
            None => None,
            Some(t) => match self.tokens.lock().get(&t) {
                Some((p, last)) if p == prefix => Some(last.clone()),
                _ => {
                    let msg = "The continuation token provided is incorrect";
                    return Err(http_error(&what, 400, "InvalidArgument", msg));
                }
            },
        };
        let max = max_keys.unwrap_or(1000).max(1) as usize;
        let mut page = ListPage::default();
        let mut last: Option<String> = None;
        for (name, obj) in self.entries(prefix, delimiter, start_after) {
            if after.as_ref().is_some_and(|a| name.as_str() <= a.as_str()) {
                continue;
            }
            if page.objects.len() + page.prefixes.len() == max {
                let t = format!(
                    "mock-token-{}",
                    self.next_id.fetch_add(1, Ordering::Relaxed)
                );
                let last = last.unwrap_or_default();
                self.tokens
                    .lock()
                    .insert(t.clone(), (prefix.to_string(), last));
                page.next_token = Some(t);
                break;
            }
            match obj {
                Some(o) => page.objects.push(o),
                None => page.prefixes.push(name.clone()),
            }
            last = Some(name);
        }
        Ok(page)
    }

    /// Every entry below `prefix` after `start_after`, in key order, prefixes collapsed.
    fn entries(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        start_after: &str,
    ) -> Vec<(String, Option<ObjectInfo>)> {
        let objects = self.objects.lock();
        let mut entries: Vec<(String, Option<ObjectInfo>)> = Vec::new();
        for (key, o) in objects.range(prefix.to_string()..) {
            if !key.starts_with(prefix) {
                break;
            }
            if key.as_str() <= start_after {
                continue;
            }
            let rest = &key[prefix.len()..];
            match delimiter.and_then(|d| rest.find(d).map(|i| (i, d))) {
                Some((i, d)) => {
                    let p = format!("{prefix}{}{d}", &rest[..i]);
                    if entries.last().map(|e| &e.0) != Some(&p) {
                        entries.push((p, None));
                    }
                }
                None => entries.push((key.clone(), Some(info(key, o)))),
            }
        }
        entries
    }
}
