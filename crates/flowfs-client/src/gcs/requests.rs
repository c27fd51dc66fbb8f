//! `impl ObjectClient for GcsClient`: each method is the GCS JSON API call of
//! docs/STORES.md's table (multipart uploads as composed part objects: uploads.rs).

use crate::rest::Call;
use crate::{ByteRange, Completion, Crc, List, ListAfter, Metadata, Part, Payload, Pieces};
use crate::{Rewrite, Sink, Upload, Version};
use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use http::Method;

use super::checks;
use super::json::{self, Object, OBJECT_FIELDS};
use super::listing::{list_page, ListQuery};
use super::uploads;
use super::{etag_of, generation_of, query_value, GcsClient};
use crate::{
    ClientError, KeyRules, ListPage, ObjectClient, ObjectMeta, PutResult, Result, UploadInfo,
};

/// Calls of one upload (composes of a level, deletes of its parts) sent at once.
pub(super) const CALLS_AT_ONCE: usize = 16;

/// A compose source: an object's name and the generation it must still have.
pub(super) type Source = (String, Option<String>);

impl GcsClient {
    /// A new object `name` of `data` with `metadata`, in one request.
    pub(super) async fn insert(
        &self,
        name: &str,
        data: Payload,
        metadata: &HashMap<String, String>,
        what: &str,
    ) -> Result<Object> {
        let sent = data.checksum(Crc::Crc32c);
        let mut resource = json::resource(name, metadata);
        resource["crc32c"] = sent.value.clone().into();
        let (content_type, body) = json::multipart(&resource, data.bytes());
        let url = self.upload_url(&format!(
            "uploadType=multipart&fields={}",
            query_value(OBJECT_FIELDS)
        ));
        let h = [("content-type", content_type)];
        let call = Call::new(Method::POST, &url, what).headers(&h).body(body);
        let got = self.send_read(call).await?;
        let o = json::parse(&got, what)?;
        checks::stored_as_sent(&o, &sent, what)?;
        Ok(o)
    }

    /// Composes `sources` (with the generations they must have) into `dest`.
    pub(super) async fn compose_into(
        &self,
        dest: &str,
        sources: &[Source],
        metadata: &HashMap<String, String>,
    ) -> Result<Object> {
        let url = format!("{}/compose", self.object_url(dest, ""));
        let what = format!("compose of {dest}");
        let body = json::compose(sources, metadata);
        self.object_call(Method::POST, &url, Some(body), &what)
            .await
    }

    /// `objects.rewrite` of `from` (of `generation`, if given) to `to`, with `metadata`
    /// (else the source's), called again with its token until done.
    pub(super) async fn rewrite(
        &self,
        from: &str,
        generation: Option<&str>,
        to: &str,
        metadata: Option<&HashMap<String, String>>,
    ) -> Result<Object> {
        let mut to_url = format!(
            "{}/rewriteTo/b/{}/o/",
            self.object_url(from, ""),
            self.bucket
        );
        crate::percent::percent_escape(&mut to_url, to, super::unreserved);
        let what = format!("copy of {from} to {to}");
        let body = match metadata {
            Some(m) => serde_json::json!({ "metadata": json::metadata_out(m) }).to_string(),
            None => "{}".to_string(),
        };
        let mut token: Option<String> = None;
        loop {
            let mut q = Vec::new();
            if let Some(g) = generation {
                q.push(format!("sourceGeneration={g}"));
            }
            if let Some(t) = &token {
                q.push(format!("rewriteToken={}", query_value(t)));
            }
            let url = match q.is_empty() {
                true => to_url.clone(),
                false => format!("{to_url}?{}", q.join("&")),
            };
            let got = match self
                .call(Method::POST, &url, Some(body.clone()), &what)
                .await
            {
                Err(ClientError::NotFound(_)) => {
                    return Err(ClientError::NotFound(from.to_string()))
                }
                r => r?,
            };
            let r: json::Rewrite = json::parse(&got, &what)?;
            match (r.done, r.resource, r.rewrite_token) {
                (true, Some(o), _) => return Ok(o),
                (false, _, Some(t)) => token = Some(t),
                _ => {
                    return Err(ClientError::Other(format!(
                        "{what}: a rewrite answer with neither the object nor a token"
                    )))
                }
            }
        }
    }
}

fn not_open(key: &str, id: &str) -> ClientError {
    ClientError::NotFound(format!("upload {id} of {key}"))
}

fn put_result(o: &Object) -> PutResult {
    PutResult {
        etag: etag_of(&o.generation),
    }
}

#[async_trait]
impl ObjectClient for GcsClient {
    fn key_rules(&self) -> KeyRules {
        KeyRules::GCS
    }

    fn upload_checksum(&self) -> Option<Crc> {
        Some(Crc::Crc32c)
    }

    async fn check_bucket(&self, prefix: &str) -> Result<()> {
        let q = ListQuery {
            prefix,
            max: Some(1),
            ..ListQuery::default()
        };
        self.list_objects(q).await.map(|_| ())
    }

    async fn head(&self, key: &str) -> Result<ObjectMeta> {
        let url = self.object_url(key, &format!("fields={}", query_value(OBJECT_FIELDS)));
        let o = self.object_call(Method::GET, &url, None, key).await?;
        Ok(o.into_meta())
    }

    /// A read of one version is a read of its generation: GCS answers 404 once that
    /// version is gone, which is `Precondition` here, as S3's If-Match failing is (the
    /// caller then asks what is there now).
    async fn get_range_pieces(&self, get: Pieces<'_>, sink: Sink<'_>) -> Result<()> {
        let Some(end) = get.end() else {
            return Ok(());
        };
        // The stored bytes, as they are: an object written gzip-encoded is not unpacked
        // (its size is the stored one, and a range of it is that range).
        let r = self.get_answer(get.src.range(get.start, end)).await?;
        let key = get.src.key;
        crate::body::deliver(crate::rest::Answer { r, key }, get, sink).await
    }

    /// Checked against the answer's `x-goog-hash` (the stored bytes' CRC-32C).
    async fn get_whole_pieces(&self, src: Version<'_>, cuts: &[u64], sink: Sink<'_>) -> Result<()> {
        let Some(end) = src.pieces(0, cuts).end() else {
            return Ok(());
        };
        let r = self.get_answer(src.range(0, end)).await?;
        let want = checks::of_answer(&r, end);
        let key = src.key;
        let body = crate::rest::Answer { r, key };
        crate::body::deliver_checked(body, key, cuts, want, sink).await
    }

    async fn list_page(&self, list: List<'_>) -> Result<ListPage> {
        let q = ListQuery {
            prefix: list.prefix,
            delimiter: list.delimiter,
            token: list.token.as_deref(),
            max: list.max_keys,
            ..ListQuery::default()
        };
        Ok(list_page(self.list_objects(q).await?))
    }

    /// `startOffset` is where the listing starts (the key itself included, so it is left
    /// out here). A common prefix holding `start_after` is listed when a key in it comes
    /// after, which one more request tells: GCS and its emulator differ there.
    async fn list_after(&self, list: ListAfter<'_>) -> Result<ListPage> {
        let (prefix, start_after, token) = (list.prefix, list.start_after, list.token);
        let q = ListQuery {
            prefix,
            delimiter: Some("/"),
            token: token.as_deref(),
            start_offset: Some(start_after),
            ..ListQuery::default()
        };
        let mut page = list_page(self.list_objects(q).await?);
        page.objects.retain(|o| o.key.as_str() > start_after);
        page.prefixes
            .retain(|p| !start_after.starts_with(p.as_str()));
        let inner = start_after
            .strip_prefix(prefix)
            .and_then(|rest| rest.find('/'))
            .map(|i| &start_after[..prefix.len() + i + 1]);
        if let (Some(p), None) = (inner, &token) {
            if self.key_after(p, start_after).await? {
                page.prefixes.push(p.to_string());
                page.prefixes.sort();
            }
        }
        Ok(page)
    }

    async fn put(&self, key: &str, body: Payload, metadata: &Metadata) -> Result<PutResult> {
        let o = self.insert(key, body, metadata, key).await?;
        Ok(put_result(&o))
    }

    async fn create_multipart(&self, key: &str, metadata: &Metadata) -> Result<String> {
        let id = self.uploads.begin(key, metadata);
        let marker = uploads::marker(key, &id);
        if let Err(e) = self.put_part_object(&marker, Payload::default()).await {
            self.uploads.end(key, &id);
            return Err(e);
        }
        Ok(id)
    }

    async fn upload_part(&self, part: Part<'_>, body: Payload) -> Result<String> {
        let (key, upload_id, part_number) = (part.upload.key, part.upload.id, part.number);
        if !self.uploads.is_open(key, upload_id) {
            return Err(not_open(key, upload_id));
        }
        let name = uploads::part(key, upload_id, part_number);
        let o = self.put_part_object(&name, body).await?;
        let sent = |parts: &mut BTreeMap<i32, String>| {
            parts.insert(part_number, o.generation.clone());
        };
        if !self.uploads.update(key, upload_id, sent) {
            // Aborted while it was sent: the abort did not see it.
            self.delete(&name).await?;
            return Err(not_open(key, upload_id));
        }
        Ok(etag_of(&o.generation))
    }

    async fn complete_multipart(&self, done: Completion<'_>) -> Result<PutResult> {
        let (key, upload_id, parts) = (done.upload.key, done.upload.id, done.parts);
        let Some((metadata, sent)) = self.uploads.get(key, upload_id) else {
            return Err(not_open(key, upload_id));
        };
        let mut sources = Vec::with_capacity(parts.len());
        for p in parts {
            let generation = sent.get(&p.part_number);
            if generation.map(|g| etag_of(g)).as_ref() != Some(&p.etag) {
                return Err(ClientError::Other(format!(
                    "InvalidPart: part {} of upload {upload_id} of {key} was not sent as {}",
                    p.part_number, p.etag
                )));
            }
            let name = uploads::part(key, upload_id, p.part_number);
            sources.push((name, generation.cloned()));
        }
        if sources.is_empty() {
            return Err(ClientError::Other(format!(
                "InvalidRequest: upload {upload_id} of {key} completed without parts"
            )));
        }
        let (o, made) = self
            .compose_upload(key, upload_id, sources, &metadata)
            .await?;
        self.uploads.end(key, upload_id);
        let mut names: Vec<String> = sent
            .keys()
            .map(|&n| uploads::part(key, upload_id, n))
            .collect();
        names.extend(made);
        if let Err(e) = self.drop_parts(key, upload_id, names).await {
            // The object is whole; the parts left are found and dropped by a recovery.
            tracing::warn!("upload {upload_id} of {key}: its parts were not all deleted: {e}");
        }
        Ok(put_result(&o))
    }

    /// GCS copies no range of an object into another: the part is read and sent again
    /// (its bytes down and up), conditional on `etag` as S3's copy is.
    async fn upload_part_copy(&self, part: Part<'_>, range: ByteRange<'_>) -> Result<String> {
        let Upload { key, id } = part.upload;
        if !self.uploads.is_open(key, id) {
            return Err(not_open(key, id));
        }
        let bytes = self.get_range(range).await?;
        self.upload_part(part, bytes.into()).await
    }

    async fn abort_multipart(&self, upload: Upload<'_>) -> Result<()> {
        let Upload { key, id: upload_id } = upload;
        if !crate::rest::valid_upload_id(upload_id) {
            return Err(not_open(key, upload_id));
        }
        self.uploads.end(key, upload_id);
        let dir = uploads::upload_dir(key, upload_id);
        let listed = self.list_every(&dir, None).await?;
        let names = listed.items.into_iter().map(|o| o.name).collect();
        self.drop_parts(key, upload_id, names).await
    }

    async fn list_uploads(&self, key: &str) -> Result<Vec<UploadInfo>> {
        let page = self.list_every(&uploads::key_dir(key), Some("/")).await?;
        let open = page.prefixes.iter().filter_map(|p| uploads::upload_of(p));
        Ok(open.collect())
    }

    /// `objects.rewrite`, called again with its token until done (a copy within a
    /// location and storage class is done in one call). A version is a generation: an ETag
    /// that names none matches no version.
    async fn copy(&self, src: Version<'_>, to: &str, meta: Option<&Metadata>) -> Result<PutResult> {
        let Version { key: from, etag } = src;
        let generation = match etag {
            Some(e) => Some(
                generation_of(e)
                    .ok_or_else(|| ClientError::Precondition(format!("{from}: version {e}")))?,
            ),
            None => None,
        };
        let o = self.rewrite(from, generation, to, meta).await?;
        Ok(put_result(&o))
    }

    /// `objects.update` of the metadata alone: the body stays; GCS keeps the generation
    /// (fake-gcs-server gives a new one: the one returned is the one to read). An ETag
    /// that is no generation matches no version: `Precondition`.
    async fn replace_metadata(&self, rw: Rewrite<'_>) -> Result<PutResult> {
        let Version { key, etag } = rw.object;
        let mut query = format!("fields={}", query_value(OBJECT_FIELDS));
        if let Some(e) = etag {
            let Some(g) = generation_of(e) else {
                return Err(ClientError::Precondition(format!("{key}: version {e}")));
            };
            query.push_str(&format!("&ifGenerationMatch={g}"));
        }
        let url = self.object_url(key, &query);
        let body = serde_json::json!({ "metadata": json::metadata_out(rw.metadata) }).to_string();
        let o = self.object_call(Method::PUT, &url, Some(body), key).await?;
        Ok(put_result(&o))
    }

    async fn delete(&self, key: &str) -> Result<()> {
        let url = self.object_url(key, "");
        match self.call(Method::DELETE, &url, None, key).await {
            Ok(_) | Err(ClientError::NotFound(_)) => Ok(()),
            Err(e) => Err(e),
        }
    }
}
