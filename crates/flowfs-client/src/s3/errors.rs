//! An S3 answer that is not a success, as the kind of error the file system acts on: the
//! kind comes from the status and the `<Error><Code>` of its body (a HEAD's answer has
//! none, and is known by its status alone).

use crate::{ClientError, Result};

/// The response if it is a success, else its error; `what` names the request and key.
pub(super) async fn check(resp: reqwest::Response, what: &str) -> Result<reqwest::Response> {
    if resp.status().is_success() {
        return Ok(resp);
    }
    Err(Failure::read(resp, what).await?.error(what))
}

/// A failed answer, read.
pub(super) struct Failure {
    status: u16,
    code: String,
    message: String,
    /// Its body is whole and is not S3 XML: some other server's page.
    foreign: bool,
}

impl Failure {
    /// Reads the answer's body (a body cut short is a transport fault to retry).
    pub(super) async fn read(resp: reqwest::Response, what: &str) -> Result<Failure> {
        let status = resp.status().as_u16();
        let body = crate::rest::text(resp, what).await?;
        let (code, message) = super::xml::error_of(&body);
        Ok(Failure {
            status,
            foreign: foreign(&body),
            code,
            message,
        })
    }

    /// An `<Error>` in the body of a 200 answer (CopyObject, UploadPartCopy and
    /// CompleteMultipartUpload may fail after their answer began): retried as a 5xx is.
    pub(super) fn in_body(body: &str) -> Option<Failure> {
        let (code, message) = super::xml::error_of(body);
        (!code.is_empty()).then_some(Failure {
            status: 500,
            code,
            message,
            foreign: false,
        })
    }

    /// The kind of error it is.
    pub(super) fn error(&self, what: &str) -> ClientError {
        let detail = match self.message.is_empty() {
            true => self.code.clone(),
            false => format!("{}: {}", self.code, self.message),
        };
        classify(what, self.status, &self.code, &detail)
    }

    /// An answer to the bucket check that no S3 server gives: an error without an S3
    /// error code, or a body that is not S3 XML. A web server or a proxy's page at the
    /// endpoint would otherwise read as "no such bucket". 5xx answers are left alone: an
    /// S3 server in trouble may send them bare.
    pub(super) fn not_s3(&self) -> Option<ClientError> {
        let status = self.status;
        let why = if status >= 500 {
            return None;
        } else if self.foreign {
            "with a body that is not S3 XML"
        } else if self.code.is_empty() {
            "without an S3 error code"
        } else {
            return None;
        };
        Some(ClientError::NotS3(format!("HTTP {status} {why}")))
    }
}

/// Whether a whole body is some other server's page: not empty, and not S3 XML.
fn foreign(body: &str) -> bool {
    let mut n = body.len().min(512);
    while !body.is_char_boundary(n) {
        n -= 1;
    }
    let start = &body[..n];
    let s3 = ["<ListBucketResult", "<Error>", "<?xml"];
    !body.is_empty() && !s3.iter().any(|tag| start.contains(tag))
}

fn classify(what: &str, status: u16, code: &str, detail: &str) -> ClientError {
    match (status, code) {
        (_, "NoSuchBucket") => ClientError::NoSuchBucket(what.to_string()),
        (404, _) => ClientError::NotFound(what.to_string()),
        (403, _)
        | (_, "InvalidAccessKeyId")
        | (_, "SignatureDoesNotMatch")
        | (_, "AccessDenied") => ClientError::AccessDenied(format!("{what}: {detail}")),
        (412, _) => ClientError::Precondition(what.to_string()),
        // The body's checksum did not match the one sent with it (issue 49).
        (_, "BadDigest" | "XAmzContentChecksumMismatch") => {
            ClientError::Corrupt(format!("{what}: the store refused the body: {detail}"))
        }
        (503, _) | (429, _) | (_, "SlowDown") => {
            ClientError::Throttled(format!("{what}: {detail}"))
        }
        (500..=599, _) | (_, "RequestTimeout") => {
            ClientError::Transient(format!("{what}: HTTP {status} {detail}"))
        }
        (_, "InvalidRequest") if detail.contains(crate::copy::TOO_LARGE) => {
            ClientError::Refused(format!("{what}: {detail}"))
        }
        (_, "KeyTooLongError" | "EntityTooLarge" | "MetadataTooLarge" | "InvalidObjectName")
        | (413 | 414, _) => ClientError::Refused(format!("{what}: HTTP {status} {detail}")),
        _ => ClientError::Other(format!("{what}: HTTP {status} {detail}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_whole_body_that_is_not_s3_xml_is_foreign() {
        assert!(foreign("<html><body>It works</body></html>"));
        assert!(foreign("hello"));
        let s3 = "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=";
        assert!(!foreign(s3));
        assert!(!foreign("<Error><Code>NoSuchBucket</Code></Error>"));
        assert!(!foreign(""));
    }

    #[test]
    fn an_error_in_a_200_body_is_retried() {
        let f = Failure::in_body("<Error><Code>InternalError</Code></Error>").unwrap();
        assert!(f.error("k").is_retryable());
        assert!(Failure::in_body("<CopyObjectResult><ETag>x</ETag></CopyObjectResult>").is_none());
    }

    #[test]
    fn status_codes_map_to_kinds() {
        // The kind is the variant; its text is the message, not compared here.
        let kind = |e: &ClientError| std::mem::discriminant(e);
        let any = String::new;
        for (status, code, want) in [
            (404, "NoSuchBucket", ClientError::NoSuchBucket(any())),
            (404, "NoSuchKey", ClientError::NotFound(any())),
            (403, "", ClientError::AccessDenied(any())),
            (400, "InvalidAccessKeyId", ClientError::AccessDenied(any())),
            (400, "KeyTooLongError", ClientError::Refused(any())),
        ] {
            let got = classify("k", status, code, "");
            assert_eq!(kind(&got), kind(&want), "{status} {code}: {got:?}");
        }
        for (status, code, retryable) in [
            (503, "SlowDown", true),
            (500, "InternalError", true),
            (400, "InvalidRequest", false),
            (400, "RequestTimeout", true),
        ] {
            let got = classify("k", status, code, "");
            assert_eq!(got.is_retryable(), retryable, "{status} {code}: {got:?}");
        }
    }
}
