//! What a mount did (`Usage`): the requests it sent by the store's name for them, the
//! bytes it moved, what its reads were answered from and the time they waited, and what
//! that cost at a price table. Made in the mount process (the control socket's `usage`,
//! and the last line of `unmount --usage`), written by `flowfs unmount --report` and
//! `flowfs run --report`, added up by `flowfs report`.

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};

use crate::cost::{Cost, Prices};
use crate::stop::Ending;

/// The JSON of a usage report. Field names are stable; new fields may be added.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq)]
pub struct Usage {
    pub version: u32,
    /// The mounts' sources (`s3://BUCKET/PREFIX`, ...), one per mount added up here.
    pub sources: Vec<String>,
    /// Seconds the mounts were up, summed.
    pub mount_secs: f64,
    /// op → HTTP requests sent (retries included), as `flowfs_requests_total` counts.
    pub requests: BTreeMap<String, u64>,
    /// outcome (ok, retried, throttled, failed) → HTTP requests sent.
    pub outcomes: BTreeMap<String, u64>,
    /// Object bytes received from the store (GET bodies).
    pub bytes_down: u64,
    /// Object bytes sent to the store (PUT and part bodies).
    pub bytes_up: u64,
    /// Bytes of reads answered at once from the node cache (or fetched-ahead memory).
    pub cache_bytes_served: u64,
    /// Bytes of reads that waited for the store.
    pub store_bytes_served: u64,
    /// Seconds reads waited for the store, summed over reads.
    pub read_wait_secs: f64,
    /// Seconds from sending each request to its answer's head, summed over requests.
    pub store_wait_secs: f64,
    /// Calls sent again after a retryable failure; of those failures, throttling; calls
    /// given up although retryable.
    pub retries: u64,
    pub throttled: u64,
    pub gave_up: u64,
    /// The total of `cost` (USD).
    pub cost_usd: f64,
    pub cost: Cost,
}

fn round6(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl Usage {
    /// What the mount of `ending` did since it started, unpriced.
    pub fn of(ending: &Ending) -> Usage {
        let mut u = Usage {
            version: 1,
            sources: vec![ending.source.clone()],
            mount_secs: round6(ending.started.elapsed().as_secs_f64()),
            ..Usage::default()
        };
        if let Some(client) = &ending.retries {
            let c = client.metrics().snapshot();
            u.requests = c.requests;
            u.outcomes = c.outcomes;
            u.bytes_down = c.bytes_down;
            u.bytes_up = c.bytes_up;
            u.store_wait_secs = round6(c.store_wait_secs);
            u.retries = c.retries;
            u.throttled = c.throttled;
            u.gave_up = c.gave_up;
        }
        let r = ending.fs.read_stats();
        u.cache_bytes_served = r.hit_bytes;
        u.store_bytes_served = r.miss_bytes;
        u.read_wait_secs = round6(r.wait_micros as f64 / 1e6);
        u
    }

    /// What the mount did, once the requests still on their way (a lookup's losing HEAD,
    /// a listing started behind it) have been answered, waiting at most 2 s: the report of
    /// an unmount counts what a proxy in front of the store saw.
    pub fn settled(ending: &Ending) -> Usage {
        if let Some(client) = &ending.retries {
            let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
            while client.metrics().in_flight() > 0 && std::time::Instant::now() < deadline {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
        }
        Usage::of(ending)
    }

    /// Adds `other` (another mount, another task) to this one; the cost is made anew by
    /// `priced`.
    pub fn add(&mut self, other: &Usage) {
        self.version = self.version.max(other.version);
        self.sources.extend(other.sources.iter().cloned());
        self.mount_secs = round6(self.mount_secs + other.mount_secs);
        for (op, n) in &other.requests {
            *self.requests.entry(op.clone()).or_insert(0) += n;
        }
        for (o, n) in &other.outcomes {
            *self.outcomes.entry(o.clone()).or_insert(0) += n;
        }
        self.bytes_down += other.bytes_down;
        self.bytes_up += other.bytes_up;
        self.cache_bytes_served += other.cache_bytes_served;
        self.store_bytes_served += other.store_bytes_served;
        self.read_wait_secs = round6(self.read_wait_secs + other.read_wait_secs);
        self.store_wait_secs = round6(self.store_wait_secs + other.store_wait_secs);
        self.retries += other.retries;
        self.throttled += other.throttled;
        self.gave_up += other.gave_up;
    }

    /// This usage with its cost at `prices`.
    pub fn priced(mut self, prices: &Prices) -> Usage {
        self.cost = prices.cost(&self.requests, self.bytes_down);
        self.cost_usd = self.cost.total();
        self
    }

    /// HTTP requests sent, every op.
    pub fn total_requests(&self) -> u64 {
        self.requests.values().sum()
    }

    /// Writes the report to `path`, readable by its owner only (it names buckets and keys'
    /// prefixes); replaces a file there.
    pub fn write(&self, path: &Path) -> Result<()> {
        let json = serde_json::to_string_pretty(self)?;
        let tmp = path.with_extension("json.tmp");
        let mut f = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .truncate(true)
            .mode(0o600)
            .open(&tmp)
            .with_context(|| format!("cannot write the report {}", tmp.display()))?;
        f.write_all(json.as_bytes())?;
        f.write_all(b"\n")?;
        std::fs::rename(&tmp, path)
            .with_context(|| format!("cannot write the report {}", path.display()))
    }

    /// The report in `path`.
    pub fn read(path: &Path) -> Result<Usage> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("cannot read {}", path.display()))?;
        serde_json::from_str(&text)
            .with_context(|| format!("{} is not a flowfs usage report", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn usage(op: &str, n: u64, down: u64) -> Usage {
        Usage {
            version: 1,
            sources: vec![format!("s3://b/{op}")],
            requests: [(op.to_string(), n)].into(),
            outcomes: [("ok".to_string(), n)].into(),
            bytes_down: down,
            cache_bytes_served: 5,
            ..Usage::default()
        }
    }

    #[test]
    fn reports_add_up_by_op_and_are_priced_anew() {
        let mut u = usage("GetObject", 1000, 10);
        u.add(&usage("GetObject", 500, 20));
        u.add(&usage("PutObject", 2000, 0));
        let u = u.priced(&Prices::load(None).unwrap());
        assert_eq!(u.requests["GetObject"], 1500);
        assert_eq!(u.requests["PutObject"], 2000);
        assert_eq!(u.outcomes["ok"], 3500);
        assert_eq!((u.bytes_down, u.cache_bytes_served), (30, 15));
        assert_eq!(u.sources.len(), 3);
        // 1.5 thousand GETs at $0.0004, 2 thousand PUTs at $0.005.
        assert!((u.cost_usd - (1.5 * 0.0004 + 2.0 * 0.005)).abs() < 1e-12);
    }

    #[test]
    fn a_report_survives_its_file_and_is_private() {
        use std::os::unix::fs::PermissionsExt;
        let d = std::env::temp_dir().join(format!("flowfs-usage-{}", std::process::id()));
        std::fs::create_dir_all(&d).unwrap();
        let f = d.join("r.json");
        let u = usage("GetObject", 3, 4).priced(&Prices::load(None).unwrap());
        u.write(&f).unwrap();
        let mode = std::fs::metadata(&f).unwrap().permissions().mode() & 0o777;
        assert_eq!(Usage::read(&f).unwrap(), u);
        std::fs::write(&f, "{}x").unwrap();
        let e = format!("{:#}", Usage::read(&f).unwrap_err());
        std::fs::remove_dir_all(&d).unwrap();
        assert_eq!(mode, 0o600);
        assert!(e.contains("is not a flowfs usage report"), "{e}");
    }
}
