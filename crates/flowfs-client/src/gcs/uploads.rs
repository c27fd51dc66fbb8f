//! S3's multipart uploads on GCS, which has none of its own that can take parts in
//! parallel (a resumable upload takes its bytes in order): each part is an object of its
//! own, and the completion composes them into the key (32 sources per compose call, so a
//! tree of them above 32 parts), then deletes them. The parts of upload ID of KEY live at
//!
//! `.flowfs-parts/H/ID/` with `open` (empty, written by `create_multipart` so that
//! `list_uploads` finds an upload before its first part), `pNNNNN` (part NNNNN) and
//! `cL-NNNNN` (a compose of level L) and `whole` (the last compose, rewritten into the
//! key: why at `GcsClient::compose_upload`),
//!
//! H being the first 128 bits of the key's SHA-256 in hex (a key may be 1024 bytes; a
//! part's name must stay below that). Listings leave `.flowfs-parts/` out. An upload id is
//! flowfs's own, `SECS-NONCE` (when it began, and 64 random bits). The metadata given at
//! creation, and each part's generation, are kept here until the completion: an upload
//! survives only in the process that began it, as flowfs's recovery expects (it aborts a
//! dead mount's uploads, which deletes their part objects, and sends the files again).

use std::collections::BTreeMap;

use sha2::{Digest, Sha256};

use crate::UploadInfo;

/// Where the part objects of every upload live, at the bucket's root.
pub(crate) const PARTS_DIR: &str = ".flowfs-parts/";
/// Sources one compose call takes (GCS's limit).
pub(super) const COMPOSE_MAX: usize = 32;

/// The uploads this client began and has not ended, each with the generation of every
/// part object it sent (part number → generation).
pub(super) type Uploads = crate::rest::OpenUploads<BTreeMap<i32, String>>;

/// The directory of every upload of `key`.
pub(super) fn key_dir(key: &str) -> String {
    let h = Sha256::digest(key.as_bytes());
    let hex: String = h[..16].iter().map(|b| format!("{b:02x}")).collect();
    format!("{PARTS_DIR}{hex}/")
}

/// The directory of upload `id` of `key`.
pub(super) fn upload_dir(key: &str, id: &str) -> String {
    format!("{}{id}/", key_dir(key))
}

/// The object that says upload `id` of `key` is open.
pub(super) fn marker(key: &str, id: &str) -> String {
    format!("{}open", upload_dir(key, id))
}

/// The object of part `n`.
pub(super) fn part(key: &str, id: &str, n: i32) -> String {
    format!("{}p{n:05}", upload_dir(key, id))
}

/// The object of compose `i` at `level` of the tree.
pub(super) fn composed(key: &str, id: &str, level: usize, i: usize) -> String {
    format!("{}c{level}-{i:05}", upload_dir(key, id))
}

/// The object of the last compose: the whole upload, before it is rewritten into the key.
pub(super) fn whole(key: &str, id: &str) -> String {
    format!("{}whole", upload_dir(key, id))
}

/// The open upload a common prefix below `key_dir` names (`.../ID/`).
pub(super) fn upload_of(prefix: &str) -> Option<UploadInfo> {
    let id = prefix.trim_end_matches('/').rsplit('/').next()?;
    crate::rest::valid_upload_id(id).then(|| UploadInfo {
        upload_id: id.to_string(),
        initiated: crate::rest::upload_began(id),
    })
}

/// Whether a key is one of the part objects listings leave out.
pub(crate) fn hidden(key: &str) -> bool {
    key.starts_with(PARTS_DIR)
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    #[test]
    fn an_upload_lives_below_its_keys_directory() {
        let ups = Uploads::default();
        let id = ups.begin("k", &HashMap::new());
        assert!(crate::rest::valid_upload_id(&id), "{id}");
        let dir = upload_dir("k", &id);
        assert!(dir.starts_with(&key_dir("k")) && hidden(&dir));
        assert_eq!(key_dir("k").len(), PARTS_DIR.len() + 33);
        assert_ne!(key_dir("k"), key_dir("k2"));
        assert_eq!(part("k", &id, 7), format!("{dir}p00007"));
        assert_eq!(marker("k", &id), format!("{dir}open"));
        assert_eq!(upload_of(&dir).unwrap().upload_id, id);
        assert!(upload_of(".flowfs-parts/x/not-an-id/").is_none());
        assert!(ups.end("k", &id) && !ups.end("k", &id), "ended once");
    }
}
