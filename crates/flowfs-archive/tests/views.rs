//! `ArchiveViews` over the in-memory store: each archive's view listed once, in key order,
//! at every page size (a view past a page's end is carried to the next page) and from
//! every start-after; members read through the view; writes below a view refused.

#![allow(clippy::unwrap_used)]

use std::collections::HashMap;
use std::sync::Arc;

use bytes::Bytes;
use flowfs_archive::ArchiveViews;
use flowfs_client::mock::{MockClient, Op};
use flowfs_client::{ClientError, List, ListAfter, ListPage, ObjectClient, Version};

fn one_file_tar(name: &str, data: &[u8]) -> Vec<u8> {
    let mut b = tar::Builder::new(Vec::new());
    let mut h = tar::Header::new_gnu();
    h.set_mode(0o644);
    h.set_size(data.len() as u64);
    b.append_data(&mut h, name, data).unwrap();
    b.into_inner().unwrap()
}

/// Keys around two archives, some sorting between an archive and its view.
fn bucket() -> Arc<MockClient> {
    let mock = Arc::new(MockClient::new());
    mock.insert("d/a.tar", one_file_tar("m.txt", b"member\n"));
    for k in [
        "d/a.tar.c",
        "d/a.tar.c2",
        "d/a.tar.e",
        "d/b.txt",
        "d/z/k",
        "d/a.tar.cc/k",
    ] {
        mock.insert(k, b"x".to_vec());
    }
    mock.insert("d/y.tgz", one_file_tar("n.txt", b"n\n"));
    mock
}

/// The names a full listing of `d/` shows, page by page of `max` keys.
async fn listed(v: &ArchiveViews, max: i32) -> Vec<String> {
    let (mut out, mut token) = (Vec::new(), None);
    loop {
        let p: ListPage = v
            .list_page(List::dir("d/").token(token).max_keys(max))
            .await
            .unwrap();
        let mut names: Vec<String> = p.objects.iter().map(|o| o.key.clone()).collect();
        names.extend(p.prefixes.iter().cloned());
        names.sort();
        out.extend(names);
        token = p.next_token;
        if token.is_none() {
            return out;
        }
    }
}

const WANT: [&str; 9] = [
    "d/a.tar",
    "d/a.tar.c",
    "d/a.tar.c2",
    "d/a.tar.cc/",
    "d/a.tar.d/",
    "d/a.tar.e",
    "d/b.txt",
    "d/y.tgz",
    "d/y.tgz.d/",
];

#[tokio::test]
async fn every_view_is_listed_once_in_key_order_at_every_page_size() {
    let dir = tempfile::tempdir().unwrap();
    let v = ArchiveViews::new(bucket(), "b", dir.path());
    for max in 1..=10 {
        let mut want: Vec<String> = WANT.iter().map(|s| s.to_string()).collect();
        want.push("d/z/".into());
        want.sort();
        assert_eq!(listed(&v, max).await, want, "pages of {max}");
    }
}

#[tokio::test]
async fn a_listing_from_a_name_between_an_archive_and_its_view_shows_the_view() {
    let dir = tempfile::tempdir().unwrap();
    let mock = bucket();
    let v = ArchiveViews::new(mock.clone(), "b", dir.path());
    for after in [
        "d/a.tar",
        "d/a.tar.c",
        "d/a.tar.cc/",
        "d/a.tar.d/",
        "d/b.txt",
    ] {
        let p = v.list_after(ListAfter::new("d/", after)).await.unwrap();
        let views: Vec<_> = p.prefixes.iter().filter(|p| p.ends_with(".d/")).collect();
        let want: Vec<&str> = ["d/a.tar.d/", "d/y.tgz.d/"]
            .into_iter()
            .filter(|w| *w > after)
            .collect();
        assert_eq!(views, want, "after {after}");
    }
    // A name that is no archive's costs no HEAD.
    mock.reset_counts();
    v.list_after(ListAfter::new("d/", "d/b.txt")).await.unwrap();
    assert_eq!(mock.count(Op::Head), 0);
}

#[tokio::test]
async fn members_read_through_a_view_and_writes_below_it_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let mock = bucket();
    let v = ArchiveViews::new(mock.clone(), "b", dir.path());
    let root = v.list_page(List::dir("d/a.tar.d/")).await.unwrap();
    let keys: Vec<_> = root.objects.iter().map(|o| o.key.as_str()).collect();
    assert_eq!(keys, ["d/a.tar.d/", "d/a.tar.d/m.txt"]);
    let m = v.head("d/a.tar.d/m.txt").await.unwrap();
    assert_eq!(m.info.key, "d/a.tar.d/m.txt");
    let range = Version::any("d/a.tar.d/m.txt").range(0, 7);
    let got = v.get_range(range).await.unwrap();
    assert_eq!(&got[..], b"member\n");
    assert!(v.heads_are_free("d/a.tar.d/") && !v.heads_are_free("d/"));
    for k in [
        "d/a.tar.d/m.txt",
        "d/a.tar.d/new",
        "d/a.tar.d",
        "d/q.tar.gz.d/x",
    ] {
        assert!(v.refuses_writes(k), "{k}");
        let r = v
            .put(k, Bytes::from_static(b"x").into(), &HashMap::new())
            .await;
        assert!(matches!(r, Err(ClientError::Refused(_))), "{k}");
    }
    assert!(!v.refuses_writes("d/a.tar") && !v.refuses_writes("d/a.tar.dd/x"));
    // A view of an archive that is gone is an empty directory; of a non-archive, an error.
    let gone = v.list_page(List::dir("d/gone.tar.d/")).await.unwrap();
    assert!(gone.objects.is_empty() && gone.prefixes.is_empty());
    assert!(v.list_page(List::dir("d/a.tar.c")).await.is_ok());
    mock.insert("d/bad.tar", b"no tar here".repeat(100));
    assert!(v.list_page(List::dir("d/bad.tar.d/")).await.is_err());
}

#[tokio::test]
async fn a_view_follows_its_archive_when_it_is_written_again() {
    let dir = tempfile::tempdir().unwrap();
    let mock = bucket();
    let v = ArchiveViews::new(mock.clone(), "b", dir.path());
    assert!(v.head("d/a.tar.d/m.txt").await.is_ok());
    let body = Bytes::from(one_file_tar("new.txt", b"new\n"));
    v.put("d/a.tar", body.into(), &HashMap::new())
        .await
        .unwrap();
    assert!(matches!(
        v.head("d/a.tar.d/m.txt").await,
        Err(ClientError::NotFound(_))
    ));
    let range = Version::any("d/a.tar.d/new.txt").range(0, 4);
    let got = v.get_range(range).await.unwrap();
    assert_eq!(&got[..], b"new\n");
    // Written behind its back: the listing that shows the new ETag forgets the old index.
    mock.insert("d/a.tar", one_file_tar("third.txt", b"3\n"));
    listed(&v, 1000).await;
    assert!(v.head("d/a.tar.d/third.txt").await.is_ok());
}
