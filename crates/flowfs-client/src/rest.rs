//! What the two REST backends (Azure Blob, GCS) share over reqwest: the HTTP client and
//! reqsign's context, a request's head and its sending, the errors of a request that got
//! no answer or a body that broke off (never with the request's URL: a SAS token is its
//! query), a GET's answer read frame by frame, and the uploads they keep themselves
//! (neither store has S3's upload ids: flowfs's are `SECS-NONCE`, when the upload began
//! and 64 random bits).

use std::collections::HashMap;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use parking_lot::Mutex;

use crate::metrics::{Outcome, StoreMetrics};
use crate::{ClientError, Result};

/// The HTTP client of a REST backend: 5 s to connect, 60 s without a byte of an answer.
pub(crate) fn http_client() -> Result<reqwest::Client> {
    crate::tls::ready();
    reqwest::Client::builder()
        .connect_timeout(Duration::from_secs(5))
        .read_timeout(Duration::from_secs(60))
        .build()
        .map_err(|e| ClientError::Other(format!("cannot build the HTTP client: {e}")))
}

/// What reqsign's credential sources need to fetch a token, read a token file or run a
/// CLI (`az`, `gcloud`), over the backend's own HTTP client.
pub(crate) fn signing_context(http: &reqwest::Client) -> reqsign_core::Context {
    reqsign_core::Context::new()
        .with_file_read(reqsign_file_read_tokio::TokioFileRead)
        .with_http_send(reqsign_http_send_reqwest::ReqwestHttpSend::new(
            http.clone(),
        ))
        .with_command_execute(reqsign_command_execute_tokio::TokioCommandExecute)
        .with_env(reqsign_core::OsEnv)
}

/// One request of a REST backend: its method, URL, headers and body; `what` names it (the
/// request and its key) in flowfs's messages.
pub(crate) struct Call<'a> {
    pub method: http::Method,
    pub url: &'a str,
    pub headers: &'a [(&'a str, String)],
    pub body: Bytes,
    pub what: &'a str,
}

impl<'a> Call<'a> {
    /// A request of `method` to `url`, without headers or body.
    pub fn new(method: http::Method, url: &'a str, what: &'a str) -> Call<'a> {
        Call {
            method,
            url,
            headers: &[],
            body: Bytes::new(),
            what,
        }
    }

    /// With `headers`.
    pub fn headers(self, headers: &'a [(&'a str, String)]) -> Call<'a> {
        Call { headers, ..self }
    }

    /// With `body`.
    pub fn body(self, body: Bytes) -> Call<'a> {
        Call { body, ..self }
    }

    /// Its head, to be signed; it says its length when it has a body, or is a PUT or a
    /// POST (which a server may refuse without one).
    pub fn head(&self) -> Result<http::request::Parts> {
        let with_length =
            !self.body.is_empty() || matches!(self.method, http::Method::PUT | http::Method::POST);
        let mut b = http::Request::builder()
            .method(self.method.clone())
            .uri(self.url);
        for (k, v) in self.headers {
            b = b.header(*k, v);
        }
        if with_length {
            b = b.header(http::header::CONTENT_LENGTH, self.body.len());
        }
        let (parts, ()) = b
            .body(())
            .map_err(|e| ClientError::Other(format!("{}: {e}", self.what)))?
            .into_parts();
        Ok(parts)
    }

    /// Sends it with `head` (its head, signed) and counts it in `metrics` as `op` (the
    /// store's name of the request); a request that got no answer is its error.
    pub async fn execute(
        self,
        http: &reqwest::Client,
        metrics: &std::sync::Arc<StoreMetrics>,
        head: http::request::Parts,
        op: &'static str,
    ) -> Result<reqwest::Response> {
        let what = self.what;
        let req = reqwest::Request::try_from(http::Request::from_parts(head, self.body))
            .map_err(|e| ClientError::Other(format!("{what}: {e}")))?;
        let counted = metrics.sending(op);
        let r = http.execute(req).await;
        let status = r.as_ref().ok().map(|r| r.status().as_u16());
        let took = counted.elapsed();
        counted.done(Outcome::of_status(status), took);
        r.map_err(|e| send_error(what, e))
    }
}

/// Signs `head` with `signer`; credentials that fail are `Credentials` (`store` names
/// the store).
pub(crate) async fn sign<K: reqsign_core::SigningCredential>(
    signer: &reqsign_core::Signer<K>,
    head: &mut http::request::Parts,
    store: &str,
) -> Result<()> {
    (signer.sign(head, None).await).map_err(|e| ClientError::Credentials(format!("{store}: {e}")))
}

/// A request that got no answer.
pub(crate) fn send_error(what: &str, e: reqwest::Error) -> ClientError {
    let e = e.without_url();
    // reqwest's Display hides the cause (connection refused, reset): name it.
    let mut msg = format!("{what}: {e}");
    let mut src = std::error::Error::source(&e);
    while let Some(s) = src {
        msg.push_str(&format!(": {s}"));
        src = s.source();
    }
    if e.is_connect() || e.is_timeout() {
        ClientError::Unreachable(msg)
    } else {
        ClientError::Transient(msg)
    }
}

/// A body that broke off, as a retryable error.
pub(crate) fn body_error(what: &str, e: reqwest::Error) -> ClientError {
    ClientError::Transient(format!("{what}: body: {}", e.without_url()))
}

/// A header of an answer, or `""`.
pub(crate) fn header<'a>(headers: &'a http::HeaderMap, name: &str) -> &'a str {
    (headers.get(name))
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
}

/// An answer's body as text; one that broke off is a retryable error.
pub(crate) async fn text(r: reqwest::Response, what: &str) -> Result<String> {
    r.text().await.map_err(|e| body_error(what, e))
}

/// A GET's answer read frame by frame (body.rs hands it over in pieces).
pub(crate) struct Answer<'a> {
    pub r: reqwest::Response,
    pub key: &'a str,
}

impl crate::body::Frames for Answer<'_> {
    async fn next_frame(&mut self) -> Result<Option<Bytes>> {
        (self.r.chunk().await).map_err(|e| body_error(self.key, e))
    }
}

/// A new upload id: `SECS-NONCE`, 27 bytes.
pub(crate) fn new_upload_id() -> String {
    let secs = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default()
        .as_secs();
    format!("{secs:010}-{:016x}", rand::random::<u64>())
}

/// Whether `id` has the form of an upload id (an id from elsewhere is never sent on).
pub(crate) fn valid_upload_id(id: &str) -> bool {
    let b = id.as_bytes();
    b.len() == 27
        && b[10] == b'-'
        && b[..10].iter().all(u8::is_ascii_digit)
        && b[11..].iter().all(u8::is_ascii_hexdigit)
}

/// The uploads a REST backend began and has not ended: each one's key, the metadata
/// given at its creation (written at its completion) and the backend's own state `S`.
/// An upload survives only in the process that began it, as flowfs's recovery expects.
pub(crate) struct OpenUploads<S> {
    open: Mutex<HashMap<String, OpenUpload<S>>>,
}

struct OpenUpload<S> {
    key: String,
    metadata: HashMap<String, String>,
    state: S,
}

impl<S> Default for OpenUploads<S> {
    fn default() -> Self {
        OpenUploads {
            open: Mutex::new(HashMap::new()),
        }
    }
}

impl<S: Default + Clone> OpenUploads<S> {
    /// A new upload of `key`: its id.
    pub(crate) fn begin(&self, key: &str, metadata: &HashMap<String, String>) -> String {
        let id = new_upload_id();
        let open = OpenUpload {
            key: key.to_string(),
            metadata: metadata.clone(),
            state: S::default(),
        };
        self.open.lock().insert(id.clone(), open);
        id
    }

    /// Whether `id` is an upload of `key` this client began and has not ended.
    pub(crate) fn is_open(&self, key: &str, id: &str) -> bool {
        self.open.lock().get(id).is_some_and(|o| o.key == key)
    }

    /// Changes the state of open upload `id` of `key`; false if it is not open.
    pub(crate) fn update(&self, key: &str, id: &str, f: impl FnOnce(&mut S)) -> bool {
        let mut open = self.open.lock();
        match open.get_mut(id).filter(|o| o.key == key) {
            Some(o) => {
                f(&mut o.state);
                true
            }
            None => false,
        }
    }

    /// The metadata and state of open upload `id` of `key`.
    pub(crate) fn get(&self, key: &str, id: &str) -> Option<(HashMap<String, String>, S)> {
        let open = self.open.lock();
        open.get(id)
            .filter(|o| o.key == key)
            .map(|o| (o.metadata.clone(), o.state.clone()))
    }

    /// Ends upload `id` of `key`; whether it was open.
    pub(crate) fn end(&self, key: &str, id: &str) -> bool {
        let mut open = self.open.lock();
        match open.get(id) {
            Some(o) if o.key == key => open.remove(id).is_some(),
            _ => false,
        }
    }
}

/// When upload `id` began (by this clock).
pub(crate) fn upload_began(id: &str) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(id.get(..10).and_then(|s| s.parse().ok()).unwrap_or(0))
}

/// A test's environment of the credential variables: `pairs`, and nothing else.
#[cfg(test)]
pub(crate) fn env_of(
    pairs: &'static [(&'static str, &'static str)],
) -> impl Fn(&str) -> Option<String> {
    move |k| {
        pairs
            .iter()
            .find(|(n, _)| *n == k)
            .map(|(_, v)| v.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn upload_ids_have_one_form() {
        let id = new_upload_id();
        assert!(valid_upload_id(&id), "{id}");
        assert!(!valid_upload_id(&format!("{id}x")) && !valid_upload_id("0000000001-xyz"));
        let age = SystemTime::now().duration_since(upload_began(&id)).unwrap();
        assert!(age.as_secs() < 5);
    }

    #[test]
    fn an_open_upload_is_its_keys_until_it_ends() {
        let ups: OpenUploads<Vec<i32>> = OpenUploads::default();
        let id = ups.begin("k", &HashMap::from([("mode".into(), "1".into())]));
        assert!(ups.is_open("k", &id) && !ups.is_open("k2", &id));
        assert!(ups.update("k", &id, |s| s.push(1)) && !ups.update("k2", &id, |s| s.push(2)));
        let (meta, state) = ups.get("k", &id).unwrap();
        assert_eq!((meta["mode"].as_str(), state), ("1", vec![1]));
        assert!(!ups.end("k2", &id), "another key's");
        assert!(ups.end("k", &id) && !ups.end("k", &id), "ended once");
        assert!(!ups.update("k", &id, |s| s.push(3)) && ups.get("k", &id).is_none());
    }

    #[tokio::test]
    async fn a_failed_request_says_nothing_of_its_url() {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .map(|a| a.port())
            .unwrap();
        let url = format!("http://127.0.0.1:{port}/acct/c/k?sv=2025&sig=SECRETSIG");
        let e = http_client().unwrap().get(&url).send().await.unwrap_err();
        let msg = send_error("GET k", e).to_string();
        assert!(!msg.contains("SECRETSIG") && !msg.contains("sig="), "{msg}");
        assert!(msg.contains("GET k"), "{msg}");
    }
}
