//! Full-object checksums (issue 49): what an upload carries so that the store proves it
//! holds the bytes that were staged, and what a whole GET is checked against so that a
//! body damaged on its way is never handed over as data.
//!
//! S3 uploads carry CRC-64/NVME (`x-amz-checksum-crc64nvme`), the one S3 checksum that is
//! full-object for multipart uploads too; GCS's objects carry CRC-32C. Both are computed
//! by crc-fast with the CPU's carry-less multiply; the unit test below prints the rate
//! (`cargo test --release -p flowfs-client checksum -- --nocapture`).

use base64::engine::general_purpose::STANDARD;
use base64::Engine;
use crc_fast::{CrcAlgorithm, Digest};

/// One object's checksum as its store names and encodes it: `name` is the store's
/// (`crc64nvme`, `crc32c`, `crc32`), `value` its base64 of the big-endian CRC. A file
/// system above shows it as the read-only xattr `user.flowfs.<name>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checksum {
    /// The algorithm, as the store names it (lower case).
    pub name: &'static str,
    /// The value as the store sends it: base64 of the big-endian bytes.
    pub value: String,
}

/// The CRCs flowfs computes and checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Crc {
    /// CRC-64/NVME: S3's full-object checksum.
    Crc64Nvme,
    /// CRC-32C (Castagnoli): GCS's, and one of S3's.
    Crc32c,
    /// CRC-32 (ISO-HDLC): one of S3's, sent by some tools.
    Crc32,
}

impl Crc {
    /// The algorithm a store names `name` (lower case), if flowfs computes it.
    pub fn named(name: &str) -> Option<Crc> {
        match name {
            "crc64nvme" => Some(Crc::Crc64Nvme),
            "crc32c" => Some(Crc::Crc32c),
            "crc32" => Some(Crc::Crc32),
            _ => None,
        }
    }

    /// The store's name of the algorithm.
    pub fn name(self) -> &'static str {
        match self {
            Crc::Crc64Nvme => "crc64nvme",
            Crc::Crc32c => "crc32c",
            Crc::Crc32 => "crc32",
        }
    }

    fn algorithm(self) -> CrcAlgorithm {
        match self {
            Crc::Crc64Nvme => CrcAlgorithm::Crc64Nvme,
            Crc::Crc32c => CrcAlgorithm::Crc32Iscsi,
            Crc::Crc32 => CrcAlgorithm::Crc32IsoHdlc,
        }
    }

    /// The checksum of `bytes`, encoded as the store wants it.
    pub fn of(self, bytes: &[u8]) -> Checksum {
        self.encode(crc_fast::checksum(self.algorithm(), bytes))
    }

    fn encode(self, crc: u64) -> Checksum {
        let value = match self {
            Crc::Crc64Nvme => STANDARD.encode(crc.to_be_bytes()),
            Crc::Crc32c | Crc::Crc32 => STANDARD.encode((crc as u32).to_be_bytes()),
        };
        Checksum {
            name: self.name(),
            value,
        }
    }
}

/// A checksum computed over a body as it arrives, checked against the store's at its end.
pub(crate) struct Running {
    crc: Crc,
    digest: Digest,
    want: Checksum,
}

impl Running {
    /// A check of a body against `want`, if flowfs computes its algorithm (a composite
    /// checksum of a multipart upload, `...-N`, is not of the body and is not checked).
    pub(crate) fn against(want: Checksum) -> Option<Running> {
        let crc = Crc::named(want.name)?;
        if want.value.contains('-') {
            return None;
        }
        let digest = Digest::new(crc.algorithm());
        Some(Running { crc, digest, want })
    }

    pub(crate) fn update(&mut self, bytes: &[u8]) {
        self.digest.update(bytes);
    }

    /// `Err` with what was expected and what came when the body does not match.
    pub(crate) fn check(&self, key: &str) -> crate::Result<()> {
        let got = self.crc.encode(self.digest.finalize());
        if got == self.want {
            return Ok(());
        }
        Err(crate::ClientError::Corrupt(format!(
            "{key}: body's {} is {}, the store's is {}",
            got.name, got.value, self.want.value
        )))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    #[test]
    fn the_check_values_of_the_catalogue() {
        // The "123456789" check values of the CRC catalogue, big-endian, in base64.
        let of = |c: Crc| STANDARD.decode(c.of(b"123456789").value).unwrap();
        assert_eq!(of(Crc::Crc64Nvme), 0xae8b14860a799888u64.to_be_bytes());
        assert_eq!(of(Crc::Crc32c), 0xe3069283u32.to_be_bytes());
        assert_eq!(of(Crc::Crc32), 0xcbf43926u32.to_be_bytes());
    }

    #[test]
    fn a_running_check_finds_one_flipped_bit_and_skips_composites() {
        let body = vec![7u8; 100_000];
        let mut r = Running::against(Crc::Crc64Nvme.of(&body)).unwrap();
        r.update(&body[..5]);
        r.update(&body[5..]);
        r.check("k").unwrap();
        let mut bad = body.clone();
        bad[4242] ^= 1;
        let mut r = Running::against(Crc::Crc64Nvme.of(&body)).unwrap();
        r.update(&bad);
        assert!(matches!(r.check("k"), Err(crate::ClientError::Corrupt(_))));
        let composite = Checksum {
            name: "crc32c",
            value: "AAAAAA==-3".into(),
        };
        assert!(Running::against(composite).is_none());
        let sha = Checksum {
            name: "sha256",
            value: "x".into(),
        };
        assert!(Running::against(sha).is_none());
    }

    #[test]
    fn rate_per_core() {
        let body = vec![0x5au8; 64 << 20];
        for crc in [Crc::Crc64Nvme, Crc::Crc32c] {
            let t = Instant::now();
            let v = crc.of(&body);
            let s = t.elapsed().as_secs_f64();
            println!(
                "{}: {:.1} GB/s ({})",
                crc.name(),
                body.len() as f64 / s / 1e9,
                v.value
            );
        }
    }
}
