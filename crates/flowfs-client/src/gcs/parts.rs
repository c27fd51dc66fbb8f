//! The part objects of GCS multipart uploads (uploads.rs names them): each part an object
//! of its own, composed level by level into the upload's object, and deleted afterwards.

use std::collections::HashMap;

use futures_util::{stream, StreamExt};
use http::Method;

use super::checks;
use super::json::{self, Object, OBJECT_FIELDS};
use super::requests::{Source, CALLS_AT_ONCE};
use super::uploads::{self, COMPOSE_MAX};
use super::{query_value, GcsClient};
use crate::rest::Call;
use crate::retry::RetryPolicy;
use crate::{ClientError, Crc, ObjectClient, Payload, Result};

impl GcsClient {
    /// The object of upload `id` of `key` from its parts (named with their generations):
    /// composes of `COMPOSE_MAX` at a time, level by level, until one remains.
    pub(super) async fn compose_upload(
        &self,
        key: &str,
        id: &str,
        mut level: Vec<Source>,
        metadata: &HashMap<String, String>,
    ) -> Result<(Object, Vec<String>)> {
        let mut made = Vec::new();
        let none = HashMap::new();
        let mut depth = 0;
        while level.len() > COMPOSE_MAX {
            let groups: Vec<(String, Vec<Source>)> = level
                .chunks(COMPOSE_MAX)
                .enumerate()
                .map(|(i, g)| (uploads::composed(key, id, depth, i), g.to_vec()))
                .collect();
            let none = &none;
            let next = stream::iter(groups)
                .map(|(dest, group)| async move {
                    let o = self.compose_into(&dest, &group, none).await?;
                    Ok::<_, ClientError>((dest, Some(o.generation)))
                })
                .buffered(CALLS_AT_ONCE)
                .collect::<Vec<_>>()
                .await
                .into_iter()
                .collect::<Result<Vec<_>>>()?;
            made.extend(next.iter().map(|(n, _)| n.clone()));
            level = next;
            depth += 1;
        }
        // The last compose makes an object of its own, rewritten into the key with the
        // upload's metadata: fake-gcs-server gives a compose onto an existing key the old
        // object's generation (GCS a new one), and a reader that keys its cache by
        // generation would then serve the old bytes. A rewrite within a bucket, location
        // and storage class is done in one call on GCS without copying the bytes.
        let whole = uploads::whole(key, id);
        let w = self.compose_into(&whole, &level, &none).await?;
        made.push(whole.clone());
        let o = self
            .rewrite(&whole, Some(&w.generation), key, Some(metadata))
            .await?;
        Ok((o, made))
    }

    /// Deletes `name` (absent too), sent again on a retryable failure with the retry
    /// layer's backoff and budget: these deletes happen inside one call of the trait (a
    /// completion, an abort), which the layer above retries only as a whole.
    pub(super) async fn delete_retried(&self, name: &str) -> Result<()> {
        let policy = RetryPolicy::default();
        let start = tokio::time::Instant::now();
        let mut attempt = 1;
        loop {
            match self.delete(name).await {
                Err(e) if e.is_retryable() => {
                    let Some(pause) = policy.pause_after(attempt, start.elapsed()) else {
                        return Err(e);
                    };
                    tokio::time::sleep(pause).await;
                    attempt += 1;
                }
                r => return r,
            }
        }
    }

    /// Deletes `names` (absent ones too), several at once; the first error, after all.
    pub(super) async fn delete_all(&self, names: Vec<String>) -> Result<()> {
        let results: Vec<Result<()>> = stream::iter(names)
            .map(|n| async move { self.delete_retried(&n).await })
            .buffer_unordered(CALLS_AT_ONCE)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Deletes the part objects of upload `id` of `key`, its marker last, so that an
    /// upload cleaned up half way is still listed and aborted by a later recovery.
    pub(super) async fn drop_parts(
        &self,
        key: &str,
        id: &str,
        mut names: Vec<String>,
    ) -> Result<()> {
        let marker = uploads::marker(key, id);
        names.retain(|n| *n != marker);
        self.delete_all(names).await?;
        self.delete_retried(&marker).await
    }

    /// An object of `data` named `name` without metadata (a part, a marker).
    pub(super) async fn put_part_object(&self, name: &str, data: Payload) -> Result<Object> {
        let url = self.upload_url(&format!(
            "uploadType=media&name={}&fields={}",
            query_value(name),
            query_value(OBJECT_FIELDS)
        ));
        let sent = data.checksum(Crc::Crc32c);
        let h = [
            ("content-type", "application/octet-stream".to_string()),
            checks::hash_header(&sent),
        ];
        let got = self
            .send_read(
                Call::new(Method::POST, &url, name)
                    .headers(&h)
                    .body(data.into_bytes()),
            )
            .await?;
        let o = json::parse(&got, name)?;
        checks::stored_as_sent(&o, &sent, name)?;
        Ok(o)
    }
}
