//! Sizes as people read them, for messages and the command line.

/// `n` bytes in the largest binary unit that keeps it at least 1 ("5.1 MiB", "17 B").
pub fn human(n: u64) -> String {
    const U: [&str; 5] = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = n as f64;
    let mut i = 0;
    while v >= 1024.0 && i < U.len() - 1 {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{n} B")
    } else {
        format!("{v:.1} {}", U[i])
    }
}

#[cfg(test)]
mod tests {
    use super::human;

    #[test]
    fn sizes_read_in_their_unit() {
        assert_eq!(human(17), "17 B");
        assert_eq!(human(5 * 1024 * 1024 + 300 * 1024), "5.3 MiB");
        assert_eq!(human(3 << 40), "3.0 TiB");
        assert_eq!(human(5 << 50), "5120.0 TiB");
    }
}
