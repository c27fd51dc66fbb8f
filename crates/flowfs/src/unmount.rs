//! `flowfs unmount`: asks the mount process over its control socket to flush and unmount
//! (control.rs, stop.rs); when nobody answers, says why, and removes a dead mount of this
//! user.

use std::path::Path;
use std::sync::mpsc::RecvTimeoutError;
use std::time::Duration;

use anyhow::{bail, Result};

use crate::cli::UnmountArgs;
use crate::control::{self, NoAnswer};
use crate::cost::Prices;
use crate::mountinfo::mount_entry;
use crate::usage::Usage;

/// Unmounts `dir` (`force`: without waiting for uploads): the mount process's notes
/// (recovered files) go to stderr, and its `OK` or `ERR` is the result. With `usage`,
/// also what the mount did (its last uploads included), when it could say.
pub fn unmount(dir: &Path, force: bool, usage: bool) -> Result<Option<Usage>> {
    let abs = std::path::absolute(dir)?;
    let dir = abs.canonicalize().unwrap_or(abs);
    let cmd = match (force, usage) {
        (false, false) => "unmount",
        (true, false) => "unmount --force",
        (false, true) => "unmount --usage",
        (true, true) => "unmount --force --usage",
    };
    let watcher = Waiting::watch(&dir);
    let answer = control::request(&dir, cmd, None);
    drop(watcher);
    match answer {
        Ok(a) => {
            let (mut last, mut said) = ("", None);
            for line in a.lines() {
                if let Some(note) = line.strip_prefix("NOTE ") {
                    eprintln!("flowfs: {note}");
                } else if let Some(j) = line.strip_prefix("USAGE ") {
                    said = serde_json::from_str::<Usage>(j).ok();
                } else {
                    last = line;
                }
            }
            if last == "OK" {
                Ok(said)
            } else {
                bail!("{}", last.trim_start_matches("ERR "))
            }
        }
        Err(_) => unmount_silent(&dir).map(|()| None),
    }
}

/// While an unmount waits, says on stderr what it waits for: after 3 s, then every 5 s,
/// the files still uploading (from the mount's `status`). Ends when dropped.
struct Waiting {
    done: Option<std::sync::mpsc::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Waiting {
    fn watch(dir: &Path) -> Waiting {
        let (tx, rx) = std::sync::mpsc::channel::<()>();
        let dir = dir.to_path_buf();
        let thread = std::thread::spawn(move || {
            let mut wait = Duration::from_secs(3);
            while let Err(RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                if let Some(line) = waiting_for(&dir) {
                    eprintln!("flowfs: {line}");
                }
                wait = Duration::from_secs(5);
            }
        });
        Waiting {
            done: Some(tx),
            thread: Some(thread),
        }
    }
}

impl Drop for Waiting {
    fn drop(&mut self) {
        drop(self.done.take());
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What an unmount under way still waits for, in one line; `None` when the mount does
/// not say.
fn waiting_for(dir: &Path) -> Option<String> {
    let r: crate::report::Report = control::ask_json(dir, "status", Duration::from_secs(5)).ok()?;
    if r.pending.files == 0 {
        return Some("waiting for the unmount to finish (nothing left to upload)".into());
    }
    let mut names: Vec<&str> = r
        .pending
        .list
        .iter()
        .take(3)
        .map(|p| p.key.as_str())
        .collect();
    if r.pending.files > names.len() {
        names.push("...");
    }
    Some(format!(
        "waiting for {} upload(s), {:.1} MiB: {}",
        r.pending.files,
        r.pending.bytes as f64 / (1u64 << 20) as f64,
        names.join(", ")
    ))
}

/// `flowfs unmount DIR [--report FILE]`: with a report, the usage priced at `prices`
/// (the built-in table without it) is written to FILE once the mount is gone.
pub fn unmount_cmd(args: &UnmountArgs) -> Result<()> {
    let prices = match &args.report {
        Some(_) => Some(Prices::load(args.prices.as_deref())?),
        None => None,
    };
    let usage = unmount(&args.dir, args.force, args.report.is_some())?;
    if let (Some(path), Some(prices)) = (&args.report, prices) {
        let Some(u) = usage else {
            bail!("unmounted, but the mount process did not say what it did: no report written");
        };
        u.priced(&prices).write(path)?;
    }
    Ok(())
}

/// Nobody answers on the control socket of `dir`: a dead mount of this user is removed;
/// another user's mount is left alone (its socket is in that user's directory).
fn unmount_silent(dir: &Path) -> Result<()> {
    let (t, owner) = mount_entry(dir).unzip();
    // SAFETY: getuid cannot fail.
    let me = unsafe { libc::getuid() };
    match control::no_answer(t.as_deref(), owner.flatten(), me) {
        NoAnswer::NotMounted => bail!("{} is not mounted", dir.display()),
        NoAnswer::Foreign(t) => bail!("{} is a {t} mount, not a flowfs mount", dir.display()),
        NoAnswer::OtherUser(o) => bail!(
            "{} is a flowfs mount of {}, not of this user: run `flowfs unmount` as that user (with the environment it mounted with)",
            dir.display(),
            control::user_name(o)
        ),
        NoAnswer::Dead => {
            let st = std::process::Command::new("fusermount3")
                .arg("-u")
                .arg("-z")
                .arg(dir)
                .status();
            match st {
                Ok(s) if s.success() => bail!(
                    "the flowfs process of {} was gone; removed its dead mount (what it had not uploaded is in its cache dir journal)",
                    dir.display()
                ),
                _ => bail!(
                    "the flowfs process of {} is gone and fusermount3 -u failed",
                    dir.display()
                ),
            }
        }
    }
}
