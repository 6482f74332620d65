//! PMI-2 frames (`tmpi_base::pmi::parse_v2_frame`, `wire::parse_v2_body`,
//! `wire::parse_v2_header`).
//!
//! Properties:
//! * never panics;
//! * a complete frame never reports more bytes consumed than the input
//!   holds, nor a body beyond the reader's limit;
//! * the frame parse agrees with parsing its body alone;
//! * `Ok(None)` ("incomplete") only when the announced frame is longer than
//!   the input, and every strict prefix of a complete frame is incomplete
//!   (a stream reader must wait, not fail, on a split frame);
//! * parse(format(m)) == m whenever `format_v2_frame` accepts m.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::pmi::wire::{parse_v2_body, parse_v2_header, V2_HEADER_LEN, V2_MAX_BODY};
use tmpi_base::pmi::{format_v2_frame, parse_v2_frame, Message};
use tmpi_fuzz::{show, Input};

fn roundtrip(m: &Message) {
    if let Ok(frame) = format_v2_frame(m) {
        let (back, used) = parse_v2_frame(&frame, V2_MAX_BODY)
            .unwrap_or_else(|e| panic!("formatted frame {} does not parse: {e}", show(&frame)))
            .expect("a formatted frame is complete");
        assert_eq!(used, frame.len());
        assert_eq!(&back, m, "round trip of {}", show(&frame));
    }
}

fuzz_target!(|data: &[u8]| {
    // First two bytes choose the reader's limit (0..=65535, or the maximum).
    let mut inp = Input::new(data);
    let lim = u16::from_le_bytes([inp.byte(), inp.byte()]);
    let max_body = if lim == u16::MAX {
        V2_MAX_BODY
    } else {
        usize::from(lim)
    };
    let buf = inp.rest();
    match parse_v2_frame(buf, max_body) {
        Ok(Some((m, used))) => {
            assert!(
                used >= V2_HEADER_LEN && used <= buf.len(),
                "used {used} of {}",
                buf.len()
            );
            assert!(used - V2_HEADER_LEN <= max_body);
            let mut h = [0u8; V2_HEADER_LEN];
            h.copy_from_slice(&buf[..V2_HEADER_LEN]);
            assert_eq!(parse_v2_header(&h), Ok(used - V2_HEADER_LEN));
            assert_eq!(parse_v2_body(&buf[V2_HEADER_LEN..used]).as_ref(), Ok(&m));
            for cut in 0..used {
                assert_eq!(
                    parse_v2_frame(&buf[..cut], max_body),
                    Ok(None),
                    "prefix {cut} of {used}"
                );
            }
            roundtrip(&m);
        }
        Ok(None) => {
            if let Some(h) = buf.get(..V2_HEADER_LEN) {
                let mut hh = [0u8; V2_HEADER_LEN];
                hh.copy_from_slice(h);
                let len = parse_v2_header(&hh).expect("incomplete frame with a bad header");
                assert!(len <= max_body);
                assert!(buf.len() < V2_HEADER_LEN + len);
            }
        }
        Err(_) => {}
    }
    if let Ok(m) = parse_v2_body(buf) {
        assert!(!m.cmd.is_empty());
        let text: usize = m.cmd.len()
            + m.fields
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        assert!(text <= buf.len());
        roundtrip(&m);
    }
    // A message built from the input.
    let mut inp = Input::new(buf);
    let mut m = Message::new(inp.text_until(b'|'));
    while !inp.is_empty() {
        let k = inp.text_until(b'|');
        let v = inp.text_until(b'|');
        m.fields.push((k, v));
    }
    roundtrip(&m);
});
