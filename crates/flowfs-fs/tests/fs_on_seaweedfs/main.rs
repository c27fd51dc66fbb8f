//! The core's shared test bodies (tests/fs/bodies.rs) over the product's S3 backend and a
//! real SeaweedFS that this test starts and stops itself (flowfs-testkit's `weed mini`
//! harness). The same bodies run over the mock in tests/fs (on_mock.rs). Its
//! own binary with one test function on one thread, because it points the credential
//! chain at the server through environment variables, which must race no other thread.
//! FLOWFS_CONFORMANCE_S3=0 skips it on purpose; without a `weed` it fails.

#[path = "../fs/bodies.rs"]
mod bodies;

use std::sync::Arc;

use flowfs_client::ObjectClient;
use flowfs_testkit::weed::{self, product_client};

const BUCKET: &str = "flowfs-core";

#[test]
fn the_shared_bodies_hold_on_seaweedfs() {
    // The bodies want several threads (uploads, reads); the environment is set by now.
    weed::serve_or_skip("the core over SeaweedFS", BUCKET, 2, async |server, _| {
        let client: Arc<dyn ObjectClient> = Arc::new(product_client(&server.endpoint, BUCKET));
        bodies::written_renamed_and_read_back(client.clone(), "written").await;
        bodies::a_listing_spans_pages(client.clone(), "paged").await;
        bodies::a_listing_taken_again_keeps_the_directories_it_is_split_at(client.clone(), "split")
            .await;
        bodies::names_the_store_would_change_are_refused_or_kept_exactly(client, "names").await;
    });
}
