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
