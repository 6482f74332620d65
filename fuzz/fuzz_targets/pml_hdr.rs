//! pml fragment headers (`pml/src/hdr.rs`, compiled into the fuzz crate):
//! the first bytes of every fragment a peer's pml hands to a BTL.
//!
//! Properties:
//! * never panics;
//! * payload, data and region slices lie inside the input (a successful
//!   parse never reports bytes beyond the input), and header + payload
//!   account for the whole fragment;
//! * re-encoding a parsed header reproduces the input's header bytes
//!   (the decoder accepts only what the encoder can produce);
//! * `parse(encode(h)) == h` for headers built from the input;
//! * `parse_placed(header, n)` (a NIC left the `n` payload bytes in the
//!   receive's buffer) never panics, and accepts exactly the MATCH/RNDV
//!   headers that `parse` accepts with `n` bytes after them, giving the
//!   same header with empty payload slices.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_fuzz::pml_hdr::*;
use tmpi_fuzz::{assert_within, show, Input};

fuzz_target!(|data: &[u8]| {
    if let Ok(h) = Header::parse(data) {
        let (enc, tail): (Vec<u8>, &[u8]) = match &h {
            Header::Match(m, payload) => (m.encode().to_vec(), payload),
            Header::Rndv(r) => {
                assert_within(data, r.region);
                assert!(r.region.len() <= MAX_REGION_LEN);
                assert_eq!(r.region.is_empty(), r.flags & FLAG_REGION == 0);
                // Inline data (a small synchronous send) follows the header
                // and is exactly `len` bytes; none without the flag.
                assert_eq!(r.data.is_empty(), r.flags & FLAG_INLINE == 0 || r.len == 0);
                if r.flags & FLAG_INLINE != 0 {
                    assert_eq!(r.data.len() as u64, r.len);
                }
                (r.encode(), r.data)
            }
            Header::Ack(a) => (a.encode().to_vec(), &data[ACK_LEN..]),
            Header::Frag(f, d) => (f.encode().to_vec(), d),
            Header::Fin(f) => (f.encode().to_vec(), &data[FIN_LEN..]),
            Header::Credit(c) => (c.encode().to_vec(), &data[CREDIT_LEN..]),
            Header::Bye => (encode_bye().to_vec(), &data[BYE_LEN..]),
        };
        assert_within(data, tail);
        assert!(enc.len() <= data.len());
        assert_eq!(enc.len() + tail.len(), data.len());
        assert_eq!(
            &enc[..],
            &data[..enc.len()],
            "decoder accepted header bytes the encoder never writes: {}",
            show(data)
        );
        assert_eq!(Header::parse(&[&enc[..], tail].concat()).as_ref(), Ok(&h));
    }
    // A header handed up alone, its payload placed elsewhere: the first
    // byte says how many payload bytes.
    if let Some((&n, header)) = data.split_first() {
        let n = usize::from(n);
        let placed = Header::parse_placed(header, n);
        let whole = [header, &vec![0u8; n][..]].concat();
        let full = match Header::parse(&whole) {
            Ok(Header::Match(m, p)) if p.len() == n => Some(Header::Match(m, &[][..])),
            Ok(Header::Rndv(r)) if r.data.len() == n => {
                let hl = RNDV_LEN + r.region.len();
                (hl == header.len()).then(|| {
                    Header::Rndv(RndvHdr {
                        region: &header[RNDV_LEN..hl],
                        data: &[],
                        ..r
                    })
                })
            }
            _ => None,
        };
        assert_eq!(placed.ok(), full, "parse_placed disagrees with parse: {}", show(data));
    }
    // Headers built from the input.
    let mut inp = Input::new(data);
    let m = MatchHdr {
        ctx: inp.u32(),
        src: inp.u32() as i32,
        tag: inp.u32() as i32,
        seq: inp.u32(),
    };
    let kind = inp.byte();
    let flags = inp.byte() & (FLAG_SYNC | FLAG_REGION | FLAG_INLINE);
    let a = inp.u64();
    let b = inp.u64();
    let c = inp.u64();
    let rest = inp.rest();
    match kind % 5 {
        0 => {
            let mut e = m.encode().to_vec();
            e.extend_from_slice(rest);
            assert_eq!(Header::parse(&e), Ok(Header::Match(m, rest)));
        }
        1 => {
            let region = if flags & FLAG_REGION != 0 {
                let r = &rest[..rest.len().min(MAX_REGION_LEN)];
                if r.is_empty() {
                    &[7u8][..]
                } else {
                    r
                }
            } else {
                &[][..]
            };
            if flags & FLAG_INLINE != 0 {
                // The message follows the header; no region.
                let r = RndvHdr {
                    m,
                    flags: flags & !FLAG_REGION,
                    len: rest.len() as u64,
                    sreq: b,
                    region: &[],
                    data: rest,
                };
                let e = [&r.encode()[..], rest].concat();
                assert_eq!(Header::parse(&e), Ok(Header::Rndv(r.clone())));
                return;
            }
            let r = RndvHdr {
                m,
                flags,
                len: a,
                sreq: b,
                region,
                data: &[],
            };
            assert_eq!(Header::parse(&r.encode()), Ok(Header::Rndv(r.clone())));
        }
        2 => {
            let h = AckHdr {
                sreq: a,
                rreq: b,
                want: c,
            };
            assert_eq!(Header::parse(&h.encode()), Ok(Header::Ack(h)));
        }
        3 => {
            let h = FragHdr { rreq: a, offset: b };
            let mut e = h.encode().to_vec();
            e.extend_from_slice(rest);
            assert_eq!(Header::parse(&e), Ok(Header::Frag(h, rest)));
        }
        _ => {
            let h = FinHdr {
                sreq: a,
                status: c as i32,
            };
            assert_eq!(Header::parse(&h.encode()), Ok(Header::Fin(h)));
        }
    }
});
