//! The retry layer over the in-memory store with injected failures, on a paused clock:
//! what is retried, for how long, and what a reader is handed.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use flowfs_client::mock::{MockClient, Op};
use flowfs_client::retry::{RetryPolicy, Retrying};
use flowfs_client::{ClientError, List, ObjectClient, Version};
use rand::SeedableRng;
use tokio::time::Instant;

fn retrying(policy: RetryPolicy) -> (Arc<MockClient>, Retrying) {
    let mock = Arc::new(MockClient::new());
    let client = Retrying::new(mock.clone(), policy);
    (mock, client)
}

#[tokio::test(start_paused = true)]
async fn a_throttled_head_is_sent_again_until_it_succeeds() {
    let (mock, client) = retrying(RetryPolicy::default());
    mock.insert("k", "v");
    mock.fail(Op::Head, 0, ClientError::Throttled("SlowDown".into()), 5);
    let meta = client.head("k").await.expect("head after five 503s");
    assert_eq!(meta.info.size, 1);
    assert_eq!(mock.count(Op::Head), 6);
    let s = client.stats();
    assert_eq!((s.retries, s.throttled, s.gave_up), (5, 5, 0));
}

#[tokio::test(start_paused = true)]
async fn errors_that_cannot_go_away_fail_at_once() {
    let (mock, client) = retrying(RetryPolicy::default());
    mock.insert("k", "v");
    mock.fail(Op::Head, 0, ClientError::AccessDenied("k".into()), 1);
    assert!(matches!(
        client.head("k").await,
        Err(ClientError::AccessDenied(_))
    ));
    assert!(matches!(
        client.head("missing").await,
        Err(ClientError::NotFound(_))
    ));
    assert_eq!(mock.count(Op::Head), 2, "one attempt each");
    assert_eq!(client.stats().retries, 0);
}

#[tokio::test(start_paused = true)]
async fn a_request_that_keeps_failing_gives_up_when_its_budget_is_spent() {
    let budget = Duration::from_secs(30);
    let policy = RetryPolicy {
        budget,
        ..RetryPolicy::default()
    };
    let cap = policy.cap;
    let (mock, client) = retrying(policy);
    mock.fail(
        Op::Put,
        0,
        ClientError::Transient("HTTP 500".into()),
        u64::MAX,
    );
    let t = Instant::now();
    let r = client
        .put("k", Bytes::from_static(b"x").into(), &Default::default())
        .await;
    assert!(matches!(r, Err(ClientError::Transient(_))), "{r:?}");
    let took = t.elapsed();
    assert!(took <= budget, "took {took:?}");
    assert!(took + cap >= budget, "gave up early, after {took:?}");
    assert!(mock.count(Op::Put) > 5, "{} attempts", mock.count(Op::Put));
    assert_eq!(client.stats().gave_up, 1);
    assert_eq!(mock.object("k"), None);
}

#[tokio::test(start_paused = true)]
async fn max_attempts_bounds_the_attempts() {
    let policy = RetryPolicy {
        max_attempts: 3,
        ..RetryPolicy::default()
    };
    let (mock, client) = retrying(policy);
    mock.fail(
        Op::List,
        0,
        ClientError::Unreachable("reset".into()),
        u64::MAX,
    );
    assert!(client.list_page(List::dir("")).await.is_err());
    assert_eq!(mock.count(Op::List), 3);
}

/// A body cut twice in the middle: the retries ask for the rest only, and the reader
/// gets every piece once, in order, with the right bytes.
#[tokio::test(start_paused = true)]
async fn a_cut_body_is_resumed_from_the_first_piece_not_delivered() {
    let (mock, client) = retrying(RetryPolicy::default());
    let data: Vec<u8> = (0..1000u32).map(|i| (i % 251) as u8).collect();
    mock.insert("k", data.clone());
    mock.cut_bodies(250, 2);
    let cuts = [200u64, 400, 600, 800, 1000];
    let mut got: Vec<(usize, Bytes)> = Vec::new();
    let mut sink = |i: usize, b: Bytes| got.push((i, b));
    client
        .get_range_pieces(Version::any("k").pieces(0, &cuts), &mut sink)
        .await
        .expect("get after two cuts");
    let order: Vec<usize> = got.iter().map(|(i, _)| *i).collect();
    assert_eq!(order, vec![0, 1, 2, 3, 4]);
    let joined: Vec<u8> = got.iter().flat_map(|(_, b)| b.to_vec()).collect();
    assert_eq!(joined, data);
    assert_eq!(mock.count(Op::Get), 3);
}

#[test]
fn backoff_is_full_jitter_below_an_exponential_ceiling() {
    let p = RetryPolicy::default();
    let mut rng = rand::rngs::StdRng::seed_from_u64(7);
    for attempt in 1..=12u32 {
        let ceiling = (p.base * 2u32.pow(attempt - 1)).min(p.cap);
        let samples: Vec<Duration> = (0..400).map(|_| p.backoff(attempt, &mut rng)).collect();
        assert!(samples.iter().all(|d| *d <= ceiling), "attempt {attempt}");
        let mean = samples.iter().sum::<Duration>() / 400;
        // Uniform over [0, ceiling]: the mean is near half of it, not at either end.
        assert!(
            mean > ceiling.mul_f64(0.4) && mean < ceiling.mul_f64(0.6),
            "attempt {attempt}: mean {mean:?} of ceiling {ceiling:?}"
        );
    }
}
