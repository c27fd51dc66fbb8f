//! ListObjectsV2 as the trait's two listings send it (`list_page`, `list_after`): keys
//! asked for URL-encoded, so that every byte of a key survives the XML, and decoded
//! again here into a `ListPage`.

use super::{query_value, xml, S3Client};
use crate::rest::{text, Call};
use crate::{List, ListPage, ObjectInfo, Result};

/// A key of a listing asked for with `EncodingType=url`: `%XX` is a byte and `+` a
/// space (form encoding, as AWS S3 and SeaweedFS write it, and as botocore reads it).
fn url_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        match b[i] {
            b'+' => out.push(b' '),
            b'%' if i + 2 < b.len() => match (hex(b[i + 1]), hex(b[i + 2])) {
                (Some(h), Some(l)) => {
                    out.push((h * 16 + l) as u8);
                    i += 2;
                }
                _ => out.push(b'%'),
            },
            c => out.push(c),
        }
        i += 1;
    }
    String::from_utf8(out).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

impl S3Client {
    /// One page of ListObjectsV2 of `list`; `start_after` only for `list_after`.
    pub(super) async fn list(&self, list: List<'_>, start_after: Option<&str>) -> Result<ListPage> {
        let what = format!("list {}", list.prefix);
        let url = self.list_url(&list, start_after);
        let call = Call::new(http::Method::GET, &url, &what);
        let r = self.send(call, "ListObjectsV2").await?;
        let body = text(r, &what).await?;
        let page = xml::object_page(&body)?;
        // A server that ignores the request says no EncodingType: its keys are plain.
        let name = |k: String| if page.encoded { url_decode(&k) } else { k };
        let objects = (page.objects.into_iter())
            .map(|o| ObjectInfo {
                key: name(o.key),
                ..o
            })
            .collect();
        Ok(ListPage {
            objects,
            prefixes: page.prefixes.into_iter().map(name).collect(),
            next_token: page.next_token.filter(|_| page.truncated),
            metadata: Default::default(),
        })
    }

    /// The URL of a ListObjectsV2 of `list`.
    pub(super) fn list_url(&self, list: &List<'_>, start_after: Option<&str>) -> String {
        // XML 1.0 cannot carry bytes 0x01-0x1F (but tab, newline, CR): without
        // `encoding-type=url` a server sends them as U+FFFD, and such a key could never
        // be named again. An empty `prefix=` is left out (no prefix is the same).
        let mut q = String::from("list-type=2&encoding-type=url");
        let mut add = |name: &str, v: &str| q.push_str(&format!("&{name}={}", query_value(v)));
        if !list.prefix.is_empty() {
            add("prefix", list.prefix);
        }
        if let Some(d) = list.delimiter {
            add("delimiter", d);
        }
        if let Some(t) = &list.token {
            add("continuation-token", t);
        }
        if let Some(s) = start_after {
            add("start-after", s);
        }
        if let Some(n) = list.max_keys {
            add("max-keys", &n.to_string());
        }
        self.bucket_url(&q)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listing_keys_are_url_decoded() {
        assert_eq!(url_decode("a%01b+c%2B%25%C3%BC"), "a\u{1}b c+%ü");
        assert_eq!(url_decode("50%"), "50%");
        assert_eq!(url_decode("x%zz%4"), "x%zz%4");
    }
}
