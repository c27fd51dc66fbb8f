//! An Azure answer that is not a success, as the `ClientError` kind a caller acts on. The
//! service names every failure in the `x-ms-error-code` header (a HEAD's answer too,
//! which has no body), so the kind comes from the status and that code.

use http::StatusCode;

use crate::{ClientError, Result};

/// The response if it is a success, else its error; `what` names the request and key.
pub(super) async fn check(
    resp: reqwest::Response,
    what: &str,
    container: &str,
) -> Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    let code = resp
        .headers()
        .get("x-ms-error-code")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_string();
    // The message helps a user with a 400 or 403; bounded, it is never a secret.
    let body = resp.text().await.unwrap_or_default();
    let message = message_of(&body);
    Err(classify(status, &code, &message, what, container))
}

fn message_of(body: &str) -> String {
    let m = body
        .split_once("<Message>")
        .and_then(|(_, rest)| rest.split_once("</Message>"))
        .map_or("", |(m, _)| m);
    m.lines().next().unwrap_or("").chars().take(300).collect()
}

/// The kind of a failure from the status and the service's error code.
pub(super) fn classify(
    status: StatusCode,
    code: &str,
    message: &str,
    what: &str,
    container: &str,
) -> ClientError {
    let detail = || {
        let mut s = format!("{what}: {} {code}", status.as_u16());
        if !message.is_empty() {
            s.push_str(": ");
            s.push_str(message);
        }
        s
    };
    match status.as_u16() {
        404 if code == "ContainerNotFound" => ClientError::NoSuchBucket(container.to_string()),
        404 => ClientError::NotFound(what.to_string()),
        412 => ClientError::Precondition(what.to_string()),
        401 | 403 => ClientError::AccessDenied(detail()),
        413 => ClientError::Refused(detail()),
        429 | 503 => ClientError::Throttled(detail()),
        500..=599 => ClientError::Transient(detail()),
        _ => ClientError::Other(detail()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_failures() {
        let k = |s: u16, code: &str| classify(StatusCode::from_u16(s).unwrap(), code, "", "w", "c");
        assert_eq!(
            k(404, "ContainerNotFound"),
            ClientError::NoSuchBucket("c".into())
        );
        assert_eq!(k(404, "BlobNotFound"), ClientError::NotFound("w".into()));
        assert_eq!(
            k(412, "ConditionNotMet"),
            ClientError::Precondition("w".into())
        );
        assert!(matches!(
            k(403, "AuthenticationFailed"),
            ClientError::AccessDenied(_)
        ));
        assert!(matches!(k(503, "ServerBusy"), ClientError::Throttled(_)));
        assert!(matches!(k(500, "InternalError"), ClientError::Transient(_)));
        assert!(
            matches!(&k(416, "InvalidRange"), ClientError::Other(m) if m.contains("416 InvalidRange"))
        );
        assert_eq!(
            message_of("<Error><Code>X</Code><Message>bad\nRequestId:1</Message></Error>"),
            "bad"
        );
    }
}
