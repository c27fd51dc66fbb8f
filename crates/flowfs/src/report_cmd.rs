//! `flowfs report`: adds up the usage reports of many tasks (files, or directories
//! searched for `flowfs-report*.json`) and prints one table of requests, bytes, cache
//! and cost at one price table, or the sum as a usage report of its own (`--json`).

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::cli::ReportArgs;
use crate::cost::Prices;
use crate::usage::Usage;

/// Exit status: 0, or 1 with the reason on stderr.
pub fn report(args: &ReportArgs) -> i32 {
    match sum(args) {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("flowfs: {}", format!("{e:#}").replace('\n', " "));
            1
        }
    }
}

fn sum(args: &ReportArgs) -> Result<()> {
    let prices = Prices::load(args.prices.as_deref())?;
    let mut files = Vec::new();
    for p in &args.paths {
        if p.is_dir() {
            find_reports(p, &mut files)?;
        } else {
            files.push(p.clone());
        }
    }
    if files.is_empty() && args.mounts.is_empty() {
        bail!("no flowfs-report*.json found below the directories given");
    }
    let mut total = Usage::default();
    for f in &files {
        total.add(&Usage::read(f)?);
    }
    for dir in &args.mounts {
        total.add(&live(dir)?);
    }
    let total = total.priced(&prices);
    if args.json {
        println!("{}", serde_json::to_string_pretty(&total)?);
    } else {
        print!("{}", table(&total, files.len() + args.mounts.len()));
    }
    for op in &total.cost.unpriced {
        eprintln!("flowfs: the price table has no price for {op}; counted at 0");
    }
    Ok(())
}

/// What the running mount at `dir` did so far (the control socket's `usage`).
fn live(dir: &Path) -> Result<Usage> {
    let abs = std::path::absolute(dir)?;
    let dir = abs.canonicalize().unwrap_or(abs);
    crate::control::ask_json(&dir, "usage", std::time::Duration::from_secs(10))
        .map_err(|why| anyhow::anyhow!("cannot ask the mount at {}: {why}", dir.display()))
}

/// Files named `flowfs-report*.json` below `dir`, in name order.
fn find_reports(dir: &Path, out: &mut Vec<PathBuf>) -> Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.flatten().collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let (path, name) = (e.path(), e.file_name());
        let name = name.to_string_lossy();
        let kind = e.file_type()?;
        if kind.is_dir() {
            find_reports(&path, out)?;
        } else if name.starts_with("flowfs-report") && name.ends_with(".json") {
            out.push(path);
        }
    }
    Ok(())
}

fn mib(b: u64) -> String {
    format!("{:.1} MiB", b as f64 / (1u64 << 20) as f64)
}

/// The sum as a table for a terminal.
fn table(u: &Usage, reports: usize) -> String {
    let mut t = format!("{reports} reports, {} mounts\n\n", u.sources.len());
    t.push_str(&format!(
        "{:<28} {:>12} {:>12}\n",
        "request", "count", "USD"
    ));
    for (op, n) in &u.requests {
        let usd = u.cost.by_op_usd.get(op).copied().unwrap_or(0.0);
        t.push_str(&format!("{op:<28} {n:>12} {usd:>12.6}\n"));
    }
    t.push_str(&format!(
        "{:<28} {:>12} {:>12.6}\n",
        "all requests",
        u.total_requests(),
        u.cost.requests_usd
    ));
    t.push_str(&format!(
        "{:<28} {:>12} {:>12.6}\n\n",
        "egress",
        mib(u.bytes_down),
        u.cost.egress_usd
    ));
    let served = u.cache_bytes_served + u.store_bytes_served;
    let ratio = match served {
        0 => "-".to_string(),
        _ => format!(
            "{:.1} %",
            100.0 * u.cache_bytes_served as f64 / served as f64
        ),
    };
    let rows = [
        ("bytes down", mib(u.bytes_down)),
        ("bytes up", mib(u.bytes_up)),
        ("read from cache", mib(u.cache_bytes_served)),
        ("cache hit (bytes)", ratio),
        ("reads waited", format!("{:.1} s", u.read_wait_secs)),
        ("retries", u.retries.to_string()),
        ("throttled", u.throttled.to_string()),
        ("cost", format!("{:.6} USD", u.cost_usd)),
        ("prices", u.cost.prices.clone()),
    ];
    for (k, v) in rows {
        t.push_str(&format!("{k:<28} {v}\n"));
    }
    t
}
