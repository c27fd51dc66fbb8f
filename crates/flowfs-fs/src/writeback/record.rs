//! A staged file's journal record (`<n>.rec`): the bucket and key its data must reach,
//! whether it is a symlink's target, its object's metadata and its other names, as text
//! a later mount reads back (staging.rs writes and scans them).

/// What a journal record says of its file beside its key.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Record {
    /// The data is a symlink's target.
    pub symlink: bool,
    /// The user metadata its object carries (mode with the type bits of a FIFO, socket or
    /// device, rdev, uid, gid: meta.rs), so that a recovered file keeps them.
    pub metadata: Vec<(String, String)>,
    /// The keys of the file's other names (hard links): a recovered upload is copied to
    /// each, as a live one is.
    pub links: Vec<String>,
}

/// `bucket`, `key`, `symlink` or `file`, then a line `meta NAME VALUE` per metadata
/// entry and `link KEY` (percent-encoded) per other name. Records of earlier versions end
/// after the key (or `symlink`).
pub(super) fn record_text(bucket: &str, key: &str, rec: &Record) -> String {
    let kind = if rec.symlink { "symlink" } else { "file" };
    let mut text = format!("{bucket}\n{key}\n{kind}\n");
    for (k, v) in &rec.metadata {
        text.push_str(&format!("meta {k} {v}\n"));
    }
    for key in &rec.links {
        text.push_str(&format!("link {}\n", crate::meta::percent_encode(key)));
    }
    text
}

/// The lines after the key of a record (see `write_record`).
pub(super) fn read_record<'a>(mut lines: impl Iterator<Item = &'a str>) -> Record {
    let symlink = lines.next() == Some("symlink");
    let (mut metadata, mut links) = (Vec::new(), Vec::new());
    for l in lines {
        if let Some((k, v)) = l.strip_prefix("meta ").and_then(|l| l.split_once(' ')) {
            metadata.push((k.to_string(), v.to_string()));
        } else if let Some(key) = l.strip_prefix("link ") {
            links.push(crate::meta::percent_decode(key));
        }
    }
    Record {
        symlink,
        metadata,
        links,
    }
}
