//! The PMI server's protocol core (`run/src/pmi_server/core.rs`, compiled
//! into the fuzz crate): a job of 1-4 ranks whose connections receive
//! arbitrary byte streams, in arbitrary chunks and interleavings, and
//! end-of-file at arbitrary points.
//!
//! Input: byte 0 = job size and process mapping; then operations: one byte
//! (low 2 bits: rank; high 6 bits: 0..=59 a chunk of that many following
//! bytes, 60..=61 end-of-file, 62..=63 one byte-at-a-time chunk of the
//! length in the next byte).
//!
//! Properties:
//! * never panics, whatever the order of operations;
//! * everything the server queues for a rank is a sequence of well-formed
//!   replies (PMI-1 lines or PMI-2 frames) that the tmpi client parses, and
//!   every reply carries a numeric `rc`;
//! * a closed connection gets no more output; each rank is reported
//!   disconnected and finalized at most once;
//! * the server's buffers stay bounded (no unbounded growth from hostile
//!   input).
#![no_main]

use libfuzzer_sys::fuzz_target;
use tmpi_base::pmi::{parse_v1_line, parse_v2_frame, Message};
use tmpi_fuzz::{show, Input, PmiEvent, Server, ServerConfig, SERVER_MAX_RANKS};

fn check_replies(rank: u32, mut out: &[u8]) {
    let whole = out;
    while !out.is_empty() {
        let (m, used): (Message, usize) = if out.starts_with(b"cmd=") {
            let nl = out
                .iter()
                .position(|&b| b == b'\n')
                .unwrap_or_else(|| panic!("rank {rank}: unterminated reply in {}", show(whole)));
            let m = parse_v1_line(&out[..=nl]).unwrap_or_else(|e| {
                panic!("rank {rank}: bad reply line {}: {e}", show(&out[..=nl]))
            });
            (m, nl + 1)
        } else {
            match parse_v2_frame(out, tmpi_base::pmi::wire::V2_MAX_BODY) {
                Ok(Some(x)) => x,
                other => panic!("rank {rank}: bad reply frame {}: {other:?}", show(out)),
            }
        };
        assert!(
            m.rc().is_ok() && m.get("rc").is_some(),
            "rank {rank}: reply without a numeric rc: {m:?}"
        );
        out = &out[used..];
    }
}

const MAPPINGS: [&str; 4] = ["", "(vector,(0,1,4))", "(vector,(0,2,1))", "(vector,(0,1"];

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let b0 = inp.byte();
    let size = u32::from(b0 % 4) + 1;
    debug_assert!(size <= SERVER_MAX_RANKS);
    let cfg = ServerConfig {
        size,
        kvsname: "kvs_fuzz_1".into(),
        process_mapping: MAPPINGS[usize::from(b0 >> 2) % MAPPINGS.len()].into(),
        appnum: 0,
        job_attrs: vec![("tmpi_attr".into(), "v".into())],
    };
    let mut srv = Server::new(&cfg);
    assert_eq!(srv.ranks(), size as usize);
    let mut closed = vec![false; size as usize];
    let mut disconnected = vec![0u32; size as usize];
    let mut finalized = vec![0u32; size as usize];
    let mut fed = 0usize;
    while !inp.is_empty() {
        let op = inp.byte();
        let rank = u32::from(op & 3) % size;
        let kind = op >> 2;
        match kind {
            0..=59 => {
                let chunk = inp.take(usize::from(kind));
                fed += chunk.len();
                srv.on_data(rank, chunk);
            }
            60 | 61 => srv.on_eof(rank),
            _ => {
                let n = usize::from(inp.byte());
                for &b in inp.take(n) {
                    fed += 1;
                    srv.on_data(rank, &[b]);
                }
            }
        }
        for r in 0..size {
            let out = srv.take_output(r);
            if closed[r as usize] {
                assert!(
                    out.is_empty(),
                    "rank {r}: output after close: {}",
                    show(&out)
                );
            }
            check_replies(r, &out);
            // A reply is bounded by what the job can store; with the few
            // bytes of one fuzz input the server cannot legitimately queue
            // megabytes.
            assert!(
                out.len() <= 64 * 1024 + 8 * fed,
                "rank {r}: {} reply bytes",
                out.len()
            );
            closed[r as usize] = srv.closed(r);
        }
        for e in srv.take_events() {
            match e {
                PmiEvent::Disconnected { rank, .. } => disconnected[rank as usize] += 1,
                PmiEvent::Finalized { rank } => finalized[rank as usize] += 1,
                PmiEvent::Initialized { rank }
                | PmiEvent::Abort { rank, .. }
                | PmiEvent::ProtocolError { rank, .. } => assert!(rank < size),
            }
        }
        assert!(disconnected.iter().all(|&n| n <= 1), "{disconnected:?}");
        assert!(finalized.iter().all(|&n| n <= 1), "{finalized:?}");
    }
    for r in 0..size {
        srv.on_eof(r);
        assert!(srv.closed(r));
    }
    for r in 0..size {
        // Replies queued before the close (a failed barrier) still parse.
        check_replies(r, &srv.take_output(r));
    }
    let _ = srv.take_events();
});
