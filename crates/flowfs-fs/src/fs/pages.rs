//! The pages of a directory's listing. S3 hands them out one after another (each page's
//! token asks for the next), so a directory of 10,000 keys listed again once a TTL cost
//! ten round trips in a row, while every lookup in it waited: a `cp -r` of 10,000 small
//! files at 20 ms per request took 50-63 s, against 26-28 s when no listing was taken
//! again. A directory listed before is listed again in ranges split at the names where
//! the pages of its last listing began, all ranges at once (`start-after`), and the pages
//! are then read in key order as one listing would have given them.

use std::sync::Arc;

use flowfs_client::{ClientError, ListPage, ObjectClient};

use crate::error::Result;
use crate::inode::{Kind, Listing};

use super::batch::batched;
use super::remote::Remote;

/// Keys in one page of a LIST (S3's maximum, and what SeaweedFS gives).
pub(super) const PAGE: usize = 1000;

/// Where a listing is split: at every `PAGE`th entry of the last listing of `l`, so that
/// each range is about one page, unless it grew. A split is the entry's key as the LIST
/// gives it, relative to the prefix: a directory's is its common prefix `name/`. Split at
/// `name`, a directory fell between two ranges (the one up to `name` cuts `name/` off,
/// the one after starts past it), and was missing from every listing taken again: 8 of
/// 8,192 new directories were ENOENT in stress-ng's chdir stressor (issue 47). Sorted, as
/// keys order differently from names (`a-b` < `a/`).
pub(super) fn splits_of(l: &Listing) -> Vec<String> {
    let mut splits: Vec<String> = (l.entries.iter())
        .skip(PAGE - 1)
        .step_by(PAGE)
        .map(|(name, e)| match e.kind {
            Kind::Dir => format!("{name}/"),
            _ => name.to_string(),
        })
        .collect();
    splits.sort();
    splits.dedup();
    splits
}

impl Remote {
    /// The pages of the listing of `prefix` in key order: one after another (`None` past
    /// `max_pages`), or, with `splits` (names), the ranges between them all at once.
    pub(super) async fn list_pages(
        &self,
        prefix: &str,
        splits: &[String],
        max_pages: usize,
    ) -> Result<Option<Vec<ListPage>>> {
        if splits.is_empty() {
            let (client, prefix) = (self.client().clone(), prefix.to_string());
            return Ok(list_range(client, prefix, None, None, max_pages).await?);
        }
        if splits.len() >= max_pages {
            return Ok(None); // more pages than asked for, last time
        }
        let bound = |i: usize| splits.get(i).map(|s| format!("{prefix}{s}"));
        let ranges: Vec<(usize, Option<String>, Option<String>)> = (0..=splits.len())
            .map(|i| (i, i.checked_sub(1).and_then(bound), bound(i)))
            .collect();
        let mut got: Vec<Vec<ListPage>> = vec![Vec::new(); ranges.len()];
        batched(
            &ranges,
            |(i, after, upto)| {
                let (client, prefix) = (self.client().clone(), prefix.to_string());
                let (i, after, upto) = (*i, after.clone(), upto.clone());
                async move { (i, list_range(client, prefix, after, upto, usize::MAX).await) }
            },
            |(i, pages)| {
                // Never `None`: a range has no page bound.
                got[i] = pages?.unwrap_or_default();
                Ok(())
            },
        )
        .await?;
        Ok(Some(got.into_iter().flatten().collect()))
    }
}

/// The pages of the keys and common prefixes of `prefix` after `after` up to `upto`
/// (both full keys; none: from the start, to the end), cut at `upto`; `None` when there
/// are more than `max_pages`.
async fn list_range(
    client: Arc<dyn ObjectClient>,
    prefix: String,
    after: Option<String>,
    upto: Option<String>,
    max_pages: usize,
) -> std::result::Result<Option<Vec<ListPage>>, ClientError> {
    let mut pages = Vec::new();
    let mut token = None;
    loop {
        let mut page = match &after {
            Some(a) => {
                client
                    .list_after(flowfs_client::ListAfter::new(&prefix, a).token(token))
                    .await?
            }
            None => {
                client
                    .list_page(flowfs_client::List::dir(&prefix).token(token))
                    .await?
            }
        };
        let past = |s: &str| upto.as_deref().is_some_and(|u| s > u);
        // The page reached the bound: its last item (keys and prefixes interleave in
        // key order) is at or past it.
        let last = page.objects.last().map(|o| o.key.as_str());
        let last = last.max(page.prefixes.last().map(String::as_str));
        let ended = last.is_some_and(|l| upto.as_deref().is_some_and(|u| l >= u));
        page.objects.retain(|o| !past(&o.key));
        page.prefixes.retain(|p| !past(p));
        token = page.next_token.take();
        pages.push(page);
        if ended || token.is_none() {
            return Ok(Some(pages));
        }
        if pages.len() >= max_pages {
            return Ok(None);
        }
    }
}
