//! File names as the manifest records them.
//!
//! On Linux a file name is bytes, and a run's outputs and inputs may carry
//! names that are not UTF-8; the manifest is JSON, whose strings are
//! Unicode. An [`OsName`] is written as a plain JSON string when its bytes
//! are UTF-8 (every manifest written before keeps its meaning), and as
//! `{"hex": "<lowercase hex of the bytes>"}` otherwise. Both read back to
//! the same bytes, so a name round-trips exactly and two different names
//! never share a record.

use std::borrow::Cow;
use std::ffi::{OsStr, OsString};
use std::fmt;
use std::os::unix::ffi::{OsStrExt, OsStringExt};

use serde::de::{self, MapAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// A file name or relative path, held as the bytes it is on disk.
#[derive(Clone, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct OsName(OsString);

impl OsName {
    pub fn new(name: impl Into<OsString>) -> OsName {
        OsName(name.into())
    }

    pub fn from_bytes(bytes: Vec<u8>) -> OsName {
        OsName(OsString::from_vec(bytes))
    }

    pub fn as_os_str(&self) -> &OsStr {
        &self.0
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The name as text, when it is UTF-8.
    pub fn to_str(&self) -> Option<&str> {
        self.0.to_str()
    }

    /// The name escaped for a person (see [`crate::shown`]).
    pub fn shown(&self) -> String {
        crate::shown::os(&self.0)
    }

    /// `self`, `sep`, then `tail`: a name built from parts, byte for byte.
    pub fn joined(&self, sep: &str, tail: impl AsRef<OsStr>) -> OsName {
        let mut v = self.as_bytes().to_vec();
        v.extend_from_slice(sep.as_bytes());
        v.extend_from_slice(tail.as_ref().as_bytes());
        OsName::from_bytes(v)
    }

    /// The name for an error message or a log: UTF-8 as is, other bytes
    /// escaped.
    pub fn lossless(&self) -> Cow<'_, str> {
        match self.to_str() {
            Some(s) => Cow::Borrowed(s),
            None => Cow::Owned(self.shown()),
        }
    }
}

impl fmt::Debug for OsName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&self.0, f)
    }
}

impl AsRef<OsStr> for OsName {
    fn as_ref(&self) -> &OsStr {
        &self.0
    }
}

impl AsRef<std::path::Path> for OsName {
    fn as_ref(&self) -> &std::path::Path {
        std::path::Path::new(&self.0)
    }
}

impl From<&str> for OsName {
    fn from(s: &str) -> OsName {
        OsName(s.into())
    }
}

impl From<String> for OsName {
    fn from(s: String) -> OsName {
        OsName(s.into())
    }
}

impl From<&OsStr> for OsName {
    fn from(s: &OsStr) -> OsName {
        OsName(s.to_os_string())
    }
}

impl From<OsString> for OsName {
    fn from(s: OsString) -> OsName {
        OsName(s)
    }
}

impl PartialEq<str> for OsName {
    fn eq(&self, other: &str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<&str> for OsName {
    fn eq(&self, other: &&str) -> bool {
        self.as_bytes() == other.as_bytes()
    }
}

impl PartialEq<OsStr> for OsName {
    fn eq(&self, other: &OsStr) -> bool {
        self.0 == other
    }
}

/// The key of the object that carries a name that is not UTF-8.
const HEX: &str = "hex";

impl Serialize for OsName {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self.to_str() {
            Some(text) => s.serialize_str(text),
            None => {
                use serde::ser::SerializeMap;
                let mut map = s.serialize_map(Some(1))?;
                map.serialize_entry(HEX, &crate::hex::encode(self.as_bytes()))?;
                map.end()
            }
        }
    }
}

impl<'de> Deserialize<'de> for OsName {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<OsName, D::Error> {
        d.deserialize_any(NameVisitor)
    }
}

struct NameVisitor;

impl<'de> Visitor<'de> for NameVisitor {
    type Value = OsName;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a name: a string, or {\"hex\": \"...\"} for bytes that are not UTF-8")
    }

    fn visit_str<E: de::Error>(self, v: &str) -> Result<OsName, E> {
        Ok(OsName::from(v))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<OsName, A::Error> {
        let mut bytes = None;
        while let Some(key) = map.next_key::<String>()? {
            if key != HEX || bytes.is_some() {
                return Err(de::Error::custom(format_args!(
                    "a name object has exactly one field, `{HEX}`, not `{}`",
                    crate::shown::text(&key)
                )));
            }
            let text: String = map.next_value()?;
            bytes = Some(
                crate::hex::decode(&text).ok_or_else(|| de::Error::custom("`hex` is not lowercase hex"))?,
            );
        }
        bytes.map(OsName::from_bytes).ok_or_else(|| de::Error::missing_field(HEX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(n: &OsName) -> (String, OsName) {
        let json = serde_json::to_string(n).unwrap();
        let back: OsName = serde_json::from_str(&json).unwrap();
        (json, back)
    }

    #[test]
    fn utf8_is_a_plain_string() {
        let n = OsName::from("report.csv");
        assert_eq!(round(&n), ("\"report.csv\"".to_string(), n));
    }

    #[test]
    fn other_bytes_are_hex_and_round_trip() {
        let n = OsName::from_bytes(b"caf\xe9\n".to_vec());
        let (json, back) = round(&n);
        assert_eq!(json, r#"{"hex":"636166e90a"}"#);
        assert_eq!(back, n);
    }

    #[test]
    fn a_malformed_object_is_refused() {
        for bad in [r#"{"hex":"6"}"#, r#"{"hex":"ZZ"}"#, r#"{"hex":"61","x":1}"#, r#"{}"#, "3"] {
            assert!(serde_json::from_str::<OsName>(bad).is_err(), "{bad}");
        }
    }
}
