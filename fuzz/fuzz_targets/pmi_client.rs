//! The PMI client's side: `PmiClient::connect` (PMI-1 and PMI-2 handshakes)
//! and its requests, against a "server" that answers with the fuzz input.
//!
//! Input: byte 0 = protocol (bit 0) and PMI_SIZE for PMI-1 (bits 1..); bytes
//! 1..=4 = four operations to run after the handshake (put, get, fence,
//! job attribute, process_info, modex get, finalize); the rest is the byte
//! stream the server sends, after which it closes its write side. Requests
//! the client writes are drained by a thread.
//!
//! Properties:
//! * never panics, never hangs (each reply read either completes, fails, or
//!   sees the end of the stream);
//! * whatever the server says, a connected client reports a rank below its
//!   size, and `process_info` (when it succeeds) describes this rank of a
//!   job of that size consistently;
//! * no allocation beyond libFuzzer's limit from what the server claims
//!   (sizes, lengths, part counts).
#![no_main]

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;

use libfuzzer_sys::fuzz_target;
use tmpi_base::modex::Modex;
use tmpi_base::pmi::{ConnectOptions, PmiClient, PmiModex, PmiVersion};
use tmpi_fuzz::Input;

fuzz_target!(|data: &[u8]| {
    let mut inp = Input::new(data);
    let b0 = inp.byte();
    let version = if b0 & 1 == 0 {
        PmiVersion::V1
    } else {
        PmiVersion::V2
    };
    let size = u32::from(b0 >> 1) + 1;
    let ops = [inp.byte(), inp.byte(), inp.byte(), inp.byte()];
    let replies = inp.rest().to_vec();

    let (client_end, server_end) = UnixStream::pair().expect("socketpair");
    let mut drain = server_end.try_clone().expect("dup");
    let mut writer = server_end;
    let w = std::thread::spawn(move || {
        let _ = writer.write_all(&replies);
        let _ = writer.shutdown(Shutdown::Write);
    });
    let d = std::thread::spawn(move || {
        let mut sink = [0u8; 4096];
        while let Ok(n) = drain.read(&mut sink) {
            if n == 0 {
                break;
            }
        }
    });

    let opts = ConnectOptions {
        rank: Some(size - 1),
        size: Some(size),
        jobid: None,
        pmi_id: None,
    };
    if let Ok(mut c) = PmiClient::connect(client_end, version, &opts) {
        assert!(
            c.size() > 0 && c.rank() < c.size(),
            "rank {} of {}",
            c.rank(),
            c.size()
        );
        assert!(!c.kvsname().is_empty());
        let mut modex_done = false;
        for op in ops {
            let r = match op % 8 {
                0 => c.put("fuzz-key", "fuzz-value").map(drop),
                1 => c.get(Some(0), "fuzz-key").map(drop),
                2 => c.fence(),
                3 => c.job_attr("PMI_process_mapping").map(drop),
                4 => c.process_info().map(|info| {
                    assert_eq!(info.rank, c.rank());
                    assert_eq!(info.size, c.size());
                    assert_eq!(info.node_of.len(), c.size() as usize);
                    assert_eq!(info.node_of[c.rank() as usize], info.node_id);
                    assert!(info.local_rank < info.local_size);
                }),
                5 if !modex_done => {
                    modex_done = true;
                    // The modex reads through the same client.
                    let mut m = PmiModex::new(c);
                    let _ = m.get(0, "btl.sm");
                    c = m.into_inner();
                    Ok(())
                }
                6 => c.finalize(),
                _ => Ok(()),
            };
            if r.is_err() {
                break;
            }
        }
        let _ = c.finalize();
    }
    // The client's end is closed (dropped): the drain thread sees EOF.
    w.join().unwrap();
    d.join().unwrap();
});
