//! A source that names an archive object (`s3://BUCKET/refs.tar.gz`): the mount serves
//! its members, read-only, through `flowfs_archive::ArchiveClient`; any other source is
//! served as the bucket prefix it names, with `--archives` through
//! `flowfs_archive::ArchiveViews` (each archive also a read-only `NAME.d/`).

use std::sync::Arc;

use anyhow::{Context, Result};
use flowfs_archive::{sniff, ArchiveClient, ArchiveViews, SNIFF_LEN};
use flowfs_client::{ClientError, List, ObjectClient, Version};
use flowfs_fs::FsConfig;

/// Names that say "archive": such an object is mounted as one, or refused with why.
const NAMES: [&str; 3] = [".tar", ".tar.gz", ".tgz"];

/// The store the file system serves: `client` itself, or the members of the archive
/// the source names. An archive is an object at exactly the source's key named
/// `*.tar`, `*.tar.gz` or `*.tgz` (its bytes must then say tar or gzip), or any other
/// object whose first bytes do, unless keys below it make it a directory, as the mount
/// itself would show it.
/// `views`: a prefix is served with a view of each archive in it (`--archives`).
pub(crate) fn serve_source(
    rt: &tokio::runtime::Runtime,
    client: Arc<dyn ObjectClient>,
    cfg: &mut FsConfig,
    views: bool,
) -> Result<Arc<dyn ObjectClient>> {
    let prefix = |client: Arc<dyn ObjectClient>, cfg: &FsConfig| -> Arc<dyn ObjectClient> {
        if views {
            Arc::new(ArchiveViews::new(client, &cfg.bucket, &cfg.cache_dir))
        } else {
            client
        }
    };
    let key = cfg.prefix.trim_end_matches('/').to_string();
    if key.is_empty() {
        return Ok(prefix(client, cfg));
    }
    let named = NAMES.iter().any(|n| key.ends_with(n));
    let meta = match rt.block_on(client.head(&key)) {
        Ok(m) => m,
        Err(ClientError::NotFound(_)) if !named => return Ok(prefix(client, cfg)),
        Err(e) => return Err(e).with_context(|| url_of(&cfg.bucket, &key)),
    };
    if !named {
        let version = Version::new(&key, Some(&meta.info.etag));
        let first = rt
            .block_on(client.get_range(version.range(0, meta.info.size.min(SNIFF_LEN))))
            .with_context(|| url_of(&cfg.bucket, &key))?;
        let dir = format!("{key}/");
        let below = rt.block_on(client.list_page(List::dir(&dir).max_keys(1)))?;
        if sniff(&first).is_none() || !below.objects.is_empty() || !below.prefixes.is_empty() {
            return Ok(prefix(client, cfg));
        }
    }
    let ident = format!("{}/{key}", cfg.bucket);
    let archive = rt
        .block_on(ArchiveClient::open_at(
            client,
            &meta.info,
            &ident,
            &cfg.cache_dir,
        ))
        .with_context(|| format!("archive {}", url_of(&cfg.bucket, &key)))?;
    tracing::info!(
        key,
        members = archive.index().members.len(),
        "serving the members of an archive, read-only"
    );
    cfg.prefix = String::new();
    cfg.read_only = true;
    Ok(Arc::new(archive))
}

/// An object's URL from the store's cache name (an S3 bucket's is its bare name; other
/// stores' are URLs already: stores.rs).
fn url_of(store: &str, key: &str) -> String {
    match store.contains("://") {
        true => format!("{store}/{key}"),
        false => format!("s3://{store}/{key}"),
    }
}
