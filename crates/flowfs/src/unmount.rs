//! `flowfs unmount`: asks the mount process over its control socket to flush and unmount
//! (control.rs, stop.rs); when nobody answers, says why, and removes a dead mount of this
//! user.

use std::path::Path;

use anyhow::{bail, Result};

use crate::control::{self, NoAnswer};
use crate::mountinfo::mount_entry;

/// Unmounts `dir` (`force`: without waiting for uploads): the mount process's notes
/// (recovered files) go to stderr, and its `OK` or `ERR` is the result.
pub fn unmount(dir: &Path, force: bool) -> Result<()> {
    let abs = std::path::absolute(dir)?;
    let dir = abs.canonicalize().unwrap_or(abs);
    let cmd = if force { "unmount --force" } else { "unmount" };
    match control::request(&dir, cmd, None) {
        Ok(a) => {
            let mut last = "";
            for line in a.lines() {
                match line.strip_prefix("NOTE ") {
                    Some(note) => eprintln!("flowfs: {note}"),
                    None => last = line,
                }
            }
            if last == "OK" {
                Ok(())
            } else {
                bail!("{}", last.trim_start_matches("ERR "))
            }
        }
        Err(_) => unmount_silent(&dir),
    }
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
