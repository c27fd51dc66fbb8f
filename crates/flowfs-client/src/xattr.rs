//! Extended attributes kept in an object's metadata in s3fs-fuse's convention (its
//! `use_xattr` option, checked against s3fs 1.90 here): one key, `xattr`, whose value is
//! the percent-encoding of a JSON object from each attribute's full name (`user.foo`) to
//! its value in base64. s3fs reads what flowfs writes and the other way round, and any S3
//! tool sees them in a HEAD. Pure data: no I/O.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, LazyLock};

use base64::engine::general_purpose::STANDARD;
use base64::Engine;

use crate::percent::{percent_decode, percent_escape};

/// The metadata name (without the store's prefix) that holds them.
pub const XATTR: &str = "xattr";

/// What S3 allows of an object's user metadata, names and values together (AWS: "the
/// user-defined metadata is limited to 2 KB", counted as the bytes of each name and
/// value). GCS and Azure allow 8 KiB; flowfs keeps every store to the smallest, so that
/// a bucket copied between stores keeps its attributes.
pub const METADATA_LIMIT: usize = 2048;

/// Extended attributes by full name (`user.foo`).
pub type Xattrs = BTreeMap<String, Vec<u8>>;

/// No attributes, known to be none: one allocation shared by every object read without
/// them (a million HEADs would otherwise make a million empty maps).
pub fn none() -> Arc<Xattrs> {
    static NONE: LazyLock<Arc<Xattrs>> = LazyLock::new(Arc::default);
    NONE.clone()
}

/// What an object's `xattr` value (`None`: it has none) says it holds.
pub fn read(value: Option<&str>) -> Arc<Xattrs> {
    match value.and_then(decode) {
        Some(x) if !x.is_empty() => Arc::new(x),
        _ => none(),
    }
}

/// The `xattr` value of `x`: names in order, values in base64, percent-encoded as s3fs
/// writes it (`{` `"` `:` `,` `=` `+` escaped).
pub fn encode(x: &Xattrs) -> String {
    let json: BTreeMap<&str, String> = x
        .iter()
        .map(|(k, v)| (k.as_str(), STANDARD.encode(v)))
        .collect();
    let text = serde_json::to_string(&json).unwrap_or_default();
    let mut out = String::with_capacity(text.len() * 2);
    percent_escape(&mut out, &text, |b| {
        b.is_ascii_alphanumeric() || b"-_.~/".contains(&b)
    });
    out
}

/// The attributes an `xattr` value holds; `None` where it is no such value (s3fs logs
/// "is not json format" and shows none: so does flowfs). An entry whose value is not
/// base64 is left out.
pub fn decode(value: &str) -> Option<Xattrs> {
    let json: BTreeMap<String, String> = serde_json::from_str(&percent_decode(value)).ok()?;
    Some(
        json.into_iter()
            .filter_map(|(k, v)| Some((k, STANDARD.decode(v.trim()).ok()?)))
            .collect(),
    )
}

/// How much of `METADATA_LIMIT` metadata takes: the bytes of every name and value.
pub fn metadata_size(metadata: &HashMap<String, String>) -> usize {
    metadata.iter().map(|(k, v)| k.len() + v.len()).sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn written_as_s3fs_writes_them() {
        // What s3fs 1.90 (use_xattr) stored for these two attributes on SeaweedFS.
        let by_s3fs =
            "%7B%22user.checksum.md5%22%3A%22YWJj%22%2C%22user.foo%22%3A%22YmFyIGJhegD/%22%7D";
        let x: Xattrs = [
            ("user.foo".to_string(), b"bar baz\x00\xff".to_vec()),
            ("user.checksum.md5".to_string(), b"abc".to_vec()),
        ]
        .into();
        assert_eq!(decode(by_s3fs), Some(x.clone()));
        assert_eq!(encode(&x), by_s3fs);
        assert_eq!(decode(&encode(&x)), Some(x));
    }

    #[test]
    fn odd_names_and_empty_values_go_and_come_back() {
        let x: Xattrs = [
            ("user.é \"q\"%".to_string(), Vec::new()),
            ("user.b".to_string(), vec![0xfb; 40]),
        ]
        .into();
        let enc = encode(&x);
        assert!(
            enc.is_ascii() && !enc.contains(['"', ' ', '+', '=']),
            "{enc}"
        );
        assert_eq!(decode(&enc), Some(x));
    }

    #[test]
    fn what_is_not_their_form_is_none() {
        assert_eq!(decode(""), None);
        assert_eq!(decode("%7B%22user.a%22"), None);
        let one_bad = "%7B%22user.a%22%3A%22aGk%3D%22%2C%22user.b%22%3A%22%21%21%22%7D";
        assert_eq!(
            decode(one_bad),
            Some([("user.a".into(), b"hi".to_vec())].into())
        );
    }

    #[test]
    fn metadata_counts_names_and_values() {
        let m: HashMap<String, String> = [("mode".into(), "33188".into())].into();
        assert_eq!(metadata_size(&m), 9);
    }
}
