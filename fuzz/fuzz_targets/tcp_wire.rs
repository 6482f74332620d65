//! btl-tcp wire formats (`tmpi_btl_tcp::wire`): the connection handshake
//! (`Hello`, with the job secret), the 8-byte frame header of every
//! message, and the endpoint string a rank publishes in the modex.
//!
//! Input: byte 0 = which parser; the rest is its input (for the handshake:
//! 32 secret bytes, then the 52 received bytes).
//!
//! Properties:
//! * never panics;
//! * a handshake decodes only with the right secret, and re-encodes to the
//!   received bytes; a frame header re-encodes to the received bytes and
//!   its length is within `WIRE_MAX_FRAME`; BYE carries no body or tag;
//! * endpoints: `decode(encode(e)) == e` for every decoded endpoint, at most
//!   `MAX_ADDRS` addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_btl_tcp::wire::{
    Endpoint, FrameHdr, FrameKind, Hello, WireError, FRAME_HDR_LEN, HELLO_LEN, SECRET_LEN,
    WIRE_MAX_FRAME,
};
use tmpi_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    match inp.byte() % 3 {
        0 => {
            let mut secret = [0u8; SECRET_LEN];
            let s = inp.take(SECRET_LEN);
            secret[..s.len()].copy_from_slice(s);
            let mut b = [0u8; HELLO_LEN];
            let r = inp.take(HELLO_LEN);
            b[..r.len()].copy_from_slice(r);
            match Hello::decode(&b, &secret) {
                Ok(h) => {
                    assert_eq!(h.secret, secret);
                    assert_eq!(h.encode(), b);
                    let mut other = secret;
                    other[usize::from(inp.byte()) % SECRET_LEN] ^= 1;
                    assert_eq!(Hello::decode(&b, &other), Err(WireError::WrongSecret));
                }
                Err(WireError::WrongSecret) => assert_ne!(&b[20..], &secret[..]),
                Err(_) => {}
            }
        }
        1 => {
            let mut b = [0u8; FRAME_HDR_LEN];
            let r = inp.take(FRAME_HDR_LEN);
            b[..r.len()].copy_from_slice(r);
            if let Ok(h) = FrameHdr::decode(&b) {
                assert!(h.len <= WIRE_MAX_FRAME);
                if h.kind == FrameKind::Bye {
                    assert_eq!((h.len, h.tag), (0, 0));
                }
                assert_eq!(h.encode(), b);
            }
        }
        _ => {
            if let Ok(e) = Endpoint::decode(inp.rest()) {
                assert!(e.port != 0);
                let s = e.encode();
                let back = Endpoint::decode(s.as_bytes())
                    .unwrap_or_else(|err| panic!("{e:?} encodes as {s:?}, which fails: {err}"));
                assert_eq!(back, e, "{s:?}");
            }
        }
    }
});
