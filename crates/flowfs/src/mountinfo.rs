//! What the kernel's mount table (/proc/self/mountinfo) says is mounted at a directory:
//! its type, and for a FUSE mount its owner.

use std::path::Path;

fn unescape_mountinfo(s: &str) -> String {
    let b = s.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'\\' && i + 3 < b.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(b[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// File system type of the mount at exactly `dir`, if one is there.
pub fn mount_type(dir: &Path) -> Option<String> {
    mount_entry(dir).map(|(t, _)| t)
}

/// Type and, for a FUSE mount, owner (its `user_id=` option) of the mount at `dir`.
pub fn mount_entry(dir: &Path) -> Option<(String, Option<u32>)> {
    let info = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = dir.to_string_lossy();
    info.lines().rev().find_map(|l| {
        let f: Vec<&str> = l.split(' ').collect();
        let sep = f.iter().position(|x| *x == "-")?;
        if f.len() <= sep + 1 || unescape_mountinfo(f.get(4)?) != want {
            return None;
        }
        let owner = f.get(sep + 3).and_then(|opts| {
            opts.split(',')
                .find_map(|o| o.strip_prefix("user_id=")?.parse().ok())
        });
        Some((f[sep + 1].to_string(), owner))
    })
}
