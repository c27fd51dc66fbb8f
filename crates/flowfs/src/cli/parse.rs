//! The parsers of option values that clap's types do not cover: sizes (`8M`, `10%` of a
//! disk), endpoint URLs and store URLs (`s3://`, `az://`). Each returns the message to show, naming the
//! form it wants.

/// A custom endpoint: `http(s)://HOST[:PORT][/PATH]`. Checked before anything else, so a
/// typo is named as such rather than surfacing as a request that could not be sent. The
/// URL is not echoed: it could carry credentials (`user:secret@host`).
pub fn parse_endpoint(s: &str) -> Result<(), String> {
    let bad = |why: &str| {
        Err(format!(
            "malformed endpoint URL: {why} (expected e.g. https://s3.example.org or http://127.0.0.1:8333)"
        ))
    };
    let Some(rest) = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"))
    else {
        return bad("it must start with http:// or https://");
    };
    if s.chars().any(|c| c.is_whitespace() || c.is_control()) {
        return bad("it contains spaces or control characters");
    }
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    if authority.contains('@') {
        return bad("credentials do not belong in the URL; use the AWS credential chain");
    }
    let (host, port) = match authority.strip_prefix('[') {
        // [IPv6]:port
        Some(v6) => match v6.split_once(']') {
            Some((h, p)) => (h, p.strip_prefix(':')),
            None => return bad("an IPv6 address without its closing ]"),
        },
        None => match authority.rsplit_once(':') {
            Some((h, p)) => (h, Some(p)),
            None => (authority, None),
        },
    };
    let host_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '.' | '_' | ':');
    if host.is_empty() || !host.chars().all(host_ok) {
        return bad("no valid host name");
    }
    if port.is_some_and(|p| p.parse::<u16>().is_err()) {
        return bad("the port is not a number from 0 to 65535");
    }
    Ok(())
}

/// `512K`, `8M`, `10G`, `1T` or plain bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("invalid size {s:?} (use e.g. 512M or 20G)"))?;
    let mult: u64 = match unit
        .trim()
        .to_ascii_uppercase()
        .trim_end_matches("IB")
        .trim_end_matches('B')
    {
        "" => 1,
        "K" => 1 << 10,
        "M" => 1 << 20,
        "G" => 1 << 30,
        "T" => 1 << 40,
        _ => return Err(format!("invalid size unit in {s:?} (use K, M, G or T)")),
    };
    Ok((n * mult as f64) as u64)
}

/// `--cache-min-free`: bytes, given a file system of `disk` bytes.
pub fn parse_min_free(s: &str, disk: u64) -> Result<u64, String> {
    match s.trim().strip_suffix('%') {
        Some(pct) => {
            let p: f64 = pct
                .trim()
                .parse()
                .map_err(|_| format!("invalid percentage {s:?} (use e.g. 10%)"))?;
            if !(0.0..=90.0).contains(&p) {
                return Err(format!("{s:?} is not between 0% and 90%"));
            }
            Ok((disk as f64 * p / 100.0) as u64)
        }
        None => parse_size(s),
    }
}

/// The store a URL names: an S3 bucket or an Azure Blob container.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Store {
    /// `s3://BUCKET`
    S3 { bucket: String },
    /// `gs://BUCKET`
    Gcs { bucket: String },
    /// `az://CONTAINER` (the account from `--azure-account`, AZURE_STORAGE_ACCOUNT or the
    /// connection string), or `https://ACCOUNT.blob.core.windows.net/CONTAINER`.
    Azure {
        account: Option<String>,
        container: String,
        /// The `https://HOST` of a URL that named it.
        endpoint: Option<String>,
    },
}

impl Store {
    /// The URL it was named by, without a key (for messages).
    pub fn url(&self) -> String {
        match self {
            Store::S3 { bucket } => format!("s3://{bucket}"),
            Store::Gcs { bucket } => format!("gs://{bucket}"),
            Store::Azure { container, .. } => format!("az://{container}"),
        }
    }
}

/// The URL forms, for messages.
const FORMS: &str =
    "s3://BUCKET, gs://BUCKET, az://CONTAINER or https://ACCOUNT.blob.core.windows.net/CONTAINER";

/// A store URL into its store and the rest of its path (as written, no leading `/`).
fn parse_url(s: &str) -> Result<(Store, String), String> {
    let (store, rest) = if let Some(rest) = s.strip_prefix("s3://") {
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        let store = Store::S3 {
            bucket: bucket.to_string(),
        };
        (store, path)
    } else if let Some(rest) = s.strip_prefix("gs://") {
        let (bucket, path) = rest.split_once('/').unwrap_or((rest, ""));
        let store = Store::Gcs {
            bucket: bucket.to_string(),
        };
        (store, path)
    } else if let Some(rest) = s.strip_prefix("az://") {
        let (container, path) = rest.split_once('/').unwrap_or((rest, ""));
        let store = Store::Azure {
            account: None,
            container: container.to_string(),
            endpoint: None,
        };
        (store, path)
    } else if let Some((host, rest)) = s
        .strip_prefix("https://")
        .and_then(|r| r.split_once('/'))
        .filter(|(h, _)| h.contains(".blob."))
    {
        let (container, path) = rest.split_once('/').unwrap_or((rest, ""));
        let account = host.split('.').next().unwrap_or_default().to_string();
        let store = Store::Azure {
            account: Some(account),
            container: container.to_string(),
            endpoint: Some(format!("https://{host}")),
        };
        (store, path)
    } else {
        return Err(format!(
            "a store URL must start with one of {FORMS}, got {s:?}"
        ));
    };
    let empty = match &store {
        Store::S3 { bucket } | Store::Gcs { bucket } => bucket.is_empty(),
        Store::Azure { container, .. } => container.is_empty(),
    };
    if empty {
        return Err(format!("no bucket or container name in {s:?}"));
    }
    Ok((store, rest.to_string()))
}

/// `s3://bucket/key` (one object, any store's URL) into its store and key, as written.
pub fn parse_object(s: &str) -> Result<(Store, String), String> {
    match parse_url(s) {
        Ok((store, key)) if !key.is_empty() && !key.ends_with('/') => Ok((store, key)),
        _ => Err(format!(
            "an object must look like s3://BUCKET/KEY (or gs://BUCKET/KEY, az://CONTAINER/KEY), got {s:?}"
        )),
    }
}

/// `s3://bucket/prefix` (any store's URL) into its store and prefix.
pub fn parse_source(s: &str) -> Result<(Store, String), String> {
    let (store, prefix) = parse_url(s)
        .map_err(|e| format!("source must look like {FORMS}, with an optional /PREFIX: {e}"))?;
    Ok((store, prefix.trim_matches('/').to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn min_free_is_a_size_or_a_share_of_the_disk() {
        assert_eq!(parse_min_free("10%", 1000 << 20), Ok(100 << 20));
        assert_eq!(parse_min_free(" 0% ", 1 << 30), Ok(0));
        assert_eq!(parse_min_free("2G", 1 << 20), Ok(2 << 30));
        assert!(parse_min_free("95%", 1 << 30).is_err());
        assert!(parse_min_free("x%", 1 << 30).is_err());
        assert!(parse_min_free("-1%", 1 << 30).is_err());
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("8M"), Ok(8 << 20));
        assert_eq!(parse_size("10G"), Ok(10 << 30));
        assert_eq!(parse_size("1.5GiB"), Ok(3 << 29));
        assert_eq!(parse_size("4096"), Ok(4096));
        assert!(parse_size("lots").is_err());
        assert!(parse_size("3X").is_err());
    }

    #[test]
    fn endpoints() {
        for ok in [
            "http://127.0.0.1:8333",
            "https://s3.eu-west-1.amazonaws.com",
            "https://minio.example.org:9000/",
            "http://[::1]:9000",
            "http://localhost",
        ] {
            assert_eq!(parse_endpoint(ok), Ok(()), "{ok}");
        }
        for bad in [
            "not a url",
            "127.0.0.1:8333",
            "ftp://host",
            "http://",
            "http://host:port",
            "http://host:99999",
            "http://a b",
            "http://[::1:9000",
        ] {
            let e = parse_endpoint(bad).unwrap_err();
            assert!(e.starts_with("malformed endpoint URL"), "{bad}: {e}");
        }
        let e = parse_endpoint("https://key:secret@host").unwrap_err();
        assert!(!e.contains("secret"), "{e}");
    }

    #[test]
    fn objects() {
        let s3 = |b: &str| Store::S3 { bucket: b.into() };
        assert_eq!(
            parse_object("s3://b/a/b.fa"),
            Ok((s3("b"), "a/b.fa".into()))
        );
        let az = Store::Azure {
            account: None,
            container: "c".into(),
            endpoint: None,
        };
        assert_eq!(parse_object("az://c/k//x"), Ok((az, "k//x".into())));
        let gs = Store::Gcs { bucket: "g".into() };
        assert_eq!(parse_object("gs://g/d/f.bam"), Ok((gs, "d/f.bam".into())));
        for bad in [
            "s3://b",
            "s3://b/",
            "s3:///k",
            "b/k",
            "s3://b/dir/",
            "az://c",
            "gs:/b/k",
        ] {
            assert!(parse_object(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn sources() {
        let s3 = |b: &str| Store::S3 { bucket: b.into() };
        assert_eq!(parse_source("s3://b"), Ok((s3("b"), "".into())));
        assert_eq!(parse_source("s3://b/p/q/"), Ok((s3("b"), "p/q".into())));
        let gs = Store::Gcs { bucket: "g".into() };
        assert_eq!(parse_source("gs://g/run/"), Ok((gs, "run".into())));
        assert!(parse_source("gs:///x").is_err());
        let (store, prefix) = parse_source("https://acct.blob.core.windows.net/c/p").unwrap();
        assert_eq!(
            store,
            Store::Azure {
                account: Some("acct".into()),
                container: "c".into(),
                endpoint: Some("https://acct.blob.core.windows.net".into()),
            }
        );
        assert_eq!(prefix, "p");
        assert_eq!(parse_source("az://c").unwrap().0.url(), "az://c");
        for bad in [
            "b/p",
            "s3:///p",
            "az:///p",
            "https://example.org/c",
            "gcs://b",
        ] {
            assert!(parse_source(bad).is_err(), "{bad}");
        }
    }
}
