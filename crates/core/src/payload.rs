//! A published payload ([`Payload`]): one JSON value, kept compact, and its MessagePack form
//! when its publisher sent MessagePack; and the bound on how deeply it may nest.

use bytes::Bytes;

pub use crate::msgpack::MAX_PAYLOAD_DEPTH;

/// Nesting depth of arrays and objects (a scalar is 0). Recursion is bounded by serde_json's
/// own limit on what it parses.
fn depth(value: &serde_json::Value) -> usize {
    match value {
        serde_json::Value::Array(items) => 1 + items.iter().map(depth).max().unwrap_or(0),
        serde_json::Value::Object(map) => 1 + map.values().map(depth).max().unwrap_or(0),
        _ => 0,
    }
}

/// Nesting depth of arrays and objects in JSON text that is known to be valid (a scalar is
/// 0), found by counting brackets outside strings, without parsing it into values: for
/// text that is checked and passed on as it is (a `ping`'s data).
pub fn json_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest) = (0usize, 0usize);
    let mut at = 0;
    while let Some(&b) = json.get(at) {
        at += 1;
        match b {
            // A string: skip to its closing quote (most of a payload's bytes are in strings).
            b'"' => {
                while let Some(found) = memchr::memchr2(b'"', b'\\', &json[at.min(json.len())..]) {
                    at += found + 1;
                    if json[at - 1] == b'"' {
                        break;
                    }
                    at += 1; // the escaped character
                }
            }
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

/// A published payload: one value, in compact JSON, and as its publisher wrote it when that
/// was MessagePack ([`crate::msgpack`]). A MessagePack payload's JSON form is made once, at
/// publish (which checks that it has one): every JSON transport shares it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Payload {
    json: Bytes,
    /// The MessagePack bytes, exactly as published; `None` for a JSON publish (its MessagePack
    /// form is made once per message, when a MessagePack subscriber first needs it). Boxed:
    /// 8 bytes in every payload rather than 32, since most are JSON.
    msgpack: Option<Box<Bytes>>,
}

impl Payload {
    /// Serialises `value` compactly.
    pub fn from_value(value: &serde_json::Value) -> Self {
        // Serialising a Value into a Vec cannot fail.
        Self {
            json: Bytes::from(serde_json::to_vec(value).unwrap_or_default()),
            msgpack: None,
        }
    }

    /// Parses `json` and keeps its compact form. Fails on anything but exactly one JSON value,
    /// and on values nested deeper than [`MAX_PAYLOAD_DEPTH`].
    pub fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        let value: serde_json::Value = serde_json::from_slice(json)?;
        if depth(&value) > MAX_PAYLOAD_DEPTH {
            return Err(<serde_json::Error as serde::de::Error>::custom(format!(
                "payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"
            )));
        }
        Ok(Self::from_value(&value))
    }

    /// Keeps `msgpack` as given, with its JSON form. Fails on anything but exactly one
    /// MessagePack value that has a JSON form, nested at most [`MAX_PAYLOAD_DEPTH`] deep.
    pub fn from_msgpack(msgpack: &[u8]) -> Result<Self, crate::msgpack::MsgpackError> {
        let json = crate::msgpack::to_json(msgpack)?;
        Ok(Self {
            json: Bytes::from(json),
            msgpack: Some(Box::new(Bytes::copy_from_slice(msgpack))),
        })
    }

    /// The compact JSON text.
    pub fn as_bytes(&self) -> &Bytes {
        &self.json
    }

    /// The MessagePack bytes as published, when the publisher sent MessagePack.
    pub fn msgpack(&self) -> Option<&Bytes> {
        self.msgpack.as_deref()
    }

    /// Length of the compact JSON text in bytes.
    pub fn len(&self) -> usize {
        self.json.len()
    }

    /// Whether the payload is empty (never true for a parsed payload).
    pub fn is_empty(&self) -> bool {
        self.json.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payload_depth_is_bounded() {
        let nested = |n: usize| format!("{}1{}", "[".repeat(n), "]".repeat(n));
        assert!(Payload::from_json(nested(MAX_PAYLOAD_DEPTH).as_bytes()).is_ok());
        let err = Payload::from_json(nested(MAX_PAYLOAD_DEPTH + 1).as_bytes()).unwrap_err();
        assert!(err.to_string().contains("nested deeper than 64"), "{err}");
        let objects = format!("{}1{}", r#"{"a":"#.repeat(70), "}".repeat(70));
        assert!(Payload::from_json(objects.as_bytes()).is_err());
        assert!(Payload::from_json(br#""[[[[ not nesting""#).is_ok());
        // The bracket count agrees with the parsed values' depth.
        for text in [
            nested(MAX_PAYLOAD_DEPTH),
            nested(MAX_PAYLOAD_DEPTH + 1),
            objects.clone(),
            r#""[[[[ not nesting""#.to_string(),
            r#"{"a":"\"[{","b":[1,[2,{"c":"]]"}]],"d":{}}"#.to_string(),
            r#"["\\",[["x\\\"]"]]]"#.to_string(),
            "7".to_string(),
            "[]".to_string(),
        ] {
            let value: serde_json::Value = serde_json::from_str(&text).unwrap();
            assert_eq!(json_depth(text.as_bytes()), depth(&value), "{text}");
        }
    }

    #[test]
    fn payload_is_compacted() {
        let p = Payload::from_json(b" { \"a\" : [ 1 , 2 ] } ").unwrap();
        assert_eq!(&p.as_bytes()[..], br#"{"a":[1,2]}"#);
        assert!(Payload::from_json(b"{").is_err());
        assert!(Payload::from_json(b"1 2").is_err());
    }
}
