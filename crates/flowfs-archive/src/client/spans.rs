//! A gzip archive's bytes: the spans between its restart points, fetched and inflated
//! whole, and the last ones kept (`Spans`), so that members read one after another in
//! archive order inflate each span once.

use std::sync::Arc;

use bytes::Bytes;
use flowfs_client::{ClientError, Result};

use crate::error::ArchiveError;
use crate::gzip::inflate_from;

use super::ArchiveClient;

impl ArchiveClient {
    /// Bytes `[start, end)` of a gzip archive's uncompressed stream: from the spans
    /// inflated last (`Spans`), else by inflating every span the range touches whole,
    /// from the restart point before it, and keeping them. Members are read one after
    /// another in archive order (`cp -r`, `tar c`): without the spans kept, each of the
    /// 20 members of a 4 MiB span fetched and inflated the whole span again.
    pub(super) async fn inflate(&self, start: u64, end: u64) -> Result<Bytes> {
        let points = &self.index.points;
        let i = points
            .partition_point(|p| p.output <= start)
            .saturating_sub(1);
        if points.is_empty() {
            return Err(ClientError::Other(format!(
                "{}: no restart point",
                self.key
            )));
        }
        // To the first point at or past the end (at least one span).
        let j = (i + points[i..].partition_point(|q| q.output < end)).max(i + 1);
        let spans = match self.spans.get(i..j) {
            Some(s) => s,
            None => self.spans_of(i, j).await?,
        };
        let from = (start - points[i].output) as usize;
        let mut out = Vec::with_capacity((end - start) as usize);
        let mut at = 0;
        for s in &spans {
            let (lo, hi) = (
                from.max(at),
                (from + (end - start) as usize).min(at + s.len()),
            );
            if lo < hi {
                out.extend_from_slice(&s[lo - at..hi - at]);
            }
            at += s.len();
        }
        if out.len() as u64 != end - start {
            let msg = format!("{}: spans end before the read", self.key);
            return Err(ClientError::from(ArchiveError::Corrupt(
                std::io::Error::other(msg),
            )));
        }
        Ok(Bytes::from(out))
    }

    /// Spans `i..j`: those kept, and the others inflated from the first missing one to the
    /// last (one GET). Readers of the same spans at once (read-ahead of one member,
    /// members read in parallel) wait for the first, then take what it kept.
    async fn spans_of(&self, i: usize, j: usize) -> Result<Vec<Arc<Vec<u8>>>> {
        let _held = self.spans.lock(i..j).await;
        let mut got: Vec<Option<Arc<Vec<u8>>>> = (i..j).map(|n| self.spans.one(n)).collect();
        let missing = || {
            got.iter()
                .enumerate()
                .filter(|(_, s)| s.is_none())
                .map(|(n, _)| n)
        };
        if let (Some(a), Some(b)) = (missing().next(), missing().next_back()) {
            let inflated = self.inflate_spans(i + a, i + b + 1).await?;
            for (n, s) in inflated.into_iter().enumerate() {
                got[a + n] = Some(s);
            }
        }
        Ok(got.into_iter().flatten().collect())
    }

    /// Spans `i..j` inflated whole (one GET of their compressed bytes) and kept.
    async fn inflate_spans(&self, i: usize, j: usize) -> Result<Vec<Arc<Vec<u8>>>> {
        let points = &self.index.points;
        let p = &points[i];
        let from = p.input - u64::from(p.bits != 0);
        // The compressed bytes up to the point after the last span (one more for its
        // partial byte), else to the archive's end.
        let to = points
            .get(j)
            .map_or(self.index.size, |q| (q.input + 1).min(self.index.size));
        let data = self.inner.get_range(self.indexed().range(from, to)).await?;
        let index = self.index.clone();
        let inflate = move || {
            let len: u64 = index.points[i..j].iter().map(|p| p.span).sum();
            inflate_from(&index.points[i..j], &data, 0, len as usize)
        };
        let whole = tokio::task::spawn_blocking(inflate)
            .await
            .map_err(|e| ClientError::Other(format!("inflate task: {e}")))?
            .map_err(|e| ClientError::from(ArchiveError::Corrupt(e)))?;
        let mut spans = Vec::with_capacity(j - i);
        let mut at = 0usize;
        for (n, q) in points[i..j].iter().enumerate() {
            let s = Arc::new(whole[at..at + q.span as usize].to_vec());
            at += q.span as usize;
            self.spans.put(i + n, s.clone());
            spans.push(s);
        }
        Ok(spans)
    }
}

/// The spans of a gzip archive inflated last, by restart point: at most `SPANS_KEPT`
/// (each up to `SPAN` bytes, so 32 MiB at most), the least recently used dropped; and a
/// lock per span, held while it is fetched and inflated.
pub(super) struct Spans {
    kept: parking_lot::Mutex<std::collections::VecDeque<(usize, Arc<Vec<u8>>)>>,
    fetching: Vec<Arc<tokio::sync::Mutex<()>>>,
}

/// Spans kept per gzip archive.
const SPANS_KEPT: usize = 8;

impl Spans {
    pub(super) fn new(points: usize) -> Spans {
        Spans {
            kept: Default::default(),
            fetching: (0..points).map(|_| Default::default()).collect(),
        }
    }

    /// The locks of spans `range`, taken in order (two readers never wait on each other
    /// in a cycle).
    async fn lock(&self, range: std::ops::Range<usize>) -> Vec<tokio::sync::OwnedMutexGuard<()>> {
        let mut held = Vec::with_capacity(range.len());
        for l in self.fetching.get(range).unwrap_or_default() {
            held.push(l.clone().lock_owned().await);
        }
        held
    }

    /// Spans `range`, if every one is kept.
    fn get(&self, range: std::ops::Range<usize>) -> Option<Vec<Arc<Vec<u8>>>> {
        let mut kept = self.kept.lock();
        let mut out = Vec::with_capacity(range.len());
        for i in range {
            let at = kept.iter().position(|(n, _)| *n == i)?;
            let e = kept.remove(at)?;
            out.push(e.1.clone());
            kept.push_back(e);
        }
        Some(out)
    }

    /// Span `i`, if kept.
    fn one(&self, i: usize) -> Option<Arc<Vec<u8>>> {
        self.get(i..i + 1).and_then(|mut v| v.pop())
    }

    fn put(&self, i: usize, span: Arc<Vec<u8>>) {
        let mut kept = self.kept.lock();
        kept.retain(|(n, _)| *n != i);
        if kept.len() == SPANS_KEPT {
            kept.pop_front();
        }
        kept.push_back((i, span));
    }
}
