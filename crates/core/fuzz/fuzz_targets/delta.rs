//! `delta::apply`, the Fossil delta decoder Herald's Rust readers use, on any bytes a server
//! or a proxy in between may send as a delta: never a panic, never more than the limit, and
//! never a result whose checksum does not match; and a delta `encode` made applies to give
//! its target back.

#![no_main]

use herald_core::delta::{DeltaError, apply, encode};
use libfuzzer_sys::fuzz_target;

const LIMIT: usize = 64 * 1024;

fuzz_target!(|data: &[u8]| {
    // The first half is the base, the rest the delta (and, with the base, a target).
    let (base, delta) = data.split_at(data.len() / 2);
    match apply(base, delta, LIMIT) {
        Ok(out) => assert!(out.len() <= LIMIT),
        Err(DeltaError::TooBig { limit, .. }) => assert_eq!(limit, LIMIT),
        Err(_) => {}
    }
    let made = encode(base, delta);
    assert_eq!(apply(base, &made, delta.len()).as_deref(), Ok(delta));
});
