//! The conformance suite (tests/client/conformance/) over the in-memory mock.

use std::sync::Arc;

use flowfs_client::mock::MockClient;
use flowfs_client::{ClientError, List, ObjectClient};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn mock_conforms() {
    // A fresh bucket per behaviour.
    let make = || Arc::new(MockClient::new()) as Arc<dyn ObjectClient>;
    crate::conformance::run_all("mock", "conformance/", &make).await;
}

/// What only the mock can be asked: its continuation tokens are not keys, and a key handed
/// back as a token is refused (as S3 refuses a token it did not make), so that a caller
/// relying on tokens being keys fails here and not only against a real server.
#[tokio::test]
async fn mock_tokens_are_opaque() {
    let mock = MockClient::new();
    for k in ["p/a", "p/b", "p/c"] {
        mock.insert(k, b"x".to_vec());
    }
    let page = mock
        .list_page(List::flat("p/").max_keys(1))
        .await
        .expect("page");
    let token = page.next_token.expect("a next token");
    assert!(!mock.keys().contains(&token), "token {token} is a key");
    let e = mock
        .list_page(List::flat("p/").token(Some("p/a".to_string())).max_keys(1))
        .await
        .expect_err("a key is no token");
    assert!(
        matches!(&e, ClientError::Other(m) if m.contains("InvalidArgument")),
        "{e:?}"
    );
    let e = mock
        .list_page(List::flat("q/").token(Some(token)).max_keys(1))
        .await
        .expect_err("a token of another listing");
    assert!(!e.is_retryable());
}
