//! The keys a store changes or refuses. Real S3 keeps any UTF-8 key of up to 1,024 bytes
//! as it is sent; other stores do not, and a file whose key the store changes vanishes
//! after its upload (SeaweedFS stores `x\y` as `x/y`), one it refuses can never be
//! uploaded (issue 47). Each backend says which rules hold for its store; the file system
//! refuses such names at create and rename (EINVAL) and treats them as absent at lookup.
//!
//! The rules are what the stores were seen to do, not guesses: the conformance suite's
//! `keys::the_store_keeps_exactly_the_keys_its_rules_allow` writes a set of probe names to
//! every store it runs on and fails if a rule here disagrees with what came back.

/// One way a store changes or refuses keys.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyRule {
    /// `\` is taken for `/`: `x\y` is stored as `x/y`, `x\` as the directory marker
    /// `x/`, and a `..\` segment is refused (SeaweedFS 4.48).
    Backslash,
    /// A `.` or `..` path segment is refused or resolved away.
    DotSegment,
    /// A path segment longer than 255 bytes is refused (SeaweedFS: KeyTooLongError).
    LongSegment,
    /// A carriage return or line feed is refused (Google Cloud Storage's naming rules).
    LineBreak,
}

impl KeyRule {
    /// What the store does, for the log line of a refused name.
    pub fn describe(self) -> &'static str {
        match self {
            KeyRule::Backslash => "the store takes '\\' for '/' (the name would change)",
            KeyRule::DotSegment => "the store refuses a '.' or '..' path segment",
            KeyRule::LongSegment => "the store refuses a path segment over 255 bytes",
            KeyRule::LineBreak => "the store refuses a carriage return or line feed in a key",
        }
    }

    /// Whether `key` breaks this rule.
    fn breaks(self, key: &str) -> bool {
        match self {
            KeyRule::Backslash => key.contains('\\'),
            KeyRule::DotSegment => key.split('/').any(|s| s == "." || s == ".."),
            KeyRule::LongSegment => key.split('/').any(|s| s.len() > 255),
            KeyRule::LineBreak => key.contains(['\r', '\n']),
        }
    }
}

/// The rules of one store.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KeyRules {
    /// Which store these are, for the log.
    pub store: &'static str,
    rules: &'static [KeyRule],
}

impl KeyRules {
    /// AWS S3, and any S3 server not known to differ: keys are kept as sent.
    pub const S3: KeyRules = KeyRules {
        store: "S3",
        rules: &[],
    };
    /// SeaweedFS (4.48, probed): `\` is `/`, dot segments and segments over 255 bytes
    /// are refused.
    pub const SEAWEEDFS: KeyRules = KeyRules {
        store: "SeaweedFS",
        rules: &[
            KeyRule::Backslash,
            KeyRule::DotSegment,
            KeyRule::LongSegment,
        ],
    };
    /// Google Cloud Storage: its documented rule ("object names cannot contain carriage
    /// return or line feed characters"); fake-gcs-server 1.54.0 keeps every probe name,
    /// those too (a deviation the conformance suite names).
    pub const GCS: KeyRules = KeyRules {
        store: "GCS",
        rules: &[KeyRule::LineBreak],
    };
    /// Azure Blob Storage (Azurite 3.35.0, probed): `\` is `/`, as the service documents;
    /// a dot segment is resolved by the URL before it is signed, and refused.
    pub const AZURE: KeyRules = KeyRules {
        store: "Azure Blob",
        rules: &[KeyRule::Backslash, KeyRule::DotSegment],
    };

    /// The first rule `key` breaks, if any.
    pub fn check(&self, key: &str) -> Result<(), KeyRule> {
        match self.rules.iter().find(|r| r.breaks(key)) {
            Some(r) => Err(*r),
            None => Ok(()),
        }
    }

    /// The rules of an S3 server that names itself `server` in its answers' `Server`
    /// header.
    pub fn of_s3_server(server: &str) -> KeyRules {
        if server.starts_with("SeaweedFS") {
            KeyRules::SEAWEEDFS
        } else {
            KeyRules::S3
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_rule_finds_what_it_names_and_nothing_else() {
        let sw = KeyRules::SEAWEEDFS;
        assert_eq!(sw.check("d/x\\y"), Err(KeyRule::Backslash));
        assert_eq!(sw.check("d/..\\bar"), Err(KeyRule::Backslash));
        assert_eq!(sw.check("d/../x"), Err(KeyRule::DotSegment));
        assert_eq!(
            sw.check(&format!("d/{}", "x".repeat(256))),
            Err(KeyRule::LongSegment)
        );
        assert_eq!(sw.check(&format!("d/{}", "x".repeat(255))), Ok(()));
        for fine in ["a..b", "...", "trail.", "sp ", "nl\nx", "é", "d/", ""] {
            assert_eq!(sw.check(fine), Ok(()), "{fine:?}");
        }
        assert_eq!(KeyRules::GCS.check("a\rb"), Err(KeyRule::LineBreak));
        assert_eq!(KeyRules::S3.check("x\\y/../z\n"), Ok(()));
        assert_eq!(KeyRules::of_s3_server("SeaweedFS 8000GB 4.48"), sw);
        assert_eq!(KeyRules::of_s3_server("AmazonS3"), KeyRules::S3);
    }
}
