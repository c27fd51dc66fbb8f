//! `flowfs status DIR`: what a running mount holds that is not durable yet, what failed,
//! and what recovery did. The mount answers the control socket's `status` with one line
//! of JSON (`Report`); this side prints it as text or passes the JSON on.

use std::path::Path;
use std::time::Duration;

use crate::control;
use crate::report::Report;

/// Everything durable and nothing failed.
pub const EXIT_DURABLE: i32 = 0;
/// Something is pending or failed.
pub const EXIT_PENDING: i32 = 1;
/// The mount could not be asked.
pub const EXIT_NO_ANSWER: i32 = 2;

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
    use crate::report::report_of;
    use flowfs_fs::{Failure, PendingFile, PendingState, Recovery, Status};
    use std::time::SystemTime;

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
            ..Status::default()
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
