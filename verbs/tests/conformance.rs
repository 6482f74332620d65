//! The conformance suite of the verbs interface. Every test is written once,
//! generic over [`Provider`], and runs against the device named by
//! `TMPI_VERBS_TEST_DEVICE` (default: the soft NIC `tmsoft0`; e.g. `rxe0`
//! inside the rxe VM). Tag-matching tests are skipped (with a message) when
//! the device reports no TM caps; on the soft NIC they always run.
//!
//! All tests use two QPs of one process connected to each other (loopback),
//! which works on every provider; cross-process behaviour of the soft NIC is
//! in `soft_multiproc.rs`.

mod common;

use std::time::Duration;

use common::*;
use tmpi_verbs::wire::{Rvh, TagHeader, Tmh, TmhOpcode, TMH_LEN};
use tmpi_verbs::*;

struct Loop<P: Provider> {
    ctx: P::Context,
    pd: P::Pd,
    cq: P::Cq,
    a: P::Qp,
    b: P::Qp,
}

/// Makes the SRQ that `b` attaches to.
type MakeSrq<'a, P> =
    &'a dyn Fn(&<P as Provider>::Pd, &<P as Provider>::Cq) -> <P as Provider>::Srq;

/// Two connected QPs on one CQ; `srq` attaches `b` to it.
fn setup<P: Provider>(
    p: &P,
    dev: &str,
    srq_of_b: Option<MakeSrq<'_, P>>,
) -> (Loop<P>, Option<P::Srq>) {
    let ctx = p.open(dev).expect("open");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 256,
            with_tm_info: false,
        })
        .expect("create_cq_ex");
    let srq = srq_of_b.map(|f| f(&pd, &cq));
    let mk = |srq: Option<&P::Srq>| {
        pd.create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .expect("create_qp")
    };
    let a = mk(None);
    let b = mk(srq.as_ref());
    let la = local_addr::<P>(&ctx, &a);
    let lb = local_addr::<P>(&ctx, &b);
    connect::<P>(&a, &la, &lb);
    connect::<P>(&b, &lb, &la);
    (Loop { ctx, pd, cq, a, b }, srq)
}

mod suite {
    use super::*;

    pub fn device_and_port<P: Provider>(p: &P, dev: &str) {
        let devs = p.devices().expect("devices");
        assert!(devs.iter().any(|d| d.name == dev), "{dev} not in {devs:?}");
        let ctx = p.open(dev).expect("open");
        assert_eq!(ctx.device_name(), dev);
        let attr = ctx.query_device_ex().expect("query_device_ex");
        assert!(attr.phys_port_cnt >= 1);
        assert!(attr.max_qp > 0 && attr.max_cqe > 0);
        let port = ctx.query_port(1).expect("query_port");
        assert_eq!(port.state, PortState::Active);
        let gids = ctx.query_gid_table().expect("gid table");
        assert!(!gids.is_empty(), "no GID");
        assert!(gids.iter().all(|g| !g.gid.is_zero()));
        if dev.starts_with("rxe") || dev.starts_with("siw") {
            assert!(!attr.tm_caps.supported(), "{dev} must report no TM caps");
            assert_eq!(attr.tm_caps.max_num_tags, 0);
        }
        if dev == tmpi_verbs::soft::DEVICE_NAME {
            assert!(attr.tm_caps.supported());
            assert!(devs.iter().all(|d| d.explicit_only), "soft NIC is opt-in");
        }
        assert!(matches!(
            p.open("no-such-dev0"),
            Err(VerbsError::NoSuchDevice(_))
        ));
    }

    pub fn rc_send_recv<P: Provider>(p: &P, dev: &str) {
        let (l, _) = setup::<P>(p, dev, None);
        let src = Buf::<P>::rw(&l.pd, 8192);
        let dst = Buf::<P>::rw(&l.pd, 8192);
        let sizes = [1usize, 100, 4096, 8000];
        for (i, n) in sizes.iter().enumerate() {
            recv::<P>(&l.b, 100 + i as u64, dst.sge(0, 8192));
            src.write(0, &pattern(i as u8, *n));
            send::<P>(&l.a, i as u64, src.sge(0, *n));
            let wcs = wait::<P>(&l.cq, 2, &[]);
            let s = wcs
                .iter()
                .find(|w| w.opcode == WcOpcode::Send)
                .expect("send wc");
            let r = wcs
                .iter()
                .find(|w| w.opcode == WcOpcode::Recv)
                .expect("recv wc");
            assert_eq!((s.wr_id, s.status), (i as u64, WcStatus::Success));
            assert_eq!(r.wr_id, 100 + i as u64);
            assert_eq!(r.status, WcStatus::Success);
            assert_eq!(r.byte_len as usize, *n);
            assert_eq!(r.qp_num, l.b.qp_num());
            assert_eq!(&dst.read()[..*n], &pattern(i as u8, *n)[..]);
        }
        // Order is kept and send-with-immediate carries its value.
        for i in 0..4u64 {
            recv::<P>(&l.b, 200 + i, dst.sge(i as usize * 16, 16));
        }
        for i in 0..4u64 {
            src.write(i as usize * 16, &[i as u8; 16]);
            // SAFETY: buffers live until the completions below.
            unsafe {
                l.a.post_send(&SendWr {
                    wr_id: i,
                    sg_list: &[src.sge(i as usize * 16, 16)],
                    opcode: SendOpcode::SendWithImm(0xabc0 + i as u32),
                    flags: SendFlags::SIGNALED,
                })
            }
            .expect("post_send");
        }
        let wcs = wait::<P>(&l.cq, 8, &[]);
        let recvs: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
        assert_eq!(
            recvs.iter().map(|w| w.wr_id).collect::<Vec<_>>(),
            vec![200, 201, 202, 203]
        );
        for (i, w) in recvs.iter().enumerate() {
            assert_eq!(w.imm_data, Some(0xabc0 + i as u32));
            assert!(w.flags.contains(WcFlags::WITH_IMM));
            assert_eq!(&dst.read()[i * 16..i * 16 + 16], &[i as u8; 16]);
        }
    }

    pub fn rdma_write_and_read<P: Provider>(p: &P, dev: &str) {
        let (l, _) = setup::<P>(p, dev, None);
        let local = Buf::<P>::rw(&l.pd, 65536);
        let remote = Buf::<P>::rw(&l.pd, 65536);
        let data = pattern(7, 40_000);
        local.write(0, &data);
        // SAFETY: buffers live until the completions.
        unsafe {
            l.a.post_send(&SendWr {
                wr_id: 1,
                sg_list: &[local.sge(0, data.len())],
                opcode: SendOpcode::RdmaWrite {
                    remote_addr: remote.addr() + 100,
                    rkey: remote.mr.rkey(),
                },
                flags: SendFlags::SIGNALED,
            })
        }
        .expect("post write");
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(
            (w[0].wr_id, w[0].opcode, w[0].status),
            (1, WcOpcode::RdmaWrite, WcStatus::Success)
        );
        assert_eq!(&remote.read()[100..100 + data.len()], &data[..]);
        assert_eq!(remote.read()[99], 0);
        // Read back another region of the remote buffer.
        remote.write(50_000, &pattern(9, 10_000));
        // SAFETY: as above.
        unsafe {
            l.a.post_send(&SendWr {
                wr_id: 2,
                sg_list: &[local.sge(40_000, 10_000)],
                opcode: SendOpcode::RdmaRead {
                    remote_addr: remote.addr() + 50_000,
                    rkey: remote.mr.rkey(),
                },
                flags: SendFlags::SIGNALED,
            })
        }
        .expect("post read");
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(
            (w[0].wr_id, w[0].opcode, w[0].status),
            (2, WcOpcode::RdmaRead, WcStatus::Success)
        );
        assert_eq!(&local.read()[40_000..50_000], &pattern(9, 10_000)[..]);
    }

    /// Bad rkey, out of bounds, missing access flag -> remote access error;
    /// the target's memory is untouched. Each violation gets its own QP pair
    /// because real hardware moves the QP to the error state.
    pub fn bad_rkey_remote_access_error<P: Provider>(p: &P, dev: &str) {
        let cases: [(&str, u32); 3] = [
            ("bad rkey", 0),
            ("out of bounds", 1),
            ("read-only region", 2),
        ];
        for (what, case) in cases {
            let (l, _) = setup::<P>(p, dev, None);
            let local = Buf::<P>::rw(&l.pd, 4096);
            local.write(0, &[0xee; 4096]);
            let target = Buf::<P>::rw(&l.pd, 4096);
            let ro = Buf::<P>::new(
                &l.pd,
                4096,
                AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
            );
            let (addr, rkey) = match case {
                0 => (target.addr(), target.mr.rkey() ^ 0x5a5a_0000),
                1 => (target.addr() + 4000, target.mr.rkey()),
                _ => (ro.addr(), ro.mr.rkey()),
            };
            // SAFETY: buffers live until the completion.
            unsafe {
                l.a.post_send(&SendWr {
                    wr_id: 9,
                    sg_list: &[local.sge(0, 512)],
                    opcode: SendOpcode::RdmaWrite {
                        remote_addr: addr,
                        rkey,
                    },
                    flags: SendFlags::SIGNALED,
                })
            }
            .expect("post");
            let w = wait::<P>(&l.cq, 1, &[]);
            assert_eq!(w[0].wr_id, 9, "{what}");
            assert_eq!(w[0].status, WcStatus::RemAccessErr, "{what}");
            assert!(
                target.read().iter().all(|b| *b == 0),
                "{what}: target touched"
            );
            assert!(
                ro.read().iter().all(|b| *b == 0),
                "{what}: read-only region touched"
            );
        }
    }

    /// A remote access error fails the connection at both ends, as on
    /// hardware and rxe (`rxe_resp.c`: class C NAK, responder to error;
    /// `rxe_comp.c`: requester to error): both QPs reach the error state, a
    /// receive posted at the responder flushes, and a correct RDMA write
    /// posted at the requester afterwards completes in error (the soft NIC,
    /// like mlx5, accepts the post and flushes it: `WrFlushErr`; a provider
    /// may also refuse the post) without touching the target. A model that
    /// kept the QP usable would let a caller go on after such an error.
    pub fn remote_access_error_fails_both_qps<P: Provider>(p: &P, dev: &str) {
        let (l, _) = setup::<P>(p, dev, None);
        let local = Buf::<P>::rw(&l.pd, 4096);
        local.write(0, &[0xee; 4096]);
        let target = Buf::<P>::rw(&l.pd, 4096);
        let landing = Buf::<P>::rw(&l.pd, 64);
        recv::<P>(&l.b, 50, landing.sge(0, 64));
        let write = |wr_id: u64, rkey: u32| {
            // SAFETY: `local` lives until the completions are polled.
            unsafe {
                l.a.post_send(&SendWr {
                    wr_id,
                    sg_list: &[local.sge(0, 512)],
                    opcode: SendOpcode::RdmaWrite {
                        remote_addr: target.addr(),
                        rkey,
                    },
                    flags: SendFlags::SIGNALED,
                })
            }
        };
        write(9, target.mr.rkey() ^ 0x5a5a_0000).expect("post");
        // The failed write and the responder's flushed receive (error
        // completions: only wr_id and status are defined).
        let w = wait::<P>(&l.cq, 2, &[]);
        let status_of = |id: u64| w.iter().find(|c| c.wr_id == id).map(|c| c.status);
        assert_eq!(status_of(9), Some(WcStatus::RemAccessErr), "{w:?}");
        assert_eq!(status_of(50), Some(WcStatus::WrFlushErr), "{w:?}");
        // The state change may trail the completion (rdma-core's
        // tests/test_qp_ex.py retries its query too).
        for (qp, side) in [(&l.a, "requester"), (&l.b, "responder")] {
            let start = std::time::Instant::now();
            while qp.state() != QpState::Error {
                assert!(
                    start.elapsed() < TIMEOUT,
                    "{side} QP never reached the error state"
                );
                std::thread::yield_now();
            }
        }
        match write(10, target.mr.rkey()) {
            Err(e) => assert!(
                !is_soft(),
                "the soft NIC accepts a post to a QP in error: {e}"
            ),
            Ok(()) => {
                let w = wait::<P>(&l.cq, 1, &[]);
                assert_eq!(w[0].wr_id, 10, "{w:?}");
                assert_ne!(
                    w[0].status,
                    WcStatus::Success,
                    "a write on a failed QP succeeded"
                );
                if is_soft() {
                    assert_eq!(w[0].status, WcStatus::WrFlushErr, "{w:?}");
                }
            }
        }
        assert!(target.read().iter().all(|b| *b == 0), "target touched");
    }

    pub fn srq_basic<P: Provider>(p: &P, dev: &str) {
        let mk = |pd: &P::Pd, _cq: &P::Cq| {
            pd.create_srq_ex(
                &SrqAttr {
                    max_wr: 64,
                    max_sge: 1,
                    tm: None,
                },
                None,
            )
            .expect("create_srq_ex")
        };
        let (l, srq) = setup::<P>(p, dev, Some(&mk));
        let srq = srq.unwrap();
        assert!(srq.tm().is_none());
        let bufs = Buf::<P>::rw(&l.pd, 4 * 1024);
        for i in 0..4 {
            // SAFETY: buffer lives until completions.
            unsafe {
                srq.post_srq_recv(&RecvWr {
                    wr_id: 500 + i,
                    sg_list: &[bufs.sge(i as usize * 1024, 1024)],
                })
            }
            .expect("post_srq_recv");
        }
        let src = Buf::<P>::rw(&l.pd, 1024);
        for i in 0..3u64 {
            src.write(0, &pattern(i as u8, 1000));
            send::<P>(&l.a, i, src.sge(0, 1000));
            let wcs = wait::<P>(&l.cq, 2, &[]);
            let r = wcs.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
            assert_eq!(r.wr_id, 500 + i, "SRQ buffers are used in posting order");
            assert_eq!(r.byte_len, 1000);
            assert_eq!(
                &bufs.read()[i as usize * 1024..i as usize * 1024 + 1000],
                &pattern(i as u8, 1000)[..]
            );
        }
    }

    pub fn tm_caps_and_srq<P: Provider>(p: &P, dev: &str) {
        let ctx = p.open(dev).expect("open");
        let caps = ctx.query_device_ex().expect("query").tm_caps;
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx
            .create_cq_ex(&CqInitAttr {
                cqe: 64,
                with_tm_info: caps.supported(),
            })
            .unwrap();
        let r = pd.create_srq_ex(
            &SrqAttr {
                // mlx5/UCX keep at least 33 untagged buffers on a TM-SRQ.
                max_wr: 64,
                max_sge: 1,
                tm: Some(SrqTmAttr {
                    max_num_tags: caps.max_num_tags.clamp(1, 16),
                    max_ops: caps.max_ops.clamp(1, 8),
                }),
            },
            Some(&cq),
        );
        if caps.supported() {
            let srq = r.expect("TM-SRQ");
            assert!(srq.tm().is_some());
        } else {
            let e = r.err().expect("a TM-SRQ on a device without TM must fail");
            eprintln!("{dev}: no TM caps, create_srq_ex(TM) -> {e}");
        }
    }

    pub struct Tm<P: Provider> {
        pub l: Loop<P>,
        pub srq: P::Srq,
        pub caps: TmCaps,
    }

    /// A loop whose `b` side sits on a TM-SRQ; `None` (skip) without TM caps.
    pub fn tm_setup<P: Provider>(p: &P, dev: &str, tags: u32) -> Option<Tm<P>> {
        let caps = p.open(dev).ok()?.query_device_ex().ok()?.tm_caps;
        if !caps.supported() {
            eprintln!("SKIP: {dev} reports no tag-matching caps");
            return None;
        }
        let mk = move |pd: &P::Pd, cq: &P::Cq| {
            pd.create_srq_ex(
                &SrqAttr {
                    max_wr: 64,
                    max_sge: 1,
                    tm: Some(SrqTmAttr {
                        max_num_tags: tags.min(caps.max_num_tags),
                        max_ops: caps.max_ops.min(16),
                    }),
                },
                Some(cq),
            )
            .expect("TM-SRQ")
        };
        let (l, srq) = setup::<P>(p, dev, Some(&mk));
        Some(Tm {
            l,
            srq: srq.unwrap(),
            caps,
        })
    }

    pub fn tagged(tag: u64, app: u32, payload: &[u8]) -> Vec<u8> {
        let mut v = Tmh {
            opcode: TmhOpcode::Eager,
            app_ctx: app,
            tag,
        }
        .to_bytes()
        .to_vec();
        v.extend_from_slice(payload);
        v
    }

    /// Polls until tagged buffer `wr_id` got its `DATA_VALID` (or error)
    /// completion; returns the completions naming it (others are dropped).
    pub fn wait_tagged_done<P: Provider>(cq: &P::Cq, wr_id: u64) -> Vec<WorkCompletion> {
        let mut v = Vec::new();
        loop {
            let w = wait::<P>(cq, 1, &[])[0];
            if w.wr_id != wr_id {
                continue;
            }
            v.push(w);
            let ok = matches!(w.status, WcStatus::Success | WcStatus::TmRndvIncomplete);
            if w.flags.contains(WcFlags::TM_DATA_VALID) || !ok {
                return v;
            }
        }
    }

    pub fn ops<P: Provider>(srq: &P::Srq, ops: &mut [OpsWr<'_>]) {
        // SAFETY: tagged buffers live until their completions (tests wait).
        unsafe { srq.post_srq_ops(ops) }.expect("post_srq_ops");
    }

    pub fn tm_eager_match_and_unexpected<P: Provider>(p: &P, dev: &str) {
        let Some(t) = tm_setup(p, dev, 16) else {
            return;
        };
        let l = &t.l;
        let tagbuf = Buf::<P>::rw(&l.pd, 4096);
        let untagged = Buf::<P>::rw(&l.pd, 4096);
        // SAFETY: buffers outlive the test's completions.
        unsafe {
            t.srq
                .post_srq_recv(&RecvWr {
                    wr_id: 77,
                    sg_list: &[untagged.sge(0, 4096)],
                })
                .unwrap();
        }
        let sge = [tagbuf.sge(0, 4096)];
        let mut add = [OpsWr::add(1, 11, &sge, 0x1234_0000, 0xffff_0000).with_sync(0)];
        ops::<P>(&t.srq, &mut add);
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(w[0].kind(), Completion::TagAdded { sync_req: false });
        assert_eq!(w[0].wr_id, 1);
        let src = Buf::<P>::rw(&l.pd, 4096);
        // One packet (TMH + payload within a 1 KiB MTU): one CQE.
        let msg = tagged(0x1234_5678, 42, &pattern(3, 900));
        src.write(0, &msg);
        send::<P>(&l.a, 5, src.sge(0, msg.len()));
        let wcs = wait::<P>(&l.cq, 2, &[]);
        let m = wcs.iter().find(|w| w.opcode == WcOpcode::TmRecv).unwrap();
        assert_eq!(m.wr_id, 11);
        assert_eq!(
            m.kind(),
            Completion::TagMatched {
                info: TmInfo {
                    tag: 0x1234_5678,
                    priv_: 42
                },
                data_valid: true,
                byte_len: 900
            }
        );
        assert_eq!(&tagbuf.read()[..900], &pattern(3, 900)[..]);
        // No entry left: the next tagged message is unexpected, headers included.
        let msg2 = tagged(0x1234_9999, 1, b"late");
        src.write(0, &msg2);
        send::<P>(&l.a, 6, src.sge(0, msg2.len()));
        let wcs = wait::<P>(&l.cq, 2, &[]);
        let u = wcs.iter().find(|w| w.opcode == WcOpcode::TmRecv).unwrap();
        assert_eq!(u.wr_id, 77);
        assert_eq!(
            u.kind(),
            Completion::Unexpected {
                byte_len: msg2.len() as u32
            }
        );
        assert_eq!(&untagged.read()[..msg2.len()], &msg2[..]);
        // An ADD now carries a stale count: SYNC_REQ; a SYNC with 1 clears it.
        let mut add = [OpsWr::add(2, 12, &sge, 1, !0).with_sync(0)];
        ops::<P>(&t.srq, &mut add);
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(w[0].kind(), Completion::TagAdded { sync_req: true });
        let mut s = [OpsWr::sync(3, 1)];
        ops::<P>(&t.srq, &mut s);
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(w[0].kind(), Completion::TagSynced);
        assert!(!w[0].flags.contains(WcFlags::TM_SYNC_REQ));
    }

    pub fn tm_no_tag_and_del<P: Provider>(p: &P, dev: &str) {
        let Some(t) = tm_setup(p, dev, 16) else {
            return;
        };
        let l = &t.l;
        let tagbuf = Buf::<P>::rw(&l.pd, 4096);
        let untagged = Buf::<P>::rw(&l.pd, 4096);
        // SAFETY: buffers outlive the completions.
        unsafe {
            t.srq
                .post_srq_recv(&RecvWr {
                    wr_id: 70,
                    sg_list: &[untagged.sge(0, 4096)],
                })
                .unwrap();
        }
        let sge = [tagbuf.sge(0, 4096)];
        let mut add = [OpsWr::add(1, 11, &sge, 5, !0).with_sync(0)];
        ops::<P>(&t.srq, &mut add);
        wait::<P>(&l.cq, 1, &[]);
        let h = add[0].handle;
        let mut d = [OpsWr::del(2, h).with_sync(0)];
        ops::<P>(&t.srq, &mut d);
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(w[0].kind(), Completion::TagDeleted);
        // NO_TAG lands in the untagged buffer, not counted.
        let src = Buf::<P>::rw(&l.pd, 64);
        let mut nt = Tmh {
            opcode: TmhOpcode::NoTag,
            app_ctx: 0,
            tag: 5,
        }
        .to_bytes()
        .to_vec();
        nt.extend_from_slice(b"plain");
        src.write(0, &nt);
        send::<P>(&l.a, 1, src.sge(0, nt.len()));
        let wcs = wait::<P>(&l.cq, 2, &[]);
        let r = wcs
            .iter()
            .find(|w| w.opcode == WcOpcode::TmNoTag)
            .expect("NO_TAG");
        assert_eq!(r.wr_id, 70);
        // Counts still agree: an ADD is not flagged.
        let mut add = [OpsWr::add(3, 13, &sge, 6, !0).with_sync(0)];
        ops::<P>(&t.srq, &mut add);
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(w[0].kind(), Completion::TagAdded { sync_req: false });
    }

    pub fn tm_list_full_enomem<P: Provider>(p: &P, dev: &str) {
        let Some(t) = tm_setup(p, dev, 4) else { return };
        let l = &t.l;
        let n = 4u32.min(t.caps.max_num_tags);
        let tagbuf = Buf::<P>::rw(&l.pd, 4096);
        let sge = [tagbuf.sge(0, 64)];
        for i in 0..n {
            let mut a = [OpsWr::add(u64::from(i), 0, &sge, u64::from(i), !0)];
            ops::<P>(&t.srq, &mut a);
            wait::<P>(&l.cq, 1, &[]);
        }
        let mut a = [OpsWr::add(99, 0, &sge, 99, !0)];
        // SAFETY: never posted (refused).
        let e = unsafe { t.srq.post_srq_ops(&mut a) }.expect_err("list full");
        assert!(e.is_full(), "{e}");
        assert!(matches!(e, VerbsError::Post { index: 0, .. }));
    }

    pub fn tm_rndv_offload<P: Provider>(p: &P, dev: &str) {
        let Some(t) = tm_setup(p, dev, 16) else {
            return;
        };
        let l = &t.l;
        let data = pattern(5, 100_000);
        let sendbuf = Buf::<P>::new(
            &l.pd,
            data.len(),
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
        );
        sendbuf.write(0, &data);
        let tagbuf = Buf::<P>::rw(&l.pd, 128 * 1024);
        let small = Buf::<P>::rw(&l.pd, 1024);
        // The sender (QP a, a plain RC QP) receives the FIN in a normal receive.
        let finbuf = Buf::<P>::rw(&l.pd, 64);
        recv::<P>(&l.a, 900, finbuf.sge(0, 64));
        let sge = [tagbuf.sge(0, 128 * 1024)];
        let mut add = [OpsWr::add(1, 21, &sge, 0xaa, !0).with_sync(0)];
        ops::<P>(&t.srq, &mut add);
        wait::<P>(&l.cq, 1, &[]);
        let req = TagHeader {
            tmh: Tmh {
                opcode: TmhOpcode::Rndv,
                app_ctx: 3,
                tag: 0xaa,
            },
            rvh: Some(Rvh {
                va: sendbuf.addr(),
                rkey: sendbuf.mr.rkey(),
                len: data.len() as u32,
            }),
        };
        let hbuf = Buf::<P>::rw(&l.pd, 64);
        let mut h = [0u8; 32];
        req.emit(&mut h).unwrap();
        hbuf.write(0, &h);
        send::<P>(&l.a, 7, hbuf.sge(0, 32));
        let wcs = wait::<P>(&l.cq, 4, &[]);
        let kinds: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.kind())).collect();
        let pos = |f: &dyn Fn(&Completion) -> bool| {
            kinds
                .iter()
                .position(|(_, k)| f(k))
                .unwrap_or_else(|| panic!("{kinds:?}"))
        };
        let m = pos(&|k| {
            matches!(
                k,
                Completion::TagMatched {
                    data_valid: false,
                    ..
                }
            )
        });
        let d = pos(&|k| matches!(k, Completion::TagData { byte_len: 100_000 }));
        let fin = pos(&|k| matches!(k, Completion::Recv { byte_len: 32 }));
        assert!(m < d, "MATCH before DATA_VALID: {kinds:?}");
        assert_eq!(kinds[m].0, 21);
        assert_eq!(kinds[d].0, 21);
        assert_eq!(kinds[fin].0, 900);
        assert_eq!(&tagbuf.read()[..data.len()], &data[..]);
        let f = TagHeader::parse(&finbuf.read()).unwrap();
        assert_eq!(f.tmh.opcode, TmhOpcode::Fin);
        assert_eq!(f.tmh.tag, 0xaa);
        assert_eq!(f.rvh.unwrap().va, sendbuf.addr());

        // Too small a tagged buffer: RNDV_INCOMPLETE with TMH+RVH in it.
        let sge = [small.sge(0, 1024)];
        let mut add = [OpsWr::add(2, 22, &sge, 0xbb, !0).with_sync(0)];
        ops::<P>(&t.srq, &mut add);
        wait::<P>(&l.cq, 1, &[]);
        let req2 = TagHeader {
            tmh: Tmh {
                tag: 0xbb,
                ..req.tmh
            },
            ..req
        };
        req2.emit(&mut h).unwrap();
        hbuf.write(0, &h);
        send::<P>(&l.a, 8, hbuf.sge(0, 32));
        // mlx5 reports it in one of three forms (one or two CQEs); the
        // headers are there once DATA_VALID is seen.
        let inc = wait_tagged_done::<P>(&l.cq, 22);
        assert!(
            inc.iter().any(|w| w.status == WcStatus::TmRndvIncomplete),
            "{inc:?}"
        );
        assert!(inc.last().unwrap().flags.contains(WcFlags::TM_DATA_VALID));
        assert_eq!(TagHeader::parse(&small.read()).unwrap(), req2);
        let _ = TMH_LEN;
    }

    /// A region usable as the target of NIC atomics.
    fn atomic_target<P: Provider>(pd: &P::Pd, len: usize) -> Buf<P> {
        Buf::<P>::new(
            pd,
            len,
            AccessFlags::LOCAL_WRITE
                | AccessFlags::REMOTE_WRITE
                | AccessFlags::REMOTE_READ
                | AccessFlags::REMOTE_ATOMIC,
        )
    }

    /// Waits for one completion and checks it is a successful atomic.
    fn atomic_done<P: Provider>(l: &Loop<P>, wr_id: u64, opcode: WcOpcode) {
        let w = wait::<P>(&l.cq, 1, &[]);
        assert_eq!(
            (w[0].wr_id, w[0].opcode, w[0].status, w[0].byte_len),
            (wr_id, opcode, WcStatus::Success, 8),
            "{w:?}"
        );
    }

    /// Fetch-and-add and compare-and-swap: the old value (host order) in the
    /// local buffer, the new one in the target, neighbours untouched; the
    /// device reports atomics as HCA-level (`IBV_ATOMIC_HCA`).
    pub fn atomics_fetch_add_and_cmp_swap<P: Provider>(p: &P, dev: &str) {
        let (l, _) = setup::<P>(p, dev, None);
        let attr = l.ctx.query_device_ex().expect("query_device_ex");
        assert_eq!(attr.atomic_cap, AtomicCap::Hca, "{dev}");
        assert!(attr.max_qp_rd_atom >= 1);
        let target = atomic_target::<P>(&l.pd, 64);
        let result = Buf::<P>::rw(&l.pd, 64);
        let v0: u64 = 0x1122_3344_5566_7788;
        target.write(8, &v0.to_ne_bytes());
        let remote_addr = target.addr() + 8;
        let rkey = target.mr.rkey();

        let fa = |add| SendOpcode::AtomicFetchAdd {
            remote_addr,
            rkey,
            add,
        };
        post_atomic::<P>(&l.a, 1, result.sge(0, 8), fa(5)).expect("post fetch-add");
        atomic_done(&l, 1, WcOpcode::FetchAdd);
        assert_eq!(u64_at(&result.read(), 0), v0);
        assert_eq!(u64_at(&target.read(), 8), v0 + 5);

        // Wraps modulo 2^64: adding u64::MAX subtracts one.
        post_atomic::<P>(&l.b, 2, result.sge(8, 8), fa(u64::MAX)).expect("post fetch-add");
        atomic_done(&l, 2, WcOpcode::FetchAdd);
        assert_eq!(u64_at(&result.read(), 8), v0 + 5);
        assert_eq!(u64_at(&target.read(), 8), v0 + 4);

        // Compare fails: the value found comes back, memory unchanged.
        let cs = |compare, swap| SendOpcode::AtomicCmpSwap {
            remote_addr,
            rkey,
            compare,
            swap,
        };
        post_atomic::<P>(&l.a, 3, result.sge(16, 8), cs(v0, 7)).expect("post cmp-swap");
        atomic_done(&l, 3, WcOpcode::CompSwap);
        assert_eq!(u64_at(&result.read(), 16), v0 + 4);
        assert_eq!(u64_at(&target.read(), 8), v0 + 4);

        // Compare succeeds: swapped.
        post_atomic::<P>(&l.a, 4, result.sge(24, 8), cs(v0 + 4, 7)).expect("post cmp-swap");
        atomic_done(&l, 4, WcOpcode::CompSwap);
        assert_eq!(u64_at(&result.read(), 24), v0 + 4);
        assert_eq!(u64_at(&target.read(), 8), 7);

        let t = target.read();
        assert!(t[..8].iter().chain(&t[16..]).all(|b| *b == 0), "{t:?}");
    }

    /// Fetch-adds from two QPs interleaved on one counter: no update lost,
    /// every old value seen exactly once.
    pub fn atomics_from_two_qps_lose_no_update<P: Provider>(p: &P, dev: &str) {
        let (l, _) = setup::<P>(p, dev, None);
        let counter = atomic_target::<P>(&l.pd, 8);
        const ROUNDS: usize = 20;
        const BATCH: usize = 16;
        const ADD: u64 = 3;
        let results = Buf::<P>::rw(&l.pd, ROUNDS * BATCH * 2 * 8);
        let op = SendOpcode::AtomicFetchAdd {
            remote_addr: counter.addr(),
            rkey: counter.mr.rkey(),
            add: ADD,
        };
        let mut slot = 0usize;
        for _ in 0..ROUNDS {
            for _ in 0..BATCH {
                for qp in [&l.a, &l.b] {
                    post_atomic::<P>(qp, slot as u64, results.sge(slot * 8, 8), op)
                        .expect("post fetch-add");
                    slot += 1;
                }
            }
            let w = wait::<P>(&l.cq, 2 * BATCH, &[]);
            assert!(
                w.iter()
                    .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::FetchAdd),
                "{w:?}"
            );
        }
        let n = slot as u64;
        assert_eq!(u64_at(&counter.read(), 0), n * ADD);
        let r = results.read();
        let mut olds: Vec<u64> = (0..slot).map(|i| u64_at(&r, i * 8)).collect();
        olds.sort_unstable();
        let want: Vec<u64> = (0..n).map(|i| i * ADD).collect();
        assert_eq!(olds, want);
    }

    /// A remote address that is not 8-byte aligned: refused, target
    /// untouched. rdma-core's rxe refuses it at post time (`EINVAL`,
    /// asserted on `rxe*`); a NIC that does not check at post (the soft NIC,
    /// asserted; other devices may do either) fails it at the responder
    /// with an Invalid Request NAK: `RemInvReqErr`.
    pub fn atomic_misaligned_is_an_error<P: Provider>(p: &P, dev: &str) {
        for (what, opcode_of) in [("fetch-add", 0u8), ("cmp-swap", 1u8)] {
            let (l, _) = setup::<P>(p, dev, None);
            let target = atomic_target::<P>(&l.pd, 64);
            let result = Buf::<P>::rw(&l.pd, 8);
            let remote_addr = target.addr() + 12;
            let rkey = target.mr.rkey();
            let op = if opcode_of == 0 {
                SendOpcode::AtomicFetchAdd {
                    remote_addr,
                    rkey,
                    add: 1,
                }
            } else {
                SendOpcode::AtomicCmpSwap {
                    remote_addr,
                    rkey,
                    compare: 0,
                    swap: !0,
                }
            };
            let posted = post_atomic::<P>(&l.a, 5, result.sge(0, 8), op);
            if dev.starts_with("rxe") {
                assert!(posted.is_err(), "{what}: rxe refuses it at post time");
            }
            if is_soft() {
                assert!(
                    posted.is_ok(),
                    "{what}: the soft NIC fails it at the responder"
                );
            }
            match posted {
                Err(e) => assert_eq!(e.os_error(), Some(libc::EINVAL), "{what}: {e}"),
                Ok(()) => {
                    let w = wait::<P>(&l.cq, 1, &[]);
                    assert_eq!(w[0].wr_id, 5, "{what}");
                    assert_eq!(w[0].status, WcStatus::RemInvReqErr, "{what}: {w:?}");
                    if is_soft() {
                        assert!(
                            matches!(
                                w[0].kind(),
                                Completion::Error {
                                    status: WcStatus::RemInvReqErr,
                                    ..
                                }
                            ),
                            "{what}"
                        );
                    }
                }
            }
            assert!(
                target.read().iter().all(|b| *b == 0),
                "{what}: target touched"
            );
        }
    }

    /// Atomics on a region without `REMOTE_ATOMIC` (read/write granted),
    /// with a bad rkey, or past the region's end: `RemAccessErr`, target
    /// untouched. A fresh QP pair each (hardware moves the QP to error).
    pub fn atomic_without_remote_atomic_is_remote_access_error<P: Provider>(p: &P, dev: &str) {
        for case in 0..3 {
            let (l, _) = setup::<P>(p, dev, None);
            let plain = Buf::<P>::rw(&l.pd, 64);
            let target = atomic_target::<P>(&l.pd, 64);
            let result = Buf::<P>::rw(&l.pd, 8);
            let (remote_addr, rkey, what) = match case {
                0 => (plain.addr(), plain.mr.rkey(), "no REMOTE_ATOMIC"),
                1 => (target.addr(), target.mr.rkey() ^ 0x5a5a_0000, "bad rkey"),
                _ => (target.addr() + 64, target.mr.rkey(), "out of bounds"),
            };
            let op = SendOpcode::AtomicFetchAdd {
                remote_addr,
                rkey,
                add: 1,
            };
            post_atomic::<P>(&l.a, 6, result.sge(0, 8), op).expect("post");
            let w = wait::<P>(&l.cq, 1, &[]);
            assert_eq!(w[0].wr_id, 6, "{what}");
            assert_eq!(w[0].status, WcStatus::RemAccessErr, "{what}: {w:?}");
            assert!(
                plain.read().iter().all(|b| *b == 0),
                "{what}: region touched"
            );
            assert!(
                target.read().iter().all(|b| *b == 0),
                "{what}: region touched"
            );
        }
    }
}

/// Runs one suite function against the selected provider: the soft NIC
/// for `tmsoft0`, libibverbs (loaded at run time) for any other name.
macro_rules! conformance {
    ($($name:ident),* $(,)?) => {$(
        #[test]
        fn $name() {
            let dev = device_name();
            if is_soft() {
                suite::$name(&soft(), &dev);
            } else {
                let p = tmpi_verbs::ibv::IbvProvider::load()
                    .unwrap_or_else(|e| panic!("{DEVICE_ENV}={dev} needs libibverbs: {e}"));
                suite::$name(&p, &dev);
            }
        }
    )*};
}

conformance!(
    device_and_port,
    rc_send_recv,
    rdma_write_and_read,
    bad_rkey_remote_access_error,
    remote_access_error_fails_both_qps,
    srq_basic,
    tm_caps_and_srq,
    tm_eager_match_and_unexpected,
    tm_no_tag_and_del,
    tm_list_full_enomem,
    tm_rndv_offload,
    atomics_fetch_add_and_cmp_swap,
    atomics_from_two_qps_lose_no_update,
    atomic_misaligned_is_an_error,
    atomic_without_remote_atomic_is_remote_access_error,
);

// ---- soft NIC only ------------------------------------------------------------

#[test]
fn soft_cq_overrun_is_reported() {
    let p = soft();
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 2,
            with_tm_info: false,
        })
        .unwrap();
    let qa = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: true,
        })
        .unwrap();
    let la = local_addr::<tmpi_verbs::soft::SoftProvider>(&ctx, &qa);
    connect::<tmpi_verbs::soft::SoftProvider>(&qa, &la, &la);
    let b = Buf::<tmpi_verbs::soft::SoftProvider>::rw(&pd, 64);
    for i in 0..3 {
        recv::<tmpi_verbs::soft::SoftProvider>(&qa, 10 + i, b.sge(0, 64));
    }
    for i in 0..3 {
        send::<tmpi_verbs::soft::SoftProvider>(&qa, i, b.sge(0, 8));
    }
    let mut out = [WorkCompletion::default(); 8];
    let e = cq.poll(&mut out).expect_err("overrun must be reported");
    assert!(matches!(e, VerbsError::CqOverrun { capacity: 2 }), "{e}");
    assert!(cq.poll(&mut out).is_err(), "and stays reported");
}

/// A message longer than the receive buffer: the receive completes with
/// `LocLenErr`, the sender with the NAK's `RemInvReqErr` (the send
/// completes at the acknowledgement), and both QPs are in the error state,
/// as RC on hardware. A send from a bad lkey fails locally (`LocProtErr`).
#[test]
fn soft_recv_errors_loc_len_and_loc_prot() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let src = Buf::<S>::rw(&l.pd, 256);
    let dst = Buf::<S>::rw(&l.pd, 256);
    recv::<S>(&l.b, 1, dst.sge(0, 16));
    send::<S>(&l.a, 2, src.sge(0, 100));
    let w = wait::<S>(&l.cq, 2, &[]);
    let r = w.iter().find(|w| w.wr_id == 1).unwrap();
    assert_eq!(r.status, WcStatus::LocLenErr);
    let s = w.iter().find(|w| w.wr_id == 2).unwrap();
    assert_eq!(s.status, WcStatus::RemInvReqErr);
    assert_eq!((l.a.state(), l.b.state()), (QpState::Error, QpState::Error));
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let src = Buf::<S>::rw(&l.pd, 256);
    let bad = Sge {
        lkey: 0xdead_beef,
        ..src.sge(0, 8)
    };
    send::<S>(&l.a, 3, bad);
    let w = wait::<S>(&l.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (3, WcStatus::LocProtErr));
    // Send on a QP not in RTS is refused with EINVAL.
    let qp =
        l.pd.create_qp(&QpInitAttr {
            send_cq: &l.cq,
            recv_cq: &l.cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    // SAFETY: refused before touching memory.
    let e = unsafe {
        qp.post_send(&SendWr {
            wr_id: 1,
            sg_list: &[src.sge(0, 8)],
            opcode: SendOpcode::Send,
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap_err();
    assert_eq!(e.os_error(), Some(libc::EINVAL));
    let _ = &l.ctx;
}

/// A send without a receive buffer at the peer waits (RNR): neither it nor
/// anything else completes until a receive is posted; then the message
/// lands and the send completes (at the receiver's acknowledgement, as
/// RC sends do, not when the message left).
#[test]
fn soft_rnr_waits_for_a_buffer() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let src = Buf::<S>::rw(&l.pd, 64);
    let dst = Buf::<S>::rw(&l.pd, 64);
    src.write(0, b"early");
    send::<S>(&l.a, 1, src.sge(0, 5));
    expect_none::<S>(&l.cq, Duration::from_millis(20));
    recv::<S>(&l.b, 2, dst.sge(0, 64));
    let w = wait::<S>(&l.cq, 2, &[]);
    let s = w.iter().find(|c| c.wr_id == 1).expect("send completion");
    assert_eq!((s.opcode, s.status), (WcOpcode::Send, WcStatus::Success));
    let r = w.iter().find(|c| c.wr_id == 2).expect("receive completion");
    assert_eq!(r.byte_len, 5);
    assert_eq!(&dst.read()[..5], b"early");
}

/// §4 on the device: DEL held in the NIC while a message consumes the entry.
#[test]
fn soft_device_race_del_vs_match_tm_err() {
    type S = tmpi_verbs::soft::SoftProvider;
    let t = suite::tm_setup::<S>(&soft(), "tmsoft0", 16).unwrap();
    let l = &t.l;
    let tagbuf = Buf::<S>::rw(&l.pd, 256);
    let sge = [tagbuf.sge(0, 256)];
    let mut add = [OpsWr::add(1, 31, &sge, 9, !0).with_sync(0)];
    suite::ops::<S>(&t.srq, &mut add);
    wait::<S>(&l.cq, 1, &[]);
    t.srq.hold_ops(true);
    let mut del = [OpsWr::del(2, add[0].handle).with_sync(0)];
    suite::ops::<S>(&t.srq, &mut del);
    let src = Buf::<S>::rw(&l.pd, 64);
    let m = suite::tagged(9, 0, b"hit");
    src.write(0, &m);
    send::<S>(&l.a, 3, src.sge(0, m.len()));
    let w = wait::<S>(&l.cq, 2, &[]);
    assert!(w
        .iter()
        .any(|w| w.wr_id == 31 && w.flags.contains(WcFlags::TM_MATCH)));
    assert_eq!(t.srq.tm_snapshot().unwrap().queued_ops, 1);
    assert!(t.srq.release_op());
    let w = wait::<S>(&l.cq, 1, &[]);
    assert_eq!(w[0].kind(), Completion::TagDelConsumed);
    assert_eq!(&tagbuf.read()[..3], b"hit");
}

/// §4 on the device: an unexpected message sits in the CQ; an ADD with the
/// old count is flagged and a second message does not overtake the first.
#[test]
fn soft_device_race_unexpected_before_add_sync_req() {
    type S = tmpi_verbs::soft::SoftProvider;
    let t = suite::tm_setup::<S>(&soft(), "tmsoft0", 16).unwrap();
    let l = &t.l;
    let ub = Buf::<S>::rw(&l.pd, 1024);
    for i in 0..4 {
        // SAFETY: buffer outlives completions.
        unsafe {
            t.srq.post_srq_recv(&RecvWr {
                wr_id: 60 + i,
                sg_list: &[ub.sge(i as usize * 256, 256)],
            })
        }
        .unwrap();
    }
    let src = Buf::<S>::rw(&l.pd, 256);
    t.srq.hold_arrivals(true);
    let m1 = suite::tagged(4, 1, b"m1");
    src.write(0, &m1);
    send::<S>(&l.a, 1, src.sge(0, m1.len()));
    wait::<S>(&l.cq, 1, &[]); // send completion; m1 held in the NIC
    assert!(t.srq.release_arrival()); // m1 -> unexpected (not yet polled)
    let tagbuf = Buf::<S>::rw(&l.pd, 256);
    let sge = [tagbuf.sge(0, 256)];
    let mut add = [OpsWr::add(2, 41, &sge, 4, !0).with_sync(0)];
    suite::ops::<S>(&t.srq, &mut add);
    let m2 = suite::tagged(4, 2, b"m2");
    src.write(0, &m2);
    send::<S>(&l.a, 3, src.sge(0, m2.len()));
    t.srq.hold_arrivals(false);
    let w = wait::<S>(&l.cq, 4, &[]);
    let k: Vec<_> = w
        .iter()
        .filter(|w| w.opcode != WcOpcode::Send)
        .map(|w| (w.wr_id, w.kind()))
        .collect();
    assert_eq!(
        k,
        vec![
            (60, Completion::Unexpected { byte_len: 18 }),
            (2, Completion::TagAdded { sync_req: true }),
            (61, Completion::Unexpected { byte_len: 18 }),
        ]
    );
    let s = t.srq.tm_snapshot().unwrap();
    assert_eq!((s.hw_cnt, s.sw_cnt), (2, 0));
}

/// A small ring (8 KiB) wraps many times and applies flow control: far more
/// bytes are sent at once than the ring holds; all arrive, in order, intact.
#[test]
fn soft_ring_wraps_and_flow_control() {
    type S = tmpi_verbs::soft::SoftProvider;
    let p = S::new(tmpi_verbs::soft::SoftConfig {
        ring_size: 8192,
        ..Default::default()
    })
    .unwrap();
    let (l, _) = setup::<S>(&p, "tmsoft0", None);
    // Sends are limited by the ring (half of it, minus a record header),
    // not by the port's max_msg_sz.
    assert_eq!(l.ctx.query_port(1).unwrap().max_msg_sz, 1 << 30);
    let max = 4096 - 56;
    let n = 100usize;
    let src = Buf::<S>::rw(&l.pd, n * 4096);
    let dst = Buf::<S>::rw(&l.pd, n * 4096);
    let sizes: Vec<usize> = (0..n).map(|i| 1 + (i * 977) % max).collect();
    for i in 0..n {
        recv::<S>(&l.b, 1000 + i as u64, dst.sge(i * 4096, 4096));
    }
    for (i, sz) in sizes.iter().enumerate() {
        src.write(i * 4096, &pattern(i as u8, *sz));
        send::<S>(&l.a, i as u64, src.sge(i * 4096, *sz));
    }
    let wcs = wait::<S>(&l.cq, 2 * n, &[]);
    let recvs: Vec<_> = wcs.iter().filter(|w| w.opcode == WcOpcode::Recv).collect();
    assert_eq!(recvs.len(), n);
    for (i, w) in recvs.iter().enumerate() {
        assert_eq!(w.wr_id, 1000 + i as u64, "order");
        assert_eq!(w.byte_len as usize, sizes[i]);
        assert_eq!(
            &dst.read()[i * 4096..i * 4096 + sizes[i]],
            &pattern(i as u8, sizes[i])[..]
        );
    }
    // A message larger than the ring can carry is refused at post time.
    // SAFETY: refused before the NIC sees it.
    let e = unsafe {
        l.a.post_send(&SendWr {
            wr_id: 1,
            sg_list: &[src.sge(0, max + 1)],
            opcode: SendOpcode::Send,
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap_err();
    assert!(matches!(e, VerbsError::InvalidArgument(_)), "{e}");
}

#[test]
fn soft_gid_encodes_pid_and_instance() {
    let g = tmpi_verbs::soft::soft_gid(123_456, 7);
    assert_eq!(tmpi_verbs::soft::decode_soft_gid(&g), Some((123_456, 7)));
    assert_eq!(tmpi_verbs::soft::decode_soft_gid(&Gid([0xfe; 16])), None);
    let ctx = soft().open("tmsoft0").unwrap();
    let t = ctx.query_gid_table().unwrap();
    assert_eq!(
        tmpi_verbs::soft::decode_soft_gid(&t[0].gid).map(|x| x.0),
        Some(std::process::id())
    );
}

/// Sends the receiver has not acknowledged (no receive buffer: RNR) keep
/// their send queue entries: with `max_send_wr` 4, a fifth post is
/// `ENOMEM` until receives are posted and the four complete. (A model
/// that completed sends when they left would take any number.)
#[test]
fn soft_unacknowledged_sends_hold_the_send_queue() {
    type S = tmpi_verbs::soft::SoftProvider;
    if !is_soft() {
        return;
    }
    let cap = QpCap {
        max_send_wr: 4,
        ..QpCap::default()
    };
    let Loop { pd, cq, a, b, .. } = soft_pair(cap, 1, 1);
    let src = Buf::<S>::rw(&pd, 64);
    let dst = Buf::<S>::rw(&pd, 64 * 8);
    for i in 0..4 {
        send::<S>(&a, i, src.sge(0, 8));
    }
    expect_none::<S>(&cq, Duration::from_millis(20));
    // SAFETY: refused before touching memory.
    let e = unsafe {
        a.post_send(&SendWr {
            wr_id: 4,
            sg_list: &[src.sge(0, 8)],
            opcode: SendOpcode::Send,
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap_err();
    assert_eq!(e.os_error(), Some(libc::ENOMEM), "{e}");
    for i in 0..4u64 {
        recv::<S>(&b, 100 + i, dst.sge(i as usize * 64, 64));
    }
    let w = wait::<S>(&cq, 8, &[]);
    assert!(w.iter().all(|c| c.status == WcStatus::Success), "{w:?}");
    assert_eq!(w.iter().filter(|c| c.opcode == WcOpcode::Send).count(), 4);
    recv::<S>(&b, 104, dst.sge(0, 64));
    send::<S>(&a, 4, src.sge(0, 8));
    assert_eq!(wait::<S>(&cq, 2, &[]).len(), 2);
}

/// RNR stalls only the peer's request stream: while `a`'s send waits for a
/// receive buffer on `b` (uncompleted), `b`'s own RDMA read from `a` still
/// completes.
#[test]
fn soft_rnr_does_not_block_responses() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let abuf = Buf::<S>::rw(&l.pd, 4096);
    let bbuf = Buf::<S>::rw(&l.pd, 4096);
    abuf.write(0, b"waiting");
    abuf.write(1000, &pattern(3, 500));
    send::<S>(&l.a, 1, abuf.sge(0, 7));
    // SAFETY: `bbuf` outlives the completion.
    unsafe {
        l.b.post_send(&SendWr {
            wr_id: 2,
            sg_list: &[bbuf.sge(2000, 500)],
            opcode: SendOpcode::RdmaRead {
                remote_addr: abuf.addr() + 1000,
                rkey: abuf.mr.rkey(),
            },
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap();
    let w = wait::<S>(&l.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success));
    assert_eq!(&bbuf.read()[2000..2500], &pattern(3, 500)[..]);
    recv::<S>(&l.b, 3, bbuf.sge(0, 64));
    let w = wait::<S>(&l.cq, 2, &[]);
    let r = w.iter().find(|c| c.wr_id == 3).expect("receive completion");
    assert_eq!(r.byte_len, 7);
    assert!(w
        .iter()
        .any(|c| c.wr_id == 1 && c.status == WcStatus::Success));
    assert_eq!(&bbuf.read()[..7], b"waiting");
}

/// Inline sends read unregistered memory at post time (lkey ignored).
#[test]
fn soft_inline_send_from_unregistered_memory() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let dst = Buf::<S>::rw(&l.pd, 64);
    recv::<S>(&l.b, 1, dst.sge(0, 64));
    let mut stack = *b"inline bytes";
    let sge = Sge {
        addr: stack.as_mut_ptr() as u64,
        length: stack.len() as u32,
        lkey: 0,
    };
    // SAFETY: inline data is copied during the call; `stack` outlives it.
    unsafe {
        l.a.post_send(&SendWr {
            wr_id: 2,
            sg_list: &[sge],
            opcode: SendOpcode::Send,
            flags: SendFlags::SIGNALED | SendFlags::INLINE,
        })
    }
    .unwrap();
    stack.fill(0); // the NIC already has the bytes
    let w = wait::<S>(&l.cq, 2, &[]);
    assert!(w.iter().all(|w| w.status == WcStatus::Success));
    assert_eq!(&dst.read()[..12], b"inline bytes");
}

/// One context used from several threads at once (a btl progress thread and
/// the application): no deadlock, no lost or misrouted message.
#[test]
fn soft_threads_share_a_context() {
    type S = tmpi_verbs::soft::SoftProvider;
    let p = soft();
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    std::thread::scope(|sc| {
        for t in 0..3u8 {
            let (ctx, pd) = (&ctx, &pd);
            sc.spawn(move || {
                let cq = ctx
                    .create_cq_ex(&CqInitAttr {
                        cqe: 64,
                        with_tm_info: false,
                    })
                    .unwrap();
                let mk = || {
                    pd.create_qp(&QpInitAttr {
                        send_cq: &cq,
                        recv_cq: &cq,
                        srq: None,
                        cap: QpCap::default(),
                        sq_sig_all: false,
                    })
                    .unwrap()
                };
                let (a, b) = (mk(), mk());
                let (la, lb) = (local_addr::<S>(ctx, &a), local_addr::<S>(ctx, &b));
                connect::<S>(&a, &la, &lb);
                connect::<S>(&b, &lb, &la);
                let src = Buf::<S>::rw(pd, 64);
                let dst = Buf::<S>::rw(pd, 64);
                for i in 0..500u32 {
                    recv::<S>(&b, u64::from(i), dst.sge(0, 64));
                    src.write(0, &[t; 8]);
                    src.write(8, &i.to_le_bytes());
                    send::<S>(&a, u64::from(i), src.sge(0, 12));
                    let w = wait::<S>(&cq, 2, &[]);
                    let r = w.iter().find(|w| w.opcode == WcOpcode::Recv).unwrap();
                    assert_eq!(r.wr_id, u64::from(i));
                    let got = dst.read();
                    assert_eq!(&got[..8], &[t; 8], "thread {t}: foreign data");
                    assert_eq!(&got[8..12], &i.to_le_bytes());
                }
            });
        }
    });
}

#[test]
fn soft_registered_buffer_round_trip() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let acc = AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
    let mut src = RegisteredBuffer::<S>::new(&l.pd, 10_000, acc).unwrap();
    let dst = RegisteredBuffer::<S>::new(&l.pd, 10_000, acc).unwrap();
    assert_eq!(src.addr() % 4096, 0);
    assert!(src.sge(9_000, 1_001).is_err());
    assert!(RegisteredBuffer::<S>::new(&l.pd, 0, acc).is_err());
    src.as_mut_slice()[..5000].copy_from_slice(&pattern(8, 5000));
    recv::<S>(&l.b, 1, dst.sge(0, 10_000).unwrap());
    send::<S>(&l.a, 2, src.sge(0, 5000).unwrap());
    wait::<S>(&l.cq, 2, &[]);
    assert_eq!(&dst.as_slice()[..5000], &pattern(8, 5000)[..]);
    // Dropping the buffer deregisters it: its key no longer works.
    let rkey = dst.mr().rkey();
    let addr = dst.addr();
    drop(dst);
    // SAFETY: `src` outlives the completion.
    unsafe {
        l.a.post_send(&SendWr {
            wr_id: 3,
            sg_list: &[src.sge(0, 8).unwrap()],
            opcode: SendOpcode::RdmaWrite {
                remote_addr: addr,
                rkey,
            },
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap();
    let w = wait::<S>(&l.cq, 1, &[]);
    assert_eq!(w[0].status, WcStatus::RemAccessErr);
}

/// The advertised caps follow the configuration, and the TM-SRQ refuses
/// more than them; with `max_num_tags = 0` the soft NIC has no TM at all.
#[test]
fn soft_caps_follow_config() {
    type S = tmpi_verbs::soft::SoftProvider;
    use tmpi_verbs::soft::SoftConfig;
    let p = S::new(SoftConfig {
        max_num_tags: 16,
        max_ops: 4,
        max_rndv_hdr_size: 48,
        ..Default::default()
    })
    .unwrap();
    let ctx = p.open("tmsoft0").unwrap();
    let caps = ctx.query_device_ex().unwrap().tm_caps;
    assert_eq!(
        (caps.max_num_tags, caps.max_ops, caps.max_rndv_hdr_size),
        (16, 4, 48)
    );
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 8,
            with_tm_info: true,
        })
        .unwrap();
    let attr = |tags, ops| SrqAttr {
        max_wr: 64,
        max_sge: 1,
        tm: Some(SrqTmAttr {
            max_num_tags: tags,
            max_ops: ops,
        }),
    };
    assert!(pd.create_srq_ex(&attr(17, 4), Some(&cq)).is_err());
    assert!(pd.create_srq_ex(&attr(16, 5), Some(&cq)).is_err());
    assert!(
        pd.create_srq_ex(&attr(16, 4), None).is_err(),
        "a TM-SRQ needs a CQ"
    );
    assert!(pd.create_srq_ex(&attr(16, 4), Some(&cq)).is_ok());

    let none = S::new(SoftConfig {
        max_num_tags: 0,
        ..Default::default()
    })
    .unwrap();
    let ctx = none.open("tmsoft0").unwrap();
    assert!(!ctx.query_device_ex().unwrap().tm_caps.supported());
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 8,
            with_tm_info: false,
        })
        .unwrap();
    let e = pd.create_srq_ex(&attr(1, 1), Some(&cq)).unwrap_err();
    assert!(e.is_unsupported(), "{e}");
    // A basic SRQ refuses list operations.
    let srq = pd
        .create_srq_ex(
            &SrqAttr {
                max_wr: 8,
                max_sge: 1,
                tm: None,
            },
            None,
        )
        .unwrap();
    // SAFETY: refused before any buffer is used.
    let e = unsafe { srq.post_srq_ops(&mut [OpsWr::sync(1, 0)]) }.unwrap_err();
    assert!(e.is_unsupported(), "{e}");
}

/// An RC QP has exactly one peer: a second QP connecting to it is refused.
#[test]
fn soft_second_peer_is_refused() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let c =
        l.pd.create_qp(&QpInitAttr {
            send_cq: &l.cq,
            recv_cq: &l.cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let lc = local_addr::<S>(&l.ctx, &c);
    let lb = local_addr::<S>(&l.ctx, &l.b);
    c.modify_to_init(&QpInitTransition {
        port: 1,
        pkey_index: 0,
        access: AccessFlags::LOCAL_WRITE,
    })
    .unwrap();
    let e = c
        .modify_to_rtr(&QpRtrTransition {
            dest_qp_num: lb.qpn,
            dest: Destination::Gid {
                dgid: lb.gid,
                sgid_index: lc.gid_index,
                hop_limit: 1,
                traffic_class: 0,
                flow_label: 0,
            },
            sl: 0,
            port: 1,
            path_mtu: Mtu::Mtu1024,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
        })
        .unwrap_err();
    assert_eq!(e.os_error(), Some(libc::EBUSY), "{e}");
    // A LID address is not supported by the soft NIC.
    let e = c
        .modify_to_rtr(&QpRtrTransition {
            dest_qp_num: lb.qpn,
            dest: Destination::Lid(1),
            sl: 0,
            port: 1,
            path_mtu: Mtu::Mtu1024,
            rq_psn: 0,
            max_dest_rd_atomic: 1,
            min_rnr_timer: 12,
        })
        .unwrap_err();
    assert_eq!(e.os_error(), Some(libc::EINVAL));
}

/// The peer QP destroyed while an RDMA read is outstanding: the read
/// completes with `RetryExcErr` instead of waiting forever.
#[test]
fn soft_peer_qp_destroyed_is_an_error() {
    type S = tmpi_verbs::soft::SoftProvider;
    let (l, _) = setup::<S>(&soft(), "tmsoft0", None);
    let buf = Buf::<S>::rw(&l.pd, 64);
    let Loop {
        ctx: _ctx,
        pd: _pd,
        cq,
        a,
        b,
    } = l;
    drop(b);
    // SAFETY: `buf` outlives the completion.
    unsafe {
        a.post_send(&SendWr {
            wr_id: 1,
            sg_list: &[buf.sge(0, 64)],
            opcode: SendOpcode::RdmaRead {
                remote_addr: buf.addr(),
                rkey: buf.mr.rkey(),
            },
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap();
    let w = wait::<S>(&cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!(a.state(), QpState::Error);
}

// ---- soft NIC: atomics ------------------------------------------------------

/// Two QPs of one soft device; `a`'s responder resources (its
/// `max_dest_rd_atomic`) are `rd_a`, `b`'s are `rd_b`.
fn soft_pair_with_rd_atomic(rd_a: u8, rd_b: u8) -> Loop<tmpi_verbs::soft::SoftProvider> {
    soft_pair(QpCap::default(), rd_a, rd_b)
}

/// Two connected QPs of one soft device with queue sizes `cap`, responder
/// resources `rd_a` and `rd_b`, on one CQ.
fn soft_pair(cap: QpCap, rd_a: u8, rd_b: u8) -> Loop<tmpi_verbs::soft::SoftProvider> {
    type P = tmpi_verbs::soft::SoftProvider;
    let p = soft();
    let ctx = p.open(&device_name()).expect("open");
    let pd = ctx.alloc_pd().expect("alloc_pd");
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 64,
            with_tm_info: false,
        })
        .expect("cq");
    let mk = || {
        pd.create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap,
            sq_sig_all: false,
        })
        .expect("create_qp")
    };
    let (a, b) = (mk(), mk());
    let la = local_addr::<P>(&ctx, &a);
    let lb = local_addr::<P>(&ctx, &b);
    connect_with::<P>(&a, &la, &lb, rd_a);
    connect_with::<P>(&b, &lb, &la, rd_b);
    Loop { ctx, pd, cq, a, b }
}

/// A responder without resources for atomics (`max_dest_rd_atomic` 0)
/// answers an Invalid Request NAK (`RemInvReqErr`, as rxe's
/// `RESPST_ERR_TOO_MANY_RDMA_ATM_REQ`); memory untouched, both QPs in
/// error after it. The other direction, with resources, works (on a fresh
/// pair: the failed one stays failed).
#[test]
fn soft_atomic_without_responder_resources_is_rem_inv_req() {
    type P = tmpi_verbs::soft::SoftProvider;
    if !is_soft() {
        return;
    }
    // A pair (a: 1 responder resource, b: none), a counter and a result
    // buffer on it, a fetch-add of 1 on the counter.
    let fresh = || {
        let l = soft_pair_with_rd_atomic(1, 0);
        let target = Buf::<P>::new(
            &l.pd,
            8,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
        );
        let result = Buf::<P>::rw(&l.pd, 16);
        let op = SendOpcode::AtomicFetchAdd {
            remote_addr: target.addr(),
            rkey: target.mr.rkey(),
            add: 1,
        };
        (l, target, result, op)
    };
    let (l, target, result, op) = fresh();
    // a -> b: b has no responder resources.
    post_atomic::<P>(&l.a, 1, result.sge(0, 8), op).expect("post");
    let w = wait::<P>(&l.cq, 1, &[]);
    assert_eq!(
        (w[0].wr_id, w[0].status),
        (1, WcStatus::RemInvReqErr),
        "{w:?}"
    );
    assert_eq!(u64_at(&target.read(), 0), 0);
    assert_eq!((l.a.state(), l.b.state()), (QpState::Error, QpState::Error));
    // b -> a: a has one.
    let (l, target, result, op) = fresh();
    post_atomic::<P>(&l.b, 2, result.sge(8, 8), op).expect("post");
    let w = wait::<P>(&l.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (2, WcStatus::Success), "{w:?}");
    assert_eq!(u64_at(&target.read(), 0), 1);
}

/// The local buffer of an atomic is exactly 8 bytes (`EINVAL` at post, as
/// rdma-core's rxe) in a region with `LOCAL_WRITE` (`LocProtErr`).
#[test]
fn soft_atomic_local_buffer_is_8_writable_bytes() {
    type P = tmpi_verbs::soft::SoftProvider;
    if !is_soft() {
        return;
    }
    let l = soft_pair_with_rd_atomic(1, 1);
    let target = Buf::<P>::new(
        &l.pd,
        8,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    let result = Buf::<P>::rw(&l.pd, 16);
    let ro = Buf::<P>::new(&l.pd, 8, AccessFlags::REMOTE_READ);
    let op = SendOpcode::AtomicCmpSwap {
        remote_addr: target.addr(),
        rkey: target.mr.rkey(),
        compare: 0,
        swap: 9,
    };
    for len in [4usize, 16] {
        let e = post_atomic::<P>(&l.a, 1, result.sge(0, len), op).unwrap_err();
        assert_eq!(e.os_error(), Some(libc::EINVAL), "{len}: {e}");
    }
    post_atomic::<P>(&l.a, 2, ro.sge(0, 8), op).expect("post");
    let w = wait::<P>(&l.cq, 1, &[]);
    assert_eq!(
        (w[0].wr_id, w[0].status),
        (2, WcStatus::LocProtErr),
        "{w:?}"
    );
    assert_eq!(u64_at(&target.read(), 0), 0, "nothing executed");
}

/// `REMOTE_ATOMIC` without `LOCAL_WRITE` is refused at registration, as
/// libibverbs documents (ibv_reg_mr.3).
#[test]
fn soft_reg_mr_remote_atomic_needs_local_write() {
    if !is_soft() {
        return;
    }
    let ctx = soft().open(&device_name()).expect("open");
    let pd = ctx.alloc_pd().expect("pd");
    let mut mem = vec![0u8; 64];
    // SAFETY: `mem` outlives the (failed or dropped) registration.
    let r = unsafe { pd.reg_mr(mem.as_mut_ptr(), 64, AccessFlags::REMOTE_ATOMIC) };
    assert_eq!(r.err().and_then(|e| e.os_error()), Some(libc::EINVAL));
    // SAFETY: as above.
    let ok = unsafe {
        pd.reg_mr(
            mem.as_mut_ptr(),
            64,
            AccessFlags::REMOTE_ATOMIC | AccessFlags::LOCAL_WRITE,
        )
    };
    assert!(ok.is_ok());
}
