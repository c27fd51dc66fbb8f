//! Where a GCS client finds its endpoint and credentials, as Google's own tools do:
//! STORAGE_EMULATOR_HOST names an emulator, reached unsigned (as Google's client
//! libraries do); otherwise a token comes from reqsign's default chain, which reads
//! GOOGLE_APPLICATION_CREDENTIALS (a service account or external account file), gcloud's
//! application-default credentials (`gcloud auth application-default login`), then the
//! metadata server (GCE, GKE workload identity, Cloud Run, Batch; GCE_METADATA_HOST moves
//! it). `--anonymous` sends requests unsigned (a public bucket). Nothing here prints a
//! secret.

use super::GcsConfig;
use crate::{ClientError, Result};

/// Google's endpoint.
const GOOGLE: &str = "https://storage.googleapis.com";

/// What was looked for, for the error that says none of it was found.
pub(crate) const LOOKED_FOR: &str = "set GOOGLE_APPLICATION_CREDENTIALS to a service account \
    (or external account) key file, run `gcloud auth application-default login`, or run \
    where the metadata server gives a token (GCE, GKE workload identity, Cloud Run, Batch); \
    a public bucket needs --anonymous, an emulator STORAGE_EMULATOR_HOST";

/// The endpoint (no trailing `/`) and whether requests are signed.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Resolved {
    pub endpoint: String,
    pub signed: bool,
}

/// The endpoint and signing of `cfg`, `env` reading the environment.
pub(crate) fn resolve(cfg: &GcsConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<Resolved> {
    let emulator = env("STORAGE_EMULATOR_HOST").filter(|h| !h.trim().is_empty());
    let endpoint = match (&cfg.endpoint_url, &emulator) {
        (Some(u), _) => checked(u, "--endpoint-url")?,
        (None, Some(h)) if h.contains("://") => checked(h, "STORAGE_EMULATOR_HOST")?,
        (None, Some(h)) => checked(&format!("http://{}", h.trim()), "STORAGE_EMULATOR_HOST")?,
        (None, None) => GOOGLE.to_string(),
    };
    Ok(Resolved {
        endpoint,
        signed: !cfg.anonymous && emulator.is_none(),
    })
}

/// An endpoint URL without its trailing `/`, or the error that says what is wrong.
fn checked(url: &str, from: &str) -> Result<String> {
    let u = url.trim().trim_end_matches('/');
    let host = u
        .strip_prefix("http://")
        .or_else(|| u.strip_prefix("https://"));
    match host {
        Some(h) if !h.is_empty() && !h.contains(['/', '?', '#', ' ']) => Ok(u.to_string()),
        _ => Err(ClientError::Credentials(format!(
            "{from} must be http(s)://HOST[:PORT] (HOST[:PORT] for STORAGE_EMULATOR_HOST), got {url:?}"
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::env_of;

    fn cfg(endpoint: Option<&str>, anonymous: bool) -> GcsConfig {
        GcsConfig {
            metrics: Default::default(),
            bucket: "b".into(),
            endpoint_url: endpoint.map(String::from),
            anonymous,
        }
    }

    #[test]
    fn google_signed_by_default() {
        let r = resolve(&cfg(None, false), &env_of(&[])).unwrap();
        assert_eq!((r.endpoint.as_str(), r.signed), (GOOGLE, true));
        let r = resolve(&cfg(None, true), &env_of(&[])).unwrap();
        assert!(!r.signed, "--anonymous");
    }

    #[test]
    fn an_emulator_host_is_reached_unsigned() {
        let e = env_of(&[("STORAGE_EMULATOR_HOST", "127.0.0.1:4443")]);
        let r = resolve(&cfg(None, false), &e).unwrap();
        assert_eq!(
            (r.endpoint.as_str(), r.signed),
            ("http://127.0.0.1:4443", false)
        );
        let e = env_of(&[("STORAGE_EMULATOR_HOST", "http://localhost:9000/")]);
        assert_eq!(
            resolve(&cfg(None, false), &e).unwrap().endpoint,
            "http://localhost:9000"
        );
        let r = resolve(&cfg(Some("http://other:1"), false), &e).unwrap();
        assert_eq!(r.endpoint, "http://other:1", "--endpoint-url wins");
    }

    #[test]
    fn a_bad_endpoint_says_what_is_wrong() {
        for bad in ["storage.example", "http://", "http://h/path", "ftp://h"] {
            let e = resolve(&cfg(Some(bad), false), &env_of(&[])).unwrap_err();
            assert!(e.to_string().contains("--endpoint-url"), "{bad}: {e}");
        }
        let e = resolve(
            &cfg(None, false),
            &env_of(&[("STORAGE_EMULATOR_HOST", "h/x")]),
        );
        assert!(e.unwrap_err().to_string().contains("STORAGE_EMULATOR_HOST"));
    }
}
