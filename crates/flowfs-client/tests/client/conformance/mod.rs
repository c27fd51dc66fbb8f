//! The `ObjectClient` conformance suite: every behaviour the file system relies on, written
//! once as an async fn over `&dyn ObjectClient` and run against every backend (the mock by
//! `mock_conformance.rs`, a real SeaweedFS by `conformance_seaweedfs/`).
//!
//! A body gets a client and a key prefix of its own (`…/`), touches nothing outside it, and
//! asserts what real S3 does. Where the trait's doc comments are silent, the reference is
//! what the S3 backend does against SeaweedFS 4.48; where SeaweedFS and AWS S3 differ the
//! body says so in a comment (see "SeaweedFS 4.48 and AWS S3" in tests/integration/README.md).
//!
//! `FLOWFS_CONFORMANCE_ONLY=substring` runs only the behaviours whose names contain it.

#![allow(dead_code)] // each test binary uses a part of the helpers

pub mod checksums;
pub mod keys;
pub mod lists;
pub mod metadata;
pub mod reads;
pub mod writes;

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flowfs_client::{ClientError, CompletedPart, ObjectClient, PutResult, Result, Upload, Version};

pub type BoxFuture = Pin<Box<dyn Future<Output = ()> + Send>>;

/// One behaviour: its name and its body, started with a client and a fresh prefix.
pub struct Behaviour {
    pub name: &'static str,
    pub run: fn(Arc<dyn ObjectClient>, String) -> BoxFuture,
}

macro_rules! behaviour {
    ($f:path) => {
        Behaviour {
            name: stringify!($f),
            run: |c, p| Box::pin(async move { $f(&*c, &p).await }),
        }
    };
}

/// Every behaviour both backends must show.
pub fn all() -> Vec<Behaviour> {
    vec![
        behaviour!(reads::head_of_missing_key_is_not_found),
        behaviour!(reads::put_get_round_trip_with_metadata),
        behaviour!(reads::empty_object),
        behaviour!(reads::overwrite_replaces_content_and_etag),
        behaviour!(reads::ranged_get_inside_and_at_end),
        behaviour!(reads::ranged_get_end_beyond_size_is_a_short_body),
        behaviour!(reads::ranged_get_starting_at_or_past_end_is_invalid_range),
        behaviour!(reads::empty_range_is_empty),
        behaviour!(reads::if_match_mismatch_is_precondition),
        behaviour!(reads::get_range_pieces_in_order),
        behaviour!(reads::get_range_pieces_past_the_end),
        behaviour!(reads::odd_key_characters),
        behaviour!(keys::the_store_keeps_exactly_the_keys_its_rules_allow),
        behaviour!(lists::check_bucket_succeeds),
        behaviour!(lists::list_with_delimiter_splits_prefixes_and_objects),
        behaviour!(lists::list_without_delimiter_is_flat),
        behaviour!(lists::list_metadata_matches_head),
        behaviour!(lists::pagination_with_max_keys_and_tokens),
        behaviour!(lists::pagination_without_delimiter),
        behaviour!(lists::list_after_is_start_after),
        behaviour!(lists::list_after_inside_a_common_prefix),
        behaviour!(lists::control_bytes_and_plus_in_keys_list_back_exactly),
        behaviour!(writes::delete_of_missing_key_succeeds),
        behaviour!(writes::delete_removes_the_object),
        behaviour!(writes::multipart_round_trip),
        behaviour!(writes::multipart_over_an_existing_key_is_a_new_version),
        behaviour!(writes::multipart_abort_forgets_the_upload),
        behaviour!(writes::list_uploads_names_the_open_uploads_of_one_key),
        behaviour!(writes::multipart_unknown_upload_id_is_not_found),
        behaviour!(writes::multipart_complete_with_wrong_etag_fails),
        behaviour!(writes::copy_keeps_content_and_metadata),
        behaviour!(writes::a_copy_keeps_the_etag_of_a_single_part_object),
        behaviour!(writes::copy_of_missing_key_is_not_found),
        behaviour!(writes::a_copy_of_a_version_copies_only_that_version),
        behaviour!(metadata::metadata_names_come_back_lower_case),
        behaviour!(metadata::replace_metadata_keeps_body_and_etag),
        behaviour!(metadata::replace_metadata_of_a_multipart_object),
        behaviour!(metadata::replace_metadata_of_a_changed_object_is_precondition),
        behaviour!(metadata::replace_metadata_of_a_missing_key_is_not_found),
        behaviour!(metadata::copy_in_parts_replaces_metadata_and_keeps_the_body),
        behaviour!(metadata::copy_in_parts_to_another_key),
        behaviour!(checksums::every_upload_has_a_full_object_checksum),
        behaviour!(checksums::an_upload_whose_checksum_is_not_of_its_bytes_is_refused),
    ]
}

/// Runs every behaviour (each in a task of its own, so one panic does not hide the rest)
/// on the client `make` returns for it, with prefix `{base}{name}/`, and fails with the
/// list of the behaviours that failed.
pub async fn run_all(backend: &str, base: &str, make: &dyn Fn() -> Arc<dyn ObjectClient>) {
    run_all_with(backend, base, make, &[]).await
}

/// `run_all_with` over a real server, every behaviour on `client` under `conformance/`.
pub async fn run_all_on(backend: &str, client: Arc<dyn ObjectClient>, deviations: &[(&str, &str)]) {
    let make = move || client.clone();
    run_all_with(backend, "conformance/", &make, deviations).await
}

/// `run_all` for a server that gets some behaviours wrong: `deviations` names each (a
/// substring of its name) with the reason. Those run too and must still fail, so that a
/// server that mends one is noticed and its entry removed.
pub async fn run_all_with(
    backend: &str,
    base: &str,
    make: &dyn Fn() -> Arc<dyn ObjectClient>,
    deviations: &[(&str, &str)],
) {
    let _ = BACKEND.set(backend.to_string());
    let only = std::env::var("FLOWFS_CONFORMANCE_ONLY").unwrap_or_default();
    let mut failed = Vec::new();
    let mut ran = 0;
    for b in all().into_iter().filter(|b| b.name.contains(&only)) {
        let short = b.name.rsplit("::").next().unwrap_or(b.name);
        let prefix = format!("{base}{short}/");
        let task = tokio::spawn((b.run)(make(), prefix));
        let outcome = match tokio::time::timeout(Duration::from_secs(120), task).await {
            Err(_) => Some("timed out after 120 s".to_string()),
            Ok(Ok(())) => None,
            Ok(Err(e)) if e.is_panic() => Some(panic_message(e.into_panic())),
            Ok(Err(e)) => Some(e.to_string()),
        };
        ran += 1;
        let deviation = deviations.iter().find(|(n, _)| b.name.contains(n));
        match (outcome, deviation) {
            (None, None) => println!("conformance[{backend}] {} ... ok", b.name),
            (Some(_), Some((_, why))) => {
                println!(
                    "conformance[{backend}] {} ... deviation, as known: {why}",
                    b.name
                )
            }
            (None, Some((_, why))) => {
                println!(
                    "conformance[{backend}] {} ... PASSED, but listed as a deviation",
                    b.name
                );
                failed.push(format!(
                    "{}: passes now; remove it from the deviations ({why})",
                    b.name
                ));
            }
            (Some(msg), None) => {
                println!("conformance[{backend}] {} ... FAILED: {msg}", b.name);
                failed.push(format!("{}: {msg}", b.name));
            }
        }
    }
    assert!(
        ran > 0,
        "no behaviour matches FLOWFS_CONFORMANCE_ONLY={only}"
    );
    assert!(
        failed.is_empty(),
        "{backend}: {} of {ran} behaviours failed:\n{}",
        failed.len(),
        failed.join("\n")
    );
    println!("conformance[{backend}]: {ran} behaviours passed");
}

/// The backend `run_all` runs on (one per test binary).
pub(crate) static BACKEND: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Whether the store's ETags are S3's: the MD5 of the body (`-N` after a multipart
/// upload's), kept by a metadata rewrite. Azure's are opaque versions, new at every
/// change of the blob or its metadata; GCS's are generations (new at every write, kept
/// by a metadata change on GCS but not on fake-gcs-server).
pub fn s3_etags() -> bool {
    !BACKEND
        .get()
        .is_some_and(|b| b.starts_with("azur") || b == "gcs")
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    match p.downcast::<String>() {
        Ok(s) => *s,
        Err(p) => p
            .downcast_ref::<&str>()
            .map_or("(non-string panic)".to_string(), |s| s.to_string()),
    }
}

// ------------------------------------------------------------------ helpers for bodies

pub fn data(n: usize, seed: u8) -> Bytes {
    (0..n)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect::<Vec<u8>>()
        .into()
}

pub fn meta(pairs: &[(&str, &str)]) -> HashMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

pub async fn put(c: &dyn ObjectClient, key: &str, body: Bytes) -> String {
    c.put(key, body.into(), &HashMap::new())
        .await
        .unwrap_or_else(|e| panic!("put {key}: {e}"))
        .etag
}

/// A multipart upload of `key` without metadata; its id.
pub async fn open_upload(c: &dyn ObjectClient, key: &str) -> String {
    c.create_multipart(key, &HashMap::new())
        .await
        .unwrap_or_else(|e| panic!("create upload of {key}: {e}"))
}

/// Bytes `[start, end)` of whatever `key` holds.
pub async fn get(c: &dyn ObjectClient, key: &str, start: u64, end: u64) -> Bytes {
    let r = c.get_range(Version::any(key).range(start, end)).await;
    r.unwrap_or_else(|e| panic!("get {key}: {e}"))
}

/// Upload `id` of `key` completed from `parts`.
pub async fn complete(
    c: &dyn ObjectClient,
    key: &str,
    id: &str,
    parts: &[CompletedPart],
) -> PutResult {
    let r = c
        .complete_multipart(Upload::new(key, id).completion(parts))
        .await;
    r.unwrap_or_else(|e| panic!("complete upload {id} of {key}: {e}"))
}

/// Part `n` of upload `id`, as the completion wants it.
pub async fn upload(
    c: &dyn ObjectClient,
    key: &str,
    id: &str,
    n: i32,
    body: Bytes,
) -> CompletedPart {
    let etag = c
        .upload_part(Upload::new(key, id).part(n), body.into())
        .await
        .unwrap_or_else(|e| panic!("upload part {n}: {e}"));
    CompletedPart {
        part_number: n,
        etag,
    }
}

/// The error of `r`, which must be one.
pub fn err<T: std::fmt::Debug>(r: Result<T>, what: &str) -> ClientError {
    match r {
        Ok(v) => panic!("{what}: expected an error, got Ok({v:?})"),
        Err(e) => e,
    }
}

/// `check_bucket` of a bucket that does not exist is `NoSuchBucket` on every server (what a
/// mount's start tells the user).
pub async fn assert_no_such_bucket(c: &dyn ObjectClient) {
    let e = err(c.check_bucket("").await, "check_bucket");
    assert!(matches!(e, ClientError::NoSuchBucket(_)), "got {e:?}");
}

pub fn assert_not_found<T: std::fmt::Debug>(r: Result<T>, what: &str) {
    let e = err(r, what);
    assert!(
        matches!(e, ClientError::NotFound(_)),
        "{what}: expected NotFound, got {e:?}"
    );
    assert!(!e.is_retryable(), "{what}: NotFound is not retryable");
}
