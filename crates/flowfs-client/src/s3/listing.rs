//! ListObjectsV2 as the trait's two listings send it (`list_page`, `list_after`): keys
//! asked for URL-encoded, so that every byte of a key survives the XML, and decoded
//! again here into a `ListPage`.

use aws_sdk_s3::types::EncodingType;

use super::errors::map_err;
use super::{etag_of, to_system_time, S3Client};
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
        let (prefix, delimiter) = (list.prefix, list.delimiter);
        let (token, max_keys) = (list.token, list.max_keys);
        let out = self
            .client
            .list_objects_v2()
            .bucket(&self.bucket)
            .prefix(prefix)
            .set_delimiter(delimiter.map(str::to_string))
            .set_continuation_token(token)
            .set_max_keys(max_keys)
            .set_start_after(start_after.map(str::to_string))
            // XML 1.0 cannot carry bytes 0x01-0x1F (but tab, newline, CR): without this
            // a server sends them as U+FFFD, and such a key could never be named again.
            .encoding_type(EncodingType::Url)
            .send()
            .await
            .map_err(|e| map_err(&format!("list {prefix}"), e))?;
        // A server that ignores the request says no EncodingType: its keys are plain.
        let encoded = out.encoding_type() == Some(&EncodingType::Url);
        let name = |k: &str| {
            if encoded {
                url_decode(k)
            } else {
                k.to_string()
            }
        };
        let objects = out
            .contents()
            .iter()
            .filter_map(|o| {
                Some(ObjectInfo {
                    key: name(o.key()?),
                    size: o.size().unwrap_or(0).max(0) as u64,
                    etag: etag_of(o.e_tag()),
                    last_modified: to_system_time(o.last_modified()),
                })
            })
            .collect();
        let prefixes = out
            .common_prefixes()
            .iter()
            .filter_map(|p| p.prefix().map(name))
            .collect();
        let next_token = if out.is_truncated().unwrap_or(false) {
            out.next_continuation_token().map(str::to_string)
        } else {
            None
        };
        Ok(ListPage {
            objects,
            prefixes,
            next_token,
            metadata: Default::default(),
        })
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
