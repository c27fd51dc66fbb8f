//! `flowfs top DIR`: a live view of a mount, one line per interval as `juicefs stats`
//! prints it: requests per second (all, GETs, PUTs and parts), MiB/s down and up, the
//! share of read bytes the node cache answered, the time reads waited, retries, and what
//! waits for upload. Asks the mount's control socket (`usage`, `status`) each interval
//! and prints the differences; no terminal library, so it reads the same in a pipe.

use std::io::{IsTerminal, Write};
use std::path::Path;
use std::time::{Duration, Instant};

use crate::cli::TopArgs;
use crate::control;
use crate::report::Report;
use crate::usage::Usage;

/// The mount could not be asked.
const EXIT_NO_ANSWER: i32 = 2;

/// Ops that move object bytes, by store: a GET's and a write's.
const GETS: &[&str] = &["GetObject", "objects.get", "GetBlob"];
const PUTS: &[&str] = &[
    "PutObject",
    "UploadPart",
    "objects.insert",
    "PutBlob",
    "PutBlock",
];

fn ask<T: serde::de::DeserializeOwned>(dir: &Path, cmd: &str) -> Result<T, String> {
    control::ask_json(dir, cmd, Duration::from_secs(10))
}

fn sum(u: &Usage, ops: &[&str]) -> u64 {
    ops.iter()
        .map(|o| u.requests.get(*o).copied().unwrap_or(0))
        .sum()
}

const HEADER: &str =
    "    time   req/s   get/s   put/s  MiB/s↓  MiB/s↑   hit%  wait s/s  retry/s  queue  queue MiB  uploading";

/// One line: the rates between `a` and `b`, `secs` apart, and the queue now.
fn line(a: &Usage, b: &Usage, secs: f64, q: &Report, clock: &str) -> String {
    let rate = |x: u64, y: u64| y.saturating_sub(x) as f64 / secs;
    let mib = |x: u64, y: u64| rate(x, y) / (1u64 << 20) as f64;
    let hit = b.cache_bytes_served.saturating_sub(a.cache_bytes_served);
    let miss = b.store_bytes_served.saturating_sub(a.store_bytes_served);
    let hit = match hit + miss {
        0 => "-".to_string(),
        n => format!("{:.1}", 100.0 * hit as f64 / n as f64),
    };
    let uploading = q
        .pending
        .list
        .iter()
        .filter(|p| p.state == "uploading")
        .count();
    format!(
        "{clock:>8} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {:>7.1} {hit:>6} {:>9.2} {:>8.1} {:>6} {:>10.1} {uploading:>10}",
        rate(a.total_requests(), b.total_requests()),
        rate(sum(a, GETS), sum(b, GETS)),
        rate(sum(a, PUTS), sum(b, PUTS)),
        mib(a.bytes_down, b.bytes_down),
        mib(a.bytes_up, b.bytes_up),
        (b.read_wait_secs - a.read_wait_secs).max(0.0) / secs,
        rate(a.retries, b.retries),
        q.pending.files,
        q.pending.bytes as f64 / (1u64 << 20) as f64,
    )
}

/// The wall clock, HH:MM:SS (UTC).
fn clock() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    format!(
        "{:02}:{:02}:{:02}",
        secs / 3600 % 24,
        secs / 60 % 60,
        secs % 60
    )
}

/// Prints a line per interval until interrupted (or `--count` lines).
pub fn top(args: &TopArgs) -> i32 {
    let abs = std::path::absolute(&args.dir).unwrap_or_else(|_| args.dir.clone());
    let dir = abs.canonicalize().unwrap_or(abs);
    if !(args.interval >= 0.1 && args.interval <= 3600.0) {
        eprintln!("flowfs: --interval must be between 0.1 and 3600 seconds");
        return 1;
    }
    let every = Duration::from_secs_f64(args.interval);
    let tty = std::io::stdout().is_terminal();
    let mut prev: Option<(Usage, Instant)> = None;
    let mut printed = 0u64;
    let mut out = std::io::stdout().lock();
    loop {
        let now = Instant::now();
        let got = ask::<Usage>(&dir, "usage").and_then(|u| Ok((u, ask::<Report>(&dir, "status")?)));
        let (usage, queue) = match got {
            Ok(g) => g,
            Err(why) if prev.is_some() => {
                let _ = writeln!(
                    out,
                    "flowfs: the mount at {} stopped answering: {why}",
                    dir.display()
                );
                return 0;
            }
            Err(why) => {
                eprintln!("flowfs: cannot ask the mount at {}: {why}", dir.display());
                return EXIT_NO_ANSWER;
            }
        };
        if let Some((before, then)) = &prev {
            if printed.is_multiple_of(20) && (tty || printed == 0) {
                let _ = writeln!(out, "{HEADER}");
            }
            let secs = now.duration_since(*then).as_secs_f64().max(1e-3);
            let _ = writeln!(out, "{}", line(before, &usage, secs, &queue, &clock()));
            let _ = out.flush();
            printed += 1;
            if args.count.is_some_and(|c| printed >= c) {
                return 0;
            }
        }
        prev = Some((usage, now));
        std::thread::sleep(every.saturating_sub(now.elapsed()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn report(files: usize, bytes: u64) -> Report {
        let mut r = crate::report::report_of(&Default::default(), Path::new("/m"), "s3://b", false);
        r.pending.files = files;
        r.pending.bytes = bytes;
        r
    }

    #[test]
    fn a_line_is_the_rates_between_two_reports() {
        let a = Usage::default();
        let b = Usage {
            requests: [
                ("GetObject".into(), 20),
                ("PutObject".into(), 4),
                ("HeadObject".into(), 6),
            ]
            .into(),
            bytes_down: 4 << 20,
            cache_bytes_served: 300,
            store_bytes_served: 100,
            ..Usage::default()
        };
        let l = line(&a, &b, 2.0, &report(3, 1 << 20), "12:00:00");
        let cols: Vec<&str> = l.split_whitespace().collect();
        assert_eq!(
            cols,
            [
                "12:00:00", "15.0", "10.0", "2.0", "2.0", "0.0", "75.0", "0.00", "0.0", "3", "1.0",
                "0"
            ]
        );
        // "wait s/s" and "queue MiB" are two words each.
        assert_eq!(HEADER.split_whitespace().count(), cols.len() + 2);
    }
}
