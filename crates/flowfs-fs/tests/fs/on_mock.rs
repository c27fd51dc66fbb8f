//! The shared bodies (bodies.rs) over the in-memory mock; tests/fs_on_seaweedfs runs them
//! over a real SeaweedFS.

use std::sync::Arc;

use flowfs_client::mock::MockClient;

use crate::bodies;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn written_renamed_and_read_back() {
    bodies::written_renamed_and_read_back(Arc::new(MockClient::new()), "x").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_spans_pages() {
    bodies::a_listing_spans_pages(Arc::new(MockClient::new()), "x").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_the_store_would_change_are_refused_or_kept_exactly() {
    let mock = Arc::new(MockClient::new());
    bodies::names_the_store_would_change_are_refused_or_kept_exactly(mock, "n").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listing_taken_again_keeps_the_directories_it_is_split_at() {
    let mock = Arc::new(MockClient::new());
    bodies::a_listing_taken_again_keeps_the_directories_it_is_split_at(mock, "s").await;
}
