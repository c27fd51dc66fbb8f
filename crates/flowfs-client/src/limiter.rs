//! The mount's send rate under throttling. Off until the store first answers SlowDown;
//! then requests are spaced at a rate cut to 70 % of what was being sent (at most once
//! per half second, so that one burst of 503s is one cut, not fifty), which grows by one
//! request per second with every success until it is far above what is sent and the
//! limiter turns itself off. The AWS SDKs' adaptive mode does the same with a cubic curve.

use std::time::Duration;

use parking_lot::Mutex;
use tokio::time::Instant;

/// Never slower than this: a limiter that starves requests would be a hang by another name.
const MIN_RATE: f64 = 10.0;
/// Off again once the allowed rate is this many times what is being sent.
const OFF_FACTOR: f64 = 4.0;
const CUT: f64 = 0.7;
const CUT_EVERY: Duration = Duration::from_millis(500);
/// Sends per second are measured over windows this long.
const WINDOW: Duration = Duration::from_secs(1);

#[derive(Default)]
pub struct Limiter {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    /// Requests per second allowed; `None`: no limit.
    rate: Option<f64>,
    /// When the next request may go.
    next: Option<Instant>,
    last_cut: Option<Instant>,
    /// Sends per second in the last whole window.
    measured: f64,
    window_start: Option<Instant>,
    window_sends: u32,
}

impl State {
    fn count_send(&mut self, now: Instant) {
        let start = *self.window_start.get_or_insert(now);
        let span = now.duration_since(start);
        if span >= WINDOW {
            self.measured = f64::from(self.window_sends) / span.as_secs_f64();
            self.window_start = Some(now);
            self.window_sends = 0;
        }
        self.window_sends += 1;
    }
}

impl Limiter {
    /// Waits for this request's turn; the wait is decided under the lock and slept after.
    pub async fn acquire(&self) {
        let now = Instant::now();
        let at = {
            let mut s = self.state.lock();
            s.count_send(now);
            let Some(rate) = s.rate else {
                return;
            };
            let at = s.next.map_or(now, |n| n.max(now));
            s.next = Some(at + Duration::from_secs_f64(1.0 / rate));
            at
        };
        if at > now {
            tokio::time::sleep_until(at).await;
        }
    }

    pub fn throttled(&self) {
        let now = Instant::now();
        let mut s = self.state.lock();
        if s.last_cut
            .is_some_and(|t| now.duration_since(t) < CUT_EVERY)
        {
            return;
        }
        s.last_cut = Some(now);
        let sending = s.measured.max(f64::from(s.window_sends));
        let base = s.rate.map_or(sending, |r| r.min(sending.max(MIN_RATE)));
        s.rate = Some((base * CUT).max(MIN_RATE));
    }

    pub fn succeeded(&self) {
        let mut s = self.state.lock();
        let Some(rate) = s.rate else {
            return;
        };
        let rate = rate + 1.0;
        s.rate = (rate < s.measured.max(MIN_RATE) * OFF_FACTOR).then_some(rate);
        if s.rate.is_none() {
            s.next = None;
        }
    }

    /// Requests per second allowed now; `None` when not limited.
    #[cfg(test)]
    pub fn rate(&self) -> Option<f64> {
        self.state.lock().rate
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sends `n` requests one after another, each taking `each`; returns the time taken.
    async fn send(l: &Limiter, n: u32, each: Duration) -> Duration {
        let t = Instant::now();
        for _ in 0..n {
            l.acquire().await;
            tokio::time::sleep(each).await;
        }
        t.elapsed()
    }

    /// A limiter cut by a throttle after `n` requests that took `each`, and its rate then.
    async fn throttled_after(n: u32, each: Duration) -> (Limiter, f64) {
        let l = Limiter::default();
        send(&l, n, each).await;
        l.throttled();
        let rate = l.rate().expect("limited after a throttle");
        (l, rate)
    }

    #[tokio::test(start_paused = true)]
    async fn off_until_the_first_throttle() {
        let l = Limiter::default();
        assert_eq!(send(&l, 1000, Duration::ZERO).await, Duration::ZERO);
        assert_eq!(l.rate(), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttle_cuts_the_rate_below_what_was_sent_and_spaces_requests() {
        // 200 requests per second for two seconds, then SlowDown.
        let (l, rate) = throttled_after(400, Duration::from_millis(5)).await;
        assert!((130.0..=150.0).contains(&rate), "rate {rate}");
        // Requests that take no time now go at the limited rate.
        let took = send(&l, 100, Duration::ZERO).await;
        let want = Duration::from_secs_f64(99.0 / rate);
        assert!(took >= want.mul_f64(0.95), "{took:?} for 100 at {rate}/s");
        // A burst of throttles within half a second is one cut.
        l.throttled();
        l.throttled();
        assert!(l.rate().expect("limited") >= rate * CUT * 0.99);
    }

    #[tokio::test(start_paused = true)]
    async fn successes_raise_the_rate_until_the_limit_is_off() {
        let (l, first) = throttled_after(100, Duration::from_millis(10)).await;
        for _ in 0..10 {
            l.acquire().await;
            l.succeeded();
        }
        assert!(l.rate().expect("still limited") > first);
        for _ in 0..10_000 {
            l.acquire().await;
            l.succeeded();
            if l.rate().is_none() {
                return;
            }
        }
        panic!("still limited at {:?}", l.rate());
    }

    #[tokio::test(start_paused = true)]
    async fn never_below_the_floor() {
        let l = Limiter::default();
        for _ in 0..50 {
            send(&l, 2, Duration::from_millis(600)).await;
            l.throttled();
        }
        assert!(l.rate().expect("limited") >= MIN_RATE);
    }
}
