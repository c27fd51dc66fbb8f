//! From a store URL to a checked client: the S3, GCS or Azure backend behind the one retry
//! layer (the same budget and backoff for every store), its credentials and bucket or
//! container checked within 30 s, and the name the node cache and the journal know the
//! store by.

use std::sync::Arc;
use std::time::Duration;

use anyhow::{anyhow, bail, Result};
use flowfs_client::azure::{self, AzureClient, AzureConfig};
use flowfs_client::gcs::{GcsClient, GcsConfig};
use flowfs_client::metrics::StoreMetrics;
use flowfs_client::retry::{RetryPolicy, Retrying};
use flowfs_client::s3::{S3Client, S3Config};
use flowfs_client::{ClientError, ObjectClient};
use flowfs_fs::FsConfig;

use crate::cli::{MountOptions, Store};

fn azure_config(
    account: &Option<String>,
    container: &str,
    endpoint: &Option<String>,
    opts: &MountOptions,
    metrics: &Arc<StoreMetrics>,
) -> AzureConfig {
    AzureConfig {
        metrics: metrics.clone(),
        container: container.to_string(),
        account: account.clone().or_else(|| opts.azure_account.clone()),
        endpoint_url: opts.endpoint_url.clone().or_else(|| endpoint.clone()),
    }
}

/// The name the node cache and the journal know `store` by: an S3 bucket's own name (as
/// before other stores), `gs://BUCKET` for GCS, `az://ACCOUNT/CONTAINER` for Azure. No
/// S3 bucket name holds `:` or `/`, so two stores never share cached objects.
pub(crate) fn cache_name(store: &Store, opts: &MountOptions) -> Result<String> {
    match store {
        Store::S3 { bucket } => Ok(bucket.clone()),
        Store::Gcs { bucket } => Ok(format!("gs://{bucket}")),
        Store::Azure {
            account,
            container,
            endpoint,
        } => {
            let cfg = azure_config(account, container, endpoint, opts, &StoreMetrics::new());
            let account = azure::account(&cfg).map_err(|e| anyhow!("{e}"))?;
            Ok(format!("az://{account}/{container}"))
        }
    }
}

/// What a store is called in messages, and where it is.
struct Named {
    kind: &'static str,
    what: String,
    endpoint: String,
    credentials_hint: &'static str,
}

/// The backend for `store` and, for the credential check, how to ask it.
async fn backend(
    store: &Store,
    opts: &MountOptions,
    metrics: &Arc<StoreMetrics>,
) -> std::result::Result<(Arc<dyn ObjectClient>, Named, Check), ClientError> {
    if opts.anonymous && !matches!(store, Store::Gcs { .. }) {
        return Err(ClientError::Credentials(format!(
            "--anonymous is for gs:// sources; {} is reached with credentials",
            store.url()
        )));
    }
    match store {
        Store::S3 { bucket } => {
            let s3cfg = S3Config {
                bucket: bucket.clone(),
                endpoint_url: opts.endpoint_url.clone(),
                region: opts.region.clone(),
                metrics: metrics.clone(),
            };
            let endpoint = (opts.endpoint_url.clone())
                .or_else(|| std::env::var("AWS_ENDPOINT_URL").ok())
                .unwrap_or_else(|| "AWS S3".into());
            let s3 = Arc::new(S3Client::new(&s3cfg)?);
            let named = Named {
                kind: "S3",
                what: format!("bucket {bucket}"),
                endpoint,
                credentials_hint: "AWS_ACCESS_KEY_ID, AWS_PROFILE, ...",
            };
            Ok((s3.clone(), named, Check::S3(s3)))
        }
        Store::Gcs { bucket } => {
            let cfg = GcsConfig {
                bucket: bucket.clone(),
                endpoint_url: opts.endpoint_url.clone(),
                anonymous: opts.anonymous,
                metrics: metrics.clone(),
            };
            let gcs = Arc::new(GcsClient::new(&cfg)?);
            let named = Named {
                kind: "GCS",
                what: format!("bucket {bucket}"),
                endpoint: gcs.endpoint(),
                credentials_hint: "GOOGLE_APPLICATION_CREDENTIALS, gcloud, ...",
            };
            Ok((gcs.clone(), named, Check::Gcs(gcs)))
        }
        Store::Azure {
            account,
            container,
            endpoint,
        } => {
            let cfg = azure_config(account, container, endpoint, opts, metrics);
            let az = Arc::new(AzureClient::new(&cfg)?);
            let named = Named {
                kind: "Azure",
                what: format!("container {container}"),
                endpoint: az.endpoint(),
                credentials_hint: "AZURE_STORAGE_CONNECTION_STRING, AZURE_STORAGE_KEY, ...",
            };
            Ok((az.clone(), named, Check::Azure(az)))
        }
    }
}

/// A backend's own credential check.
enum Check {
    S3(Arc<S3Client>),
    Gcs(Arc<GcsClient>),
    Azure(Arc<AzureClient>),
}

impl Check {
    async fn credentials(&self) -> std::result::Result<(), ClientError> {
        match self {
            Check::S3(c) => c.check_credentials().await,
            Check::Gcs(c) => c.check_credentials().await,
            Check::Azure(c) => c.check_credentials().await,
        }
    }
}

/// The client of `store`, once credentials and the bucket are checked (within 30 s).
pub(crate) fn connect(
    rt: &tokio::runtime::Runtime,
    opts: &MountOptions,
    cfg: &FsConfig,
    store: &Store,
) -> Result<Arc<Retrying>> {
    let policy = RetryPolicy {
        budget: Duration::from_secs_f64(opts.retry_budget),
        max_attempts: opts.max_attempts.max(1),
        ..RetryPolicy::default()
    };
    // One set of counts: the backend counts its requests, the retry layer its retries
    // and the bytes it hands over.
    let metrics = StoreMetrics::new();
    let (inner, named, check) = match rt.block_on(backend(store, opts, &metrics)) {
        Ok(b) => b,
        Err(e) => bail!("{}", e.to_string().replace(['\n', '\r'], " ")),
    };
    let client = Arc::new(Retrying::new(inner, policy).with_metrics(metrics));
    // Credentials first: without them the bucket check fails as a request that could
    // not be sent, which says nothing about what to set.
    let checked = rt.block_on(async {
        tokio::time::timeout(Duration::from_secs(30), async {
            check.credentials().await?;
            client.check_bucket(&cfg.prefix).await
        })
        .await
    });
    match checked {
        Err(_) => bail!(
            "no answer from the {} endpoint {} within 30 s",
            named.kind,
            named.endpoint
        ),
        Ok(Err(e)) => bail!("{}", describe(&e, &named)),
        Ok(Ok(())) => {}
    }
    Ok(client)
}

fn describe(e: &ClientError, n: &Named) -> String {
    let one_line = |s: String| s.replace(['\n', '\r'], " ");
    let (what, endpoint) = (&n.what, &n.endpoint);
    one_line(match e {
        ClientError::NoSuchBucket(_) | ClientError::NotFound(_) => {
            format!("{what} does not exist (at {endpoint})")
        }
        ClientError::AccessDenied(m) => format!(
            "access to {what} denied ({m}); check the credentials ({}) and the bucket policy",
            n.credentials_hint
        ),
        ClientError::Unreachable(m) => {
            format!("cannot reach the {} endpoint {endpoint}: {m}", n.kind)
        }
        ClientError::NotS3(m) => format!(
            "the endpoint {endpoint} does not look like an S3 server ({m}); check --endpoint-url or AWS_ENDPOINT_URL"
        ),
        ClientError::NoCredentials | ClientError::Credentials(_) => e.to_string(),
        other => format!("cannot use {what} at {endpoint}: {other}"),
    })
}
