//! Outsiders against the tcp BTL's wire-up, over real sockets between real
//! processes (loopback): idle connections held by the hundred while the
//! ranks first connect, garbage and a flood of refused connections (the log
//! stays bounded), and the listening socket bound to the selected
//! interface's address only.
//!
//! Only API that predates the authenticated handshake is used here, so the
//! same tests also run against the older module (they fail there: that is
//! how they were checked).

use std::io::Write;
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_btl::testing::{child_context, run_ranks, FileModex};
use tmpi_btl::{BtlError, BtlModule};
use tmpi_btl_tcp::wire::Endpoint;
use tmpi_btl_tcp::{TcpConfig, TcpModule, MODEX_ADDR_KEY};

const TAG: u8 = 0x42;
/// Idle connections the outsider holds to each flooded rank.
const IDLE: usize = 200;
/// Garbage connections the outsider makes to rank 1.
const GARBAGE: u64 = 300;

fn open(info: &ProcessInfo, modex: &mut FileModex) -> TcpModule {
    let reg = Registry::new(Sources::from_process());
    let cfg = TcpConfig::from_registry(&reg).expect("config");
    TcpModule::open(info, modex, cfg).expect("open tcp module")
}

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

fn mark(dir: &Path, name: &str) {
    std::fs::write(dir.join(name), b"").unwrap();
}

/// Progresses `m` (delivering nothing expected) until `dir/name` exists.
fn progress_until_marked(m: &mut TcpModule, dir: &Path, name: &str, limit: Duration) {
    let deadline = Instant::now() + limit;
    while !dir.join(name).exists() {
        m.progress(&mut |src: u32, _: u8, _: &[u8]| panic!("unexpected fragment from {src}"));
        assert!(Instant::now() < deadline, "{name} never appeared");
        std::thread::sleep(Duration::from_micros(200));
    }
}

/// Every rank sends `n` fragments to every other and waits for theirs.
fn exchange(m: &mut TcpModule, me: u32, size: u32, n: u32, limit: Duration) {
    let others: Vec<u32> = (0..size).filter(|&r| r != me).collect();
    let mut sent = vec![0u32; size as usize];
    let mut got = vec![0u32; size as usize];
    let deadline = Instant::now() + limit;
    loop {
        for &p in &others {
            while sent[p as usize] < n {
                match m.send(p, TAG, &sent[p as usize].to_le_bytes(), b"payload") {
                    Ok(()) => sent[p as usize] += 1,
                    Err(BtlError::WouldBlock) => break,
                    Err(e) => panic!("rank {me}: send to {p}: {e}"),
                }
            }
        }
        m.progress(&mut |src: u32, _: u8, b: &[u8]| {
            let seq = u32::from_le_bytes(b[..4].try_into().unwrap());
            assert_eq!(seq, got[src as usize], "order from {src}");
            got[src as usize] += 1;
        });
        let failed = m.failed_peers();
        assert!(failed.is_empty(), "rank {me}: peers failed: {failed:?}");
        if others
            .iter()
            .all(|&p| sent[p as usize] == n && got[p as usize] == n)
            && m.pending_bytes() == 0
        {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "rank {me}: stalled: sent {sent:?} received {got:?}"
        );
    }
}

#[test]
fn idle_outsider_connections_do_not_stall_wire_up() {
    let out = run_ranks("idle_flood_child", 3, &[], Duration::from_secs(120));
    out.assert_success();
    for r in [1, 2] {
        eprintln!("{}", out.output[r].trim());
        assert!(
            out.output[r].contains(&format!("rank {r} survived the idle flood")),
            "{}",
            out.output[r]
        );
    }
}

#[test]
fn idle_flood_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    m.add_procs(&[0, 1, 2], &mut modex).unwrap();
    let dir = ctx.dir.clone();
    let outsider = (ctx.rank == 0).then(|| {
        // An outsider (a thread that shares nothing with the module)
        // holds IDLE idle connections to ranks 1 and 2 during wire-up.
        let targets = [addr_of(&mut modex, 1), addr_of(&mut modex, 2)];
        let dir = dir.clone();
        std::thread::spawn(move || {
            let mut held = Vec::new();
            for t in targets {
                for _ in 0..IDLE {
                    if let Ok(s) = TcpStream::connect_timeout(&t, Duration::from_secs(10)) {
                        held.push(s);
                    }
                }
            }
            mark(&dir, "flood.done");
            let deadline = Instant::now() + Duration::from_secs(90);
            while !dir.join("job.done").exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(20));
            }
            held.len()
        })
    });
    // The flooded ranks accept the outsider's connections meanwhile.
    progress_until_marked(&mut m, &dir, "flood.done", Duration::from_secs(60));
    // Now the ranks connect for the first time, the idle connections held.
    exchange(&mut m, ctx.rank, ctx.size, 50, Duration::from_secs(60));
    modex.fence().unwrap();
    if let Some(t) = outsider {
        mark(&dir, "job.done");
        let held = t.join().unwrap();
        assert!(held >= IDLE, "the outsider held only {held} connections");
    } else {
        let s = m.stats();
        assert_eq!(s.accepts + s.connects, 2, "one connection per peer");
        println!(
            "rank {} survived the idle flood: {} outsider connections refused",
            ctx.rank, s.rejected
        );
    }
    m.finalize().unwrap();
}

/// Lines of the `btl_tcp` target at WARN or ERROR in `out`.
fn tcp_log_lines(out: &str) -> Vec<&str> {
    out.lines()
        .filter(|l| l.contains("btl_tcp: WARN") || l.contains("btl_tcp: ERROR"))
        .collect()
}

#[test]
fn garbage_is_refused_and_logged_at_a_bounded_rate() {
    let out = run_ranks("garbage_child", 2, &[], Duration::from_secs(120));
    out.assert_success();
    let lines = tcp_log_lines(&out.output[1]);
    eprintln!("rank 1's tcp log lines:\n{}", lines.join("\n"));
    assert!(!lines.is_empty(), "no refusal logged:\n{}", out.output[1]);
    assert!(
        lines.len() <= 4,
        "{GARBAGE} refused connections gave {} log lines:\n{}",
        lines.len(),
        lines.join("\n")
    );
    assert!(
        !out.output[1].contains("Some("),
        "debug forms in the log:\n{}",
        out.output[1]
    );
}

#[test]
fn garbage_child() {
    let Some(ctx) = child_context() else { return };
    tmpi_base::log::init_logging(ctx.rank).unwrap();
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = open(&info, &mut modex);
    modex.fence().unwrap();
    m.add_procs(&[0, 1], &mut modex).unwrap();
    let dir = ctx.dir.clone();
    if ctx.rank == 0 {
        let target = addr_of(&mut modex, 1);
        let t = std::thread::spawn(move || {
            for i in 0..GARBAGE {
                let mut s = TcpStream::connect_timeout(&target, Duration::from_secs(10))
                    .expect("connect as an outsider");
                let junk = if i % 2 == 0 {
                    vec![b'x'; 100]
                } else {
                    b"GET / HTTP/1.0\r\n\r\n".repeat(8)
                };
                let _ = s.write_all(&junk);
                // Closed by the rank (or left to it): no answer is read.
            }
        });
        t.join().unwrap();
        mark(&dir, "garbage.done");
    } else {
        // Every garbage connection is refused and counted.
        let deadline = Instant::now() + Duration::from_secs(60);
        while m.stats().rejected < GARBAGE {
            m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
            assert!(Instant::now() < deadline, "refused {}", m.stats().rejected);
        }
        progress_until_marked(&mut m, &dir, "garbage.done", Duration::from_secs(60));
    }
    exchange(&mut m, ctx.rank, ctx.size, 10, Duration::from_secs(60));
    modex.fence().unwrap();
    m.finalize().unwrap();
}

#[test]
fn listener_is_bound_to_the_selected_interface_only() {
    let dir = std::env::temp_dir().join(format!("tmpi-tcp-bind-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let mut info = ProcessInfo::singleton("bindtest".into(), "localhost".into());
    info.size = 2;
    info.node_of = vec![0, 0];
    let mut modex = FileModex::new(&dir, 0, 2, Duration::from_secs(5));
    let cfg = TcpConfig {
        if_include: vec![tmpi_btl_tcp::ifaddr::IfSpec::parse("lo").unwrap()],
        ..TcpConfig::default()
    };
    let m = TcpModule::open(&info, &mut modex, cfg).unwrap();
    let port = m.port();
    // Listening on 127.0.0.1 (what lo has), reachable there...
    let lo = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    TcpStream::connect_timeout(&lo, Duration::from_secs(10)).expect("127.0.0.1 listens");
    // ...and not on another address of this host: 127.0.0.2 is routed to
    // lo too, so a wildcard (0.0.0.0) socket would accept there.
    let other = SocketAddr::from((Ipv4Addr::new(127, 0, 0, 2), port));
    match TcpStream::connect_timeout(&other, Duration::from_secs(10)) {
        Err(e) => assert_eq!(e.kind(), std::io::ErrorKind::ConnectionRefused, "{e}"),
        Ok(_) => panic!("the tcp BTL accepts on {other}: it listens on the wildcard address"),
    }
    // The kernel's view: no wildcard listener on this port.
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    let wildcard = format!("00000000:{port:04X}");
    let bound = format!("0100007F:{port:04X}");
    let listening: Vec<&str> = table
        .lines()
        .filter(|l| l.split_whitespace().nth(3) == Some("0A"))
        .filter_map(|l| l.split_whitespace().nth(1))
        .collect();
    assert!(!listening.contains(&wildcard.as_str()), "{listening:?}");
    assert!(listening.contains(&bound.as_str()), "{listening:?}");
    drop(m);
    let _ = std::fs::remove_dir_all(&dir);
}
