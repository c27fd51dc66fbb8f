//! GCS listings: one page of `objects.list` (part objects of open uploads left out),
//! every page at once, and a page as the trait's `ListPage`.

use http::Method;

use super::json::{self, Page, OBJECT_FIELDS};
use super::uploads;
use super::{query_value, GcsClient};
use crate::{ClientError, ListPage, Result};

/// What one `objects.list` asks.
#[derive(Default)]
pub(super) struct ListQuery<'a> {
    pub prefix: &'a str,
    pub delimiter: Option<&'a str>,
    pub token: Option<&'a str>,
    pub max: Option<i32>,
    pub start_offset: Option<&'a str>,
}

impl GcsClient {
    /// One page of `objects.list`, its part objects left out (unless it lists them).
    pub(super) async fn list_objects(&self, q: ListQuery<'_>) -> Result<Page> {
        let mut query = format!(
            "fields={}",
            query_value(&format!("items({OBJECT_FIELDS}),prefixes,nextPageToken"))
        );
        let params = [
            ("prefix", Some(q.prefix).filter(|p| !p.is_empty())),
            ("delimiter", q.delimiter),
            ("pageToken", q.token),
            ("startOffset", q.start_offset),
        ];
        for (name, value) in params {
            if let Some(v) = value {
                query.push_str(&format!("&{name}={}", query_value(v)));
            }
        }
        // GCS's own page size, asked for: fake-gcs-server answers every key at once
        // without it.
        let max = q.max.unwrap_or(1000).clamp(1, 1000);
        query.push_str(&format!("&maxResults={max}"));
        let what = format!("list of {}/{}", self.bucket, q.prefix);
        let url = self.object_url("", &query);
        let got = match self.call(Method::GET, &url, None, &what).await {
            Err(ClientError::NotFound(_)) => {
                return Err(ClientError::NoSuchBucket(self.bucket.clone()))
            }
            r => r?,
        };
        let mut page: Page = json::parse(&got, &what)?;
        if !uploads::hidden(q.prefix) {
            page.items.retain(|o| !uploads::hidden(&o.name));
            page.prefixes.retain(|p| !uploads::hidden(p));
        }
        Ok(page)
    }

    /// Every page of `objects.list` below `prefix`, as one.
    pub(super) async fn list_every(&self, prefix: &str, delimiter: Option<&str>) -> Result<Page> {
        let (mut all, mut token) = (Page::default(), None);
        loop {
            let q = ListQuery {
                prefix,
                delimiter,
                token: token.as_deref(),
                ..ListQuery::default()
            };
            let page = self.list_objects(q).await?;
            all.items.extend(page.items);
            all.prefixes.extend(page.prefixes);
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => return Ok(all),
            }
        }
    }

    /// Whether a key below `prefix` sorts after `start_after`.
    pub(super) async fn key_after(&self, prefix: &str, start_after: &str) -> Result<bool> {
        let q = ListQuery {
            prefix,
            max: Some(2),
            start_offset: Some(start_after),
            ..ListQuery::default()
        };
        let page = self.list_objects(q).await?;
        Ok(page.items.iter().any(|o| o.name.as_str() > start_after))
    }
}

/// A page of `objects.list` as the trait's `ListPage`.
pub(super) fn list_page(page: Page) -> ListPage {
    let mut out = ListPage {
        prefixes: page.prefixes,
        next_token: page.next_page_token,
        ..ListPage::default()
    };
    for o in page.items {
        out.objects.push(o.info());
        // The listing asks for each object's metadata: one without any has none, known.
        out.metadata.insert(o.name, o.metadata.unwrap_or_default());
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_objects_carry_their_metadata_even_when_empty() {
        let page: Page = json::parse(
            br#"{"items":[{"name":"a","size":"1","generation":"2","metadata":{"mode":"1"}},
                {"name":"b","size":"0","generation":"3"}],"prefixes":["d/"],"nextPageToken":"t"}"#,
            "l",
        )
        .unwrap();
        let p = list_page(page);
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.metadata["a"]["mode"], "1");
        assert!(p.metadata["b"].is_empty());
        assert_eq!(p.next_token.as_deref(), Some("t"));
    }
}
