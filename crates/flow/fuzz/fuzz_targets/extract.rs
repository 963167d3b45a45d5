#![no_main]
//! Extraction must never panic, and the key must always carry the input
//! port it was given.
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let port = data.first().copied().unwrap_or(0) as u32;
    let (k, l, _) = flow::extract(data, port);
    assert_eq!(k.in_port(), port);
    assert!(l.l3 as usize <= data.len() && l.l4 as usize <= data.len());
});
