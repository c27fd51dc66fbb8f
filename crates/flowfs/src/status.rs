//! `flowfs status DIR`: what a running mount holds that is not durable yet, what failed,
//! and what recovery did. The mount answers the control socket's `status` with one line
//! of JSON (`Report`); this side prints it as text or passes the JSON on.

use std::path::Path;
use std::time::{Duration, SystemTime};

use flowfs_fs::{PendingState, Status};
use serde::{Deserialize, Serialize};

use crate::control;
use crate::stop::Ending;

/// Everything durable and nothing failed.
pub const EXIT_DURABLE: i32 = 0;
/// Something is pending or failed.
pub const EXIT_PENDING: i32 = 1;
/// The mount could not be asked.
pub const EXIT_NO_ANSWER: i32 = 2;

/// The JSON of `flowfs status --json`. Field names are stable; new fields may be added,
/// so readers must ignore fields they do not know.
#[derive(Debug, Serialize, Deserialize)]
pub struct Report {
    pub version: u32,
    pub mountpoint: String,
    pub source: String,
    pub cache_dir: String,
    pub pid: u32,
    /// An unmount is under way (flushing).
    pub unmounting: bool,
    /// Nothing pending and nothing failed.
    pub durable: bool,
    pub pending: Pending,
    pub failures: Vec<FailureItem>,
    pub recovery: Vec<RecoveryItem>,
    /// What the retry layer did since the mount started.
    #[serde(default)]
    pub retries: Retries,
    /// What was fetched ahead of readers and walkers since the mount started.
    #[serde(default)]
    pub read_ahead: ReadAheadItem,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ReadAheadItem {
    /// Directories listed ahead of a walk (find, du, ls -R).
    pub listings: u64,
    /// Of those, too big for one page and dropped (listed again when reached).
    pub listings_dropped: u64,
    /// Small files fetched ahead of a reader of their directory.
    pub files: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Of those files, the ones a reader opened since; the rest is the prefetch's waste
    /// so far.
    pub files_read: u64,
    /// Their bytes.
    pub bytes_read: u64,
}

#[derive(Debug, Default, Serialize, Deserialize)]
pub struct Retries {
    /// Requests sent again after a retryable failure.
    pub retried: u64,
    /// Failures that were throttling (SlowDown, 429).
    pub throttled: u64,
    /// Requests that failed although retryable: the budget or the attempts were spent.
    pub gave_up: u64,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct Pending {
    pub files: usize,
    pub bytes: u64,
    /// Seconds since the oldest pending content was written; null when nothing is pending.
    pub oldest_age_secs: Option<f64>,
    pub list: Vec<PendingItem>,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct PendingItem {
    pub key: String,
    pub bytes: u64,
    pub age_secs: f64,
    /// `waiting` (no upload asked yet), `queued`, `uploading` or `failed`.
    pub state: String,
    pub open_for_writing: bool,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct FailureItem {
    pub key: String,
    pub reason: String,
}

#[derive(Debug, Serialize, Deserialize)]
pub struct RecoveryItem {
    pub key: String,
    pub uploaded: bool,
    pub error: Option<String>,
}

fn age(t: SystemTime, now: SystemTime) -> f64 {
    let secs = now
        .duration_since(t)
        .unwrap_or(Duration::ZERO)
        .as_secs_f64();
    (secs * 10.0).round() / 10.0
}

/// The report of a mount, made in the mount process.
pub fn report(ending: &Ending) -> Report {
    let s = ending.fs.status();
    let mut r = report_of(&s, &ending.dir, &ending.source, ending.unmounting());
    r.cache_dir = ending.fs.config().cache_dir.display().to_string();
    let a = ending.fs.read_ahead();
    r.read_ahead = ReadAheadItem {
        listings: a.walks.listed,
        listings_dropped: a.walks.too_big,
        files: a.files.files,
        bytes: a.files.bytes,
        files_read: a.files.files_read,
        bytes_read: a.files.bytes_read,
    };
    if let Some(c) = &ending.retries {
        let st = c.stats();
        r.retries = Retries {
            retried: st.retries,
            throttled: st.throttled,
            gave_up: st.gave_up,
        };
    }
    r
}

fn report_of(s: &Status, mountpoint: &Path, source: &str, unmounting: bool) -> Report {
    let now = SystemTime::now();
    let list = s
        .pending
        .iter()
        .map(|p| PendingItem {
            key: p.key.clone(),
            bytes: p.bytes,
            age_secs: age(p.since, now),
            state: match p.state {
                PendingState::Waiting => "waiting",
                PendingState::Queued => "queued",
                PendingState::Uploading => "uploading",
                PendingState::Failed(_) => "failed",
            }
            .to_string(),
            open_for_writing: p.open_for_writing,
        })
        .collect();
    Report {
        version: 1,
        mountpoint: mountpoint.display().to_string(),
        source: source.to_string(),
        cache_dir: String::new(),
        pid: std::process::id(),
        unmounting,
        durable: s.durable(),
        pending: Pending {
            files: s.pending.len(),
            bytes: s.pending_bytes(),
            oldest_age_secs: s.oldest().map(|t| age(t, now)),
            list,
        },
        failures: s
            .failures
            .iter()
            .map(|f| FailureItem {
                key: f.key.clone(),
                reason: f.reason.clone(),
            })
            .collect(),
        recovery: s
            .recovery
            .iter()
            .map(|r| RecoveryItem {
                key: r.key.clone(),
                uploaded: r.uploaded,
                error: r.error.clone(),
            })
            .collect(),
        retries: Retries::default(),
        read_ahead: ReadAheadItem::default(),
    }
}

/// The report as text, one fact a line.
pub fn render(r: &Report) -> String {
    let mut out = format!("{} ({}), pid {}\n", r.mountpoint, r.source, r.pid);
    if r.unmounting {
        out.push_str("unmounting: uploading what is pending\n");
    }
    match r.pending.oldest_age_secs {
        None => out.push_str("pending: nothing, every file written is in the bucket\n"),
        Some(oldest) => {
            out.push_str(&format!(
                "pending: {} file(s), {} byte(s) not in the bucket yet, the oldest for {oldest} s\n",
                r.pending.files, r.pending.bytes
            ));
            for p in &r.pending.list {
                let open = if p.open_for_writing {
                    ", open for writing"
                } else {
                    ""
                };
                out.push_str(&format!(
                    "  {}: {} byte(s), {} s, {}{open}\n",
                    p.key, p.bytes, p.age_secs, p.state
                ));
            }
        }
    }
    if !r.failures.is_empty() {
        out.push_str(&format!("failed: {} upload(s)\n", r.failures.len()));
        for f in &r.failures {
            out.push_str(&format!("  {}: {}\n", f.key, f.reason));
        }
    }
    let t = &r.retries;
    if t.retried > 0 || t.gave_up > 0 {
        out.push_str(&format!(
            "requests: {} sent again ({} throttled), {} given up after their retries\n",
            t.retried, t.throttled, t.gave_up
        ));
    }
    let a = &r.read_ahead;
    if a.listings > 0 || a.files > 0 {
        out.push_str(&format!(
            "read ahead: {} directories listed ahead of walks ({} too big, dropped); \
             {} files ({} bytes) fetched ahead of readers, {} of them ({} bytes) read\n",
            a.listings, a.listings_dropped, a.files, a.bytes, a.files_read, a.bytes_read
        ));
    }
    if !r.recovery.is_empty() {
        out.push_str("recovered from the journal of an earlier mount:\n");
        for x in &r.recovery {
            match &x.error {
                None => out.push_str(&format!("  {}: uploaded\n", x.key)),
                Some(e) => out.push_str(&format!("  {}: not uploaded: {e}\n", x.key)),
            }
        }
    }
    out
}

/// `flowfs status DIR [--json]`; returns the exit status.
pub fn status(dir: &Path, json: bool) -> i32 {
    let abs = std::path::absolute(dir).unwrap_or_else(|_| dir.to_path_buf());
    let dir = abs.canonicalize().unwrap_or(abs);
    let answer = match control::request(&dir, "status", Some(Duration::from_secs(10))) {
        Ok(a) => a,
        Err(e) => {
            let why = control::why_no_answer(&dir, &e);
            eprintln!("flowfs: cannot ask the mount at {}: {why}", dir.display());
            return EXIT_NO_ANSWER;
        }
    };
    let parsed = answer
        .strip_prefix("OK ")
        .ok_or_else(|| answer.trim_start_matches("ERR ").to_string())
        .and_then(|j| serde_json::from_str::<Report>(j).map_err(|e| e.to_string()));
    let report = match parsed {
        Ok(r) => r,
        Err(e) => {
            eprintln!("flowfs: the mount at {} did not answer: {e}", dir.display());
            return EXIT_NO_ANSWER;
        }
    };
    if json {
        match serde_json::to_string_pretty(&report) {
            Ok(j) => println!("{j}"),
            Err(e) => {
                eprintln!("flowfs: {e}");
                return EXIT_NO_ANSWER;
            }
        }
    } else {
        print!("{}", render(&report));
    }
    if report.durable {
        EXIT_DURABLE
    } else {
        EXIT_PENDING
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flowfs_fs::{Failure, PendingFile, Recovery};

    #[test]
    fn a_report_names_what_is_pending_failed_and_recovered() {
        let now = SystemTime::now();
        let s = Status {
            pending: vec![PendingFile {
                key: "out/a.bam".into(),
                bytes: 42,
                since: now - Duration::from_secs(30),
                open_for_writing: false,
                state: PendingState::Failed("out/a.bam: upload failed: boom".into()),
            }],
            failures: vec![Failure {
                key: "out/a.bam".into(),
                reason: "upload failed: boom".into(),
            }],
            recovery: vec![Recovery {
                key: "old.txt".into(),
                uploaded: true,
                error: None,
            }],
        };
        let r = report_of(&s, Path::new("/mnt"), "s3://b/p", false);
        assert!(!r.durable);
        assert_eq!((r.pending.files, r.pending.bytes), (1, 42));
        assert!(r.pending.oldest_age_secs.is_some_and(|a| a >= 30.0));
        assert_eq!(r.pending.list[0].state, "failed");
        let text = render(&r);
        assert!(text.contains("1 file(s), 42 byte(s)"), "{text}");
        assert!(text.contains("out/a.bam: upload failed: boom"), "{text}");
        assert!(text.contains("old.txt: uploaded"), "{text}");
        let json = serde_json::to_value(&r).unwrap();
        for field in ["durable", "pending", "failures", "recovery", "unmounting"] {
            assert!(json.get(field).is_some(), "{field}");
        }
        assert_eq!(json["pending"]["list"][0]["key"], "out/a.bam");
    }

    #[test]
    fn nothing_pending_is_durable() {
        let r = report_of(&Status::default(), Path::new("/mnt"), "s3://b", false);
        assert!(r.durable);
        assert!(r.pending.oldest_age_secs.is_none());
        assert!(render(&r).contains("pending: nothing"));
    }
}
