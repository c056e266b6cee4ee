//! Durations on the command line: `90s`, `1m30s`, `500ms`, or a bare number
//! of seconds (as `timeout` takes them).

use std::time::Duration;

pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("a duration cannot be empty".into());
    }
    if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = s.parse().map_err(|_| format!("`{s}` is not a duration"))?;
        if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
            return Err(format!("`{s}` is out of range"));
        }
        return Ok(Duration::from_secs_f64(secs));
    }
    humantime::parse_duration(s).map_err(|e| format!("`{s}` is not a duration ({e}); try 90s, 10m or 1h30m"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse("3").unwrap(), Duration::from_secs(3));
        assert_eq!(parse("0.5").unwrap(), Duration::from_millis(500));
        assert_eq!(parse("1m30s").unwrap(), Duration::from_secs(90));
        assert_eq!(parse("250ms").unwrap(), Duration::from_millis(250));
        assert!(parse("").is_err());
        assert!(parse("soon").is_err());
        assert!(parse("-1").is_err());
    }
}

/// Sizes on the command line: `256MiB`, `1GiB`, `500MB`, `64k`, or bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    let split = s.find(|c: char| !c.is_ascii_digit() && c != '.').unwrap_or(s.len());
    let (num, unit) = s.split_at(split);
    let n: f64 = num.parse().map_err(|_| format!("`{s}` is not a size; try 256MiB or 1GiB"))?;
    let mult: f64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1.0,
        "k" | "kib" => 1024.0,
        "kb" => 1e3,
        "m" | "mib" => 1024.0 * 1024.0,
        "mb" => 1e6,
        "g" | "gib" => 1024.0 * 1024.0 * 1024.0,
        "gb" => 1e9,
        "t" | "tib" => 1024.0f64.powi(4),
        "tb" => 1e12,
        other => return Err(format!("`{other}` is not a size unit; use B, KiB, MiB, GiB, KB, MB or GB")),
    };
    let v = n * mult;
    if !v.is_finite() || v < 0.0 || v > u64::MAX as f64 {
        return Err(format!("`{s}` is out of range"));
    }
    Ok(v as u64)
}

#[cfg(test)]
mod size_tests {
    use super::parse_size;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
    }
}
