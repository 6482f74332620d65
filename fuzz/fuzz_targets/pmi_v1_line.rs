//! PMI-1 lines (`tmpi_base::pmi::parse_v1_line`, used by the client for
//! replies and by the server for requests).
//!
//! Properties:
//! * never panics;
//! * a parsed message holds no more text than the line (every field is a
//!   piece of the input);
//! * parse(format(m)) == m whenever `format_v1_line` accepts m, both for the
//!   parsed message and for a message built from the input;
//! * a formatted line is one line (a single `\n`, at the end).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::pmi::{format_v1_line, parse_v1_line, Message};
use tmpi_fuzz::{show, Input};

fn roundtrip(m: &Message) {
    if let Ok(line) = format_v1_line(m) {
        assert_eq!(line.iter().filter(|&&b| b == b'\n').count(), 1);
        assert_eq!(line.last(), Some(&b'\n'));
        let back = parse_v1_line(&line)
            .unwrap_or_else(|e| panic!("formatted line {} does not parse: {e}", show(&line)));
        assert_eq!(&back, m, "round trip of {}", show(&line));
    }
}

fuzz_target!(|data: &[u8]| {
    if let Ok(m) = parse_v1_line(data) {
        let text: usize = m.cmd.len()
            + m.fields
                .iter()
                .map(|(k, v)| k.len() + v.len())
                .sum::<usize>();
        assert!(
            text <= data.len(),
            "{} bytes of text from {} input bytes",
            text,
            data.len()
        );
        assert!(!m.fields.iter().any(|(k, _)| k.is_empty()));
        roundtrip(&m);
    }
    // A message built from the input: `|`-separated values under keys
    // taken from the input too.
    let mut inp = Input::new(data);
    let mut m = Message::new(inp.text_until(b'|'));
    while !inp.is_empty() {
        let k = inp.text_until(b'|');
        let v = inp.text_until(b'|');
        m.fields.push((k, v));
    }
    roundtrip(&m);
});
