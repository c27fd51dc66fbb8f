//! The Google Cloud Storage backend: the JSON API calls of docs/STORES.md's table, with an
//! OAuth token from reqsign (found as Google's tools find one: credentials.rs), sent by
//! reqwest. Why the JSON API and not the XML one: fake-gcs-server, the emulator the tests
//! run on, refuses XML PUTs and XML multipart uploads (STORES.md), and every write path
//! must run in the tests. Keys go into URLs percent-encoded whole (`/` too), as the JSON
//! API wants: `dir/` and `a//b` stay what they are.
//!
//! This file builds the client and sends a request; the trait's methods are in
//! requests.rs, multipart uploads as composed part objects in uploads.rs, the JSON in
//! json.rs and the answers' errors in errors.rs.

use bytes::Bytes;
use reqsign_core::Signer;
use reqsign_google::{Credential, RequestSigner};

mod checks;
mod credentials;
mod errors;
mod json;
mod listing;
mod parts;
mod requests;
mod uploads;

use crate::percent::{query_value, unreserved};
use crate::rest::Call;
use crate::{ClientError, Result};

/// The OAuth scope every token is asked for: objects read and written, nothing else.
const SCOPE: &str = "https://www.googleapis.com/auth/devstorage.read_write";

/// Which bucket and how to reach it; credentials come from the environment (see
/// credentials.rs), never from here.
#[derive(Debug, Clone, Default)]
pub struct GcsConfig {
    /// The bucket (no `gs://`).
    pub bucket: String,
    /// The endpoint (`--endpoint-url`); else STORAGE_EMULATOR_HOST's, else
    /// `https://storage.googleapis.com`.
    pub endpoint_url: Option<String>,
    /// No credentials: requests go unsigned (a public bucket; `--anonymous`). An
    /// emulator named by STORAGE_EMULATOR_HOST is reached so too, as Google's clients do.
    pub anonymous: bool,
    /// Where each HTTP request sent is counted.
    pub metrics: std::sync::Arc<crate::metrics::StoreMetrics>,
}

/// The GCS backend: Google Cloud Storage and fake-gcs-server.
pub struct GcsClient {
    http: reqwest::Client,
    /// `None`: requests go unsigned.
    signer: Option<Signer<Credential>>,
    endpoint: String,
    bucket: String,
    uploads: uploads::Uploads,
    metrics: std::sync::Arc<crate::metrics::StoreMetrics>,
}

impl GcsClient {
    /// The client for `cfg`, with its endpoint and credential source found; no request.
    pub fn new(cfg: &GcsConfig) -> Result<GcsClient> {
        let env = |k: &str| std::env::var(k).ok();
        let found = credentials::resolve(cfg, &env)?;
        let http = crate::rest::http_client()?;
        let signer = found.signed.then(|| {
            let provider = reqsign_google::DefaultCredentialProvider::new();
            let signing = RequestSigner::new("storage").with_scope(SCOPE);
            Signer::new(crate::rest::signing_context(&http), provider, signing)
        });
        Ok(GcsClient {
            http,
            signer,
            endpoint: found.endpoint,
            bucket: cfg.bucket.clone(),
            uploads: uploads::Uploads::default(),
            metrics: cfg.metrics.clone(),
        })
    }

    /// The endpoint requests go to (for messages; it holds no secret).
    pub fn endpoint(&self) -> String {
        self.endpoint.clone()
    }

    /// Whether a token can be had (a service account's, gcloud's, the metadata
    /// server's); never returns or logs it. Unsigned clients need none.
    pub async fn check_credentials(&self) -> Result<()> {
        let Some(signer) = &self.signer else {
            return Ok(());
        };
        let mut parts = http::Request::get(&self.endpoint)
            .body(())
            .map_err(|e| ClientError::Other(format!("endpoint {}: {e}", self.endpoint)))?
            .into_parts()
            .0;
        signer
            .sign(&mut parts, None)
            .await
            .map_err(|e| ClientError::Credentials(format!("GCS: {e}; {}", credentials::LOOKED_FOR)))
    }

    /// Creates the bucket if it is not there (test set-ups and emulators; a mount never
    /// creates one).
    pub async fn create_bucket(&self) -> Result<()> {
        let url = format!("{}/storage/v1/b?project=flowfs", self.endpoint);
        let body = serde_json::json!({ "name": self.bucket }).to_string();
        let what = format!("create bucket {}", self.bucket);
        let h = [("content-type", "application/json".to_string())];
        let call = Call::new(http::Method::POST, &url, &what).headers(&h);
        match self.send(call.body(Bytes::from(body))).await {
            Ok(_) => Ok(()),
            Err(ClientError::Other(m)) if m.contains(" 409") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The JSON API URL of object `key`, or of the bucket's object list with `key`
    /// empty; `query` is added as it is (already encoded).
    fn object_url(&self, key: &str, query: &str) -> String {
        let mut u = format!("{}/storage/v1/b/{}/o", self.endpoint, self.bucket);
        if !key.is_empty() {
            u.push('/');
            crate::percent::percent_escape(&mut u, key, unreserved);
        }
        if !query.is_empty() {
            u.push('?');
            u.push_str(query);
        }
        u
    }

    /// The URL uploads go to.
    fn upload_url(&self, query: &str) -> String {
        format!(
            "{}/upload/storage/v1/b/{}/o?{query}",
            self.endpoint, self.bucket
        )
    }

    /// Signs (unless anonymous) and sends one request; an answer that is not a success
    /// becomes its `ClientError` (errors.rs), `what` naming the request and its key.
    async fn send(&self, call: Call<'_>) -> Result<reqwest::Response> {
        let op = api_name(&call.method, call.url);
        let mut head = call.head()?;
        if let Some(signer) = &self.signer {
            crate::rest::sign(signer, &mut head, "GCS").await?;
        }
        let what = call.what;
        let resp = call.execute(&self.http, &self.metrics, head, op).await?;
        errors::check(resp, what).await
    }

    /// A request with a JSON body (or none) whose JSON answer is read whole.
    async fn call(
        &self,
        method: http::Method,
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
        self.send_read(Call::new(method, url, what).headers(&h).body(body))
            .await
    }

    /// `send`, and the answer's body read whole.
    async fn send_read(&self, call: Call<'_>) -> Result<Bytes> {
        let what = call.what;
        let r = self.send(call).await?;
        r.bytes()
            .await
            .map_err(|e| crate::rest::body_error(what, e))
    }

    /// An object resource from a request that answers with one.
    async fn object_call(
        &self,
        method: http::Method,
        url: &str,
        body: Option<String>,
        what: &str,
    ) -> Result<json::Object> {
        let got = self.call(method, url, body, what).await?;
        json::parse(&got, what)
    }
}

/// The JSON API's name of a request, from its method and URL, for the request counts:
/// `objects.get` (a read of the bytes, `alt=media`), `objects.getMetadata` (the same
/// method without `alt=media`), `objects.list`, `objects.insert`, `objects.compose`,
/// `objects.rewrite`, `objects.update`, `objects.delete`, `buckets.get`, `buckets.insert`.
fn api_name(method: &http::Method, url: &str) -> &'static str {
    use http::Method;
    let (path, query) = url.split_once('?').unwrap_or((url, ""));
    if path.contains("/upload/storage/v1/b/") {
        return "objects.insert";
    }
    let Some((_, rest)) = path.split_once("/storage/v1/b") else {
        return "other";
    };
    let segs: Vec<&str> = rest.trim_start_matches('/').split('/').collect();
    let media = query.split('&').any(|q| q == "alt=media");
    match (method, segs.as_slice()) {
        (&Method::POST, [""]) => "buckets.insert",
        (&Method::GET, [_]) => "buckets.get",
        (&Method::GET, [_, "o"]) => "objects.list",
        (&Method::GET, [_, "o", _]) if media => "objects.get",
        (&Method::GET, [_, "o", _]) => "objects.getMetadata",
        (&Method::PUT | &Method::PATCH, [_, "o", _]) => "objects.update",
        (&Method::DELETE, [_, "o", _]) => "objects.delete",
        (&Method::POST, [_, "o", _, "compose"]) => "objects.compose",
        (&Method::POST, [_, "o", _, "rewriteTo", ..]) => "objects.rewrite",
        _ => "other",
    }
}

/// A generation as flowfs's ETag: quoted, as S3's are.
fn etag_of(generation: &str) -> String {
    format!("\"{generation}\"")
}

/// The generation an ETag names, if it is one: digits, not 0 (no version has it, and
/// fake-gcs-server reads `generation=0` as "the newest").
fn generation_of(etag: &str) -> Option<&str> {
    let g = etag.trim_matches('"');
    let digits = !g.is_empty() && g.bytes().all(|b| b.is_ascii_digit());
    (digits && g.bytes().any(|b| b != b'0')).then_some(g)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn client() -> GcsClient {
        GcsClient {
            http: crate::rest::http_client().unwrap(),
            signer: None,
            endpoint: "http://h".into(),
            bucket: "b".into(),
            uploads: uploads::Uploads::default(),
            metrics: Default::default(),
        }
    }

    #[test]
    fn requests_are_named_as_the_json_api_names_them() {
        use http::Method;
        let c = client();
        let name = |m: Method, url: &str| api_name(&m, url);
        let obj = c.object_url("a/b", "alt=media&generation=3");
        assert_eq!(name(Method::GET, &obj), "objects.get");
        assert_eq!(
            name(Method::GET, &c.object_url("a/b", "")),
            "objects.getMetadata"
        );
        assert_eq!(
            name(Method::GET, &c.object_url("", "prefix=x")),
            "objects.list"
        );
        let up = c.upload_url("uploadType=multipart");
        assert_eq!(name(Method::POST, &up), "objects.insert");
        let compose = format!("{}/compose", c.object_url("k", ""));
        assert_eq!(name(Method::POST, &compose), "objects.compose");
        let rewrite = format!("{}/rewriteTo/b/b/o/k2", c.object_url("k", ""));
        assert_eq!(name(Method::POST, &rewrite), "objects.rewrite");
        assert_eq!(name(Method::PUT, &c.object_url("k", "")), "objects.update");
        assert_eq!(
            name(Method::DELETE, &c.object_url("k", "")),
            "objects.delete"
        );
        assert_eq!(name(Method::GET, "http://h/storage/v1/b/b"), "buckets.get");
        assert_eq!(
            name(Method::POST, "http://h/storage/v1/b?project=p"),
            "buckets.insert"
        );
    }

    #[test]
    fn keys_are_encoded_whole_into_urls() {
        let c = client();
        assert_eq!(c.object_url("dir/", ""), "http://h/storage/v1/b/b/o/dir%2F");
        assert_eq!(
            c.object_url("a//b c+%", "alt=media"),
            "http://h/storage/v1/b/b/o/a%2F%2Fb%20c%2B%25?alt=media"
        );
        assert_eq!(
            c.object_url("", "prefix=x"),
            "http://h/storage/v1/b/b/o?prefix=x"
        );
        assert_eq!(
            c.upload_url("uploadType=multipart"),
            "http://h/upload/storage/v1/b/b/o?uploadType=multipart"
        );
    }

    #[test]
    fn etags_are_quoted_generations() {
        assert_eq!(etag_of("17"), "\"17\"");
        assert_eq!(generation_of("\"17\""), Some("17"));
        assert_eq!(generation_of("\"0123456789abcdef\""), None);
        assert_eq!(generation_of("\"\""), None);
        assert_eq!(generation_of("\"0\""), None);
    }
}
