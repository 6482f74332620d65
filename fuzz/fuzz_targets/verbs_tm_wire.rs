//! Hardware tag-matching wire headers (`tmpi_verbs::wire`): the TMH (16
//! bytes) and RVH (16 bytes) of every tagged message, as parsed by the
//! soft NIC and the openib BTL from bytes a peer sent.
//!
//! Properties:
//! * never panics, on any length;
//! * a successful parse never reports a header longer than the input;
//! * re-emitting a parsed header reproduces the input's header bytes
//!   exactly (nothing is ignored or invented);
//! * `parse(emit(h)) == h` for headers built from the input;
//! * the zero-copy views agree with the parsed forms.
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_fuzz::Input;
use tmpi_verbs::wire::{
    Rvh, RvhPacket, TagHeader, Tmh, TmhOpcode, TmhPacket, WireError, RVH_LEN, TMH_LEN,
};

fuzz_target!(|data: &[u8]| {
    match TagHeader::parse(data) {
        Ok(h) => {
            let n = h.header_len();
            assert!(
                n <= data.len(),
                "header of {n} bytes in {} bytes",
                data.len()
            );
            assert_eq!(h.rvh.is_some(), n == TMH_LEN + RVH_LEN);
            if h.tmh.opcode == TmhOpcode::Rndv {
                assert!(h.rvh.is_some());
            }
            let mut out = [0u8; TMH_LEN + RVH_LEN];
            assert_eq!(h.emit(&mut out), Ok(n));
            assert_eq!(&out[..n], &data[..n]);
            // Too small an output buffer is an error, not a panic.
            assert!(matches!(
                h.emit(&mut out[..n - 1]),
                Err(WireError::Truncated { .. })
            ));
            let p = TmhPacket::new_checked(data).unwrap();
            assert_eq!(p.opcode_raw(), h.tmh.opcode as u8);
            assert_eq!(p.app_ctx(), h.tmh.app_ctx);
            assert_eq!(p.tag(), h.tmh.tag);
            assert_eq!(p.payload().len(), data.len() - TMH_LEN);
            if let Some(r) = h.rvh {
                let v = RvhPacket::new_checked(&data[TMH_LEN..]).unwrap();
                assert_eq!((v.va(), v.rkey(), v.len()), (r.va, r.rkey, r.len));
                assert_eq!(v.is_empty(), r.len == 0);
            }
        }
        Err(WireError::Truncated { need, have }) => assert!(have < need),
        Err(_) => {}
    }
    // Each header alone.
    if let Ok(t) = Tmh::parse(data) {
        assert_eq!(&t.to_bytes()[..], &data[..TMH_LEN]);
    }
    if let Ok(r) = Rvh::parse(data) {
        assert_eq!(&r.to_bytes()[..], &data[..RVH_LEN]);
    }
    // Headers built from the input survive emit + parse.
    let mut inp = Input::new(data);
    let op = match inp.byte() % 4 {
        0 => TmhOpcode::NoTag,
        1 => TmhOpcode::Rndv,
        2 => TmhOpcode::Fin,
        _ => TmhOpcode::Eager,
    };
    let tmh = Tmh {
        opcode: op,
        app_ctx: inp.u32(),
        tag: inp.u64(),
    };
    let rvh = Rvh {
        va: inp.u64(),
        rkey: inp.u32(),
        len: inp.u32(),
    };
    let with_rvh = match op {
        TmhOpcode::Rndv => true,
        TmhOpcode::Fin => inp.byte() & 1 == 1,
        _ => false,
    };
    let h = TagHeader {
        tmh,
        rvh: with_rvh.then_some(rvh),
    };
    let mut out = vec![0u8; h.header_len()];
    out.extend_from_slice(inp.rest());
    assert_eq!(h.emit(&mut out), Ok(h.header_len()));
    if op == TmhOpcode::Fin && !with_rvh {
        // A FIN without RVH is recognised as such only when fewer than 32
        // bytes follow; with a payload the parser reads one.
        if out.len() < TMH_LEN + RVH_LEN {
            assert_eq!(TagHeader::parse(&out), Ok(h));
        }
    } else {
        assert_eq!(TagHeader::parse(&out), Ok(h));
    }
    assert_eq!(Tmh::parse(&tmh.to_bytes()), Ok(tmh));
    assert_eq!(Rvh::parse(&rvh.to_bytes()), Ok(rvh));
});
