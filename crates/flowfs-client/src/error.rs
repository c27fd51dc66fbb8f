//! Typed errors of object access. The file system maps each kind to one errno, so the
//! kinds are about what the caller can do next, not about which HTTP code came back.

use thiserror::Error;

#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClientError {
    #[error("no such key: {0}")]
    NotFound(String),
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    #[error("access denied ({0}): check the credentials and the bucket policy")]
    AccessDenied(String),
    #[error("precondition failed (the object changed): {0}")]
    Precondition(String),
    #[error("throttled by the server: {0}")]
    Throttled(String),
    #[error("transient failure: {0}")]
    Transient(String),
    #[error("cannot reach the endpoint: {0}")]
    Unreachable(String),
    /// No source of the credential chain had credentials (nothing set, no profile).
    #[error(
        "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a profile in ~/.aws/credentials or ~/.aws/config, or run where a container or instance role is available"
    )]
    NoCredentials,
    /// A configured credential source failed (an expired SSO session, a broken profile).
    #[error("cannot load AWS credentials: {0}")]
    Credentials(String),
    /// The endpoint answered, but not as an S3 server does (a web server, a proxy page).
    #[error("the endpoint does not answer like an S3 server: {0}")]
    NotS3(String),
    /// The store refuses this request for what it is (a key too long, an object too
    /// large): sending it again can never succeed.
    #[error("refused by the store: {0}")]
    Refused(String),
    #[error("{0}")]
    Other(String),
}

impl ClientError {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClientError::Throttled(_) | ClientError::Transient(_) | ClientError::Unreachable(_)
        )
    }
}

pub type Result<T> = std::result::Result<T, ClientError>;
