//! The point-to-point suite (`src/bin/p2p-check.rs`) over btl-openib on the
//! soft NIC `tmsoft0`: `--mca btl self,openib` (no sm, so every message
//! between two ranks crosses the RC QPs; self-sends go through btl-self),
//! with hardware tag matching off (`btl_openib_tm_enable=0`, the same pml
//! path as real libibverbs without TM, e.g. rxe) and on. Each case is one
//! `p2p-check` run; the ranks verify their own results.

use tmpi_tests::{assert_ok, run, serial};

const PROG: &str = env!("CARGO_BIN_EXE_p2p-check");
const TM_PROG: &str = env!("CARGO_BIN_EXE_openib-tm-check");

fn mca(tm: &'static str) -> Vec<(&'static str, &'static str)> {
    let mut v = vec![
        ("btl", "self,openib"),
        ("btl_openib_if_include", "tmsoft0"),
        ("btl_openib_tm_enable", tm),
        ("mpi_yield_when_idle", "1"),
    ];
    if tm == "1" {
        // Offload receives of any size, so that the suite's small messages
        // exercise NIC matching too (default 1024, UCX's TM_THRESH).
        v.push(("pml_tm_thresh", "0"));
    }
    v
}

fn case(n: u32, name: &str, tm: &'static str, extra: &[(&str, &str)]) -> String {
    let _g = serial();
    let mut m = mca(tm);
    if tm == "1" {
        m.push(("pml_stats", "1"));
    }
    m.extend_from_slice(extra);
    let out = run(n, 60, &m, PROG, &[name]);
    assert_ok(&out, &format!("p2p-check {name}: OK"));
    if tm == "1" {
        // Every run with tag matching on must have been matched by the NIC
        // in part: a path that silently fell back to software proves nothing.
        let se = String::from_utf8_lossy(&out.stderr);
        let nic: u64 = pml_stats(&se, n).iter().map(|f| f["nic_matches"]).sum();
        assert!(
            nic > 0,
            "p2p-check {name} {extra:?}: no receive matched by the NIC\n{se}"
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The fields of rank 0's pml counters line printed by p2p-check.
fn stat(out: &str, field: &str) -> u64 {
    let at = out
        .find(&format!(" {field}="))
        .unwrap_or_else(|| panic!("no {field} in {out}"));
    out[at + field.len() + 2..]
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("bad {field} in {out}"))
}

#[test]
fn tm_off_ordering_with_wildcards_2_and_4_ranks() {
    case(2, "order", "0", &[]);
    case(4, "order", "0", &[]);
}

#[test]
fn tm_off_probe_cancel_truncate_zero() {
    for c in ["probe", "cancel", "truncate", "zero"] {
        case(2, c, "0", &[]);
    }
    case(4, "cancel", "0", &[]);
}

#[test]
fn tm_off_rendezvous_by_rdma_read() {
    let out = case(2, "big", "0", &[]);
    assert!(stat(&out, "rndv_get") > 0, "no RDMA-read rendezvous: {out}");
    assert_eq!(stat(&out, "rndv_pipelined"), 0, "pipelined: {out}");
}

#[test]
fn tm_off_rendezvous_small_eager_limit() {
    case(2, "big", "0", &[("pml_eager_limit", "512")]);
}

#[test]
fn tm_off_ssend_bsend_self_many_threads() {
    for c in ["ssend", "bsend", "self", "many", "threads"] {
        case(2, c, "0", &[]);
    }
}

#[test]
fn tm_on_suite_2_ranks() {
    for c in [
        "order", "probe", "cancel", "truncate", "zero", "big", "ssend",
    ] {
        case(2, c, "1", &[]);
    }
}

/// Sizes across one packet, the eager limit and the rendezvous switch,
/// into bounce buffers and user buffers of several sizes, every receive
/// held by the NIC when its message arrives: over the soft NIC's default
/// 1 KiB path MTU (eager messages past one packet take two completions), the
/// smallest and largest MTU, and a small eager limit. Eager messages into
/// user buffers are completed in place (`nic_in_place`, no copy), the
/// buffers' bytes past the message unchanged (checked by the ranks).
#[test]
fn tm_on_sizes_across_packets_eager_limit_and_buffers() {
    let out = case(2, "sizes", "1", &[]);
    assert!(
        stat(&out, "nic_in_place") > 0,
        "no eager message completed in the receive's own buffer: {out}"
    );
    case(2, "sizes", "1", &[("btl_openib_tmsoft_mtu", "256")]);
    case(2, "sizes", "1", &[("btl_openib_tmsoft_mtu", "4096")]);
    case(2, "sizes", "1", &[("pml_eager_limit", "2048")]);
    case(3, "sizes", "1", &[("btl_openib_tmsoft_mtu", "512")]);
}

/// Truncated rendezvous into an offloaded receive is finished in software
/// (RNDV_INCOMPLETE) in each of mlx5's three completion forms.
#[test]
fn tm_on_software_rendezvous_in_each_completion_form() {
    for form in ["single", "match_first", "cancel", "rotate"] {
        case(
            2,
            "truncate_posted",
            "1",
            &[("btl_openib_tmsoft_sw_rndv_form", form)],
        );
        case(2, "big", "1", &[("btl_openib_tmsoft_sw_rndv_form", form)]);
    }
}

/// Small receives offloaded with bounce buffers (`pml_tm_thresh 0`) reuse
/// a pool of buffers registered once, so an ADD does not register memory
/// (tens of microseconds on hardware) even with the registration cache off
/// (the default): 1 600 receives matched by the NIC per rank cost a few
/// dozen registrations.
#[test]
fn bounce_buffers_are_registered_once_not_per_add() {
    let _g = serial();
    let mut m = mca("1");
    m.push(("pml_stats", "1"));
    m.push(("btl_openib_verbose", "100"));
    let out = run(2, 60, &m, PROG, &["small_rounds"]);
    assert_ok(&out, "p2p-check small_rounds: OK");
    let se = String::from_utf8_lossy(&out.stderr);
    let st = pml_stats(&se, 2);
    let nic: u64 = st.iter().map(|f| f["nic_matches"]).sum();
    assert!(nic >= 3_000, "{st:?}");
    let regs: Vec<u64> = se
        .lines()
        .filter_map(|l| {
            let at = l.find("registration cache at finalize: ")?;
            let rest = &l[at..];
            let i = rest.find(" hits, ")? + " hits, ".len();
            rest[i..].split(' ').next()?.parse().ok()
        })
        .collect();
    assert_eq!(regs.len(), 2, "one registration cache line per rank\n{se}");
    for r in regs {
        assert!(r < 200, "{r} registrations for {nic} NIC-matched receives");
    }
}

#[test]
fn tm_on_suite_4_ranks() {
    for c in ["order", "cancel", "zero", "big", "probe"] {
        case(4, c, "1", &[]);
    }
}

/// The `pml_stats` lines (stderr) of a job, parsed: per rank, the fields.
fn pml_stats(stderr: &str, n: u32) -> Vec<std::collections::HashMap<String, u64>> {
    let mut per_rank = vec![None; n as usize];
    for line in stderr.lines().filter(|l| l.starts_with("pml_stats ")) {
        let mut f = std::collections::HashMap::new();
        let mut names = Vec::new();
        for kv in line["pml_stats ".len()..].split(' ') {
            let (k, v) = kv
                .split_once('=')
                .unwrap_or_else(|| panic!("bad field {kv:?} in {line:?}"));
            let v: u64 = v
                .parse()
                .unwrap_or_else(|_| panic!("bad value {kv:?} in {line:?}"));
            names.push(k.to_string());
            f.insert(k.to_string(), v);
        }
        assert_eq!(
            names,
            [
                "rank",
                "offloaded",
                "nic_matches",
                "sw_matches",
                "unexpected",
                "syncs",
                "del_lost",
                "fallbacks"
            ],
            "{line:?}"
        );
        let r = f["rank"] as usize;
        assert!(r < n as usize, "{line:?}");
        assert!(per_rank[r].is_none(), "rank {r} printed twice: {stderr}");
        per_rank[r] = Some(f);
    }
    per_rank
        .into_iter()
        .enumerate()
        .map(|(r, f)| f.unwrap_or_else(|| panic!("no pml_stats line of rank {r}: {stderr}")))
        .collect()
}

#[test]
fn pml_stats_line_once_per_rank_with_software_counts() {
    for (n, tm) in [(2, "0"), (3, "1")] {
        let _g = serial();
        let mut m = mca(tm);
        m.push(("pml_stats", "1"));
        let out = run(n, 60, &m, PROG, &["order"]);
        assert_ok(&out, "p2p-check order: OK");
        let se = String::from_utf8_lossy(&out.stderr);
        let st = pml_stats(&se, n);
        // Rank 0 receives every rank's messages in `order`.
        assert!(st[0]["sw_matches"] > 0, "{se}");
        if tm == "0" {
            for f in &st {
                assert_eq!(f["nic_matches"], 0, "{se}");
                assert_eq!(f["offloaded"], 0, "{se}");
            }
        }
    }
}

/// The routes a job's ranks logged (`pml_ob1_verbose`): `(rank, peer, btl)`.
fn routes(stderr: &str) -> Vec<(u32, u32, String)> {
    stderr
        .lines()
        .filter_map(|l| {
            let r = l.strip_prefix("[rank ")?;
            let (rank, rest) = r.split_once(']')?;
            let rest = rest.split_once("DEBUG route peer=")?.1;
            let (peer, btl) = rest.split_once(" btl=")?;
            Some((
                rank.parse().ok()?,
                peer.parse().ok()?,
                btl.trim_matches('"').to_string(),
            ))
        })
        .collect()
}

#[test]
fn exclusivity_sm_preferred_on_one_node_openib_when_selected() {
    let _g = serial();
    // openib available (tmsoft0 named) but no btl list: self and sm win.
    let m = [
        ("btl_openib_if_include", "tmsoft0"),
        ("pml_ob1_verbose", "100"),
        ("mpi_yield_when_idle", "1"),
    ];
    let out = run(2, 60, &m, PROG, &["zero"]);
    assert_ok(&out, "p2p-check zero: OK");
    let r = routes(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(r.len(), 4, "{r:?}");
    for (rank, peer, btl) in &r {
        let want = if rank == peer { "self" } else { "sm" };
        assert_eq!(btl, want, "{r:?}");
    }
    // btl self,openib: every other peer over openib.
    let mut m = mca("0");
    m.push(("pml_ob1_verbose", "100"));
    let out = run(3, 60, &m, PROG, &["zero"]);
    assert_ok(&out, "p2p-check zero: OK");
    let r = routes(&String::from_utf8_lossy(&out.stderr));
    assert_eq!(r.len(), 9, "{r:?}");
    for (rank, peer, btl) in &r {
        let want = if rank == peer { "self" } else { "openib" };
        assert_eq!(btl, want, "{r:?}");
    }
}

/// Runs `openib-tm-check MODE` on `n` ranks with tag matching `tm`, a soft
/// NIC list of 8 entries and the pml_stats lines; returns (stdout, stats).
fn tm_check(
    n: u32,
    tm: &'static str,
    mode: &str,
) -> (String, Vec<std::collections::HashMap<String, u64>>) {
    let _g = serial();
    let mut m = mca(tm);
    // The default threshold (1024): the program's receives are 32 KiB.
    m.retain(|(k, _)| *k != "pml_tm_thresh");
    m.push(("btl_openib_tmsoft_max_num_tags", "8"));
    m.push(("pml_stats", "1"));
    let out = run(n, 60, &m, TM_PROG, &[mode]);
    let so = String::from_utf8_lossy(&out.stdout).into_owned();
    let se = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "tm={tm} n={n}: {so}\n{se}");
    (so, pml_stats(&se, n))
}

#[test]
fn same_program_tm_on_and_off_identical_results_2_and_4_ranks() {
    for n in [2, 4] {
        let (on, st_on) = tm_check(n, "1", "all");
        let (off, st_off) = tm_check(n, "0", "all");
        // 1 cancel line + 24 receives + the ANY_SOURCE receive.
        assert_eq!(on.lines().count(), 26, "{on}");
        assert_eq!(on, off, "results differ between NIC and software matching");
        assert!(on.starts_with("cancel cancelled=true\n"), "{on}");
        // TM on: the NIC matched some receives; 24 receives + 1 do not fit
        // in 8 entries, so some stayed in software (in order: the data and
        // the per-receive lines agree with the software run).
        assert!(st_on[0]["nic_matches"] > 0, "{st_on:?}");
        assert!(st_on[0]["offloaded"] > 0, "{st_on:?}");
        assert!(st_on[0]["fallbacks"] > 0, "{st_on:?}");
        assert!(st_on[0]["offloaded"] <= 8 + 1, "{st_on:?}");
        // TM off: nothing at the NIC.
        for f in &st_off {
            assert_eq!(f["nic_matches"], 0, "{st_off:?}");
            assert_eq!(f["offloaded"], 0, "{st_off:?}");
        }
    }
}

#[test]
fn cancel_of_an_offloaded_receive() {
    let (out, st) = tm_check(2, "1", "cancel");
    assert_eq!(out.trim(), "cancel cancelled=true");
    // The receive went to the NIC (named source, 4 KiB >= tm_thresh) and
    // left it by DEL: offloaded, never matched (the one software match is
    // the closing barrier's).
    assert_eq!(st[0]["offloaded"], 1, "{st:?}");
    assert_eq!(st[0]["nic_matches"], 0, "{st:?}");
}

#[test]
fn tm_on_tight_nic_list_and_stale_sync_reading() {
    // A NIC list of 4 entries, 2 outstanding list operations, and the soft
    // NIC's other sync reading (entries added while stale are skipped).
    let tight = [
        ("btl_openib_tmsoft_max_num_tags", "4"),
        ("btl_openib_tmsoft_max_ops", "2"),
        ("btl_openib_tmsoft_sync_mode", "stale"),
    ];
    for c in ["order", "cancel", "big"] {
        case(3, c, "1", &tight);
    }
}

const FAULT_PROG: &str = env!("CARGO_BIN_EXE_openib-fault");

/// Runs `openib-fault ARGS` on 2 ranks with tag matching `tm`, the
/// `pml_stats` lines and `extra` parameters; returns (exit status, stdout,
/// stderr).
fn fault_run(tm: &'static str, extra: &[(&str, &str)], args: &[&str]) -> (i32, String, String) {
    let _g = serial();
    let mut m: Vec<(&str, &str)> = mca(tm);
    m.retain(|(k, _)| *k != "pml_tm_thresh");
    m.push(("pml_stats", "1"));
    m.extend_from_slice(extra);
    let out = run(2, 30, &m, FAULT_PROG, args);
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// A field of rank `r`'s `pml_ob1 stats: key=value ..` line.
fn rank_stat(stderr: &str, r: u32, field: &str) -> u64 {
    let line = stderr
        .lines()
        .find(|l| l.starts_with(&format!("[rank {r}] pml_ob1 stats:")))
        .unwrap_or_else(|| panic!("no stats line of rank {r}: {stderr}"));
    stat(line, field)
}

#[test]
fn nic_matched_rendezvous_is_read_by_the_nic_sizes_and_offsets() {
    for (bytes, off) in [(1 << 20, 0), (4 << 20, 0), (1 << 20, 100), (4 << 20, 4095)] {
        let (b, o) = (bytes.to_string(), off.to_string());
        // TM on, receive posted first: the NIC matches the request and
        // reads the data into the receive buffer itself (and FINs).
        let (code, so, se) = fault_run("1", &[], &[&b, &o]);
        assert_eq!(code, 0, "{bytes}@{off}\n{so}\n{se}");
        assert!(
            so.contains(&format!("rank 1 recv ok bytes={bytes}")),
            "{so}\n{se}"
        );
        assert!(so.contains("rank 0 send ok"), "{so}\n{se}");
        assert_eq!(rank_stat(&se, 1, "rndv_nic_read"), 1, "{se}");
        assert_eq!(rank_stat(&se, 1, "rndv_get"), 0, "{se}");
        assert_eq!(pml_stats(&se, 2)[1]["nic_matches"], 1, "{se}");
        // TM off: the same data by the pml's own RDMA read, no NIC read.
        let (code, so, se) = fault_run("0", &[], &[&b, &o]);
        assert_eq!(code, 0, "{so}\n{se}");
        assert!(
            so.contains(&format!("rank 1 recv ok bytes={bytes}")),
            "{so}\n{se}"
        );
        assert_eq!(rank_stat(&se, 1, "rndv_nic_read"), 0, "{se}");
        assert_eq!(rank_stat(&se, 1, "rndv_get"), 1, "{se}");
    }
    // Request unexpected (receive posted late): software reads and sends
    // the FIN that completes the sender.
    let (code, so, se) = fault_run("1", &[], &["1048576", "100", "late"]);
    assert_eq!(code, 0, "{so}\n{se}");
    assert!(so.contains("rank 1 recv ok bytes=1048576"), "{so}\n{se}");
    assert!(so.contains("rank 0 send ok"), "{so}\n{se}");
    assert_eq!(rank_stat(&se, 1, "rndv_nic_read"), 0, "{se}");
    assert_eq!(rank_stat(&se, 1, "rndv_get"), 1, "{se}");
    // A request longer than the posted receive buffer: the NIC consumes the
    // entry but cannot read (RNDV_INCOMPLETE); software reads what fits,
    // the receive ends with MPI_ERR_TRUNCATE and the first half of the
    // data, the sender's send completes normally.
    for tm in ["1", "0"] {
        let (code, so, se) = fault_run(tm, &[], &["1048576", "100", "trunc"]);
        assert_eq!(code, 0, "tm={tm}\n{so}\n{se}");
        assert!(
            so.contains("rank 1 recv truncated bytes=524288"),
            "{so}\n{se}"
        );
        assert!(so.contains("rank 0 send ok"), "{so}\n{se}");
        assert_eq!(rank_stat(&se, 1, "rndv_get"), 1, "{se}");
        let nic = if tm == "1" { 1 } else { 0 };
        assert_eq!(pml_stats(&se, 2)[1]["nic_matches"], nic, "{se}");
    }
    // pml_tm_rndv=0: the request travels as a tagged eager RNDV (the pml
    // reads even when the NIC matched).
    let (code, so, se) = fault_run("1", &[("pml_tm_rndv", "0")], &["1048576", "100"]);
    assert_eq!(code, 0, "{so}\n{se}");
    assert!(so.contains("rank 1 recv ok bytes=1048576"), "{so}\n{se}");
    assert_eq!(rank_stat(&se, 1, "rndv_nic_read"), 0, "{se}");
    assert_eq!(rank_stat(&se, 1, "rndv_get"), 1, "{se}");
}

/// A rendezvous longer than the port's largest message (`max_msg_sz`, 1 GiB
/// on mlx5; 64 KiB here) is never handed to the receiver's NIC to read: the
/// sender announces it in software and the receiver reads it in
/// `max_msg_sz` pieces. Without the cap the soft NIC, like the worst case
/// of the hardware, consumes the entry and fails the read.
#[test]
fn rendezvous_beyond_max_msg_sz_is_read_in_software() {
    let cap = [("btl_openib_tmsoft_max_msg_sz", "65536")];
    for bytes in [65_537usize, 1 << 20] {
        let b = bytes.to_string();
        let (code, so, se) = fault_run("1", &cap, &[&b, "0"]);
        assert_eq!(code, 0, "{bytes}\n{so}\n{se}");
        assert!(
            so.contains(&format!("rank 1 recv ok bytes={bytes}")),
            "{so}\n{se}"
        );
        assert_eq!(rank_stat(&se, 1, "rndv_nic_read"), 0, "{se}");
        assert_eq!(rank_stat(&se, 1, "rndv_get"), 1, "{se}");
        // The request itself was still matched by the NIC (as a tagged
        // eager RNDV).
        assert_eq!(pml_stats(&se, 2)[1]["nic_matches"], 1, "{se}");
    }
}

#[test]
fn completion_error_on_the_rendezvous_read_fails_the_receive_and_ends_the_job() {
    for tm in ["0", "1"] {
        // The receiver's first RDMA read (the pml's, or with TM on the
        // NIC's own) completes with an error: the affected request fails
        // with an MPI error class (the program prints it and exits 3), the
        // log names the failure, tmpirun ends the job (status 3, not its
        // timeout). With TM on the NIC's error FIN fails the sender's send
        // too; whichever rank reports first ends the job.
        let inject = [("btl_openib_tmsoft_inject_error", "read:1")];
        let (code, so, se) = fault_run(tm, &inject, &["1048576", "100"]);
        let recv_err = so.contains("rank 1 recv error class=MPI_ERR_OTHER");
        let send_err = so.contains("rank 0 send error class=MPI_ERR_OTHER");
        if tm == "0" {
            assert!(recv_err, "tm={tm}\n{so}\n{se}");
        } else {
            assert!(recv_err || send_err, "tm={tm}\n{so}\n{se}");
        }
        assert!(!so.contains("recv ok"), "tm={tm}\n{so}\n{se}");
        assert!(se.contains("injected completion error"), "tm={tm}\n{se}");
        assert!(se.contains("RemAccessErr"), "tm={tm}\n{se}");
        assert!(!se.contains("timed out"), "tm={tm}\n{se}");
        assert_eq!(code, 3, "tm={tm}\n{so}\n{se}");
    }
}

/// A rendezvous the NIC matched and failed to read fails the send too (the
/// receiver lingers instead of ending the job). The read's NAK failed both
/// QPs, so the receiver's error FIN is flushed, as on hardware; the sender
/// learns it from its QP's state (btl-openib queries the QPs of peers with
/// pending rendezvous sends). Without that query the sender waits for ever.
#[test]
fn failed_nic_read_fails_the_send() {
    let inject = [("btl_openib_tmsoft_inject_error", "read:1")];
    let (code, so, se) = fault_run("1", &inject, &["1048576", "100", "linger"]);
    assert!(
        so.contains("rank 1 recv error class=MPI_ERR_OTHER"),
        "{so}\n{se}"
    );
    assert!(
        so.contains("rank 0 send error class=MPI_ERR_OTHER"),
        "the sender did not learn of the failed read\n{so}\n{se}"
    );
    assert!(!se.contains("timed out"), "{se}");
    assert_eq!(code, 3, "{so}\n{se}");
}

#[test]
fn completion_error_on_an_eager_send_ends_the_job() {
    // Rank 1's "go" (an eager send) fails after it completed (copied): no
    // request can report it, so rank 1's pml ends the process (like Open
    // MPI's ob1) and the job ends instead of rank 0 waiting for ever.
    let inject = [("btl_openib_tmsoft_inject_error", "send:1")];
    let (code, so, se) = fault_run("0", &inject, &["100", "0"]);
    assert!(!so.contains("recv ok"), "{so}\n{se}");
    assert!(
        se.contains("connection to rank 0 broken by a completion error"),
        "{se}"
    );
    assert!(!se.contains("timed out"), "{se}");
    assert_eq!(code, 17, "{so}\n{se}");
}
