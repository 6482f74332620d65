//! The PMI client against scripted servers speaking the recorded Hydra and
//! the Slurm dialects (`reference/pmi.md`), over real socketpairs. The
//! scripted side checks the exact bytes the client sends, one message per
//! read, like Slurm's agent reads them. Every read has a timeout.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::os::fd::AsRawFd;
use std::os::unix::net::UnixStream;
use std::thread::{self, JoinHandle};
use std::time::Duration;

use tmpi_base::modex::{Modex, ModexError};
use tmpi_base::pmi::wire::{parse_v1_line, parse_v2_frame, Message, V2_MAX_BODY};
use tmpi_base::pmi::{ConnectOptions, PmiClient, PmiError, PmiModex, PmiVersion};

const TIMEOUT: Duration = Duration::from_secs(20);

fn pair() -> (UnixStream, UnixStream) {
    let (a, b) = UnixStream::pair().unwrap();
    a.set_read_timeout(Some(TIMEOUT)).unwrap();
    b.set_read_timeout(Some(TIMEOUT)).unwrap();
    (a, b)
}

fn v2(body: &str) -> String {
    format!("{:<6}{body}", body.len())
}

fn v2_hydra(body: &str) -> String {
    format!("{:>6}{body}", body.len())
}

/// One step of a script: the exact bytes of one client message (received by
/// one read), then the reply, written in `pieces` writes.
struct Step {
    expect: String,
    reply: String,
    pieces: usize,
}

fn step(expect: impl Into<String>, reply: impl Into<String>) -> Step {
    Step {
        expect: expect.into(),
        reply: reply.into(),
        pieces: 1,
    }
}

/// Plays `script` on the server end; the thread returns an error text on
/// the first mismatch. After the script, it waits for EOF or closes when
/// `close_after`.
fn scripted(
    mut s: UnixStream,
    script: Vec<Step>,
    close_after: bool,
) -> JoinHandle<Result<(), String>> {
    thread::spawn(move || {
        for (i, st) in script.into_iter().enumerate() {
            let mut buf = vec![0u8; 4096];
            let n = s
                .read(&mut buf)
                .map_err(|e| format!("step {i}: read: {e}"))?;
            let got = String::from_utf8_lossy(&buf[..n]).into_owned();
            if got != st.expect {
                return Err(format!("step {i}: expected {:?}, got {got:?}", st.expect));
            }
            let bytes = st.reply.as_bytes();
            let chunk = bytes.len().div_ceil(st.pieces.max(1)).max(1);
            for piece in bytes.chunks(chunk) {
                s.write_all(piece)
                    .map_err(|e| format!("step {i}: write: {e}"))?;
                if st.pieces > 1 {
                    thread::sleep(Duration::from_millis(30));
                }
            }
        }
        if !close_after {
            let mut rest = Vec::new();
            let _ = s.read_to_end(&mut rest);
            if !rest.is_empty() {
                return Err(format!(
                    "unexpected trailing bytes {:?}",
                    String::from_utf8_lossy(&rest)
                ));
            }
        }
        Ok(())
    })
}

fn opts(rank: u32, size: u32) -> ConnectOptions {
    ConnectOptions {
        rank: Some(rank),
        size: Some(size),
        ..Default::default()
    }
}

const KVS: &str = "kvs_29599_0_825971942_vm";

fn hydra_v1_handshake() -> Vec<Step> {
    vec![
        step(
            "cmd=init pmi_version=1 pmi_subversion=1\n",
            "cmd=response_to_init pmi_version=1 pmi_subversion=1 rc=0\n",
        ),
        step(
            "cmd=get_maxes\n",
            "cmd=maxes kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        step("cmd=get_appnum\n", "cmd=appnum appnum=0\n"),
        step(
            "cmd=get_my_kvsname\n",
            format!("cmd=my_kvsname kvsname={KVS}\n"),
        ),
    ]
}

#[test]
fn hydra_pmi1_recorded_session() {
    let (c, s) = pair();
    let mut script = hydra_v1_handshake();
    script.extend([
        step(
            format!("cmd=put kvsname={KVS} key=addr-0 value=rank0=hello\n"),
            "cmd=put_result rc=0 msg=success\n",
        ),
        Step {
            expect: "cmd=barrier_in\n".into(),
            reply: "cmd=barrier_out\n".into(),
            pieces: 3,
        },
        Step {
            expect: format!("cmd=get kvsname={KVS} key=addr-1\n"),
            reply: "cmd=get_result rc=0 msg=success value=rank1=hello\n".into(),
            pieces: 4,
        },
        step(
            format!("cmd=get kvsname={KVS} key=no-such-key\n"),
            "cmd=get_result rc=-1 msg=key_no-such-key_not_found value=unknown\n",
        ),
        step(
            format!("cmd=get kvsname={KVS} key=PMI_process_mapping\n"),
            "cmd=get_result rc=0 msg=success value=(vector,(0,1,1))\n",
        ),
        step("cmd=finalize\n", "cmd=finalize_ack\n"),
    ]);
    let server = scripted(s, script, false);
    let mut c = PmiClient::connect(c, PmiVersion::V1, &opts(0, 3)).unwrap();
    assert_eq!(
        (c.rank(), c.size(), c.appnum(), c.kvsname()),
        (0, 3, 0, KVS)
    );
    assert_eq!((c.keylen_max(), c.vallen_max()), (64, 1024));
    c.put("addr-0", "rank0=hello").unwrap();
    c.fence().unwrap();
    assert_eq!(
        c.get(Some(1), "addr-1").unwrap().as_deref(),
        Some("rank1=hello")
    );
    assert_eq!(c.get(None, "no-such-key").unwrap(), None);
    let info = c.process_info().unwrap();
    assert_eq!(info.node_of, vec![0, 0, 0]);
    assert_eq!((info.local_rank, info.local_size, info.node_id), (0, 3, 0));
    assert_eq!(info.job_id, KVS);
    // Cached: no second exchange.
    assert_eq!(c.process_info().unwrap(), info);
    c.finalize().unwrap();
    assert!(matches!(c.put("a", "b"), Err(PmiError::Finalized)));
    drop(c);
    server.join().unwrap().unwrap();
}

#[test]
fn slurm_pmi2_session_exact_bytes() {
    let (c, s) = pair();
    let script = vec![
        step("cmd=init pmi_version=2 pmi_subversion=0\n", "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n"),
        step(
            v2("cmd=fullinit;pmijobid=77.0;pmirank=3;threaded=FALSE;"),
            v2("cmd=fullinit-response;rc=0;pmi-version=2;pmi-subversion=0;rank=3;size=4;appnum=-1;debugged=FALSE;pmiverbose=FALSE;"),
        ),
        step(v2("cmd=job-getid;"), v2("cmd=job-getid-response;rc=0;jobid=77.0;")),
        step(v2("cmd=kvs-put;key=k;value=a=b=c;"), v2("cmd=kvs-put-response;rc=0;")),
        Step { expect: v2("cmd=kvs-fence;"), reply: v2("cmd=kvs-fence-response;rc=0;"), pieces: 5 },
        step(v2("cmd=kvs-get;jobid=77.0;srcid=2;key=k2;"), v2("cmd=kvs-get-response;rc=0;found=TRUE;value=x y;")),
        step(v2("cmd=kvs-get;jobid=77.0;srcid=-1;key=nope;"), v2("cmd=kvs-get-response;found=FALSE;rc=0;")),
        step(
            v2("cmd=info-getjobattr;key=PMI_process_mapping;"),
            v2("cmd=info-getjobattr-response;rc=0;found=TRUE;value=(vector,(0,2,2));"),
        ),
        step(v2("cmd=finalize;"), v2("cmd=finalize-response;rc=0;")),
    ];
    let server = scripted(s, script, true);
    let o = ConnectOptions {
        rank: Some(3),
        size: Some(4),
        jobid: Some("77.0".into()),
        pmi_id: None,
    };
    let mut c = PmiClient::connect(c, PmiVersion::V2, &o).unwrap();
    assert_eq!(
        (c.rank(), c.size(), c.appnum(), c.kvsname()),
        (3, 4, -1, "77.0")
    );
    assert!(matches!(
        c.put("k", "a b"),
        Err(PmiError::InvalidValue { .. })
    ));
    c.put("k", "a=b=c").unwrap();
    c.fence().unwrap();
    assert_eq!(c.get(Some(2), "k2").unwrap().as_deref(), Some("x y"));
    assert_eq!(c.get(None, "nope").unwrap(), None);
    let info = c.process_info().unwrap();
    assert_eq!(info.node_of, vec![0, 0, 1, 1]);
    assert_eq!((info.node_id, info.local_rank, info.local_size), (1, 1, 2));
    assert_eq!(info.job_id, "77_0");
    c.finalize().unwrap();
    server.join().unwrap().unwrap();
}

#[test]
fn hydra_pmi2_right_aligned_lengths_and_pmi_id() {
    let (c, s) = pair();
    let script = vec![
        step("cmd=init pmi_version=2 pmi_subversion=0\n", "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n"),
        // PMI_ID wins over PMI_RANK; no pmijobid without PMI_JOBID.
        step(
            v2("cmd=fullinit;pmirank=5;threaded=FALSE;"),
            v2_hydra("cmd=fullinit-response;pmi-version=2;pmi-subversion=0;rank=5;size=6;appnum=0;debugged=FALSE;pmiverbose=FALSE;rc=0;"),
        ),
        step(v2("cmd=job-getid;"), v2_hydra("cmd=job-getid-response;jobid=kvs_31187_0_927521761_vm;rc=0;")),
        step(v2("cmd=info-getjobattr;key=PMI_process_mapping;"), v2_hydra("cmd=info-getjobattr-response;found=FALSE;rc=0;")),
        // Fallback: host-name exchange.
        step(
            v2(&format!("cmd=kvs-put;key=tmpi-host-5;value={};", b64(&tmpi_base::pmi::hostname()))),
            v2_hydra("cmd=kvs-put-response;rc=0;"),
        ),
        step(v2("cmd=kvs-fence;"), v2_hydra("cmd=kvs-fence-response;rc=0;")),
    ];
    let mut script = script;
    let me = b64(&tmpi_base::pmi::hostname());
    let other = b64("other-host");
    for r in 0..6 {
        let v = if r % 2 == 1 { &me } else { &other };
        script.push(step(
            v2(&format!(
                "cmd=kvs-get;jobid=kvs_31187_0_927521761_vm;srcid={r};key=tmpi-host-{r};"
            )),
            v2_hydra(&format!("cmd=kvs-get-response;found=TRUE;value={v};rc=0;")),
        ));
    }
    let server = scripted(s, script, true);
    let o = ConnectOptions {
        rank: Some(1),
        size: Some(6),
        jobid: None,
        pmi_id: Some(5),
    };
    let mut c = PmiClient::connect(c, PmiVersion::V2, &o).unwrap();
    assert_eq!(c.rank(), 5);
    let info = c.process_info().unwrap();
    assert_eq!(info.node_of, vec![0, 1, 0, 1, 0, 1]);
    assert_eq!((info.node_id, info.local_rank, info.local_size), (1, 2, 3));
    drop(c);
    server.join().unwrap().unwrap();
}

fn b64(s: &str) -> String {
    // Reference encoder for the test (URL-safe, no padding).
    const A: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let b = s.as_bytes();
    let mut out = String::new();
    for c in b.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for i in 0..=c.len() {
            out.push(A[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

#[test]
fn slurm_pmi1_not_found_and_error_replies_are_typed() {
    let (c, s) = pair();
    let mut script = vec![
        step(
            "cmd=init pmi_version=1 pmi_subversion=1\n",
            "cmd=response_to_init rc=0 pmi_version=1 pmi_subversion=1\n",
        ),
        step(
            "cmd=get_maxes\n",
            "cmd=maxes rc=0 kvsname_max=256 keylen_max=64 vallen_max=1024\n",
        ),
        step("cmd=get_appnum\n", "cmd=appnum rc=0 appnum=-1\n"),
        step("cmd=get_my_kvsname\n", "cmd=my_kvsname rc=0 kvsname=12.0\n"),
    ];
    script.extend([
        step("cmd=get kvsname=12.0 key=x\n", "cmd=get_result rc=1\n"),
        step(
            "cmd=put kvsname=12.0 key=y value=1\n",
            "cmd=put_result rc=5 msg=no_space\n",
        ),
        step("cmd=barrier_in\n", "cmd=put_result rc=0\n"),
        step("cmd=barrier_in\n", "cmd=barrier_out rc=zero\n"),
        step("cmd=barrier_in\n", "garbage\n"),
        step("cmd=barrier_in\n", ""),
    ]);
    let server = scripted(s, script, true);
    let mut c = PmiClient::connect(c, PmiVersion::V1, &opts(1, 2)).unwrap();
    assert_eq!(c.appnum(), -1);
    assert_eq!(c.get(None, "x").unwrap(), None);
    match c.put("y", "1") {
        Err(PmiError::Rc {
            rc: 5,
            msg: Some(m),
            ..
        }) => assert_eq!(m, "no_space"),
        other => panic!("{other:?}"),
    }
    assert!(matches!(c.fence(), Err(PmiError::Protocol { .. })));
    assert!(matches!(c.fence(), Err(PmiError::Protocol { .. })));
    assert!(matches!(c.fence(), Err(PmiError::Wire { .. })));
    // The script ends and the server closes the socket.
    assert!(matches!(c.fence(), Err(PmiError::Closed { .. })));
    server.join().unwrap().unwrap();
}

#[test]
fn refused_init_is_an_error() {
    let (c, s) = pair();
    let server = scripted(
        s,
        vec![step(
            "cmd=init pmi_version=2 pmi_subversion=0\n",
            "cmd=response_to_init rc=1 pmi_version=1 pmi_subversion=1\n",
        )],
        true,
    );
    let r = PmiClient::connect(c, PmiVersion::V2, &opts(0, 1));
    assert!(matches!(r, Err(PmiError::Rc { rc: 1, .. })), "{r:?}");
    server.join().unwrap().unwrap();
    // PMI-1 needs rank and size.
    let (c, _s) = pair();
    let r = PmiClient::connect(c, PmiVersion::V1, &ConnectOptions::default());
    assert!(
        matches!(
            r,
            Err(PmiError::Env {
                var: "PMI_RANK",
                ..
            })
        ),
        "{r:?}"
    );
    let (c, _s) = pair();
    let r = PmiClient::connect(c, PmiVersion::V1, &opts(4, 4));
    assert!(matches!(r, Err(PmiError::Env { .. })), "{r:?}");
}

/// A launcher claiming a job beyond `MAX_JOB_SIZE` is refused with a typed
/// error before the client sizes any per-rank table by it (fuzz finding:
/// `size=4000000000` made `process_info` reserve tens of gigabytes).
#[test]
fn absurd_job_size_is_refused() {
    use tmpi_base::pmi::MAX_JOB_SIZE;
    // PMI-1: the size comes from PMI_SIZE (or the initack).
    let (c, _s) = pair();
    let r = PmiClient::connect(c, PmiVersion::V1, &opts(0, 4_000_000_000));
    match r {
        Err(PmiError::Env { var, reason, .. }) => {
            assert_eq!(var, "PMI_SIZE");
            assert!(reason.contains("4000000000"), "{reason}");
        }
        other => panic!("expected PMI_SIZE error, got {other:?}"),
    }
    // The largest accepted size passes the check (it then fails later only
    // because the server end is closed).
    let (c, s) = pair();
    drop(s);
    let r = PmiClient::connect(c, PmiVersion::V1, &opts(0, MAX_JOB_SIZE));
    assert!(!matches!(r, Err(PmiError::Env { .. })), "{r:?}");
    // PMI-2: the size comes from fullinit-response.
    let (c, s) = pair();
    let server = scripted(
        s,
        vec![
            step(
                "cmd=init pmi_version=2 pmi_subversion=0\n",
                "cmd=response_to_init pmi_version=2 pmi_subversion=0 rc=0\n",
            ),
            step(
                v2("cmd=fullinit;pmirank=0;threaded=FALSE;"),
                v2("cmd=fullinit-response;rc=0;rank=0;size=4000000000;appnum=-1;"),
            ),
        ],
        true,
    );
    let r = PmiClient::connect(c, PmiVersion::V2, &opts(0, 1));
    match r {
        Err(PmiError::Protocol { during, detail }) => {
            assert_eq!(during, "fullinit");
            assert!(detail.contains("4000000000"), "{detail}");
        }
        other => panic!("expected a fullinit protocol error, got {other:?}"),
    }
    server.join().unwrap().unwrap();
}

/// A tiny KVS server for one connection that checks the limits every client
/// message must respect and records the largest message.
fn limit_checking_server(mut s: UnixStream, kvsname: String) -> JoinHandle<Result<usize, String>> {
    thread::spawn(move || {
        let mut kvs: HashMap<String, String> = HashMap::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut v2_mode = false;
        let mut largest = 0;
        let mut chunk = [0u8; 8192];
        loop {
            // One message per read (lockstep client).
            let n = s.read(&mut chunk).map_err(|e| e.to_string())?;
            if n == 0 {
                return Ok(largest);
            }
            buf.extend_from_slice(&chunk[..n]);
            largest = largest.max(n);
            let msg = if v2_mode {
                let (m, used) = parse_v2_frame(&buf, V2_MAX_BODY)
                    .map_err(|e| e.to_string())?
                    .ok_or("partial frame")?;
                if used != buf.len() {
                    return Err("more than one message in a read".into());
                }
                m
            } else {
                if buf.len() > 1024 || buf.last() != Some(&b'\n') {
                    return Err(format!("PMI-1 line of {} bytes", buf.len()));
                }
                parse_v1_line(&buf).map_err(|e| e.to_string())?
            };
            buf.clear();
            if let Some(v) = msg.get("value") {
                if v.len() > 1023 {
                    return Err(format!("value of {} bytes", v.len()));
                }
            }
            let reply = match msg.cmd.as_str() {
                "init" => {
                    v2_mode = msg.get("pmi_version") == Some("2");
                    let v = if v2_mode {
                        "2 pmi_subversion=0"
                    } else {
                        "1 pmi_subversion=1"
                    };
                    s.write_all(format!("cmd=response_to_init pmi_version={v} rc=0\n").as_bytes())
                        .unwrap();
                    continue;
                }
                "get_maxes" => Message::new("maxes")
                    .with("kvsname_max", 256)
                    .with("keylen_max", 64)
                    .with("vallen_max", 1024),
                "get_appnum" => Message::new("appnum").with("appnum", 0),
                "get_my_kvsname" => Message::new("my_kvsname").with("kvsname", &kvsname),
                "fullinit" => Message::new("fullinit-response")
                    .with("rank", 0)
                    .with("size", 1)
                    .with("rc", 0),
                "job-getid" => Message::new("job-getid-response").with("jobid", &kvsname),
                "put" | "kvs-put" => {
                    kvs.insert(
                        msg.get("key").unwrap().into(),
                        msg.get("value").unwrap().into(),
                    );
                    Message::new(if v2_mode {
                        "kvs-put-response"
                    } else {
                        "put_result"
                    })
                    .with("rc", 0)
                }
                "barrier_in" => Message::new("barrier_out"),
                "kvs-fence" => Message::new("kvs-fence-response").with("rc", 0),
                "get" | "kvs-get" => match kvs.get(msg.get("key").unwrap()) {
                    Some(v) => Message::new(if v2_mode {
                        "kvs-get-response"
                    } else {
                        "get_result"
                    })
                    .with("rc", 0)
                    .with("found", "TRUE")
                    .with("value", v),
                    None => Message::new(if v2_mode {
                        "kvs-get-response"
                    } else {
                        "get_result"
                    })
                    .with("rc", i32::from(!v2_mode))
                    .with("found", "FALSE"),
                },
                other => return Err(format!("unexpected command {other}")),
            };
            let bytes = if v2_mode {
                tmpi_base::pmi::format_v2_frame(&reply).unwrap()
            } else {
                tmpi_base::pmi::format_v1_line(&reply).unwrap()
            };
            s.write_all(&bytes).unwrap();
        }
    })
}

#[test]
fn modex_keeps_pmi1_lines_within_1024_bytes_even_with_long_kvsnames() {
    for version in [PmiVersion::V1, PmiVersion::V2] {
        let kvsname = "k".repeat(200);
        let (c, s) = pair();
        let server = limit_checking_server(s, kvsname.clone());
        let client = PmiClient::connect(c, version, &opts(0, 1)).unwrap();
        if version == PmiVersion::V1 {
            assert!(client.value_budget("abc") < 1023 - 200);
        }
        let mut m = PmiModex::new(client);
        let value: Vec<u8> = (0..20_000u32).map(|i| (i ^ (i >> 8)) as u8).collect();
        m.put("a.long-key_name.0123456789", &value).unwrap();
        m.put("tiny", &[0, b' ', b';', b'\n', 0xff]).unwrap();
        m.fence().unwrap();
        assert_eq!(m.get(0, "a.long-key_name.0123456789").unwrap(), value);
        assert_eq!(m.get(0, "tiny").unwrap(), vec![0, b' ', b';', b'\n', 0xff]);
        assert!(matches!(
            m.get(0, "absent"),
            Err(ModexError::NotFound { .. })
        ));
        // A value put directly that is not modex data is reported, not decoded.
        m.client().put("bogus:0", "hello").unwrap();
        assert!(matches!(
            m.get(0, "bogus"),
            Err(ModexError::Malformed { .. })
        ));
        drop(m);
        let largest = server.join().unwrap().unwrap();
        assert!(
            largest > 900,
            "chunks should use the budget, largest message {largest}"
        );
    }
}

#[test]
fn client_refuses_what_servers_cannot_store() {
    let (c, s) = pair();
    let server = limit_checking_server(s, "kvs".into());
    let mut c = PmiClient::connect(c, PmiVersion::V1, &opts(0, 1)).unwrap();
    for key in ["", "has space", "a=b", "a;b", "PMI_mine", &"k".repeat(64)] {
        assert!(
            matches!(c.put(key, "v"), Err(PmiError::InvalidKey { .. })),
            "{key:?}"
        );
    }
    for value in ["a b", "a;b", "a\nb"] {
        assert!(
            matches!(c.put("k", value), Err(PmiError::InvalidValue { .. })),
            "{value:?}"
        );
    }
    let budget = c.value_budget("k");
    assert_eq!(budget, 1024 - "cmd=put kvsname=kvs key=k value=\n".len());
    c.put("k", &"v".repeat(budget)).unwrap();
    assert!(matches!(
        c.put("k", &"v".repeat(budget + 1)),
        Err(PmiError::InvalidValue { .. })
    ));
    drop(c);
    server.join().unwrap().unwrap();
}

#[test]
fn environment_selects_the_transport() {
    let env = |vars: &'static [(&'static str, &'static str)]| {
        move |k: &str| {
            vars.iter()
                .find(|(n, _)| *n == k)
                .map(|(_, v)| v.to_string())
        }
    };
    // No launcher: singleton.
    let mut c = PmiClient::connect_with_env(env(&[])).unwrap();
    assert_eq!(
        (c.version(), c.rank(), c.size()),
        (PmiVersion::Singleton, 0, 1)
    );
    let info = c.process_info().unwrap();
    assert_eq!(
        (info.size, info.local_size, info.node_of.clone()),
        (1, 1, vec![0])
    );
    assert!(info.job_id.starts_with("singleton-"));
    assert!(info
        .job_id
        .chars()
        .all(|ch| ch.is_ascii_alphanumeric() || ch == '-' || ch == '_'));
    c.put("k", "v").unwrap();
    c.fence().unwrap();
    assert_eq!(c.get(Some(0), "k").unwrap().as_deref(), Some("v"));
    c.finalize().unwrap();
    // Started by a PMIx launcher (Open MPI's mpirun) where libpmix cannot be
    // loaded: an error naming the variable, the library and how to start
    // the program instead, not a job of one per process; a one-process job
    // runs as a singleton. (The library is pointed at a missing name:
    // PMIx_Init itself is exercised under a real mpirun, in
    // tests/tests/pmix_mpirun.rs.)
    const NO_LIB: (&str, &str) = ("TMPI_PMIX_LIBRARY", "libpmix-missing.so.0");
    for (vars, var) in [
        (
            &[
                ("PMIX_NAMESPACE", "prterun-host-1234@1"),
                ("PMIX_RANK", "1"),
                NO_LIB,
            ][..],
            "PMIX_NAMESPACE",
        ),
        (&[("PMIX_RANK", "0"), NO_LIB][..], "PMIX_RANK"),
        (
            &[("TMPI_MCA_pmi_client", "pmix"), NO_LIB][..],
            "TMPI_MCA_pmi_client",
        ),
    ] {
        match PmiClient::connect_with_env(env(vars)) {
            Err(e @ PmiError::PmixUnavailable { var: v, .. }) => {
                assert_eq!(v, var, "{e}");
                let text = e.to_string();
                assert!(
                    text.contains("libpmix-missing.so.0")
                        && text.contains("libpmix2")
                        && text.contains("tmpirun"),
                    "the error names the library and says what to do: {text}"
                );
            }
            other => panic!("{vars:?}: want PmixUnavailable, got {other:?}"),
        }
    }
    // Open MPI's variables without PMIx's: a launcher tmpi cannot talk to.
    match PmiClient::connect_with_env(env(&[("OMPI_COMM_WORLD_SIZE", "2")])) {
        Err(e @ PmiError::Env { .. }) => assert!(e.to_string().contains("tmpirun"), "{e}"),
        other => panic!("want an environment error, got {other:?}"),
    }
    let c = PmiClient::connect_with_env(env(&[
        ("PMIX_NAMESPACE", "prterun-host-1234@1"),
        ("OMPI_COMM_WORLD_SIZE", "1"),
        NO_LIB,
    ]))
    .unwrap();
    assert_eq!((c.version(), c.size()), (PmiVersion::Singleton, 1));
    // The pmi_client parameter: forced singleton under a PMIx launcher, a
    // bad value refused.
    let c = PmiClient::connect_with_env(env(&[
        ("PMIX_NAMESPACE", "prterun-host-1234@1"),
        ("PMIX_RANK", "1"),
        ("TMPI_MCA_pmi_client", "singleton"),
    ]))
    .unwrap();
    assert_eq!((c.version(), c.size()), (PmiVersion::Singleton, 1));
    assert!(matches!(
        PmiClient::connect_with_env(env(&[("TMPI_MCA_pmi_client", "pmi3")])),
        Err(PmiError::Env {
            var: "TMPI_MCA_pmi_client",
            ..
        })
    ));
    // PMI_PORT needs PMI_ID; a port nobody listens on is an I/O error.
    assert!(matches!(
        PmiClient::connect_with_env(env(&[("PMI_PORT", "127.0.0.1:1")])),
        Err(PmiError::Env { var: "PMI_ID", .. })
    ));
    assert!(matches!(
        PmiClient::connect_with_env(env(&[("PMI_PORT", "127.0.0.1:1"), ("PMI_ID", "0")])),
        Err(PmiError::Io { .. })
    ));
    assert!(matches!(
        PmiClient::connect_with_env(env(&[("TMPI_PMI_VERSION", "3")])),
        Err(PmiError::Env {
            var: "TMPI_PMI_VERSION",
            ..
        })
    ));
    assert!(matches!(
        PmiClient::connect_with_env(env(&[
            ("PMI_FD", "abc"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "1")
        ])),
        Err(PmiError::Env { var: "PMI_FD", .. })
    ));
    assert!(matches!(
        PmiClient::connect_with_env(env(&[
            ("PMI_FD", "3"),
            ("PMI_RANK", "x"),
            ("PMI_SIZE", "1")
        ])),
        Err(PmiError::Env {
            var: "PMI_RANK",
            ..
        })
    ));
    assert!(matches!(
        PmiClient::connect_with_env(env(&[
            ("PMI_FD", "987654"),
            ("PMI_RANK", "0"),
            ("PMI_SIZE", "1")
        ])),
        Err(PmiError::Fd(_))
    ));
    // A descriptor that is not a socket is refused and left open.
    let file = std::fs::File::open("/proc/self/stat").unwrap();
    let fd = file.as_raw_fd().to_string();
    let lookup = |k: &str| match k {
        "PMI_FD" => Some(fd.clone()),
        "PMI_RANK" => Some("0".into()),
        "PMI_SIZE" => Some("1".into()),
        _ => None,
    };
    assert!(matches!(
        PmiClient::connect_with_env(lookup),
        Err(PmiError::Fd(_))
    ));
    assert!(std::fs::read_link(format!("/proc/self/fd/{fd}")).is_ok());
    drop(file);

    // A real socket named by PMI_FD, PMI-2 chosen by PMI_JOBID; then the
    // descriptor cannot be adopted a second time.
    let (c, s) = pair();
    let fd = c.as_raw_fd().to_string();
    std::mem::forget(c); // ownership passes to the client through PMI_FD
    let script = vec![
        step(
            "cmd=init pmi_version=2 pmi_subversion=0\n",
            "cmd=response_to_init rc=0 pmi_version=2 pmi_subversion=0\n",
        ),
        step(
            v2("cmd=fullinit;pmijobid=9.1;pmirank=0;threaded=FALSE;"),
            v2("cmd=fullinit-response;rc=0;rank=0;size=1;appnum=-1;"),
        ),
        step(
            v2("cmd=job-getid;"),
            v2("cmd=job-getid-response;rc=0;jobid=9.1;"),
        ),
        step(v2("cmd=finalize;"), v2("cmd=finalize-response;rc=0;")),
    ];
    let server = scripted(s, script, false);
    let fd2 = fd.clone();
    let lookup = move |k: &str| match k {
        "PMI_FD" => Some(fd2.clone()),
        "PMI_RANK" => Some("0".into()),
        "PMI_SIZE" => Some("1".into()),
        "PMI_JOBID" => Some("9.1".into()),
        _ => None,
    };
    let mut c = PmiClient::connect_with_env(lookup.clone()).unwrap();
    assert_eq!((c.version(), c.kvsname()), (PmiVersion::V2, "9.1"));
    c.finalize().unwrap();
    drop(c);
    server.join().unwrap().unwrap();
    let (again, _keep) = pair();
    let fd3 = again.as_raw_fd().to_string();
    let lookup = move |k: &str| match k {
        "PMI_FD" => Some(fd3.clone()),
        "PMI_RANK" => Some("0".into()),
        "PMI_SIZE" => Some("1".into()),
        _ => None,
    };
    assert!(matches!(
        PmiClient::connect_with_env(lookup),
        Err(PmiError::Fd(_))
    ));
}

/// Hydra's `-pmi-port` mode over real TCP: `initack` first, rank and size
/// from the `cmd=set` lines, then the usual PMI-1 session.
#[test]
fn pmi_port_mode_over_tcp() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().to_string();
    let server = thread::spawn(move || -> Result<(), String> {
        let (s, _) = listener.accept().map_err(|e| e.to_string())?;
        s.set_read_timeout(Some(TIMEOUT)).unwrap();
        let mut sock = s;
        let mut script = vec![step(
            "cmd=initack pmiid=1\n",
            "cmd=initack\ncmd=set size=2\ncmd=set rank=1\ncmd=set debug=0\n",
        )];
        script.extend(hydra_v1_handshake());
        script.push(step("cmd=finalize\n", "cmd=finalize_ack\n"));
        for (i, st) in script.into_iter().enumerate() {
            let mut buf = vec![0u8; 4096];
            let n = sock.read(&mut buf).map_err(|e| format!("step {i}: {e}"))?;
            let got = String::from_utf8_lossy(&buf[..n]).into_owned();
            if got != st.expect {
                return Err(format!("step {i}: expected {:?}, got {got:?}", st.expect));
            }
            sock.write_all(st.reply.as_bytes())
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    });
    let lookup = move |k: &str| match k {
        "PMI_PORT" => Some(port.clone()),
        "PMI_ID" => Some("1".into()),
        _ => None,
    };
    let mut c = PmiClient::connect_with_env(lookup).unwrap();
    assert_eq!(
        (c.version(), c.rank(), c.size(), c.kvsname()),
        (PmiVersion::V1, 1, 2, KVS)
    );
    c.finalize().unwrap();
    server.join().unwrap().unwrap();
}
