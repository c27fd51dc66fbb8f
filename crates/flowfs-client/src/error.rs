//! Typed errors of object access. The file system maps each kind to one errno, so the
//! kinds are about what the caller can do next, not about which HTTP code came back.

use thiserror::Error;

/// Why a request to the store failed, in the kinds a caller acts on differently.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ClientError {
    /// The key does not exist (404 NoSuchKey).
    #[error("no such key: {0}")]
    NotFound(String),
    /// The bucket does not exist.
    #[error("no such bucket: {0}")]
    NoSuchBucket(String),
    /// The credentials are refused for this request (403).
    #[error("access denied ({0}): check the credentials and the bucket policy")]
    AccessDenied(String),
    /// An If-Match did not hold: the object changed since its ETag was read.
    #[error("precondition failed (the object changed): {0}")]
    Precondition(String),
    /// The store asks to slow down (503 SlowDown, 429): retried, and the rate is lowered.
    #[error("throttled by the server: {0}")]
    Throttled(String),
    /// A failure that may pass (5xx, a connection reset, a body cut short): retried.
    #[error("transient failure: {0}")]
    Transient(String),
    /// No connection to the endpoint (refused, DNS, timeout): retried.
    #[error("cannot reach the endpoint: {0}")]
    Unreachable(String),
    /// No source of the credential chain had credentials (nothing set, no profile).
    #[error(
        "no AWS credentials found: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or AWS_PROFILE with a profile in ~/.aws/credentials or ~/.aws/config, or run where a container or instance role is available"
    )]
    NoCredentials,
    /// A configured credential source failed (an expired SSO session, a broken profile).
    #[error("cannot load credentials: {0}")]
    Credentials(String),
    /// The endpoint answered, but not as an S3 server does (a web server, a proxy page).
    #[error("the endpoint does not answer like an S3 server: {0}")]
    NotS3(String),
    /// The store refuses this request for what it is (a key too long, an object too
    /// large): sending it again can never succeed.
    #[error("refused by the store: {0}")]
    Refused(String),
    /// Bytes that are not what was sent: a body the store refused for its checksum
    /// (BadDigest), or a GET body that does not match the store's full-object checksum.
    /// Retried (the next transfer is likely whole); never handed over as data.
    #[error("damaged in transfer (checksum mismatch): {0}")]
    Corrupt(String),
    /// Anything else, with its message; never retried.
    #[error("{0}")]
    Other(String),
}

impl ClientError {
    /// Whether the same request may succeed if sent again later.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ClientError::Throttled(_)
                | ClientError::Transient(_)
                | ClientError::Unreachable(_)
                | ClientError::Corrupt(_)
        )
    }
}

/// The result of every request to the store.
pub type Result<T> = std::result::Result<T, ClientError>;
