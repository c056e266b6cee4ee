//! Durations on the command line: `90s`, `1m30s`, `500ms`, or a bare number
//! of seconds (as `timeout` takes them).

use std::time::Duration;

/// The longest duration any option or setting takes: 1,000,000,000 seconds
/// (about 31 years). Past it a deadline or lease could not be written as a
/// date (runws writes RFC 3339 times) nor added to the clock.
pub const MAX: Duration = Duration::from_secs(1_000_000_000);

/// The largest size any option takes: 1 PiB.
pub const MAX_SIZE: u64 = 1 << 50;

pub fn parse(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("a duration cannot be empty".into());
    }
    if s.starts_with('-') {
        return Err(format!("`{s}` is negative: a duration is 0 or more"));
    }
    let d = if s.bytes().all(|b| b.is_ascii_digit() || b == b'.') {
        let secs: f64 = s.parse().map_err(|_| format!("`{s}` is not a duration"))?;
        if !secs.is_finite() || !(0.0..=MAX.as_secs_f64()).contains(&secs) {
            return Err(too_long(s));
        }
        Duration::from_secs_f64(secs)
    } else {
        humantime::parse_duration(s).map_err(|e| match e {
            humantime::DurationError::NumberOverflow => too_long(s),
            e => format!("`{s}` is not a duration ({e}); try 90s, 10m or 1h30m"),
        })?
    };
    if d > MAX {
        return Err(too_long(s));
    }
    Ok(d)
}

/// A duration as the options take it: `5s`, `1m30s`, `500ms`.
pub fn show(d: Duration) -> String {
    humantime::format_duration(d).to_string().replace(' ', "")
}

fn too_long(s: &str) -> String {
    format!("`{s}` is longer than the longest duration, {}s (about 31 years)", MAX.as_secs())
}

/// Sizes on the command line: `256MiB`, `1GiB`, `500MB`, `64k`, or bytes.
pub fn parse_size(s: &str) -> Result<u64, String> {
    let s = s.trim();
    if s.starts_with('-') {
        return Err(format!("`{s}` is negative: a size is 0 or more"));
    }
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
    if !v.is_finite() || v < 0.0 || v > MAX_SIZE as f64 {
        return Err(format!("`{s}` is larger than the largest size, 1PiB"));
    }
    Ok(v as u64)
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
        assert_eq!(parse("1000000000").unwrap(), MAX);
        for huge in ["1000000001", "100000000000000s", "99999999999999999999999s", "1e400", "40years"] {
            assert!(parse(huge).is_err(), "{huge} accepted");
        }
    }

    #[test]
    fn sizes() {
        assert_eq!(parse_size("256MiB").unwrap(), 256 << 20);
        assert_eq!(parse_size("1GiB").unwrap(), 1 << 30);
        assert_eq!(parse_size("500MB").unwrap(), 500_000_000);
        assert_eq!(parse_size("64k").unwrap(), 65536);
        assert_eq!(parse_size("123").unwrap(), 123);
        assert!(parse_size("12 parsecs").is_err());
        assert!(parse_size("").is_err());
        assert_eq!(parse_size("1024TiB").unwrap(), super::MAX_SIZE);
        assert!(parse_size("1025TiB").is_err());
        assert!(parse_size("99999999999999999999999").is_err());
    }
}
