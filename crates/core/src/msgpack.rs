//! MessagePack (<https://msgpack.org>) beside JSON: checking a MessagePack value and giving
//! it its JSON form, the MessagePack form of a JSON value, and reading a map's fields as the
//! raw bytes of their values (so that a payload is carried exactly as its publisher wrote it).
//!
//! A MessagePack value has a JSON form when every map key is a string, every string is UTF-8,
//! every float is finite and no extension type is used; binary (`bin`) becomes a base64
//! string (standard alphabet, padded). Anything else is refused with a reason: Herald delivers
//! every payload to JSON transports (SSE, long-poll, JSON WebSocket) as well, and never
//! silently changes a value's meaning for them.
//!
//! The reader allocates nothing from a declared length (an array that claims 2^32 items in 5
//! bytes fails on the first missing item), and refuses nesting deeper than
//! [`MAX_PAYLOAD_DEPTH`] before recursing, so hostile input costs at most its
//! own length.

use rmp::Marker;

/// Deepest nesting of arrays and objects in a payload, JSON or MessagePack (re-exported as
/// `message::MAX_PAYLOAD_DEPTH`). serde_json (and many clients) refuse documents nested
/// deeper than 128 levels, and a payload travels inside a WebSocket frame's object: a bound
/// well below that keeps every frame readable by every client. Defined here, in the codec
/// that `message` uses, so that the two modules depend one way.
pub const MAX_PAYLOAD_DEPTH: usize = 64;

/// Why bytes are not an acceptable MessagePack value: for people.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct MsgpackError(String);

impl MsgpackError {
    fn new(reason: impl Into<String>) -> Self {
        Self(reason.into())
    }
}

/// The JSON form (compact) of the one MessagePack value that `input` holds. Fails on
/// malformed or truncated input, bytes after the value, and values with no JSON form (see the
/// module docs).
pub fn to_json(input: &[u8]) -> Result<Vec<u8>, MsgpackError> {
    let mut reader = Reader { buf: input, pos: 0 };
    let mut out = Vec::with_capacity(input.len() + input.len() / 2 + 8);
    reader.value(&mut out, 0)?;
    reader.end()?;
    Ok(out)
}

/// The MessagePack form of a JSON value: integers as the smallest integer type that holds
/// them, other numbers as 64-bit floats, objects as maps in their order.
pub fn from_json(value: &serde_json::Value) -> Vec<u8> {
    let mut out = Vec::with_capacity(64);
    write_json(&mut out, value);
    out
}

fn write_json(out: &mut Vec<u8>, value: &serde_json::Value) {
    use serde_json::Value;
    // Writing to a Vec cannot fail; lengths past u32 cannot reach here (payload limits).
    match value {
        Value::Null => {
            let _ = rmp::encode::write_nil(out);
        }
        Value::Bool(b) => {
            let _ = rmp::encode::write_bool(out, *b);
        }
        Value::Number(n) => {
            if let Some(u) = n.as_u64() {
                let _ = rmp::encode::write_uint(out, u);
            } else if let Some(i) = n.as_i64() {
                let _ = rmp::encode::write_sint(out, i);
            } else {
                let _ = rmp::encode::write_f64(out, n.as_f64().unwrap_or(0.0));
            }
        }
        Value::String(s) => {
            let _ = rmp::encode::write_str(out, s);
        }
        Value::Array(items) => {
            let _ = rmp::encode::write_array_len(out, items.len() as u32);
            for item in items {
                write_json(out, item);
            }
        }
        Value::Object(map) => {
            let _ = rmp::encode::write_map_len(out, map.len() as u32);
            for (key, item) in map {
                let _ = rmp::encode::write_str(out, key);
                write_json(out, item);
            }
        }
    }
}

/// The MessagePack form of a JSON document (compact or not). `None` when it is not JSON.
pub fn from_json_text(json: &[u8]) -> Option<Vec<u8>> {
    let value: serde_json::Value = serde_json::from_slice(json).ok()?;
    Some(from_json(&value))
}

/// The fields of the one map that `input` holds, in order: each key (a string) and the raw
/// bytes of its value, each value checked to have a JSON form. Fails when `input` is not
/// exactly one map.
pub fn map_fields(input: &[u8]) -> Result<Vec<(&str, &[u8])>, MsgpackError> {
    let mut reader = Reader { buf: input, pos: 0 };
    let len = match reader.marker()? {
        Marker::FixMap(n) => u32::from(n),
        Marker::Map16 => u32::from(reader.u16()?),
        Marker::Map32 => reader.u32()?,
        _ => return Err(MsgpackError::new("expected a MessagePack map")),
    };
    let mut fields = Vec::new();
    for _ in 0..len {
        let key = reader.key()?;
        let start = reader.pos;
        // Each field is a value of its own (a payload is held to the nesting bound alone).
        reader.value(&mut Check, 0)?;
        fields.push((key, &input[start..reader.pos]));
    }
    reader.end()?;
    Ok(fields)
}

/// The raw bytes of each item of the one array that `input` holds (each checked to have a
/// JSON form). Fails when `input` is not exactly one array.
pub fn array_items(input: &[u8]) -> Result<Vec<&[u8]>, MsgpackError> {
    let mut reader = Reader { buf: input, pos: 0 };
    let len = match reader.marker()? {
        Marker::FixArray(n) => u32::from(n),
        Marker::Array16 => u32::from(reader.u16()?),
        Marker::Array32 => reader.u32()?,
        _ => return Err(MsgpackError::new("expected a MessagePack array")),
    };
    let mut items = Vec::new();
    for _ in 0..len {
        let start = reader.pos;
        reader.value(&mut Check, 0)?;
        items.push(&input[start..reader.pos]);
    }
    reader.end()?;
    Ok(items)
}

/// The string a field's raw value holds, or `None` when it is not a string.
pub fn as_str(raw: &[u8]) -> Option<&str> {
    let mut reader = Reader { buf: raw, pos: 0 };
    let s = reader.key().ok()?;
    reader.end().ok()?;
    Some(s)
}

/// Whether a field's raw value is `nil`.
pub fn is_nil(raw: &[u8]) -> bool {
    raw == [0xc0]
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], MsgpackError> {
        let end = self
            .pos
            .checked_add(n)
            .filter(|&end| end <= self.buf.len())
            .ok_or_else(|| MsgpackError::new("MessagePack value is truncated"))?;
        let bytes = &self.buf[self.pos..end];
        self.pos = end;
        Ok(bytes)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], MsgpackError> {
        let mut out = [0; N];
        out.copy_from_slice(self.take(N)?);
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, MsgpackError> {
        Ok(self.take(1)?[0])
    }

    fn u16(&mut self) -> Result<u16, MsgpackError> {
        self.array().map(u16::from_be_bytes)
    }

    fn u32(&mut self) -> Result<u32, MsgpackError> {
        self.array().map(u32::from_be_bytes)
    }

    fn marker(&mut self) -> Result<Marker, MsgpackError> {
        if self.pos == self.buf.len() {
            return Err(MsgpackError::new(if self.buf.is_empty() {
                "empty MessagePack input"
            } else {
                "MessagePack value is truncated"
            }));
        }
        self.u8().map(Marker::from_u8)
    }

    fn end(&self) -> Result<(), MsgpackError> {
        if self.pos == self.buf.len() {
            Ok(())
        } else {
            Err(MsgpackError::new(format!(
                "{} bytes after the MessagePack value",
                self.buf.len() - self.pos
            )))
        }
    }

    fn str_of(&mut self, len: usize) -> Result<&'a str, MsgpackError> {
        std::str::from_utf8(self.take(len)?)
            .map_err(|_| MsgpackError::new("a MessagePack string is not valid UTF-8"))
    }

    /// A map key: a string.
    fn key(&mut self) -> Result<&'a str, MsgpackError> {
        let len = match self.marker()? {
            Marker::FixStr(n) => usize::from(n),
            Marker::Str8 => usize::from(self.u8()?),
            Marker::Str16 => usize::from(self.u16()?),
            Marker::Str32 => self.u32()? as usize,
            _ => {
                return Err(MsgpackError::new(
                    "map keys must be strings (a JSON object's keys are)",
                ));
            }
        };
        self.str_of(len)
    }

    /// Reads one value, writing its JSON form to `out` ([`Check`] writes nothing: the value is
    /// only checked); `depth` is the nesting it is at.
    fn value(&mut self, out: &mut impl JsonOut, depth: usize) -> Result<(), MsgpackError> {
        let marker = self.marker()?;
        let container = matches!(
            marker,
            Marker::FixArray(_)
                | Marker::Array16
                | Marker::Array32
                | Marker::FixMap(_)
                | Marker::Map16
                | Marker::Map32
        );
        if container && depth >= MAX_PAYLOAD_DEPTH {
            return Err(MsgpackError::new(format!(
                "payload is nested deeper than {MAX_PAYLOAD_DEPTH} levels"
            )));
        }
        match marker {
            Marker::Null => out.verbatim(b"null"),
            Marker::True => out.verbatim(b"true"),
            Marker::False => out.verbatim(b"false"),
            Marker::FixPos(n) => {
                out.number(n);
            }
            Marker::FixNeg(n) => {
                out.number(n);
            }
            Marker::U8 => {
                let n = self.u8()?;
                out.number(n);
            }
            Marker::U16 => {
                let n = self.u16()?;
                out.number(n);
            }
            Marker::U32 => {
                let n = self.u32()?;
                out.number(n);
            }
            Marker::U64 => {
                let n = u64::from_be_bytes(self.array()?);
                out.number(n);
            }
            Marker::I8 => {
                let n = i8::from_be_bytes(self.array()?);
                out.number(n);
            }
            Marker::I16 => {
                let n = i16::from_be_bytes(self.array()?);
                out.number(n);
            }
            Marker::I32 => {
                let n = i32::from_be_bytes(self.array()?);
                out.number(n);
            }
            Marker::I64 => {
                let n = i64::from_be_bytes(self.array()?);
                out.number(n);
            }
            Marker::F32 => {
                let f = f32::from_be_bytes(self.array()?);
                finite(f.is_finite())?;
                out.float(f);
            }
            Marker::F64 => {
                let f = f64::from_be_bytes(self.array()?);
                finite(f.is_finite())?;
                out.float(f);
            }
            Marker::FixStr(n) => self.string(out, usize::from(n))?,
            Marker::Str8 => {
                let len = usize::from(self.u8()?);
                self.string(out, len)?;
            }
            Marker::Str16 => {
                let len = usize::from(self.u16()?);
                self.string(out, len)?;
            }
            Marker::Str32 => {
                let len = self.u32()? as usize;
                self.string(out, len)?;
            }
            Marker::Bin8 | Marker::Bin16 | Marker::Bin32 => {
                let len = match marker {
                    Marker::Bin8 => usize::from(self.u8()?),
                    Marker::Bin16 => usize::from(self.u16()?),
                    _ => self.u32()? as usize,
                };
                out.base64(self.take(len)?);
            }
            Marker::FixArray(_) | Marker::Array16 | Marker::Array32 => {
                let len = match marker {
                    Marker::FixArray(n) => u32::from(n),
                    Marker::Array16 => u32::from(self.u16()?),
                    _ => self.u32()?,
                };
                out.verbatim(b"[");
                for i in 0..len {
                    if i > 0 {
                        out.verbatim(b",");
                    }
                    self.value(out, depth + 1)?;
                }
                out.verbatim(b"]");
            }
            Marker::FixMap(_) | Marker::Map16 | Marker::Map32 => {
                let len = match marker {
                    Marker::FixMap(n) => u32::from(n),
                    Marker::Map16 => u32::from(self.u16()?),
                    _ => self.u32()?,
                };
                out.verbatim(b"{");
                // A key twice would read differently to different readers (first or last
                // wins): refused, as a JSON publish (parsed into one object) never has it.
                let mut keys = std::collections::HashSet::with_capacity((len as usize).min(64));
                for i in 0..len {
                    if i > 0 {
                        out.verbatim(b",");
                    }
                    let key = self.key()?;
                    if !keys.insert(key) {
                        return Err(MsgpackError::new(format!(
                            "the map key {key:?} appears twice"
                        )));
                    }
                    out.string(key);
                    out.verbatim(b":");
                    self.value(out, depth + 1)?;
                }
                out.verbatim(b"}");
            }
            Marker::FixExt1
            | Marker::FixExt2
            | Marker::FixExt4
            | Marker::FixExt8
            | Marker::FixExt16
            | Marker::Ext8
            | Marker::Ext16
            | Marker::Ext32 => {
                return Err(MsgpackError::new(
                    "MessagePack extension types (timestamps included) have no JSON form",
                ));
            }
            Marker::Reserved => {
                return Err(MsgpackError::new("invalid MessagePack marker 0xc1"));
            }
        }
        Ok(())
    }

    fn string(&mut self, out: &mut impl JsonOut, len: usize) -> Result<(), MsgpackError> {
        out.string(self.str_of(len)?);
        Ok(())
    }
}

/// Where [`Reader::value`] writes a value's JSON form.
trait JsonOut {
    fn verbatim(&mut self, text: &[u8]);
    fn number(&mut self, n: impl std::fmt::Display);
    fn float(&mut self, f: impl serde::Serialize);
    fn string(&mut self, s: &str);
    fn base64(&mut self, bytes: &[u8]);
}

impl JsonOut for Vec<u8> {
    // Writing to a Vec cannot fail.
    fn verbatim(&mut self, text: &[u8]) {
        self.extend_from_slice(text);
    }

    fn number(&mut self, n: impl std::fmt::Display) {
        use std::io::Write as _;
        let _ = write!(self, "{n}");
    }

    fn float(&mut self, f: impl serde::Serialize) {
        let _ = serde_json::to_writer(&mut *self, &f);
    }

    fn string(&mut self, s: &str) {
        let _ = serde_json::to_writer(&mut *self, s);
    }

    fn base64(&mut self, bytes: &[u8]) {
        self.push(b'"');
        base64::engine::general_purpose::STANDARD.encode_slice_to_vec(bytes, self);
        self.push(b'"');
    }
}

/// Checks a value without writing its JSON form: a scan of its bytes (markers, lengths,
/// UTF-8, keys), no output, so checking costs a small part of converting.
struct Check;

impl JsonOut for Check {
    fn verbatim(&mut self, _: &[u8]) {}
    fn number(&mut self, _: impl std::fmt::Display) {}
    fn float(&mut self, _: impl serde::Serialize) {}
    fn string(&mut self, _: &str) {}
    fn base64(&mut self, _: &[u8]) {}
}

/// Base64 into a Vec without an intermediate String.
trait EncodeToVec {
    fn encode_slice_to_vec(&self, bytes: &[u8], out: &mut Vec<u8>);
}

impl<E: base64::Engine> EncodeToVec for E {
    fn encode_slice_to_vec(&self, bytes: &[u8], out: &mut Vec<u8>) {
        let start = out.len();
        let len = base64::encoded_len(bytes.len(), true).unwrap_or(0);
        out.resize(start + len, 0);
        let written = self.encode_slice(bytes, &mut out[start..]).unwrap_or(0);
        out.truncate(start + written);
    }
}

fn finite(ok: bool) -> Result<(), MsgpackError> {
    if ok {
        Ok(())
    } else {
        Err(MsgpackError::new(
            "NaN and infinite floats have no JSON form",
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn json_of(bytes: &[u8]) -> Result<serde_json::Value, MsgpackError> {
        to_json(bytes).map(|j| serde_json::from_slice(&j).unwrap())
    }

    #[test]
    fn json_round_trips_through_messagepack() {
        let value = json!({"b": [1, -1, 300, -40000, 1.5, u64::MAX, i64::MIN], "a": null,
            "s": "é\"\n", "t": true, "o": {}});
        let packed = from_json(&value);
        assert_eq!(json_of(&packed).unwrap(), value);
        // Key order is kept.
        assert_eq!(
            String::from_utf8(to_json(&packed).unwrap()).unwrap(),
            serde_json::to_string(&value).unwrap()
        );
    }

    #[test]
    fn binary_becomes_base64_and_what_has_no_json_form_is_refused() {
        // {"k": bin[1,2,3]}
        assert_eq!(
            json_of(&[0x81, 0xa1, b'k', 0xc4, 3, 1, 2, 3]).unwrap(),
            json!({"k": "AQID"})
        );
        let err = |bytes: &[u8]| to_json(bytes).unwrap_err().to_string();
        assert!(err(&[0x81, 0x01, 0x02]).contains("keys must be strings"));
        // {"a": 1, "a": 2}
        assert!(err(&[0x82, 0xa1, b'a', 0x01, 0xa1, b'a', 0x02]).contains("appears twice"));
        assert!(err(&[0xd6, 0xff, 0, 0, 0, 0]).contains("extension"));
        assert!(err(&[0xcb, 0x7f, 0xf8, 0, 0, 0, 0, 0, 0]).contains("NaN"));
        assert!(err(&[0xa2, 0xff, 0xfe]).contains("UTF-8"));
        assert!(err(&[0xc1]).contains("0xc1"));
        assert!(err(&[]).contains("empty"));
        assert!(err(&[0x01, 0x02]).contains("1 bytes after"));
        // A huge declared length costs nothing: it fails on the first missing item.
        assert!(err(&[0xdd, 0xff, 0xff, 0xff, 0xff]).contains("truncated"));
        assert!(err(&[0xdb, 0xff, 0xff, 0xff, 0xff, b'a']).contains("truncated"));
    }

    #[test]
    fn nesting_is_bounded() {
        let nested = |n: usize| {
            let mut v = vec![0x91; n];
            v.push(0x01);
            v
        };
        assert!(to_json(&nested(MAX_PAYLOAD_DEPTH)).is_ok());
        assert!(
            to_json(&nested(MAX_PAYLOAD_DEPTH + 1))
                .unwrap_err()
                .to_string()
                .contains("nested deeper than 64")
        );
        // Deep enough to overflow a stack if it were followed: refused at the bound.
        assert!(to_json(&nested(1_000_000)).is_err());
    }

    #[test]
    fn map_fields_are_raw_slices() {
        let packed = from_json(&json!({"topic": "t", "data": [1, "x"], "event": null}));
        let fields = map_fields(&packed).unwrap();
        assert_eq!(fields.len(), 3);
        assert_eq!(fields[0].0, "topic");
        assert_eq!(as_str(fields[0].1), Some("t"));
        assert_eq!(fields[1].1, &from_json(&json!([1, "x"]))[..]);
        assert!(is_nil(fields[2].1));
        assert!(map_fields(&from_json(&json!([1]))).is_err());
        assert!(map_fields(&[0x81, 0xa1, b'k']).is_err(), "truncated");
        let items = from_json(&json!([{"a": 1}, "b"]));
        assert_eq!(
            array_items(&items).unwrap(),
            [
                &from_json(&json!({"a": 1}))[..],
                &from_json(&json!("b"))[..]
            ]
        );
        assert!(array_items(&packed).is_err());
    }
}
