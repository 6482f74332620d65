//! The soft NIC across real processes: the test re-executes its own binary
//! as a child (the ignored test `child_entry`, run with `--ignored` and
//! `TMPI_VERBS_TEST_CHILD=<role>`), exchanges QP addresses over the
//! child's stdin/stdout, and bounds every wait with a timeout.

mod common;

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::*;
use tmpi_verbs::soft::SoftProvider;
use tmpi_verbs::wire::{Rvh, TagHeader, Tmh, TmhOpcode};
use tmpi_verbs::*;

type S = SoftProvider;

const ROLE_ENV: &str = "TMPI_VERBS_TEST_CHILD";
const CHILD_TIMEOUT: Duration = Duration::from_secs(60);

struct Peer {
    child: Child,
    stdin: ChildStdin,
    lines: mpsc::Receiver<String>,
}

impl Peer {
    fn spawn(role: &str) -> Peer {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "child_entry",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(ROLE_ENV, role)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("spawn child");
        let stdin = child.stdin.take().unwrap();
        let out = child.stdout.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for l in BufReader::new(out).lines().map_while(Result::ok) {
                if tx.send(l).is_err() {
                    break;
                }
            }
        });
        Peer {
            child,
            stdin,
            lines,
        }
    }

    /// The next protocol line from the child (`MSG ...`), skipping harness output.
    fn recv(&mut self) -> String {
        let deadline = Instant::now() + CHILD_TIMEOUT;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.lines.recv_timeout(left) {
                // The harness may print "test child_entry ... " on the same line.
                Ok(l) => {
                    if let Some(i) = l.find("MSG ") {
                        return l[i + 4..].to_string();
                    }
                }
                Err(_) => {
                    let _ = self.child.kill();
                    panic!("child sent nothing within {CHILD_TIMEOUT:?}");
                }
            }
        }
    }

    fn send(&mut self, m: &str) {
        writeln!(self.stdin, "MSG {m}").unwrap();
        self.stdin.flush().unwrap();
    }

    /// Waits for the child to exit successfully (kills it on timeout).
    fn finish(mut self) {
        let deadline = Instant::now() + CHILD_TIMEOUT;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "child failed: {st}");
                return;
            }
            if Instant::now() > deadline {
                let _ = self.child.kill();
                let _ = self.child.wait();
                panic!("child did not exit within {CHILD_TIMEOUT:?}");
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}

/// Child side of the protocol: lines on stdin/stdout.
fn child_send(m: &str) {
    println!("\nMSG {m}");
    std::io::stdout().flush().unwrap();
}

fn child_recv() -> String {
    let mut l = String::new();
    std::io::stdin().read_line(&mut l).unwrap();
    l.trim_end()
        .strip_prefix("MSG ")
        .expect("protocol line")
        .to_string()
}

struct Node {
    ctx: <S as Provider>::Context,
    pd: <S as Provider>::Pd,
    cq: <S as Provider>::Cq,
    qp: <S as Provider>::Qp,
    srq: Option<<S as Provider>::Srq>,
}

fn node(tm: bool) -> Node {
    node_with(tm, soft())
}

fn node_with(tm: bool, p: SoftProvider) -> Node {
    let ctx = p.open("tmsoft0").unwrap();
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&CqInitAttr {
            cqe: 1024,
            with_tm_info: tm,
        })
        .unwrap();
    let srq = tm.then(|| {
        pd.create_srq_ex(
            &SrqAttr {
                max_wr: 64,
                max_sge: 1,
                tm: Some(SrqTmAttr {
                    max_num_tags: 64,
                    max_ops: 16,
                }),
            },
            Some(&cq),
        )
        .unwrap()
    });
    let qp = pd
        .create_qp(&QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq: srq.as_ref(),
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    Node {
        ctx,
        pd,
        cq,
        qp,
        srq,
    }
}

fn shm_names_of(pid: u32) -> Vec<String> {
    std::fs::read_dir("/dev/shm")
        .map(|d| {
            d.filter_map(|e| e.ok())
                .map(|e| e.file_name().to_string_lossy().into_owned())
                .filter(|n| n.starts_with(&format!("tmpi-soft.{pid}.")))
                .collect()
        })
        .unwrap_or_default()
}

/// The child processes' entry point: ignored in normal runs (it is not a
/// test of its own); the parent tests run it with `--ignored`.
#[test]
#[ignore = "entry point of the child processes spawned by the other tests"]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return; // only a child process does anything here
    };
    match role.as_str() {
        "rc" => child_rc(),
        "rndv" => child_rndv(),
        "die" => child_die(),
        "stream" => child_stream(),
        "atomic" => child_atomic(),
        other => panic!("unknown role {other}"),
    }
}

/// Parent: RC send/recv, and serves the child's RDMA read/write on its own
/// memory, and rejects its bad-rkey write: both QPs go to the error state
/// (the parent's posted receive flushes, the child's later read and send
/// flush), as on hardware.
#[test]
fn multiproc_rc_send_recv_and_rdma() {
    let n = node(false);
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let mem = Buf::<S>::rw(&n.pd, 65536);
    mem.write(32768, &pattern(2, 32768));
    let inbox = Buf::<S>::rw(&n.pd, 256);
    let mut peer = Peer::spawn("rc");
    peer.send(&format!("{}|{}|{}", me.encode(), mem.addr(), mem.mr.rkey()));
    let child = Addr::decode(&peer.recv());
    connect::<S>(&n.qp, &me, &child);
    recv::<S>(&n.qp, 1, inbox.sge(0, 256));
    peer.send("connected");
    assert_eq!(peer.recv(), "ready");
    let out = Buf::<S>::rw(&n.pd, 256);
    out.write(0, b"hello from parent");
    send::<S>(&n.qp, 2, out.sge(0, 17));
    // Poll (serving the child's RDMA) until the bad-rkey write fails this
    // QP: the receive flushes.
    let wcs = wait::<S>(&n.cq, 2, &[]);
    let r = wcs.iter().find(|w| w.wr_id == 1).expect("receive flushed");
    assert_eq!(r.status, WcStatus::WrFlushErr, "{wcs:?}");
    assert_eq!(n.qp.state(), QpState::Error);
    assert_eq!(peer.recv(), "failed");
    let m = mem.read();
    assert_eq!(
        &m[..30000],
        &pattern(1, 30000)[..],
        "child's RDMA write landed"
    );
    assert!(
        m[30000..32768].iter().all(|b| *b == 0),
        "bad-rkey write touched nothing"
    );
    assert_eq!(&m[32768..], &pattern(2, 32768)[..]);
    let (pid, instance) = tmpi_verbs::soft::decode_soft_gid(&me.gid).unwrap();
    assert!(
        shm_names_of(pid)
            .iter()
            .all(|n| !n.starts_with(&format!("tmpi-soft.{pid}.{instance}."))),
        "ring segments are unlinked once connected"
    );
    peer.finish();
}

fn child_rc() {
    let n = node(false);
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let line = child_recv();
    let f: Vec<&str> = line.split('|').collect();
    let parent = Addr::decode(f[0]);
    let (va, rkey): (u64, u32) = (f[1].parse().unwrap(), f[2].parse().unwrap());
    let inbox = Buf::<S>::rw(&n.pd, 256);
    child_send(&me.encode());
    connect::<S>(&n.qp, &me, &parent);
    recv::<S>(&n.qp, 10, inbox.sge(0, 256));
    assert_eq!(child_recv(), "connected");
    child_send("ready");
    let w = wait::<S>(&n.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (10, WcStatus::Success));
    assert_eq!(&inbox.read()[..17], b"hello from parent");
    let buf = Buf::<S>::rw(&n.pd, 65536);
    buf.write(0, &pattern(1, 30000));
    let post = |wr_id, sge: Sge, op| {
        // SAFETY: `buf` outlives the completion waited for below.
        unsafe {
            n.qp.post_send(&SendWr {
                wr_id,
                sg_list: &[sge],
                opcode: op,
                flags: SendFlags::SIGNALED,
            })
        }
        .unwrap()
    };
    post(
        20,
        buf.sge(0, 30000),
        SendOpcode::RdmaWrite {
            remote_addr: va,
            rkey,
        },
    );
    let w = wait::<S>(&n.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (20, WcStatus::Success));
    post(
        21,
        buf.sge(32768, 32768),
        SendOpcode::RdmaRead {
            remote_addr: va + 32768,
            rkey,
        },
    );
    let w = wait::<S>(&n.cq, 1, &[]);
    assert_eq!(
        (w[0].wr_id, w[0].status, w[0].byte_len),
        (21, WcStatus::Success, 32768)
    );
    assert_eq!(&buf.read()[32768..], &pattern(2, 32768)[..]);
    post(
        22,
        buf.sge(0, 100),
        SendOpcode::RdmaWrite {
            remote_addr: va + 30000,
            rkey: rkey ^ 0x100,
        },
    );
    let w = wait::<S>(&n.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (22, WcStatus::RemAccessErr));
    assert_eq!(n.qp.state(), QpState::Error);
    // Work posted after the error is accepted and flushed.
    post(
        23,
        buf.sge(0, 100),
        SendOpcode::RdmaRead {
            remote_addr: va + 32768,
            rkey,
        },
    );
    buf.write(0, b"done");
    send::<S>(&n.qp, 24, buf.sge(0, 4));
    let w = wait::<S>(&n.cq, 2, &[]);
    assert_eq!(
        w.iter().map(|c| (c.wr_id, c.status)).collect::<Vec<_>>(),
        [(23, WcStatus::WrFlushErr), (24, WcStatus::WrFlushErr)]
    );
    child_send("failed");
    assert!(shm_names_of(std::process::id()).is_empty());
}

/// Parent: receiver with a TM-SRQ. The child's rendezvous request is matched
/// by the NIC, which reads the data from the child with the RVH's rkey, sends
/// the FIN and reports DATA_VALID; a later eager message is unexpected.
#[test]
fn multiproc_tm_rndv_offload() {
    let n = node(true);
    let srq = n.srq.as_ref().unwrap();
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let tagbuf = Buf::<S>::rw(&n.pd, 256 * 1024);
    let ub = Buf::<S>::rw(&n.pd, 4096);
    // SAFETY: the buffers outlive the completions waited for below.
    unsafe {
        srq.post_srq_recv(&RecvWr {
            wr_id: 5,
            sg_list: &[ub.sge(0, 4096)],
        })
        .unwrap();
        let sge = [tagbuf.sge(0, 256 * 1024)];
        let mut add = [OpsWr::add(1, 100, &sge, 0x77, !0).with_sync(0)];
        srq.post_srq_ops(&mut add).unwrap();
    }
    let w = wait::<S>(&n.cq, 1, &[]);
    assert_eq!(w[0].kind(), Completion::TagAdded { sync_req: false });
    let mut peer = Peer::spawn("rndv");
    peer.send(&me.encode());
    let child = Addr::decode(&peer.recv());
    connect::<S>(&n.qp, &me, &child);
    peer.send("go");
    let wcs = wait::<S>(&n.cq, 3, &[]);
    let k: Vec<_> = wcs.iter().map(|w| (w.wr_id, w.kind())).collect();
    assert!(
        matches!(
            k[0],
            (
                100,
                Completion::TagMatched {
                    data_valid: false,
                    info: TmInfo {
                        tag: 0x77,
                        priv_: 9
                    },
                    ..
                }
            )
        ),
        "{k:?}"
    );
    assert!(
        k.contains(&(5, Completion::Unexpected { byte_len: 20 })),
        "{k:?}"
    );
    let dv = k
        .iter()
        .position(|x| x == &(100, Completion::TagData { byte_len: 150_000 }));
    assert!(dv.is_some_and(|i| i > 0), "{k:?}");
    assert_eq!(&tagbuf.read()[..150_000], &pattern(4, 150_000)[..]);
    assert_eq!(&ub.read()[16..20], b"late");
    assert_eq!(srq.tm_snapshot().unwrap().hw_cnt, 1);
    peer.finish();
}

fn child_rndv() {
    let n = node(false);
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let parent = Addr::decode(&child_recv());
    connect::<S>(&n.qp, &me, &parent);
    let data = Buf::<S>::new(
        &n.pd,
        150_000,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ,
    );
    data.write(0, &pattern(4, 150_000));
    let fin = Buf::<S>::rw(&n.pd, 64);
    recv::<S>(&n.qp, 50, fin.sge(0, 64));
    child_send(&me.encode());
    assert_eq!(child_recv(), "go");
    let hdr = Buf::<S>::rw(&n.pd, 64);
    let req = TagHeader {
        tmh: Tmh {
            opcode: TmhOpcode::Rndv,
            app_ctx: 9,
            tag: 0x77,
        },
        rvh: Some(Rvh {
            va: data.addr(),
            rkey: data.mr.rkey(),
            len: 150_000,
        }),
    };
    let mut b = [0u8; 32];
    req.emit(&mut b).unwrap();
    hdr.write(0, &b);
    send::<S>(&n.qp, 51, hdr.sge(0, 32));
    let eager = Buf::<S>::rw(&n.pd, 64);
    let mut e = Tmh {
        opcode: TmhOpcode::Eager,
        app_ctx: 1,
        tag: 0x78,
    }
    .to_bytes()
    .to_vec();
    e.extend_from_slice(b"late");
    eager.write(0, &e);
    send::<S>(&n.qp, 52, eager.sge(0, e.len()));
    // Polling serves the receiver NIC's RDMA read; then the FIN arrives.
    let wcs = wait::<S>(&n.cq, 3, &[]);
    let f = wcs.iter().find(|w| w.wr_id == 50).expect("FIN received");
    assert_eq!(f.byte_len, 32);
    let h = TagHeader::parse(&fin.read()).unwrap();
    assert_eq!(h.tmh.opcode, TmhOpcode::Fin);
    assert_eq!(h.tmh.tag, 0x77);
    assert_eq!(h.rvh.unwrap().va, data.addr());
}

/// A peer that vanishes: outstanding RDMA completes with `RetryExcErr`
/// instead of hanging, and its leftover ring segment is swept by the next
/// device opened on the host.
#[test]
fn multiproc_peer_death_is_an_error_not_a_hang() {
    let n = node(false);
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let mut peer = Peer::spawn("die");
    peer.send(&me.encode());
    let line = peer.recv();
    let f: Vec<&str> = line.split('|').collect();
    let child = Addr::decode(f[0]);
    let (va, rkey): (u64, u32) = (f[1].parse().unwrap(), f[2].parse().unwrap());
    let child_pid: u32 = f[3].parse().unwrap();
    connect::<S>(&n.qp, &me, &child);
    peer.send("die");
    peer.finish();
    assert!(
        !shm_names_of(child_pid).is_empty(),
        "the dead child left its ring behind"
    );
    let buf = Buf::<S>::rw(&n.pd, 4096);
    // SAFETY: `buf` outlives the completion.
    unsafe {
        n.qp.post_send(&SendWr {
            wr_id: 1,
            sg_list: &[buf.sge(0, 4096)],
            opcode: SendOpcode::RdmaRead {
                remote_addr: va,
                rkey,
            },
            flags: SendFlags::SIGNALED,
        })
    }
    .unwrap();
    let w = wait::<S>(&n.cq, 1, &[]);
    assert_eq!((w[0].wr_id, w[0].status), (1, WcStatus::RetryExcErr));
    assert_eq!(n.qp.state(), QpState::Error);
    let _other = soft().open("tmsoft0").unwrap();
    assert!(shm_names_of(child_pid).is_empty(), "stale segment swept");
}

fn child_die() {
    let n = node(false);
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let parent = Addr::decode(&child_recv());
    connect::<S>(&n.qp, &me, &parent);
    let mem = Buf::<S>::rw(&n.pd, 4096);
    child_send(&format!(
        "{}|{}|{}|{}",
        me.encode(),
        mem.addr(),
        mem.mr.rkey(),
        std::process::id()
    ));
    assert_eq!(child_recv(), "die");
    // Vanish without cleaning up, like a crashed process.
    std::process::exit(0);
}

const STREAM_MSGS: usize = 3000;

fn small_ring() -> SoftProvider {
    SoftProvider::new(tmpi_verbs::soft::SoftConfig {
        ring_size: 16 * 1024,
        ..Default::default()
    })
    .unwrap()
}

fn stream_size(i: usize) -> usize {
    1 + (i * 2654435761) % 7000
}

/// Thousands of messages of varied sizes through a 16 KiB ring between two
/// processes, with the receiver keeping only 8 buffers posted: wrap-around,
/// flow control and RNR across processes; every byte and the order checked.
#[test]
fn multiproc_stream_through_small_ring() {
    let n = node_with(false, small_ring());
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let mut peer = Peer::spawn("stream");
    peer.send(&me.encode());
    let child = Addr::decode(&peer.recv());
    connect::<S>(&n.qp, &me, &child);
    const SLOTS: usize = 8;
    let bufs = Buf::<S>::rw(&n.pd, SLOTS * 8192);
    for s in 0..SLOTS {
        recv::<S>(&n.qp, s as u64, bufs.sge(s * 8192, 8192));
    }
    peer.send("go");
    for i in 0..STREAM_MSGS {
        let w = wait::<S>(&n.cq, 1, &[]);
        let slot = w[0].wr_id as usize;
        assert_eq!(slot, i % SLOTS, "message {i} out of order");
        assert_eq!(w[0].status, WcStatus::Success);
        let sz = stream_size(i);
        assert_eq!(w[0].byte_len as usize, sz, "message {i}");
        let got = bufs.read();
        assert_eq!(
            &got[slot * 8192..slot * 8192 + sz],
            &pattern(i as u8, sz)[..],
            "message {i}"
        );
        recv::<S>(&n.qp, slot as u64, bufs.sge(slot * 8192, 8192));
    }
    peer.finish();
}

fn child_stream() {
    let n = node_with(false, small_ring());
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let parent = Addr::decode(&child_recv());
    connect::<S>(&n.qp, &me, &parent);
    child_send(&me.encode());
    assert_eq!(child_recv(), "go");
    const WINDOW: usize = 64;
    let src = Buf::<S>::rw(&n.pd, WINDOW * 8192);
    let mut done = 0usize;
    for i in 0..STREAM_MSGS {
        if i >= WINDOW + done {
            wait::<S>(&n.cq, 1, &[]);
            done += 1;
        }
        let slot = i % WINDOW;
        let sz = stream_size(i);
        src.write(slot * 8192, &pattern(i as u8, sz));
        send::<S>(&n.qp, i as u64, src.sge(slot * 8192, sz));
    }
    while done < STREAM_MSGS {
        wait::<S>(&n.cq, 1, &[]);
        done += 1;
    }
}

/// Fetch-adds each child process issues.
const ATOMICS_PER_CHILD: u64 = 600;

/// Parent: one counter, fetch-added concurrently by two child processes
/// through two QPs (the parent's NIC executes them, as the target's HCA
/// would): no update lost, every old value handed out exactly once.
#[test]
fn multiproc_concurrent_atomics_on_one_counter() {
    let n = node(false);
    let qp2 =
        n.pd.create_qp(&QpInitAttr {
            send_cq: &n.cq,
            recv_cq: &n.cq,
            srq: None,
            cap: QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap();
    let counter = Buf::<S>::new(
        &n.pd,
        8,
        AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_ATOMIC,
    );
    let inbox = Buf::<S>::rw(&n.pd, 64);
    let mut peers = Vec::new();
    for (i, qp) in [&n.qp, &qp2].into_iter().enumerate() {
        let me = local_addr::<S>(&n.ctx, qp);
        let mut peer = Peer::spawn("atomic");
        peer.send(&format!(
            "{}|{}|{}",
            me.encode(),
            counter.addr(),
            counter.mr.rkey()
        ));
        let child = Addr::decode(&peer.recv());
        connect::<S>(qp, &me, &child);
        recv::<S>(qp, i as u64, inbox.sge(i * 32, 32));
        peers.push(peer);
    }
    for p in &mut peers {
        p.send("go");
    }
    // Serve both children's atomics until both said "done".
    let w = wait::<S>(&n.cq, 2, &[]);
    assert!(w.iter().all(|w| w.status == WcStatus::Success), "{w:?}");
    let mut olds = Vec::new();
    for mut p in peers {
        let line = p.recv();
        olds.extend(line.split(',').map(|v| v.parse::<u64>().unwrap()));
        p.finish();
    }
    let total = 2 * ATOMICS_PER_CHILD;
    assert_eq!(u64_at(&counter.read(), 0), total, "an update was lost");
    olds.sort_unstable();
    assert_eq!(olds, (0..total).collect::<Vec<_>>());
}

fn child_atomic() {
    let n = node(false);
    let me = local_addr::<S>(&n.ctx, &n.qp);
    let line = child_recv();
    let f: Vec<&str> = line.split('|').collect();
    let parent = Addr::decode(f[0]);
    let (va, rkey): (u64, u32) = (f[1].parse().unwrap(), f[2].parse().unwrap());
    child_send(&me.encode());
    connect::<S>(&n.qp, &me, &parent);
    assert_eq!(child_recv(), "go");
    const BATCH: u64 = 32;
    let results = Buf::<S>::rw(&n.pd, (ATOMICS_PER_CHILD * 8) as usize);
    let op = SendOpcode::AtomicFetchAdd {
        remote_addr: va,
        rkey,
        add: 1,
    };
    let mut i = 0;
    while i < ATOMICS_PER_CHILD {
        let k = BATCH.min(ATOMICS_PER_CHILD - i);
        for j in i..i + k {
            post_atomic::<S>(&n.qp, j, results.sge(j as usize * 8, 8), op).unwrap();
        }
        let w = wait::<S>(&n.cq, k as usize, &[]);
        assert!(
            w.iter()
                .all(|w| w.status == WcStatus::Success && w.opcode == WcOpcode::FetchAdd),
            "{w:?}"
        );
        i += k;
    }
    let r = results.read();
    let olds: Vec<String> = (0..ATOMICS_PER_CHILD as usize)
        .map(|j| u64_at(&r, j * 8).to_string())
        .collect();
    let out = Buf::<S>::rw(&n.pd, 8);
    out.write(0, b"done");
    send::<S>(&n.qp, 1 << 40, out.sge(0, 4));
    wait::<S>(&n.cq, 1, &[]);
    child_send(&olds.join(","));
}
