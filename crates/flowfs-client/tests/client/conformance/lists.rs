//! ListObjectsV2: delimiters, pagination, StartAfter.

use flowfs_client::{List, ListAfter, ListPage, ObjectClient};

use super::{data, put};

/// Puts `names` below `p` one after another (SeaweedFS keeps objects in a directory tree:
/// `x` and `x/...` put concurrently have lost one, see tests/integration/README.md).
async fn put_all(c: &dyn ObjectClient, p: &str, names: &[&str]) {
    for (i, n) in names.iter().enumerate() {
        put(c, &format!("{p}{n}"), data(i + 1, i as u8)).await;
    }
}

fn keys(page: &ListPage) -> Vec<String> {
    page.objects.iter().map(|o| o.key.clone()).collect()
}

fn with(p: &str, names: &[&str]) -> Vec<String> {
    names.iter().map(|n| format!("{p}{n}")).collect()
}

pub async fn check_bucket_succeeds(c: &dyn ObjectClient, p: &str) {
    c.check_bucket(p).await.expect("check_bucket");
}

pub async fn list_with_delimiter_splits_prefixes_and_objects(c: &dyn ObjectClient, p: &str) {
    put_all(c, p, &["a", "b/1", "b/2", "c/", "d", "e/f/g"]).await;
    let page = c.list_page(List::dir(p)).await.expect("list");
    assert_eq!(keys(&page), with(p, &["a", "d"]));
    assert_eq!(page.prefixes, with(p, &["b/", "c/", "e/"]));
    assert!(page.next_token.is_none());
    // One level down; a key ending in the delimiter is an object of its own prefix.
    let b = c.list_page(List::dir(&format!("{p}b/"))).await.expect("b/");
    assert_eq!(keys(&b), with(p, &["b/1", "b/2"]));
    assert!(b.prefixes.is_empty());
    let cdir = c.list_page(List::dir(&format!("{p}c/"))).await.expect("c/");
    assert_eq!(keys(&cdir), with(p, &["c/"]));
    // A prefix that is not a directory name.
    let partial = c.list_page(List::dir(&format!("{p}b"))).await.expect("b");
    assert!(partial.objects.is_empty());
    assert_eq!(partial.prefixes, with(p, &["b/"]));
    let none = c
        .list_page(List::dir(&format!("{p}zzz")))
        .await
        .expect("none");
    assert!(none.objects.is_empty() && none.prefixes.is_empty() && none.next_token.is_none());
}

pub async fn list_without_delimiter_is_flat(c: &dyn ObjectClient, p: &str) {
    put_all(c, p, &["a", "b/1", "b/2", "c/", "e/f/g"]).await;
    let page = c.list_page(List::flat(p)).await.expect("list");
    assert_eq!(keys(&page), with(p, &["a", "b/1", "b/2", "c/", "e/f/g"]));
    assert!(page.prefixes.is_empty());
}

/// A listing's size, ETag and LastModified are HEAD's (the core takes attributes from
/// listings and must not see a file change when it HEADs it later).
pub async fn list_metadata_matches_head(c: &dyn ObjectClient, p: &str) {
    put_all(c, p, &["x", "y"]).await;
    let page = c.list_page(List::dir(p)).await.expect("list");
    assert_eq!(page.objects.len(), 2);
    for o in &page.objects {
        let h = c.head(&o.key).await.expect("head");
        assert_eq!(o, &h.info, "listing and HEAD agree on {}", o.key);
    }
}

/// Pages of at most `max` entries (objects and prefixes count alike) that together list
/// every entry once, in order. The token is opaque: it is only ever handed back.
async fn all_pages(
    c: &dyn ObjectClient,
    p: &str,
    delimiter: Option<&str>,
    max: i32,
) -> (Vec<String>, usize) {
    let (mut entries, mut pages, mut token) = (Vec::new(), 0, None);
    loop {
        let page = c
            .list_page(
                List {
                    delimiter,
                    ..List::flat(p)
                }
                .token(token)
                .max_keys(max),
            )
            .await
            .expect("page");
        pages += 1;
        let n = page.objects.len() + page.prefixes.len();
        assert!(n <= max as usize, "page {pages} has {n} entries, max {max}");
        // Within a page S3 sorts objects and prefixes together; here each kind is sorted.
        let mut names = keys(&page);
        names.extend(page.prefixes);
        names.sort();
        entries.extend(names);
        token = page.next_token;
        match &token {
            Some(t) => {
                assert_eq!(n, max as usize, "a page with a next token is full");
                assert!(!t.is_empty());
            }
            None => return (entries, pages),
        }
        assert!(pages < 100, "pagination does not end");
    }
}

pub async fn pagination_with_max_keys_and_tokens(c: &dyn ObjectClient, p: &str) {
    let names = ["a", "b", "c/1", "c/2", "d", "e/1", "f", "g", "h"];
    put_all(c, p, &names).await;
    let (entries, pages) = all_pages(c, p, Some("/"), 3).await;
    assert_eq!(
        entries,
        with(p, &["a", "b", "c/", "d", "e/", "f", "g", "h"])
    );
    assert_eq!(pages, 3, "8 entries in pages of 3");
    let (entries, pages) = all_pages(c, p, Some("/"), 4).await;
    assert_eq!(entries.len(), 8);
    assert_eq!(
        pages, 2,
        "8 entries in pages of 4: the last full page has no token"
    );
}

pub async fn pagination_without_delimiter(c: &dyn ObjectClient, p: &str) {
    let names = ["a", "b/1", "b/2", "b/3", "c"];
    put_all(c, p, &names).await;
    let (entries, pages) = all_pages(c, p, None, 2).await;
    assert_eq!(entries, with(p, &names));
    assert_eq!(pages, 3);
}

pub async fn list_after_is_start_after(c: &dyn ObjectClient, p: &str) {
    put_all(c, p, &["a", "b", "c", "d/x", "e"]).await;
    let page = c
        .list_after(ListAfter::new(p, &format!("{p}b")))
        .await
        .expect("after b");
    assert_eq!(keys(&page), with(p, &["c", "e"]));
    assert_eq!(page.prefixes, with(p, &["d/"]));
    assert!(page.next_token.is_none());
    // StartAfter need not be a key.
    let page = c
        .list_after(ListAfter::new(p, &format!("{p}bb")))
        .await
        .expect("after bb");
    assert_eq!(keys(&page), with(p, &["c", "e"]));
    let page = c
        .list_after(ListAfter::new(p, &format!("{p}e")))
        .await
        .expect("after e");
    assert!(page.objects.is_empty() && page.prefixes.is_empty());
    // Before everything: the whole level.
    let page = c
        .list_after(ListAfter::new(p, p))
        .await
        .expect("after the prefix");
    assert_eq!(keys(&page), with(p, &["a", "b", "c", "e"]));
}

/// StartAfter filters keys before they are rolled up: a StartAfter inside `d/` still
/// yields `d/` when a key of it sorts after StartAfter, and not when none does.
pub async fn list_after_inside_a_common_prefix(c: &dyn ObjectClient, p: &str) {
    put_all(c, p, &["d/x", "d/y", "e"]).await;
    let page = c
        .list_after(ListAfter::new(p, &format!("{p}d/x")))
        .await
        .expect("after d/x");
    assert_eq!(page.prefixes, with(p, &["d/"]), "d/y is after d/x");
    assert_eq!(keys(&page), with(p, &["e"]));
    let page = c
        .list_after(ListAfter::new(p, &format!("{p}d/y")))
        .await
        .expect("after d/y");
    assert!(
        page.prefixes.is_empty(),
        "nothing of d/ after d/y: {:?}",
        page.prefixes
    );
    assert_eq!(keys(&page), with(p, &["e"]));
}

/// Keys with bytes XML 1.0 cannot carry (0x01-0x1F but tab, newline, CR) come back from a
/// listing exactly, as objects and as common prefixes: a server answers them as U+FFFD
/// unless the listing asks for `EncodingType=url` (issue 26: such a file vanished from
/// `ls` once uploaded, and `rmdir` of its directory said ENOTEMPTY). `+`, `%`, a space
/// and UTF-8 next to them tell a decoder that mixes up `+` and `%20`.
pub async fn control_bytes_and_plus_in_keys_list_back_exactly(c: &dyn ObjectClient, p: &str) {
    let names = ["a\u{1}b", "plus+ sp%25ü", "t\u{1f}x\tz", "d\u{2}ir/f+1"];
    put_all(c, p, &names).await;
    let page = c.list_page(List::dir(p)).await.expect("list");
    let mut got = keys(&page);
    got.sort();
    let mut want = with(p, &["a\u{1}b", "plus+ sp%25ü", "t\u{1f}x\tz"]);
    want.sort();
    assert_eq!(got, want);
    assert_eq!(page.prefixes, with(p, &["d\u{2}ir/"]));
    let inner = c
        .list_page(List::dir(&format!("{p}d\u{2}ir/")))
        .await
        .expect("list the odd prefix");
    assert_eq!(keys(&inner), with(p, &["d\u{2}ir/f+1"]));
    let (mut flat, _) = all_pages(c, p, None, 1).await;
    flat.sort();
    let mut all = with(p, &names);
    all.sort();
    assert_eq!(flat, all);
    let after = c
        .list_after(ListAfter::new(p, &format!("{p}a\u{1}b")))
        .await
        .expect("list_after an odd key");
    assert!(!keys(&after).contains(&format!("{p}a\u{1}b")));
    assert!(keys(&after).contains(&format!("{p}plus+ sp%25ü")));
}
