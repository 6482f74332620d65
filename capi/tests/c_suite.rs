//! The C test suite: lays out an install prefix from the artifacts cargo
//! just built (the layout of `cargo xtask install`), compiles every program
//! of `tests/c/` with the shipped `mpicc` and runs it under the shipped
//! `mpirun` (tmpirun) with several ranks, each with a timeout.
//!
//! Needs `tmpirun` built first: `cargo build -p tmpi-run` (CI does it).

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::{Mutex, OnceLock};
use std::time::{Duration, Instant};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

fn artifacts() -> PathBuf {
    // target/<profile>/deps/c_suite-<hash>
    let exe = std::env::current_exe().unwrap();
    exe.parent().unwrap().parent().unwrap().to_path_buf()
}

struct Prefix {
    dir: PathBuf,
    bin: PathBuf,
}

fn prefix() -> &'static Prefix {
    static P: OnceLock<Prefix> = OnceLock::new();
    P.get_or_init(|| {
        let out = artifacts();
        assert!(
            out.join("libmpi.so").exists(),
            "{} missing: cargo builds it with the tests of tmpi-capi",
            out.join("libmpi.so").display()
        );
        assert!(
            out.join("tmpirun").exists() && out.join("tmpi_info").exists(),
            "tmpirun is not built in {}: run `cargo build -p tmpi-run` first",
            out.display()
        );
        // One fixed place (re-created per run): the prefix holds a copy of
        // libmpi.a, so per-run directories would pile up.
        let dir = out.join("capi-c-suite");
        let _ = std::fs::remove_dir_all(&dir);
        xtask::layout(&dir, &out, &root()).expect("lay out the install prefix");
        let bin = dir.join("tests");
        std::fs::create_dir_all(&bin).unwrap();
        Prefix { dir, bin }
    })
}

/// One multi-process job at a time: 2 cores for everyone.
fn serial() -> std::sync::MutexGuard<'static, ()> {
    static M: Mutex<()> = Mutex::new(());
    M.lock().unwrap_or_else(|p| p.into_inner())
}

fn mpicc(src: &Path, out: &Path, extra: &[&str]) -> Output {
    let p = prefix();
    Command::new(p.dir.join("bin/mpicc"))
        .args(["-std=c99", "-Wall", "-Wextra", "-Werror", "-O1", "-o"])
        .arg(out)
        .arg(src)
        .args(extra)
        .output()
        .expect("run mpicc")
}

/// Compiles `capi/tests/c/<name>.c` once per test run. Two tests may
/// build the same program at once (`collectives` and
/// `coll_component_parameter_is_known`): the compiler writes a name of
/// its own and the program appears under its name by a rename, so no test
/// runs a half-written file ("Permission denied" from exec otherwise).
fn build(name: &str) -> PathBuf {
    let p = prefix();
    let exe = p.bin.join(name);
    if !exe.exists() {
        let src = root().join("capi/tests/c").join(format!("{name}.c"));
        static N: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let tmp = p.bin.join(format!("{name}.building.{n}"));
        let o = mpicc(&src, &tmp, &[]);
        assert!(
            o.status.success(),
            "mpicc {name}.c failed:\n{}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::fs::rename(&tmp, &exe).expect("rename the built program");
    }
    exe
}

/// Runs `prog` under the shipped mpirun with `n` ranks; kills it after `secs`.
fn run(prog: &Path, n: u32, secs: u64) -> (Option<i32>, String, String) {
    run_with(prog, n, secs, &[])
}

/// [`run`] with extra mpirun arguments (before the program).
fn run_with(prog: &Path, n: u32, secs: u64, extra: &[&str]) -> (Option<i32>, String, String) {
    run_with_args(prog, n, secs, extra, &[])
}

/// [`run_with`], with arguments for the program.
fn run_with_args(
    prog: &Path,
    n: u32,
    secs: u64,
    extra: &[&str],
    args: &[&str],
) -> (Option<i32>, String, String) {
    let p = prefix();
    let mut child = Command::new(p.dir.join("bin/mpirun"))
        .args(["-n", &n.to_string(), "--timeout", &secs.to_string()])
        .args(extra)
        .arg(prog)
        .args(args)
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn mpirun");
    let deadline = Instant::now() + Duration::from_secs(secs + 15);
    loop {
        if child.try_wait().unwrap().is_some() {
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{} with {n} ranks hung (killed after {}s); stderr:\n{}",
                prog.display(),
                secs + 15,
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    (
        o.status.code(),
        String::from_utf8_lossy(&o.stdout).into_owned(),
        String::from_utf8_lossy(&o.stderr).into_owned(),
    )
}

fn expect_ok(name: &str, ranks: &[u32]) {
    let exe = build(name);
    let _g = serial();
    for &n in ranks {
        let (code, out, err) = run(&exe, n, 90);
        assert_eq!(
            code,
            Some(0),
            "{name} with {n} ranks failed\nstdout:\n{out}\nstderr:\n{err}"
        );
        assert!(
            out.contains(&format!("{name}: OK")),
            "{name} with {n} ranks did not report OK\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
}

/// Calls after MPI_Finalize fail (MPI_ERR_OTHER) instead of succeeding or
/// communicating; the state queries MPI allows there still work; a call
/// needing the library before MPI_Init says it is not initialized.
#[test]
fn calls_after_finalize_fail_without_communicating() {
    expect_ok("after_finalize", &[1, 2, 3]);
}

#[test]
fn a_call_before_init_says_mpi_is_not_initialized() {
    let exe = build("before_init");
    let _g = serial();
    let (code, out, err) = run(&exe, 1, 60);
    assert!(
        code.is_some_and(|c| c != 0 && c != 4),
        "exit {code:?}\n{out}\n{err}"
    );
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(
        err.contains("MPI_Comm_rank called before MPI_Init: MPI is not initialized"),
        "{err}"
    );
    assert!(!err.contains("invalid communicator"), "{err}");
}

/// MPI-4.1's status field calls, `MPI_Request_get_status_any/all/some`
/// (the requests stay alive), `MPI_Remove_error_*` and buffered sends
/// through a communicator's own buffer and `MPI_BUFFER_AUTOMATIC`.
#[test]
fn mpi41_status_request_error_and_buffer_calls() {
    expect_ok("mpi41_calls", &[1, 2, 3]);
}

/// MPI-4.0 sessions in a program that never calls MPI_Init: process sets,
/// groups, communicators from groups (intra and inter) with traffic, the
/// session's error handler, and the runtime ending with the last session.
#[test]
fn sessions_without_mpi_init() {
    expect_ok("sessions", &[1, 2, 3]);
}

/// A session beside the world model; its communicator works after
/// MPI_Finalize until MPI_Session_finalize.
#[test]
fn sessions_beside_the_world_model() {
    expect_ok("sessions_world", &[1, 3]);
}

/// MPI_Session_init before MPI_Init, and the session ended before
/// MPI_Finalize: one runtime serves both.
#[test]
fn sessions_before_mpi_init() {
    expect_ok("sessions_then_init", &[2]);
}

/// MPI-4.0's MPI_ERR_SESSION from every session call on MPI_SESSION_NULL,
/// a made-up and a finalised session, returned without calling a handler
/// (mpi4py's test_exceptions.TestExcSessionNull); a valid session's own
/// errors keep their classes.
#[test]
fn invalid_sessions_are_mpi_err_session() {
    expect_ok("session_errors", &[1, 2]);
}

/// Partitioned point-to-point (MPI-4.0 chapter 4): rounds of one
/// Psend/Precv pair with partitions marked in reverse order, from several
/// threads (also while the main thread waits), by range and by list;
/// MPI_Parrived false until the last partition is marked; a receive
/// partitioned differently with a strided type; Startall/Waitall; every
/// error an MPI error class.
#[test]
fn partitioned_point_to_point() {
    expect_ok("partitioned", &[2, 3]);
}

#[test]
fn pt2pt() {
    expect_ok("pt2pt", &[2, 3, 4]);
}

/// Window info hints given at creation or by MPI_Win_set_info come back
/// from MPI_Win_get_info; unknown keys are ignored.
#[test]
fn window_info_hints_are_reported_back() {
    expect_ok_rma("rma_info", &[1, 2], SM_TCP);
}

/// Rendezvous-sized buffered sends through a buffer that holds one: each
/// MPI_Bsend finds the space its received predecessor gave back (the pml
/// progresses before refusing), and a buffer that stays full gives
/// MPI_ERR_BUFFER rather than a hang; over sm and tcp.
#[test]
fn buffered_sends_reuse_the_space_of_received_messages() {
    expect_ok_rma("bsend_reuse", &[2], SM_TCP);
}

/// Shared memory and TCP between the ranks: windows of `MPI_Win_allocate`
/// and `MPI_Win_allocate_shared` are served by osc sm either way (the ranks
/// share a node), the others by pt2pt over the BTL.
const SM_TCP: &[&[&str]] = &[&["--mca", "btl", "self,sm"], &["--mca", "btl", "self,tcp"]];

/// [`SM_TCP`], and shared memory with osc pt2pt only: every window then
/// goes through pt2pt's messages, which stay covered for every flavor.
const SM_TCP_PT2PT: &[&[&str]] = &[
    &["--mca", "btl", "self,sm"],
    &["--mca", "btl", "self,tcp"],
    &["--mca", "btl", "self,sm", "--mca", "osc", "pt2pt"],
];

/// Runs one-sided test `name` with each of `configs` (tmpirun arguments).
fn expect_ok_rma(name: &str, ranks: &[u32], configs: &[&[&str]]) {
    let exe = build(name);
    let _g = serial();
    for args in configs {
        let how = args.join(" ");
        for &n in ranks {
            let (code, out, err) = run_with(&exe, n, 90, args);
            assert_eq!(
                code,
                Some(0),
                "{name} with {n} ranks ({how}) failed\nstdout:\n{out}\nstderr:\n{err}"
            );
            assert!(
                out.contains(&format!("{name}: OK")),
                "{name} with {n} ranks ({how}) did not report OK\nstdout:\n{out}\nstderr:\n{err}"
            );
        }
    }
}

/// Runs one-sided test `name` over shared memory and TCP, and with osc
/// pt2pt only.
fn expect_ok_sm_tcp(name: &str, ranks: &[u32]) {
    expect_ok_rma(name, ranks, SM_TCP_PT2PT);
}

/// One-sided fence epochs (osc pt2pt): put/get/accumulate between all
/// pairs, derived datatypes on both sides, every predefined op, REPLACE
/// and NO_OP, window attributes, group and name.
#[test]
fn rma_fence() {
    expect_ok_sm_tcp("rma_fence", &[1, 2, 4]);
}

/// btl-openib on the soft NIC `tmsoft0` (no sm) with osc rdma before
/// pt2pt (sm left out, so `MPI_Win_allocate` windows are not put in a
/// shared segment either); `osc_base_verbose` 50 logs the rdma windows'
/// counters at free and any fallback to pt2pt.
const OPENIB_RDMA: &[&str] = &[
    "--mca",
    "btl",
    "self,openib",
    "--mca",
    "btl_openib_if_include",
    "tmsoft0",
    "--mca",
    "osc",
    "rdma,pt2pt",
    "--mca",
    "osc_base_verbose",
    "50",
    "--mca",
    "mpi_yield_when_idle",
    "1",
];

/// `(RDMA writes, RDMA reads, windows)` summed over the `osc rdma window
/// freed` lines of a job's stderr.
fn rdma_counters(err: &str) -> RdmaCounts {
    let mut t = RdmaCounts::default();
    for l in err.lines() {
        let Some(rest) = l.split("osc rdma window freed: ").nth(1) else {
            continue;
        };
        let nums: Vec<u64> = rest
            .split(|c: char| !c.is_ascii_digit())
            .filter_map(|w| w.parse().ok())
            .collect();
        t.writes += nums[0];
        t.reads += nums[1];
        t.atomics += nums[2];
        t.single += nums[3];
        t.locks += nums[4];
        t.exclusive_rmws += nums[5];
        t.windows += 1;
    }
    t
}

/// What osc rdma's windows logged at free, summed over a job.
#[derive(Debug, Default)]
struct RdmaCounts {
    writes: u64,
    reads: u64,
    /// NIC atomics (accumulate locks and single-element operations).
    atomics: u64,
    /// Single-element operations done by NIC atomics alone
    /// (`acc_single_intrinsic`).
    single: u64,
    /// Window locks (`MPI_Win_lock`, `lock_all`: one per rank) taken by
    /// NIC atomics.
    locks: u64,
    /// Accumulate-class operations under an exclusive window lock,
    /// without the accumulate lock.
    exclusive_rmws: u64,
    /// Window frees logged (one per window and rank).
    windows: u64,
}

/// The one-sided suites of fence, passive target and PSCW (puts and gets
/// of contiguous and derived datatypes, checked data) and of errors
/// (epoch misuse, ranges and type mismatches found by rdma's checks, the
/// same classes as pt2pt's) over btl-openib
/// with osc rdma: every window is served by rdma (no fallback to pt2pt
/// logged, an rdma free line per window and rank) and RDMA writes and
/// reads were issued, NIC atomics (the accumulate lock) where the suite
/// accumulates and window locks by NIC atomics where it locks; fence and
/// PSCW go through its inner pt2pt module. `rma_atomicity` and `rma_fetch_op`: concurrent accumulates,
/// fetch-and-ops and compare-and-swaps of every rank on the same
/// locations, no update lost.
#[test]
fn rma_over_openib_with_osc_rdma() {
    for name in [
        "rma_rdma",
        "rma_fence",
        "rma_passive",
        "rma_pscw",
        "rma_errors",
        "rma_atomicity",
        "rma_fetch_op",
    ] {
        let exe = build(name);
        let _g = serial();
        for n in [2u32, 4] {
            let (code, out, err) = run_with(&exe, n, 180, OPENIB_RDMA);
            assert_eq!(
                code,
                Some(0),
                "{name} with {n} ranks over openib/osc rdma\nstdout:\n{out}\nstderr:\n{err}"
            );
            assert!(out.contains(&format!("{name}: OK")), "{name} ({n}): {out}");
            assert!(
                !err.contains("the window goes to pt2pt"),
                "{name} ({n}): a window fell back to pt2pt\n{err}"
            );
            let c = rdma_counters(&err);
            assert!(
                c.windows >= u64::from(n) && c.writes > 0,
                "{name} ({n}): {c:?}\n{err}"
            );
            // rma_pscw and rma_errors only put.
            if !matches!(name, "rma_pscw" | "rma_errors") {
                assert!(c.reads > 0, "{name} ({n}): no RDMA reads\n{err}");
            }
            // rma_errors' accumulates all fail their checks.
            if !matches!(name, "rma_rdma" | "rma_errors") {
                assert!(c.atomics > 0, "{name} ({n}): no NIC atomics\n{err}");
            }
            // Passive-target epochs: window locks by NIC atomics.
            if matches!(
                name,
                "rma_rdma" | "rma_passive" | "rma_atomicity" | "rma_fetch_op"
            ) {
                assert!(c.locks > 0, "{name} ({n}): {c:?}\n{err}");
            }
            // Its last window accumulates under exclusive locks: no
            // accumulate lock there.
            if name == "rma_passive" {
                assert!(c.exclusive_rmws > 0, "{name} ({n}): {c:?}\n{err}");
            }
            // Its second window is created with acc_single_intrinsic.
            if name == "rma_atomicity" {
                assert!(c.single > 0, "{name} ({n}): {c:?}\n{err}");
            } else {
                assert_eq!(c.single, 0, "{name} ({n}): no hint given\n{err}");
            }
        }
    }
}

/// An RDMA read of osc rdma that completes with an error (the soft NIC's
/// fault injection fails the first read of each process) fails the
/// `MPI_Get` with an MPI error class, and under `MPI_ERRORS_ARE_FATAL`
/// the job ends instead of hanging.
#[test]
fn osc_rdma_failed_read_fails_the_get() {
    let exe = build("rma_fence");
    let _g = serial();
    let mut args = OPENIB_RDMA.to_vec();
    args.extend(["--mca", "btl_openib_tmsoft_inject_error", "read:1"]);
    let (code, out, err) = run_with(&exe, 2, 60, &args);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}\n{out}\n{err}");
    assert!(!out.contains("rma_fence: OK"), "{out}");
    assert!(
        err.contains("MPI_Get: one-sided transfer failed") && err.contains("MPI_ERR_OTHER"),
        "{err}"
    );
}

/// Where a peer is not reached over RDMA (btl sm or tcp), osc rdma hands
/// the window to pt2pt on every rank together, and the suite passes.
#[test]
fn osc_rdma_falls_back_to_pt2pt_without_rdma() {
    let exe = build("rma_fence");
    let _g = serial();
    for btl in ["self,sm", "self,tcp"] {
        let args = [
            "--mca",
            "btl",
            btl,
            "--mca",
            "osc",
            "rdma,pt2pt",
            "--mca",
            "osc_base_verbose",
            "50",
        ];
        let (code, out, err) = run_with(&exe, 2, 90, &args);
        assert_eq!(code, Some(0), "{btl}\n{out}\n{err}");
        assert!(out.contains("rma_fence: OK"), "{btl}: {out}");
        assert!(err.contains("the window goes to pt2pt"), "{btl}: {err}");
        assert_eq!(rdma_counters(&err).windows, 0, "{btl}: {err}");
    }
}

/// Puts and gets between all pairs (self included) with contiguous and
/// derived datatypes on either side (vector, indexed resized), under
/// fence, PSCW, exclusive and shared locks, lock_all with flushes and
/// NOCHECK, on a created and an allocated window, checked against
/// MPI_Pack/MPI_Unpack: written for osc rdma's per-run transfers (see
/// [`rma_over_openib_with_osc_rdma`]), run here with the other components.
#[test]
fn rma_rdma() {
    expect_ok_sm_tcp("rma_rdma", &[1, 2, 4]);
}

/// Passive target: a target waiting in MPI_Barrier serves lock epochs;
/// exclusive-lock contention loses no update; concurrent accumulates and
/// fetch-and-ops from all ranks to one target; compare-and-swap.
#[test]
fn rma_passive() {
    expect_ok_sm_tcp("rma_passive", &[1, 2, 4]);
}

/// MPI_Fetch_and_op of every kind the one-element path takes: SUM and MIN
/// on int, SUM on double, REPLACE, NO_OP with a NULL origin,
/// MPI_PROC_NULL, an op that does not apply (MPI_ERR_OP) and a target past
/// the window (MPI_ERR_RMA_RANGE), under lock_all
/// (`tests/c/rma_fetch_op.c`; osc sm has its own path for it).
#[test]
fn rma_fetch_op() {
    expect_ok_sm_tcp("rma_fetch_op", &[1, 2, 3]);
}

/// Concurrent fetch-and-ops, accumulates, no-op reads and compare-and-swap
/// loops of every rank on the same locations, each flushed: no update
/// lost, no fetched value seen twice (`tests/c/rma_atomicity.c`); over
/// sm, tcp and pt2pt here, over osc rdma in
/// [`rma_over_openib_with_osc_rdma`].
#[test]
fn rma_atomicity() {
    expect_ok_sm_tcp("rma_atomicity", &[1, 2, 4]);
}

/// One-sided calls from four threads per rank on two windows at once (no
/// update lost, every slot right); results of fetch_and_op, get,
/// compare_and_swap, get_accumulate and Rget, each followed by one of the
/// four flushes while the other threads flush the same targets (every
/// result exactly the count so far: none returned unwritten); and a thread
/// whose cached window another thread freed: the freed handle is
/// MPI_ERR_WIN there (not the freed window), and a new window is found
/// (`tests/c/rma_threads.c`). Over osc sm (the windows are
/// `MPI_Win_allocate`'d on one node) and osc pt2pt over sm and tcp.
#[test]
fn rma_threads() {
    expect_ok_rma("rma_threads", &[1, 2, 3], SM_TCP_PT2PT);
    expect_ok_rma(
        "rma_threads",
        &[2, 4],
        &[&["--mca", "btl", "self,tcp", "--mca", "osc", "pt2pt"]],
    );
}

/// [`rma_threads`] over btl-openib with osc rdma: its gets go over RDMA,
/// its fetch_and_ops, compare_and_swaps and get_accumulates under the
/// targets' accumulate locks (NIC atomics; threads of one rank exclude
/// each other there too), its flushes through the inner pt2pt module,
/// from four threads at once; its last part's accumulates under an
/// exclusive lock skip the accumulate lock (the local mutex keeps the
/// threads apart).
#[test]
fn rma_threads_over_openib_with_osc_rdma() {
    let name = "rma_threads";
    let exe = build(name);
    let _g = serial();
    for n in [2u32, 4] {
        let (code, out, err) = run_with(&exe, n, 180, OPENIB_RDMA);
        assert_eq!(
            code,
            Some(0),
            "{name} with {n} ranks over openib/osc rdma\nstdout:\n{out}\nstderr:\n{err}"
        );
        assert!(out.contains(&format!("{name}: OK")), "{name} ({n}): {out}");
        assert!(
            !err.contains("the window goes to pt2pt"),
            "{name} ({n}): a window fell back to pt2pt\n{err}"
        );
        let c = rdma_counters(&err);
        assert!(
            c.windows >= u64::from(n)
                && c.writes > 0
                && c.reads > 0
                && c.atomics > 0
                && c.exclusive_rmws > 0,
            "{name} ({n}): {c:?}\n{err}"
        );
    }
}

/// Post/start/complete/wait and MPI_Win_test with checked data.
#[test]
fn rma_pscw() {
    expect_ok_sm_tcp("rma_pscw", &[2, 3, 4]);
}

/// One-sided errors: epoch misuse, ranges, type and op mismatches, user
/// error handlers on windows, a call for another flavor of window.
#[test]
fn rma_errors() {
    expect_ok_sm_tcp("rma_errors", &[1, 2, 3]);
}

/// Shared-memory windows: parts of different sizes (some empty) in one
/// segment, direct stores and loads through MPI_Win_shared_query's
/// pointers with MPI_Win_sync, put/get/accumulate into them, the
/// MPI_PROC_NULL query, an all-empty window, no segment file left behind.
#[test]
fn rma_shared() {
    expect_ok_sm_tcp("rma_shared", &[2, 3, 4]);
}

/// osc sm: passive-target get, put, fetch_and_op and accumulate reach a
/// target computing outside MPI; concurrent atomics lose no update;
/// exclusive-lock contention; one compare-and-swap winner; derived
/// datatypes on both sides; PSCW and fence.
#[test]
fn rma_sm() {
    expect_ok_rma("rma_sm", &[1, 2, 4], SM_TCP);
}

/// The busy target of `rma_sm` is what pt2pt cannot serve: with osc pt2pt
/// (chosen by the selection list, or by sm's priority set below pt2pt's)
/// the origins' lock waits for a target that never enters MPI, which gives
/// up (after 3 s here) and fails its check.
#[test]
fn rma_sm_busy_target_needs_sm() {
    let exe = build("rma_sm");
    let _g = serial();
    for args in [["--mca", "osc", "pt2pt"], ["--mca", "osc_sm_priority", "5"]] {
        let (code, out, err) = run_with_args(&exe, 2, 60, &args, &["3"]);
        assert!(
            code.is_some_and(|c| c != 0),
            "{args:?}: exit {code:?}\n{out}\n{err}"
        );
        assert!(
            err.contains("check failed: *flag == size - 1"),
            "{args:?}: {err}"
        );
    }
}

/// A rank dying with an sm window's exclusive lock held: the rank waiting
/// for the lock does not hang the job, which the launcher ends (non-zero
/// status) well before the test's timeout.
#[test]
fn rma_lock_holder_dies_and_the_job_ends() {
    let exe = build("rma_lock_holder_dies");
    let _g = serial();
    let t0 = Instant::now();
    let (code, out, err) = run(&exe, 2, 60);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}\n{out}\n{err}");
    assert!(out.contains("rank 1 dies holding the lock"), "{out}\n{err}");
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(
        t0.elapsed() < Duration::from_secs(45),
        "the job took {:?} to end\n{err}",
        t0.elapsed()
    );
}

/// Dynamic windows: attach, operations by absolute address in every
/// synchronisation mode, MPI_ERR_RMA_RANGE from the target for memory not
/// attached (nothing written), detach, flavor errors.
#[test]
fn rma_dynamic() {
    expect_ok_sm_tcp("rma_dynamic", &[2, 3, 4]);
}

/// `mpi_param_check` is a known parameter (no "unknown" warning) and the
/// suite passes with the checks off too.
#[test]
fn param_check_off() {
    let exe = build("pt2pt");
    let _g = serial();
    let (code, out, err) = run_with(&exe, 2, 90, &["--mca", "mpi_param_check", "0"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("pt2pt: OK"), "{out}\n{err}");
    assert!(!err.to_lowercase().contains("unknown"), "{err}");
}

/// A coll component's parameter set on the command line is known when the
/// pml reports unknown names at start-up (it warned before coll had
/// registered its components' parameters, while honouring them), and the
/// forced algorithm runs the collective suite.
#[test]
fn coll_component_parameter_is_known() {
    let exe = build("collectives");
    let _g = serial();
    let (code, out, err) = run_with(
        &exe,
        3,
        120,
        &["--mca", "coll_tuned_allreduce_algorithm", "1"],
    );
    assert_eq!(code, Some(0), "{out}\n{err}");
    assert!(out.contains("collectives: OK"), "{out}\n{err}");
    assert!(!err.to_lowercase().contains("unknown"), "{err}");
}

/// MPI_THREAD_MULTIPLE: a thread blocked in MPI_Recv leaves the library
/// to the other threads (a receive from oneself completed by another
/// thread's send; a ring with a receiving thread per rank).
#[test]
fn thread_multiple_blocking_receive_does_not_lock_out_other_threads() {
    expect_ok("threads", &[1, 2, 3]);
}

/// Communicator constructors on two threads of each process at once, in
/// different orders on different ranks, with a dup of MPI_COMM_SELF under a
/// user lock meanwhile (`tests/c/comm_threads.c`).
#[test]
fn communicators_created_on_several_threads_at_once() {
    expect_ok("comm_threads", &[2, 3, 4]);
}

/// `MPI_Comm_create_group` on two threads per process where one thread's
/// agreement starts on one rank long before its members elsewhere come to
/// it (`tests/c/create_group_threads.c`, timed after MPICH's
/// threads/comm/comm_create_group_threads2): before, that agreement held
/// the process's offer of context ids through a round that waited for
/// ranks whose own agreements waited for that offer, and every run hung.
#[test]
fn create_group_on_threads_with_late_members() {
    expect_ok("create_group_threads", &[3, 4]);
}

/// `MPI_Intercomm_create` on four threads per process at once, each with
/// the same tag on a peer communicator of its own
/// (`tests/c/intercomm_threads.c`, after MPICH's
/// threads/comm/idup_comm_gen): before, each call agreed on its union over
/// `MPI_COMM_WORLD` under the user's tag, the threads' agreements crossed
/// and most runs hung or aborted.
#[test]
fn intercomm_create_on_threads_with_one_tag() {
    expect_ok("intercomm_threads", &[2, 3, 4]);
}

/// Non-blocking collectives tested (`MPI_Wait`, `MPI_Testall`,
/// `MPI_Request_get_status`) on one thread while another starts and
/// completes point-to-point requests (`tests/c/request_threads.c`): before,
/// a tested collective's handle was free between taking it out of the table
/// and putting it back, the other thread's new request could get it, and
/// the put-back overwrote that request ("invalid request" in every run).
#[test]
fn requests_on_several_threads_keep_their_handles() {
    expect_ok("request_threads", &[2, 3]);
}

#[test]
fn persistent() {
    expect_ok("persistent", &[2, 3]);
}

#[test]
fn datatypes() {
    expect_ok("datatypes", &[2]);
}

#[test]
fn collectives() {
    expect_ok("collectives", &[1, 2, 3, 4]);
}

/// User ops over derived datatypes see the caller's handle, counts of its
/// items and buffers in its layout, on every path (`tests/c/user_op_types.c`):
/// before, a matrix product over a contiguous type of 9 ints ran on counts of
/// ints and wrote past its buffers. Also with sm off and tuned's segmented
/// algorithms forced, and with sm's chunks as small as one item.
#[test]
fn user_ops_on_derived_datatypes() {
    let name = "user_op_types";
    expect_ok(name, &[1, 2, 3, 4]);
    let exe = build(name);
    let _g = serial();
    for extra in [
        &[
            "--mca",
            "coll",
            "^sm",
            "--mca",
            "coll_tuned_allreduce_algorithm",
            "4",
            "--mca",
            "coll_tuned_reduce_algorithm",
            "3",
            "--mca",
            "coll_tuned_reduce_scatter_algorithm",
            "2",
            "--mca",
            "coll_tuned_scan_algorithm",
            "2",
        ][..],
        &[
            "--mca",
            "coll_tuned_allreduce_algorithm",
            "3",
            "--mca",
            "coll",
            "^sm",
        ],
        &["--mca", "coll_sm_max", "16"],
    ] {
        let (code, out, err) = run_with(&exe, 4, 90, extra);
        assert!(
            code == Some(0) && out.contains("user_op_types: OK"),
            "{extra:?}: {code:?}\nstdout:\n{out}\nstderr:\n{err}"
        );
    }
}

/// MAXLOC / MINLOC on every pair type, the padded ones too (12 bytes of
/// MPI_DOUBLE_INT's 16), alone and in a derived type (`tests/c/pair_types.c`).
#[test]
fn maxloc_minloc_on_every_pair_type() {
    expect_ok("pair_types", &[1, 2, 3, 4]);
}

/// MPI_Comm_idup does not block: a rank that called it sends to one that
/// has not yet (`tests/c/idup.c`, MPICH's comm_idup pattern, which hung
/// when idup was a blocking dup); pending idups and a blocking dup at once.
#[test]
fn comm_idup_does_not_wait_for_the_other_ranks() {
    expect_ok("idup", &[1, 2, 3, 4]);
}

/// The v and w collectives on non-contiguous datatypes, blocking and not,
/// in place, ints between the type maps' untouched (`tests/c/vcoll_types.c`).
#[test]
fn v_and_w_collectives_on_noncontiguous_datatypes() {
    expect_ok("vcoll_types", &[1, 2, 3, 4]);
}

/// Predefined ops on long double, the C complex types and
/// MPI_LONG_DOUBLE_INT (`tests/c/wide_types.c`).
#[test]
fn predefined_ops_on_long_double_and_complex() {
    expect_ok("wide_types", &[1, 2, 3, 4]);
}

/// The Fortran and C++ named types from C: sizes, names, envelopes,
/// reductions by MPI-4.0 §6.9.2's type classes (MPI_ERR_OP outside them),
/// the f90 constructors and MPI_Type_get_value_index
/// (`tests/c/fortran_types.c`).
#[test]
fn fortran_and_cxx_named_types() {
    expect_ok("fortran_types", &[1, 2, 3]);
}

/// Predefined reductions on MPI_CHAR, as Open MPI and MPICH allow
/// (`tests/c/char_reductions.c`).
#[test]
fn predefined_ops_on_mpi_char() {
    expect_ok("char_reductions", &[1, 2, 3, 4]);
}

/// Failing attribute callbacks fail their calls and keep the attribute;
/// MPI_Finalize deletes MPI_COMM_SELF's attributes first, last set first
/// (`tests/c/attrs.c`).
#[test]
fn attribute_callbacks_and_comm_self_at_finalize() {
    expect_ok("attrs", &[1, 2]);
}

/// NULL buffers with zero counts and MPI_BOTTOM with absolute-address
/// datatypes in MPI_Alltoallv/w, MPI_Reduce_scatter and
/// MPI_Neighbor_alltoallw, blocking and not (`tests/c/null_buffers.c`;
/// mpi4py passes both).
#[test]
fn null_and_bottom_buffers_in_v_and_w_collectives() {
    expect_ok("null_buffers", &[1, 2, 3, 4]);
}

#[test]
fn nonblocking_v_collectives() {
    expect_ok("icollv", &[1, 2, 3, 4]);
}

/// A rank blocked in MPI_Recv / MPI_Probe keeps its non-blocking
/// collectives moving (MPI's progress rule; `tests/c/progress.c`).
#[test]
fn blocked_point_to_point_progresses_nonblocking_collectives() {
    expect_ok("progress", &[2, 3, 4, 5]);
}

/// MPI_THREAD_MULTIPLE: one thread's blocking ping-pong and the main
/// thread's non-blocking collectives drive the same requests at once
/// (`tests/c/progress_mt.c`).
#[test]
fn threads_drive_nonblocking_collectives_and_point_to_point_at_once() {
    expect_ok("progress_mt", &[1, 2, 3, 4]);
}

#[test]
fn errors_return_each_class() {
    expect_ok("errors", &[1, 2]);
}

#[test]
fn cart() {
    expect_ok("cart", &[1, 4, 6]);
}

#[test]
fn inter_communicators() {
    expect_ok("intercomm", &[1, 2, 3, 4]);
}

#[test]
fn persistent_collectives() {
    expect_ok("pcoll", &[1, 2, 3, 4]);
}

/// Persistent v, w and neighbourhood collectives copy their count,
/// displacement and datatype arrays at init: overwritten (and the types
/// freed) after init, the starts still move the right data
/// (`tests/c/pcoll_arrays.c`).
#[test]
fn persistent_collectives_take_their_arrays_at_init() {
    expect_ok("pcoll_arrays", &[1, 2, 3, 4]);
}

#[test]
fn collectives_split_and_create_on_inter_communicators() {
    expect_ok("intercoll", &[2, 3, 4, 5]);
}

#[test]
fn generalized_requests() {
    expect_ok("greq", &[1, 3]);
}

/// MPI_Type_get_contents hands out new handles for derived inner types:
/// freeing them leaves the user's and the outer type working
/// (`tests/c/type_contents.c`).
#[test]
fn type_get_contents_returns_new_handles() {
    expect_ok("type_contents", &[1]);
}

/// MPI_Comm_free runs the delete callbacks while the communicator is
/// valid; a failing one fails the call (`tests/c/comm_free_attr.c`).
#[test]
fn comm_free_deletes_attributes_before_the_communicator_goes() {
    expect_ok("comm_free_attr", &[1, 3]);
}

/// Errors and answers at the edges mpi4py's suite checks: invalid keyval
/// and null error handler, a generalized request whose query fails,
/// MPI_REPLACE's commutativity, split by type of an inter-communicator
/// (`tests/c/edge_errors.c`).
#[test]
fn edge_case_errors_and_answers() {
    expect_ok("edge_errors", &[1, 2, 3]);
}

#[test]
fn datatype_attributes() {
    expect_ok("type_attrs", &[1]);
}

#[test]
fn graph_topologies_and_neighbourhood_collectives() {
    expect_ok("neighbor", &[1, 2, 3, 4]);
}

#[test]
fn mpi_t() {
    expect_ok("mpit", &[2]);
}

#[test]
fn errors_are_fatal_ends_the_job_naming_call_and_error() {
    let exe = build("fatal");
    let _g = serial();
    let (code, out, err) = run(&exe, 3, 60);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}\n{out}\n{err}");
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(
        err.contains("MPI_Send")
            && err.contains("MPI_ERR_RANK")
            && err.contains("MPI_ERRORS_ARE_FATAL"),
        "message must name the call and the error:\n{err}"
    );
}

/// MPI_ERRORS_ABORT on a communicator ends the job on an error there.
#[test]
fn errors_abort_ends_the_job() {
    let exe = build("errors_abort");
    let _g = serial();
    let (code, out, err) = run(&exe, 2, 60);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}\n{out}\n{err}");
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(
        err.contains("MPI_Send") && err.contains("MPI_ERR_RANK"),
        "{err}"
    );
}

/// Collective calls that differ across ranks (sm's segment, one node):
/// error classes under MPI_ERRORS_RETURN, and the job ends under
/// MPI_ERRORS_ARE_FATAL; both hung before (docs/coll.md, "Calls that take
/// different paths").
#[test]
fn mismatched_collectives_fail_instead_of_hanging() {
    expect_ok("coll_mismatch", &[2, 3, 4]);
    let exe = build("coll_mismatch_fatal");
    let _g = serial();
    let (code, out, err) = run(&exe, 3, 60);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}\n{out}\n{err}");
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(
        (err.contains("MPI_Bcast") && err.contains("MPI_ERR_TRUNCATE"))
            || (err.contains("MPI_Barrier") && err.contains("differ across ranks")),
        "message must name the call and the error:\n{err}"
    );
}

/// The profiling interface: the program defines MPI_Send, MPI_Recv,
/// MPI_Allreduce and MPI_Wtime itself (as a tool linked into it does),
/// counts and calls PMPI_X; the messages and the sum arrive, and libmpi's
/// own calls (MPI_Sendrecv inside it) do not go through the program's
/// wrappers. Without libmpi's `-Bsymbolic-functions` PMPI_Send would jump
/// back into the program's MPI_Send and recurse until the stack ends.
#[test]
fn profiling_interface_wraps_calls() {
    expect_ok("pmpi", &[1, 2, 3]);
}

/// MPI-4.0 MPI_Isendrecv(_replace): one request for both halves
/// (`Req::Pair`), at 1-4 ranks.
#[test]
fn isendrecv() {
    expect_ok("isendrecv", &[1, 2, 3, 4]);
}

/// MPI-4.0 MPI_Info_create_env before init, after init (equal to
/// MPI_INFO_ENV) and after finalize.
#[test]
fn info_create_env() {
    expect_ok("info_env", &[1, 3]);
}

/// MPI_Comm_split_type: SHARED, MPI-4.0's HW_GUIDED / HW_UNGUIDED.
#[test]
fn split_type() {
    expect_ok("split_type", &[1, 3]);
}

/// Single-copy sources reused by alltoall (coll sm, `coll_sm_huge_after`)
/// and by 8 MiB sends (btl-sm's rendezvous, `btl_sm_huge_after`), both
/// default 4, go onto huge pages in their owner's process while the other
/// processes read them, results exact in every round; with the parameters
/// at 0 they stay on small pages. Where the kernel has no transparent huge
/// pages or no MADV_COLLAPSE (before 6.1) only the results are checked.
#[test]
fn reused_sources_on_huge_pages() {
    let exe = build("huge_sources");
    let _g = serial();
    let thp =
        std::fs::read_to_string("/sys/kernel/mm/transparent_hugepage/enabled").unwrap_or_default();
    let collapse = tmpi_smsc::huge::HugeSources::new(2, "test").available();
    let figure = |out: &str, what: &str| -> i64 {
        out.lines()
            .find_map(|l| l.strip_prefix(what)?.strip_suffix(" kB")?.parse().ok())
            .unwrap_or_else(|| panic!("no {what:?} figure\n{out}"))
    };
    for (n, off) in [(3u32, false), (4, false), (3, true)] {
        let extra: &[&str] = if off {
            &[
                "--mca",
                "coll_sm_huge_after",
                "0",
                "--mca",
                "btl_sm_huge_after",
                "0",
            ]
        } else {
            &[]
        };
        let (code, out, err) = run_with(&exe, n, 90, extra);
        assert_eq!(code, Some(0), "{n} ranks, off {off}\n{out}\n{err}");
        assert!(out.contains("huge_sources: OK"), "{out}\n{err}");
        let coll = figure(&out, "huge pages: ");
        let sends = figure(&out, "huge pages by sends: ");
        if off && !thp.contains("[always]") {
            assert_eq!((coll, sends), (0, 0), "off\n{out}");
        } else if !off && collapse {
            // 2 MiB blocks and 8 MiB messages: whole 2 MiB ranges in both.
            assert!(coll >= 2048, "{n} ranks: alltoall {coll} kB\n{out}\n{err}");
            assert!(sends >= 2048, "{n} ranks: sends {sends} kB\n{out}\n{err}");
        } else {
            eprintln!("huge pages unchecked here ({coll}, {sends} kB; THP {thp:?})");
        }
    }
}

/// MPI-4.0 large-count forms (`MPI_X_c`): int-sized counts work, larger
/// ones are MPI_ERR_COUNT on every rank.
#[test]
fn large_count_forms() {
    expect_ok("large_count", &[1, 2, 4]);
}

/// The remaining `_c` forms tmpi runs through its int calls
/// (`tests/c/large_count_more.c`): persistent and matched point-to-point,
/// the v- and w-collectives with root-only arrays, datatype constructors,
/// packing with an `MPI_Count` position, buffered mode, one-sided calls;
/// `MPI_ERR_COUNT` for an entry beyond `INT_MAX`.
#[test]
fn large_count_forms_of_array_and_window_calls() {
    expect_ok("large_count_more", &[1, 2, 3]);
}

/// Point-to-point and bcast messages of 2^31 + 64 bytes through the
/// large-count forms (2 ranks, ~2 GiB of memory each): every page and the
/// tail checked, Get_count_c exact, int and large-count forms matching each
/// other, a short receive truncated without writing past its end.
#[test]
fn messages_beyond_int_max_items() {
    expect_ok("large_messages", &[2]);
}

#[test]
fn abort_ends_the_job() {
    let exe = build("abort");
    let _g = serial();
    let (code, out, err) = run(&exe, 3, 60);
    assert!(code.is_some_and(|c| c != 0), "exit {code:?}\n{out}\n{err}");
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(err.contains("MPI_Abort") && err.contains('7'), "{err}");
    // The abort's text reaches tmpirun's message word for word.
    assert!(
        err.contains("called abort with code 7: MPI_Abort called with error code 7;"),
        "{err}"
    );
}

/// MPI_APPNUM is each program's index in an MPMD job: `mpirun -n 2 a : -n 1 a`.
#[test]
fn appnum_attribute_follows_the_mpmd_part() {
    let exe = build("appnum");
    let _g = serial();
    let e = exe.to_str().unwrap();
    let (code, out, err) = run_with(&exe, 2, 60, &[e, ":", "-n", "1"]);
    assert_eq!(code, Some(0), "{out}\n{err}");
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("appnum:")).collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "appnum: rank 0 of 3 app 0 flag 1",
            "appnum: rank 1 of 3 app 0 flag 1",
            "appnum: rank 2 of 3 app 1 flag 1",
        ],
        "{out}\n{err}"
    );
}

/// MPI_APPNUM under Open MPI's mpirun: from PMIx's `pmix.appnum` per
/// MPMD part.
#[test]
fn appnum_attribute_under_open_mpi_mpmd() {
    let exe = build("appnum");
    let _g = serial();
    let mpirun =
        std::env::var_os("TMPI_TEST_OMPI_MPIRUN").unwrap_or_else(|| "mpirun.openmpi".into());
    let o = Command::new(&mpirun)
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "--timeout",
            "60",
            "-n",
            "1",
        ])
        .arg(&exe)
        .args([":", "-n", "2"])
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .expect("run Open MPI's mpirun.openmpi (ci/install-deps.sh installs openmpi-bin)");
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert!(o.status.success(), "{out}\n{err}");
    let mut lines: Vec<&str> = out.lines().filter(|l| l.starts_with("appnum:")).collect();
    lines.sort();
    assert_eq!(
        lines,
        vec![
            "appnum: rank 0 of 3 app 0 flag 1",
            "appnum: rank 1 of 3 app 1 flag 1",
            "appnum: rank 2 of 3 app 1 flag 1",
        ],
        "{out}\n{err}"
    );
}

/// MPI_Abort under Open MPI's mpirun (a PMIx runtime): PMIx_Abort ends
/// every rank and mpirun exits with the abort's code.
#[test]
fn abort_under_open_mpi_mpirun() {
    let exe = build("abort");
    let _g = serial();
    let mpirun =
        std::env::var_os("TMPI_TEST_OMPI_MPIRUN").unwrap_or_else(|| "mpirun.openmpi".into());
    let mut child = Command::new(&mpirun)
        .args([
            "--allow-run-as-root",
            "--oversubscribe",
            "-n",
            "3",
            "--timeout",
            "60",
        ])
        .arg(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn Open MPI's mpirun.openmpi (ci/install-deps.sh installs openmpi-bin)");
    let deadline = Instant::now() + Duration::from_secs(90);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("mpirun.openmpi hung after MPI_Abort");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let (out, err) = (
        String::from_utf8_lossy(&o.stdout),
        String::from_utf8_lossy(&o.stderr),
    );
    assert_eq!(o.status.code(), Some(7), "{out}\n{err}");
    assert!(!out.contains("UNREACHABLE"), "{out}");
    assert!(err.contains("MPI_Abort called with error code 7"), "{err}");
    // The runtime ended the job on the abort request, not because a rank
    // exited non-zero (which is what a bare exit(7) gives: mpirun's
    // "exited with non-zero status" banner after the peers failed). The
    // peers may still notice rank 0's end before mpirun ends them (btl-sm
    // watches its peers' processes) and say so: that is not the banner.
    assert!(!err.contains("exited with non-zero status"), "{err}");
}

/// mpi.h: C99, pedantic warning-free; MPI 3.1; no OPEN_MPI / MPICH_NAME;
/// every declared function links (takes the address of each).
#[test]
fn header_is_clean_and_every_function_links() {
    let p = prefix();
    let header = std::fs::read_to_string(p.dir.join("include/mpi.h")).unwrap();
    let re_names: Vec<String> = header
        .lines()
        .filter_map(|l| {
            let l = l.trim_start();
            let open = l.find('(')?;
            let head = &l[..open];
            let name = head.split_whitespace().last()?;
            let name = name.trim_start_matches('*');
            ((name.starts_with("MPI_") || name.starts_with("PMPI_"))
                && (l.starts_with("int ") || l.starts_with("double ") || l.starts_with("MPI_")))
            .then(|| name.to_string())
        })
        .collect();
    assert!(
        re_names.len() > 600,
        "only {} prototypes found",
        re_names.len()
    );
    // The profiling interface: a PMPI_X for every MPI_X, and no other.
    let (pmpi, mpi): (Vec<&String>, Vec<&String>) =
        re_names.iter().partition(|n| n.starts_with("PMPI_"));
    let mut twins: Vec<String> = pmpi.iter().map(|n| n[1..].to_string()).collect();
    let mut plain: Vec<String> = mpi.iter().map(|n| n.to_string()).collect();
    twins.sort();
    plain.sort();
    assert_eq!(twins, plain, "PMPI_ prototypes must mirror the MPI_ ones");
    let mut src = String::from(
        "#include <mpi.h>\n#include <stdio.h>\n\
         #if MPI_VERSION != 3 || MPI_SUBVERSION != 1\n#error version\n#endif\n\
         #if defined(OPEN_MPI) || defined(MPICH_NAME) || defined(MPICH)\n#error family macro\n#endif\n\
         typedef void (*fp)(void);\nstatic const fp all[] = {\n",
    );
    for n in &re_names {
        src.push_str(&format!("    (fp){n},\n"));
    }
    src.push_str(
        "};\nint main(void) { printf(\"%d\\n\", (int)(sizeof all / sizeof all[0])); return 0; }\n",
    );
    let c = p.bin.join("allsyms.c");
    std::fs::write(&c, src).unwrap();
    let exe = p.bin.join("allsyms");
    let o = mpicc(&c, &exe, &["-pedantic", "-Wno-pedantic"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // Strict pedantic compile of a plain program (function pointer casts
    // above are not ISO C, hence the separate check).
    let plain = p.bin.join("plain.c");
    std::fs::write(&plain, "#include <mpi.h>\nint main(void) { MPI_Comm c = MPI_COMM_WORLD; return c == MPI_COMM_NULL; }\n").unwrap();
    let o = mpicc(&plain, &p.bin.join("plain"), &["-pedantic"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    // clang too, when installed (CI installs it for rsmpi's bindgen).
    if Command::new("clang")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
    {
        let o = Command::new(p.dir.join("bin/mpicc"))
            .env("TMPI_CC", "clang")
            .args(["-std=c99", "-Wall", "-Wextra", "-pedantic", "-Werror", "-o"])
            .arg(p.bin.join("plain-clang"))
            .arg(&plain)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "clang: {}",
            String::from_utf8_lossy(&o.stderr)
        );
    } else {
        eprintln!("note: clang not installed, mpi.h checked with cc only");
    }
    let o = Command::new(&exe)
        .env_remove("LD_LIBRARY_PATH")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "rpath: the program must run without LD_LIBRARY_PATH"
    );
    let n: usize = String::from_utf8_lossy(&o.stdout).trim().parse().unwrap();
    assert_eq!(n, re_names.len());
}

#[test]
fn mpicc_show_forms() {
    let p = prefix();
    let mpicc = p.dir.join("bin/mpicc");
    let show = |a: &[&str]| {
        let o = Command::new(&mpicc).args(a).output().unwrap();
        assert!(o.status.success());
        String::from_utf8_lossy(&o.stdout).trim().to_string()
    };
    let inc = format!("-I{}/include", p.dir.display());
    let lib = format!("-L{}/lib", p.dir.display());
    let rpath = format!("-Wl,-rpath,{}/lib", p.dir.display());
    let full = show(&["-show", "x.c", "-o", "x"]);
    assert!(
        full.contains(&inc)
            && full.contains(&lib)
            && full.contains(&rpath)
            && full.contains("-lmpi")
            && full.contains("x.c"),
        "{full}"
    );
    assert_eq!(show(&["-showme", "x.c"]), full.replace(" -o x", ""));
    assert_eq!(show(&["--showme:compile"]), inc);
    assert!(show(&["--showme:link"]).contains(&rpath));
    let compile_only = show(&["-show", "-c", "x.c"]);
    assert!(!compile_only.contains("-lmpi"), "{compile_only}");
    let pc = std::fs::read_to_string(p.dir.join("lib/pkgconfig/tmpi.pc")).unwrap();
    assert!(
        pc.contains("-lmpi") && pc.contains("Cflags: -I${includedir}"),
        "{pc}"
    );
    assert!(p.dir.join("etc/tmpi-mca-params.conf").exists());
    assert!(p.dir.join("bin/mpiexec").exists() && p.dir.join("lib/libmpi.a").exists());
}

/// Each rank's `rss_delta_kib` line of vector16.c.
fn rss_deltas(out: &str) -> Vec<(u32, i64)> {
    out.lines()
        .filter_map(|l| l.strip_prefix("rss_delta_kib rank="))
        .filter_map(|l| {
            let (r, v) = l.split_once(' ')?;
            Some((r.parse().ok()?, v.trim().parse().ok()?))
        })
        .collect()
}

#[test]
fn noncontiguous_vector_is_packed_per_fragment_without_a_whole_message_temporary() {
    // Built under the lock: both vector16 tests use the program.
    let _g = serial();
    let exe = build("vector16");
    // 16 MiB of strided doubles (vector -> vector, vector -> contiguous,
    // contiguous -> vector), checked element by element in the program.
    let (code, out, err) = run(&exe, 2, 90);
    assert_eq!(code, Some(0), "vector16 failed\n{out}\n{err}");
    let per_fragment = rss_deltas(&out);
    assert_eq!(per_fragment.len(), 2, "{out}");
    // The same transfers through whole-message temporaries: the measure
    // sees a 16 MiB staging buffer on each side.
    let (code, out0, err0) = run_with(&exe, 2, 90, &["--mca", "mpi_pack_per_fragment", "0"]);
    assert_eq!(code, Some(0), "vector16 (staged) failed\n{out0}\n{err0}");
    let staged = rss_deltas(&out0);
    assert_eq!(staged.len(), 2, "{out0}");
    for &(r, d) in &staged {
        assert!(
            d >= 12 * 1024,
            "staged rank {r}: peak RSS grew by only {d} KiB\n{out0}"
        );
    }
    // Per fragment: far below the 16 MiB message on both sides.
    for &(r, d) in &per_fragment {
        assert!(
            d < 4 * 1024,
            "rank {r}: peak RSS grew by {d} KiB (message 16384 KiB)\n{out}"
        );
    }
}

#[test]
fn noncontiguous_vector_over_the_soft_tag_matching_nic() {
    // btl-openib on the soft NIC tmsoft0, tag matching on and off: typed
    // receives are never posted to the NIC with the user's memory, and a
    // NIC rendezvous request (contiguous sender, vector receiver) is read
    // into a temporary and unpacked (it cannot be pipelined).
    // Built under the lock: both vector16 tests use the program.
    let _g = serial();
    let exe = build("vector16");
    for tm in ["1", "0"] {
        let (code, out, err) = run_with(
            &exe,
            2,
            120,
            &[
                "--mca",
                "btl",
                "self,openib",
                "--mca",
                "btl_openib_if_include",
                "tmsoft0",
                "--mca",
                "btl_openib_tm_enable",
                tm,
                "--mca",
                "pml_tm_thresh",
                "0",
                "--mca",
                "mpi_yield_when_idle",
                "1",
            ],
        );
        assert_eq!(
            code,
            Some(0),
            "vector16 over openib (tm {tm})\n{out}\n{err}"
        );
        assert!(out.contains("vector16: OK"), "{out}");
    }
}
