//! How untrusted text is shown to a person.
//!
//! Names and fields a run wrote (file names, manifest fields, reasons) reach
//! a terminal only through these functions, so a run cannot forge a line of
//! runws's own output or move the cursor: control characters, backslashes
//! and bytes that are not UTF-8 are written as escapes, in the style of
//! `ls --quoting-style=escape`. `--json` output does not use them; JSON
//! escapes on its own.

use std::ffi::OsStr;
use std::fmt::Write;
use std::os::unix::ffi::OsStrExt;

/// `bytes` with every control character, `\` and invalid UTF-8 byte escaped.
pub fn bytes(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len());
    for chunk in bytes.utf8_chunks() {
        push_str(&mut out, chunk.valid());
        for b in chunk.invalid() {
            let _ = write!(out, "\\x{b:02x}");
        }
    }
    out
}

/// A file name or other OS string, escaped as [`bytes`] does.
pub fn os(s: &OsStr) -> String {
    bytes(s.as_bytes())
}

/// A path, escaped as [`bytes`] does.
pub fn path(p: &std::path::Path) -> String {
    os(p.as_os_str())
}

/// A string, escaped as [`bytes`] does.
pub fn text(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push_str(&mut out, s);
    out
}

/// A message runws composed, kept on one line: control characters escaped
/// as [`text`] does, backslashes left as they are (the names in it are
/// already escaped; this catches what came from elsewhere, such as another
/// tool's error text).
pub fn line(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    push(&mut out, s, false);
    out
}

fn push_str(out: &mut String, s: &str) {
    push(out, s, true);
}

fn push(out: &mut String, s: &str, backslash: bool) {
    for c in s.chars() {
        match c {
            '\\' if backslash => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            '\x1b' => out.push_str("\\e"),
            // C0, DEL, C1 controls and the Unicode line and paragraph
            // separators and bidi overrides, which can reorder what a reader sees.
            c if c.is_control()
                || matches!(c, '\u{2028}' | '\u{2029}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}') =>
            {
                let n = c as u32;
                if n <= 0xff {
                    let _ = write!(out, "\\x{n:02x}");
                } else {
                    let _ = write!(out, "\\u{{{n:04x}}}");
                }
            }
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_text_is_unchanged() {
        assert_eq!(text("out/report-1.csv"), "out/report-1.csv");
        assert_eq!(text("Grüße"), "Grüße");
    }

    #[test]
    fn controls_cannot_forge_a_line() {
        assert_eq!(text("a\nstatus: succeeded"), "a\\nstatus: succeeded");
        assert_eq!(text("\x1b[2K\r"), "\\e[2K\\r");
        assert_eq!(text("a\\nb"), "a\\\\nb");
        assert_eq!(text("\u{7f}\u{85}"), "\\x7f\\x85");
        assert_eq!(text("\u{202e}txt"), "\\u{202e}txt");
    }

    #[test]
    fn a_line_keeps_its_backslashes_and_loses_its_breaks() {
        assert_eq!(line("`a\\nb`: x\ny"), "`a\\nb`: x\\ny");
    }

    #[test]
    fn invalid_utf8_bytes_are_hex() {
        assert_eq!(bytes(b"caf\xe9.txt"), "caf\\xe9.txt");
        assert_eq!(os(OsStr::from_bytes(b"\xff\n")), "\\xff\\n");
    }
}
