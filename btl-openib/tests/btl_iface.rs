//! btl-openib through the generic `tmpi-btl` interface, across real
//! processes over the soft NIC: component init (publish, no fence), the
//! pml's fence, add_procs, tagged fragments in FIFO order per peer,
//! register_region + blocking get, bounds errors.

mod common;

use std::time::Instant;

use common::*;
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlError, BtlModule, RemoteRegion};

const N: u32 = 100;

#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    assert_eq!(role, "iface");
    let mut job = child_job();
    let mut mods = init_btl(&mut job);
    assert_eq!(mods.len(), 1);
    let m: &mut Box<dyn BtlModule> = &mut mods[0];
    let all: Vec<u32> = (0..job.size).collect();
    let reached = m.add_procs(&all, &mut job.modex).unwrap();
    let others: Vec<u32> = all.iter().copied().filter(|&r| r != job.rank).collect();
    assert_eq!(reached, others, "every other rank, not ourselves");
    // add_procs is idempotent.
    assert_eq!(m.add_procs(&all, &mut job.modex).unwrap(), others);
    // Make sure every peer's QPs are ready before sending.
    job.modex.fence().unwrap();

    let me = job.rank;
    let region_mem = pattern(me + 100, 300_000);
    // SAFETY: `region_mem` outlives the region (deregistered below, after
    // the last peer's get: final fence).
    let region = unsafe { m.register_region(region_mem.as_ptr(), region_mem.len()) }.unwrap();
    let mut got: Vec<(u32, u8, Vec<u8>)> = Vec::new();
    let send = |m: &mut Box<dyn BtlModule>,
                got: &mut Vec<(u32, u8, Vec<u8>)>,
                p: u32,
                tag: u8,
                h: &[u8],
                d: &[u8]| {
        let t = Instant::now();
        loop {
            match m.send(p, tag, h, d) {
                Ok(()) => return,
                Err(BtlError::WouldBlock) => {
                    m.progress(&mut |peer: u32, tag: u8, b: &[u8]| {
                        got.push((peer, tag, b.to_vec()))
                    });
                    assert!(t.elapsed() < WAIT);
                }
                Err(e) => panic!("send: {e}"),
            }
        }
    };
    for &p in &others {
        for i in 0..N {
            let d = pattern(me * 1000 + i, (i as usize * 97) % m.eager_limit());
            send(m, &mut got, p, (i % 250) as u8, &i.to_le_bytes(), &d);
        }
        send(m, &mut got, p, 255, &region.to_bytes(), b"");
    }
    let big = vec![0u8; m.max_send_size() + 1];
    assert!(matches!(
        m.send(others[0], 1, &big, b""),
        Err(BtlError::TooLarge { .. })
    ));
    assert!(matches!(
        m.send(me, 1, b"x", b""),
        Err(BtlError::Unreachable(_))
    ));
    let want = (N as usize + 1) * others.len();
    let t = Instant::now();
    while got.len() < want {
        m.progress(&mut |peer: u32, tag: u8, b: &[u8]| got.push((peer, tag, b.to_vec())));
        assert!(t.elapsed() < WAIT, "got {} of {want}", got.len());
    }
    let mut next = vec![0u32; job.size as usize];
    let mut regions = Vec::new();
    for (peer, tag, b) in &got {
        if *tag == 255 {
            assert_eq!(next[*peer as usize], N, "region after the fragments (FIFO)");
            regions.push((*peer, RemoteRegion::from_bytes(b).unwrap()));
            continue;
        }
        let i = next[*peer as usize];
        assert_eq!(*tag, (i % 250) as u8);
        assert_eq!(&b[..4], &i.to_le_bytes());
        assert_eq!(
            &b[4..],
            &pattern(peer * 1000 + i, (i as usize * 97) % m.eager_limit())[..]
        );
        next[*peer as usize] += 1;
    }
    // Single-sided reads of every peer's region (the peers keep polling in
    // the barrier below, which serves our reads on the soft NIC).
    for (peer, r) in regions {
        let mut dst = vec![0u8; 200_000];
        m.get(peer, &r, 50_000, &mut dst).expect("get");
        assert!(
            dst[..] == pattern(peer + 100, 300_000)[50_000..250_000],
            "get data from {peer}"
        );
        let mut over = vec![0u8; 16];
        assert!(matches!(
            m.get(peer, &r, r.len - 8, &mut over),
            Err(BtlError::OutOfBounds { .. })
        ));
    }
    let mut sink = |_: u32, _: u8, _: &[u8]| panic!("no more fragments expected");
    job.modex
        .barrier_with(|| {
            m.progress(&mut sink);
        })
        .unwrap();
    m.deregister_region(&region);
    m.finalize().unwrap();
    assert!(matches!(
        m.send(others[0], 1, b"x", b""),
        Err(BtlError::Finalized)
    ));
    drop(region_mem);
}

#[test]
fn generic_btl_interface_three_ranks() {
    run_job("iface", 3, &[("btl_openib_if_include", "tmsoft0")]);
}

#[test]
fn generic_btl_interface_without_tm() {
    run_job(
        "iface",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "0"),
        ],
    );
}
