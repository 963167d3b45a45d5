#![no_main]
//! The decoder must never panic; every refusal must produce a
//! well-formed error reply carrying the offending message's xid.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    openflow::check_decode(data);
});
