//! The conformance suite (tests/client/conformance/) over the GCS backend and a real
//! fake-gcs-server (v1.54.0, installed by scripts/setup.sh, started and stopped by this
//! test on 127.0.0.1), plus what only a real server shows: a missing bucket, and a
//! multipart upload of more parts than one compose call takes. The client runs behind the
//! retry layer, as in a mount (the reason is at the wrapping).
//!
//! fake-gcs-server is required: without it the test fails. `FLOWFS_CONFORMANCE_GCS=0`
//! skips it on purpose (CI does not set it).

#[path = "../client/conformance/mod.rs"]
mod conformance;

use std::collections::HashMap;
use std::sync::Arc;

use flowfs_client::retry::{RetryPolicy, Retrying};
use flowfs_client::{CompletedPart, List, ObjectClient, Upload, Version};
use flowfs_testkit::fakegcs::FakeGcs;

const BUCKET: &str = "flowfs-conformance";

/// What fake-gcs-server 1.54.0 does unlike GCS (each checked to still fail).
const DEVIATIONS: &[(&str, &str)] = &[(
    "pagination_with_max_keys_and_tokens",
    "maxResults counts objects only: every page holds all the common prefixes from its \
     token on (GCS counts prefixes and objects together), so the pages are fewer",
)];

#[test]
fn fake_gcs_conforms() {
    let Some(server) = FakeGcs::start_or_skip("the fake-gcs-server conformance run") else {
        return;
    };
    flowfs_testkit::on_one_thread(async {
        let client = server.client(BUCKET);
        client.create_bucket().await.expect("create bucket");
        missing_bucket_is_no_such_bucket(&server).await;
        // Behind the retry layer, as a mount uses it, with two attempts: fake-gcs-server
        // answers a 416 with `Content-Length: 0` and then writes its XML error body, so
        // the next request on that connection is reset (a Transient error, sent again).
        // GCS does not. (Two, not a mount's budget: the short-body behaviours expect a
        // Transient error to come back.)
        let policy = RetryPolicy {
            max_attempts: 2,
            ..RetryPolicy::default()
        };
        let retrying = Retrying::new(Arc::new(client), policy);
        let client: Arc<dyn ObjectClient> = Arc::new(retrying);
        many_parts_are_composed_in_a_tree(&*client).await;
        conformance::run_all_on("gcs", client, DEVIATIONS).await;
    });
    drop(server);
}

async fn missing_bucket_is_no_such_bucket(server: &FakeGcs) {
    let c = server.client("flowfs-no-such-bucket");
    conformance::assert_no_such_bucket(&c).await;
    println!("conformance[gcs] missing_bucket_is_no_such_bucket ... ok");
}

/// 70 parts: three composes of at most 32, then one of those three; the object is the
/// parts in order, and nothing of the upload is left below `.flowfs-parts/`.
async fn many_parts_are_composed_in_a_tree(c: &dyn ObjectClient) {
    let key = "tree/big";
    let id = c
        .create_multipart(key, &HashMap::new())
        .await
        .expect("create");
    let mut parts = Vec::new();
    let mut want = Vec::new();
    for n in 1..=70 {
        let body = conformance::data(1000 + n as usize, n as u8);
        want.extend_from_slice(&body);
        parts.push(CompletedPart {
            part_number: n,
            etag: c
                .upload_part(Upload::new(key, &id).part(n), body.into())
                .await
                .expect("part"),
        });
    }
    let done = c
        .complete_multipart(Upload::new(key, &id).completion(&parts))
        .await
        .expect("complete");
    let h = c.head(key).await.expect("head");
    assert_eq!((h.info.size, &h.info.etag), (want.len() as u64, &done.etag));
    let got = c
        .get_range(Version::any(key).range(0, want.len() as u64))
        .await
        .expect("get");
    assert_eq!(got, want, "the parts in order");
    let left = c
        .list_page(List::flat(".flowfs-parts/"))
        .await
        .expect("list parts");
    assert!(left.objects.is_empty(), "parts left: {:?}", left.objects);
    let root = c.list_page(List::dir("")).await.expect("list root");
    assert!(
        root.prefixes.iter().all(|p| p != ".flowfs-parts/"),
        "the parts' directory is hidden: {:?}",
        root.prefixes
    );
    println!("conformance[gcs] many_parts_are_composed_in_a_tree ... ok");
}
