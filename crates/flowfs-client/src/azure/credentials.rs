//! Where an Azure Blob client finds its endpoint and credentials, in the order Azure's own
//! tools look: a connection string (`AZURE_STORAGE_CONNECTION_STRING`, which Azurite's
//! development account uses), the account's shared key (`AZURE_STORAGE_KEY`, as the `az`
//! CLI names it) or a SAS token (`AZURE_STORAGE_SAS_TOKEN`), then Microsoft Entra ID
//! through reqsign's chain (a service principal's secret or certificate, workload
//! identity, `az login`, the managed identity endpoint). Nothing here prints a secret.

use reqsign_azure_storage::{Credential, DefaultCredentialProvider};
use reqsign_core::{ProvideCredential, ProvideCredentialChain};

use crate::{ClientError, Result};

/// Azurite's documented development account (public by design, the same everywhere):
/// what `UseDevelopmentStorage=true` in a connection string means.
const DEV_ACCOUNT: &str = "devstoreaccount1";
const DEV_KEY: &str =
    "Eby8vdM02xNOcqFlqUwJPLlmEtlCDXJ1OUzFT50uSRZ6IFsuFq2UVErCz4I6tq/K1SZFPTOtr/KBHBeksoGMGw==";
const DEV_ENDPOINT: &str = "http://127.0.0.1:10000/devstoreaccount1";

/// What was looked for, for the error that says none of it was found.
pub(crate) const LOOKED_FOR: &str = "set AZURE_STORAGE_CONNECTION_STRING, or the account \
    (--azure-account or AZURE_STORAGE_ACCOUNT) with AZURE_STORAGE_KEY or \
    AZURE_STORAGE_SAS_TOKEN, or sign in with Microsoft Entra ID (AZURE_TENANT_ID, \
    AZURE_CLIENT_ID and AZURE_CLIENT_SECRET or AZURE_FEDERATED_TOKEN_FILE, `az login`, or a \
    managed identity)";

/// How requests are signed.
pub(crate) enum Source {
    /// A shared key or SAS token found by flowfs (connection string, variables).
    Static(Credential),
    /// Microsoft Entra ID through reqsign's default chain.
    Entra,
}

/// The account, its blob endpoint (no trailing `/`) and how to sign.
pub(crate) struct Resolved {
    pub account: String,
    pub endpoint: String,
    pub source: Source,
}

impl Resolved {
    /// The provider reqsign asks for a credential.
    pub(crate) fn provider(&self) -> ProvideCredentialChain<Credential> {
        let chain = ProvideCredentialChain::new();
        match &self.source {
            Source::Static(c) => chain.push(Fixed(c.clone())),
            Source::Entra => chain.push(DefaultCredentialProvider::new()),
        }
    }
}

/// A credential found once: reqsign's static provider takes strings, this keeps the one
/// already parsed.
#[derive(Debug)]
struct Fixed(Credential);

impl ProvideCredential for Fixed {
    type Credential = Credential;

    async fn provide_credential(
        &self,
        _: &reqsign_core::Context,
    ) -> reqsign_core::Result<Option<Credential>> {
        Ok(Some(self.0.clone()))
    }
}

/// The settings of a connection string (`Key=Value;...`), keys as written.
fn parse_connection_string(s: &str) -> Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    for part in s.split(';').map(str::trim).filter(|p| !p.is_empty()) {
        // A value (a key, a SAS token) may itself hold `=`: split at the first one.
        let Some((k, v)) = part.split_once('=') else {
            return Err(ClientError::Credentials(
                "AZURE_STORAGE_CONNECTION_STRING: a setting without `=` (expected \
                 `AccountName=...;AccountKey=...` or `BlobEndpoint=...;SharedAccessSignature=...`)"
                    .into(),
            ));
        };
        out.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(out)
}

fn setting<'a>(settings: &'a [(String, String)], name: &str) -> Option<&'a str> {
    settings
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// The account, endpoint and credential a connection string names.
fn from_connection_string(s: &str, endpoint_url: Option<&str>) -> Result<Resolved> {
    let cs = parse_connection_string(s)?;
    if setting(&cs, "UseDevelopmentStorage").is_some_and(|v| v.eq_ignore_ascii_case("true")) {
        return Ok(Resolved {
            account: DEV_ACCOUNT.into(),
            endpoint: endpoint_url
                .unwrap_or(DEV_ENDPOINT)
                .trim_end_matches('/')
                .into(),
            source: Source::Static(Credential::with_shared_key(DEV_ACCOUNT, DEV_KEY)),
        });
    }
    let account = setting(&cs, "AccountName").map(str::to_string);
    let endpoint = match (endpoint_url, setting(&cs, "BlobEndpoint"), &account) {
        (Some(e), _, _) | (None, Some(e), _) => e.to_string(),
        (None, None, Some(a)) => {
            let proto = setting(&cs, "DefaultEndpointsProtocol").unwrap_or("https");
            let suffix = setting(&cs, "EndpointSuffix").unwrap_or("core.windows.net");
            format!("{proto}://{a}.blob.{suffix}")
        }
        (None, None, None) => {
            return Err(ClientError::Credentials(
                "AZURE_STORAGE_CONNECTION_STRING names neither AccountName nor BlobEndpoint".into(),
            ))
        }
    };
    let source = match (
        setting(&cs, "AccountKey"),
        setting(&cs, "SharedAccessSignature"),
    ) {
        (Some(key), _) => {
            let Some(a) = &account else {
                return Err(ClientError::Credentials(
                    "AZURE_STORAGE_CONNECTION_STRING has an AccountKey but no AccountName".into(),
                ));
            };
            Source::Static(Credential::with_shared_key(a, key))
        }
        (None, Some(sas)) => Source::Static(Credential::with_sas_token(sas)),
        (None, None) => Source::Entra,
    };
    let account = account.unwrap_or_else(|| account_of(&endpoint).unwrap_or_default());
    Ok(Resolved {
        account,
        endpoint: endpoint.trim_end_matches('/').to_string(),
        source,
    })
}

/// The account of an `https://ACCOUNT.blob.core.windows.net` endpoint.
pub(crate) fn account_of(endpoint: &str) -> Option<String> {
    let host = endpoint.split("://").nth(1)?.split(['/', ':']).next()?;
    let (account, rest) = host.split_once('.')?;
    rest.starts_with("blob.").then(|| account.to_string())
}

/// Finds the endpoint and credentials for `account` (from the command line or the URL)
/// and `endpoint_url` (`--endpoint-url`), reading variables through `env`.
pub(crate) fn resolve(
    account: Option<&str>,
    endpoint_url: Option<&str>,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Resolved> {
    if let Some(cs) = env("AZURE_STORAGE_CONNECTION_STRING").filter(|s| !s.trim().is_empty()) {
        let r = from_connection_string(&cs, endpoint_url)?;
        if let Some(a) = account.filter(|a| *a != r.account && !r.account.is_empty()) {
            return Err(ClientError::Credentials(format!(
                "the account {a} differs from AZURE_STORAGE_CONNECTION_STRING's ({}): \
                 unset one of them",
                r.account
            )));
        }
        return Ok(r);
    }
    let account = account
        .map(str::to_string)
        .or_else(|| env("AZURE_STORAGE_ACCOUNT"))
        .or_else(|| endpoint_url.and_then(account_of))
        .ok_or_else(|| {
            ClientError::Credentials(format!("no Azure storage account named: {LOOKED_FOR}"))
        })?;
    let endpoint = endpoint_url
        .map(|e| e.trim_end_matches('/').to_string())
        .unwrap_or_else(|| format!("https://{account}.blob.core.windows.net"));
    let key = env("AZURE_STORAGE_KEY").or_else(|| env("AZURE_STORAGE_ACCOUNT_KEY"));
    let source = match (key, env("AZURE_STORAGE_SAS_TOKEN")) {
        (Some(k), _) => Source::Static(Credential::with_shared_key(&account, &k)),
        (None, Some(sas)) => Source::Static(Credential::with_sas_token(&sas)),
        (None, None) => Source::Entra,
    };
    Ok(Resolved {
        account,
        endpoint,
        source,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::rest::env_of;

    fn is_shared_key(s: &Source, want: &str) -> bool {
        matches!(s, Source::Static(Credential::SharedKey { account_name, .. }) if account_name == want)
    }

    #[test]
    fn azurite_connection_string() {
        let env = env_of(&[(
            "AZURE_STORAGE_CONNECTION_STRING",
            "DefaultEndpointsProtocol=http;AccountName=devstoreaccount1;AccountKey=a2V5;\
             BlobEndpoint=http://127.0.0.1:10000/devstoreaccount1/;",
        )]);
        let r = resolve(None, None, &env).unwrap();
        assert_eq!(r.account, "devstoreaccount1");
        assert_eq!(r.endpoint, "http://127.0.0.1:10000/devstoreaccount1");
        assert!(is_shared_key(&r.source, "devstoreaccount1"));
        // --endpoint-url wins over the connection string's.
        let r = resolve(None, Some("http://127.0.0.1:9/x"), &env).unwrap();
        assert_eq!(r.endpoint, "http://127.0.0.1:9/x");
        let e = resolve(Some("other"), None, &env).err().unwrap();
        assert!(e.to_string().contains("differs"), "{e}");
    }

    #[test]
    fn account_key_sas_and_entra() {
        let r = resolve(
            Some("acct"),
            None,
            &env_of(&[("AZURE_STORAGE_KEY", "a2V5")]),
        )
        .unwrap();
        assert_eq!(r.endpoint, "https://acct.blob.core.windows.net");
        assert!(is_shared_key(&r.source, "acct"));
        let r = resolve(
            None,
            None,
            &env_of(&[
                ("AZURE_STORAGE_ACCOUNT", "b"),
                ("AZURE_STORAGE_SAS_TOKEN", "sv=1"),
            ]),
        )
        .unwrap();
        assert!(matches!(
            r.source,
            Source::Static(Credential::SasToken { .. })
        ));
        let r = resolve(None, Some("https://c.blob.core.windows.net"), &env_of(&[])).unwrap();
        assert_eq!(r.account, "c");
        assert!(matches!(r.source, Source::Entra));
        let e = resolve(None, None, &env_of(&[])).err().unwrap();
        assert!(
            e.to_string().contains("AZURE_STORAGE_CONNECTION_STRING"),
            "{e}"
        );
    }

    #[test]
    fn development_storage_and_bad_strings() {
        let r = resolve(
            None,
            None,
            &env_of(&[(
                "AZURE_STORAGE_CONNECTION_STRING",
                "UseDevelopmentStorage=true",
            )]),
        )
        .unwrap();
        assert_eq!(r.endpoint, DEV_ENDPOINT);
        for bad in ["AccountKey=x", "nonsense", "DefaultEndpointsProtocol=https"] {
            let env =
                move |k: &str| (k == "AZURE_STORAGE_CONNECTION_STRING").then(|| bad.to_string());
            assert!(resolve(None, None, &env).is_err(), "{bad}");
        }
        assert_eq!(
            account_of("https://x.blob.core.windows.net/"),
            Some("x".into())
        );
        assert_eq!(account_of("http://127.0.0.1:10000/devstoreaccount1"), None);
    }
}
