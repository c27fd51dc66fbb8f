//! The Azure Blob backend: the REST calls of docs/STORES.md's table, signed by reqsign
//! (Shared Key, SAS or a Microsoft Entra token, found as Azure's tools find them:
//! credentials.rs) and sent by reqwest. Keys go into URLs percent-encoded as they are:
//! `dir/` and `a//b` stay what they are (object_store would rewrite both; STORES.md).
//!
//! This file builds the client and sends a signed request; the trait's methods are in
//! requests.rs, multipart uploads as staged blocks in uploads.rs, the XML in xml.rs and
//! the answers' errors in errors.rs.

use std::collections::HashMap;

use reqsign_azure_storage::{Credential, RequestSigner};
use reqsign_core::Signer;

mod credentials;
mod errors;
mod requests;
mod uploads;
mod xml;

use crate::percent::{query_value, unreserved_or_slash};
use crate::rest::Call;
use crate::{ClientError, Result};

/// The REST API version every request asks for (Azurite 3.35 serves it).
const API_VERSION: &str = "2025-01-05";
/// User metadata headers.
const META: &str = "x-ms-meta-";

/// Which container and how to reach it; credentials come from the environment (see
/// credentials.rs), never from here.
#[derive(Debug, Clone)]
pub struct AzureConfig {
    /// The container (no `az://`).
    pub container: String,
    /// The storage account (`--azure-account`); else AZURE_STORAGE_ACCOUNT, the
    /// connection string or the endpoint's host name.
    pub account: Option<String>,
    /// The blob endpoint (`--endpoint-url`); else the connection string's, else
    /// `https://ACCOUNT.blob.core.windows.net`.
    pub endpoint_url: Option<String>,
    /// Where each HTTP request sent is counted.
    pub metrics: std::sync::Arc<crate::metrics::StoreMetrics>,
}

/// The Azure Blob backend: Azure Storage accounts and Azurite.
pub struct AzureClient {
    http: reqwest::Client,
    signer: Signer<Credential>,
    /// `{endpoint}/{container}`: a blob's URL is this, `/` and its encoded name.
    base: String,
    container: String,
    uploads: uploads::Uploads,
    metrics: std::sync::Arc<crate::metrics::StoreMetrics>,
}

/// The storage account `cfg` names, found as the client finds it (the account, the
/// connection string, the endpoint's host): what the node cache knows the container by.
pub fn account(cfg: &AzureConfig) -> Result<String> {
    let env = |k: &str| std::env::var(k).ok();
    let found = credentials::resolve(cfg.account.as_deref(), cfg.endpoint_url.as_deref(), &env)?;
    Ok(found.account)
}

impl AzureClient {
    /// The client for `cfg`, with its endpoint and credential source found; no request.
    pub fn new(cfg: &AzureConfig) -> Result<AzureClient> {
        let env = |k: &str| std::env::var(k).ok();
        let found =
            credentials::resolve(cfg.account.as_deref(), cfg.endpoint_url.as_deref(), &env)?;
        let http = crate::rest::http_client()?;
        let ctx = crate::rest::signing_context(&http);
        let signer = Signer::new(ctx, found.provider(), RequestSigner::new());
        Ok(AzureClient {
            http,
            signer,
            base: format!("{}/{}", found.endpoint, cfg.container),
            container: cfg.container.clone(),
            uploads: uploads::Uploads::default(),
            metrics: cfg.metrics.clone(),
        })
    }

    /// The blob endpoint requests go to (for messages; it holds no secret: a SAS token is
    /// never part of it).
    pub fn endpoint(&self) -> String {
        let cut = self.base.len() - self.container.len() - 1;
        self.base[..cut].to_string()
    }

    /// Whether a credential can be had (a key, a token from Entra ID); never returns or
    /// logs it.
    pub async fn check_credentials(&self) -> Result<()> {
        let mut parts = http::Request::get(&self.base)
            .body(())
            .map_err(|e| ClientError::Other(format!("endpoint {}: {e}", self.base)))?
            .into_parts()
            .0;
        self.signer.sign(&mut parts, None).await.map_err(|e| {
            ClientError::Credentials(format!("Azure: {e}; {}", credentials::LOOKED_FOR))
        })
    }

    /// Creates the container if it is not there (test set-ups and emulators; a mount
    /// never creates one).
    pub async fn create_container(&self) -> Result<()> {
        let url = self.url("", "restype=container");
        let what = format!("create container {}", self.container);
        match self.send(Call::new(http::Method::PUT, &url, &what)).await {
            Ok(_) => Ok(()),
            Err(ClientError::Other(m)) if m.contains("ContainerAlreadyExists") => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// The URL of blob `key`, or of the container with `key` empty; `query` is added as
    /// it is (already encoded).
    fn url(&self, key: &str, query: &str) -> String {
        let mut u = String::with_capacity(self.base.len() + key.len() * 3 + query.len() + 2);
        u.push_str(&self.base);
        if !key.is_empty() {
            u.push('/');
            crate::percent::percent_escape(&mut u, key, unreserved_or_slash);
        }
        if !query.is_empty() {
            u.push('?');
            u.push_str(query);
        }
        u
    }

    /// Signs and sends one request; an answer that is not a success becomes its
    /// `ClientError` (errors.rs), `what` naming the request and its key there.
    async fn send(&self, call: Call<'_>) -> Result<reqwest::Response> {
        let op = api_name(&call.method, call.url, call.headers);
        let mut head = call.head()?;
        let version = http::HeaderValue::from_static(API_VERSION);
        head.headers.insert("x-ms-version", version);
        crate::rest::sign(&self.signer, &mut head, "Azure").await?;
        let what = call.what;
        let resp = call.execute(&self.http, &self.metrics, head, op).await?;
        errors::check(resp, what, &self.container).await
    }
}

/// The Blob service's name of a request (its REST operation, `GetBlob`, `PutBlock`, ...),
/// from its method, URL and headers, for the request counts.
fn api_name(method: &http::Method, url: &str, headers: &[(&str, String)]) -> &'static str {
    use http::Method;
    let query = url.split_once('?').map_or("", |(_, q)| q);
    let has = |p: &str| query.split('&').any(|q| q == p);
    let comp = query
        .split('&')
        .find_map(|q| q.strip_prefix("comp="))
        .unwrap_or("");
    let copy = headers.iter().any(|(k, _)| *k == "x-ms-copy-source");
    if has("restype=container") {
        return match (method, comp) {
            (&Method::GET, "list") => "ListBlobs",
            (&Method::PUT, "") => "CreateContainer",
            _ => "GetContainerProperties",
        };
    }
    match (method, comp) {
        (&Method::GET, "blocklist") => "GetBlockList",
        (&Method::GET, _) => "GetBlob",
        (&Method::HEAD, _) => "GetBlobProperties",
        (&Method::DELETE, _) => "DeleteBlob",
        (&Method::PUT, "block") => "PutBlock",
        (&Method::PUT, "blocklist") => "PutBlockList",
        (&Method::PUT, "metadata") => "SetBlobMetadata",
        (&Method::PUT, "") if copy => "CopyBlob",
        (&Method::PUT, "") => "PutBlob",
        _ => "other",
    }
}

/// An ETag in the quoted form a HEAD gives (a listing leaves the quotes off).
fn quoted(etag: &str) -> String {
    if etag.is_empty() || etag.starts_with('"') {
        etag.to_string()
    } else {
        format!("\"{etag}\"")
    }
}

/// A metadata name as Azure takes it: a C# identifier, so flowfs's `-` is written `__`
/// (`flowfs-symlink` is `flowfs__symlink`). Names come back lower-cased, as S3's do.
fn meta_name_out(name: &str) -> String {
    name.replace('-', "__")
}

fn meta_name_in(name: &str) -> String {
    name.to_ascii_lowercase().replace("__", "-")
}

/// `x-ms-meta-*` headers for `metadata`.
fn meta_headers(metadata: &HashMap<String, String>) -> Vec<(String, String)> {
    metadata
        .iter()
        .map(|(k, v)| (format!("{META}{}", meta_name_out(k)), v.clone()))
        .collect()
}

/// The user metadata of an answer's headers.
fn meta_of(headers: &http::HeaderMap) -> HashMap<String, String> {
    headers
        .iter()
        .filter_map(|(k, v)| {
            let name = k.as_str().strip_prefix(META)?;
            Some((meta_name_in(name), v.to_str().ok()?.to_string()))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_names_round_trip() {
        for n in ["mode", "flowfs-symlink", "mtime"] {
            assert_eq!(meta_name_in(&meta_name_out(n)), n);
        }
        assert_eq!(meta_name_out("flowfs-symlink"), "flowfs__symlink");
        assert_eq!(meta_name_in("Hdi_IsFolder"), "hdi_isfolder");
    }

    #[test]
    fn requests_are_named_as_the_blob_service_names_them() {
        use http::Method;
        let name = |m: Method, url: &str, h: &[(&str, String)]| api_name(&m, url, h);
        let blob = "http://h/acct/c/a/b";
        assert_eq!(name(Method::GET, blob, &[]), "GetBlob");
        assert_eq!(name(Method::HEAD, blob, &[]), "GetBlobProperties");
        assert_eq!(name(Method::PUT, blob, &[]), "PutBlob");
        let copy = [("x-ms-copy-source", "http://h/acct/c/x".to_string())];
        assert_eq!(name(Method::PUT, blob, &copy), "CopyBlob");
        assert_eq!(
            name(Method::PUT, &format!("{blob}?comp=block&blockid=x"), &[]),
            "PutBlock"
        );
        assert_eq!(
            name(Method::PUT, &format!("{blob}?comp=blocklist"), &[]),
            "PutBlockList"
        );
        let list = "http://h/acct/c/a?comp=blocklist&blocklisttype=uncommitted";
        assert_eq!(name(Method::GET, list, &[]), "GetBlockList");
        assert_eq!(
            name(Method::PUT, &format!("{blob}?comp=metadata"), &[]),
            "SetBlobMetadata"
        );
        assert_eq!(name(Method::DELETE, blob, &[]), "DeleteBlob");
        let blobs = "http://h/acct/c?restype=container&comp=list&include=metadata";
        assert_eq!(name(Method::GET, blobs, &[]), "ListBlobs");
        assert_eq!(
            name(Method::PUT, "http://h/acct/c?restype=container", &[]),
            "CreateContainer"
        );
    }

    #[test]
    fn keys_are_encoded_into_urls_as_they_are() {
        let c = AzureClient {
            http: crate::rest::http_client().unwrap(),
            signer: Signer::new(
                reqsign_core::Context::new(),
                credentials::resolve(Some("a"), None, &|k| {
                    (k == "AZURE_STORAGE_KEY").then(|| "a2V5".into())
                })
                .unwrap()
                .provider(),
                RequestSigner::new(),
            ),
            base: "http://h/acct/c".into(),
            container: "c".into(),
            uploads: uploads::Uploads::default(),
            metrics: Default::default(),
        };
        assert_eq!(c.url("dir/", ""), "http://h/acct/c/dir/");
        assert_eq!(
            c.url("a//b c+%", "comp=x"),
            "http://h/acct/c/a//b%20c%2B%25?comp=x"
        );
        assert_eq!(
            c.url("", "restype=container"),
            "http://h/acct/c?restype=container"
        );
        assert_eq!(query_value("a/b=+"), "a%2Fb%3D%2B");
    }
}
