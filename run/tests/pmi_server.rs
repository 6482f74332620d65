//! The PMI server against the real PMI client (and raw sockets for what a
//! well-behaved client never sends), in one process over real socketpairs.
//! Every blocking read has a timeout so a broken server fails, never hangs.

use std::io::{ErrorKind, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::thread;
use std::time::{Duration, Instant};

use tmpi_base::modex::{Modex, ModexError};
use tmpi_base::pmi::wire::{parse_v1_line, parse_v2_frame, Message, V2_MAX_BODY};
use tmpi_base::pmi::{ConnectOptions, PmiClient, PmiError, PmiModex, PmiVersion};
use tmpi_run::pmi_server::{PmiEvent, PmiServer, ServerConfig, ServerHandle};

const TIMEOUT: Duration = Duration::from_secs(20);

fn config(size: u32, mapping: &str) -> ServerConfig {
    ServerConfig {
        size,
        kvsname: "tmpi-test-kvs".into(),
        process_mapping: mapping.into(),
        appnum: 0,
        job_attrs: vec![("tmpi_extra".into(), "42".into())],
    }
}

fn start(cfg: ServerConfig) -> (ServerHandle, Receiver<PmiEvent>, Vec<UnixStream>) {
    let (server, fds) = PmiServer::new(cfg).expect("server");
    let (handle, rx) = server.spawn().expect("spawn");
    let streams = fds
        .into_iter()
        .map(|fd: OwnedFd| {
            let s = UnixStream::from(fd);
            s.set_read_timeout(Some(TIMEOUT)).unwrap();
            s
        })
        .collect();
    (handle, rx, streams)
}

fn connect(s: UnixStream, version: PmiVersion, rank: u32, size: u32) -> PmiClient {
    let opts = ConnectOptions {
        rank: Some(rank),
        size: Some(size),
        ..Default::default()
    };
    PmiClient::connect(s, version, &opts).expect("connect")
}

/// Collects events until `done` holds for the collected list (or fails after TIMEOUT).
fn events_until(rx: &Receiver<PmiEvent>, done: impl Fn(&[PmiEvent]) -> bool) -> Vec<PmiEvent> {
    let deadline = Instant::now() + TIMEOUT;
    let mut got = Vec::new();
    while !done(&got) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(e) => got.push(e),
            Err(RecvTimeoutError::Timeout) => panic!("timed out waiting for events; got {got:?}"),
            Err(RecvTimeoutError::Disconnected) => break,
        }
    }
    got
}

fn has(events: &[PmiEvent], e: &PmiEvent) -> bool {
    events.contains(e)
}

/// A hand-driven client for raw protocol tests.
struct Raw(UnixStream, Vec<u8>);

impl Raw {
    fn new(s: UnixStream) -> Self {
        Raw(s, Vec::new())
    }
    fn send(&mut self, bytes: &[u8]) {
        self.0.write_all(bytes).unwrap();
    }
    fn fill(&mut self) -> std::io::Result<()> {
        let mut b = [0u8; 4096];
        let n = self.0.read(&mut b)?;
        if n == 0 {
            return Err(ErrorKind::UnexpectedEof.into());
        }
        self.1.extend_from_slice(&b[..n]);
        Ok(())
    }
    fn line(&mut self) -> Message {
        loop {
            if let Some(nl) = self.1.iter().position(|&b| b == b'\n') {
                let l: Vec<u8> = self.1.drain(..=nl).collect();
                return parse_v1_line(&l).unwrap();
            }
            self.fill().expect("reply line");
        }
    }
    fn frame(&mut self) -> Message {
        loop {
            if let Some((m, used)) = parse_v2_frame(&self.1, V2_MAX_BODY).unwrap() {
                self.1.drain(..used);
                return m;
            }
            self.fill().expect("reply frame");
        }
    }
    fn v1(&mut self, line: &str) -> Message {
        self.send(line.as_bytes());
        self.line()
    }
    fn v2(&mut self, body: &str) -> Message {
        self.send(format!("{:>6}{body}", body.len()).as_bytes());
        self.frame()
    }
    /// Asserts that nothing arrives within `d`.
    fn silent_for(&mut self, d: Duration) {
        self.0.set_read_timeout(Some(d)).unwrap();
        let mut b = [0u8; 64];
        match self.0.read(&mut b) {
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            other => panic!("expected silence, got {other:?} {:?}", &b[..]),
        }
        self.0.set_read_timeout(Some(TIMEOUT)).unwrap();
    }
    /// Asserts that the server closed the connection.
    fn closed(&mut self) {
        let mut b = [0u8; 4096];
        loop {
            match self.0.read(&mut b) {
                Ok(0) => return,
                Ok(_) => continue, // an error reply before the close is fine
                Err(e) if e.kind() == ErrorKind::ConnectionReset => return,
                Err(e) => panic!("expected EOF, got {e}"),
            }
        }
    }
}

/// A PMI-2 frame (Slurm-style left-aligned length).
fn f2(body: &str) -> Vec<u8> {
    format!("{:<6}{body}", body.len()).into_bytes()
}

fn long_value(rank: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(31).wrapping_add(rank * 7) as u8)
        .collect()
}

/// Runs one job whose rank r speaks `versions[r]`, through the modex.
fn run_job(versions: &[PmiVersion], mapping: &str, expect_nodes: &[u32]) {
    let size = versions.len() as u32;
    let (handle, rx, streams) = start(config(size, mapping));
    let workers: Vec<_> = streams
        .into_iter()
        .enumerate()
        .map(|(r, s)| {
            let version = versions[r];
            thread::spawn(move || {
                let r = r as u32;
                let mut c = connect(s, version, r, size);
                assert_eq!(
                    (c.rank(), c.size(), c.kvsname()),
                    (r, size, "tmpi-test-kvs")
                );
                let info = c.process_info().unwrap();
                let mut m = PmiModex::new(c);
                m.put("short", format!("rank{r}").as_bytes()).unwrap();
                m.put("long", &long_value(r, 5000 + r as usize)).unwrap();
                m.fence().unwrap();
                for p in 0..size {
                    assert_eq!(m.get(p, "short").unwrap(), format!("rank{p}").as_bytes());
                    assert_eq!(m.get(p, "long").unwrap(), long_value(p, 5000 + p as usize));
                }
                assert!(matches!(
                    m.get(0, "missing"),
                    Err(ModexError::NotFound { .. })
                ));
                assert_eq!(
                    m.client().job_attr("tmpi_extra").unwrap().as_deref(),
                    Some("42")
                );
                assert_eq!(m.client().job_attr("no_such_attr").unwrap(), None);
                m.fence().unwrap();
                m.client().finalize().unwrap();
                assert!(matches!(m.client().fence(), Err(PmiError::Finalized)));
                info
            })
        })
        .collect();
    let infos: Vec<_> = workers
        .into_iter()
        .map(|w| w.join().expect("rank thread"))
        .collect();
    for (r, info) in infos.iter().enumerate() {
        assert_eq!(info.rank, r as u32);
        assert_eq!(info.node_of, expect_nodes);
        assert_eq!(info.job_id, "tmpi-test-kvs");
        let local: Vec<u32> = (0..size)
            .filter(|&p| expect_nodes[p as usize] == expect_nodes[r])
            .collect();
        assert_eq!(info.local_size as usize, local.len());
        assert_eq!(local[info.local_rank as usize], r as u32);
    }
    // All connections closed after finalize: the server thread ends and the
    // channel disconnects.
    let ev = events_until(&rx, |_| false);
    for r in 0..size {
        assert!(has(&ev, &PmiEvent::Initialized { rank: r }), "{ev:?}");
        assert!(has(&ev, &PmiEvent::Finalized { rank: r }), "{ev:?}");
        assert!(
            has(
                &ev,
                &PmiEvent::Disconnected {
                    rank: r,
                    finalized: true,
                    active: true
                }
            ),
            "{ev:?}"
        );
    }
    assert!(
        !ev.iter()
            .any(|e| matches!(e, PmiEvent::ProtocolError { .. } | PmiEvent::Abort { .. })),
        "{ev:?}"
    );
    handle.shutdown();
}

#[test]
fn pmi1_job_exchanges_long_binary_values() {
    run_job(&[PmiVersion::V1; 4], "(vector,(0,2,2))", &[0, 0, 1, 1]);
}

#[test]
fn pmi2_job_exchanges_long_binary_values() {
    run_job(&[PmiVersion::V2; 3], "(vector,(0,1,1))", &[0, 0, 0]);
}

#[test]
fn mixed_protocol_job_with_cyclic_mapping() {
    use PmiVersion::{V1, V2};
    run_job(&[V1, V2, V1, V2, V2], "(vector,(0,2,1))", &[0, 1, 0, 1, 0]);
}

#[test]
fn missing_mapping_falls_back_to_host_names() {
    // Empty mapping: the clients exchange host names (all equal here).
    run_job(&[PmiVersion::V1, PmiVersion::V2], "", &[0, 0]);
}

#[test]
fn not_found_spellings_and_job_attributes() {
    let (handle, _rx, mut s) = start(config(2, "(vector,(0,1,2))"));
    let mut a = Raw::new(s.remove(0));
    let mut b = Raw::new(s.remove(0));
    let m = a.v1("cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!((m.cmd.as_str(), m.rc()), ("response_to_init", Ok(0)));
    let m = a.v1("cmd=get_maxes\n");
    assert_eq!(m.get("vallen_max"), Some("1024"));
    assert_eq!(m.get("keylen_max"), Some("64"));
    assert_eq!(
        a.v1("cmd=get_my_kvsname\n").get("kvsname"),
        Some("tmpi-test-kvs")
    );
    assert_eq!(a.v1("cmd=get_universe_size\n").get("size"), Some("2"));
    assert_eq!(a.v1("cmd=get_appnum\n").get("appnum"), Some("0"));
    let m = a.v1("cmd=get kvsname=tmpi-test-kvs key=nope\n");
    assert_eq!(
        (m.cmd.as_str(), m.rc(), m.get("found")),
        ("get_result", Ok(1), Some("FALSE"))
    );
    let m = a.v1("cmd=get kvsname=tmpi-test-kvs key=PMI_process_mapping\n");
    assert_eq!((m.rc(), m.get("value")), (Ok(0), Some("(vector,(0,1,2))")));
    assert_eq!(
        a.v1("cmd=get kvsname=tmpi-test-kvs key=universeSize\n")
            .get("value"),
        Some("2")
    );
    assert_eq!(a.v1("cmd=get kvsname=other key=nope\n").rc(), Ok(1));

    let m = b.v1("cmd=init pmi_version=2 pmi_subversion=0\n");
    assert_eq!((m.get("pmi_version"), m.rc()), (Some("2"), Ok(0)));
    let m = b.v2("cmd=fullinit;pmirank=1;threaded=FALSE;");
    assert_eq!(m.cmd, "fullinit-response");
    assert_eq!(
        (m.get("rank"), m.get("size"), m.rc()),
        (Some("1"), Some("2"), Ok(0))
    );
    assert_eq!(b.v2("cmd=job-getid;").get("jobid"), Some("tmpi-test-kvs"));
    let m = b.v2("cmd=kvs-get;jobid=tmpi-test-kvs;srcid=-1;key=nope;");
    assert_eq!(
        (m.cmd.as_str(), m.get("found"), m.rc()),
        ("kvs-get-response", Some("FALSE"), Ok(0))
    );
    let m = b.v2("cmd=info-getjobattr;key=PMI_process_mapping;");
    assert_eq!(
        (m.get("found"), m.get("value")),
        (Some("TRUE"), Some("(vector,(0,1,2))"))
    );
    assert_eq!(
        b.v2("cmd=info-getjobattr;key=nope;").get("found"),
        Some("FALSE")
    );
    // Unsupported init versions are refused.
    assert_ne!(
        b.v1("cmd=init pmi_version=3 pmi_subversion=0\n").rc(),
        Ok(0)
    );
    handle.shutdown();
}

#[test]
fn barrier_holds_replies_and_commits_puts() {
    let (handle, _rx, mut s) = start(config(2, ""));
    let mut a = Raw::new(s.remove(0));
    let mut b = Raw::new(s.remove(0));
    assert_eq!(
        a.v1("cmd=put kvsname=tmpi-test-kvs key=ka value=va=x\n")
            .rc(),
        Ok(0)
    );
    // Not visible before the barrier.
    assert_eq!(b.v2("cmd=kvs-get;key=ka;").get("found"), Some("FALSE"));
    a.send(b"cmd=barrier_in\n");
    a.silent_for(Duration::from_millis(300));
    // The second rank completes it; its reply copies thrid.
    let m = b.v2("cmd=kvs-fence;thrid=0x7f;");
    assert_eq!(
        (m.cmd.as_str(), m.rc(), m.get("thrid")),
        ("kvs-fence-response", Ok(0), Some("0x7f"))
    );
    let m = a.line();
    assert_eq!((m.cmd.as_str(), m.rc()), ("barrier_out", Ok(0)));
    let m = b.v2("cmd=kvs-get;key=ka;thrid=9;");
    assert_eq!(
        (m.get("found"), m.get("value"), m.get("thrid")),
        (Some("TRUE"), Some("va=x"), Some("9"))
    );
    // Re-put overwrites at the next barrier.
    assert_eq!(b.v2("cmd=kvs-put;key=ka;value=new;").rc(), Ok(0));
    b.send(&f2("cmd=kvs-fence;"));
    assert_eq!(a.v1("cmd=barrier_in\n").cmd, "barrier_out");
    assert_eq!(b.frame().cmd, "kvs-fence-response");
    assert_eq!(
        a.v1("cmd=get kvsname=tmpi-test-kvs key=ka\n").get("value"),
        Some("new")
    );
    handle.shutdown();
}

#[test]
fn bad_keys_and_values_are_rejected_not_truncated() {
    let (handle, _rx, mut s) = start(config(2, ""));
    let mut a = Raw::new(s.remove(0));
    let mut b = Raw::new(s.remove(0));
    let ok = "v".repeat(1023);
    let long = "v".repeat(1024);
    assert_eq!(
        a.v1(&format!(
            "cmd=put kvsname=tmpi-test-kvs key=ok value={ok}\n"
        ))
        .rc(),
        Ok(0)
    );
    assert_ne!(
        a.v1(&format!(
            "cmd=put kvsname=tmpi-test-kvs key=long value={long}\n"
        ))
        .rc(),
        Ok(0)
    );
    assert_ne!(
        a.v1("cmd=put kvsname=tmpi-test-kvs key=PMI_x value=1\n")
            .rc(),
        Ok(0)
    );
    assert_ne!(
        a.v1(&format!(
            "cmd=put kvsname=tmpi-test-kvs key={} value=1\n",
            "k".repeat(64)
        ))
        .rc(),
        Ok(0)
    );
    assert_ne!(a.v1("cmd=put kvsname=wrong key=k value=1\n").rc(), Ok(0));
    assert_ne!(a.v1("cmd=put kvsname=tmpi-test-kvs value=1\n").rc(), Ok(0));
    assert_eq!(
        b.v2(&format!("cmd=kvs-put;key=ok2;value={ok};")).rc(),
        Ok(0)
    );
    let m = b.v2(&format!("cmd=kvs-put;key=long2;value={long};"));
    assert_ne!(m.rc(), Ok(0));
    assert!(m.get("errmsg").is_some());
    b.send(&f2("cmd=kvs-fence;"));
    a.v1("cmd=barrier_in\n");
    b.frame();
    assert_eq!(
        a.v1("cmd=get kvsname=tmpi-test-kvs key=ok2\n").get("value"),
        Some(ok.as_str())
    );
    assert_eq!(
        a.v1("cmd=get kvsname=tmpi-test-kvs key=long2\n").rc(),
        Ok(1)
    );
    handle.shutdown();
}

#[test]
fn unknown_and_malformed_commands_get_error_replies() {
    let (handle, rx, mut s) = start(config(2, ""));
    let mut a = Raw::new(s.remove(0));
    let mut b = Raw::new(s.remove(0));
    let m = a.v1("cmd=frobnicate x=1\n");
    assert_eq!(m.cmd, "frobnicate_result");
    assert_ne!(m.rc(), Ok(0));
    let m = a.v1("cmd=put kvsname\n");
    assert_ne!(m.rc(), Ok(0));
    let m = b.v2("cmd=frobnicate;thrid=5;");
    assert_eq!(
        (m.cmd.as_str(), m.get("thrid")),
        ("frobnicate-response", Some("5"))
    );
    assert_ne!(m.rc(), Ok(0));
    let m = b.v2("key=value;");
    assert_ne!(m.rc(), Ok(0));
    // Spawn is not supported but is answered.
    a.send(b"mcmd=spawn\nnprocs=1\nexecname=x\ntotspawns=1\nspawnssofar=1\nargcnt=0\npreput_num=0\ninfo_num=0\nendcmd\n");
    let m = a.line();
    assert_eq!(m.cmd, "spawn_result");
    assert_ne!(m.rc(), Ok(0));
    // Both connections still work.
    assert_eq!(a.v1("cmd=get_appnum\n").get("appnum"), Some("0"));
    assert_eq!(b.v2("cmd=job-getid;").get("jobid"), Some("tmpi-test-kvs"));
    handle.shutdown();
    let ev = events_until(&rx, |_| false);
    let errors = ev
        .iter()
        .filter(|e| matches!(e, PmiEvent::ProtocolError { .. }))
        .count();
    assert!(errors >= 4, "{ev:?}");
}

#[test]
fn hostile_input_closes_only_that_connection() {
    let size = 6;
    let (handle, rx, s) = start(config(size, ""));
    let mut conns: Vec<Raw> = s.into_iter().map(Raw::new).collect();
    // 0: endless PMI-1 line. 1: PMI-2 length that is not a number.
    // 2: PMI-2 frame over the server's limit. 3: binary junk.
    let mut endless = b"cmd=put ".to_vec();
    endless.extend(std::iter::repeat_n(b'x', 10_000));
    conns[0].send(&endless);
    conns[1].send(b"hello world\n");
    conns[2].send(b"999999cmd=kvs-put;");
    let mut x: u32 = 12345;
    let junk: Vec<u8> = (0..20_000)
        .map(|_| {
            x = x.wrapping_mul(1_103_515_245).wrapping_add(12345);
            (x >> 16) as u8
        })
        .collect();
    conns[3].send(&junk);
    for c in &mut conns[..3] {
        c.closed();
    }
    // 4: a v2 frame cut in the middle, then closed: no reply, no crash.
    conns[4].send(b"40    cmd=kvs-put;key=");
    // (40 announced, fewer sent)
    drop(conns.remove(4));
    // 5 (now 4) still gets served.
    let m = conns[4].v1("cmd=init pmi_version=1 pmi_subversion=1\n");
    assert_eq!(m.rc(), Ok(0));
    assert_eq!(
        conns[4].v1("cmd=get_my_kvsname\n").get("kvsname"),
        Some("tmpi-test-kvs")
    );
    let ev = events_until(&rx, |ev| {
        (0..3).all(|r| {
            ev.iter()
                .any(|e| matches!(e, PmiEvent::Disconnected { rank, .. } if *rank == r))
        })
    });
    for r in 0..3 {
        assert!(
            ev.iter()
                .any(|e| matches!(e, PmiEvent::ProtocolError { rank, .. } if *rank == r)),
            "{ev:?}"
        );
    }
    handle.shutdown();
}

#[test]
fn abort_in_both_spellings_is_an_event_without_reply() {
    let (handle, rx, mut s) = start(config(3, ""));
    let mut a = Raw::new(s.remove(0));
    let mut b = Raw::new(s.remove(0));
    let mut c = Raw::new(s.remove(0));
    a.send(b"cmd=abort exitcode=7 message=boom\n");
    b.send(b"cmd=init pmi_version=2 pmi_subversion=0\n");
    b.line();
    b.send(&f2("cmd=abort;isworld=TRUE;msg=bye;"));
    c.send(&f2("cmd=abort;exitcode=3;message=m;"));
    let ev = events_until(&rx, |ev| {
        ev.iter()
            .filter(|e| matches!(e, PmiEvent::Abort { .. }))
            .count()
            == 3
    });
    assert!(
        has(
            &ev,
            &PmiEvent::Abort {
                rank: 0,
                code: 7,
                message: Some("boom".into())
            }
        ),
        "{ev:?}"
    );
    assert!(
        has(
            &ev,
            &PmiEvent::Abort {
                rank: 1,
                code: 1,
                message: Some("bye".into())
            }
        ),
        "{ev:?}"
    );
    assert!(
        has(
            &ev,
            &PmiEvent::Abort {
                rank: 2,
                code: 3,
                message: Some("m".into())
            }
        ),
        "{ev:?}"
    );
    a.silent_for(Duration::from_millis(200));
    b.silent_for(Duration::from_millis(200));
    handle.shutdown();
}

#[test]
fn disconnect_events_tell_failure_from_normal_end() {
    let (handle, rx, mut s) = start(config(3, ""));
    let idle = s.pop().unwrap();
    let finishing = s.pop().unwrap();
    let dying = s.pop().unwrap();
    let mut c = connect(finishing, PmiVersion::V1, 1, 3);
    c.finalize().unwrap();
    drop(c);
    let mut d = Raw::new(dying);
    d.v1("cmd=init pmi_version=1 pmi_subversion=1\n");
    drop(d);
    drop(idle);
    let ev = events_until(&rx, |_| false);
    assert!(
        has(
            &ev,
            &PmiEvent::Disconnected {
                rank: 0,
                finalized: false,
                active: true
            }
        ),
        "{ev:?}"
    );
    assert!(
        has(
            &ev,
            &PmiEvent::Disconnected {
                rank: 1,
                finalized: true,
                active: true
            }
        ),
        "{ev:?}"
    );
    assert!(
        has(
            &ev,
            &PmiEvent::Disconnected {
                rank: 2,
                finalized: false,
                active: false
            }
        ),
        "{ev:?}"
    );
    assert!(has(&ev, &PmiEvent::Finalized { rank: 1 }));
    assert!(!has(&ev, &PmiEvent::Finalized { rank: 0 }));
    handle.shutdown();
}

#[test]
fn fence_fails_instead_of_hanging_when_a_rank_dies() {
    let (handle, rx, mut s) = start(config(3, ""));
    let s2 = s.pop().unwrap();
    let s1 = s.pop().unwrap();
    let s0 = s.pop().unwrap();
    let t0 = thread::spawn(move || {
        let mut c = connect(s0, PmiVersion::V1, 0, 3);
        c.fence()
    });
    let t2 = thread::spawn(move || {
        let mut c = connect(s2, PmiVersion::V2, 2, 3);
        c.fence()
    });
    let mut c1 = connect(s1, PmiVersion::V1, 1, 3);
    // Wait until both others are inside the fence, then die.
    events_until(&rx, |ev| {
        ev.iter()
            .filter(|e| matches!(e, PmiEvent::Initialized { .. }))
            .count()
            == 3
    });
    thread::sleep(Duration::from_millis(200));
    c1.put("k", "v").unwrap();
    drop(c1);
    assert!(matches!(t0.join().unwrap(), Err(PmiError::Rc { .. })));
    assert!(matches!(t2.join().unwrap(), Err(PmiError::Rc { .. })));
    handle.shutdown();
}

#[test]
fn node_attributes_wait_for_a_local_put() {
    // Ranks 0,1 on node 0; rank 2 on node 1.
    let (handle, _rx, mut s) = start(config(3, "(vector,(0,1,2),(1,1,1))"));
    let mut r0 = Raw::new(s.remove(0));
    let mut r1 = Raw::new(s.remove(0));
    let mut r2 = Raw::new(s.remove(0));
    assert_eq!(
        r0.v2("cmd=info-getnodeattr;key=seg;wait=FALSE;")
            .get("found"),
        Some("FALSE")
    );
    r0.send(&f2("cmd=info-getnodeattr;key=seg;wait=TRUE;thrid=1;"));
    r2.send(&f2("cmd=info-getnodeattr;key=seg;wait=TRUE;"));
    r0.silent_for(Duration::from_millis(200));
    assert_eq!(
        r1.v2("cmd=info-putnodeattr;key=seg;value=shm-0;").rc(),
        Ok(0)
    );
    let m = r0.frame();
    assert_eq!(m.cmd, "info-getnodeattr-response");
    assert_eq!(
        (m.get("found"), m.get("value"), m.get("thrid")),
        (Some("TRUE"), Some("shm-0"), Some("1"))
    );
    // Rank 2 is on another node: still waiting until its own node has the key.
    r2.silent_for(Duration::from_millis(200));
    assert_eq!(
        r2.v2_after_wait("cmd=info-putnodeattr;key=seg;value=shm-1;")
            .0
            .get("value"),
        Some("shm-1")
    );
    handle.shutdown();
}

impl Raw {
    /// Sends a put whose own reply and a waiting reply both arrive; returns
    /// (waiting reply, put reply) in arrival order sorted by command.
    fn v2_after_wait(&mut self, body: &str) -> (Message, Message) {
        self.send(format!("{:<6}{body}", body.len()).as_bytes());
        let a = self.frame();
        let b = self.frame();
        if a.cmd == "info-getnodeattr-response" {
            (a, b)
        } else {
            (b, a)
        }
    }
}

#[test]
fn shutdown_closes_connections() {
    let (handle, _rx, mut s) = start(config(2, ""));
    let mut a = Raw::new(s.remove(0));
    a.v1("cmd=init pmi_version=1 pmi_subversion=1\n");
    let t = Instant::now();
    handle.shutdown();
    assert!(t.elapsed() < Duration::from_secs(30));
    a.closed();
}

#[test]
fn bad_configurations_are_refused() {
    assert!(PmiServer::new(config(0, "")).is_err());
    let mut c = config(2, "");
    c.kvsname = "has space".into();
    assert!(PmiServer::new(c).is_err());
    let mut c = config(2, "");
    c.kvsname = String::new();
    assert!(PmiServer::new(c).is_err());
    let mut c = config(2, "");
    c.job_attrs = vec![("k".into(), "a;b".into())];
    assert!(PmiServer::new(c).is_err());
    // A mapping that does not parse is not served (clients fall back).
    let (handle, _rx, mut s) = start(config(1, "(vector,(0,1"));
    let mut a = Raw::new(s.remove(0));
    assert_eq!(
        a.v1("cmd=get kvsname=tmpi-test-kvs key=PMI_process_mapping\n")
            .get("found"),
        Some("FALSE")
    );
    handle.shutdown();
}
