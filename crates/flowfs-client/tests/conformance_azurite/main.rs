//! The conformance suite (tests/client/conformance/) over the Azure Blob backend and a real
//! Azurite (3.35.0, installed by scripts/setup.sh, started and stopped by this test on
//! 127.0.0.1), plus what only a real server shows: a missing container and a wrong key.
//!
//! Azurite is required: without it the test fails. `FLOWFS_CONFORMANCE_AZURE=0` skips it
//! on purpose (CI does not set it). The client is the product's, with its credentials from
//! AZURE_STORAGE_CONNECTION_STRING as a user's would be. One test function on one thread,
//! so that changing the environment races nothing.

#[path = "../client/conformance/mod.rs"]
mod conformance;

use std::sync::Arc;

use flowfs_client::azure::{AzureClient, AzureConfig};
use flowfs_client::{ClientError, ObjectClient};
use flowfs_testkit::azurite::{self, Azurite};

const CONTAINER: &str = "flowfs-conformance";

/// What Azurite 3.35.0 does unlike Azure (each checked to still fail).
const DEVIATIONS: &[(&str, &str)] = &[
    (
        "every_upload_has_a_full_object_checksum",
        "Azure keeps no full-object CRC of a block blob (only a single Put Blob's Content-MD5, \
         which costs an MD5 of every byte); flowfs sends none there (docs/SEMANTICS.md)",
    ),
    (
        "an_upload_whose_checksum_is_not_of_its_bytes_is_refused",
        "flowfs's uploads to Azure carry no checksum (above), so none is refused",
    ),
    (
        "ranged_get_starting_at_or_past_end_is_invalid_range",
        "a range starting at a blob's size is answered 206 with no byte (Azure: 416 InvalidRange; \
         an empty blob's is 416 on both); the client then says short read, retryable",
    ),
    (
        "control_bytes_and_plus_in_keys_list_back_exactly",
        "a listing of keys with control bytes is answered 500 (Azure lists them percent-encoded \
         with Encoded=\"true\", which the client decodes: xml.rs's test)",
    ),
];

#[test]
fn azurite_conforms() {
    let Some(server) = Azurite::start_or_skip("the Azurite conformance run") else {
        return;
    };
    server.use_connection_string();
    flowfs_testkit::on_one_thread(async {
        let client = server.client(CONTAINER);
        client.create_container().await.expect("create container");
        missing_container_is_no_such_bucket(&server).await;
        wrong_key_is_access_denied(&server).await;
        conformance::run_all_on("azurite", Arc::new(client), DEVIATIONS).await;
    });
    drop(server);
}

async fn missing_container_is_no_such_bucket(server: &Azurite) {
    let c = server.client("flowfs-no-such-container");
    conformance::assert_no_such_bucket(&c).await;
    let e = conformance::err(c.head("k").await, "head");
    assert!(
        matches!(e, ClientError::NoSuchBucket(_) | ClientError::NotFound(_)),
        "got {e:?}"
    );
    println!("conformance[azurite] missing_container_is_no_such_bucket ... ok");
}

async fn wrong_key_is_access_denied(server: &Azurite) {
    let cs = server
        .connection_string()
        .replace(azurite::KEY, "d3Jvbmcga2V5");
    // SAFETY: one thread (see the file's comment).
    unsafe { std::env::set_var("AZURE_STORAGE_CONNECTION_STRING", &cs) };
    let c = AzureClient::new(&AzureConfig {
        metrics: Default::default(),
        container: CONTAINER.into(),
        account: None,
        endpoint_url: None,
    })
    .expect("client");
    server.use_connection_string();
    let e = conformance::err(c.check_bucket("").await, "wrong key");
    assert!(matches!(e, ClientError::AccessDenied(_)), "got {e:?}");
    assert!(!e.is_retryable());
    println!("conformance[azurite] wrong_key_is_access_denied ... ok");
}
