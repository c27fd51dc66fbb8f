//! The XML of Azure Blob's answers flowfs reads (List Blobs, Get Block List), read with
//! crate::xml's walk, and the one it sends (Put Block List).

use std::collections::HashMap;
use std::time::SystemTime;

use crate::xml::name_of;
use crate::{ObjectInfo, Result};

/// One page of List Blobs.
#[derive(Debug, Default)]
pub(crate) struct BlobPage {
    pub blobs: Vec<ObjectInfo>,
    pub prefixes: Vec<String>,
    pub next_marker: Option<String>,
    /// The metadata of every listed blob, by key (names as flowfs uses them).
    pub metadata: HashMap<String, HashMap<String, String>>,
}

/// The blobs and prefixes of a List Blobs answer. ETags come quoted, as a HEAD gives
/// them (the listing leaves the quotes off). A page lists its prefixes and blobs in key
/// order merged (Azurite puts the prefixes first).
pub(crate) fn blob_page(xml: &str) -> Result<BlobPage> {
    let mut page = BlobPage::default();
    let mut blob: Option<ObjectInfo> = None;
    const BLOB: &str = "/EnumerationResults/Blobs/Blob";
    crate::xml::walk(xml, "Azure", "List Blobs", |path, v, encoded| match path {
        p if p == format!("{BLOB}/Name") => {
            page.blobs.extend(blob.take());
            let key = name_of(v, encoded);
            // Asked with include=metadata: a blob without any has none, known.
            page.metadata.insert(key.clone(), HashMap::new());
            blob = Some(ObjectInfo {
                key,
                size: 0,
                etag: String::new(),
                last_modified: SystemTime::UNIX_EPOCH,
            });
        }
        p if p == format!("{BLOB}/Properties/Content-Length") => {
            if let Some(b) = blob.as_mut() {
                b.size = v.parse().unwrap_or(0);
            }
        }
        p if p == format!("{BLOB}/Properties/Etag") => {
            if let Some(b) = blob.as_mut() {
                b.etag = super::quoted(&v);
            }
        }
        p if p == format!("{BLOB}/Properties/Last-Modified") => {
            if let Some(b) = blob.as_mut() {
                b.last_modified = httpdate::parse_http_date(&v).unwrap_or(SystemTime::UNIX_EPOCH);
            }
        }
        p if p.starts_with(&format!("{BLOB}/Metadata/")) => {
            if let Some(b) = blob.as_ref() {
                let name = super::meta_name_in(&p[BLOB.len() + "/Metadata/".len()..]);
                page.metadata
                    .entry(b.key.clone())
                    .or_default()
                    .insert(name, v);
            }
        }
        "/EnumerationResults/Blobs/BlobPrefix/Name" => page.prefixes.push(name_of(v, encoded)),
        "/EnumerationResults/NextMarker" => page.next_marker = Some(v),
        _ => {}
    })?;
    page.blobs.extend(blob);
    Ok(page)
}

/// The names (still base64) of the uncommitted blocks in a Get Block List answer.
pub(crate) fn uncommitted_blocks(xml: &str) -> Result<Vec<String>> {
    let mut names = Vec::new();
    crate::xml::walk(xml, "Azure", "Get Block List", |path, v, _| {
        if path == "/BlockList/UncommittedBlocks/Block/Name" {
            names.push(v);
        }
    })?;
    Ok(names)
}

/// The body of a Put Block List committing `ids` (base64) in order.
pub(crate) fn block_list(ids: &[String]) -> String {
    let mut s = String::from("<?xml version=\"1.0\" encoding=\"utf-8\"?><BlockList>");
    for id in ids {
        // Base64 holds no character XML would need escaped.
        s.push_str("<Uncommitted>");
        s.push_str(id);
        s.push_str("</Uncommitted>");
    }
    s.push_str("</BlockList>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page() {
        let xml = r#"<?xml version="1.0" encoding="utf-8"?>
<EnumerationResults ServiceEndpoint="http://x/" ContainerName="c"><Prefix>d/</Prefix>
<Blobs><BlobPrefix><Name>d/sub/</Name></BlobPrefix>
<Blob><Name>d/a&amp;b</Name><Properties><Last-Modified>Sat, 28 Nov 2026 09:00:00 GMT</Last-Modified>
<Etag>0x8DC1</Etag><Content-Length>12</Content-Length></Properties><Metadata><mode>33188</mode><flowfs__symlink>t</flowfs__symlink></Metadata></Blob>
<Blob><Name Encoded="true">d/%01x</Name><Properties><Content-Length>0</Content-Length><Etag>"0x8DC2"</Etag></Properties></Blob>
</Blobs><NextMarker>m2</NextMarker></EnumerationResults>"#;
        let p = blob_page(xml).unwrap();
        assert_eq!(p.prefixes, vec!["d/sub/"]);
        assert_eq!(p.blobs.len(), 2);
        assert_eq!(p.blobs[0].key, "d/a&b");
        assert_eq!(p.blobs[0].size, 12);
        assert_eq!(p.blobs[0].etag, "\"0x8DC1\"");
        assert_eq!(
            p.blobs[0].last_modified,
            httpdate::parse_http_date("Sat, 28 Nov 2026 09:00:00 GMT").unwrap()
        );
        assert_eq!(p.metadata["d/a&b"]["mode"], "33188");
        assert_eq!(p.metadata["d/a&b"]["flowfs-symlink"], "t");
        assert!(
            p.metadata["d/\u{1}x"].is_empty(),
            "listed without metadata: none"
        );
        assert_eq!(p.blobs[1].key, "d/\u{1}x");
        assert_eq!(p.blobs[1].etag, "\"0x8DC2\"");
        assert_eq!(p.next_marker.as_deref(), Some("m2"));
        let last =
            blob_page("<EnumerationResults><Blobs/><NextMarker/></EnumerationResults>").unwrap();
        assert!(last.next_marker.is_none() && last.blobs.is_empty());
    }

    #[test]
    fn uncommitted_block_names() {
        let xml = "<BlockList><CommittedBlocks><Block><Name>QQ==</Name><Size>1</Size></Block>\
                   </CommittedBlocks><UncommittedBlocks><Block><Name>Qg==</Name><Size>2</Size>\
                   </Block></UncommittedBlocks></BlockList>";
        assert_eq!(uncommitted_blocks(xml).unwrap(), vec!["Qg=="]);
        assert!(block_list(&["QQ==".into()]).contains("<Uncommitted>QQ==</Uncommitted>"));
    }
}
