//! The one thing the proxy reads of a TLS connection: the server name a
//! client's ClientHello asks for (RFC 8446 section 4.1.2, RFC 6066 section
//! 3), to refuse a tunnel whose TLS names another host than its CONNECT
//! line. Nothing is decrypted and nothing is answered: the bytes read are
//! passed on unchanged when the name matches.

/// The largest ClientHello read (the message itself; records may split it).
pub const MAX_HELLO: usize = 64 * 1024;

/// What the first bytes of a tunnel say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Hello {
    /// More bytes are needed to decide.
    Partial,
    /// Not a TLS handshake (the first byte is not a handshake record).
    NotTls,
    /// A ClientHello without a server name.
    NoName,
    /// A ClientHello naming this host (as sent: not lower-cased).
    Name(String),
    /// A TLS record that is not a well-formed ClientHello.
    Malformed(&'static str),
}

/// Reads the ClientHello at the start of `buf`, which may be incomplete.
pub fn client_hello(buf: &[u8]) -> Hello {
    if buf.is_empty() {
        return Hello::Partial;
    }
    if buf[0] != 22 {
        return Hello::NotTls;
    }
    // The handshake message, gathered from as many records as it spans.
    let mut msg: Vec<u8> = Vec::new();
    let mut at = 0;
    loop {
        let Some(head) = buf.get(at..at + 5) else { return Hello::Partial };
        if head[0] != 22 {
            return Hello::Malformed("a ClientHello split by another kind of record");
        }
        if head[1] != 3 {
            return Hello::Malformed("not a TLS record version");
        }
        let len = usize::from(u16::from_be_bytes([head[3], head[4]]));
        if len == 0 || len > 16384 + 2048 {
            return Hello::Malformed("a record length out of bounds");
        }
        let Some(body) = buf.get(at + 5..at + 5 + len) else { return Hello::Partial };
        msg.extend_from_slice(body);
        at += 5 + len;
        if msg.len() >= 4 {
            if msg[0] != 1 {
                return Hello::Malformed("the first handshake message is not a ClientHello");
            }
            let need = 4 + (usize::from(msg[1]) << 16 | usize::from(msg[2]) << 8 | usize::from(msg[3]));
            if need > MAX_HELLO {
                return Hello::Malformed("a ClientHello over 64 KiB");
            }
            if msg.len() >= need {
                return parse(&msg[4..need]);
            }
        }
        if at >= buf.len() {
            return Hello::Partial;
        }
    }
}

/// A cursor over a message, every read bounds-checked.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if self.0.len() < n {
            return None;
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Some(a)
    }
    fn u8(&mut self) -> Option<usize> {
        self.take(1).map(|b| usize::from(b[0]))
    }
    fn u16(&mut self) -> Option<usize> {
        self.take(2).map(|b| usize::from(u16::from_be_bytes([b[0], b[1]])))
    }
    fn vec8(&mut self) -> Option<&'a [u8]> {
        let n = self.u8()?;
        self.take(n)
    }
    fn vec16(&mut self) -> Option<&'a [u8]> {
        let n = self.u16()?;
        self.take(n)
    }
}

/// The ClientHello's body (after the 4-byte handshake header).
fn parse(body: &[u8]) -> Hello {
    let bad = Hello::Malformed("a truncated ClientHello");
    let mut r = Reader(body);
    // legacy_version, random, legacy_session_id, cipher_suites,
    // legacy_compression_methods.
    if r.take(2 + 32).is_none() || r.vec8().is_none() || r.vec16().is_none() || r.vec8().is_none() {
        return bad;
    }
    if r.0.is_empty() {
        return Hello::NoName;
    }
    let Some(exts) = r.vec16() else { return bad };
    let mut e = Reader(exts);
    let mut found = None;
    while !e.0.is_empty() {
        let (Some(kind), Some(data)) = (e.u16(), e.vec16()) else { return bad };
        if kind != 0 {
            continue;
        }
        if found.is_some() {
            return Hello::Malformed("two server_name extensions");
        }
        let mut s = Reader(data);
        let Some(list) = s.vec16() else { return bad };
        let mut l = Reader(list);
        while !l.0.is_empty() {
            let (Some(t), Some(n)) = (l.u8(), l.vec16()) else { return bad };
            if t != 0 {
                continue;
            }
            if found.is_some() {
                return Hello::Malformed("two host names in server_name");
            }
            match std::str::from_utf8(n) {
                Ok(n) if !n.is_empty() => found = Some(n.to_string()),
                _ => return Hello::Malformed("a server name that is not text"),
            }
        }
    }
    match found {
        Some(n) => Hello::Name(n),
        None => Hello::NoName,
    }
}

#[cfg(test)]
pub mod tests {
    use super::*;

    /// A minimal ClientHello naming `name` (none when `None`), split into
    /// records of at most `record` bytes.
    pub fn hello(name: Option<&str>, record: usize) -> Vec<u8> {
        let mut exts = Vec::new();
        // An unrelated extension first (supported_versions).
        exts.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
        if let Some(n) = name {
            let n = n.as_bytes();
            let entry_len = 3 + n.len();
            exts.extend_from_slice(&[0x00, 0x00]);
            exts.extend_from_slice(&((entry_len + 2) as u16).to_be_bytes());
            exts.extend_from_slice(&(entry_len as u16).to_be_bytes());
            exts.push(0);
            exts.extend_from_slice(&(n.len() as u16).to_be_bytes());
            exts.extend_from_slice(n);
        }
        let mut body = vec![3, 3];
        body.extend_from_slice(&[7u8; 32]);
        body.push(0);
        body.extend_from_slice(&[0, 2, 0x13, 0x01]);
        body.extend_from_slice(&[1, 0]);
        body.extend_from_slice(&(exts.len() as u16).to_be_bytes());
        body.extend_from_slice(&exts);
        let mut msg = vec![1];
        msg.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
        msg.extend_from_slice(&body);
        let mut out = Vec::new();
        for chunk in msg.chunks(record) {
            out.extend_from_slice(&[22, 3, 1]);
            out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
            out.extend_from_slice(chunk);
        }
        out
    }

    #[test]
    fn the_server_name_is_read_however_the_hello_arrives() {
        for record in [16384, 40, 7] {
            let h = hello(Some("api.Example.com"), record);
            assert_eq!(client_hello(&h), Hello::Name("api.Example.com".into()));
            // Every prefix asks for more; none panics or decides early.
            for cut in 0..h.len() {
                assert_eq!(client_hello(&h[..cut]), Hello::Partial, "cut at {cut} of {}", h.len());
            }
        }
        assert_eq!(client_hello(&hello(None, 16384)), Hello::NoName);
    }

    #[test]
    fn what_is_not_a_client_hello_says_so() {
        assert_eq!(client_hello(b"GET / HTTP/1.1\r\n"), Hello::NotTls);
        assert_eq!(client_hello(b"SSH-2.0-x"), Hello::NotTls);
        let mut h = hello(Some("a.test"), 16384);
        h[5] = 2;
        assert!(matches!(client_hello(&h), Hello::Malformed(_)));
        let mut h = hello(Some("a.test"), 16384);
        h[1] = 9;
        assert!(matches!(client_hello(&h), Hello::Malformed(_)));
        // A length that points past the message it sits in.
        let mut h = hello(Some("a.test"), 16384);
        let n = h.len();
        h[n - 8] = 0xff;
        assert!(matches!(client_hello(&h), Hello::Malformed(_) | Hello::Name(_)));
        // Random bytes after a handshake byte never panic.
        let mut seed = 1u64;
        for _ in 0..20_000 {
            let mut b = vec![22u8, 3, 1];
            for _ in 0..(seed % 90) {
                seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
                b.push((seed >> 33) as u8);
            }
            let _ = client_hello(&b);
        }
    }
}
