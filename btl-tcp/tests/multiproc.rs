//! The tcp BTL between real processes over real sockets (loopback): data
//! integrity and per-peer order with simultaneous connects and
//! back-pressure, outsiders rejected without harm to the job, a killed peer
//! turning into errors instead of a hang, interface selection.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_btl::testing::{child_context, run_ranks, FileModex};
use tmpi_btl::{BtlError, BtlModule};
use tmpi_btl_tcp::auth::Transcript;
use tmpi_btl_tcp::wire::{self, Endpoint, Handshake, HsKind, HS_LEN, NONCE_LEN, SECRET_LEN};
use tmpi_btl_tcp::{TcpConfig, TcpModule, MODEX_ADDR_KEY, MODEX_SECRET_KEY};

const TAG: u8 = 0x41;

fn open(ctx_info: &ProcessInfo, modex: &mut FileModex) -> TcpModule {
    let reg = Registry::new(Sources::from_process());
    let cfg = TcpConfig::from_registry(&reg).expect("config");
    TcpModule::open(ctx_info, modex, cfg).expect("open tcp module")
}

/// Deterministic payload of message `seq` from `src` to `dst`.
fn payload(src: u32, dst: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut x = (src * 131 + dst * 7 + seq).wrapping_mul(0x9e37_79b9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

fn msg_len(seq: u32, max: usize) -> usize {
    match seq % 5 {
        0 => 0,
        1 => 1,
        2 => 1000,
        3 => max - 8,
        _ => (seq as usize * 7919) % (max - 8),
    }
}

#[test]
fn all_to_all_with_simultaneous_connects() {
    let out = run_ranks(
        "all_to_all_child",
        4,
        &[
            ("TMPI_MCA_btl_tcp_max_send_size", "65536"),
            ("TMPI_MCA_btl_tcp_eager_limit", "4096"),
            ("TMPI_MCA_btl_tcp_sendq_bytes", "131072"),
        ],
        Duration::from_secs(120),
    );
    out.assert_success();
}

#[test]
fn all_to_all_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    let all: Vec<u32> = (0..ctx.size).collect();
    let reach = m.add_procs(&all, &mut modex).unwrap();
    let others: Vec<u32> = all.iter().copied().filter(|&r| r != ctx.rank).collect();
    assert_eq!(reach, others, "tcp reaches every other rank, not itself");
    assert!(matches!(
        m.send(ctx.rank, TAG, b"", b"x"),
        Err(BtlError::Unreachable(_))
    ));
    assert!(matches!(
        m.send(others[0], TAG, &[0; 16], &vec![0; 65536]),
        Err(BtlError::TooLarge { .. })
    ));
    const N: u32 = 200;
    let max = m.max_send_size();
    let mut next_send = vec![0u32; ctx.size as usize];
    let mut next_recv = vec![0u32; ctx.size as usize];
    let mut errors: Vec<String> = Vec::new();
    let mut blocked = 0u64;
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        // Everyone sends to everyone at once: connects cross.
        for &p in &others {
            while next_send[p as usize] < N {
                let seq = next_send[p as usize];
                let hdr = [seq.to_le_bytes(), ctx.rank.to_le_bytes()].concat();
                let body = payload(ctx.rank, p, seq, msg_len(seq, max));
                match m.send(p, TAG, &hdr, &body) {
                    Ok(()) => next_send[p as usize] += 1,
                    Err(BtlError::WouldBlock) => {
                        blocked += 1;
                        break;
                    }
                    Err(e) => panic!("send to {p}: {e}"),
                }
            }
        }
        m.progress(&mut |src: u32, tag: u8, bytes: &[u8]| {
            let seq = u32::from_le_bytes(bytes[..4].try_into().unwrap());
            let claimed = u32::from_le_bytes(bytes[4..8].try_into().unwrap());
            let want = next_recv[src as usize];
            if tag != TAG || claimed != src || seq != want {
                errors.push(format!(
                    "from {src}: tag {tag} seq {seq} (want {want}) claimed {claimed}"
                ));
            } else if bytes[8..] != payload(src, ctx.rank, seq, msg_len(seq, max))[..] {
                errors.push(format!("from {src}: payload of seq {seq} corrupt"));
            }
            next_recv[src as usize] += 1;
        });
        assert!(errors.is_empty(), "{errors:?}");
        let sent = others.iter().all(|&p| next_send[p as usize] == N);
        let recvd = others.iter().all(|&p| next_recv[p as usize] == N);
        if sent && recvd && m.pending_bytes() == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rank {}: stuck: sent {next_send:?} received {next_recv:?} pending {} stats {:?}",
            ctx.rank,
            m.pending_bytes(),
            m.stats()
        );
    }
    let s = m.stats();
    println!("rank {}: stats {s:?}, sends refused {blocked}", ctx.rank);
    // Exactly one connection per pair survives, whoever started it.
    assert_eq!(s.connects + s.accepts, others.len() as u64, "{s:?}");
    assert_eq!(s.rejected, 0);
    assert!(m.failed_peers().is_empty(), "{:?}", m.failed_peers());
    for &p in &others {
        let ps = m.peer_stats(p).unwrap();
        assert_eq!((ps.frags_sent, ps.frags_recv), (N as u64, N as u64));
        assert!(m.is_connected(p));
        assert!(
            m.peer_addr(p).unwrap().ip().is_loopback(),
            "same node: loopback"
        );
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
    m.finalize().unwrap();
    assert!(matches!(
        m.send(others[0], TAG, b"", b""),
        Err(BtlError::Finalized)
    ));
}

/// An outsider's bytes: the address of rank `r` from the modex.
fn addr_of(modex: &mut FileModex, r: u32) -> SocketAddr {
    let ep = Endpoint::decode(&modex.get(r, MODEX_ADDR_KEY).unwrap()).unwrap();
    let ip = ep
        .addrs
        .iter()
        .map(|(ip, _)| *ip)
        .find(|ip| ip.is_loopback())
        .unwrap_or(ep.addrs[0].0);
    SocketAddr::new(ip.into(), ep.port)
}

/// An outsider's connection: connects and reads the listener's CHALLENGE.
fn challenged(addr: SocketAddr) -> (TcpStream, Handshake) {
    let mut s = TcpStream::connect(addr).expect("connect as an outsider");
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut b = [0u8; HS_LEN];
    s.read_exact(&mut b).expect("the listener's challenge");
    let h = Handshake::decode(&b).expect("a challenge");
    assert_eq!(h.kind, HsKind::Challenge);
    (s, h)
}

/// Sends `bytes` on `s` and returns what comes back before the server
/// closes (or 10 s pass).
fn answer_of(mut s: TcpStream, bytes: &[u8]) -> Vec<u8> {
    let _ = s.write_all(bytes);
    let mut got = Vec::new();
    let _ = s.read_to_end(&mut got);
    got
}

/// A HELLO from `rank` (of 2) to `to` answering `challenge`, MAC'd with
/// `secret`.
fn hello(rank: u32, to: u32, challenge: &Handshake, secret: &[u8; SECRET_LEN]) -> [u8; HS_LEN] {
    let nonce = [rank as u8 + 1; NONCE_LEN];
    let mac = Transcript {
        kind: HsKind::Hello,
        from: rank,
        to,
        size: 2,
        listener_nonce: &challenge.nonce,
        connector_nonce: &nonce,
    }
    .mac(secret);
    Handshake {
        kind: HsKind::Hello,
        rank,
        size: 2,
        nonce,
        mac,
    }
    .encode()
}

#[test]
fn outsiders_are_rejected_and_the_job_continues() {
    let out = run_ranks("outsider_child", 2, &[], Duration::from_secs(60));
    out.assert_success();
}

#[test]
fn outsider_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    m.add_procs(&[0, 1], &mut modex).unwrap();
    if ctx.rank == 0 {
        let target = addr_of(&mut modex, 1);
        let secret =
            wire::secret_from_hex(&modex.get(0, MODEX_SECRET_KEY).unwrap()).expect("secret");
        // 1. a MAC under a wrong secret
        let mut wrong = secret;
        wrong[0] ^= 0x5a;
        let (s, ch) = challenged(target);
        let got = answer_of(s, &hello(0, 1, &ch, &wrong));
        assert!(got.is_empty(), "wrong secret got an answer: {got:?}");
        // 2. not our protocol at all
        let (s, _) = challenged(target);
        let got = answer_of(s, &b"GET / HTTP/1.0\r\n\r\n".repeat(6));
        assert!(got.is_empty());
        // 3. a replay: a HELLO valid for one connection (the right secret,
        // that connection's nonce) sent on another connection
        let (first, ch1) = challenged(target);
        let recorded = hello(0, 1, &ch1, &secret);
        drop(first);
        let (s, ch2) = challenged(target);
        assert_ne!(ch1.nonce, ch2.nonce, "a fresh nonce per connection");
        let got = answer_of(s, &recorded);
        assert!(got.is_empty(), "a replayed HELLO got an answer: {got:?}");
        // 4. right secret, claims to be rank 1 itself
        let (s, ch) = challenged(target);
        let got = answer_of(s, &hello(1, 1, &ch, &secret));
        assert!(got.is_empty());
        // 5. a short HELLO then EOF
        let (s, ch) = challenged(target);
        let got = answer_of(s, &hello(0, 1, &ch, &secret)[..HS_LEN / 2]);
        assert!(got.is_empty());
    }
    // The job is unaffected: a real round trip afterwards.
    let peer = 1 - ctx.rank;
    let mut got: Option<Vec<u8>> = None;
    if ctx.rank == 0 {
        m.send(peer, TAG, b"ping", b"after the attacks").unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while got.is_none() {
        m.progress(&mut |src: u32, _tag: u8, b: &[u8]| {
            assert_eq!(src, peer);
            got = Some(b.to_vec());
        });
        assert!(Instant::now() < deadline, "no message: {}", m.stats());
    }
    if ctx.rank == 1 {
        assert_eq!(got.unwrap(), b"pingafter the attacks");
        m.send(peer, TAG, b"pong", b"").unwrap();
        while m.pending_bytes() > 0 {
            m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
        }
        let s = m.stats();
        assert_eq!(s.rejected, 5, "{s}");
        assert_eq!(s.accepts, 1, "{s}");
    } else {
        assert_eq!(got.unwrap(), b"pong");
    }
    assert!(m.failed_peers().is_empty());
    modex.fence().unwrap();
    m.finalize().unwrap();
}

/// An insider (a process with the job secret) claims the rank pair (0, 1)
/// at rank 1 before rank 0 connects: when rank 0 then connects, both
/// ranks fail the pair at once with errors naming the rank, instead of
/// rank 0 waiting out btl_tcp_connect_timeout.
#[test]
fn second_claim_of_a_rank_pair_fails_fast() {
    let out = run_ranks("second_claim_child", 2, &[], Duration::from_secs(60));
    out.assert_success();
    eprintln!("{}\n{}", out.output[0], out.output[1]);
    assert!(
        out.output[1].contains("rank 1 saw the second claim"),
        "{}",
        out.output[1]
    );
    assert!(
        out.output[0].contains("rank 0 was refused"),
        "{}",
        out.output[0]
    );
}

#[test]
fn second_claim_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    m.add_procs(&[0, 1], &mut modex).unwrap();
    let claimed = ctx.dir.join("claimed");
    let t0 = Instant::now();
    let limit = Duration::from_secs(20);
    let mut impostor = None;
    if ctx.rank == 0 {
        // The insider: a separate connection, with the secret, as rank 0.
        let target = addr_of(&mut modex, 1);
        let secret =
            wire::secret_from_hex(&modex.get(0, MODEX_SECRET_KEY).unwrap()).expect("secret");
        let (mut s, ch) = challenged(target);
        s.write_all(&hello(0, 1, &ch, &secret)).unwrap();
        let mut b = [0u8; HS_LEN];
        s.read_exact(&mut b).expect("an answer to the insider");
        assert_eq!(Handshake::decode(&b).unwrap().kind, HsKind::Accept);
        impostor = Some(s);
        std::fs::write(&claimed, b"").unwrap();
        // Now the real rank 0 connects.
        m.send(1, TAG, b"", b"hello").unwrap();
    }
    let why = loop {
        m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
        if let Some((peer, why)) = m.failed_peers().into_iter().next() {
            assert_eq!(peer, 1 - ctx.rank);
            break why;
        }
        assert!(
            t0.elapsed() < limit,
            "rank {}: no failure: {}",
            ctx.rank,
            m.stats()
        );
    };
    if ctx.rank == 1 {
        assert!(why.contains("claims to be rank 0"), "{why}");
        assert!(why.contains("impersonates rank 0"), "{why}");
        println!("rank 1 saw the second claim: {why}");
    } else {
        assert!(why.contains("rank 1 refused the connection"), "{why}");
        assert!(why.contains("claims to be rank 0"), "{why}");
        println!("rank 0 was refused after {:?}: {why}", t0.elapsed());
    }
    drop(impostor);
    modex.fence().unwrap();
    m.finalize().unwrap();
}

#[test]
fn killed_peer_gives_errors_not_a_hang() {
    let out = run_ranks(
        "killed_child",
        2,
        &[("TMPI_MCA_btl_tcp_max_send_size", "1048576")],
        Duration::from_secs(60),
    );
    assert!(!out.timed_out, "hung: {:?}", out.output);
    assert_eq!(out.codes[0], Some(0), "rank 0:\n{}", out.output[0]);
    assert_eq!(out.codes[1], None, "rank 1 was killed:\n{}", out.output[1]);
    assert!(
        out.output[0].contains("rank 0 saw the failure"),
        "{}",
        out.output[0]
    );
}

#[test]
fn killed_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    m.add_procs(&[0, 1], &mut modex).unwrap();
    let big = vec![7u8; 1 << 19];
    if ctx.rank == 1 {
        std::fs::write(ctx.dir.join("victim.pid"), std::process::id().to_string()).unwrap();
        // Stream large fragments at rank 0 until killed.
        loop {
            let _ = m.send(0, TAG, b"", &big);
            m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
        }
    }
    let mut received = 0u64;
    let deadline = Instant::now() + Duration::from_secs(30);
    while received < 4 {
        m.progress(&mut |_: u32, _: u8, _: &[u8]| received += 1);
        assert!(Instant::now() < deadline, "no data from rank 1");
    }
    let pid: i32 = std::fs::read_to_string(ctx.dir.join("victim.pid"))
        .unwrap()
        .parse()
        .unwrap();
    let st = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let t0 = Instant::now();
    let failed_at;
    loop {
        m.progress(&mut |_: u32, _: u8, _: &[u8]| received += 1);
        if let Some((r, why)) = m.failed_peers().into_iter().next() {
            assert_eq!(r, 1);
            assert!(
                why.contains("closed by the peer") || why.contains("reset"),
                "{why}"
            );
            failed_at = t0.elapsed();
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "peer death not noticed"
        );
    }
    // The pml's query: the dead peer once, then nothing more.
    let taken = m.take_failed_peers();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].0, 1);
    m.progress(&mut |_: u32, _: u8, _: &[u8]| received += 1);
    assert!(m.take_failed_peers().is_empty());
    match m.send(1, TAG, b"", b"anyone?") {
        Err(BtlError::Protocol { peer: 1, reason }) => assert!(reason.contains("failed")),
        other => panic!("send to a dead peer: {other:?}"),
    }
    println!("rank 0 saw the failure after {failed_at:?} ({received} fragments before)");
    m.finalize().unwrap();
}

/// Fragments rank 0 sends to rank 1 before it resets the connection.
const RESET_AFTER: u64 = 40;

/// `btl_tcp_inject_reset` on rank 0: after 40 fragments to rank 1, rank 0
/// aborts the connection with an RST while both keep running; both mark
/// the other failed (rank 0: the injection, rank 1: a reset by the peer),
/// report it once through `take_failed_peers`, refuse later sends with a
/// typed error and exit normally.
#[test]
fn injected_reset_fails_both_ends() {
    let out = run_ranks(
        "reset_child",
        2,
        &[
            ("TMPI_MCA_btl_tcp_inject_reset", &RESET_AFTER.to_string()),
            ("TMPI_MCA_btl_tcp_inject_reset_rank", "0"),
        ],
        Duration::from_secs(60),
    );
    assert!(!out.timed_out, "hung: {:?}", out.output);
    for r in 0..2 {
        assert_eq!(out.codes[r], Some(0), "rank {r}:\n{}", out.output[r]);
        assert!(
            out.output[r].contains(&format!("rank {r} saw the reset")),
            "{}",
            out.output[r]
        );
    }
}

#[test]
fn reset_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    let me = ctx.rank;
    let other = 1 - me;
    m.add_procs(&[0, 1], &mut modex).unwrap();
    let msg = vec![me as u8; 3000];
    let mut received = 0u64;
    let mut sent = 0u64;
    let t0 = Instant::now();
    let (peer, why) = loop {
        // Both sides keep sending (rank 1 only in answer, rank 0 once
        // connected: fragments queued during connection set-up count
        // too) until the failure.
        if (me == 0 && (sent == 0 || m.is_connected(1))) || (me == 1 && received > sent) {
            match m.send(other, TAG, b"h", &msg) {
                Ok(()) => sent += 1,
                Err(BtlError::WouldBlock) => {}
                Err(e) => {
                    // A write can meet the RST first: the send fails and
                    // the failure must be recorded by then.
                    match m.failed_peers().into_iter().next() {
                        Some(f) => break f,
                        None => panic!(
                            "rank {me}: send {sent} failed before the failure was recorded: {e}"
                        ),
                    }
                }
            }
        }
        m.progress(&mut |_: u32, _: u8, _: &[u8]| received += 1);
        if let Some(f) = m.failed_peers().into_iter().next() {
            break f;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(20),
            "rank {me}: no failure ({sent} sent, {received} received)"
        );
    };
    assert_eq!(peer, other);
    if me == 0 {
        assert!(
            why.contains("fault injection btl_tcp_inject_reset=40"),
            "{why}"
        );
        assert_eq!(sent, RESET_AFTER, "rank 0 sent {sent}");
        assert_eq!(m.peer_stats(1).unwrap().frags_sent, RESET_AFTER);
        assert_eq!(m.stats().injected_resets, 1);
    } else {
        // The RST, not an orderly EOF, whether seen by a read or a write.
        assert!(why.contains("reset by peer"), "rank 1: {why}");
        assert!(received <= RESET_AFTER, "rank 1 received {received}");
        assert_eq!(m.stats().injected_resets, 0);
    }
    let taken = m.take_failed_peers();
    assert_eq!(taken.len(), 1, "{taken:?}");
    assert_eq!(taken[0].0, other);
    m.progress(&mut |_: u32, _: u8, _: &[u8]| received += 1);
    assert!(m.take_failed_peers().is_empty());
    match m.send(other, TAG, b"", b"still there?") {
        Err(BtlError::Protocol { peer, reason }) => {
            assert_eq!(peer, other);
            assert!(reason.contains("failed"), "{reason}");
        }
        r => panic!("rank {me}: send after the reset: {r:?}"),
    }
    println!("rank {me} saw the reset: {why} ({sent} sent, {received} received)");
    m.finalize().unwrap();
}

#[test]
fn interface_selection() {
    let dir = std::env::temp_dir().join(format!("tmpi-tcp-if-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut info = ProcessInfo::singleton("iftest".into(), "localhost".into());
    info.size = 2;
    info.node_of = vec![0, 0];
    let mut modex = FileModex::new(&dir, 0, 2, Duration::from_secs(5));
    let cfg = TcpConfig {
        if_include: vec![tmpi_btl_tcp::ifaddr::IfSpec::parse("lo").unwrap()],
        ..TcpConfig::default()
    };
    let m = TcpModule::open(&info, &mut modex, cfg).unwrap();
    let ep = Endpoint::decode(&modex.get(0, MODEX_ADDR_KEY).unwrap()).unwrap();
    assert_eq!(ep.port, m.port());
    assert!(!m.listen_addrs().is_empty());
    for a in m.listen_addrs() {
        assert_eq!(
            a.ip(),
            std::net::Ipv4Addr::LOCALHOST,
            "bound to lo's address only"
        );
        assert_eq!(a.port(), m.port());
    }
    assert!(
        ep.addrs.iter().all(|(ip, _)| ip.is_loopback()),
        "only lo published: {ep:?}"
    );
    // A subnet no interface is in: nothing to use.
    let absent = ["198.51.100.0/24", "203.0.113.0/24", "192.0.2.0/24"]
        .into_iter()
        .map(|s| tmpi_btl_tcp::ifaddr::IfSpec::parse(s).unwrap())
        .find(|spec| {
            !tmpi_btl_tcp::ifaddr::list()
                .unwrap()
                .iter()
                .any(|i| spec.matches(i))
        })
        .expect("some documentation subnet is not configured here");
    let cfg = TcpConfig {
        if_include: vec![absent],
        ..TcpConfig::default()
    };
    assert!(matches!(
        TcpModule::open(&info, &mut modex, cfg),
        Err(BtlError::Unavailable(_))
    ));
    let cfg = TcpConfig {
        eager_limit: 1 << 20,
        max_send_size: 1024,
        ..TcpConfig::default()
    };
    assert!(matches!(
        TcpModule::open(&info, &mut modex, cfg),
        Err(BtlError::Config(_))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}
