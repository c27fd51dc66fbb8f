//! What the XML answers of S3 and Azure Blob have in common for flowfs: each needs a
//! handful of fields, and an element's path is all that tells them apart, so they are
//! read event by event with quick-xml (`walk`) rather than into declared types.

use quick_xml::events::{BytesStart, Event};
use quick_xml::Reader;

use crate::meta::percent_decode;
use crate::{ClientError, Result};

fn bad(store: &str, what: &str, e: impl std::fmt::Display) -> ClientError {
    ClientError::Other(format!(
        "unreadable {what} answer from the {store} endpoint: {e}"
    ))
}

/// Calls `text(path, value, encoded)` for the text of every element, `path` the names
/// from the root joined by `/`, `encoded` whether the element said `Encoded="true"` (a
/// name with characters XML cannot hold, percent-encoded by Azure). `store` and `what`
/// name the store and the answer in the error of a body that is not XML.
pub(crate) fn walk(
    xml: &str,
    store: &str,
    what: &str,
    mut text: impl FnMut(&str, String, bool),
) -> Result<()> {
    let bad = |e: &dyn std::fmt::Display| bad(store, what, e);
    let mut r = Reader::from_str(xml);
    let mut path = String::new();
    let mut encoded = false;
    let mut value = String::new();
    loop {
        match r.read_event().map_err(|e| bad(&e))? {
            Event::Start(e) => {
                path.push('/');
                path.push_str(&String::from_utf8_lossy(e.local_name().as_ref()));
                encoded = is_encoded(&e);
                value.clear();
            }
            // `decode`, not `xml_content`: a key may hold `\r`, which EOL normalisation
            // would turn into `\n`.
            Event::Text(t) => value.push_str(&t.decode().map_err(|e| bad(&e))?),
            Event::GeneralRef(g) => {
                let name = String::from_utf8_lossy(&g).into_owned();
                match g.resolve_char_ref().map_err(|e| bad(&e))? {
                    Some(c) => value.push(c),
                    None => value.push_str(
                        quick_xml::escape::resolve_xml_entity(&name)
                            .ok_or_else(|| bad(&format!("entity &{name};")))?,
                    ),
                }
            }
            Event::CData(c) => value.push_str(&String::from_utf8_lossy(&c)),
            Event::End(_) => {
                if !value.is_empty() {
                    text(&path, std::mem::take(&mut value), encoded);
                }
                path.truncate(path.rfind('/').unwrap_or(0));
            }
            Event::Eof => return Ok(()),
            _ => {}
        }
    }
}

fn is_encoded(e: &BytesStart) -> bool {
    e.attributes()
        .flatten()
        .any(|a| a.key.local_name().as_ref() == b"Encoded" && a.value.as_ref() == b"true")
}

/// A name as `walk` gave it, percent-decoded if its element said it was encoded.
pub(crate) fn name_of(value: String, encoded: bool) -> String {
    if encoded {
        percent_decode(&value)
    } else {
        value
    }
}

/// `s` with the characters XML text cannot hold as they are escaped (`&`, `<`, `>`,
/// quotes).
pub(crate) fn escape(s: &str) -> String {
    quick_xml::escape::escape(s).into_owned()
}
