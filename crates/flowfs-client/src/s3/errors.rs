//! Turning an SDK failure into the kind of error the file system acts on.

use aws_sdk_s3::error::{ProvideErrorMetadata, SdkError};

use crate::ClientError;

/// An answer to the bucket check that no S3 server gives: an error without an S3 error
/// code, or a body that is not S3 XML. A web server or a proxy's page at the endpoint
/// would otherwise read as "no such bucket". 5xx answers are left alone: an S3 server
/// in trouble may send them bare.
pub(super) fn not_s3<E>(
    err: &SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> Option<ClientError>
where
    E: ProvideErrorMetadata,
{
    match err {
        SdkError::ResponseError(ctx)
            if ctx.raw().status().as_u16() < 500 && foreign_body(ctx.raw()) =>
        {
            Some(ClientError::NotS3(format!(
                "HTTP {} with a body that is not S3 XML",
                ctx.raw().status().as_u16()
            )))
        }
        SdkError::ServiceError(ctx)
            if ctx.raw().status().as_u16() < 500 && ctx.err().code().is_none_or(str::is_empty) =>
        {
            Some(ClientError::NotS3(format!(
                "HTTP {} without an S3 error code",
                ctx.raw().status().as_u16()
            )))
        }
        _ => None,
    }
}

/// Whether a body that could not be read as the answer is some other server's page: it
/// was read whole (as long as its Content-Length says) and is not S3 XML. A body cut
/// short by the network (an S3 answer broken off mid-way, or one never read) is a
/// transport fault to retry: through a proxy that cut 5 % of bodies, `flowfs mount`
/// gave up at once (issue 26).
fn foreign_body(raw: &aws_sdk_s3::config::http::HttpResponse) -> bool {
    let length = raw
        .headers()
        .get("content-length")
        .and_then(|v| v.parse::<usize>().ok());
    foreign(raw.body().bytes(), length)
}

fn foreign(body: Option<&[u8]>, length: Option<usize>) -> bool {
    let Some(b) = body.filter(|b| !b.is_empty()) else {
        return false;
    };
    if length.is_some_and(|n| b.len() < n) {
        return false;
    }
    let text = String::from_utf8_lossy(&b[..b.len().min(512)]);
    let s3 = ["<ListBucketResult", "<Error>", "<?xml"];
    !s3.iter().any(|tag| text.contains(tag))
}

/// The innermost cause of a failure to connect, what a user can act on ("invalid peer
/// certificate: UnknownIssuer", "Connection refused (os error 111)"); an untrusted
/// certificate was only "connection failed". It names no credentials: S3's are in
/// signed headers, never in the URL.
fn cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut last = e;
    while let Some(s) = last.source() {
        last = s;
    }
    last.to_string()
}

/// One place that turns an SDK failure into the kind the file system acts on.
pub(super) fn map_err<E>(
    what: &str,
    err: SdkError<E, aws_sdk_s3::config::http::HttpResponse>,
) -> ClientError
where
    E: ProvideErrorMetadata + std::error::Error + Send + Sync + 'static,
{
    match &err {
        SdkError::DispatchFailure(d) if d.is_timeout() => {
            ClientError::Unreachable(format!("{what}: connection timed out"))
        }
        SdkError::DispatchFailure(d) if d.is_io() => {
            let why = d.as_connector_error().map(|c| cause(c)).unwrap_or_default();
            ClientError::Unreachable(format!("{what}: connection failed: {why}"))
        }
        SdkError::DispatchFailure(_) => {
            ClientError::Transient(format!("{what}: request could not be sent"))
        }
        SdkError::TimeoutError(_) => ClientError::Transient(format!("{what}: timed out")),
        SdkError::ResponseError(_) => ClientError::Transient(format!("{what}: bad response")),
        SdkError::ServiceError(ctx) => {
            let status = ctx.raw().status().as_u16();
            let code = ctx.err().code().unwrap_or("").to_string();
            let msg = ctx.err().message().unwrap_or("").to_string();
            let detail = if msg.is_empty() {
                code.clone()
            } else {
                format!("{code}: {msg}")
            };
            classify(what, status, &code, &detail)
        }
        _ => ClientError::Other(format!(
            "{what}: {}",
            aws_sdk_s3::error::DisplayErrorContext(&err)
        )),
    }
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
        let page = b"<html><body>It works</body></html>";
        assert!(foreign(Some(page), Some(page.len())));
        assert!(foreign(Some(b"hello"), None));
        // Cut short: shorter than its Content-Length, the start of an S3 answer, or
        // nothing at all.
        assert!(!foreign(Some(b"<?x"), Some(476)));
        assert!(!foreign(Some(&page[..10]), Some(page.len())));
        let cut = b"<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<ListBucketResult xmlns=";
        assert!(!foreign(Some(cut), None));
        assert!(!foreign(Some(b""), Some(0)));
        assert!(!foreign(None, Some(476)));
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
