//! btl-sm fast-box records (`btl-sm/src/shm.rs`, compiled into the fuzz
//! crate): the `[len u32 | tag u8 | kind u8 | pad] ++ data` records a peer
//! process writes into this process's shared-memory ring and publishes with
//! a release store of each record's header word (the receiver polls the
//! header word at its `tail`; the sender's `head` counter is only the
//! sender's bookkeeping since btl-sm 48ad7e8). A buggy or hostile peer
//! controls the ring bytes (header words included) and `head`; the
//! receiver's own `tail` is sane.
//!
//! Input: byte 0 = ring size (64 << (b % 5)) and mode.
//! * mode hostile: `head` from the input, `tail` a multiple of 8 from the
//!   input, ring bytes from the input; `read` is called a few times.
//! * mode round trip: records built from the input are written with
//!   `Fbox::write` and read back (interleaved), in order and intact.
//!
//! Properties:
//! * never panics, never reads outside the ring (ASan), never loops
//!   without bound (libFuzzer timeout) whatever the peer wrote;
//! * every record handed to the callback lies inside the ring and is at
//!   most `max_record` bytes; `read` handles at most `budget` records;
//! * round trip: what was written is read back exactly, in order, and the
//!   ring drains.
#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use tmpi_fuzz::sm_shm::{Fbox, FBOX_CTL};
use tmpi_fuzz::{AlignedMem, Input};

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let b0 = inp.byte();
    let size = 64usize << (b0 % 5);
    let mut mem = AlignedMem::new(FBOX_CTL + size);
    let ring = mem.as_mut_ptr() as usize + FBOX_CTL;
    if b0 & 0x80 != 0 {
        // Hostile peer. Control block: head @0, tail @64 (u64 each).
        let head = inp.u64();
        let tail = u64::from(inp.u32()) * 8;
        {
            let b = mem.bytes_mut();
            b[0..8].copy_from_slice(&head.to_ne_bytes());
            b[64..72].copy_from_slice(&tail.to_ne_bytes());
            let src = inp.take(size);
            b[FBOX_CTL..FBOX_CTL + src.len()].copy_from_slice(src);
        }
        // SAFETY: aligned, FBOX_CTL + size bytes that outlive the view;
        // size is a power of two and a multiple of 8; single-threaded.
        let fb = unsafe { Fbox::at(mem.as_mut_ptr(), size) };
        for _ in 0..4 {
            let budget = usize::from(inp.byte() % 16) + 1;
            let mut seen = 0usize;
            let r = fb.read(budget, &mut |_tag, bytes| {
                seen += 1;
                let p = bytes.as_ptr() as usize;
                assert!(
                    p >= ring && p + bytes.len() <= ring + size,
                    "record outside the ring"
                );
                assert!(bytes.len() <= Fbox::max_record(size));
            });
            match r {
                Ok(n) => {
                    assert_eq!(n, seen);
                    assert!(n <= budget);
                }
                Err(_) => break,
            }
        }
        return;
    }
    // Round trip through the real writer.
    // SAFETY: as above; zeroed control words.
    let fb = unsafe { Fbox::at(mem.as_mut_ptr(), size) };
    let mut expect: VecDeque<(u8, Vec<u8>)> = VecDeque::new();
    while !inp.is_empty() {
        let op = inp.byte();
        if op & 1 == 0 {
            let tag = inp.byte();
            let n = usize::from(op >> 1);
            let header = inp.take(n.min(8)).to_vec();
            let payload = inp.take(n.saturating_sub(8)).to_vec();
            let fits = header.len() + payload.len() <= Fbox::max_record(size);
            let ok = fb.write(tag, &header, &payload);
            if !fits {
                assert!(!ok, "oversized record accepted");
            }
            if ok {
                expect.push_back((tag, [header, payload].concat()));
            }
        } else {
            let budget = usize::from(op >> 1) % 8 + 1;
            let n = fb
                .read(budget, &mut |tag, bytes| {
                    let (t, b) = expect.pop_front().expect("record that was never written");
                    assert_eq!((tag, bytes), (t, &b[..]));
                })
                .expect("a record written by Fbox::write is corrupt");
            assert!(n <= budget);
        }
    }
    while !expect.is_empty() {
        let before = expect.len();
        fb.read(64, &mut |tag, bytes| {
            let (t, b) = expect.pop_front().expect("extra record");
            assert_eq!((tag, bytes), (t, &b[..]));
        })
        .expect("corrupt");
        assert!(expect.len() < before, "written records not readable");
    }
    assert!(fb.drained());
});
