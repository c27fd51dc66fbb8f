//! What a test does with the mock besides sending requests: puts, reads and removes
//! objects as another client would, reads the request counters, injects failures, cut
//! bodies and latency; and `enter`, where every request meets the counters and the
//! injected trouble before it is served.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use bytes::Bytes;

use super::{MockClient, Obj, Op};
use crate::{ClientError, Result};

impl MockClient {
    /// An empty bucket with no faults and no latency.
    pub fn new() -> MockClient {
        MockClient::default()
    }

    /// Puts an object as another S3 client would (no request is counted).
    pub fn insert(&self, key: &str, data: impl Into<Bytes>) {
        let n = self.next_id.fetch_add(1, Ordering::Relaxed);
        self.objects.lock().insert(
            key.to_string(),
            Obj {
                data: data.into(),
                etag: format!("\"mock{n}\""),
                modified: SystemTime::now(),
                metadata: HashMap::new(),
            },
        );
    }

    /// Puts an object with user metadata as another S3 client (s3fs, rclone) would; no
    /// request is counted.
    pub fn insert_with_metadata(
        &self,
        key: &str,
        data: impl Into<Bytes>,
        metadata: &[(&str, &str)],
    ) {
        self.insert(key, data);
        if let Some(o) = self.objects.lock().get_mut(key) {
            o.metadata = metadata
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        }
    }

    /// Deletes an object as another client would (no request is counted).
    pub fn remove(&self, key: &str) {
        self.objects.lock().remove(key);
    }

    /// The content of `key`, if present.
    pub fn object(&self, key: &str) -> Option<Bytes> {
        self.objects.lock().get(key).map(|o| o.data.clone())
    }

    /// The user metadata of `key`, if present.
    pub fn metadata(&self, key: &str) -> Option<HashMap<String, String>> {
        self.objects.lock().get(key).map(|o| o.metadata.clone())
    }

    /// Every key in the bucket, sorted.
    pub fn keys(&self) -> Vec<String> {
        self.objects.lock().keys().cloned().collect()
    }

    /// Requests of kind `op` received since the start or the last `reset_counts`.
    pub fn count(&self, op: Op) -> u64 {
        self.counts.lock().get(&op).copied().unwrap_or(0)
    }

    /// PUTs and parts that came without the checksum their sender computes as it reads
    /// them (`Payload`): the backend had to make a pass over the bytes of its own.
    pub fn unsummed_uploads(&self) -> u64 {
        self.unsummed.load(Ordering::Relaxed)
    }

    /// Body bytes returned by GETs so far.
    pub fn get_bytes(&self) -> u64 {
        self.get_bytes.load(Ordering::Relaxed)
    }

    /// Sets the request and byte counters back to zero.
    pub fn reset_counts(&self) {
        self.counts.lock().clear();
        self.get_bytes.store(0, Ordering::Relaxed);
    }

    /// Keys in the order their objects became visible (puts, completed uploads, copies).
    pub fn visible_order(&self) -> Vec<String> {
        self.visible.lock().clone()
    }

    /// Multipart uploads created and neither completed nor aborted.
    pub fn open_uploads(&self) -> usize {
        self.uploads.lock().len()
    }

    /// The call after `skip` more calls of `op` fails with `err`, `times` times in a row.
    pub fn fail(&self, op: Op, skip: u64, err: ClientError, times: u64) {
        self.faults.lock().push((op, skip, err, times));
    }

    /// Drops every failure not yet injected.
    pub fn clear_faults(&self) {
        self.faults.lock().clear();
    }

    /// The next `times` GET bodies break after `after` bytes, as a connection lost in
    /// the middle of a download; the pieces complete before that are delivered.
    pub fn cut_bodies(&self, after: u64, times: u64) {
        *self.cut.lock() = Some((after, times));
    }

    /// The next `times` GET bodies arrive with one byte flipped, as a body damaged on
    /// its way: a whole GET's check finds it (`get_whole_pieces`), a range's cannot.
    pub fn flip_bodies(&self, times: u64) {
        self.flips.store(times, Ordering::SeqCst);
    }

    /// Every later request waits `d` before it is served.
    pub fn set_latency(&self, d: Duration) {
        *self.latency.lock() = d;
    }

    /// Every later request of kind `op` waits `d` before it is served (on top of
    /// `set_latency`): holds a state open, such as a multipart upload whose parts hang.
    pub fn set_latency_of(&self, op: Op, d: Duration) {
        self.op_latency.lock().insert(op, d);
    }

    /// Every request first: counted, delayed, and failed if a fault says so.
    pub(super) async fn enter(&self, op: Op) -> Result<()> {
        *self.counts.lock().entry(op).or_insert(0) += 1;
        let extra = self.op_latency.lock().get(&op).copied().unwrap_or_default();
        let latency = *self.latency.lock() + extra;
        if !latency.is_zero() {
            tokio::time::sleep(latency).await;
        }
        let mut faults = self.faults.lock();
        for f in faults.iter_mut().filter(|f| f.0 == op) {
            if f.1 > 0 {
                f.1 -= 1;
            } else if f.3 > 0 {
                f.3 -= 1;
                return Err(f.2.clone());
            }
        }
        faults.retain(|f| f.1 > 0 || f.3 > 0);
        Ok(())
    }

    /// `data` with its middle byte flipped while `flip_bodies` has some left.
    pub(super) fn flip(&self, data: Bytes) -> Bytes {
        let take = |n: u64| n.checked_sub(1);
        if data.is_empty()
            || self
                .flips
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, take)
                .is_err()
        {
            return data;
        }
        let mut v = data.to_vec();
        v[data.len() / 2] ^= 0x01;
        Bytes::from(v)
    }

    /// `data`, the body of a GET, as the next cut body (see `cut_bodies`) delivers it.
    pub(super) fn cut(&self, data: Bytes) -> Bytes {
        let mut c = self.cut.lock();
        match *c {
            Some((after, times)) if times > 0 => {
                *c = (times > 1).then_some((after, times - 1));
                data.slice(..(after as usize).min(data.len()))
            }
            _ => data,
        }
    }
}
