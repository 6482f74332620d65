//! btl-tcp wire formats (`tmpi_btl_tcp::wire`): the connection handshake
//! (`Handshake`, authenticated by `tmpi_btl_tcp::auth`), the 8-byte frame
//! header of every message, and the endpoint string a rank publishes in the
//! modex.
//!
//! Input: byte 0 = which parser; the rest is its input (for the handshake:
//! 32 secret bytes, 32 listener-nonce bytes, then the received message).
//!
//! Properties:
//! * never panics;
//! * a handshake that decodes re-encodes to the received bytes; its MAC
//!   verifies under the secret only if it is the transcript's MAC, and a MAC
//!   with one bit changed, or under another secret, never verifies;
//!   a frame header re-encodes to the received bytes and its length is
//!   within `WIRE_MAX_FRAME`; BYE carries no body or tag;
//! * endpoints: `decode(encode(e)) == e` for every decoded endpoint, at most
//!   `MAX_ADDRS` addresses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_btl_tcp::auth::Transcript;
use tmpi_btl_tcp::wire::{
    Endpoint, FrameHdr, FrameKind, Handshake, HsKind, FRAME_HDR_LEN, HS_LEN, NONCE_LEN,
    SECRET_LEN, WIRE_MAX_FRAME,
};
use tmpi_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    match inp.byte() % 3 {
        0 => {
            let mut secret = [0u8; SECRET_LEN];
            let k = inp.take(SECRET_LEN);
            secret[..k.len()].copy_from_slice(k);
            let mut listener = [0u8; NONCE_LEN];
            let n = inp.take(NONCE_LEN);
            listener[..n.len()].copy_from_slice(n);
            let mut b = [0u8; HS_LEN];
            let r = inp.take(HS_LEN);
            b[..r.len()].copy_from_slice(r);
            if let Ok(h) = Handshake::decode(&b) {
                assert_eq!(h.encode(), b);
                if h.kind == HsKind::Hello {
                    let t = Transcript {
                        kind: h.kind,
                        from: h.rank,
                        to: 0,
                        size: h.size,
                        listener_nonce: &listener,
                        connector_nonce: &h.nonce,
                    };
                    let good = t.mac(&secret);
                    assert_eq!(t.verify(&secret, &h.mac), good == h.mac);
                    assert!(t.verify(&secret, &good));
                    let mut bad = good;
                    bad[usize::from(inp.byte()) % bad.len()] ^= 1;
                    assert!(!t.verify(&secret, &bad));
                    let mut other = secret;
                    other[usize::from(inp.byte()) % SECRET_LEN] ^= 1;
                    assert!(!t.verify(&other, &good));
                }
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
