//! A GCS answer that is not a success, as the `ClientError` kind a caller acts on. The
//! JSON API names a failure by its status and, in a JSON body, a message and a reason;
//! the kind comes from the status (a missing bucket is told apart by the caller, which
//! knows it asked for a listing).

use http::StatusCode;

use crate::{ClientError, Result};

/// The response if it is a success, else its error; `what` names the request and key.
pub(super) async fn check(resp: reqwest::Response, what: &str) -> Result<reqwest::Response> {
    let status = resp.status();
    if status.is_success() {
        return Ok(resp);
    }
    // The message helps a user with a 400 or 403; bounded, it is never a secret.
    let body = resp.text().await.unwrap_or_default();
    Err(classify(status, &message_of(&body), what))
}

/// The message of a JSON error body (`{"error": {"message": ...}}`), else the body's
/// first line.
fn message_of(body: &str) -> String {
    let json = serde_json::from_str::<serde_json::Value>(body).ok();
    let m = json
        .as_ref()
        .and_then(|v| v["error"]["message"].as_str())
        .map(str::to_string)
        .unwrap_or_else(|| body.lines().next().unwrap_or("").to_string());
    m.chars().take(300).collect()
}

/// The kind of a failure from its status.
pub(super) fn classify(status: StatusCode, message: &str, what: &str) -> ClientError {
    let detail = |code: &str| {
        let mut s = format!("{what}: {} {code}", status.as_u16());
        if !message.is_empty() {
            s.push_str(": ");
            s.push_str(message);
        }
        s
    };
    match status.as_u16() {
        404 => ClientError::NotFound(what.to_string()),
        412 => ClientError::Precondition(what.to_string()),
        401 | 403 => ClientError::AccessDenied(detail("")),
        413 => ClientError::Refused(detail("")),
        // S3's name for it, which callers match.
        416 => ClientError::Other(detail("InvalidRange")),
        429 | 503 => ClientError::Throttled(detail("")),
        408 | 500..=599 => ClientError::Transient(detail("")),
        _ => ClientError::Other(detail("")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_of_failures() {
        let k = |s: u16| classify(StatusCode::from_u16(s).unwrap(), "m", "w");
        assert_eq!(k(404), ClientError::NotFound("w".into()));
        assert_eq!(k(412), ClientError::Precondition("w".into()));
        assert!(matches!(k(403), ClientError::AccessDenied(_)));
        assert!(matches!(k(429), ClientError::Throttled(_)));
        assert!(matches!(k(503), ClientError::Throttled(_)));
        assert!(matches!(k(502), ClientError::Transient(_)));
        assert!(matches!(&k(416), ClientError::Other(m) if m.contains("416 InvalidRange")));
        assert!(matches!(&k(400), ClientError::Other(m) if m.contains("400") && m.contains(": m")));
        let body = r#"{"error":{"code":403,"message":"x@y does not have storage.objects.get","errors":[]}}"#;
        assert_eq!(message_of(body), "x@y does not have storage.objects.get");
        assert_eq!(message_of("Not Found\nmore"), "Not Found");
    }
}
