//! The Rust API in a singleton job (no launcher: rank 0 of 1, btl self).
//! One test function: MPI can be initialised once per process.

use tmpi::{MpiErrorClass, Request, ANY_SOURCE, ANY_TAG};

#[test]
fn singleton_api() {
    std::env::remove_var("PMI_FD");
    let mpi = tmpi::init().expect("init");
    assert_eq!(
        tmpi::init().unwrap_err().class(),
        MpiErrorClass::Other,
        "second init must fail"
    );
    let w = mpi.world();
    assert_eq!((w.rank(), w.size()), (0, 1));
    let me = mpi.self_comm();
    assert_eq!((me.rank(), me.size()), (0, 1));

    // A bad root is named as the caller gave it, in plain words.
    for (root, text) in [
        (-1, "MPI_ERR_ROOT: root -1 is not a rank"),
        (3, "MPI_ERR_ROOT: root 3 is not in 0..1"),
    ] {
        let mut b = [0u8; 4];
        let e = w.bcast(&mut b[..], root).unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Root);
        assert_eq!(e.to_string(), text);
    }

    // Typed self-send, counts in elements.
    let out = [1.5f64, -2.0, 3.25];
    let mut inb = [0f64; 4];
    let st = tmpi::scope(|s| {
        let r = w.irecv(s, &mut inb, ANY_SOURCE, ANY_TAG).unwrap();
        w.send(&out, 0, 11).unwrap();
        r.wait().unwrap()
    });
    assert_eq!((st.source(), st.tag(), st.count::<f64>()), (0, 11, 3));
    assert_eq!(&inb[..3], &out);

    // A forgotten request is settled by its scope: a receive that matched
    // is completed, one that did not is cancelled; either way the buffer is
    // never written after the scope returned.
    let mut late = [0u32; 2];
    tmpi::scope(|s| {
        let r = me.irecv(s, &mut late, 0, 5).unwrap();
        std::mem::forget(r);
        me.send(&[7u32, 8], 0, 5).unwrap();
    });
    if late == [0, 0] {
        // Cancelled before the message arrived: it is still unexpected.
        let mut again = [0u32; 2];
        me.recv(&mut again, 0, 5).unwrap();
        assert_eq!(again, [7, 8]);
    } else {
        assert_eq!(late, [7, 8]);
    }
    // Matched before the scope ends: the scope waits for it.
    let mut done = [0u32; 2];
    tmpi::scope(|s| {
        let r = me.irecv(s, &mut done, 0, 6).unwrap();
        me.send(&[3u32, 4], 0, 6).unwrap();
        assert!(me.iprobe(0, 99).unwrap().is_none()); // progresses: matches
        std::mem::forget(r);
    });
    assert_eq!(done, [3, 4]);

    // An abandoned unmatched receive is cancelled at the end of its scope.
    let mut never = [0u8; 8];
    tmpi::scope(|s| {
        let r = w.irecv(s, &mut never, 0, 77).unwrap();
        std::mem::forget(r);
    });
    assert!(w.iprobe(ANY_SOURCE, ANY_TAG).unwrap().is_none());

    // Truncation: error class and status, buffer filled, nothing beyond.
    let mut small = [0u16; 2];
    let err = tmpi::scope(|s| {
        let r = w.irecv(s, &mut small, 0, 1).unwrap();
        w.send(&[1u16, 2, 3], 0, 1).unwrap();
        r.wait().unwrap_err()
    });
    assert_eq!(err.class(), MpiErrorClass::Truncate);
    assert_eq!(err.status().unwrap().count::<u16>(), 2);
    assert_eq!(small, [1, 2]);

    // Bad arguments are errors.
    assert_eq!(
        w.send(&[0u8], 1, 0).unwrap_err().class(),
        MpiErrorClass::Rank
    );
    assert_eq!(
        w.send(&[0u8], 0, -5).unwrap_err().class(),
        MpiErrorClass::Tag
    );
    assert_eq!(
        w.recv(&mut [0u8], 0, tmpi::TAG_UB + 1).unwrap_err().class(),
        MpiErrorClass::Tag
    );

    // Probe, matched probe, and a dropped message does not linger.
    w.send(&[9i64; 5], 0, 3).unwrap();
    let st = w.probe(0, 3).unwrap();
    assert_eq!(st.count::<i64>(), 5);
    let (m, _) = w.mprobe(0, 3).unwrap();
    drop(m);
    assert!(w.iprobe(0, 3).unwrap().is_none());

    // wait_all / wait_any.
    let a = [1u8; 100_000];
    let mut b = vec![0u8; 100_000];
    let mut c = [0u8; 1];
    tmpi::scope(|s| {
        let r1 = w.irecv(s, &mut b, 0, 20).unwrap();
        let r2 = w.irecv(s, &mut c, 0, 21).unwrap();
        let q1 = w.isend(s, &a, 0, 20).unwrap();
        let q2 = w.isend(s, &[4u8], 0, 21).unwrap();
        let mut v = vec![Some(r2), Some(q2)];
        let (i, st) = Request::wait_any(&mut v).unwrap();
        assert!(i < 2 && st.is_ok());
        let rest: Vec<_> = v.into_iter().flatten().chain([r1, q1]).collect();
        Request::wait_all(rest).unwrap();
    });
    assert!(b.iter().all(|&x| x == 1) && c == [4]);

    // Buffered send to self.
    mpi.buffer_attach(1000).unwrap();
    w.bsend(&[5u8; 10], 0, 30).unwrap();
    let mut d = [0u8; 10];
    w.recv(&mut d, 0, 30).unwrap();
    assert_eq!(d, [5; 10]);
    assert_eq!(mpi.buffer_detach().unwrap(), 1000);
    assert_eq!(mpi.pml().live_requests(), 0, "requests leaked");
}
