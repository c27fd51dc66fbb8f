//! The XML of S3's answers flowfs reads (ListObjectsV2, ListMultipartUploads, the
//! answers of CreateMultipartUpload, CopyObject, UploadPartCopy and
//! CompleteMultipartUpload, and `<Error>`), read with crate::xml's walk, and the one it
//! sends (CompleteMultipartUpload).

use std::time::SystemTime;

use super::{list_time, quoted};
use crate::xml::walk;
use crate::{ObjectInfo, Result, UploadInfo};

/// One page of ListObjectsV2, keys as the answer gave them (url-encoded when `encoded`).
#[derive(Debug, Default)]
pub(super) struct ObjectPage {
    /// The answer named its bucket (every S3 ListBucketResult does).
    pub named: bool,
    pub encoded: bool,
    pub objects: Vec<ObjectInfo>,
    pub prefixes: Vec<String>,
    pub truncated: bool,
    pub next_token: Option<String>,
}

/// A ListObjectsV2 answer.
pub(super) fn object_page(xml: &str) -> Result<ObjectPage> {
    let mut page = ObjectPage::default();
    let mut object: Option<ObjectInfo> = None;
    const ROOT: &str = "/ListBucketResult";
    walk(xml, "S3", "ListObjectsV2", |path, v, _| {
        let Some(field) = path.strip_prefix(ROOT) else {
            return;
        };
        match field {
            "/Name" => page.named = true,
            "/EncodingType" => page.encoded = v == "url",
            "/IsTruncated" => page.truncated = v == "true",
            "/NextContinuationToken" => page.next_token = Some(v),
            "/CommonPrefixes/Prefix" => page.prefixes.push(v),
            "/Contents/Key" => {
                page.objects.extend(object.take());
                object = Some(ObjectInfo {
                    key: v,
                    size: 0,
                    etag: String::new(),
                    last_modified: SystemTime::UNIX_EPOCH,
                });
            }
            "/Contents/Size" => (object.as_mut()).map_or((), |o| o.size = v.parse().unwrap_or(0)),
            "/Contents/ETag" => (object.as_mut()).map_or((), |o| o.etag = v),
            "/Contents/LastModified" => {
                (object.as_mut()).map_or((), |o| o.last_modified = list_time(&v))
            }
            _ => {}
        }
    })?;
    page.objects.extend(object);
    Ok(page)
}

/// One page of ListMultipartUploads: the uploads of `key` (the prefix may match others)
/// and, if it is not the last, the markers of the next.
#[derive(Debug, Default)]
pub(super) struct UploadPage {
    pub uploads: Vec<UploadInfo>,
    pub next: Option<(String, String)>,
}

/// A ListMultipartUploads answer, keeping the uploads of `key`.
pub(super) fn upload_page(xml: &str, key: &str) -> Result<UploadPage> {
    let (mut page, mut truncated) = (UploadPage::default(), false);
    let (mut next_key, mut next_id) = (None, None);
    // Key, UploadId and Initiated of the upload being read.
    let mut cur: (Option<String>, Option<String>, SystemTime) =
        (None, None, SystemTime::UNIX_EPOCH);
    let finish = |cur: &mut (Option<String>, Option<String>, SystemTime), out: &mut Vec<_>| {
        if let (Some(k), Some(id)) = (cur.0.take(), cur.1.take()) {
            if k == key {
                out.push(UploadInfo {
                    upload_id: id,
                    initiated: cur.2,
                });
            }
        }
    };
    walk(xml, "S3", "ListMultipartUploads", |path, v, _| match path {
        "/ListMultipartUploadsResult/IsTruncated" => truncated = v == "true",
        "/ListMultipartUploadsResult/NextKeyMarker" => next_key = Some(v),
        "/ListMultipartUploadsResult/NextUploadIdMarker" => next_id = Some(v),
        "/ListMultipartUploadsResult/Upload/Key" => {
            finish(&mut cur, &mut page.uploads);
            cur.0 = Some(v);
        }
        "/ListMultipartUploadsResult/Upload/UploadId" => cur.1 = Some(v),
        "/ListMultipartUploadsResult/Upload/Initiated" => cur.2 = list_time(&v),
        _ => {}
    })?;
    finish(&mut cur, &mut page.uploads);
    if truncated {
        page.next = next_key.zip(next_id);
    }
    Ok(page)
}

/// The text of the first element at `path` of an answer, if any.
pub(super) fn field(xml: &str, what: &str, path: &str) -> Result<Option<String>> {
    let mut found = None;
    walk(xml, "S3", what, |p, v, _| {
        if p == path && found.is_none() {
            found = Some(v);
        }
    })?;
    Ok(found)
}

/// The ETag of a CopyObject, UploadPartCopy or CompleteMultipartUpload answer, quoted.
pub(super) fn etag_in(xml: &str, what: &str, root: &str) -> Result<String> {
    let etag = field(xml, what, &format!("/{root}/ETag"))?;
    Ok(quoted(&etag.unwrap_or_default()))
}

/// The `<Code>` and `<Message>` of an `<Error>` answer; empty when it is not one (or
/// is not XML at all).
pub(super) fn error_of(xml: &str) -> (String, String) {
    let (mut code, mut message) = (String::new(), String::new());
    let _ = walk(xml, "S3", "error", |path, v, _| match path {
        "/Error/Code" => code = v,
        "/Error/Message" => message = v.lines().next().unwrap_or("").chars().take(300).collect(),
        _ => {}
    });
    (code, message)
}

/// The body of a CompleteMultipartUpload of `parts` (number, ETag), in order.
pub(super) fn complete_body(parts: &[(i32, &str)]) -> String {
    let mut s =
        String::from("<CompleteMultipartUpload xmlns=\"http://s3.amazonaws.com/doc/2006-03-01/\">");
    for (n, etag) in parts {
        s.push_str(&format!(
            "<Part><PartNumber>{n}</PartNumber><ETag>{}</ETag></Part>",
            crate::xml::escape(etag)
        ));
    }
    s.push_str("</CompleteMultipartUpload>");
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listing_page() {
        let xml = r#"<?xml version="1.0" encoding="UTF-8"?>
<ListBucketResult xmlns="http://s3.amazonaws.com/doc/2006-03-01/"><Name>b</Name>
<Prefix>d%2F</Prefix><KeyCount>2</KeyCount><MaxKeys>1000</MaxKeys><Delimiter>%2F</Delimiter>
<IsTruncated>true</IsTruncated><EncodingType>url</EncodingType>
<Contents><Key>d%2Fa%26b</Key><LastModified>2026-12-07T10:00:01.500Z</LastModified>
<ETag>&quot;e1&quot;</ETag><Size>12</Size><StorageClass>STANDARD</StorageClass></Contents>
<Contents><Key>d%2F%01x</Key><Size>0</Size><ETag>"e2"</ETag></Contents>
<CommonPrefixes><Prefix>d%2Fsub%2F</Prefix></CommonPrefixes>
<NextContinuationToken>t2</NextContinuationToken></ListBucketResult>"#;
        let p = object_page(xml).unwrap();
        assert!(p.named && p.encoded && p.truncated);
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.objects[0].key, "d%2Fa%26b");
        assert_eq!(
            (p.objects[0].size, p.objects[0].etag.as_str()),
            (12, "\"e1\"")
        );
        assert_eq!(
            p.objects[0].last_modified,
            list_time("2026-12-07T10:00:01Z")
        );
        assert_eq!(p.objects[1].etag, "\"e2\"");
        assert_eq!(p.prefixes, vec!["d%2Fsub%2F"]);
        assert_eq!(p.next_token.as_deref(), Some("t2"));
        assert!(!object_page("<ListBucketResult/>").unwrap().named);
    }

    #[test]
    fn uploads_of_the_key_only() {
        let xml = "<ListMultipartUploadsResult><IsTruncated>true</IsTruncated>\
            <NextKeyMarker>k2</NextKeyMarker><NextUploadIdMarker>i2</NextUploadIdMarker>\
            <Upload><Key>k</Key><UploadId>i1</UploadId><Initiated>2026-12-07T10:00:00Z</Initiated></Upload>\
            <Upload><Key>k2</Key><UploadId>i2</UploadId></Upload></ListMultipartUploadsResult>";
        let p = upload_page(xml, "k").unwrap();
        assert_eq!(p.uploads.len(), 1);
        assert_eq!(p.uploads[0].upload_id, "i1");
        assert_eq!(p.uploads[0].initiated, list_time("2026-12-07T10:00:00Z"));
        assert_eq!(p.next, Some(("k2".into(), "i2".into())));
    }

    #[test]
    fn errors_etags_and_the_completion_body() {
        let e = "<Error><Code>NoSuchKey</Code><Message>gone\nmore</Message></Error>";
        assert_eq!(error_of(e), ("NoSuchKey".into(), "gone".into()));
        assert_eq!(error_of("<html>"), (String::new(), String::new()));
        let copy = "<CopyObjectResult><ETag>abc</ETag></CopyObjectResult>";
        assert_eq!(
            etag_in(copy, "copy", "CopyObjectResult").unwrap(),
            "\"abc\""
        );
        let body = complete_body(&[(1, "\"a\""), (2, "\"b\"")]);
        assert!(body.contains("<Part><PartNumber>1</PartNumber><ETag>&quot;a&quot;</ETag></Part>"));
    }
}
