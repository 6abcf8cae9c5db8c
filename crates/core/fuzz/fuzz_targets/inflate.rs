//! `deflate::inflate` on any bytes a client may send as a compressed WebSocket message: never
//! a panic, never more than the limit; and `compress` followed by `inflate` gives the input
//! back.

#![no_main]

use herald_core::deflate::{InflateError, compress, inflate};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    match inflate(data, LIMIT) {
        Ok(out) => assert!(out.len() <= LIMIT),
        Err(InflateError::TooBig(limit)) => assert_eq!(limit, LIMIT),
        Err(InflateError::Corrupt) => {}
    }
    if let Some(packed) = compress(data) {
        assert!(packed.len() < data.len());
        assert_eq!(inflate(&packed, data.len()).as_deref(), Ok(data));
    }
});
