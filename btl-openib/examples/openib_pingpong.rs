//! Two real processes over btl-openib on a real libibverbs device (rxe in
//! the CI VM; any RoCE/IB device works): component init with modex wire-up,
//! eager messages both ways, a rendezvous (RTS, RDMA read by the receiver in
//! software, FIN), and a read with a wrong rkey surfacing as an error on that
//! read. On a device without tag matching (rxe), `btl_openib_tm_enable=1`
//! must warn and fall back to software matching.
//!
//! `openib_pingpong [DEVICE]` (default `rxe0`): the parent re-executes
//! itself as ranks 0 and 1, waits at most 120 s, and exits non-zero when a
//! rank failed. Prints `openib_pingpong: PASS` on success.

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, Sources};
use tmpi_btl_openib::dirmodex::DirModex;
use tmpi_btl_openib::{init, Btl, Event, FragKind, Module, Op, OpenibError};
use tmpi_pml::tag::{pack, Envelope};
use tmpi_verbs::wire::Rvh;
use tmpi_verbs::{Provider, WcStatus};

const N: u32 = 200;
const RNDV: usize = 4 << 20;

fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) as u8)
        .collect()
}

fn wait<P: Provider>(
    m: &mut Module<P>,
    evs: &mut Vec<Event>,
    what: &str,
    done: impl Fn(&[Event]) -> bool,
) -> Result<(), String> {
    let t = Instant::now();
    while !done(evs) {
        m.progress(evs).map_err(|e| format!("progress: {e}"))?;
        if t.elapsed() > Duration::from_secs(60) {
            return Err(format!("timed out waiting for {what}; events: {evs:?}"));
        }
    }
    Ok(())
}

fn check(c: bool, what: &str) -> Result<(), String> {
    if c {
        Ok(())
    } else {
        Err(what.to_string())
    }
}

fn tag(src: u32, t: i32) -> u64 {
    pack(Envelope {
        context: 1,
        source: src,
        tag: t,
    })
    .expect("fits")
}

fn rank_main<P: Provider>(m: &mut Module<P>, modex: &mut DirModex, me: u32) -> Result<(), String> {
    let peer = 1 - me;
    let mut evs = Vec::new();
    check(
        m.tm_caps().is_none(),
        "a device without TM caps must use software matching",
    )?;
    // Eager both ways, in order.
    for i in 0..N {
        let d = pattern(me * 10_000 + i, (i as usize * 131) % m.eager_limit());
        loop {
            match m.send_eager(peer, tag(me, i as i32), i, &d, u64::from(i)) {
                Ok(()) => break,
                Err(OpenibError::Busy) => {
                    m.progress(&mut evs).map_err(|e| e.to_string())?;
                }
                Err(e) => return Err(format!("send_eager: {e}")),
            }
        }
    }
    wait(m, &mut evs, "eager messages", |e| {
        e.iter().filter(|e| matches!(e, Event::Recv(_))).count() as u32 >= N
    })?;
    for (i, e) in evs.drain(..).enumerate() {
        let Event::Recv(f) = e else {
            return Err(format!("unexpected event {e:?}"));
        };
        let i = i as u32;
        check(
            f.kind == FragKind::Eager && f.peer == peer && f.tmh.app_ctx == i,
            "eager order",
        )?;
        check(
            f.payload() == &pattern(peer * 10_000 + i, (i as usize * 131) % m.eager_limit())[..],
            "eager data",
        )?;
    }
    println!("rank {me}: {N} eager messages received in order");
    let poll = |m: &mut Module<P>, evs: &mut Vec<Event>| {
        let _ = m.progress(evs);
    };
    if me == 0 {
        let src = pattern(7, RNDV);
        // SAFETY: `src` stays alive and unmodified until RndvDone.
        unsafe { m.send_rndv(1, tag(0, 99), 1, src.as_ptr(), src.len(), b"rts", 5) }
            .map_err(|e| e.to_string())?;
        wait(m, &mut evs, "FIN", |e| {
            e.iter().any(|e| matches!(e, Event::RndvDone { id: 5, .. }))
        })?;
        println!("rank 0: rendezvous of {RNDV} bytes finished (FIN received)");
        evs.clear();
        modex
            .barrier_with(|| poll(m, &mut evs))
            .map_err(|e| e.to_string())?;
    } else {
        wait(m, &mut evs, "RTS", |e| {
            e.iter()
                .any(|e| matches!(e, Event::Recv(f) if f.kind == FragKind::Rndv))
        })?;
        let Some(Event::Recv(f)) = evs.pop() else {
            return Err("no RTS".into());
        };
        check(f.payload() == b"rts", "RTS inline data")?;
        let rvh = f.rvh.ok_or("RTS without RVH")?;
        let mut dst = vec![0u8; RNDV];
        // SAFETY: `dst` untouched until GetDone.
        unsafe { m.get(0, dst.as_mut_ptr(), RNDV, rvh, 9) }.map_err(|e| e.to_string())?;
        wait(m, &mut evs, "RDMA read", |e| {
            e.iter().any(|e| matches!(e, Event::GetDone { id: 9, .. }))
        })?;
        check(dst == pattern(7, RNDV), "rendezvous data")?;
        m.send_fin(0, f.tmh, rvh).map_err(|e| e.to_string())?;
        println!("rank 1: {RNDV} bytes read by RDMA read, FIN sent");
        evs.clear();
        // A wrong rkey: the read fails with REM_ACCESS_ERR, reported on it.
        let bad = Rvh {
            rkey: rvh.rkey ^ 0x00ff_00ff,
            ..rvh
        };
        // SAFETY: as above.
        unsafe { m.get(0, dst.as_mut_ptr(), 4096, bad, 10) }.map_err(|e| e.to_string())?;
        wait(m, &mut evs, "failed read", |e| {
            e.iter().any(|e| matches!(e, Event::Failed { id: 10, .. }))
        })?;
        let ok = evs.iter().any(|e| {
            matches!(
                e,
                Event::Failed {
                    id: 10,
                    op: Op::Get,
                    error: OpenibError::Completion {
                        status: WcStatus::RemAccessErr,
                        ..
                    },
                    ..
                }
            )
        });
        check(ok, "bad rkey must fail the read with RemAccessErr")?;
        check(
            matches!(
                m.send_eager(0, 0, 0, b"x", 0),
                Err(OpenibError::PeerFailed(0))
            ),
            "connection marked broken",
        )?;
        println!("rank 1: bad rkey -> read failed with RemAccessErr, connection reported broken");
        drop(f);
        evs.clear();
        modex
            .barrier_with(|| poll(m, &mut evs))
            .map_err(|e| e.to_string())?;
    }
    Ok(())
}

fn child(device: &str, me: u32, dir: PathBuf) -> Result<(), String> {
    // Warnings (e.g. the TM fall-back) and errors on stderr, tagged by rank.
    let _ = tmpi_base::log::init_logging(me);
    let reg = Registry::new(Sources::default().with_cmdline([
        ("btl_openib_if_include".to_string(), device.to_string()),
        ("btl_openib_tm_enable".to_string(), "1".to_string()),
    ]));
    let info = ProcessInfo {
        rank: me,
        size: 2,
        local_rank: me,
        local_size: 2,
        node_id: 0,
        node_of: vec![0, 0],
        job_id: "pingpong".into(),
        hostname: "localhost".into(),
    };
    let mut modex = DirModex::new(&dir, me, 2);
    let (btl, reach) = init(&reg, &info, &mut modex).map_err(|e| format!("init: {e}"))?;
    check(reach[1 - me as usize], "peer reachable")?;
    match btl {
        Btl::Ibv(mut mods) => {
            let m = mods.first_mut().ok_or("no module")?;
            println!("rank {me}: module {}:{} (libibverbs)", m.device(), m.port());
            rank_main(m, &mut modex, me)
        }
        Btl::Soft(mut mods) => rank_main(&mut mods[0], &mut modex, me),
    }
}

fn main() {
    let device = std::env::args().nth(1).unwrap_or_else(|| "rxe0".into());
    if let Ok(r) = std::env::var("OPENIB_PINGPONG_RANK") {
        let dir = PathBuf::from(std::env::var("OPENIB_PINGPONG_DIR").expect("dir"));
        let me: u32 = r.parse().expect("rank");
        if let Err(e) = child(&device, me, dir) {
            eprintln!("rank {me}: FAILED: {e}");
            std::process::exit(1);
        }
        return;
    }
    let dir = std::env::temp_dir().join(format!("openib-pingpong-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("temp dir");
    let mut kids: Vec<_> = (0..2)
        .map(|r| {
            Command::new(std::env::current_exe().expect("exe"))
                .arg(&device)
                .env("OPENIB_PINGPONG_RANK", r.to_string())
                .env("OPENIB_PINGPONG_DIR", &dir)
                .spawn()
                .expect("spawn")
        })
        .collect();
    let t = Instant::now();
    let mut ok = true;
    for k in &mut kids {
        loop {
            if let Some(st) = k.try_wait().expect("wait") {
                ok &= st.success();
                break;
            }
            if t.elapsed() > Duration::from_secs(120) {
                let _ = k.kill();
                let _ = k.wait();
                eprintln!("openib_pingpong: a rank timed out");
                ok = false;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    if ok {
        println!("openib_pingpong: PASS");
    } else {
        println!("openib_pingpong: FAIL");
        std::process::exit(1);
    }
}
