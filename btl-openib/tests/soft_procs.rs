//! btl-openib across real processes over the soft NIC `tmsoft0`: modex
//! wire-up, eager, software rendezvous (RDMA read + FIN), the TM-SRQ path
//! (TAG_ADD matched by the NIC, NIC-issued rendezvous read and FIN,
//! unexpected messages and the counter, DEL, internal tags vs ANY_TAG), SRQ
//! replenishment under a flood, and completion errors surfacing as errors
//! on the affected operations. Each job runs its ranks as child processes
//! of the test (see `common`), bounded by timeouts.

mod common;

use std::time::Duration;

use common::*;
use tmpi_btl_openib::{init, Btl, Event, FragKind, Module, Op, OpenibError, RecvFrag, TmEvent};
use tmpi_pml::tag::{pack, Envelope, Matcher, Source, TagSel};
use tmpi_verbs::soft::SoftProvider;
use tmpi_verbs::wire::Rvh;
use tmpi_verbs::WcStatus;

type M = Module<SoftProvider>;

#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return; // only a child rank does anything here
    };
    let mut job = child_job();
    let (btl, reach) = init(&job.reg, &job.info, &mut job.modex).expect("init over tmsoft0");
    let Btl::Soft(mut mods) = btl else {
        panic!("tmsoft0 named but another provider was used")
    };
    assert_eq!(mods.len(), 1, "tmsoft0 has one port");
    for r in 0..job.size {
        assert_eq!(reach[r as usize], r != job.rank, "reachability of rank {r}");
    }
    let mut m = mods.remove(0);
    match role.as_str() {
        "eager" => role_eager(&mut job, &mut m),
        "rndv_sw" => role_rndv_sw(&mut job, &mut m),
        "tm" => role_tm(&mut job, &mut m),
        "flood" => role_flood(&mut job, &mut m),
        "peer_death" => role_peer_death(&mut job, &mut m),
        "nic_read_error" => role_nic_read_error(&mut job, &mut m),
        "broken_peer_read" => role_broken_peer_read(&mut job, &mut m),
        "sync_req" => role_sync_req(&mut job, &mut m),
        "caller_count" => role_caller_count(&mut job, &mut m),
        other => panic!("unknown role {other}"),
    }
}

fn tag(ctx: u32, src: u32, t: i32) -> u64 {
    pack(Envelope {
        context: ctx,
        source: src,
        tag: t,
    })
    .unwrap()
}

fn barrier(job: &mut Job, m: &mut M, evs: &mut Vec<Event>) {
    job.modex
        .barrier_with(|| {
            m.progress(evs).expect("progress");
        })
        .expect("barrier");
}

/// Retries a send while the module reports Busy.
fn retry(m: &mut M, evs: &mut Vec<Event>, mut f: impl FnMut(&mut M) -> Result<(), OpenibError>) {
    let start = std::time::Instant::now();
    loop {
        match f(m) {
            Ok(()) => return,
            Err(OpenibError::Busy) => {
                m.progress(evs).expect("progress");
                assert!(start.elapsed() < WAIT, "send stayed busy");
            }
            Err(e) => panic!("send failed: {e}"),
        }
    }
}

fn take_frag(evs: &mut Vec<Event>, pred: impl Fn(&RecvFrag) -> bool) -> Option<RecvFrag> {
    let i = evs
        .iter()
        .position(|e| matches!(e, Event::Recv(f) if pred(f)))?;
    match evs.remove(i) {
        Event::Recv(f) => Some(f),
        _ => unreachable!(),
    }
}

fn has(evs: &[Event], pred: impl Fn(&Event) -> bool) -> bool {
    evs.iter().any(pred)
}

// ---------------------------------------------------------------- eager

const EAGER_N: u32 = 50;

fn role_eager(job: &mut Job, m: &mut M) {
    assert!(
        m.tm_caps().is_none(),
        "btl_openib_tm_enable=0 must give software matching"
    );
    let me = job.rank;
    let mut evs = Vec::new();
    for p in (0..job.size).filter(|&p| p != me) {
        for i in 0..EAGER_N {
            let data = pattern(me * 1000 + i, 100 + i as usize * 37);
            retry(m, &mut evs, |m| {
                m.send_eager(p, tag(3, me, i as i32), i, &data, u64::from(i))
            });
        }
        retry(m, &mut evs, |m| {
            m.send_frag(p, 42, b"HDR", &pattern(me, 64), 999)
        });
    }
    let peers = job.size - 1;
    let want = (EAGER_N + 1) * peers;
    wait_until(m, &mut evs, |e| {
        e.iter().filter(|e| matches!(e, Event::Recv(_))).count() as u32 >= want
    });
    let mut next = vec![0u32; job.size as usize];
    let mut frags = 0;
    for e in evs.drain(..) {
        let Event::Recv(f) = e else {
            panic!("unexpected event {e:?}")
        };
        assert!(!f.unexpected);
        match f.kind {
            FragKind::Eager => {
                let env = tmpi_pml::tag::unpack(f.tmh.tag);
                assert_eq!(env.source, f.peer, "source in the tag = sending rank");
                assert_eq!(env.context, 3);
                let i = next[f.peer as usize];
                assert_eq!(f.tmh.app_ctx, i, "in order from rank {}", f.peer);
                assert_eq!(env.tag, i as i32);
                assert_eq!(
                    f.payload(),
                    &pattern(f.peer * 1000 + i, 100 + i as usize * 37)[..]
                );
                next[f.peer as usize] += 1;
            }
            FragKind::NoTag => {
                assert_eq!(&f.payload()[..3], b"HDR");
                assert_eq!(f.tmh.app_ctx, 42, "the BTL tag travels in app_ctx");
                assert_eq!(&f.payload()[3..], &pattern(f.peer, 64)[..]);
                assert_eq!(
                    next[f.peer as usize], EAGER_N,
                    "fragment after the eager messages"
                );
                frags += 1;
            }
            FragKind::Rndv => panic!("no rendezvous sent"),
        }
    }
    assert_eq!(frags, peers);
    // Too large for eager: a typed error, nothing sent.
    let big = vec![0u8; m.eager_limit() + 1];
    let p = (me + 1) % job.size;
    assert!(matches!(
        m.send_eager(p, 0, 0, &big, 0),
        Err(OpenibError::TooLarge { .. })
    ));
    assert!(matches!(
        m.send_eager(me, 0, 0, b"x", 0),
        Err(OpenibError::Unreachable(_))
    ));
    barrier(job, m, &mut evs);
    assert!(evs.is_empty(), "{evs:?}");
}

#[test]
fn wireup_and_eager_three_ranks() {
    run_job(
        "eager",
        3,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "0"),
        ],
    );
}

#[test]
fn tm_enable_on_without_caps_warns_and_falls_back() {
    // The soft NIC advertising no tag matching: tm_enable=1 must fall back
    // to software matching (role_eager asserts it) and still work.
    run_job(
        "eager",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "1"),
            ("btl_openib_tmsoft_max_num_tags", "0"),
        ],
    );
}

// ----------------------------------------------------- software rendezvous

const RNDV_LEN: usize = 1536 * 1024; // larger than the soft NIC's largest message: read in chunks

fn role_rndv_sw(job: &mut Job, m: &mut M) {
    assert!(m.tm_caps().is_none());
    let mut evs = Vec::new();
    if job.rank == 0 {
        let src = pattern(42, RNDV_LEN);
        // SAFETY: `src` lives and is unmodified until RndvDone (waited below).
        unsafe { m.send_rndv(1, tag(1, 0, 77), 7, src.as_ptr(), src.len(), b"hello", 77) }.unwrap();
        // A second one with the same (peer, tag, app_ctx) is refused.
        // SAFETY: refused before anything is registered or sent.
        let dup = unsafe { m.send_rndv(1, tag(1, 0, 77), 7, src.as_ptr(), 10, b"", 78) };
        assert!(
            matches!(dup, Err(OpenibError::DuplicateRendezvous { .. })),
            "{dup:?}"
        );
        wait_until(m, &mut evs, |e| {
            has(e, |e| matches!(e, Event::RndvDone { id: 77, peer: 1 }))
        });
        evs.clear();
        // Serve rank 1's reads (the soft NIC works inside our polls).
        barrier(job, m, &mut evs);
        assert!(evs.is_empty(), "{evs:?}");
        let st = m.stats();
        assert_eq!(st.rcache.misses, 1, "{st:?}");
        drop(src);
        m.invalidate(std::ptr::null(), usize::MAX);
        assert_eq!(m.stats().rcache.entries, 0, "released and invalidated");
    } else {
        wait_until(m, &mut evs, |e| {
            has(
                e,
                |e| matches!(e, Event::Recv(f) if f.kind == FragKind::Rndv),
            )
        });
        let f = take_frag(&mut evs, |f| f.kind == FragKind::Rndv).unwrap();
        assert_eq!(f.payload(), b"hello");
        assert_eq!(f.peer, 0);
        let rvh = f.rvh.unwrap();
        assert_eq!(rvh.len as usize, RNDV_LEN);
        let mut dst = vec![0u8; RNDV_LEN];
        // SAFETY: `dst` is not touched until GetDone.
        unsafe { m.get(0, dst.as_mut_ptr(), RNDV_LEN, rvh, 5) }.unwrap();
        wait_until(m, &mut evs, |e| {
            has(e, |e| matches!(e, Event::GetDone { id: 5, .. }))
        });
        assert!(dst == pattern(42, RNDV_LEN), "rendezvous data differs");
        m.send_fin(0, f.tmh, rvh).unwrap();
        drop(f);
        evs.clear();
        // A read with a wrong rkey fails as an error on that read, and the
        // connection is reported broken (as a QP error on hardware).
        let bad = Rvh {
            rkey: rvh.rkey ^ 0x5a5a_5a5a,
            ..rvh
        };
        // SAFETY: `dst` is not touched until the read's event.
        unsafe { m.get(0, dst.as_mut_ptr(), 4096, bad, 6) }.unwrap();
        wait_until(m, &mut evs, |e| {
            has(e, |e| matches!(e, Event::Failed { id: 6, .. }))
        });
        let failed = evs
            .iter()
            .find(|e| matches!(e, Event::Failed { id: 6, .. }))
            .unwrap();
        match failed {
            Event::Failed {
                op: Op::Get,
                peer: 0,
                error: OpenibError::Completion { status, .. },
                ..
            } => assert_eq!(*status, WcStatus::RemAccessErr),
            other => panic!("{other:?}"),
        }
        assert!(dst == pattern(42, RNDV_LEN), "failed read wrote memory");
        assert!(!m.reachable(0));
        assert!(matches!(
            m.send_eager(0, 0, 0, b"x", 1),
            Err(OpenibError::PeerFailed(0))
        ));
        evs.clear();
        barrier(job, m, &mut evs);
    }
}

#[test]
fn rendezvous_by_rdma_read_software_path_and_bad_rkey_error() {
    run_job(
        "rndv_sw",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "0"),
        ],
    );
}

// --------------------------------------------------------------- TM-SRQ

fn tm_evt(evs: &[Event], f: impl Fn(&TmEvent) -> bool) -> bool {
    evs.iter().any(|e| matches!(e, Event::Tm(t) if f(t)))
}

fn role_tm(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    if job.rank == 0 {
        barrier(job, m, &mut evs); // receiver has posted its tagged buffers
                                   // Phase 1: matched eager and rendezvous, then an internal tag.
        let eager = pattern(5, 3000);
        m.send_eager(1, tag(1, 0, 5), 1, &eager, 1).unwrap();
        let big = pattern(6, 200 * 1024);
        // SAFETY: `big` lives until RndvDone (waited below).
        unsafe { m.send_rndv(1, tag(1, 0, 6), 2, big.as_ptr(), big.len(), b"", 9) }.unwrap();
        m.send_eager(1, tag(4, 0, -3), 5, b"internal", 5).unwrap();
        wait_until(m, &mut evs, |e| {
            has(e, |e| matches!(e, Event::RndvDone { id: 9, .. }))
        });
        evs.clear();
        barrier(job, m, &mut evs); // receiver processed and synced
                                   // Phase 2: ANY_TAG match, then unexpected eager and rendezvous.
        m.send_eager(1, tag(4, 0, 12), 6, b"user", 6).unwrap();
        m.send_eager(1, tag(1, 0, 7), 3, &pattern(7, 100), 3)
            .unwrap();
        let big2 = pattern(8, 100 * 1024);
        // SAFETY: as above.
        unsafe { m.send_rndv(1, tag(1, 0, 8), 4, big2.as_ptr(), big2.len(), b"", 10) }.unwrap();
        wait_until(m, &mut evs, |e| {
            has(e, |e| matches!(e, Event::RndvDone { id: 10, .. }))
        });
        evs.clear();
        barrier(job, m, &mut evs); // receiver synced and posted tag 11
                                   // Phase 3: matched again after the resynchronisation.
        m.send_eager(1, tag(1, 0, 11), 7, b"after sync", 7).unwrap();
        barrier(job, m, &mut evs);
        assert!(evs.is_empty(), "{evs:?}");
        return;
    }
    let caps = m
        .tm_caps()
        .expect("tmsoft0 has tag matching; tm_enable=auto must use it");
    assert!(caps.max_num_tags > 0);
    let mt = |src: Source, t: TagSel| Matcher::new(1, src, t).unwrap();
    let mut a = vec![0u8; 4096];
    let mut b = vec![0u8; 256 * 1024];
    let mut c = vec![0u8; 64];
    let mut e_any = vec![0u8; 64];
    // SAFETY (all posts): the vectors are neither read nor dropped before
    // their receive ended (events waited below).
    let ma = mt(Source::Rank(0), TagSel::Tag(5));
    unsafe { m.tm_post_recv(a.as_mut_ptr(), a.len(), ma.recv_tag, ma.mask, 1, 0) }.unwrap();
    let mb = mt(Source::Rank(0), TagSel::Tag(6));
    unsafe { m.tm_post_recv(b.as_mut_ptr(), b.len(), mb.recv_tag, mb.mask, 2, 0) }.unwrap();
    let mc = Matcher::new(2, Source::Any, TagSel::Any).unwrap();
    let hc =
        unsafe { m.tm_post_recv(c.as_mut_ptr(), c.len(), mc.recv_tag, mc.mask, 3, 0) }.unwrap();
    // ANY_SOURCE/ANY_TAG on its own context 4.
    let me_ = Matcher::new(4, Source::Any, TagSel::Any).unwrap();
    unsafe {
        m.tm_post_recv(
            e_any.as_mut_ptr(),
            e_any.len(),
            me_.recv_tag,
            me_.mask,
            5,
            0,
        )
    }
    .unwrap();
    // Duplicate receive ids are refused.
    let dup = unsafe { m.tm_post_recv(c.as_mut_ptr(), c.len(), 0, 0, 3, 0) };
    assert!(
        matches!(dup, Err(OpenibError::InvalidArgument(_))),
        "{dup:?}"
    );
    m.tm_del(hc, 0).unwrap();
    wait_until(m, &mut evs, |e| {
        [1, 2, 5].iter().all(|&id| {
            tm_evt(
                e,
                |t| matches!(t, TmEvent::Added { recv_id, sync_req: false } if *recv_id == id),
            )
        }) && tm_evt(e, |t| matches!(t, TmEvent::Deleted { recv_id: 3 }))
    });
    evs.clear();
    barrier(job, m, &mut evs);
    // Phase 1: the NIC matches eager into `a` and reads the rendezvous into
    // `b` itself; the internal tag is not matched by the ANY_TAG entry
    // (matching was active: counts equal). The 3000-byte eager message spans
    // three packets of the soft NIC's 1 KiB MTU: a match first (its tag
    // information, no data, no QP number), the data later.
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| matches!(t, TmEvent::DataValid { recv_id: 1, .. }))
            && tm_evt(e, |t| matches!(t, TmEvent::DataValid { recv_id: 2, .. }))
            && has(e, |e| matches!(e, Event::Recv(f) if f.unexpected))
    });
    for e in &evs {
        match e {
            Event::Tm(TmEvent::Matched {
                recv_id: 1,
                peer,
                tag: t,
                app_ctx,
                complete,
                ..
            }) => {
                assert!(!complete, "a multi-packet eager message: data comes later");
                assert_eq!((*peer, *t, *app_ctx), (u32::MAX, tag(1, 0, 5), 1));
            }
            Event::Tm(TmEvent::DataValid {
                recv_id: 1,
                byte_len,
            }) => assert_eq!(*byte_len, 3000),
            Event::Tm(TmEvent::Matched {
                recv_id: 2,
                complete,
                peer,
                ..
            }) => {
                assert!(!complete, "rendezvous: data comes later");
                assert_eq!(*peer, u32::MAX, "a no-packet CQE names no QP");
            }
            Event::Tm(TmEvent::DataValid {
                recv_id: 2,
                byte_len,
            }) => assert_eq!(*byte_len, 200 * 1024),
            Event::Tm(TmEvent::Matched { recv_id: 5, .. }) => {
                panic!("ANY_TAG matched an internal tag")
            }
            _ => {}
        }
    }
    assert_eq!(&a[..3000], &pattern(5, 3000)[..]);
    assert!(
        b[..200 * 1024] == pattern(6, 200 * 1024)[..],
        "NIC rendezvous data"
    );
    let fi = take_frag(&mut evs, |f| f.tmh.tag == tag(4, 0, -3)).unwrap();
    assert!(fi.unexpected);
    assert_eq!(fi.payload(), b"internal");
    assert_eq!(m.tm_unexpected_count(), 1);
    drop(fi);
    evs.clear();
    m.tm_sync(1).unwrap();
    wait_until(m, &mut evs, |e| tm_evt(e, |t| matches!(t, TmEvent::Synced)));
    evs.clear();
    barrier(job, m, &mut evs);
    // Phase 2: ANY_TAG takes the user tag; then tag 7 and the rendezvous
    // tag 8 find no entry and come up unexpected.
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| {
            matches!(
                t,
                TmEvent::Matched {
                    recv_id: 5,
                    complete: true,
                    ..
                }
            )
        }) && e
            .iter()
            .filter(|e| matches!(e, Event::Recv(f) if f.unexpected))
            .count()
            == 2
    });
    assert!(tm_evt(
        &evs,
        |t| matches!(t, TmEvent::Matched { recv_id: 5, byte_len: 4, tag: t, .. } if *t == tag(4, 0, 12))
    ));
    assert_eq!(&e_any[..4], b"user");
    let f7 = take_frag(&mut evs, |f| f.tmh.tag == tag(1, 0, 7)).unwrap();
    assert!(f7.unexpected && f7.kind == FragKind::Eager);
    assert_eq!(f7.payload(), &pattern(7, 100)[..]);
    let f8 = take_frag(&mut evs, |f| f.tmh.tag == tag(1, 0, 8)).unwrap();
    assert!(f8.unexpected && f8.kind == FragKind::Rndv);
    assert_eq!(m.tm_unexpected_count(), 3);
    // Software finishes the unexpected rendezvous: read, then FIN.
    let rvh = f8.rvh.unwrap();
    let mut d = vec![0u8; rvh.len as usize];
    // SAFETY: `d` untouched until GetDone.
    unsafe { m.get(0, d.as_mut_ptr(), d.len(), rvh, 20) }.unwrap();
    wait_until(m, &mut evs, |e| {
        has(e, |e| matches!(e, Event::GetDone { id: 20, .. }))
    });
    assert!(d == pattern(8, 100 * 1024));
    m.send_fin(0, f8.tmh, rvh).unwrap();
    drop((f7, f8));
    evs.clear();
    // All unexpected messages processed: sync, then a new receive is matched.
    m.tm_sync(3).unwrap();
    let mut g = vec![0u8; 64];
    let mg = mt(Source::Rank(0), TagSel::Tag(11));
    // SAFETY: `g` untouched until its match.
    unsafe { m.tm_post_recv(g.as_mut_ptr(), g.len(), mg.recv_tag, mg.mask, 6, 3) }.unwrap();
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| matches!(t, TmEvent::Synced))
            && tm_evt(e, |t| matches!(t, TmEvent::Added { recv_id: 6, .. }))
    });
    assert!(
        tm_evt(&evs, |t| matches!(
            t,
            TmEvent::Added {
                recv_id: 6,
                sync_req: false
            }
        )),
        "{evs:?}"
    );
    evs.clear();
    barrier(job, m, &mut evs);
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| {
            matches!(
                t,
                TmEvent::Matched {
                    recv_id: 6,
                    complete: true,
                    ..
                }
            )
        })
    });
    assert_eq!(&g[..10], b"after sync");
    evs.clear();
    barrier(job, m, &mut evs);
    assert!(evs.is_empty(), "{evs:?}");
    drop((a, b, c, e_any, g));
}

#[test]
fn tm_srq_nic_matching_eager_rendezvous_unexpected_and_sync() {
    run_job(
        "tm",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "auto"),
        ],
    );
}

// ---------------------------------------------------------------- flood

const FLOOD_N: u32 = 20_000;
const FLOOD_LEN: usize = 512;

fn role_flood(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    if job.rank == 0 {
        for i in 0..FLOOD_N {
            let data = pattern(i, FLOOD_LEN);
            retry(m, &mut evs, |m| {
                m.send_eager(1, tag(1, 0, (i % 1000) as i32), i, &data, u64::from(i))
            });
        }
        barrier(job, m, &mut evs);
        assert!(evs.is_empty(), "no failures: {evs:?}");
        return;
    }
    // Let the sender run far ahead of our buffers first.
    std::thread::sleep(Duration::from_millis(300));
    let start_posted = m.stats().recv_target;
    let mut next = 0u32;
    let t0 = std::time::Instant::now();
    while next < FLOOD_N {
        m.progress(&mut evs).unwrap();
        for e in evs.drain(..) {
            let Event::Recv(f) = e else { panic!("{e:?}") };
            assert_eq!(f.tmh.app_ctx, next, "lost or reordered message");
            assert_eq!(f.payload(), &pattern(next, FLOOD_LEN)[..]);
            next += 1;
        }
        assert!(t0.elapsed() < WAIT, "only {next} of {FLOOD_N} arrived");
    }
    let st = m.stats();
    assert!(
        st.recv_grows >= 1 && st.recv_target > start_posted,
        "the pool grew: {st:?}"
    );
    if m.tm_caps().is_some() {
        assert_eq!(
            m.tm_unexpected_count(),
            FLOOD_N,
            "every unmatched tagged message counted"
        );
    }
    barrier(job, m, &mut evs);
}

#[test]
fn srq_replenishment_under_flood_no_loss() {
    run_job(
        "flood",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "0"),
            ("btl_openib_srq_size", "16"),
            ("btl_openib_srq_max", "256"),
            ("btl_openib_send_queue", "32"),
        ],
    );
}

#[test]
fn srq_replenishment_under_flood_tm_srq() {
    run_job(
        "flood",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_srq_size", "16"),
            ("btl_openib_srq_max", "256"),
        ],
    );
}

// ----------------------------------------------------------- peer death

fn role_peer_death(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    let buf = pattern(1, 64 * 1024);
    if job.rank == 0 {
        // SAFETY: the process exits before `buf` could be dropped.
        unsafe { m.send_rndv(1, tag(1, 0, 1), 1, buf.as_ptr(), buf.len(), b"", 1) }.unwrap();
        barrier(job, m, &mut evs);
        std::process::exit(0); // vanish without serving the read or a goodbye
    }
    barrier(job, m, &mut evs);
    // SAFETY: `buf` outlives the send's failure event (waited below).
    unsafe { m.send_rndv(0, tag(1, 1, 1), 1, buf.as_ptr(), buf.len(), b"", 100) }.unwrap();
    wait_until(m, &mut evs, |e| {
        has(
            e,
            |e| matches!(e, Event::Recv(f) if f.kind == FragKind::Rndv),
        )
    });
    let f = take_frag(&mut evs, |f| f.kind == FragKind::Rndv).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mut dst = vec![0u8; 64 * 1024];
    // SAFETY: `dst` untouched until the read's event.
    unsafe { m.get(0, dst.as_mut_ptr(), dst.len(), f.rvh.unwrap(), 200) }.unwrap();
    // The read fails (no hang), and the rendezvous send waiting for the dead
    // peer's FIN fails with it.
    wait_until(m, &mut evs, |e| {
        has(e, |e| {
            matches!(
                e,
                Event::Failed {
                    id: 200,
                    op: Op::Get,
                    ..
                }
            )
        }) && has(e, |e| {
            matches!(
                e,
                Event::Failed {
                    id: 100,
                    op: Op::Rndv,
                    ..
                }
            )
        })
    });
    assert!(!m.reachable(0));
    assert!(matches!(
        m.send_eager(0, 0, 0, b"x", 3),
        Err(OpenibError::PeerFailed(0))
    ));
}

#[test]
fn peer_death_fails_pending_operations() {
    run_job("peer_death", 2, &[("btl_openib_if_include", "tmsoft0")]);
}

/// A peer that broke the connection (its QP in the error state after a
/// completion error) but stays alive and polling: a read towards it fails
/// (as after exhausted RC retries) instead of waiting for ever, and the
/// rendezvous send it never answered fails too.
fn role_broken_peer_read(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    let buf = pattern(2, 64 * 1024);
    if job.rank == 0 {
        // SAFETY: `buf` lives until the end of this function, after the
        // send's failure event.
        unsafe { m.send_rndv(1, tag(1, 0, 1), 1, buf.as_ptr(), buf.len(), b"", 1) }.unwrap();
        barrier(job, m, &mut evs); // the peer has the RTS
        m.abort_peer(1, &mut evs);
        assert!(!m.reachable(1));
        assert!(
            has(&evs, |e| matches!(
                e,
                Event::Failed {
                    id: 1,
                    op: Op::Rndv,
                    ..
                }
            )),
            "{evs:?}"
        );
        barrier(job, m, &mut evs); // aborted
        barrier(job, m, &mut evs); // the peer's read failed (we kept polling)
        return;
    }
    wait_until(m, &mut evs, |e| {
        has(
            e,
            |e| matches!(e, Event::Recv(f) if f.kind == FragKind::Rndv),
        )
    });
    let f = take_frag(&mut evs, |f| f.kind == FragKind::Rndv).unwrap();
    barrier(job, m, &mut evs);
    barrier(job, m, &mut evs); // rank 0 aborted its QP
    let mut dst = vec![0u8; 64 * 1024];
    // SAFETY: `dst` untouched until the read's event.
    unsafe { m.get(0, dst.as_mut_ptr(), dst.len(), f.rvh.unwrap(), 200) }.unwrap();
    wait_until(m, &mut evs, |e| {
        has(e, |e| {
            matches!(
                e,
                Event::Failed {
                    id: 200,
                    op: Op::Get,
                    ..
                }
            )
        })
    });
    assert!(!m.reachable(0));
    assert!(dst.iter().all(|&b| b == 0), "nothing read");
    barrier(job, m, &mut evs);
}

#[test]
fn read_from_a_peer_that_broke_the_connection_fails() {
    run_job(
        "broken_peer_read",
        2,
        &[("btl_openib_if_include", "tmsoft0")],
    );
}

// ------------------------------------------------- NIC-issued read error

fn role_nic_read_error(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    if job.rank == 0 {
        barrier(job, m, &mut evs); // the receiver's tagged buffer is posted
                                   // A rendezvous request naming memory we never registered.
        let bogus = Rvh {
            va: 0x1000,
            rkey: 0xdead_beef,
            len: 8192,
        };
        m.inject_rts(1, tag(1, 0, 40), 1, bogus, 50).unwrap();
        // The receiver's NIC fails to read: we get an error FIN, not a hang.
        wait_until(m, &mut evs, |e| {
            has(e, |e| {
                matches!(
                    e,
                    Event::Failed {
                        id: 50,
                        op: Op::Rndv,
                        ..
                    }
                )
            })
        });
        barrier(job, m, &mut evs);
        return;
    }
    assert!(m.tm_caps().is_some());
    let mut buf = vec![0u8; 8192];
    let mt = Matcher::new(1, Source::Rank(0), TagSel::Tag(40)).unwrap();
    // SAFETY: `buf` untouched until the receive ended (waited below).
    unsafe { m.tm_post_recv(buf.as_mut_ptr(), buf.len(), mt.recv_tag, mt.mask, 7, 0) }.unwrap();
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| matches!(t, TmEvent::Added { recv_id: 7, .. }))
    });
    evs.clear();
    barrier(job, m, &mut evs);
    wait_until(m, &mut evs, |e| {
        has(e, |e| matches!(e, Event::Failed { id: 7, .. }))
    });
    assert!(
        tm_evt(&evs, |t| matches!(
            t,
            TmEvent::Matched {
                recv_id: 7,
                complete: false,
                ..
            }
        )),
        "matched first: {evs:?}"
    );
    let failed = evs
        .iter()
        .find(|e| matches!(e, Event::Failed { id: 7, .. }))
        .unwrap();
    assert!(
        matches!(failed, Event::Failed { op: Op::TaggedRecv, error: OpenibError::Completion { status, .. }, .. } if *status != WcStatus::Success),
        "{failed:?}"
    );
    // The NIC sent no FIN: the caller tells the sender (rank 0, the
    // receive's source), with the tag information of the match.
    let (t, ctx) = evs
        .iter()
        .find_map(|e| match e {
            Event::Tm(TmEvent::Matched {
                recv_id: 7,
                tag,
                app_ctx,
                ..
            }) => Some((*tag, *app_ctx)),
            _ => None,
        })
        .unwrap();
    let tmh = tmpi_verbs::wire::Tmh {
        opcode: tmpi_verbs::wire::TmhOpcode::Rndv,
        app_ctx: ctx,
        tag: t,
    };
    let rvh = Rvh {
        va: 0,
        rkey: 0,
        len: 0,
    };
    m.send_fin_error(0, tmh, rvh).unwrap();
    assert!(buf.iter().all(|&b| b == 0), "nothing written");
    evs.clear();
    barrier(job, m, &mut evs);
}

#[test]
fn nic_rendezvous_read_error_fails_both_sides() {
    run_job("nic_read_error", 2, &[("btl_openib_if_include", "tmsoft0")]);
}

// ------------------------------------------- the synchronisation protocol

/// An ADD that the NIC executes after an unexpected message it counted but
/// software had not yet seen completes with SYNC_REQ; the NIC stops
/// matching until TAG_SYNC reports the count; then it matches again.
fn role_sync_req(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    if job.rank == 0 {
        barrier(job, m, &mut evs); // the receiver holds its list operations
        m.send_eager(1, tag(1, 0, 8), 1, b"first", 1).unwrap();
        barrier(job, m, &mut evs); // receiver saw SYNC_REQ
        m.send_eager(1, tag(1, 0, 9), 2, b"while stale", 2).unwrap();
        barrier(job, m, &mut evs); // receiver synced
        m.send_eager(1, tag(1, 0, 9), 3, b"after sync", 3).unwrap();
        barrier(job, m, &mut evs);
        return;
    }
    let srq = m.srq();
    srq.hold_ops(true);
    let mut buf = vec![0u8; 64];
    let mt = Matcher::new(1, Source::Rank(0), TagSel::Tag(9)).unwrap();
    // SAFETY: `buf` untouched until its match (waited below).
    unsafe { m.tm_post_recv(buf.as_mut_ptr(), buf.len(), mt.recv_tag, mt.mask, 1, 0) }.unwrap();
    barrier(job, m, &mut evs);
    // The unexpected message reaches software (count 1) while the ADD,
    // carrying count 0, is still held in the NIC.
    wait_until(m, &mut evs, |e| {
        has(e, |e| matches!(e, Event::Recv(f) if f.unexpected))
    });
    assert_eq!(m.tm_unexpected_count(), 1);
    assert!(m.srq().release_op(), "the held ADD");
    m.srq().hold_ops(false);
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| matches!(t, TmEvent::Added { recv_id: 1, .. }))
    });
    assert!(
        tm_evt(&evs, |t| matches!(
            t,
            TmEvent::Added {
                recv_id: 1,
                sync_req: true
            }
        )),
        "{evs:?}"
    );
    evs.clear();
    barrier(job, m, &mut evs);
    // Counts differ: the NIC does not match, the message is unexpected.
    wait_until(m, &mut evs, |e| {
        has(e, |e| matches!(e, Event::Recv(f) if f.unexpected))
    });
    assert!(
        !tm_evt(&evs, |t| matches!(t, TmEvent::Matched { .. })),
        "{evs:?}"
    );
    let f = take_frag(&mut evs, |_| true).unwrap();
    assert_eq!(f.payload(), b"while stale");
    drop(f);
    // Software processed both unexpected messages: TAG_SYNC with 2.
    m.tm_sync(2).unwrap();
    wait_until(m, &mut evs, |e| tm_evt(e, |t| matches!(t, TmEvent::Synced)));
    evs.clear();
    barrier(job, m, &mut evs);
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| {
            matches!(
                t,
                TmEvent::Matched {
                    recv_id: 1,
                    complete: true,
                    ..
                }
            )
        })
    });
    assert_eq!(&buf[..10], b"after sync");
    evs.clear();
    barrier(job, m, &mut evs);
}

#[test]
fn tm_sync_protocol_sync_req_suspends_matching_until_tag_sync() {
    run_job("sync_req", 2, &[("btl_openib_if_include", "tmsoft0")]);
}

/// List operations carry the caller's unexpected count, not the module's:
/// a message the module handed out but software has not yet taken (its
/// fate still open, e.g. deferred behind a pending DEL) is not counted by
/// an ADD that carries the older count, so the NIC stops matching
/// (`SYNC_REQ`) instead of resuming early; TAG_SYNC with the caller's new
/// count resumes it.
fn role_caller_count(job: &mut Job, m: &mut M) {
    let mut evs = Vec::new();
    if job.rank == 0 {
        m.send_eager(1, tag(1, 0, 8), 1, b"open fate", 1).unwrap();
        barrier(job, m, &mut evs); // receiver saw it, added with count 0
        barrier(job, m, &mut evs); // receiver synced with count 1
        m.send_eager(1, tag(1, 0, 9), 2, b"matched", 2).unwrap();
        barrier(job, m, &mut evs);
        return;
    }
    wait_until(m, &mut evs, |e| {
        has(e, |e| matches!(e, Event::Recv(f) if f.unexpected))
    });
    assert_eq!(m.tm_unexpected_count(), 1, "the module handed it out");
    evs.clear();
    let mut buf = vec![0u8; 64];
    let mt = Matcher::new(1, Source::Rank(0), TagSel::Tag(9)).unwrap();
    // The caller has not taken the message yet: its count is still 0.
    // SAFETY: `buf` untouched until its match (waited below).
    unsafe { m.tm_post_recv(buf.as_mut_ptr(), buf.len(), mt.recv_tag, mt.mask, 1, 0) }.unwrap();
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| matches!(t, TmEvent::Added { recv_id: 1, .. }))
    });
    assert!(
        tm_evt(&evs, |t| matches!(
            t,
            TmEvent::Added {
                recv_id: 1,
                sync_req: true
            }
        )),
        "the ADD carried the caller's count 0, not the module's 1: {evs:?}"
    );
    evs.clear();
    barrier(job, m, &mut evs);
    m.tm_sync(1).unwrap();
    wait_until(m, &mut evs, |e| tm_evt(e, |t| matches!(t, TmEvent::Synced)));
    evs.clear();
    barrier(job, m, &mut evs);
    wait_until(m, &mut evs, |e| {
        tm_evt(e, |t| {
            matches!(
                t,
                TmEvent::Matched {
                    recv_id: 1,
                    complete: true,
                    ..
                }
            )
        })
    });
    assert_eq!(&buf[..7], b"matched");
    evs.clear();
    barrier(job, m, &mut evs);
}

#[test]
fn tm_ops_carry_the_callers_unexpected_count() {
    run_job("caller_count", 2, &[("btl_openib_if_include", "tmsoft0")]);
}
