//! A GET body handed over in the caller's pieces as it arrives (`get_range_pieces`), so
//! that a reader waiting on the front of a long range does not wait for its end. Each
//! piece is in a buffer of its own: the disk cache writes it while the next one is still
//! arriving. Every backend's GET ends here, whatever its HTTP stack.

use std::future::Future;

use bytes::Bytes;

use crate::checksum::Running;
use crate::{short_body, AlignedBuf, Checksum, Pieces, Result, Sink, Version};

/// A body read frame by frame (a reqwest answer, or one already whole).
pub(crate) trait Frames: Send {
    /// The next frame, `None` at the body's end.
    fn next_frame(&mut self) -> impl Future<Output = Result<Option<Bytes>>> + Send;
}

/// A body that is one frame (the mock's).
pub(crate) struct Whole(pub Option<Bytes>);

impl Frames for Whole {
    async fn next_frame(&mut self) -> Result<Option<Bytes>> {
        Ok(self.0.take())
    }
}

/// Reads `body`, the bytes of `get.src` from `get.start` on, and gives piece `i`, which
/// ends at `cuts[i]` (not empty), to `sink(i, bytes)` once it is whole. A body that ends
/// early is a short-body error after the pieces it completed.
pub(crate) async fn deliver(mut body: impl Frames, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
    let Pieces { src, start, cuts } = get;
    let key = src.key;
    let want = cuts.last().map_or(0, |&end| end - start);
    let (mut i, mut from) = (0, start);
    let mut buf = AlignedBuf::with_capacity((cuts[0] - start) as usize);
    while i < cuts.len() {
        let Some(frame) = body.next_frame().await? else {
            return Err(short_body(key, from - start + buf.len() as u64, want));
        };
        let mut frame = &frame[..];
        while !frame.is_empty() && i < cuts.len() {
            let room = (cuts[i] - from) as usize - buf.len();
            let n = room.min(frame.len());
            buf.extend_from_slice(&frame[..n]);
            frame = &frame[n..];
            if buf.len() as u64 == cuts[i] - from {
                from = cuts[i];
                let next = cuts.get(i + 1).map_or(0, |&c| (c - from) as usize);
                let full = std::mem::replace(&mut buf, AlignedBuf::with_capacity(next));
                sink(i, full.into_bytes());
                i += 1;
            }
        }
        // Bytes past the range (a server that ignored Range) are dropped.
    }
    Ok(())
}

/// `deliver` of a whole object's body (from 0) checked against `want`, the store's
/// full-object checksum: no piece is handed over before the last byte has arrived and
/// matched, so a damaged body is a `Corrupt` error and never data. Without a checksum
/// flowfs can compute, the pieces go as they arrive.
pub(crate) async fn deliver_checked(
    mut body: impl Frames,
    key: &str,
    cuts: &[u64],
    want: Option<Checksum>,
    sink: Sink<'_>,
) -> Result<()> {
    let get = Version::any(key).pieces(0, cuts);
    let Some(mut check) = want.and_then(Running::against) else {
        return deliver(body, get, sink).await;
    };
    let len = cuts.last().map_or(0, |&end| end as usize);
    let mut buf = AlignedBuf::with_capacity(len);
    while let Some(frame) = body.next_frame().await? {
        check.update(&frame);
        // Bytes past the object as it was asked for are checked, not kept.
        let room = len - buf.len();
        buf.extend_from_slice(&frame[..room.min(frame.len())]);
    }
    // A body cut short is the connection's failure, not the store's bytes.
    if buf.len() < len {
        return Err(short_body(key, buf.len() as u64, len as u64));
    }
    check.check(key)?;
    crate::split_pieces(get, &buf.into_bytes(), sink)
}
