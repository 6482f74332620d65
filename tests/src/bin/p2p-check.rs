//! Multi-process checks of tmpi's point-to-point semantics, one case per
//! run: `tmpirun -n N p2p-check CASE`. Each case checks its results on the
//! ranks themselves and exits non-zero (failing the job) on any deviation;
//! rank 0 prints `p2p-check CASE: OK` at the end. Driven by
//! `tests/tests/p2p.rs`.

use std::process::ExitCode;
use std::time::{Duration, Instant};

use tmpi::{Comm, Error, MpiErrorClass, Request, ANY_SOURCE, ANY_TAG};
use tmpi_tests::check::{e, R};
use tmpi_tests::ensure;

/// Deterministic payload for (seed, len) and its checksum (FNV-1a).
fn payload(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &c| {
        (h ^ c as u64).wrapping_mul(0x0100_0000_01b3)
    })
}

/// Non-overtaking with wildcards: every rank > 0 sends a mix of eager and
/// rendezvous messages on three tags; rank 0 receives them with
/// ANY_SOURCE/ANY_TAG, then ANY_SOURCE/specific tag, then specific
/// source/ANY_TAG, and checks that per (source, tag) the sequence numbers
/// arrive in send order, and per source too for the ANY_TAG phases.
fn order(w: &Comm) -> R {
    const M: u32 = 300;
    let (rank, size) = (w.rank(), w.size());
    ensure!(size >= 2, "needs 2 ranks");
    let len_of = |i: u32| if i.is_multiple_of(5) { 20_000 } else { 8 };
    if rank != 0 {
        // Non-blocking sends: the receiver takes tags out of send order, so
        // a blocking rendezvous send would (legally) deadlock.
        for phase in 0..3u32 {
            // Wait for rank 0 to finish the previous phase: with wildcard
            // receives, a later phase's message could legally match first.
            let mut go = [0u8];
            w.recv(&mut go, 0, 1000).map_err(e)?;
            let msgs: Vec<Vec<u8>> = (0..M)
                .map(|i| {
                    let mut m = payload((rank as u64) << 32 | i as u64, len_of(i));
                    m[..4].copy_from_slice(&i.to_le_bytes());
                    m[4..8].copy_from_slice(&phase.to_le_bytes());
                    m
                })
                .collect();
            tmpi::scope(|s| -> Result<(), Error> {
                let reqs = msgs
                    .iter()
                    .enumerate()
                    .map(|(i, m)| w.isend(s, m, 0, (i % 3) as i32))
                    .collect::<Result<Vec<_>, _>>()?;
                Request::wait_all(reqs)?;
                Ok(())
            })
            .map_err(e)?;
        }
        return Ok(());
    }
    let n = (size - 1) as usize;
    let mut buf = vec![0u8; 20_000];
    let go = |w: &Comm| -> R {
        for r in 1..size {
            w.send(&[1u8], r, 1000).map_err(e)?;
        }
        Ok(())
    };
    go(w)?;
    // Phase 0: everything through ANY_SOURCE / ANY_TAG.
    let mut last = vec![-1i64; n + 1];
    for _ in 0..M as usize * n {
        let st = w.recv(&mut buf, ANY_SOURCE, ANY_TAG).map_err(e)?;
        let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
        let s = st.source() as usize;
        ensure!(
            u32::from_le_bytes(buf[4..8].try_into().unwrap()) == 0,
            "phase mixup"
        );
        ensure!(
            i as i64 > last[s],
            "from {s}: message {i} after {}",
            last[s]
        );
        ensure!(st.tag() == (i % 3) as i32, "tag");
        ensure!(st.bytes() == len_of(i), "length");
        let mut expect = payload((s as u64) << 32 | i as u64, len_of(i));
        expect[..4].copy_from_slice(&i.to_le_bytes());
        expect[4..8].copy_from_slice(&0u32.to_le_bytes());
        ensure!(buf[..st.bytes()] == expect[..], "payload from {s} #{i}");
        last[s] = i as i64;
    }
    // Phase 1: ANY_SOURCE with a given tag, tag by tag.
    go(w)?;
    let mut last = vec![[-1i64; 3]; n + 1];
    for tag in [2, 0, 1] {
        let count = (0..M).filter(|i| i % 3 == tag as u32).count() * n;
        for _ in 0..count {
            let st = w.recv(&mut buf, ANY_SOURCE, tag).map_err(e)?;
            let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
            ensure!(
                u32::from_le_bytes(buf[4..8].try_into().unwrap()) == 1,
                "phase mixup"
            );
            let s = st.source() as usize;
            ensure!(i as i64 > last[s][tag as usize], "overtaking in phase 1");
            last[s][tag as usize] = i as i64;
        }
    }
    // Phase 2: a given source with ANY_TAG, sources in reverse order.
    go(w)?;
    for s in (1..size).rev() {
        let mut last = -1i64;
        for _ in 0..M {
            let st = w.recv(&mut buf, s, ANY_TAG).map_err(e)?;
            let i = u32::from_le_bytes(buf[..4].try_into().unwrap());
            ensure!(
                u32::from_le_bytes(buf[4..8].try_into().unwrap()) == 2,
                "phase mixup"
            );
            ensure!(st.source() == s && i as i64 > last, "overtaking in phase 2");
            last = i as i64;
        }
    }
    ensure!(
        w.iprobe(ANY_SOURCE, ANY_TAG).map_err(e)?.is_none(),
        "leftover message"
    );
    Ok(())
}

/// Probe, then receive with the probed size; matched probe + mrecv.
fn probe(w: &Comm) -> R {
    let sizes = [0usize, 100, 4096, 100_000, 3 << 20];
    if w.rank() == 1 {
        for (k, &n) in sizes.iter().enumerate() {
            w.send(&payload(k as u64, n), 0, 10 + k as i32).map_err(e)?;
        }
        for (k, &n) in sizes.iter().enumerate() {
            w.send(&payload(100 + k as u64, n), 0, 20).map_err(e)?;
        }
    } else if w.rank() == 0 {
        for (k, &n) in sizes.iter().enumerate() {
            let st = w.probe(ANY_SOURCE, ANY_TAG).map_err(e)?;
            ensure!(st.tag() == 10 + k as i32 && st.source() == 1, "probe order");
            ensure!(st.bytes() == n, "probe size {} != {n}", st.bytes());
            // A second probe sees the same message.
            let again = w.iprobe(1, st.tag()).map_err(e)?.ok_or("iprobe lost it")?;
            ensure!(again == st, "iprobe differs");
            let mut buf = vec![0u8; st.count::<u8>()];
            let r = w.recv(&mut buf, st.source(), st.tag()).map_err(e)?;
            ensure!(r.bytes() == n && buf == payload(k as u64, n), "data");
        }
        for (k, &n) in sizes.iter().enumerate() {
            let (msg, st) = w.mprobe(1, 20).map_err(e)?;
            ensure!(st.bytes() == n && msg.bytes() == n, "mprobe size");
            // The message is out of matching: nobody else can see it.
            if let Some(p) = w.iprobe(1, 20).map_err(e)? {
                ensure!(
                    p.bytes() == sizes.get(k + 1).copied().unwrap_or(usize::MAX),
                    "mprobed message still visible"
                );
            }
            let mut buf = vec![0u8; n];
            let r = msg.recv(&mut buf).map_err(e)?;
            ensure!(
                r.bytes() == n && buf == payload(100 + k as u64, n),
                "mrecv data"
            );
        }
        ensure!(
            w.iprobe(ANY_SOURCE, ANY_TAG).map_err(e)?.is_none(),
            "leftover"
        );
    }
    w.barrier().map_err(e)
}

/// Cancel of a pending receive; the message sent afterwards goes to the
/// next receive. Send cancel may fail; the send still completes.
fn cancel(w: &Comm) -> R {
    if w.rank() == 0 {
        let mut a = [0u8; 16];
        let st = tmpi::scope(|s| -> Result<tmpi::Status, Error> {
            let r = w.irecv(s, &mut a, 1, 99)?;
            let c = r.cancel()?;
            let st = r.wait()?;
            assert!(c == st.cancelled());
            Ok(st)
        })
        .map_err(e)?;
        ensure!(st.cancelled(), "receive not cancelled");
        w.barrier().map_err(e)?;
        let mut b = [0u8; 16];
        let st = w.recv(&mut b, 1, 99).map_err(e)?;
        ensure!(
            !st.cancelled() && &b[..5] == b"after",
            "message went astray"
        );
        ensure!(a == [0u8; 16], "cancelled buffer written");
        // A receive that matched cannot be cancelled.
        let mut c = [0u8; 8];
        tmpi::scope(|s| -> Result<(), Error> {
            let r = w.irecv(s, &mut c, 1, 98)?;
            w.send(&[1u8], 1, 97)?;
            while w.iprobe(1, 96)?.is_none() {} // rank 1 says its send is done
            std::thread::sleep(Duration::from_millis(20));
            let _ = r.cancel()?;
            let st = r.wait()?;
            assert!(!st.cancelled() && st.bytes() == 8);
            Ok(())
        })
        .map_err(e)?;
        let mut z = [0u8; 1];
        w.recv(&mut z, 1, 96).map_err(e)?;
        ensure!(c == *b"matched!", "matched receive data");
    } else if w.rank() == 1 {
        w.barrier().map_err(e)?;
        let msg = *b"after...........";
        tmpi::scope(|s| -> Result<(), Error> {
            let q = w.isend(s, &msg, 0, 99)?;
            let _maybe = q.cancel()?; // may fail; either way it completes
            q.wait()?;
            Ok(())
        })
        .map_err(e)?;
        let mut z = [0u8; 1];
        w.recv(&mut z, 0, 97).map_err(e)?;
        w.send(b"matched!", 0, 98).map_err(e)?;
        w.send(&[0u8], 0, 96).map_err(e)?;
    } else {
        w.barrier().map_err(e)?;
    }
    Ok(())
}

/// The blocking receive's direct path (docs/pml.md "The small-message fast
/// path", direct receive): rank 1's small messages wait in the fast
/// box while rank 0 sleeps, so each of rank 0's receives finds one at the
/// head; then a ping-pong, where rank 0's receive is posted and waiting
/// when the reply lands. Checks that the path is taken in both (the
/// `direct_recv` counter) and that it leaves alone every head message that is not the
/// receive's: another tag (taken later by its own receive), one that
/// does not fit (MPI_ERR_TRUNCATE as usual), one an earlier posted
/// receive wants, and one behind a message already in the unexpected
/// queue. ANY_TAG takes the head.
fn direct(mpi: &tmpi::Mpi, w: &Comm) -> R {
    const STREAM: u32 = 400;
    const PINGS: u32 = 200;
    let pause = || std::thread::sleep(Duration::from_millis(30));
    let tagged = |i: u32| {
        let mut m = payload(i as u64, 24);
        m[..4].copy_from_slice(&i.to_le_bytes());
        m
    };
    let mut go = [0u8];
    if w.rank() == 1 {
        // Stream: all sent before rank 0 starts receiving.
        for i in 0..STREAM {
            w.send(&tagged(i), 0, 5).map_err(e)?;
        }
        w.recv(&mut go, 0, 100).map_err(e)?;
        // Ping-pong: rank 0's receive waits, posted, for each reply.
        let mut b = [0u8; 24];
        for i in 0..PINGS {
            w.recv(&mut b, 0, 6).map_err(e)?;
            ensure!(b == tagged(2000 + i)[..], "ping {i}: payload");
            w.send(&tagged(3000 + i), 0, 6).map_err(e)?;
        }
        // Tag 1 then tag 2; rank 0 asks for tag 2 first.
        w.send(&tagged(1001), 0, 1).map_err(e)?;
        w.send(&tagged(1002), 0, 2).map_err(e)?;
        // 24 bytes into an 8-byte buffer, then a message that fits.
        w.send(&tagged(1003), 0, 3).map_err(e)?;
        w.send(&tagged(1004), 0, 3).map_err(e)?;
        // Any tag.
        w.send(&tagged(1005), 0, 7).map_err(e)?;
        w.recv(&mut go, 0, 100).map_err(e)?;
        // Two on tag 9: the first is for rank 0's earlier irecv.
        w.send(&tagged(1006), 0, 9).map_err(e)?;
        w.send(&tagged(1007), 0, 9).map_err(e)?;
        w.recv(&mut go, 0, 100).map_err(e)?;
        // Tag 4: the first goes to the unexpected queue (rank 0 probes it)
        // before the second is sent.
        w.send(&tagged(1008), 0, 4).map_err(e)?;
        w.recv(&mut go, 0, 100).map_err(e)?;
        w.send(&tagged(1009), 0, 4).map_err(e)?;
    } else if w.rank() == 0 {
        let mut b = [0u8; 24];
        let check = |b: &[u8], st: &tmpi::Status, i: u32, tag: i32| -> R {
            ensure!(
                st.source() == 1 && st.tag() == tag && st.bytes() == 24,
                "message {i}: status {st:?}"
            );
            ensure!(b == &tagged(i)[..], "message {i}: payload");
            Ok(())
        };
        let before = mpi.stats().direct_recv;
        pause();
        for i in 0..STREAM {
            let st = w.recv(&mut b, 1, 5).map_err(e)?;
            check(&b, &st, i, 5)?;
        }
        let taken = mpi.stats().direct_recv - before;
        ensure!(taken > 0, "no stream message took the direct path");
        w.send(&[1u8], 1, 100).map_err(e)?;
        let before = mpi.stats().direct_recv;
        for i in 0..PINGS {
            w.send(&tagged(2000 + i), 1, 6).map_err(e)?;
            let st = w.recv(&mut b, 1, 6).map_err(e)?;
            check(&b, &st, 3000 + i, 6)?;
        }
        let pong = mpi.stats().direct_recv - before;
        ensure!(pong > 0, "no reply was taken by a waiting receive");
        // A receive satisfied straight from the fast box leaves nothing
        // behind: no posted receive in the matcher, no live request.
        let q = mpi.pml().queue_stats();
        ensure!(
            q.posted_depth == 0 && q.unexpected_depth == 0,
            "queues after the ping-pong: {q:?}"
        );
        ensure!(
            mpi.pml().live_requests() == 0,
            "requests left after the ping-pong"
        );
        pause();
        let st = w.recv(&mut b, 1, 2).map_err(e)?;
        check(&b, &st, 1002, 2)?;
        let st = w.recv(&mut b, 1, 1).map_err(e)?;
        check(&b, &st, 1001, 1)?;
        let mut small = [0u8; 8];
        let err = w
            .recv(&mut small, 1, 3)
            .expect_err("truncation not reported");
        ensure!(
            err.class() == MpiErrorClass::Truncate,
            "class {:?}",
            err.class()
        );
        ensure!(small[..] == tagged(1003)[..8], "truncated prefix");
        let st = w.recv(&mut b, 1, 3).map_err(e)?;
        check(&b, &st, 1004, 3)?;
        let st = w.recv(&mut b, 1, ANY_TAG).map_err(e)?;
        check(&b, &st, 1005, 7)?;
        let mut first = [0u8; 24];
        let (st0, st) = tmpi::scope(|s| -> Result<_, Error> {
            let r = w.irecv(s, &mut first, 1, 9)?;
            w.send(&[1u8], 1, 100)?;
            pause();
            let st = w.recv(&mut b, 1, 9)?;
            Ok((r.wait()?, st))
        })
        .map_err(e)?;
        check(&first, &st0, 1006, 9).map_err(|m| format!("earlier irecv: {m}"))?;
        check(&b, &st, 1007, 9)?;
        w.send(&[1u8], 1, 100).map_err(e)?;
        while w.iprobe(1, 4).map_err(e)?.is_none() {}
        w.send(&[1u8], 1, 100).map_err(e)?;
        pause();
        let st = w.recv(&mut b, 1, 4).map_err(e)?;
        check(&b, &st, 1008, 4)?;
        let st = w.recv(&mut b, 1, 4).map_err(e)?;
        check(&b, &st, 1009, 4)?;
        println!(
            "direct: {taken} of {STREAM} stream messages and {pong} of {PINGS} replies taken from \
             the fast box"
        );
    }
    w.barrier().map_err(e)
}

/// Truncation: the buffer is filled, nothing is written past it, the error
/// is MPI_ERR_TRUNCATE with the status, and later traffic is unaffected.
fn truncate(w: &Comm) -> R {
    let sizes = [1000usize, 1 << 20];
    if w.rank() == 1 {
        for (k, &n) in sizes.iter().enumerate() {
            w.send(&payload(k as u64, n), 0, 5).map_err(e)?;
            w.send(&payload(50 + k as u64, 64), 0, 6).map_err(e)?;
        }
    } else if w.rank() == 0 {
        for (k, &n) in sizes.iter().enumerate() {
            let mut region = vec![0xa5u8; n];
            let cut = n / 2 + 3;
            let (head, tail) = region.split_at_mut(cut);
            let err = w.recv(head, 1, 5).expect_err("truncation not reported");
            ensure!(
                err.class() == MpiErrorClass::Truncate,
                "class {:?}",
                err.class()
            );
            let st = err.status().ok_or("no status")?;
            ensure!(
                st.bytes() == cut && st.source() == 1 && st.tag() == 5,
                "status {st:?}"
            );
            ensure!(head[..] == payload(k as u64, n)[..cut], "prefix differs");
            ensure!(tail.iter().all(|&b| b == 0xa5), "written past the buffer");
            let mut next = [0u8; 64];
            w.recv(&mut next, 1, 6).map_err(e)?;
            ensure!(
                next[..] == payload(50 + k as u64, 64)[..],
                "later message damaged"
            );
        }
    }
    w.barrier().map_err(e)
}

/// A 1 MiB rendezvous into a receive of half its size that was posted
/// (and, with tag matching on, handed to the NIC) before the message left:
/// the NIC consumes the entry and hands the request to software
/// (RNDV_INCOMPLETE), which reports the truncation with the prefix in place.
fn truncate_posted(w: &Comm) -> R {
    let n = 1usize << 20;
    let cut = n / 2 + 3;
    match w.rank() {
        0 => {
            let mut region = vec![0xa5u8; n];
            let mut next = [0u8; 64];
            let (head, tail) = region.split_at_mut(cut);
            let first = tmpi::scope(|s| -> Result<Result<tmpi::Status, Error>, Error> {
                let r1 = w.irecv(s, head, 1, 5)?;
                let r2 = w.irecv(s, &mut next, 1, 6)?;
                w.barrier()?;
                let first = r1.wait();
                r2.wait()?;
                Ok(first)
            })
            .map_err(e)?;
            let err = first.expect_err("truncation not reported");
            ensure!(
                err.class() == MpiErrorClass::Truncate,
                "class {:?}",
                err.class()
            );
            let st = err.status().ok_or("no status")?;
            ensure!(st.bytes() == cut && st.source() == 1, "status {st:?}");
            ensure!(head[..] == payload(7, n)[..cut], "prefix differs");
            ensure!(tail.iter().all(|&b| b == 0xa5), "written past the buffer");
            ensure!(next[..] == payload(8, 64)[..], "later message damaged");
        }
        1 => {
            w.barrier().map_err(e)?;
            w.send(&payload(7, n), 0, 5).map_err(e)?;
            w.send(&payload(8, 64), 0, 6).map_err(e)?;
        }
        _ => w.barrier().map_err(e)?,
    }
    w.barrier().map_err(e)
}

/// Zero-byte messages in every mode, to peers and to self.
fn zero(w: &Comm) -> R {
    let (rank, size) = (w.rank(), w.size());
    let to = (rank + 1) % size;
    let from = (rank + size - 1) % size;
    let empty: [u8; 0] = [];
    let mut buf = [0u8; 4];
    for mode in 0..3 {
        let st = tmpi::scope(|s| -> Result<tmpi::Status, Error> {
            let r = w.irecv(s, &mut buf, from, 3)?;
            match mode {
                0 => w.send(&empty, to, 3)?,
                1 => w.ssend(&empty, to, 3)?,
                _ => {
                    let q = w.isend(s, &empty, to, 3)?;
                    q.wait()?;
                }
            }
            r.wait()
        })
        .map_err(e)?;
        ensure!(
            st.bytes() == 0 && st.source() == from && st.tag() == 3,
            "status {st:?}"
        );
    }
    let st = w.sendrecv(&empty, rank, 4, &mut buf, rank, 4).map_err(e)?;
    ensure!(st.bytes() == 0, "self zero");
    let st = w
        .sendrecv(&empty, tmpi::PROC_NULL, 4, &mut buf, tmpi::PROC_NULL, 4)
        .map_err(e)?;
    ensure!(
        st.source() == tmpi::PROC_NULL && st.bytes() == 0,
        "PROC_NULL status"
    );
    w.barrier().map_err(e)
}

/// Large checksummed messages, eager through rendezvous up to 64 MiB,
/// both directions.
fn big(w: &Comm) -> R {
    let sizes = [
        1usize,
        3000,
        4096,
        5000,
        65_536,
        1 << 20,
        3 << 20 | 7,
        64 << 20,
    ];
    if w.rank() > 1 {
        return w.barrier().map_err(e);
    }
    let peer = 1 - w.rank();
    for (k, &n) in sizes.iter().enumerate() {
        let out = payload(k as u64 + 1000 * w.rank() as u64, n);
        let sum = [fnv(&out)];
        let mut inb = vec![0u8; n];
        let mut sum_in = [0u64];
        tmpi::scope(|s| -> Result<(), Error> {
            let r1 = w.irecv(s, &mut inb, peer, 1)?;
            let r2 = w.irecv(s, &mut sum_in, peer, 2)?;
            let q1 = w.isend(s, &out, peer, 1)?;
            let q2 = w.isend(s, &sum, peer, 2)?;
            Request::wait_all(vec![r1, r2, q1, q2])?;
            Ok(())
        })
        .map_err(e)?;
        ensure!(fnv(&inb) == sum_in[0], "checksum mismatch at {n} bytes");
        ensure!(
            inb == payload(k as u64 + 1000 * peer as u64, n),
            "payload mismatch at {n}"
        );
    }
    w.barrier().map_err(e)
}

/// Large messages around the pipelined protocol's fragment boundaries
/// (`chunk`: the payload of one FRAG, the BTL's largest fragment minus the
/// pml's FRAG header; given as the case's argument) and the tcp receive-in-
/// place threshold, every rank sending to its right neighbour while
/// receiving from its left one (all connections busy at once). Each message
/// is received once into a buffer of its size and once into a larger one
/// (whose bytes past the message must stay untouched), with two messages in
/// flight per pair so that fragments of both interleave on the connection.
fn frag_edges(w: &Comm, chunk: usize) -> R {
    let (rank, size) = (w.rank(), w.size());
    ensure!(size >= 2 && chunk > 64, "needs 2 ranks and a chunk size");
    let right = (rank + 1) % size;
    let left = (rank + size - 1) % size;
    let mut sizes = vec![16_383usize, 16_384, 16_385, 65_537, 1 << 20];
    for k in 1..=3 {
        sizes.extend([k * chunk - 1, k * chunk, k * chunk + 1]);
    }
    for (i, &n) in sizes.iter().enumerate() {
        let seed = |from: i32| 5_000 + 100 * i as u64 + from as u64;
        let out = payload(seed(rank), n);
        let mut exact = vec![0u8; n];
        let mut larger = vec![0x5au8; n + 4099];
        tmpi::scope(|s| -> Result<(), Error> {
            let r1 = w.irecv(s, &mut exact, left, 1)?;
            let r2 = w.irecv(s, larger.as_mut_slice(), left, 2)?;
            let q1 = w.isend(s, &out, right, 1)?;
            let q2 = w.isend(s, &out, right, 2)?;
            Request::wait_all(vec![r1, r2, q1, q2])?;
            Ok(())
        })
        .map_err(e)?;
        let want = payload(seed(left), n);
        ensure!(exact == want, "payload of {n} bytes from {left} corrupt");
        ensure!(
            larger[..n] == want[..],
            "payload of {n} bytes from {left} into a larger buffer corrupt"
        );
        ensure!(
            larger[n..].iter().all(|&b| b == 0x5a),
            "bytes past a {n}-byte message written"
        );
    }
    w.barrier().map_err(e)
}

/// Message sizes across one packet of a 1 KiB path MTU (the soft NIC's
/// default), the eager limit and the rendezvous switch, each received into
/// a buffer of exactly its size and into larger ones (user buffers the NIC
/// writes into, and with `pml_tm_max_bb_size` above them bounce buffers).
/// Then short messages (some synchronous) into buffers larger than any
/// eager message. The receives are posted and a barrier passed before
/// anything is sent, so with tag matching on the NIC holds them when the
/// messages arrive. Every receive's bytes past its message must be
/// unchanged.
fn sizes(w: &Comm) -> R {
    const SHORT_INTO_BIG: [usize; 7] = [0, 1, 5, 19, 20, 21, 100];
    let sizes = [
        0usize, 1, 900, 990, 1000, 1023, 1024, 1025, 2000, 2048, 4095, 4096, 4097, 8000, 8100,
        8191, 8192, 8193, 12_000, 16_384, 65_536, 300_001,
    ];
    let extra = [0usize, 1, 4096];
    if w.rank() > 1 {
        // Two barriers per direction, one at the end.
        for _ in 0..5 {
            w.barrier().map_err(e)?;
        }
        return Ok(());
    }
    let peer = 1 - w.rank();
    for dir in 0..2 {
        let receiver = w.rank() == dir;
        // Then short messages into buffers larger than any eager message:
        // with tag matching, the NIC places the pml header in front of the
        // payload in the receive's own buffer, and the bytes it covered
        // past a payload shorter than it must get their values back.
        let cases: Vec<(usize, usize)> = sizes
            .iter()
            .flat_map(|&n| extra.iter().map(move |&x| (n, n + x)))
            .chain(SHORT_INTO_BIG.map(|n| (n, 16_384)))
            .collect();
        // Some of those as synchronous sends: to a tag-matching peer a
        // RNDV (header and the sender's region, longer than the payload)
        // that the NIC places in the receive's buffer before the data are
        // read into it.
        let sync = |n: usize, cap: usize| cap == 16_384 && n % 2 == 1;
        let seed = |k: usize| 77_000 + k as u64 + 1000 * dir as u64;
        if receiver {
            let mut bufs: Vec<Vec<u8>> = cases.iter().map(|&(_, cap)| vec![0xa5; cap]).collect();
            let mut sts = Vec::new();
            tmpi::scope(|s| -> Result<(), Error> {
                let mut reqs = Vec::new();
                for (k, b) in bufs.iter_mut().enumerate() {
                    reqs.push(w.irecv(s, b.as_mut_slice(), peer, k as i32)?);
                }
                w.barrier()?;
                sts = Request::wait_all(reqs)?;
                Ok(())
            })
            .map_err(e)?;
            for (k, &(n, cap)) in cases.iter().enumerate() {
                let st = &sts[k];
                ensure!(
                    st.bytes() == n,
                    "{n} bytes into {cap}: status says {} bytes",
                    st.bytes()
                );
                ensure!(
                    bufs[k][..n] == payload(seed(k), n)[..],
                    "{n} bytes into {cap}: payload differs"
                );
                ensure!(
                    bufs[k][n..].iter().all(|&b| b == 0xa5),
                    "{n} bytes into {cap}: bytes past the message were written"
                );
            }
        } else {
            w.barrier().map_err(e)?;
            for (k, &(n, cap)) in cases.iter().enumerate() {
                if sync(n, cap) {
                    w.ssend(&payload(seed(k), n), peer, k as i32).map_err(e)?;
                } else {
                    w.send(&payload(seed(k), n), peer, k as i32).map_err(e)?;
                }
            }
        }
        w.barrier().map_err(e)?;
    }
    w.barrier().map_err(e)
}

/// 100 rounds of 32 small receives posted (then a barrier) before their
/// messages are sent: with tag matching on and every size offloaded, the
/// NIC matches them in bounce buffers, 3 200 list entries per rank.
fn small_rounds(w: &Comm) -> R {
    const ROUNDS: usize = 100;
    const N: usize = 32;
    if w.rank() > 1 {
        for _ in 0..2 * ROUNDS {
            w.barrier().map_err(e)?;
        }
        return Ok(());
    }
    let peer = 1 - w.rank();
    for round in 0..ROUNDS {
        let receiver = w.rank() as usize == round % 2;
        if receiver {
            let mut inb = vec![[0u64; 1]; N];
            tmpi::scope(|s| -> Result<(), Error> {
                let mut reqs = Vec::with_capacity(N);
                for (i, b) in inb.iter_mut().enumerate() {
                    reqs.push(w.irecv(s, b.as_mut_slice(), peer, i as i32)?);
                }
                w.barrier()?;
                Request::wait_all(reqs)?;
                Ok(())
            })
            .map_err(e)?;
            for (i, b) in inb.iter().enumerate() {
                ensure!(b[0] == (round * N + i) as u64, "round {round} message {i}");
            }
        } else {
            w.barrier().map_err(e)?;
            for i in 0..N {
                w.send(&[(round * N + i) as u64], peer, i as i32)
                    .map_err(e)?;
            }
        }
        w.barrier().map_err(e)?;
    }
    Ok(())
}

/// 10 000 outstanding requests on each side.
fn many(w: &Comm) -> R {
    const N: usize = 10_000;
    if w.rank() > 1 {
        return w.barrier().map_err(e);
    }
    let peer = 1 - w.rank();
    let mut inb = vec![[0u32; 2]; N];
    let out: Vec<[u32; 2]> = (0..N as u32).map(|i| [i, w.rank() as u32]).collect();
    tmpi::scope(|s| -> Result<(), Error> {
        let mut reqs = Vec::with_capacity(2 * N);
        for (i, b) in inb.iter_mut().enumerate() {
            reqs.push(w.irecv(s, b.as_mut_slice(), peer, i as i32)?);
        }
        // Sends in reverse tag order: each receive waits for its own tag.
        for i in (0..N).rev() {
            reqs.push(w.isend(s, &out[i], peer, i as i32)?);
        }
        Request::wait_all(reqs)?;
        Ok(())
    })
    .map_err(e)?;
    for (i, b) in inb.iter().enumerate() {
        ensure!(*b == [i as u32, peer as u32], "request {i} got {b:?}");
    }
    w.barrier().map_err(e)
}

/// A synchronous send completes only after the receiver matched it.
fn ssend(w: &Comm) -> R {
    if w.rank() == 0 {
        for n in [8usize, 100_000] {
            let data = payload(7, n);
            tmpi::scope(|s| -> Result<(), String> {
                let mut q = w.issend(s, &data, 1, 1).map_err(e)?;
                let t0 = Instant::now();
                while t0.elapsed() < Duration::from_millis(200) {
                    match q.test() {
                        Ok(_) => return Err("ssend completed before the receive was posted".into()),
                        Err(back) => q = back,
                    }
                }
                w.send(&[1u8], 1, 2).map_err(e)?; // "post your receive now"
                q.wait().map_err(e)?;
                Ok(())
            })?;
        }
    } else if w.rank() == 1 {
        for n in [8usize, 100_000] {
            let mut go = [0u8];
            w.recv(&mut go, 0, 2).map_err(e)?;
            let mut buf = vec![0u8; n];
            w.recv(&mut buf, 0, 1).map_err(e)?;
            ensure!(buf == payload(7, n), "ssend data");
        }
    }
    w.barrier().map_err(e)
}

/// Sends to oneself on COMM_WORLD and COMM_SELF, eager and rendezvous.
fn selfsend(w: &Comm, me: &Comm) -> R {
    for c in [w, me] {
        let r = c.rank();
        for n in [0usize, 8, 70_000, 5 << 20] {
            let out = payload(n as u64, n);
            let mut inb = vec![0u8; n];
            tmpi::scope(|s| -> Result<(), Error> {
                let q = c.isend(s, &out, r, 1)?;
                c.recv(&mut inb, r, 1)?;
                q.wait()?;
                Ok(())
            })
            .map_err(e)?;
            ensure!(inb == out, "self {n}");
            let st = c.sendrecv(&out, r, 2, &mut inb, ANY_SOURCE, 2).map_err(e)?;
            ensure!(st.bytes() == n && inb == out, "self sendrecv {n}");
        }
        // Synchronous send to self with the receive posted first.
        let mut one = [0u8; 3];
        tmpi::scope(|s| -> Result<(), Error> {
            let rr = c.irecv(s, &mut one, r, 3)?;
            c.ssend(b"abc", r, 3)?;
            rr.wait()?;
            Ok(())
        })
        .map_err(e)?;
        ensure!(&one == b"abc", "self ssend");
    }
    w.barrier().map_err(e)
}

/// MPI_THREAD_MULTIPLE: two threads per rank ping-pong on their own tags.
fn threads(w: &Comm) -> R {
    if w.rank() > 1 {
        return w.barrier().map_err(e);
    }
    let peer = 1 - w.rank();
    std::thread::scope(|ts| {
        let hs: Vec<_> = (0..2)
            .map(|t| {
                let w = w.clone();
                ts.spawn(move || -> R {
                    for i in 0..500u32 {
                        let mut b = [0u32; 2];
                        if w.rank() == 0 {
                            w.send(&[i, t], peer, t as i32).map_err(e)?;
                            w.recv(&mut b, peer, t as i32).map_err(e)?;
                        } else {
                            w.recv(&mut b, peer, t as i32).map_err(e)?;
                            w.send(&b, peer, t as i32).map_err(e)?;
                        }
                        ensure!(b == [i, t], "thread {t} iteration {i}: {b:?}");
                    }
                    Ok(())
                })
            })
            .collect();
        hs.into_iter()
            .try_for_each(|h| h.join().unwrap_or_else(|_| Err("thread panicked".into())))
    })?;
    w.barrier().map_err(e)
}

/// Buffered sends with an attached buffer, and the error without space.
fn bsend(mpi: &tmpi::Mpi, w: &Comm) -> R {
    if w.rank() == 0 {
        let err = w.bsend(&[1u8], 1, 1).expect_err("bsend without buffer");
        ensure!(err.class() == MpiErrorClass::Buffer, "class");
        mpi.buffer_attach(1 << 20).map_err(e)?;
        let mut data = payload(9, 200_000);
        w.bsend(&data, 1, 1).map_err(e)?;
        data.fill(0); // the copy was taken at the call
        let err = w
            .bsend(&vec![0u8; 900_000], 1, 1)
            .expect_err("over capacity");
        ensure!(err.class() == MpiErrorClass::Buffer, "class");
        w.send(&[1u8], 1, 2).map_err(e)?;
        ensure!(mpi.buffer_detach().map_err(e)? == 1 << 20, "detach size");
    } else if w.rank() == 1 {
        let mut go = [0u8];
        w.recv(&mut go, 0, 2).map_err(e)?; // bsend completed locally
        let mut buf = vec![0u8; 200_000];
        w.recv(&mut buf, 0, 1).map_err(e)?;
        ensure!(buf == payload(9, 200_000), "bsend data");
    }
    w.barrier().map_err(e)
}

fn main() -> ExitCode {
    let case = std::env::args().nth(1).unwrap_or_default();
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("p2p-check: init: {x}");
            return ExitCode::FAILURE;
        }
    };
    let w = mpi.world();
    let r = match case.as_str() {
        "order" => order(&w),
        "probe" => probe(&w),
        "cancel" => cancel(&w),
        "truncate" => truncate(&w),
        "truncate_posted" => truncate_posted(&w),
        "direct" => direct(&mpi, &w),
        "zero" => zero(&w),
        "big" => big(&w),
        "frag_edges" => {
            let chunk = std::env::args().nth(2).and_then(|a| a.parse().ok());
            frag_edges(&w, chunk.unwrap_or(0))
        }
        "sizes" => sizes(&w),
        "small_rounds" => small_rounds(&w),
        "many" => many(&w),
        "ssend" => ssend(&w),
        "self" => selfsend(&w, &mpi.self_comm()),
        "threads" => threads(&w),
        "bsend" => bsend(&mpi, &w),
        "panic" => {
            // Rank 1 panics while the others wait for it: the job must end
            // at once (the panicking rank exits without finalize), not hang.
            if w.rank() == 1 {
                panic!("p2p-check panic: deliberate");
            }
            let mut b = [0u8];
            w.recv(&mut b, 1, 0).map(drop).map_err(e)
        }
        _ => Err(format!("unknown case {case:?}")),
    };
    match r {
        Ok(()) => {
            if w.rank() == 0 {
                println!(
                    "p2p-check {case}: OK ({} ranks, stats {})",
                    w.size(),
                    mpi.stats()
                );
            }
            ExitCode::SUCCESS
        }
        Err(x) => {
            eprintln!("p2p-check {case}: rank {} FAILED: {x}", w.rank());
            // No finalize: the peers may wait for us forever; tmpirun ends
            // the job when a rank exits without finalizing.
            std::process::exit(1)
        }
    }
}
