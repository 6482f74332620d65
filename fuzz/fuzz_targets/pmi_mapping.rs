//! `PMI_process_mapping` (`tmpi_base::pmi::parse_process_mapping`), read by
//! the client from the launcher and by the server from its configuration.
//!
//! Input: bytes 0-1 = job size (1..=65536), rest = the mapping text.
//!
//! Properties:
//! * never panics, never loops for long (repeat counts, node counts and
//!   `ppn` of up to 2^32 are bounded by the job size);
//! * a successful parse gives exactly one node id per rank and is periodic
//!   in the decoded prefix (the cyclic rule);
//! * `parse(encode(x)) == x`, for the parsed layout and for a layout built
//!   from the input.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::pmi::{encode_process_mapping, parse_process_mapping};
use tmpi_fuzz::Input;

fn roundtrip(node_of: &[u32]) {
    let s = encode_process_mapping(node_of);
    let back = parse_process_mapping(&s, node_of.len() as u32)
        .unwrap_or_else(|e| panic!("encoded {s:?} does not parse: {e}"));
    if node_of.is_empty() {
        assert!(back.is_empty());
    } else {
        assert_eq!(back, node_of, "{s:?}");
    }
}

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let size = u32::from(u16::from_le_bytes([inp.byte(), inp.byte()])) + 1;
    let text = String::from_utf8_lossy(inp.rest());
    if let Ok(node_of) = parse_process_mapping(&text, size) {
        assert_eq!(node_of.len(), size as usize);
        roundtrip(&node_of);
    }
    // A layout from the input: node ids from bytes (small alphabet so runs
    // and periods occur).
    let layout: Vec<u32> = data.iter().take(512).map(|&b| u32::from(b % 8)).collect();
    roundtrip(&layout);
});
