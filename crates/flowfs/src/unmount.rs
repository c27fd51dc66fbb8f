//! `flowfs unmount`: asks the mount process over its control socket to flush and unmount
//! (control.rs, stop.rs); when nobody answers, says why, and removes a dead mount of this
//! user.

use std::path::Path;

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
    match control::request(&dir, cmd, None) {
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
