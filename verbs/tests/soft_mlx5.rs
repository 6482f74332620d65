//! The soft NIC as a device against mlx5's behaviour (rdma-core
//! `providers/mlx5/{cq,qp,verbs}.c`; UCX where mlx5 is silent): device
//! limits and TM-SRQ creation, path MTU and `max_msg_sz`, the two-CQE forms
//! of eager and rendezvous as seen through `poll`, CQ overflow by TM
//! completions, asynchronous list operations. The TM model's own tests are
//! in `tm_mlx5_model.rs`; `docs/verbs.md` ("Conformance of the soft NIC to
//! mlx5") maps each behaviour to its source and test.

mod common;

use std::time::Duration;

use common::*;
use tmpi_verbs::soft::tm::SwRndvForm;
use tmpi_verbs::soft::{SoftConfig, SoftProvider, SoftSrq, TM_MIN_UNTAGGED};
use tmpi_verbs::wire::{Rvh, TagHeader, Tmh, TmhOpcode};
use tmpi_verbs::*;

type S = SoftProvider;

fn provider(cfg: SoftConfig) -> S {
    S::new(cfg).expect("valid soft config")
}

fn einval(r: Result<impl std::fmt::Debug, VerbsError>) {
    let e = r.expect_err("must be refused");
    assert_eq!(e.os_error(), Some(libc::EINVAL), "{e}");
}

fn tm_attr(max_wr: u32, tags: u32, ops: u32) -> SrqAttr {
    SrqAttr {
        max_wr,
        max_sge: 1,
        tm: Some(SrqTmAttr {
            max_num_tags: tags,
            max_ops: ops,
        }),
    }
}

/// QP `a` (plain, its own CQ) connected to QP `b` on a TM-SRQ whose CQ is
/// `cq` (also `b`'s send and receive CQ).
struct TmLoop {
    _ctx: <S as Provider>::Context,
    pd: <S as Provider>::Pd,
    cq: <S as Provider>::Cq,
    a_cq: <S as Provider>::Cq,
    a: <S as Provider>::Qp,
    b: <S as Provider>::Qp,
    srq: SoftSrq,
}

fn tm_loop(p: &S, cqe: u32) -> TmLoop {
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let mk_cq = |cqe| {
        ctx.create_cq_ex(&CqInitAttr {
            cqe,
            with_tm_info: true,
        })
        .unwrap()
    };
    let cq = mk_cq(cqe);
    let a_cq = mk_cq(256);
    let srq = pd
        .create_srq_ex(&tm_attr(64, 16, 16), Some(&cq))
        .expect("TM-SRQ");
    let mk = |c: &<S as Provider>::Cq, srq: Option<&SoftSrq>| {
        pd.create_qp(&QpInitAttr {
            send_cq: c,
            recv_cq: c,
            srq,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap()
    };
    let a = mk(&a_cq, None);
    let b = mk(&cq, Some(&srq));
    let (la, lb) = (local_addr::<S>(&ctx, &a), local_addr::<S>(&ctx, &b));
    connect::<S>(&a, &la, &lb);
    connect::<S>(&b, &lb, &la);
    TmLoop {
        _ctx: ctx,
        pd,
        cq,
        a_cq,
        a,
        b,
        srq,
    }
}

fn post_ops(srq: &SoftSrq, ops: &mut [OpsWr<'_>]) {
    // SAFETY: tagged buffers outlive their completions (tests wait).
    unsafe { srq.post_srq_ops(ops) }.expect("post_srq_ops");
}

fn add(t: &TmLoop, buf: &Buf<S>, len: usize, recv_wr_id: u64, tag: u64) -> u32 {
    add_synced(t, buf, len, recv_wr_id, tag, 0)
}

/// A signaled ADD carrying software's unexpected count `sync`.
fn add_synced(t: &TmLoop, buf: &Buf<S>, len: usize, recv_wr_id: u64, tag: u64, sync: u32) -> u32 {
    let sge = [buf.sge(0, len)];
    let mut op = [OpsWr::add(recv_wr_id + 1000, recv_wr_id, &sge, tag, !0).with_sync(sync)];
    post_ops(&t.srq, &mut op);
    let w = wait::<S>(&t.cq, 1, &[]);
    assert_eq!(w[0].opcode, WcOpcode::TmAdd);
    op[0].handle
}

fn post_untagged(t: &TmLoop, buf: &Buf<S>, n: usize, len: usize) {
    for i in 0..n {
        // SAFETY: the buffer outlives the test's completions.
        unsafe {
            t.srq.post_srq_recv(&RecvWr {
                wr_id: 50_000 + i as u64,
                sg_list: &[buf.sge(i * len, len)],
            })
        }
        .unwrap();
    }
}

fn eager_msg(tag: u64, app: u32, payload: &[u8]) -> Vec<u8> {
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

/// Sends `msg` from `a` and waits for its send completion.
fn send_msg(t: &TmLoop, src: &Buf<S>, msg: &[u8]) {
    src.write(0, msg);
    send::<S>(&t.a, 1, src.sge(0, msg.len()));
    let w = wait::<S>(&t.a_cq, 1, &[]);
    assert_eq!(w[0].status, WcStatus::Success);
}

/// One poll of the TM CQ with room for many completions.
fn poll_once(cq: &<S as Provider>::Cq) -> Vec<WorkCompletion> {
    let mut buf = [WorkCompletion::default(); 64];
    let n = cq.poll(&mut buf).expect("poll");
    buf[..n].to_vec()
}

/// Polls until a completion arrives; returns that poll's completions.
fn next_poll(cq: &<S as Provider>::Cq) -> Vec<WorkCompletion> {
    let start = std::time::Instant::now();
    loop {
        let v = poll_once(cq);
        if !v.is_empty() {
            return v;
        }
        assert!(start.elapsed() < TIMEOUT, "timed out");
        std::thread::yield_now();
    }
}

fn assert_no_packet_match(wc: &WorkCompletion, wr_id: u64, tag: u64, app: u32) {
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (wr_id, WcOpcode::TmRecv, WcStatus::Success)
    );
    assert_eq!(wc.flags, WcFlags::TM_MATCH);
    assert_eq!(wc.tm_info, Some(TmInfo { tag, priv_: app }));
    assert_eq!((wc.byte_len, wc.qp_num, wc.src_qp), (0, 0, 0));
}

fn rndv_req(tag: u64, src: &Buf<S>, len: u32) -> Vec<u8> {
    let h = TagHeader {
        tmh: Tmh {
            opcode: TmhOpcode::Rndv,
            app_ctx: 3,
            tag,
        },
        rvh: Some(Rvh {
            va: src.addr(),
            rkey: src.mr.rkey(),
            len,
        }),
    };
    let mut b = vec![0u8; 32];
    h.emit(&mut b).unwrap();
    b
}

// ---- device limits ------------------------------------------------------------------

/// mlx5 reports `max_ops == max_qp_wr`, yet its command QP (rdma-core
/// `verbs.c`: `create_cmd_qp`, `mlx5_calc_sq_size`) needs
/// `roundup_pow2(4 * max_ops)` send-queue blocks: asking for the advertised
/// `max_ops` is `EINVAL`; a quarter of `max_qp_wr` is the most that works.
#[test]
fn soft_tm_srq_command_qp_must_fit_max_qp_wr() {
    for max_qp_wr in [32_768u32, 1024] {
        let p = provider(SoftConfig {
            max_qp_wr,
            max_ops: max_qp_wr,
            ..SoftConfig::default()
        });
        let ctx = p.open("tmsoft0").unwrap();
        let attr = ctx.query_device_ex().unwrap();
        assert_eq!(attr.max_qp_wr, max_qp_wr);
        assert_eq!(attr.tm_caps.max_ops, max_qp_wr, "mlx5 reports max_qp_wr");
        let pd = ctx.alloc_pd().unwrap();
        let cq = ctx
            .create_cq_ex(&CqInitAttr {
                cqe: 64,
                with_tm_info: true,
            })
            .unwrap();
        einval(pd.create_srq_ex(&tm_attr(64, 16, max_qp_wr), Some(&cq)));
        einval(pd.create_srq_ex(&tm_attr(64, 16, max_qp_wr / 4 + 1), Some(&cq)));
        assert!(pd
            .create_srq_ex(&tm_attr(64, 16, max_qp_wr / 4), Some(&cq))
            .is_ok());
    }
    assert_eq!(SoftConfig::default().max_ops, 32_768);
}

/// Requests beyond `tm_caps` are `EINVAL`.
#[test]
fn soft_tm_srq_beyond_caps_is_einval() {
    let p = provider(SoftConfig {
        max_num_tags: 16,
        max_ops: 8,
        ..SoftConfig::default()
    });
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 64,
            with_tm_info: true,
        })
        .unwrap();
    einval(pd.create_srq_ex(&tm_attr(64, 17, 8), Some(&cq)));
    einval(pd.create_srq_ex(&tm_attr(64, 16, 9), Some(&cq)));
    assert!(pd.create_srq_ex(&tm_attr(64, 16, 8), Some(&cq)).is_ok());
}

/// UCX's rule (`UCT_IB_MLX5_XRQ_MIN_UWQ_POST = 33`): a TM-SRQ holds at least
/// 33 untagged buffers; the soft NIC refuses a smaller one.
#[test]
fn soft_tm_srq_needs_33_untagged_buffers() {
    assert_eq!(TM_MIN_UNTAGGED, 33);
    let p = provider(SoftConfig::default());
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 64,
            with_tm_info: true,
        })
        .unwrap();
    einval(pd.create_srq_ex(&tm_attr(32, 16, 16), Some(&cq)));
    assert!(pd.create_srq_ex(&tm_attr(33, 16, 16), Some(&cq)).is_ok());
}

/// No QP with more send work requests than `max_qp_wr`.
#[test]
fn soft_qp_send_queue_bounded_by_max_qp_wr() {
    let p = provider(SoftConfig {
        max_qp_wr: 256,
        max_ops: 64,
        ..SoftConfig::default()
    });
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 64,
            with_tm_info: false,
        })
        .unwrap();
    let qp = |n| {
        pd.create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: None,
            cap: QpCap {
                max_send_wr: n,
                ..QpCap::default()
            },
            sq_sig_all: false,
        })
    };
    einval(qp(257));
    assert!(qp(256).is_ok());
}

/// The port reports the configured MTU and `max_msg_sz` (1 GiB, mlx5's).
#[test]
fn soft_port_reports_mtu_and_max_msg_sz() {
    let port = provider(SoftConfig::default())
        .open("tmsoft0")
        .unwrap()
        .query_port(1)
        .unwrap();
    assert_eq!((port.active_mtu, port.max_msg_sz), (Mtu::Mtu1024, 1 << 30));
    let port = provider(SoftConfig {
        mtu: Mtu::Mtu4096,
        max_msg_sz: 1 << 20,
        ..SoftConfig::default()
    })
    .open("tmsoft0")
    .unwrap()
    .query_port(1)
    .unwrap();
    assert_eq!((port.active_mtu, port.max_msg_sz), (Mtu::Mtu4096, 1 << 20));
}

/// RDMA reads and writes longer than `max_msg_sz` fail with `LocLenErr`
/// and move the QP to the error state (a fresh QP pair each).
#[test]
fn soft_rdma_longer_than_max_msg_sz_is_loc_len_err() {
    let p = provider(SoftConfig {
        max_msg_sz: 4096,
        ..SoftConfig::default()
    });
    for (read, len, want) in [
        (true, 4097, WcStatus::LocLenErr),
        (false, 4097, WcStatus::LocLenErr),
        (true, 4096, WcStatus::Success),
    ] {
        let t = tm_loop(&p, 256);
        let local = Buf::<S>::rw(&t.pd, 8192);
        let remote = Buf::<S>::rw(&t.pd, 8192);
        let opcode = if read {
            SendOpcode::RdmaRead {
                remote_addr: remote.addr(),
                rkey: remote.mr.rkey(),
            }
        } else {
            SendOpcode::RdmaWrite {
                remote_addr: remote.addr(),
                rkey: remote.mr.rkey(),
            }
        };
        // SAFETY: the buffers outlive the completion waited for below.
        unsafe {
            t.a.post_send(&SendWr {
                wr_id: 5,
                sg_list: &[local.sge(0, len)],
                opcode,
                flags: SendFlags::SIGNALED,
            })
        }
        .unwrap();
        let w = wait::<S>(&t.a_cq, 1, &[&t.cq]);
        assert_eq!(w[0].status, want, "read={read} len={len}");
        let state = if want == WcStatus::Success {
            QpState::Rts
        } else {
            QpState::Error
        };
        assert_eq!(t.a.state(), state, "read={read} len={len}");
    }
}

// ---- eager through the device --------------------------------------------------------

/// A matched eager message longer than the MTU: the poll that returns the
/// `MATCH` CQE (QP number 0, no data yet) does not return `DATA_VALID`; the
/// data lands before that second CQE, which names the QP but carries no tag
/// information. A single-packet message still takes one CQE.
#[test]
fn soft_multi_packet_eager_two_cqes_through_poll() {
    let p = provider(SoftConfig::default());
    let t = tm_loop(&p, 256);
    let src = Buf::<S>::rw(&t.pd, 8192);
    let small = Buf::<S>::rw(&t.pd, 4096);
    add(&t, &small, 4096, 1, 0x10);
    send_msg(&t, &src, &eager_msg(0x10, 4, &pattern(1, 1008)));
    let w = next_poll(&t.cq);
    assert_eq!(w.len(), 1);
    assert_eq!(w[0].flags, WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID);
    assert_eq!((w[0].byte_len, w[0].qp_num), (1008, t.b.qp_num()));

    let big = Buf::<S>::rw(&t.pd, 4096);
    add(&t, &big, 4096, 2, 0x11);
    let payload = pattern(2, 3000);
    send_msg(&t, &src, &eager_msg(0x11, 5, &payload));
    let first = next_poll(&t.cq);
    assert_eq!(
        first.len(),
        1,
        "the data CQE is not in the same poll: {first:?}"
    );
    assert_no_packet_match(&first[0], 2, 0x11, 5);
    assert!(
        big.read().iter().all(|b| *b == 0),
        "no data before DATA_VALID"
    );
    let second = next_poll(&t.cq);
    let wc = second[0];
    assert_eq!(
        (wc.wr_id, wc.opcode, wc.status),
        (2, WcOpcode::TmRecv, WcStatus::Success)
    );
    assert_eq!(wc.flags, WcFlags::TM_DATA_VALID);
    assert_eq!(
        (wc.byte_len, wc.tm_info, wc.qp_num),
        (3000, None, t.b.qp_num())
    );
    assert_eq!(&big.read()[..3000], &payload[..]);
}

/// The data CQE is delayed behind messages that arrive after the match, and
/// `hold_data` keeps it back until `release_data`.
#[test]
fn soft_data_cqe_delayed_behind_later_messages() {
    let p = provider(SoftConfig::default());
    let t = tm_loop(&p, 256);
    let src = Buf::<S>::rw(&t.pd, 8192);
    let ubuf = Buf::<S>::rw(&t.pd, 64 * 4096);
    post_untagged(&t, &ubuf, 64, 4096);
    let big = Buf::<S>::rw(&t.pd, 4096);
    add(&t, &big, 4096, 2, 0x11);
    send_msg(&t, &src, &eager_msg(0x11, 5, &pattern(2, 3000)));
    let first = next_poll(&t.cq);
    assert_eq!(first[0].flags, WcFlags::TM_MATCH);
    // An unexpected message arrives before the next poll: it comes first.
    send_msg(&t, &src, &eager_msg(0x99, 0, b"later"));
    let w = wait::<S>(&t.cq, 2, &[]);
    assert_eq!(
        w.iter().map(|w| (w.wr_id, w.flags)).collect::<Vec<_>>(),
        vec![(50_000, WcFlags::empty()), (2, WcFlags::TM_DATA_VALID)]
    );

    add_synced(&t, &big, 4096, 3, 0x12, 1); // one unexpected message so far
    t.srq.hold_data(true);
    send_msg(&t, &src, &eager_msg(0x12, 6, &pattern(3, 2000)));
    let first = next_poll(&t.cq);
    assert_no_packet_match(&first[0], 3, 0x12, 6);
    for i in 0..3 {
        send_msg(&t, &src, &eager_msg(0x99, 0, b"x"));
        let w = wait::<S>(&t.cq, 1, &[]);
        assert_eq!(w[0].wr_id, 50_001 + i);
    }
    expect_none::<S>(&t.cq, Duration::from_millis(10));
    assert_eq!(t.srq.deferred_data(), 1);
    assert!(t.srq.release_data());
    let w = wait::<S>(&t.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].byte_len), (3, 2000));
    assert_eq!(&big.read()[..2000], &pattern(3, 2000)[..]);
}

// ---- rendezvous through the device ---------------------------------------------------

/// NIC rendezvous: `MATCH` with QP number 0, the read, FIN to the sender,
/// `DATA_VALID` with the length and no tag information.
#[test]
fn soft_nic_rndv_match_has_no_qp_and_data_has_no_tag_info() {
    let p = provider(SoftConfig::default());
    let t = tm_loop(&p, 256);
    let data = pattern(9, 50_000);
    let sbuf = Buf::<S>::rw(&t.pd, data.len());
    sbuf.write(0, &data);
    let fin = Buf::<S>::rw(&t.pd, 64);
    recv::<S>(&t.a, 900, fin.sge(0, 64));
    let tb = Buf::<S>::rw(&t.pd, 64 * 1024);
    add(&t, &tb, 64 * 1024, 1, 0xaa);
    let hb = Buf::<S>::rw(&t.pd, 64);
    send_msg(&t, &hb, &rndv_req(0xaa, &sbuf, data.len() as u32));
    let w = wait::<S>(&t.cq, 2, &[&t.a_cq]);
    assert_no_packet_match(&w[0], 1, 0xaa, 3);
    let wc = w[1];
    assert_eq!(
        (wc.wr_id, wc.status, wc.flags),
        (1, WcStatus::Success, WcFlags::TM_DATA_VALID)
    );
    assert_eq!((wc.byte_len, wc.tm_info), (50_000, None));
    assert_eq!(&tb.read()[..data.len()], &data[..]);
    let f = wait::<S>(&t.a_cq, 1, &[&t.cq]);
    assert_eq!((f[0].wr_id, f[0].byte_len), (900, 32), "FIN");
}

/// RVH len above `max_msg_sz` (into a buffer big enough): the tag is
/// consumed, the data CQE fails with `LocLenErr`, nothing is read, no FIN.
#[test]
fn soft_nic_rndv_beyond_max_msg_sz_fails_without_fin() {
    let p = provider(SoftConfig {
        max_msg_sz: 4096,
        ..SoftConfig::default()
    });
    let t = tm_loop(&p, 256);
    let sbuf = Buf::<S>::rw(&t.pd, 8192);
    sbuf.write(0, &pattern(1, 8192));
    let fin = Buf::<S>::rw(&t.pd, 64);
    recv::<S>(&t.a, 900, fin.sge(0, 64));
    let tb = Buf::<S>::rw(&t.pd, 8192);
    add(&t, &tb, 8192, 1, 0xaa);
    let hb = Buf::<S>::rw(&t.pd, 64);
    send_msg(&t, &hb, &rndv_req(0xaa, &sbuf, 5000));
    let w = wait::<S>(&t.cq, 2, &[&t.a_cq]);
    assert_no_packet_match(&w[0], 1, 0xaa, 3);
    assert_eq!(
        (w[1].wr_id, w[1].status, w[1].tm_info),
        (1, WcStatus::LocLenErr, None)
    );
    assert!(tb.read().iter().all(|b| *b == 0), "nothing read");
    expect_none::<S>(&t.a_cq, Duration::from_millis(20));
    assert!(t.srq.tm_snapshot().unwrap().entries.is_empty());
}

/// A failed NIC read (injected: the sender refuses it as for a bad rkey):
/// the data CQE carries the error and QP number 0; no FIN: the sender's QP
/// went to the error state with its NAK, so the receive it posted for the
/// FIN flushes.
#[test]
fn soft_nic_rndv_failed_read_has_no_qp_and_no_fin() {
    let p = provider(SoftConfig {
        inject: Some(tmpi_verbs::soft::Inject { read: true, n: 1 }),
        ..SoftConfig::default()
    });
    let t = tm_loop(&p, 256);
    let sbuf = Buf::<S>::rw(&t.pd, 4096);
    let fin = Buf::<S>::rw(&t.pd, 64);
    recv::<S>(&t.a, 900, fin.sge(0, 64));
    let tb = Buf::<S>::rw(&t.pd, 4096);
    add(&t, &tb, 4096, 1, 0xaa);
    let hb = Buf::<S>::rw(&t.pd, 64);
    send_msg(&t, &hb, &rndv_req(0xaa, &sbuf, 2000));
    let w = wait::<S>(&t.cq, 2, &[&t.a_cq]);
    assert_no_packet_match(&w[0], 1, 0xaa, 3);
    assert_eq!(
        (w[1].status, w[1].qp_num, w[1].tm_info),
        (WcStatus::RemAccessErr, 0, None)
    );
    let w = wait::<S>(&t.a_cq, 1, &[&t.cq]);
    assert_eq!((w[0].wr_id, w[0].status), (900, WcStatus::WrFlushErr));
    assert_eq!(t.a.state(), QpState::Error);
}

/// Software rendezvous (RVH len > tagged buffer) in each of mlx5's three
/// forms, as polled: TMH+RVH are in the buffer once `DATA_VALID` is seen
/// and not before.
#[test]
fn soft_sw_rndv_forms_through_poll() {
    let (m, d) = (WcFlags::TM_MATCH, WcFlags::TM_DATA_VALID);
    for form in [
        SwRndvForm::Single,
        SwRndvForm::MatchFirst,
        SwRndvForm::Cancel,
    ] {
        let p = provider(SoftConfig {
            sw_rndv_form: form,
            ..SoftConfig::default()
        });
        let t = tm_loop(&p, 256);
        let sbuf = Buf::<S>::rw(&t.pd, 4096);
        let tb = Buf::<S>::rw(&t.pd, 64);
        add(&t, &tb, 64, 1, 0xbb);
        let hb = Buf::<S>::rw(&t.pd, 64);
        let req = rndv_req(0xbb, &sbuf, 4096);
        send_msg(&t, &hb, &req);
        let first = next_poll(&t.cq);
        assert_eq!(first.len(), 1, "{form:?}: {first:?}");
        let f = first[0];
        assert_eq!(f.wr_id, 1);
        let info = Some(TmInfo {
            tag: 0xbb,
            priv_: 3,
        });
        if form == SwRndvForm::Single {
            assert_eq!(
                (f.opcode, f.status, f.flags),
                (WcOpcode::TmRecv, WcStatus::TmRndvIncomplete, m | d)
            );
            assert_eq!((f.byte_len, f.tm_info, f.qp_num), (32, info, t.b.qp_num()));
            assert_eq!(&tb.read()[..32], &req[..]);
            expect_none::<S>(&t.cq, Duration::from_millis(10));
            continue;
        }
        assert!(
            tb.read().iter().all(|b| *b == 0),
            "{form:?}: headers before DATA_VALID"
        );
        let second = next_poll(&t.cq)[0];
        assert_eq!(
            (second.wr_id, second.byte_len, second.tm_info),
            (1, 32, None)
        );
        assert_eq!(&tb.read()[..32], &req[..]);
        if form == SwRndvForm::MatchFirst {
            assert_eq!(
                (f.opcode, f.status, f.flags),
                (WcOpcode::TmRecv, WcStatus::TmRndvIncomplete, m)
            );
            assert_eq!((f.tm_info, f.qp_num), (info, t.b.qp_num()));
            assert_eq!(
                (second.opcode, second.status, second.flags),
                (WcOpcode::TmRecv, WcStatus::Success, d)
            );
        } else {
            assert_no_packet_match(&f, 1, 0xbb, 3);
            assert_eq!(
                (second.opcode, second.status, second.flags),
                (WcOpcode::Recv, WcStatus::TmRndvIncomplete, m | d)
            );
        }
    }
}

// ---- list operations and the CQ -------------------------------------------------------

/// List operations never execute inside `post_srq_ops`: the operation is
/// queued, and its completion comes from a later poll.
#[test]
fn soft_list_ops_are_asynchronous() {
    let p = provider(SoftConfig::default());
    let t = tm_loop(&p, 256);
    let tb = Buf::<S>::rw(&t.pd, 64);
    let sge = [tb.sge(0, 64)];
    let mut op = [OpsWr::add(1, 2, &sge, 5, !0).with_sync(0)];
    post_ops(&t.srq, &mut op);
    let s = t.srq.tm_snapshot().unwrap();
    assert_eq!(
        (s.queued_ops, s.entries.len()),
        (1, 0),
        "not executed by the post"
    );
    let w = wait::<S>(&t.cq, 1, &[]);
    assert_eq!(w[0].opcode, WcOpcode::TmAdd);
    assert_eq!(t.srq.tm_snapshot().unwrap().entries.len(), 1);
}

/// An ADD past the `max_num_tags` the SRQ was created with is `ENOMEM`,
/// although the device advertises more.
#[test]
fn soft_add_past_created_max_num_tags_is_enomem() {
    let p = provider(SoftConfig::default());
    let t = tm_loop(&p, 256); // created with 16 tags; the device has 1024
    let tb = Buf::<S>::rw(&t.pd, 64);
    let sge = [tb.sge(0, 64)];
    for i in 0..16 {
        let mut op = [OpsWr::add(i, i, &sge, i, !0)];
        post_ops(&t.srq, &mut op);
    }
    let mut op = [OpsWr::add(99, 99, &sge, 99, !0)];
    // SAFETY: refused before the buffer is used.
    let e = unsafe { t.srq.post_srq_ops(&mut op) }.unwrap_err();
    assert_eq!(e.os_error(), Some(libc::ENOMEM), "{e}");
}

/// TM completions count against the CQ's capacity like any other: a TM
/// CQ that overflows reports `CqOverrun` on every later poll.
#[test]
fn soft_tm_completions_overrun_the_cq() {
    let p = provider(SoftConfig::default());
    let t = tm_loop(&p, 4);
    let tb = Buf::<S>::rw(&t.pd, 64);
    let sge = [tb.sge(0, 64)];
    let mut ops: Vec<OpsWr<'_>> = (0..5).map(|i| OpsWr::add(i, i, &sge, i, !0)).collect();
    post_ops(&t.srq, &mut ops);
    let mut out = [WorkCompletion::default(); 8];
    let e =
        t.cq.poll(&mut out)
            .expect_err("5 ADD completions in a 4-entry CQ");
    assert!(matches!(e, VerbsError::CqOverrun { capacity: 4 }), "{e}");
    assert!(t.cq.poll(&mut out).is_err(), "and stays reported");
}
