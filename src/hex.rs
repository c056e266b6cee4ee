//! Lowercase hexadecimal: digests, and bytes that JSON cannot carry as text.

const DIGITS: &[u8; 16] = b"0123456789abcdef";

/// `bytes` as lowercase hex, two digits a byte.
pub fn encode(bytes: &[u8]) -> String {
    let mut s = String::with_capacity(bytes.len() * 2);
    for b in bytes {
        s.push(DIGITS[(b >> 4) as usize] as char);
        s.push(DIGITS[(b & 15) as usize] as char);
    }
    s
}

/// The bytes of `text`, which must be lowercase hex as [`encode`] writes
/// it (an even number of `0-9a-f`); `None` for anything else.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let digit = |c: u8| match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        _ => None,
    };
    let t = text.as_bytes();
    if !t.len().is_multiple_of(2) {
        return None;
    }
    t.chunks(2).map(|p| Some(digit(p[0])? << 4 | digit(p[1])?)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refuses_what_encode_never_writes() {
        let b = b"/tmp/caf\xe9/\x00\xff";
        assert_eq!(decode(&encode(b)).unwrap(), b);
        assert_eq!(encode(&[0x0f, 0xa0]), "0fa0");
        for bad in ["abc", "zz", "0A", "+1", " 1"] {
            assert!(decode(bad).is_none(), "{bad}");
        }
    }
}
