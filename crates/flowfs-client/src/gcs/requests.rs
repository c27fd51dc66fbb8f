//! `impl ObjectClient for GcsClient`: each method is the GCS JSON API call of
//! docs/STORES.md's table (multipart uploads as composed part objects: uploads.rs).

use crate::{Crc, Metadata, Version};
use std::collections::{BTreeMap, HashMap};

use async_trait::async_trait;
use bytes::Bytes;
use futures_util::{stream, StreamExt};
use http::Method;

use super::checks;
use super::json::{self, Object, Page};
use super::uploads::{self, COMPOSE_MAX};
use super::{etag_of, generation_of, query_value, GcsClient};
use crate::retry::RetryPolicy;
use crate::{
    pieces_end, ClientError, CompletedPart, KeyRules, ListPage, ObjectClient, ObjectMeta,
    PutResult, Result, UploadInfo,
};

/// The fields of an object flowfs reads: the rest of a resource is not sent.
const OBJECT_FIELDS: &str = "name,size,generation,updated,metadata,crc32c";
/// Calls of one upload (composes of a level, deletes of its parts) sent at once.
const CALLS_AT_ONCE: usize = 16;

/// A compose source: an object's name and the generation it must still have.
type Source = (String, Option<String>);

/// What one `objects.list` asks.
#[derive(Default)]
struct ListQuery<'a> {
    prefix: &'a str,
    delimiter: Option<&'a str>,
    token: Option<&'a str>,
    max: Option<i32>,
    start_offset: Option<&'a str>,
}

impl GcsClient {
    /// A request with a JSON body (or none) whose JSON answer is read whole.
    async fn call(
        &self,
        method: Method,
        url: &str,
        body: Option<String>,
        what: &str,
    ) -> Result<Bytes> {
        let (h, body) = match body {
            Some(b) => (
                vec![("content-type", "application/json".to_string())],
                b.into(),
            ),
            None => (Vec::new(), Bytes::new()),
        };
        self.send_read(method, url, &h, body, what).await
    }

    /// `send`, and the answer's body read whole.
    async fn send_read(
        &self,
        method: Method,
        url: &str,
        headers: &[(&str, String)],
        body: Bytes,
        what: &str,
    ) -> Result<Bytes> {
        let r = self.send(method, url, headers, body, what).await?;
        r.bytes()
            .await
            .map_err(|e| crate::rest::body_error(what, e))
    }

    /// An object resource from a request that answers with one.
    async fn object_call(
        &self,
        method: Method,
        url: &str,
        body: Option<String>,
        what: &str,
    ) -> Result<Object> {
        let got = self.call(method, url, body, what).await?;
        json::parse(&got, what)
    }

    /// One page of `objects.list`, its part objects left out (unless it lists them).
    async fn list_objects(&self, q: ListQuery<'_>) -> Result<Page> {
        let mut query = format!(
            "fields={}",
            query_value(&format!("items({OBJECT_FIELDS}),prefixes,nextPageToken"))
        );
        let params = [
            ("prefix", Some(q.prefix).filter(|p| !p.is_empty())),
            ("delimiter", q.delimiter),
            ("pageToken", q.token),
            ("startOffset", q.start_offset),
        ];
        for (name, value) in params {
            if let Some(v) = value {
                query.push_str(&format!("&{name}={}", query_value(v)));
            }
        }
        // GCS's own page size, asked for: fake-gcs-server answers every key at once
        // without it.
        let max = q.max.unwrap_or(1000).clamp(1, 1000);
        query.push_str(&format!("&maxResults={max}"));
        let what = format!("list of {}/{}", self.bucket, q.prefix);
        let url = self.object_url("", &query);
        let got = match self.call(Method::GET, &url, None, &what).await {
            Err(ClientError::NotFound(_)) => {
                return Err(ClientError::NoSuchBucket(self.bucket.clone()))
            }
            r => r?,
        };
        let mut page: Page = json::parse(&got, &what)?;
        if !uploads::hidden(q.prefix) {
            page.items.retain(|o| !uploads::hidden(&o.name));
            page.prefixes.retain(|p| !uploads::hidden(p));
        }
        Ok(page)
    }

    /// Every page of `objects.list` below `prefix`, as one.
    async fn list_every(&self, prefix: &str, delimiter: Option<&str>) -> Result<Page> {
        let (mut all, mut token) = (Page::default(), None);
        loop {
            let q = ListQuery {
                prefix,
                delimiter,
                token: token.as_deref(),
                ..ListQuery::default()
            };
            let page = self.list_objects(q).await?;
            all.items.extend(page.items);
            all.prefixes.extend(page.prefixes);
            match page.next_page_token {
                Some(t) => token = Some(t),
                None => return Ok(all),
            }
        }
    }

    /// Whether a key below `prefix` sorts after `start_after`.
    async fn key_after(&self, prefix: &str, start_after: &str) -> Result<bool> {
        let q = ListQuery {
            prefix,
            max: Some(2),
            start_offset: Some(start_after),
            ..ListQuery::default()
        };
        let page = self.list_objects(q).await?;
        Ok(page.items.iter().any(|o| o.name.as_str() > start_after))
    }

    /// A new object `name` of `data` with `metadata`, in one request.
    async fn insert(
        &self,
        name: &str,
        data: Bytes,
        metadata: &HashMap<String, String>,
        what: &str,
    ) -> Result<Object> {
        let sent = Crc::Crc32c.of(&data);
        let mut resource = json::resource(name, metadata);
        resource["crc32c"] = sent.value.clone().into();
        let (content_type, body) = json::multipart(&resource, &data);
        let url = self.upload_url(&format!(
            "uploadType=multipart&fields={}",
            query_value(OBJECT_FIELDS)
        ));
        let h = [("content-type", content_type)];
        let got = self.send_read(Method::POST, &url, &h, body, what).await?;
        let o = json::parse(&got, what)?;
        checks::stored_as_sent(&o, &sent, what)?;
        Ok(o)
    }

    /// Composes `sources` (with the generations they must have) into `dest`.
    async fn compose_into(
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
    async fn rewrite(
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

    /// The object of upload `id` of `key` from its parts (named with their generations):
    /// composes of `COMPOSE_MAX` at a time, level by level, until one remains.
    async fn compose_upload(
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
    async fn delete_retried(&self, name: &str) -> Result<()> {
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
    async fn delete_all(&self, names: Vec<String>) -> Result<()> {
        let results: Vec<Result<()>> = stream::iter(names)
            .map(|n| async move { self.delete_retried(&n).await })
            .buffer_unordered(CALLS_AT_ONCE)
            .collect()
            .await;
        results.into_iter().collect()
    }

    /// Deletes the part objects of upload `id` of `key`, its marker last, so that an
    /// upload cleaned up half way is still listed and aborted by a later recovery.
    async fn drop_parts(&self, key: &str, id: &str, mut names: Vec<String>) -> Result<()> {
        let marker = uploads::marker(key, id);
        names.retain(|n| *n != marker);
        self.delete_all(names).await?;
        self.delete_retried(&marker).await
    }

    /// An object of `data` named `name` without metadata (a part, a marker).
    async fn put_part_object(&self, name: &str, data: Bytes) -> Result<Object> {
        let url = self.upload_url(&format!(
            "uploadType=media&name={}&fields={}",
            query_value(name),
            query_value(OBJECT_FIELDS)
        ));
        let sent = Crc::Crc32c.of(&data);
        let h = [
            ("content-type", "application/octet-stream".to_string()),
            checks::hash_header(&sent),
        ];
        let got = self.send_read(Method::POST, &url, &h, data, name).await?;
        let o = json::parse(&got, name)?;
        checks::stored_as_sent(&o, &sent, name)?;
        Ok(o)
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

fn list_page(page: Page) -> ListPage {
    let mut out = ListPage {
        prefixes: page.prefixes,
        next_token: page.next_page_token,
        ..ListPage::default()
    };
    for o in page.items {
        out.objects.push(o.info());
        // The listing asks for each object's metadata: one without any has none, known.
        out.metadata.insert(o.name, o.metadata.unwrap_or_default());
    }
    out
}

#[async_trait]
impl ObjectClient for GcsClient {
    fn key_rules(&self) -> KeyRules {
        KeyRules::GCS
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
    async fn get_range_pieces(
        &self,
        key: &str,
        start: u64,
        cuts: &[u64],
        etag: Option<&str>,
        sink: &mut (dyn FnMut(usize, Bytes) + Send),
    ) -> Result<()> {
        let Some(end) = pieces_end(start, cuts) else {
            return Ok(());
        };
        // The stored bytes, as they are: an object written gzip-encoded is not unpacked
        // (its size is the stored one, and a range of it is that range).
        let r = self.get_answer(key, start, end, etag).await?;
        crate::body::deliver(crate::rest::Answer { r, key }, key, start, cuts, sink).await
    }

    /// Checked against the answer's `x-goog-hash` (the stored bytes' CRC-32C).
    async fn get_whole_pieces(
        &self,
        key: &str,
        cuts: &[u64],
        etag: Option<&str>,
        sink: &mut (dyn FnMut(usize, Bytes) + Send),
    ) -> Result<()> {
        let Some(end) = pieces_end(0, cuts) else {
            return Ok(());
        };
        let r = self.get_answer(key, 0, end, etag).await?;
        let want = checks::of_answer(&r);
        let body = crate::rest::Answer { r, key };
        crate::body::deliver_checked(body, key, cuts, want, sink).await
    }

    async fn list_page(
        &self,
        prefix: &str,
        delimiter: Option<&str>,
        token: Option<String>,
        max_keys: Option<i32>,
    ) -> Result<ListPage> {
        let q = ListQuery {
            prefix,
            delimiter,
            token: token.as_deref(),
            max: max_keys,
            ..ListQuery::default()
        };
        Ok(list_page(self.list_objects(q).await?))
    }

    /// `startOffset` is where the listing starts (the key itself included, so it is left
    /// out here). A common prefix holding `start_after` is listed when a key in it comes
    /// after, which one more request tells: GCS and its emulator differ there.
    async fn list_after(
        &self,
        prefix: &str,
        start_after: &str,
        token: Option<String>,
    ) -> Result<ListPage> {
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

    async fn put(
        &self,
        key: &str,
        body: Bytes,
        metadata: &HashMap<String, String>,
    ) -> Result<PutResult> {
        let o = self.insert(key, body, metadata, key).await?;
        Ok(put_result(&o))
    }

    async fn create_multipart(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
    ) -> Result<String> {
        let id = self.uploads.begin(key, metadata);
        let marker = uploads::marker(key, &id);
        if let Err(e) = self.put_part_object(&marker, Bytes::new()).await {
            self.uploads.end(key, &id);
            return Err(e);
        }
        Ok(id)
    }

    async fn upload_part(
        &self,
        key: &str,
        upload_id: &str,
        part_number: i32,
        body: Bytes,
    ) -> Result<String> {
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

    async fn complete_multipart(
        &self,
        key: &str,
        upload_id: &str,
        parts: Vec<CompletedPart>,
    ) -> Result<PutResult> {
        let Some((metadata, sent)) = self.uploads.get(key, upload_id) else {
            return Err(not_open(key, upload_id));
        };
        let mut sources = Vec::with_capacity(parts.len());
        for p in &parts {
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
    async fn upload_part_copy(
        &self,
        src: Version<'_>,
        key: &str,
        upload_id: &str,
        part_number: i32,
        range: (u64, u64),
    ) -> Result<String> {
        if !self.uploads.is_open(key, upload_id) {
            return Err(not_open(key, upload_id));
        }
        let bytes = (self.get_range(src.key, range.0, range.1, src.etag)).await?;
        self.upload_part(key, upload_id, part_number, bytes).await
    }

    async fn abort_multipart(&self, key: &str, upload_id: &str) -> Result<()> {
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
    async fn replace_metadata(
        &self,
        key: &str,
        metadata: &HashMap<String, String>,
        etag: Option<&str>,
        _size: u64,
    ) -> Result<PutResult> {
        let mut query = format!("fields={}", query_value(OBJECT_FIELDS));
        if let Some(e) = etag {
            let Some(g) = generation_of(e) else {
                return Err(ClientError::Precondition(format!("{key}: version {e}")));
            };
            query.push_str(&format!("&ifGenerationMatch={g}"));
        }
        let url = self.object_url(key, &query);
        let body = serde_json::json!({ "metadata": json::metadata_out(metadata) }).to_string();
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listed_objects_carry_their_metadata_even_when_empty() {
        let page: Page = json::parse(
            br#"{"items":[{"name":"a","size":"1","generation":"2","metadata":{"mode":"1"}},
                {"name":"b","size":"0","generation":"3"}],"prefixes":["d/"],"nextPageToken":"t"}"#,
            "l",
        )
        .unwrap();
        let p = list_page(page);
        assert_eq!(p.objects.len(), 2);
        assert_eq!(p.metadata["a"]["mode"], "1");
        assert!(p.metadata["b"].is_empty());
        assert_eq!(p.next_token.as_deref(), Some("t"));
    }
}
