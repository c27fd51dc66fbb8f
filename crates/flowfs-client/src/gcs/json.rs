//! The JSON of the GCS JSON API that flowfs reads (object resources, list pages, rewrite
//! answers) and writes (an upload's `multipart/related` body, a compose request).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::{Bytes, BytesMut};
use serde::Deserialize;
use serde_json::json;

use super::etag_of;
use crate::{Checksum, ClientError, ObjectInfo, ObjectMeta, Result};

/// The fields of an object flowfs reads (the `fields` of a request): the rest of a resource
/// is not sent. They are the fields [`Object`] holds.
pub(super) const OBJECT_FIELDS: &str = "name,size,generation,updated,metadata,crc32c";

/// An object resource: the fields flowfs uses (64-bit numbers come as strings).
#[derive(Debug, Deserialize)]
pub(super) struct Object {
    pub name: String,
    #[serde(default)]
    pub size: String,
    #[serde(default)]
    pub generation: String,
    #[serde(default)]
    pub updated: String,
    #[serde(default)]
    pub metadata: Option<HashMap<String, String>>,
    /// Base64 of the big-endian CRC-32C of the object, which every GCS object has.
    #[serde(default)]
    pub crc32c: Option<String>,
}

impl Object {
    pub fn info(&self) -> ObjectInfo {
        ObjectInfo {
            key: self.name.clone(),
            size: self.size.parse().unwrap_or(0),
            etag: etag_of(&self.generation),
            last_modified: modified(&self.updated),
        }
    }

    pub fn into_meta(self) -> ObjectMeta {
        ObjectMeta {
            info: self.info(),
            metadata: self.metadata.unwrap_or_default(),
            checksum: self.crc32c.map(|value| Checksum {
                name: "crc32c",
                value,
            }),
        }
    }
}

/// One page of `objects.list`.
#[derive(Debug, Default, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Page {
    #[serde(default)]
    pub items: Vec<Object>,
    #[serde(default)]
    pub prefixes: Vec<String>,
    #[serde(default)]
    pub next_page_token: Option<String>,
}

/// The answer to one `objects.rewrite` call.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub(super) struct Rewrite {
    pub done: bool,
    #[serde(default)]
    pub rewrite_token: Option<String>,
    #[serde(default)]
    pub resource: Option<Object>,
}

/// `body` as `T`, or an error naming `what`.
pub(super) fn parse<'a, T: Deserialize<'a>>(body: &'a [u8], what: &str) -> Result<T> {
    serde_json::from_slice(body).map_err(|e| {
        ClientError::Other(format!(
            "{what}: the endpoint does not answer like the GCS JSON API ({e})"
        ))
    })
}

/// Whole seconds, as the S3 backend gives them: a HEAD and a listing agree.
fn modified(rfc3339: &str) -> SystemTime {
    rfc3339
        .parse::<jiff::Timestamp>()
        .ok()
        .and_then(|t| u64::try_from(t.as_second()).ok())
        .map_or(UNIX_EPOCH, |s| UNIX_EPOCH + Duration::from_secs(s))
}

/// User metadata as GCS keeps it: names are case-sensitive there, and lower-cased here,
/// as S3 and Azure give them back (the file system reads them so).
pub(super) fn metadata_out(metadata: &HashMap<String, String>) -> serde_json::Value {
    let m: serde_json::Map<String, serde_json::Value> = metadata
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), json!(v)))
        .collect();
    serde_json::Value::Object(m)
}

/// The resource of a new object `name` with `metadata`.
pub(super) fn resource(name: &str, metadata: &HashMap<String, String>) -> serde_json::Value {
    json!({ "name": name, "metadata": metadata_out(metadata) })
}

/// A compose request: `sources` (names, each with the generation it must still have, if
/// known) into an object with `metadata`.
pub(super) fn compose(
    sources: &[(String, Option<String>)],
    metadata: &HashMap<String, String>,
) -> String {
    let src: Vec<serde_json::Value> = sources
        .iter()
        .map(|(name, generation)| match generation {
            Some(g) => json!({ "name": name, "objectPreconditions": { "ifGenerationMatch": g } }),
            None => json!({ "name": name }),
        })
        .collect();
    json!({ "sourceObjects": src, "destination": { "metadata": metadata_out(metadata) } })
        .to_string()
}

/// An `uploadType=multipart` body: the resource, then the bytes. Its content type (with
/// the boundary, chosen so that `data` does not hold it) and the body.
pub(super) fn multipart(resource: &serde_json::Value, data: &[u8]) -> (String, Bytes) {
    let boundary = loop {
        let b = format!("flowfs-{:032x}", rand::random::<u128>());
        if memchr::memmem::find(data, b.as_bytes()).is_none() {
            break b;
        }
    };
    let head = format!(
        "--{boundary}\r\ncontent-type: application/json; charset=UTF-8\r\n\r\n{resource}\r\n\
         --{boundary}\r\ncontent-type: application/octet-stream\r\n\r\n"
    );
    let tail = format!("\r\n--{boundary}--\r\n");
    let mut body = BytesMut::with_capacity(head.len() + data.len() + tail.len());
    body.extend_from_slice(head.as_bytes());
    body.extend_from_slice(data);
    body.extend_from_slice(tail.as_bytes());
    (
        format!("multipart/related; boundary={boundary}"),
        body.freeze(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_object_resource_reads_as_info_and_metadata() {
        let body = br#"{"kind":"storage#object","name":"d/f","size":"1024","generation":"1700000000123456",
            "updated":"2026-11-28T12:00:00.900Z","metadata":{"mode":"33188"},"etag":"CMDk"}"#;
        let o: Object = parse(body, "head").unwrap();
        let m = o.into_meta();
        assert_eq!(m.info.key, "d/f");
        assert_eq!(m.info.size, 1024);
        assert_eq!(m.info.etag, "\"1700000000123456\"");
        let secs = m.info.last_modified.duration_since(UNIX_EPOCH).unwrap();
        assert_eq!(secs, Duration::from_secs(1_795_867_200), "whole seconds");
        assert_eq!(m.metadata["mode"], "33188");
        let page: Page = parse(br#"{"kind":"storage#objects","prefixes":["d/"]}"#, "l").unwrap();
        assert!(page.items.is_empty() && page.next_page_token.is_none());
        assert!(parse::<Page>(b"<html>", "list").is_err());
    }

    #[test]
    fn a_multipart_body_holds_the_resource_and_the_bytes() {
        let mut m = HashMap::new();
        m.insert("Mode".to_string(), "1".to_string());
        let (ct, body) = multipart(&resource("k", &m), b"DATA");
        let boundary = ct.strip_prefix("multipart/related; boundary=").unwrap();
        let text = String::from_utf8(body.to_vec()).unwrap();
        assert!(text.starts_with(&format!("--{boundary}\r\n")));
        assert!(
            text.contains(r#"{"metadata":{"mode":"1"},"name":"k"}"#),
            "{text}"
        );
        assert!(text.ends_with(&format!("\r\n\r\nDATA\r\n--{boundary}--\r\n")));
    }

    #[test]
    fn a_compose_request_names_its_sources_and_their_generations() {
        let c = compose(
            &[("p1".into(), Some("5".into())), ("p2".into(), None)],
            &HashMap::new(),
        );
        let v: serde_json::Value = serde_json::from_str(&c).unwrap();
        assert_eq!(
            v["sourceObjects"][0]["objectPreconditions"]["ifGenerationMatch"],
            "5"
        );
        assert_eq!(v["sourceObjects"][1]["name"], "p2");
    }
}
