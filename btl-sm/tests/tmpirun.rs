//! The sm BTL under the real launcher: `tmpirun` with its PMI server and
//! the PMI modex, and the crash case (a rank dies before its peers
//! attached: `tmpirun` removes the job's segments).
//!
//! Uses the `tmpirun` binary of the same target directory
//! (`cargo build -p tmpi-run` first); when it is not built these tests say
//! so on stderr and pass without running (`cargo test -p tmpi-btl-sm` alone
//! does not build other packages' binaries).

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_base::pmi::{PmiClient, PmiModex};
use tmpi_btl::{BtlComponent, BtlError, BtlRecvHandler};
use tmpi_btl_sm::SmComponent;

const MODE: &str = "TMPI_BTL_SM_TMPIRUN_MODE";
const OUT: &str = "TMPI_BTL_SM_TMPIRUN_OUT";

fn tmpirun() -> Option<PathBuf> {
    let exe = std::env::current_exe().ok()?;
    let p = exe.parent()?.parent()?.join("tmpirun");
    p.exists().then_some(p)
}

fn run(mode: &str, n: u32) -> Option<(i32, String, PathBuf)> {
    let Some(launcher) = tmpirun() else {
        eprintln!("tmpirun not built (cargo build -p tmpi-run): test not run");
        return None;
    };
    let out = std::env::temp_dir().join(format!("tmpi-sm-tmpirun-{}-{mode}", std::process::id()));
    let _ = std::fs::remove_dir_all(&out);
    std::fs::create_dir_all(&out).unwrap();
    let mut child = Command::new(launcher)
        .args(["-n", &n.to_string(), "--timeout", "60", "-x"])
        .arg(format!("{MODE}={mode}"))
        .arg("-x")
        .arg(format!("{OUT}={}", out.display()))
        .arg("--")
        .arg(std::env::current_exe().unwrap())
        .args([
            "tmpirun_child",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if t0.elapsed() > Duration::from_secs(90) {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let o = child.wait_with_output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr)
    );
    Some((o.status.code().unwrap_or(-1), text, out))
}

fn job_segments(job: &str) -> Vec<String> {
    let prefix = format!("tmpi-sm.{job}.");
    std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect()
}

#[test]
fn ring_over_pmi_modex_under_tmpirun() {
    let Some((code, text, out)) = run("ring", 3) else {
        return;
    };
    assert_eq!(code, 0, "{text}");
    let job = std::fs::read_to_string(out.join("job.0")).unwrap();
    assert!(job_segments(&job).is_empty());
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn crashed_rank_leaves_no_segment() {
    let Some((code, text, out)) = run("crash", 2) else {
        return;
    };
    assert_ne!(code, 0, "the job must fail: {text}");
    let job = std::fs::read_to_string(out.join("job.1")).unwrap();
    // rank 1 died with its segment created and nobody attached
    assert!(out.join("created.1").exists(), "{text}");
    assert!(job_segments(&job).is_empty(), "leftover segments of {job}");
    let _ = std::fs::remove_dir_all(&out);
}

#[test]
fn tmpirun_child() {
    let Ok(mode) = std::env::var(MODE) else {
        return;
    };
    let out = PathBuf::from(std::env::var(OUT).unwrap());
    let mut client = PmiClient::connect_from_env().unwrap();
    let info = client.process_info().unwrap();
    // every rank records the job id: in the crash case the launcher may end
    // rank 0 before it gets this far
    std::fs::write(out.join(format!("job.{}", info.rank)), &info.job_id).unwrap();
    let mut modex = PmiModex::new(client);
    let reg = Registry::new(Sources::from_process());
    let mut mods = SmComponent.init(&reg, &info, &mut modex).unwrap();
    let mut m = mods.pop().expect("sm module");
    std::fs::write(out.join(format!("created.{}", info.rank)), b"").unwrap();
    if mode == "crash" && info.rank == 1 {
        std::process::abort();
    }
    modex.fence().unwrap();
    let all: Vec<u32> = (0..info.size).collect();
    m.add_procs(&all, &mut modex).unwrap();
    modex.fence().unwrap();
    // token ring: 100 rounds
    let next = (info.rank + 1) % info.size;
    let mut got: Vec<u32> = Vec::new();
    let mut h = |_: u32, _: u8, b: &[u8]| got.push(u32::from_le_bytes(b.try_into().unwrap()));
    let t0 = Instant::now();
    for round in 0..100u32 {
        if info.rank == 0 {
            send(&mut *m, next, round, &mut h);
        }
        let mut got_one = false;
        while !got_one {
            m.progress(&mut |p: u32, t: u8, b: &[u8]| {
                assert_eq!(t, 9);
                assert_eq!(p, (info.rank + info.size - 1) % info.size);
                h(p, t, b);
                got_one = true;
            });
            assert!(t0.elapsed() < Duration::from_secs(30), "ring stalled");
        }
        if info.rank != 0 {
            send(&mut *m, next, round, &mut h);
        }
    }
    assert_eq!(got, (0..100).collect::<Vec<_>>());
    // every local peer attached before the second fence; the owner noticed
    // in one of its progress calls (before finalize, which would unlink too)
    let seg = format!("/dev/shm/tmpi-sm.{}.{}", info.job_id, info.rank);
    assert!(
        !std::path::Path::new(&seg).exists(),
        "unlinked after attach"
    );
    modex.fence().unwrap();
    m.finalize().unwrap();
    modex.into_inner().finalize().unwrap();
}

fn send(m: &mut dyn tmpi_btl::BtlModule, peer: u32, v: u32, h: &mut dyn BtlRecvHandler) {
    loop {
        match m.send(peer, 9, &v.to_le_bytes(), &[]) {
            Ok(()) => return,
            Err(BtlError::WouldBlock) => {
                m.progress(h);
            }
            Err(e) => panic!("{e}"),
        }
    }
}
