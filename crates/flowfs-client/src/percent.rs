//! Percent-encoding of metadata values and keys: what every encoding of the crate (a
//! symlink's target, extended attributes, copy sources) shares.

/// The inverse of `percent_encode` (a `%` not followed by two hex digits is kept).
pub fn percent_decode(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' && i + 2 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 3], 16) {
                out.push(v);
                i += 3;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// A metadata value any store keeps as it is: S3 user metadata is ASCII, so a symlink's
/// target (any bytes but NUL) is written with `%XX` for `%`, spaces, controls and
/// non-ASCII bytes.
pub fn percent_encode(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    percent_escape(&mut out, s, |b| (0x21..0x7f).contains(&b) && b != b'%');
    out
}

/// RFC 3986's unreserved characters: what a URL carries as they are.
pub(crate) fn unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.' | b'~')
}

/// Unreserved or `/`: a key in a URL's path (or a copy source) keeps its slashes.
pub(crate) fn unreserved_or_slash(b: u8) -> bool {
    unreserved(b) || b == b'/'
}

/// A query value, percent-encoded.
pub(crate) fn query_value(v: &str) -> String {
    let mut out = String::with_capacity(v.len());
    percent_escape(&mut out, v, unreserved);
    out
}

/// Appends `s` to `out`, each byte `keep` refuses as `%XX`: what every percent-encoding
/// of the crate (metadata values, copy sources) shares.
pub(crate) fn percent_escape(out: &mut String, s: &str, keep: impl Fn(u8) -> bool) {
    for b in s.bytes() {
        if keep(b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}
