//! An S3 GET body to the shared piece-by-piece delivery (crate::body).

use aws_sdk_s3::primitives::ByteStream;
use bytes::Bytes;

use crate::body::Frames;
use crate::{ClientError, Pieces, Result, Sink};

struct Sdk<'a> {
    body: ByteStream,
    key: &'a str,
}

impl Frames for Sdk<'_> {
    async fn next_frame(&mut self) -> Result<Option<Bytes>> {
        (self.body.try_next().await).map_err(|e| {
            // With `ChecksumMode::Enabled` the SDK checks the body too (issue 49), and says
            // so at its end.
            let why = aws_smithy_types::error::display::DisplayErrorContext(&e).to_string();
            match why.contains("checksum mismatch") {
                true => ClientError::Corrupt(format!("{}: {why}", self.key)),
                false => ClientError::Transient(format!("{}: body: {e}", self.key)),
            }
        })
    }
}

/// `crate::body::deliver_checked` of an SDK body.
pub(super) async fn deliver_checked(
    body: ByteStream,
    key: &str,
    cuts: &[u64],
    want: Option<crate::Checksum>,
    sink: Sink<'_>,
) -> Result<()> {
    crate::body::deliver_checked(Sdk { body, key }, key, cuts, want, sink).await
}

/// `crate::body::deliver` of an SDK body.
pub(super) async fn deliver(body: ByteStream, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
    let key = get.src.key;
    crate::body::deliver(Sdk { body, key }, get, sink).await
}
