//! S3's multipart uploads as Azure block blobs. Azure has no upload object: blocks are
//! staged on the blob (Put Block, ids chosen by the client) and made the blob by a Put
//! Block List. So an upload id here is flowfs's own, `SECS-NONCE` (when it began, and 64
//! random bits), and every block id of an upload begins with it:
//!
//! - `SECS-NONCE-o00000`: staged (1 byte) by `create_multipart`, so that `list_uploads`
//!   (a Get Block List of the uncommitted blocks) finds an upload before its first part;
//! - `SECS-NONCE-pNNNNN`: part NNNNN;
//! - `SECS-NONCE-x00000`: staged by `abort_multipart`: Azure cannot drop one upload's
//!   blocks (its garbage collection drops uncommitted blocks after 7 days, and a commit
//!   or a Put Blob of the key drops them all at once), so an aborted upload is one with
//!   this block, which `list_uploads` leaves out.
//!
//! Azure wants every block id of a blob the same length: all of these are 34 bytes.
//! The metadata given at creation is kept here until the completion, which writes it
//! (Put Block List takes it): an upload survives only in the process that began it, as
//! flowfs's recovery expects (it aborts a dead mount's uploads and sends the files again).

use base64::Engine;

use crate::UploadInfo;

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// What a block of an upload is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Block {
    Opened,
    Part(i32),
    Aborted,
}

/// The uploads this client began and has not ended: their keys and metadata.
pub(super) type Uploads = crate::rest::OpenUploads<()>;

/// The block id (base64, as sent) of `block` of upload `id`.
pub(super) fn block_id(id: &str, block: Block) -> String {
    let (kind, n) = match block {
        Block::Opened => ('o', 0),
        Block::Part(n) => ('p', n),
        Block::Aborted => ('x', 0),
    };
    B64.encode(format!("{id}-{kind}{n:05}"))
}

/// The upload and block a block id names, if it is one of flowfs's.
pub(super) fn parse_block(b64: &str) -> Option<(String, Block)> {
    let raw = String::from_utf8(B64.decode(b64).ok()?).ok()?;
    let (id, rest) = raw.rsplit_once('-')?;
    if !crate::rest::valid_upload_id(id) || rest.len() != 6 {
        return None;
    }
    let n: i32 = rest[1..].parse().ok()?;
    let block = match &rest[..1] {
        "o" => Block::Opened,
        "p" => Block::Part(n),
        "x" => Block::Aborted,
        _ => return None,
    };
    Some((id.to_string(), block))
}

/// The open uploads among a blob's uncommitted block ids: opened and not aborted.
pub(super) fn open_uploads(blocks: &[String]) -> Vec<UploadInfo> {
    let parsed: Vec<(String, Block)> = blocks.iter().filter_map(|b| parse_block(b)).collect();
    let aborted = |id: &str| parsed.iter().any(|(i, b)| i == id && *b == Block::Aborted);
    let mut out: Vec<UploadInfo> = parsed
        .iter()
        .filter(|(id, b)| *b == Block::Opened && !aborted(id))
        .map(|(id, _)| UploadInfo {
            upload_id: id.clone(),
            initiated: crate::rest::upload_began(id),
        })
        .collect();
    out.dedup_by(|a, b| a.upload_id == b.upload_id);
    out
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;
    use std::time::{Duration, UNIX_EPOCH};

    use super::*;

    #[test]
    fn block_ids_name_their_upload_and_have_one_length() {
        let ups = Uploads::default();
        let id = ups.begin("k", &HashMap::new());
        assert!(crate::rest::valid_upload_id(&id), "{id}");
        let blocks = [
            Block::Opened,
            Block::Part(1),
            Block::Part(10_000),
            Block::Aborted,
        ];
        let ids: Vec<String> = blocks.iter().map(|b| block_id(&id, *b)).collect();
        assert!(ids.iter().all(|b| b.len() == ids[0].len()));
        for (b, s) in blocks.iter().zip(&ids) {
            assert_eq!(parse_block(s), Some((id.clone(), *b)));
        }
        assert_eq!(parse_block("QUJD"), None, "another tool's block");
        assert!(ups.is_open("k", &id) && !ups.is_open("k2", &id));
        assert!(ups.end("k", &id));
        assert!(!ups.end("k", &id), "ended once");
    }

    #[test]
    fn aborted_uploads_are_not_listed() {
        let (a, b) = ("0000000001-00000000000000aa", "0000000002-00000000000000bb");
        let blocks = vec![
            block_id(a, Block::Opened),
            block_id(a, Block::Part(1)),
            block_id(b, Block::Opened),
            block_id(b, Block::Aborted),
            "QUJD".to_string(),
        ];
        let open = open_uploads(&blocks);
        assert_eq!(open.len(), 1);
        assert_eq!(open[0].upload_id, a);
        assert_eq!(open[0].initiated, UNIX_EPOCH + Duration::from_secs(1));
    }
}
