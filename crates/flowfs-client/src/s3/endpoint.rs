//! Where the bucket is: its region and the URL its requests go to, found as the AWS tools
//! find them (the flags, then `AWS_REGION`/`AWS_DEFAULT_REGION` and
//! `AWS_ENDPOINT_URL_S3`/`AWS_ENDPOINT_URL`, then the profile's `region` and
//! `endpoint_url` in the AWS config file). A custom endpoint means path-style requests
//! (`{endpoint}/{bucket}/{key}`), which is what SeaweedFS, MinIO and Ceph expect; AWS
//! gets virtual-hosted ones (`https://{bucket}.s3.{region}.amazonaws.com/{key}`), but for
//! a bucket whose name has a dot, which no wildcard certificate covers.

use std::path::PathBuf;

/// The region when nothing names one (the AWS tools' default for S3).
const DEFAULT_REGION: &str = "us-east-1";

/// Where requests for one bucket go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Endpoint {
    /// The region requests are signed for.
    pub region: String,
    /// The bucket's own URL (ListObjectsV2, ListMultipartUploads, CreateBucket).
    pub bucket_url: String,
    /// An object's URL is this, `/` and its percent-encoded key.
    pub object_base: String,
}

/// What the environment and the profile say (a function of names, for tests).
pub(super) fn resolve(
    bucket: &str,
    region: Option<&str>,
    endpoint_url: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Endpoint {
    let profile = Profile::load(env);
    let region = (region.map(str::to_string))
        .or_else(|| env("AWS_REGION"))
        .or_else(|| env("AWS_DEFAULT_REGION"))
        .or_else(|| profile.get("region"))
        .filter(|r| !r.is_empty())
        .unwrap_or_else(|| DEFAULT_REGION.to_string());
    let custom = (endpoint_url.map(str::to_string))
        .or_else(|| env("AWS_ENDPOINT_URL_S3"))
        .or_else(|| env("AWS_ENDPOINT_URL"))
        .or_else(|| profile.get("endpoint_url"))
        .filter(|u| !u.is_empty());
    match custom {
        Some(url) => {
            let url = url.trim_end_matches('/');
            Endpoint {
                region,
                bucket_url: format!("{url}/{bucket}"),
                object_base: format!("{url}/{bucket}"),
            }
        }
        None => aws(bucket, region),
    }
}

/// AWS S3's own endpoint for `bucket` in `region`.
fn aws(bucket: &str, region: String) -> Endpoint {
    let suffix = if region.starts_with("cn-") {
        "amazonaws.com.cn"
    } else {
        "amazonaws.com"
    };
    let host = format!("s3.{region}.{suffix}");
    if bucket.contains('.') {
        let base = format!("https://{host}/{bucket}");
        return Endpoint {
            region,
            bucket_url: base.clone(),
            object_base: base,
        };
    }
    let base = format!("https://{bucket}.{host}");
    Endpoint {
        region,
        bucket_url: format!("{base}/"),
        object_base: base,
    }
}

/// The settings of the profile in use (`AWS_PROFILE`, else `default`) in the AWS config
/// file (`AWS_CONFIG_FILE`, else `~/.aws/config`); none when there is no such file.
struct Profile(Option<ini::Ini>, String);

impl Profile {
    fn load(env: &dyn Fn(&str) -> Option<String>) -> Profile {
        let name = env("AWS_PROFILE").unwrap_or_else(|| "default".to_string());
        let path = (env("AWS_CONFIG_FILE").map(PathBuf::from))
            .or_else(|| env("HOME").map(|h| PathBuf::from(h).join(".aws/config")));
        let ini = path
            .and_then(|p| std::fs::read_to_string(p).ok())
            .and_then(|text| ini::Ini::load_from_str(&text).ok());
        Profile(ini, name)
    }

    /// A setting of the profile: `[default]` or `[profile NAME]`.
    fn get(&self, key: &str) -> Option<String> {
        let ini = self.0.as_ref()?;
        let section = match self.1.as_str() {
            "default" => "default".to_string(),
            name => format!("profile {name}"),
        };
        let value = ini.section(Some(section.as_str()))?.get(key)?;
        Some(value.trim().to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::collections::HashMap;

    fn with(vars: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let m: HashMap<String, String> = (vars.iter())
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| m.get(k).cloned()
    }

    #[test]
    fn aws_gets_virtual_hosted_urls_but_for_dotted_buckets() {
        let e = resolve("b", None, None, &with(&[("AWS_REGION", "eu-west-1")]));
        assert_eq!(e.region, "eu-west-1");
        assert_eq!(e.object_base, "https://b.s3.eu-west-1.amazonaws.com");
        assert_eq!(e.bucket_url, "https://b.s3.eu-west-1.amazonaws.com/");
        let dotted = resolve("a.b", None, None, &with(&[]));
        assert_eq!(dotted.region, "us-east-1");
        assert_eq!(dotted.object_base, "https://s3.us-east-1.amazonaws.com/a.b");
    }

    #[test]
    fn a_custom_endpoint_is_path_style_and_flags_come_first() {
        let env = with(&[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1/"),
            ("AWS_REGION", "x"),
        ]);
        let e = resolve("b", Some("y"), None, &env);
        assert_eq!(
            (e.region.as_str(), e.object_base.as_str()),
            ("y", "http://127.0.0.1:1/b")
        );
        let e = resolve("b", None, Some("http://h:2"), &env);
        assert_eq!(e.bucket_url, "http://h:2/b");
        let s3 = with(&[
            ("AWS_ENDPOINT_URL", "http://a"),
            ("AWS_ENDPOINT_URL_S3", "http://s"),
        ]);
        assert_eq!(resolve("b", None, None, &s3).object_base, "http://s/b");
    }

    #[test]
    fn the_profile_names_region_and_endpoint() {
        let dir = tempfile::tempdir().unwrap();
        let cfg = dir.path().join("config");
        std::fs::write(
            &cfg,
            "[default]\nregion = eu-central-1\n[profile lab]\nregion = ap-south-1\n\
             endpoint_url = http://127.0.0.1:9000\n",
        )
        .unwrap();
        let path = cfg.to_str().unwrap();
        let e = resolve("b", None, None, &with(&[("AWS_CONFIG_FILE", path)]));
        assert_eq!(e.region, "eu-central-1");
        let env = with(&[("AWS_CONFIG_FILE", path), ("AWS_PROFILE", "lab")]);
        let e = resolve("b", None, None, &env);
        assert_eq!(e.region, "ap-south-1");
        assert_eq!(e.object_base, "http://127.0.0.1:9000/b");
        let env = with(&[("AWS_CONFIG_FILE", path), ("AWS_REGION", "us-west-2")]);
        assert_eq!(resolve("b", None, None, &env).region, "us-west-2");
    }
}
