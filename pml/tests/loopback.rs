//! The pml driver and protocol core over the in-memory loopback transport:
//! several pml instances in one process, each driven by its own thread, so
//! the protocol paths (eager, get, pipelined, back-pressure, reordering)
//! are exercised deterministically without BTLs.

use std::sync::Arc;

use tmpi_pml::raw::{RawBuf, RawBufMut};
use tmpi_pml::transport::{Loopback, LoopbackConfig};
use tmpi_pml::Limits;
use tmpi_pml::{MpiErrorClass, Pml, SendMode, ANY_SOURCE, ANY_TAG, CTX_SELF, CTX_WORLD, PROC_NULL};

fn job(n: u32, cfg: LoopbackConfig) -> Vec<Arc<Pml>> {
    Loopback::job(n, cfg)
        .into_iter()
        .enumerate()
        .map(|(i, t)| Arc::new(Pml::with_transport(i as u32, Box::new(t), true).unwrap()))
        .collect()
}

/// Starts a send of `data` on `CTX_WORLD`.
///
/// # Safety
/// `data` must stay valid and unmodified until the request completed.
unsafe fn isend(p: &Pml, dest: i32, tag: i32, data: &[u8], mode: SendMode) -> tmpi_pml::ReqId {
    // SAFETY: forwarded contract.
    unsafe { p.isend(CTX_WORLD, dest, tag, RawBuf::from_slice(data), mode) }.unwrap()
}

fn send(p: &Pml, dest: i32, tag: i32, data: &[u8], mode: SendMode) {
    // SAFETY: `data` outlives the wait below.
    let id = unsafe { isend(p, dest, tag, data, mode) };
    p.wait(id).unwrap();
}

fn recv(p: &Pml, src: i32, tag: i32, buf: &mut [u8]) -> tmpi_pml::Status {
    // SAFETY: `buf` outlives the wait below.
    let id = unsafe { p.irecv(CTX_WORLD, src, tag, RawBufMut::from_slice(buf)) }.unwrap();
    p.wait(id).unwrap()
}

fn pattern(len: usize, seed: u8) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}

fn sizes_roundtrip(cfg: LoopbackConfig, mode: SendMode) {
    let j = job(2, cfg);
    let sizes = [0usize, 1, 8, 4095, 4096, 4097, 100_000, 1 << 20];
    let (a, b) = (j[0].clone(), j[1].clone());
    let t = std::thread::spawn(move || {
        for (k, &n) in sizes.iter().enumerate() {
            let mut buf = vec![0u8; n];
            let st = recv(&b, 0, k as i32, &mut buf);
            assert_eq!(st.count, n);
            assert_eq!(st.source, 0);
            assert_eq!(st.tag, k as i32);
            assert_eq!(st.error, MpiErrorClass::Success);
            assert_eq!(buf, pattern(n, k as u8));
        }
    });
    for (k, &n) in sizes.iter().enumerate() {
        send(&a, 1, k as i32, &pattern(n, k as u8), mode);
    }
    t.join().unwrap();
    assert_eq!(j[0].live_requests(), 0);
    assert_eq!(j[1].live_requests(), 0);
}

#[test]
fn eager_and_rendezvous_with_get() {
    sizes_roundtrip(LoopbackConfig::default(), SendMode::Standard);
}

#[test]
fn rendezvous_pipelined_when_no_get() {
    let cfg = LoopbackConfig {
        limits: Limits {
            eager: 1024,
            max_send: 3000,
            get: false,
        },
        ..LoopbackConfig::default()
    };
    sizes_roundtrip(cfg, SendMode::Standard);
}

#[test]
fn get_failure_falls_back_to_fragments() {
    let cfg = LoopbackConfig {
        fail_get: true,
        ..LoopbackConfig::default()
    };
    sizes_roundtrip(cfg, SendMode::Standard);
}

#[test]
fn busy_transport_and_reordering_keep_order() {
    let cfg = LoopbackConfig {
        busy_every: 3,
        swap_pairs: true,
        ..LoopbackConfig::default()
    };
    sizes_roundtrip(cfg, SendMode::Synchronous);
    let j = job(2, cfg);
    // 200 messages with the same envelope must match in order even though
    // the transport swaps every pair.
    let (a, b) = (j[0].clone(), j[1].clone());
    let t = std::thread::spawn(move || {
        for i in 0..200u32 {
            let mut buf = [0u8; 4];
            recv(&b, ANY_SOURCE, ANY_TAG, &mut buf);
            assert_eq!(u32::from_le_bytes(buf), i);
        }
    });
    for i in 0..200u32 {
        send(&a, 1, 7, &i.to_le_bytes(), SendMode::Standard);
    }
    t.join().unwrap();
    assert!(j[1].stats().out_of_order > 0, "swap_pairs should reorder");
}

/// `Pml::send_blocking`'s fast path (small eager sends straight to the
/// transport) and its fallback when the transport is busy (the fragment
/// becomes a queued request) interleaved with sends too large for it: every
/// message arrives once, intact and in order, with the right status.
#[test]
fn blocking_small_sends_in_order_over_busy_transport() {
    let cfg = LoopbackConfig {
        busy_every: 3,
        swap_pairs: true,
        ..LoopbackConfig::default()
    };
    let j = job(2, cfg);
    let (a, b) = (j[0].clone(), j[1].clone());
    let len = |i: u32| [0usize, 1, 8, 255, 256, 257, 4000][i as usize % 7];
    let t = std::thread::spawn(move || {
        for i in 0..300u32 {
            let mut buf = vec![0u8; 4100];
            // SAFETY: `buf` outlives the blocking call.
            let st =
                unsafe { b.recv_blocking(CTX_WORLD, 0, ANY_TAG, RawBufMut::from_slice(&mut buf)) }
                    .unwrap();
            assert_eq!(st.tag, i as i32);
            assert_eq!(st.count, len(i));
            assert_eq!(&buf[..len(i)], &pattern(len(i), i as u8)[..], "message {i}");
        }
    });
    for i in 0..300u32 {
        let data = pattern(len(i), i as u8);
        // SAFETY: `data` outlives the blocking call.
        let st = unsafe {
            a.send_blocking(
                CTX_WORLD,
                1,
                i as i32,
                RawBuf::from_slice(&data),
                SendMode::Standard,
            )
        }
        .unwrap();
        assert_eq!((st.source, st.tag, st.count), (1, i as i32, len(i)));
        assert_eq!(st.error, MpiErrorClass::Success);
    }
    t.join().unwrap();
    assert_eq!(a.live_requests(), 0);
    assert_eq!(j[1].live_requests(), 0);
}

#[test]
fn truncation_never_writes_past_the_buffer() {
    for n in [100usize, 10_000, 200_000] {
        let j = job(2, LoopbackConfig::default());
        let data = pattern(n, 3);
        // SAFETY: data outlives the wait.
        let s = unsafe { isend(&j[0], 1, 1, &data, SendMode::Standard) };
        let mut buf = [0xeeu8; 64];
        // Receive into the first 50 bytes only; the rest must stay intact.
        let (head, tail) = buf.split_at_mut(50);
        // SAFETY: head outlives the wait.
        let r = unsafe { j[1].irecv(CTX_WORLD, 0, 1, RawBufMut::from_slice(head)) }.unwrap();
        let st = j[1].wait(r).unwrap();
        j[0].wait(s).unwrap();
        assert_eq!(st.error, MpiErrorClass::Truncate);
        assert_eq!(st.count, 50);
        assert_eq!(head, &data[..50]);
        assert!(tail.iter().all(|&b| b == 0xee));
    }
}

#[test]
fn ssend_completes_only_after_match() {
    let j = job(2, LoopbackConfig::default());
    let data = [1u8, 2, 3];
    // SAFETY: data outlives the wait.
    let s = unsafe { isend(&j[0], 1, 9, &data, SendMode::Synchronous) };
    for _ in 0..1000 {
        j[1].progress();
        assert!(
            j[0].test(s).unwrap().is_none(),
            "ssend completed before a match"
        );
    }
    let mut buf = [0u8; 3];
    let t = {
        let a = j[0].clone();
        std::thread::spawn(move || a.wait(s).unwrap())
    };
    recv(&j[1], 0, 9, &mut buf);
    t.join().unwrap();
    assert_eq!(buf, data);
}

/// A synchronous send within the eager limit carries its data in the RNDV
/// (no get): probed with its full length while unexpected, truncated into a
/// short receive (MPI_ERR_TRUNCATE, the prefix delivered), and the sender
/// completes only once it was matched. Above the limit: the get, as before.
#[test]
fn small_ssend_goes_inline_and_truncates_like_eager() {
    let j = job(2, LoopbackConfig::default());
    let eager = LoopbackConfig::default().limits.eager;
    let data = pattern(100, 3);
    // SAFETY: data outlives the wait.
    let s = unsafe { isend(&j[0], 1, 4, &data, SendMode::Synchronous) };
    let st = loop {
        if let Some(st) = j[1].iprobe(CTX_WORLD, 0, 4).unwrap() {
            break st;
        }
    };
    assert_eq!(st.count, 100, "probe of an unexpected inline ssend");
    assert!(
        j[0].test(s).unwrap().is_none(),
        "completed before the match"
    );
    let mut short = [0u8; 50];
    let st = recv(&j[1], 0, 4, &mut short);
    assert_eq!(st.error, MpiErrorClass::Truncate);
    assert_eq!(&short[..], &data[..50]);
    j[0].wait(s).unwrap();
    let (a, b) = (j[0].stats(), j[1].stats());
    assert_eq!((a.sync_inline, a.rndv_sent, b.rndv_get), (1, 1, 0));

    // Posted first, at the eager limit, then one byte above it.
    for len in [eager, eager + 1] {
        let data = pattern(len, 9);
        let mut buf = vec![0u8; len];
        let t = {
            let b = j[1].clone();
            std::thread::spawn(move || {
                recv(&b, 0, 5, &mut buf);
                buf
            })
        };
        send(&j[0], 1, 5, &data, SendMode::Synchronous);
        assert_eq!(t.join().unwrap(), data, "{len} bytes");
    }
    let (a, b) = (j[0].stats(), j[1].stats());
    assert_eq!(
        (a.sync_inline, a.rndv_sent),
        (2, 3),
        "only the larger one by get"
    );
    assert_eq!(b.rndv_get, 1);
}

#[test]
fn cancel_probe_mprobe_proc_null_self() {
    let j = job(2, LoopbackConfig::default());
    let mut buf = [0u8; 8];
    // SAFETY: buf outlives the wait.
    let r = unsafe { j[1].irecv(CTX_WORLD, 0, 5, RawBufMut::from_slice(&mut buf)) }.unwrap();
    assert!(j[1].cancel(r).unwrap());
    let st = j[1].wait(r).unwrap();
    assert!(st.cancelled);
    // A message sent now is not taken by the cancelled receive.
    send(&j[0], 1, 5, b"abc", SendMode::Standard);
    let st = j[1].probe(CTX_WORLD, ANY_SOURCE, ANY_TAG).unwrap();
    assert_eq!((st.source, st.tag, st.count), (0, 5, 3));
    let (m, st) = j[1].mprobe(CTX_WORLD, 0, 5).unwrap();
    assert_eq!(st.count, 3);
    assert!(j[1].iprobe(CTX_WORLD, 0, 5).unwrap().is_none());
    // SAFETY: buf outlives the wait.
    let r = unsafe { j[1].imrecv(m, RawBufMut::from_slice(&mut buf)) }.unwrap();
    let st = j[1].wait(r).unwrap();
    assert_eq!(&buf[..st.count], b"abc");
    // Send cancel fails as MPI allows.
    // SAFETY: static data.
    let s = unsafe {
        j[0].isend(
            CTX_WORLD,
            1,
            6,
            RawBuf::from_slice(b"x"),
            SendMode::Standard,
        )
    }
    .unwrap();
    assert!(!j[0].cancel(s).unwrap());
    j[0].wait(s).unwrap();
    // PROC_NULL.
    let st = recv(&j[0], PROC_NULL, 1, &mut buf);
    assert_eq!((st.source, st.count), (PROC_NULL, 0));
    send(&j[0], PROC_NULL, 1, b"zz", SendMode::Standard);
    // Self over COMM_SELF and COMM_WORLD.
    // SAFETY: static data / buf outlive the waits.
    let s = unsafe {
        j[0].isend(
            CTX_SELF,
            0,
            3,
            RawBuf::from_slice(b"me"),
            SendMode::Standard,
        )
    }
    .unwrap();
    let r = unsafe { j[0].irecv(CTX_SELF, 0, 3, RawBufMut::from_slice(&mut buf)) }.unwrap();
    j[0].wait(s).unwrap();
    assert_eq!(j[0].wait(r).unwrap().count, 2);
    // Bad arguments are errors, not panics.
    assert_eq!(
        unsafe { j[0].irecv(CTX_WORLD, 7, 1, RawBufMut::from_slice(&mut buf)) }
            .unwrap_err()
            .class(),
        MpiErrorClass::Rank
    );
    assert_eq!(
        unsafe { j[0].irecv(99, 0, 1, RawBufMut::from_slice(&mut buf)) }
            .unwrap_err()
            .class(),
        MpiErrorClass::Comm
    );
    assert_eq!(j[0].wait(r).unwrap_err().class(), MpiErrorClass::Request);
}

#[test]
fn buffered_send_and_many_outstanding_requests() {
    let j = job(2, LoopbackConfig::default());
    // Bsend without a buffer is an error; with one it completes locally.
    let e = unsafe {
        j[0].isend(
            CTX_WORLD,
            1,
            1,
            RawBuf::from_slice(b"x"),
            SendMode::Buffered,
        )
    };
    assert_eq!(e.unwrap_err().class(), MpiErrorClass::Buffer);
    j[0].buffer_attach(10_000).unwrap();
    let mut data = pattern(5000, 1);
    // SAFETY: copied during the call.
    let s = unsafe {
        j[0].isend(
            CTX_WORLD,
            1,
            1,
            RawBuf::from_slice(&data),
            SendMode::Buffered,
        )
    }
    .unwrap();
    data.fill(0); // the copy was taken at the call
    j[0].wait(s).unwrap();
    let too_big = vec![0u8; 6000];
    let e = unsafe {
        j[0].isend(
            CTX_WORLD,
            1,
            1,
            RawBuf::from_slice(&too_big),
            SendMode::Buffered,
        )
    };
    assert_eq!(e.unwrap_err().class(), MpiErrorClass::Buffer);
    let mut buf = vec![0u8; 5000];
    recv(&j[1], 0, 1, &mut buf);
    assert_eq!(buf, pattern(5000, 1));
    assert_eq!(j[0].buffer_detach().unwrap(), 10_000);

    // 10 000 outstanding receives, completed by 10 000 sends in reverse tags.
    const N: usize = 10_000;
    let mut bufs = vec![[0u8; 4]; N];
    let mut ids: Vec<_> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            // SAFETY: bufs outlive the waitall.
            Some(unsafe { j[1].irecv(CTX_WORLD, 0, i as i32, RawBufMut::from_slice(b)) }.unwrap())
        })
        .collect();
    let vals: Vec<[u8; 4]> = (0..N as u32).map(|i| i.to_le_bytes()).collect();
    let mut sids: Vec<_> = (0..N)
        .rev()
        .map(|i| {
            // SAFETY: vals outlive the waitall.
            Some(
                unsafe {
                    j[0].isend(
                        CTX_WORLD,
                        1,
                        i as i32,
                        RawBuf::from_slice(&vals[i]),
                        SendMode::Standard,
                    )
                }
                .unwrap(),
            )
        })
        .collect();
    let a = j[0].clone();
    let t = std::thread::spawn(move || {
        a.waitall(&mut sids).unwrap();
    });
    let st = j[1].waitall(&mut ids).unwrap();
    t.join().unwrap();
    for (i, b) in bufs.iter().enumerate() {
        assert_eq!(u32::from_le_bytes(*b), i as u32);
        assert_eq!(st[i].tag, i as i32);
    }
    assert_eq!(j[1].live_requests(), 0);
}

#[test]
fn any_some_all_forms() {
    let j = job(2, LoopbackConfig::default());
    let mut bufs = [[0u8; 1]; 4];
    let mut ids: Vec<Option<tmpi_pml::ReqId>> = bufs
        .iter_mut()
        .enumerate()
        .map(|(i, b)| {
            // SAFETY: bufs outlive every wait below.
            Some(unsafe { j[1].irecv(CTX_WORLD, 0, i as i32, RawBufMut::from_slice(b)) }.unwrap())
        })
        .collect();
    // Nothing sent yet: the test forms report nothing and release nothing.
    assert!(j[1].testany(&mut ids).unwrap().is_none());
    assert!(j[1].testsome(&mut ids).unwrap().is_empty());
    assert!(j[1].testall(&mut ids).unwrap().is_none());
    assert!(ids.iter().all(Option::is_some));
    // Tag 2 arrives: waitany returns exactly that one.
    send(&j[0], 1, 2, &[22], SendMode::Standard);
    let (i, st) = j[1].waitany(&mut ids).unwrap();
    assert_eq!((i, st.tag, st.count), (Some(2), 2, 1));
    assert!(ids[2].is_none());
    // Tags 0 and 3: waitsome returns both (possibly over two calls).
    send(&j[0], 1, 0, &[10], SendMode::Standard);
    send(&j[0], 1, 3, &[33], SendMode::Standard);
    let mut got: Vec<usize> = Vec::new();
    while got.len() < 2 {
        got.extend(j[1].waitsome(&mut ids).unwrap().into_iter().map(|(i, _)| i));
    }
    got.sort();
    assert_eq!(got, vec![0, 3]);
    send(&j[0], 1, 1, &[11], SendMode::Standard);
    let all = j[1].waitall(&mut ids).unwrap();
    assert_eq!(all[1].tag, 1);
    assert_eq!(bufs, [[10], [11], [22], [33]]);
    // All slots empty: waitany reports "undefined", waitsome nothing.
    assert_eq!(j[1].waitany(&mut ids).unwrap().0, None);
    assert!(j[1].waitsome(&mut ids).unwrap().is_empty());
    assert_eq!(j[1].live_requests(), 0);
}

/// Drives both pmls (one thread, deterministic) until `done` holds.
fn drive(j: &[Arc<Pml>], mut done: impl FnMut() -> bool) {
    for _ in 0..1_000_000 {
        if done() {
            return;
        }
        for p in j {
            p.progress();
        }
    }
    panic!("no progress");
}

/// The message `i` of the flow-control stream: mostly 1000-byte eager
/// (above `CREDIT_SWITCH_MIN`, so they switch to rendezvous when the window
/// is full), every 100th (50, 150, ..) a 10 000-byte rendezvous, every
/// 100th (99, ..) an 8-byte synchronous send; tag `i % 3`.
fn flow_msg(i: usize) -> (Vec<u8>, SendMode) {
    let len = if i % 100 == 50 { 10_000 } else { 1000 };
    let mode = if i % 100 == 99 {
        SendMode::Synchronous
    } else {
        SendMode::Standard
    };
    let len = if mode == SendMode::Synchronous {
        8
    } else {
        len
    };
    (pattern(len, i as u8), mode)
}

/// `pml_ob1_unexpected_limit`: rank 0 starts 1000 sends to rank 1, which
/// receives nothing. Every message arrives (nothing is held back: MPI's
/// progress rule), but rank 1 holds at most `limit` bytes of eager charge
/// (payload + 512 B each); the sends past the window went as rendezvous
/// (payload left at the sender, its request incomplete). Then probe,
/// mprobe, cancel and wildcard receives take every message in order, every
/// send completes, and the returned credit lets the next send go eager
/// again. Limit 0: every eager-sized send goes eager.
fn flow_control(limit: u64, cfg: LoopbackConfig) {
    const N: usize = 1000;
    let j = job(2, cfg);
    for p in &j {
        p.set_unexpected_limit(limit);
    }
    let msgs: Vec<(Vec<u8>, SendMode)> = (0..N).map(flow_msg).collect();
    let sends: Vec<_> = msgs
        .iter()
        .enumerate()
        // SAFETY: `msgs` outlives every request (all waited for below).
        .map(|(i, (d, m))| {
            unsafe { j[0].isend(CTX_WORLD, 1, (i % 3) as i32, RawBuf::from_slice(d), *m) }.unwrap()
        })
        .collect();
    drive(&j, || j[1].stats().unexpected as usize == N);
    let eager_sized = msgs
        .iter()
        .filter(|(d, m)| *m == SendMode::Standard && d.len() <= 4096)
        .count() as u64;
    let st0 = j[0].stats();
    assert_eq!(st0.eager_sent + st0.credit_rndv, eager_sized);
    if limit == 0 {
        assert_eq!(st0.credit_rndv, 0, "unbounded: no send switched");
    } else {
        assert!(st0.credit_rndv > 0, "no send switched to rendezvous");
        let held = st0.eager_sent * (1000 + 512);
        assert!(
            held <= limit.max(1512),
            "{} eager messages held, charge {held} > limit {limit}",
            st0.eager_sent
        );
        let done = sends.iter().filter(|&&s| j[0].is_done(s).unwrap()).count();
        assert!(done < N, "every send completed without a receive");
    }
    // Probe, matched probe, a cancelled receive, then wildcard receives.
    let st = j[1]
        .iprobe(CTX_WORLD, ANY_SOURCE, ANY_TAG)
        .unwrap()
        .unwrap();
    assert_eq!((st.source, st.tag, st.count), (0, 0, msgs[0].0.len()));
    let (m, st) = j[1].improbe(CTX_WORLD, 0, 0).unwrap().unwrap();
    assert_eq!(st.count, msgs[0].0.len());
    let mut first = vec![0u8; msgs[0].0.len()];
    // SAFETY: `first` outlives the request (waited for at once).
    let r = unsafe { j[1].imrecv(m, RawBufMut::from_slice(&mut first)) }.unwrap();
    drive(&j, || j[1].is_done(r).unwrap());
    assert_eq!(j[1].test(r).unwrap().unwrap().count, msgs[0].0.len());
    assert_eq!(first.to_vec(), msgs[0].0);
    let mut never = [0u8; 8];
    // SAFETY: `never` outlives the request (cancelled and tested below).
    let c = unsafe { j[1].irecv(CTX_WORLD, 0, 77, RawBufMut::from_slice(&mut never)) }.unwrap();
    assert!(j[1].cancel(c).unwrap());
    assert!(j[1].test(c).unwrap().unwrap().cancelled);
    let mut buf = vec![0u8; 10_000];
    for (i, (d, _)) in msgs.iter().enumerate().skip(1) {
        // SAFETY: `buf` outlives the request (completed in the loop).
        let r = unsafe {
            j[1].irecv(
                CTX_WORLD,
                ANY_SOURCE,
                ANY_TAG,
                RawBufMut::from_slice(&mut buf),
            )
        }
        .unwrap();
        let mut st = None;
        drive(&j, || {
            st = j[1].test(r).unwrap();
            st.is_some()
        });
        let st = st.unwrap();
        assert_eq!((st.tag, st.count), ((i % 3) as i32, d.len()), "message {i}");
        assert_eq!(&buf[..d.len()], &d[..], "message {i}");
    }
    for s in sends {
        drive(&j, || j[0].is_done(s).unwrap());
        assert_eq!(j[0].test(s).unwrap().unwrap().error, MpiErrorClass::Success);
    }
    drive(&j, || {
        j[1].live_requests() == 0 && j[0].live_requests() == 0
    });
    // The credit came back: the next eager-sized send goes eager.
    let switched = j[0].stats().credit_rndv;
    let d = pattern(1000, 7);
    // SAFETY: `d` and `back` outlive the requests (completed below).
    let s =
        unsafe { j[0].isend(CTX_WORLD, 1, 5, RawBuf::from_slice(&d), SendMode::Standard) }.unwrap();
    let mut back = vec![0u8; 1000];
    let r = unsafe { j[1].irecv(CTX_WORLD, 0, 5, RawBufMut::from_slice(&mut back)) }.unwrap();
    drive(&j, || j[0].is_done(s).unwrap() && j[1].is_done(r).unwrap());
    assert_eq!(j[1].test(r).unwrap().unwrap().count, 1000);
    assert_eq!(back, d);
    assert_eq!(j[0].stats().credit_rndv, switched, "credit not returned");
}

#[test]
fn unexpected_limit_switches_to_rendezvous() {
    flow_control(16 * 1024, LoopbackConfig::default());
}

#[test]
fn unexpected_limit_with_busy_and_swapped_transport() {
    let cfg = LoopbackConfig {
        busy_every: 3,
        swap_pairs: true,
        ..LoopbackConfig::default()
    };
    flow_control(8 * 1024, cfg);
}

#[test]
fn unexpected_limit_zero_is_unbounded() {
    flow_control(0, LoopbackConfig::default());
}
