//! What requests and bytes cost: a price table (`Prices`, JSON; the built-in one is S3
//! Standard in us-east-1 with GCS Standard and Azure Blob Hot beside it, each priced by
//! its own request names) and the cost of a usage report at it (`Cost`).

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::{Deserialize, Serialize};

/// The built-in table, also shipped as docs/prices/default.json.
const DEFAULT: &str = include_str!("../../../docs/prices/default.json");

/// A price table: USD per 1,000 requests by the store's name for them, and per GB
/// (10^9 bytes) received from the store.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Prices {
    /// What the table prices, and when its figures were taken.
    pub name: String,
    /// USD per 1,000 requests, by op (`GetObject`, `objects.get`, `GetBlob`, ...).
    pub per_1000_requests: BTreeMap<String, f64>,
    /// USD per GB the store sends (egress). 0 where tasks run in the bucket's region.
    #[serde(default)]
    pub egress_per_gb: f64,
}

impl Prices {
    /// The table in `path`, or the built-in one.
    pub fn load(path: Option<&Path>) -> Result<Prices> {
        let (text, from) = match path {
            Some(p) => (
                std::fs::read_to_string(p)
                    .with_context(|| format!("cannot read the price table {}", p.display()))?,
                p.display().to_string(),
            ),
            None => (DEFAULT.to_string(), "the built-in table".to_string()),
        };
        let prices: Prices = serde_json::from_str(&text).with_context(|| {
            format!("{from} is not a price table (see docs/CONFIGURATION.md, Cost reports)")
        })?;
        let bad = (prices.per_1000_requests.iter()).find(|(_, v)| !(v.is_finite() && **v >= 0.0));
        if let Some((op, v)) = bad {
            bail!("{from}: the price of {op} must be a number of USD from 0, not {v}");
        }
        if !(prices.egress_per_gb.is_finite() && prices.egress_per_gb >= 0.0) {
            bail!("{from}: egress_per_gb must be a number of USD from 0");
        }
        Ok(prices)
    }

    /// The cost of `requests` (op → count) and `bytes_down` at this table.
    pub fn cost(&self, requests: &BTreeMap<String, u64>, bytes_down: u64) -> Cost {
        let mut c = Cost {
            prices: self.name.clone(),
            ..Cost::default()
        };
        for (op, &n) in requests {
            match self.per_1000_requests.get(op) {
                Some(p) => {
                    let usd = p * n as f64 / 1000.0;
                    c.requests_usd += usd;
                    c.by_op_usd.insert(op.clone(), usd);
                }
                None => c.unpriced.push(op.clone()),
            }
        }
        c.egress_usd = self.egress_per_gb * bytes_down as f64 / 1e9;
        c
    }
}

/// A cost at one price table. `unpriced` names the ops the table has no price for
/// (counted at 0).
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Cost {
    pub prices: String,
    pub requests_usd: f64,
    pub egress_usd: f64,
    pub by_op_usd: BTreeMap<String, f64>,
    pub unpriced: Vec<String>,
}

impl Cost {
    pub fn total(&self) -> f64 {
        self.requests_usd + self.egress_usd
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_builtin_table_prices_every_request_of_the_three_stores() {
        let p = Prices::load(None).unwrap();
        let ops = [
            "GetObject",
            "HeadObject",
            "ListObjectsV2",
            "PutObject",
            "CreateMultipartUpload",
            "UploadPart",
            "CompleteMultipartUpload",
            "CopyObject",
            "DeleteObject",
            "AbortMultipartUpload",
            "ListMultipartUploads",
            "UploadPartCopy",
            "objects.get",
            "objects.getMetadata",
            "objects.list",
            "objects.insert",
            "objects.compose",
            "objects.rewrite",
            "objects.update",
            "objects.delete",
            "GetBlob",
            "GetBlobProperties",
            "ListBlobs",
            "PutBlob",
            "PutBlock",
            "PutBlockList",
            "GetBlockList",
            "SetBlobMetadata",
            "CopyBlob",
            "DeleteBlob",
        ];
        for op in ops {
            assert!(p.per_1000_requests.contains_key(op), "{op} has no price");
        }
        assert_eq!(p.per_1000_requests["GetObject"], 0.0004);
        assert_eq!(p.per_1000_requests["PutObject"], 0.005);
    }

    #[test]
    fn a_cost_is_requests_by_their_price_and_egress_by_the_gb() {
        let p = Prices {
            name: "t".into(),
            per_1000_requests: [
                ("GetObject".to_string(), 0.4),
                ("PutObject".to_string(), 5.0),
            ]
            .into(),
            egress_per_gb: 0.09,
        };
        let req = [
            ("GetObject".to_string(), 2500),
            ("PutObject".to_string(), 10),
            ("Odd".to_string(), 3),
        ]
        .into();
        let c = p.cost(&req, 2_000_000_000);
        assert!((c.requests_usd - (1.0 + 0.05)).abs() < 1e-12);
        assert!((c.egress_usd - 0.18).abs() < 1e-12);
        assert!((c.total() - 1.23).abs() < 1e-12);
        assert_eq!(c.unpriced, ["Odd"]);
    }

    #[test]
    fn a_bad_table_is_named_with_its_fault() {
        let d = tempfile_dir();
        let f = d.join("p.json");
        std::fs::write(&f, r#"{"name":"x","per_1000_requests":{"GetObject":-1}}"#).unwrap();
        let e = format!("{:#}", Prices::load(Some(&f)).unwrap_err());
        assert!(e.contains("GetObject") && e.contains("-1"), "{e}");
        std::fs::write(&f, r#"{"name":"x","per_1000":{}}"#).unwrap();
        let e = format!("{:#}", Prices::load(Some(&f)).unwrap_err());
        assert!(e.contains("is not a price table"), "{e}");
        std::fs::remove_dir_all(d).unwrap();
    }

    fn tempfile_dir() -> std::path::PathBuf {
        let d = std::env::temp_dir().join(format!("flowfs-cost-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        d
    }
}
