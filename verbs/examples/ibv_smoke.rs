//! Smoke test of the libibverbs provider against a real device (rxe0 in the
//! CI VM, see ci/rxe/): two RC QPs in one process doing send/recv, RDMA write,
//! RDMA read, a read with a bad rkey (must fail with a remote access error),
//! an SRQ, and the tag-matching capability / TM-SRQ check.
//!
//! Usage: `ibv_smoke [DEVICE]` (default `$TMPI_VERBS_TEST_DEVICE`, else the
//! first device). Exits non-zero on the first failed check.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tmpi_verbs::ibv::{
    self, Access, Completion, CompletionQueue, ConnectParams, Context, IbvError, LinkLayer,
    ProtectionDomain, QpCaps, QueuePair, RecvRequest, SendOp, SendRequest, TmOp, TmOpKind, WcOp,
    WcStatus,
};

type R<T> = Result<T, Box<dyn std::error::Error>>;

fn main() {
    match run() {
        Ok(()) => println!("ibv_smoke: all checks passed"),
        Err(e) => {
            eprintln!("ibv_smoke: FAILED: {e}");
            let mut s = e.source();
            while let Some(c) = s {
                eprintln!("  caused by: {c}");
                s = c.source();
            }
            std::process::exit(1);
        }
    }
}

fn check(cond: bool, what: &str) -> R<()> {
    if cond {
        println!("ok   {what}");
        Ok(())
    } else {
        Err(format!("check failed: {what}").into())
    }
}

/// Polls `cq` until `n` completions arrived or 10 s passed.
fn wait(cq: &CompletionQueue, n: usize) -> R<Vec<Completion>> {
    let mut out = Vec::new();
    let t0 = Instant::now();
    while out.len() < n {
        let room = n - out.len();
        cq.poll(&mut out, room)?;
        if t0.elapsed() > Duration::from_secs(10) {
            return Err(format!("timeout: {} of {n} completions: {out:?}", out.len()).into());
        }
        std::thread::yield_now();
    }
    Ok(out)
}

struct Pair {
    a: QueuePair,
    b: QueuePair,
}

fn connect_pair(
    pd: &Arc<ProtectionDomain>,
    cq: &Arc<CompletionQueue>,
    b_srq: Option<&Arc<ibv::SharedReceiveQueue>>,
    params: &ConnectParams,
) -> R<Pair> {
    let caps = QpCaps {
        max_send_wr: 16,
        max_recv_wr: 16,
        max_send_sge: 2,
        max_inline_data: 64,
        ..Default::default()
    };
    let a = pd.create_rc_qp(cq, cq, None, caps)?;
    let b = pd.create_rc_qp(cq, cq, b_srq, caps)?;
    let pa = ConnectParams {
        psn: 0x1234,
        ..*params
    };
    let pb = ConnectParams {
        psn: 0x5678,
        ..*params
    };
    let ea = a.local_endpoint(&pa)?;
    let eb = b.local_endpoint(&pb)?;
    a.connect(&eb, &pa, Access::ALL_RDMA)?;
    b.connect(&ea, &pb, Access::ALL_RDMA)?;
    Ok(Pair { a, b })
}

fn run() -> R<()> {
    let want = std::env::args()
        .nth(1)
        .or_else(|| std::env::var("TMPI_VERBS_TEST_DEVICE").ok());

    // Device list with TM caps (what tmpi_info prints).
    let devs = ibv::list_devices_with_caps()?;
    for d in &devs {
        println!("{d}");
        println!("  {:?}", d.attr);
    }
    check(!devs.is_empty(), "at least one RDMA device listed")?;

    let ctx = Context::open(want.as_deref())?;
    let attr = ctx.query_device_ex()?;
    println!(
        "using {} fw {} tm_caps {:?}",
        ctx.name(),
        attr.fw_ver,
        attr.tm_caps
    );
    if ctx.name().starts_with("rxe") {
        check(
            !attr.tm_caps.supported() && attr.tm_caps.max_num_tags == 0,
            "rxe reports no tag matching (max_num_tags == 0)",
        )?;
    }
    let port = ctx.query_port(1)?;
    println!("port 1: {port:?}");
    let gids = ctx.gid_table(1)?;
    for g in &gids {
        println!("  gid[{}] {} {:?}", g.index, g.gid, g.gid_type);
    }
    let gid_index = match port.link_layer {
        LinkLayer::Ethernet => {
            let e = ctx
                .preferred_gid_index(1)?
                .ok_or("RoCE port without a usable GID")?;
            println!("RoCE: using GID index {} ({})", e.index, e.gid);
            Some(u8::try_from(e.index)?)
        }
        _ => None,
    };
    let params = ConnectParams {
        port: 1,
        gid_index,
        mtu: port.active_mtu,
        ..Default::default()
    };

    let pd = ctx.alloc_pd()?;
    let cq = ctx.create_cq(256, false)?;
    let pair = connect_pair(&pd, &cq, None, &params)?;
    check(
        pair.a.state() == ibv::QpState::Rts && pair.b.state() == ibv::QpState::Rts,
        "both QPs reach RTS",
    )?;
    check(
        pair.a.query_state()? == ibv::QpState::Rts,
        "the device reports RTS too (ibv_query_qp)",
    )?;

    let mut src = pd.alloc_mr(4096, Access::ALL_RDMA)?;
    let dst = pd.alloc_mr(4096, Access::ALL_RDMA)?;

    // --- send / recv
    let msg = b"hello from tmpi over real verbs";
    src.as_mut_slice()[..msg.len()].copy_from_slice(msg);
    // SAFETY: dst/src stay registered and untouched until the completions below.
    unsafe {
        pair.b.post_recv(&[RecvRequest {
            wr_id: 10,
            sges: &[dst.sge(0, 4096)?],
        }])?;
        pair.a.post_send(&[SendRequest {
            wr_id: 11,
            op: SendOp::Send,
            sges: &[src.sge(0, msg.len())?],
            signaled: true,
            inline: false,
        }])?;
    }
    let c = wait(&cq, 2)?;
    let recv = c
        .iter()
        .find(|c| c.wr_id == 10)
        .ok_or("no recv completion")?;
    let send = c
        .iter()
        .find(|c| c.wr_id == 11)
        .ok_or("no send completion")?;
    check(
        send.is_ok() && send.op == Some(WcOp::Send),
        "send completes",
    )?;
    check(
        recv.is_ok()
            && recv.op
                == Some(WcOp::Recv {
                    byte_len: msg.len() as u32,
                    imm: None,
                })
            && recv.qp_num == pair.b.qpn(),
        "recv completes with byte_len and qp_num",
    )?;
    check(
        &dst.as_slice()[..msg.len()] == msg,
        "received bytes equal sent bytes",
    )?;

    // --- send with immediate
    // SAFETY: as above.
    unsafe {
        pair.b.post_recv(&[RecvRequest {
            wr_id: 12,
            sges: &[dst.sge(0, 4096)?],
        }])?;
        pair.a.post_send(&[SendRequest {
            wr_id: 13,
            op: SendOp::SendWithImm(0xdead_beef),
            sges: &[src.sge(0, 8)?],
            signaled: true,
            inline: false,
        }])?;
    }
    let c = wait(&cq, 2)?;
    let recv = c
        .iter()
        .find(|c| c.wr_id == 12)
        .ok_or("no recv completion")?;
    check(
        recv.op
            == Some(WcOp::Recv {
                byte_len: 8,
                imm: Some(0xdead_beef),
            }),
        "send-with-immediate delivers the immediate",
    )?;

    // --- send with a TMH, inline (safe API: bytes copied at post time)
    let tmh = tmpi_verbs::wire::Tmh {
        opcode: tmpi_verbs::wire::TmhOpcode::Eager,
        app_ctx: 0x0102_0304,
        tag: 0x1122_3344_5566_7788,
    };
    let tmh_bytes = tmh.to_bytes();
    check(pair.a.caps().max_inline_data >= 32, "QP grants inline data")?;
    // SAFETY: dst stays registered and untouched until the completion below.
    unsafe {
        pair.b.post_recv(&[RecvRequest {
            wr_id: 14,
            sges: &[dst.sge(0, 4096)?],
        }])?;
    }
    pair.a.send_inline(15, &[&tmh_bytes, b"eager!"], true)?;
    let c = wait(&cq, 2)?;
    let recv = c
        .iter()
        .find(|c| c.wr_id == 14)
        .ok_or("no recv completion")?;
    check(
        recv.op
            == Some(WcOp::Recv {
                byte_len: 22,
                imm: None,
            }),
        "inline TMH send arrives whole (16 + 6 bytes)",
    )?;
    check(
        tmpi_verbs::wire::Tmh::parse(dst.as_slice())? == tmh
            && &dst.as_slice()[16..22] == b"eager!",
        "TMH and payload intact on the wire",
    )?;
    check(
        matches!(
            pair.a.send_inline(16, &[&[0u8; 65]], true),
            Err(IbvError::InvalidArgument(_))
        ),
        "inline send above max_inline_data is refused",
    )?;

    // --- RDMA write: a writes src[0..4096] pattern into b's dst
    for (i, b) in src.as_mut_slice().iter_mut().enumerate() {
        *b = (i * 7 + 3) as u8;
    }
    // SAFETY: as above.
    unsafe {
        pair.a.post_send(&[SendRequest {
            wr_id: 20,
            op: SendOp::RdmaWrite {
                remote_addr: dst.addr(),
                rkey: dst.rkey(),
            },
            sges: &[src.sge(0, 4096)?],
            signaled: true,
            inline: false,
        }])?;
    }
    let c = wait(&cq, 1)?;
    check(
        c[0].wr_id == 20 && c[0].is_ok() && c[0].op == Some(WcOp::RdmaWrite),
        "RDMA write completes",
    )?;
    check(
        dst.as_slice() == src.as_slice(),
        "RDMA write placed every byte",
    )?;

    // --- RDMA read: a reads b's region into a fresh local buffer
    let rd = pd.alloc_mr(4096, Access::LOCAL_WRITE)?;
    // SAFETY: as above.
    unsafe {
        pair.a.post_send(&[SendRequest {
            wr_id: 30,
            op: SendOp::RdmaRead {
                remote_addr: dst.addr() + 100,
                rkey: dst.rkey(),
            },
            sges: &[rd.sge(0, 1000)?],
            signaled: true,
            inline: false,
        }])?;
    }
    let c = wait(&cq, 1)?;
    check(
        c[0].wr_id == 30 && c[0].is_ok() && c[0].op == Some(WcOp::RdmaRead),
        "RDMA read completes",
    )?;
    check(
        rd.as_slice()[..1000] == dst.as_slice()[100..1100],
        "RDMA read fetched the remote bytes",
    )?;

    // --- SRQ: b2 receives through a basic SRQ
    let srq = pd.create_srq(64, 1)?;
    let (max_wr, _, _) = srq.query()?;
    check(max_wr >= 64, "SRQ has at least the requested depth")?;
    let pair2 = connect_pair(&pd, &cq, Some(&srq), &params)?;
    let srq_buf = pd.alloc_mr(4 * 256, Access::LOCAL_WRITE)?;
    let sges: Vec<_> = (0..4)
        .map(|i| srq_buf.sge(i * 256, 256))
        .collect::<Result<_, _>>()?;
    let reqs: Vec<_> = sges
        .iter()
        .enumerate()
        .map(|(i, s)| RecvRequest {
            wr_id: 100 + i as u64,
            sges: std::slice::from_ref(s),
        })
        .collect();
    // SAFETY: srq_buf/src stay registered and untouched until the completions.
    unsafe {
        srq.post_recv(&reqs)?;
        check(
            matches!(
                pair2.b.post_recv(&reqs[..1]),
                Err(IbvError::InvalidArgument(_))
            ),
            "post_recv on an SRQ-attached QP is refused",
        )?;
        for i in 0..3u64 {
            pair2.a.post_send(&[SendRequest {
                wr_id: 200 + i,
                op: SendOp::Send,
                sges: &[src.sge(i as usize * 10, 10 + i as usize)?],
                signaled: true,
                inline: false,
            }])?;
        }
    }
    let c = wait(&cq, 6)?;
    let mut recvs: Vec<_> = c
        .iter()
        .filter(|c| c.wr_id >= 100 && c.wr_id < 200)
        .collect();
    recvs.sort_by_key(|c| c.wr_id);
    check(recvs.len() == 3, "three SRQ receives completed")?;
    for (i, r) in recvs.iter().enumerate() {
        check(
            r.is_ok()
                && r.op
                    == Some(WcOp::Recv {
                        byte_len: 10 + i as u32,
                        imm: None,
                    })
                && r.qp_num == pair2.b.qpn(),
            &format!("SRQ receive {i} in posting order, right length and QP"),
        )?;
        let off = (r.wr_id - 100) as usize * 256;
        check(
            srq_buf.as_slice()[off..off + 10 + i] == src.as_slice()[i * 10..i * 10 + 10 + i],
            &format!("SRQ receive {i} bytes"),
        )?;
    }

    // --- tag-list operations on a basic SRQ are refused before reaching the NIC
    let mut op = [TmOp {
        wr_id: 1,
        kind: TmOpKind::Sync,
        signaled: true,
        unexpected_cnt: Some(0),
        handle: 0,
    }];
    // SAFETY: no buffer involved.
    let r = unsafe { srq.post_ops(&mut op) };
    check(
        matches!(r, Err(IbvError::InvalidArgument(_))),
        "post_ops on a basic SRQ is refused",
    )?;

    // --- TM SRQ: must fail (not silently become basic) where TM is absent
    if !attr.tm_caps.supported() {
        let tm_cq = ctx.create_cq(64, true);
        println!("create_cq_ex(WITH_TM_INFO): {tm_cq:?}");
        let tm_srq = match &tm_cq {
            Ok(cq) => pd.create_tm_srq(cq, 64, 1, 64, 16).map(|_| ()),
            Err(_) => pd.create_tm_srq(&cq, 64, 1, 64, 16).map(|_| ()),
        };
        println!("create_srq_ex(IBV_SRQT_TM): {tm_srq:?}");
        check(
            tm_srq.is_err(),
            "TM SRQ creation fails on a device without TM",
        )?;
    }

    // --- bad rkey: RDMA read with a wrong rkey -> remote access error
    // SAFETY: as above.
    unsafe {
        pair.a.post_send(&[SendRequest {
            wr_id: 40,
            op: SendOp::RdmaRead {
                remote_addr: dst.addr(),
                rkey: dst.rkey() ^ 0x5a5a_0000,
            },
            sges: &[rd.sge(0, 64)?],
            signaled: true,
            inline: false,
        }])?;
    }
    let c = wait(&cq, 1)?;
    println!("bad-rkey completion: {:?}", c[0]);
    check(
        c[0].wr_id == 40 && c[0].status == WcStatus::RemoteAccess && c[0].op.is_none(),
        "RDMA read with a bad rkey completes with IBV_WC_REM_ACCESS_ERR",
    )?;
    check(
        pair.a.query_state()? == ibv::QpState::Error,
        "the device moved the requester QP to the error state (ibv_query_qp)",
    )?;
    // The requester QP is now in error: further work flushes.
    // SAFETY: as above.
    unsafe {
        let r = pair.a.post_send(&[SendRequest {
            wr_id: 41,
            op: SendOp::Send,
            sges: &[src.sge(0, 8)?],
            signaled: true,
            inline: false,
        }]);
        if r.is_ok() {
            let c = wait(&cq, 1)?;
            check(
                c[0].wr_id == 41 && c[0].status == WcStatus::WrFlush,
                "work after the error flushes",
            )?;
        } else {
            println!("post after error refused: {r:?}");
        }
    }

    // Tear down in an arbitrary order: parents are kept alive by children.
    drop(ctx);
    drop(pd);
    drop(cq);
    drop(pair2);
    drop(srq);
    drop(pair);
    println!("teardown done");
    Ok(())
}
