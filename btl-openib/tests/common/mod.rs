//! Multi-process harness: the test binary re-executes itself once per rank
//! (`child_entry` runs the role named in `TMPI_OPENIB_TEST_ROLE`; without
//! the variable it does nothing). Ranks exchange addresses through a
//! directory-backed [`Modex`], and every wait is bounded.
#![allow(dead_code)]

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlComponent, BtlModule, RemoteRegion};
pub use tmpi_btl_openib::dirmodex::DirModex;
use tmpi_btl_openib::{Event, Module, OpenibComponent};
use tmpi_verbs::Provider;

pub const ROLE_ENV: &str = "TMPI_OPENIB_TEST_ROLE";
pub const RANK_ENV: &str = "TMPI_OPENIB_TEST_RANK";
pub const SIZE_ENV: &str = "TMPI_OPENIB_TEST_SIZE";
pub const DIR_ENV: &str = "TMPI_OPENIB_TEST_DIR";
pub const MCA_ENV: &str = "TMPI_OPENIB_TEST_MCA";
/// Bound of a whole job.
pub const JOB_TIMEOUT: Duration = Duration::from_secs(90);
/// Bound of any single wait inside a rank.
pub const WAIT: Duration = Duration::from_secs(30);

/// What a child rank knows about its job.
pub struct Job {
    pub rank: u32,
    pub size: u32,
    pub modex: DirModex,
    pub reg: Registry,
    pub info: ProcessInfo,
}

/// The job of this child process, from the environment.
pub fn child_job() -> Job {
    let rank: u32 = std::env::var(RANK_ENV).unwrap().parse().unwrap();
    let size: u32 = std::env::var(SIZE_ENV).unwrap().parse().unwrap();
    let dir = PathBuf::from(std::env::var(DIR_ENV).unwrap());
    let mca: Vec<(String, String)> = std::env::var(MCA_ENV)
        .unwrap_or_default()
        .split(';')
        .filter(|s| !s.is_empty())
        .map(|kv| {
            let (k, v) = kv.split_once('=').expect("k=v");
            (k.to_string(), v.to_string())
        })
        .collect();
    let reg = Registry::new(Sources::default().with_cmdline(mca));
    let info = ProcessInfo {
        rank,
        size,
        local_rank: rank,
        local_size: size,
        node_id: 0,
        node_of: vec![0; size as usize],
        job_id: "test".into(),
        hostname: "localhost".into(),
    };
    Job {
        rank,
        size,
        modex: DirModex::new(&dir, rank, size),
        reg,
        info,
    }
}

/// Runs `role` on `size` ranks with the MCA settings `mca`; fails the test
/// if a rank fails or the job exceeds [`JOB_TIMEOUT`].
pub fn run_job(role: &str, size: u32, mca: &[(&str, &str)]) {
    // Unique per job: several jobs (even of one role) run concurrently.
    static JOBS: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
    let n = JOBS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!(
        "tmpi-openib-test-{}-{role}-{n}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let mca_s: String = mca.iter().map(|(k, v)| format!("{k}={v};")).collect();
    let mut kids: Vec<(u32, Child)> = (0..size)
        .map(|r| {
            let c = Command::new(std::env::current_exe().unwrap())
                .args(["child_entry", "--exact", "--nocapture", "--test-threads=1"])
                .env(ROLE_ENV, role)
                .env(RANK_ENV, r.to_string())
                .env(SIZE_ENV, size.to_string())
                .env(DIR_ENV, &dir)
                .env(MCA_ENV, &mca_s)
                .stdout(Stdio::inherit())
                .stderr(Stdio::inherit())
                .spawn()
                .expect("spawn rank");
            (r, c)
        })
        .collect();
    let start = Instant::now();
    let mut failed = Vec::new();
    while !kids.is_empty() {
        let mut i = 0;
        while i < kids.len() {
            if let Some(st) = kids[i].1.try_wait().unwrap() {
                if !st.success() {
                    failed.push(format!("rank {} exited with {st}", kids[i].0));
                }
                kids.swap_remove(i);
            } else {
                i += 1;
            }
        }
        if !failed.is_empty() || start.elapsed() > JOB_TIMEOUT {
            for (r, k) in &mut kids {
                let _ = k.kill();
                let _ = k.wait();
                failed.push(format!(
                    "rank {r} killed (job failed or timed out after {JOB_TIMEOUT:?})"
                ));
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    let _ = std::fs::remove_dir_all(&dir);
    assert!(failed.is_empty(), "job {role} failed: {failed:?}");
}

/// Progresses `m` until `done(events so far)` holds; panics after [`WAIT`].
pub fn wait_until<P: Provider>(
    m: &mut Module<P>,
    evs: &mut Vec<Event>,
    mut done: impl FnMut(&[Event]) -> bool,
) {
    let start = Instant::now();
    while !done(evs) {
        m.progress(evs).expect("progress");
        if start.elapsed() > WAIT {
            panic!("timed out; events so far: {evs:#?}");
        }
        std::thread::yield_now();
    }
}

/// Deterministic test data.
pub fn pattern(seed: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) ^ seed.wrapping_mul(40_503)) as u8)
        .collect()
}

/// This child's btl-openib modules through the generic BTL interface:
/// parameters registered, `init`, then the modex fence that publishes
/// their addresses.
pub fn init_btl(job: &mut Job) -> Vec<Box<dyn BtlModule>> {
    let comp = OpenibComponent;
    comp.register_params(&job.reg).unwrap();
    let mods = comp
        .init(&job.reg, &job.info, &mut job.modex)
        .expect("init");
    job.modex.fence().unwrap();
    mods
}

/// Publishes this rank's `region` and returns each of `peers`' (after a
/// modex fence).
pub fn exchange_regions(
    job: &mut Job,
    region: &RemoteRegion,
    peers: &[u32],
) -> Vec<(u32, RemoteRegion)> {
    job.modex.put("win", &region.to_bytes()).unwrap();
    job.modex.fence().unwrap();
    peers
        .iter()
        .map(|&p| {
            let b = job.modex.get(p, "win").unwrap();
            (p, RemoteRegion::from_bytes(&b).unwrap())
        })
        .collect()
}
