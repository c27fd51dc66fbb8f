//! Which keys the store keeps as sent: the probe behind each backend's `KeyRules`
//! (src/rules.rs). A file whose key the store changes vanishes after its upload, and one
//! it refuses can never be uploaded (issue 47); the file system refuses such names by
//! the rules, so the rules must say exactly what the store does.

use bytes::Bytes;
use flowfs_client::{KeyRule, List, ObjectClient};

/// Names a file system can make (any bytes but `/` and NUL, at most 255 of them), in a
/// directory, and the segments around them; each probed under a prefix of its own.
fn probes() -> Vec<String> {
    let mut names: Vec<String> = [
        "a\\b",
        "bs\\",
        "\\lead",
        "d/..\\x",
        "d/.\\x",
        "d/../x",
        "d/./x",
        "dot.",
        "d./x",
        "...",
        "a..b",
        " lead",
        "trail ",
        "tab\tx",
        "nl\nx",
        "cr\rx",
        "ctl\u{1}x",
        "del\u{7f}x",
        "nel\u{85}x",
        "pct%2Fx",
        "q?x",
        "hash#x",
        "a+b",
        "a;b",
        "c:d",
        "star*",
        "<gt>",
        "\"q\"",
        "'s'",
        "~t",
        "uni\u{e9}",
        "emoji\u{1F600}",
        "bom\u{feff}",
        "repl\u{fffd}",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    names.push("x".repeat(255));
    names.push("y".repeat(256));
    names
}

/// What the store did with one key.
#[derive(Debug, PartialEq)]
enum Outcome {
    Kept,
    Changed(Vec<String>),
    Refused(String),
}

async fn probe(c: &dyn ObjectClient, dir: &str, key: &str) -> Outcome {
    if let Err(e) = c
        .put(key, Bytes::from_static(b"k").into(), &Default::default())
        .await
    {
        assert!(!e.is_retryable(), "{key:?}: a failure that may pass: {e}");
        return Outcome::Refused(e.to_string());
    }
    let head = c.head(key).await.map(|m| m.info.key);
    // Azurite answers a listing of keys with control bytes 500 (a deviation of its own,
    // lists.rs): there the HEAD alone says what it holds.
    let listed: Vec<String> = match c.list_page(List::flat(dir)).await {
        Ok(page) => page.objects.iter().map(|o| o.key.clone()).collect(),
        Err(e) if head.as_deref().is_ok_and(|k| k == key) => {
            println!("  keys: {key:?} HEAD only (the listing failed: {e})");
            vec![key.to_string()]
        }
        Err(e) => panic!("list {dir}: {e}"),
    };
    for k in &listed {
        // What the store made of a key may not be deletable by its own name (Azurite
        // refuses `…//lead`): left in the test bucket.
        let _ = c.delete(k).await;
    }
    let _ = c.delete(key).await;
    if listed == [key.to_string()] && head.is_err() {
        return Outcome::Changed(vec!["(listed, but no HEAD finds it)".into()]);
    }
    match listed == [key.to_string()] {
        true => Outcome::Kept,
        false => Outcome::Changed(listed),
    }
}

/// Every probe name the backend's rules allow comes back from the store as it was
/// sent, and every one they refuse is changed or refused by it: the rules are what the
/// store does. Prints the store's answer for each name.
pub async fn the_store_keeps_exactly_the_keys_its_rules_allow(c: &dyn ObjectClient, p: &str) {
    c.check_bucket(p).await.expect("check_bucket"); // S3: the server names itself
    let rules = c.key_rules();
    let mut wrong = Vec::new();
    for (i, name) in probes().iter().enumerate() {
        let dir = format!("{p}{i}/");
        let key = format!("{dir}{name}");
        let got = probe(c, &dir, &key).await;
        let allowed = rules.check(&key);
        println!(
            "  keys[{}] {name:?}: {got:?}; rules: {allowed:?}",
            rules.store
        );
        // fake-gcs-server keeps line breaks that GCS documents it refuses: the rule
        // stays, stricter than the emulator.
        let stricter = super::BACKEND.get().is_some_and(|b| b == "gcs")
            && allowed == Err(KeyRule::LineBreak)
            && got == Outcome::Kept;
        if stricter {
            println!("  keys[GCS] {name:?}: deviation, as known: fake-gcs-server keeps it");
        } else if allowed.is_ok() != (got == Outcome::Kept) {
            wrong.push(format!("{name:?}: store {got:?}, rules {allowed:?}"));
        }
    }
    assert!(
        wrong.is_empty(),
        "{}'s key rules disagree with the store:\n{}",
        rules.store,
        wrong.join("\n")
    );
}
