//! Sync cost per 2^14 unexpected messages of the split matcher, on the soft NIC model
//! (software model, not hardware). `cargo bench -p tmpi-perf --bench sync [-- --rounds N]`.
//!
//! The NIC stops matching once it has delivered a message unexpected, until software reports
//! its count of unexpected messages (every list operation carries it; `TAG_SYNC` carries only
//! it). The split matcher sends a `TAG_SYNC` at the latest after `sync_interval` = 2^14
//! unexpected messages, and at once whenever the NIC holds offloaded receives (so the NIC can
//! resume matching them). Two rigs, measured alternately round by round (median, min-max):
//!
//! * **empty NIC list** (every receive in software): 2^14 unexpected messages through the
//!   NIC and the matcher; the 2^14-th makes the matcher queue one `TAG_SYNC`, whose round trip
//!   is timed alone: pull the SYNC, post it on the NIC, the NIC executes it, poll its
//!   completion, feed `Synced`. Beside it the mean cost of one unexpected message without a
//!   sync (arrival at the NIC, unexpected completion, `nic_unexpected`, pump).
//! * **64 receives offloaded** (on a tag that never arrives): the same 2^14 unexpected
//!   messages, each pumped at once; the matcher syncs after (nearly) every one. Timed: the
//!   whole 2^14, and the syncs issued are counted; the difference to the empty-list rig's
//!   whole 2^14 is what the resynchronisation costs there.
//!
//! The model's own queue work is inside the SYNC round trip (a real NIC executes the
//! operation asynchronously; the pml pays the `ibv_post_srq_ops` call and the CQ poll).

use std::time::{Duration, Instant};

use tmpi_tm_engine::split::{NicAction, NicEvent};
use tmpi_tm_engine::RecvSpec;
use tmpi_verbs::soft::tm::{TmAction, TmOp};
use tmpi_verbs::WcOpcode;

mod rig;

use rig::{info, Rig, SYNC_WR};

const N: u32 = 1 << 14;
const HELD: u64 = 64;

/// Matches the rig's queued unexpected messages with software receives (untimed).
fn drain(rig: &mut Rig, next: &mut u64) {
    let queued = rig.m.unexpected_len();
    for _ in 0..queued {
        rig.m
            .post_recv(RecvSpec::exact(0, 1, 7), *next, info(7))
            .unwrap();
        *next += 1;
    }
    rig.pump();
    assert_eq!(rig.m.unexpected_len(), 0, "drain left unexpected messages");
}

/// Empty NIC list: (SYNC round trip, mean unexpected message without sync, whole 2^14).
fn round_empty(rig: &mut Rig, next: &mut u64) -> (Duration, Duration, Duration) {
    let syncs0 = rig.m.stats().syncs;
    let start = Instant::now();
    for _ in 0..N - 1 {
        assert!(rig.deliver_unexpected(), "message not delivered unexpected");
        rig.pump();
    }
    let msgs = start.elapsed();
    assert_eq!(rig.m.stats().syncs, syncs0, "a sync before 2^14 unexpected");
    assert!(rig.deliver_unexpected());
    let t = Instant::now();
    let Some(NicAction::Sync { unexpected_cnt }) = rig.m.poll_action() else {
        panic!("no TAG_SYNC after 2^14 unexpected messages");
    };
    rig.nic
        .post_op(SYNC_WR, TmOp::Sync, true, Some(unexpected_cnt))
        .unwrap();
    let mut synced = false;
    while let Some(a) = rig.nic.poll_action() {
        if let TmAction::Complete { wc, tm_ref } = a {
            rig.nic.completion_polled(tm_ref);
            assert_eq!(wc.opcode, WcOpcode::TmSync);
            rig.m.nic_event(NicEvent::Synced).unwrap();
            synced = true;
        }
    }
    assert!(rig.m.poll_action().is_none());
    let sync = t.elapsed();
    let whole = start.elapsed();
    assert!(synced, "the SYNC did not complete");
    assert_eq!(rig.m.stats().syncs, syncs0 + 1);
    assert_eq!(
        rig.nic.hw_count(),
        rig.nic.sw_count(),
        "counts differ after the SYNC"
    );
    drain(rig, next);
    (sync, msgs / (N - 1), whole)
}

/// 64 receives held by the NIC: (whole 2^14, syncs issued).
fn round_held(rig: &mut Rig, next: &mut u64) -> (Duration, u64) {
    let syncs0 = rig.m.stats().syncs;
    let start = Instant::now();
    for _ in 0..N {
        assert!(rig.deliver_unexpected(), "message not delivered unexpected");
        rig.pump();
    }
    let whole = start.elapsed();
    assert_eq!(rig.nic.hw_count(), rig.nic.sw_count(), "NIC left suspended");
    let syncs = rig.m.stats().syncs - syncs0;
    drain(rig, next);
    assert_eq!(rig.m.stats().offloaded, HELD);
    (whole, syncs)
}

/// (median, min, max)
fn stats(v: &mut [f64]) -> (f64, f64, f64) {
    v.sort_by(|a, b| a.total_cmp(b));
    (v[v.len() / 2], v[0], v[v.len() - 1])
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut rounds = 31usize;
    while let Some(a) = args.next() {
        if a == "--rounds" {
            rounds = args.next().and_then(|s| s.parse().ok()).unwrap_or(rounds);
        }
    }
    let rounds = rounds.max(1);
    let mut empty = Rig::new();
    let mut held = Rig::new();
    for t in 0..HELD {
        held.m
            .post_recv(RecvSpec::exact(0, 1, 9), u64::MAX - t, info(9))
            .unwrap();
    }
    held.pump();
    assert_eq!(
        held.nic.live_handles(),
        HELD as usize,
        "receives not offloaded"
    );
    let (mut ne, mut nh) = (0u64, 1u64 << 40);
    // Warm-up round of each, untimed.
    round_empty(&mut empty, &mut ne);
    round_held(&mut held, &mut nh);
    let (mut sync, mut msg, mut whole_e, mut whole_h, mut syncs) =
        (vec![], vec![], vec![], vec![], vec![]);
    for r in 0..rounds {
        // Alternate which rig goes first.
        let mut e = || round_empty(&mut empty, &mut ne);
        let (s, m, w, h) = if r % 2 == 0 {
            let (s, m, w) = e();
            let h = round_held(&mut held, &mut nh);
            (s, m, w, h)
        } else {
            let h = round_held(&mut held, &mut nh);
            let (s, m, w) = e();
            (s, m, w, h)
        };
        sync.push(s.as_nanos() as f64);
        msg.push(m.as_nanos() as f64);
        whole_e.push(w.as_micros() as f64);
        whole_h.push(h.0.as_micros() as f64);
        syncs.push(h.1 as f64);
    }
    let extra: Vec<f64> = whole_h.iter().zip(&whole_e).map(|(h, e)| h - e).collect();
    let show = |name: &str, unit: &str, v: &mut Vec<f64>| {
        let (m, lo, hi) = stats(v);
        println!("{name}: {m:.1} {unit} (min {lo:.1}, max {hi:.1})");
        m
    };
    println!("sync cost per 2^14 unexpected (soft NIC: software model, not hardware), {rounds} alternating rounds, median (min-max):");
    let s = show(
        "empty list: TAG_SYNC round trip, once per 2^14",
        "ns",
        &mut sync,
    );
    let m = show(
        "empty list: one unexpected message without sync",
        "ns",
        &mut msg,
    );
    show(
        "empty list: 2^14 unexpected messages incl. the sync",
        "us",
        &mut whole_e,
    );
    println!(
        "empty list: sync amortised per unexpected message: {:.3} ns = {:.5} of a message's cost",
        s / f64::from(N),
        s / f64::from(N) / m
    );
    show(
        "64 offloaded: syncs issued per 2^14 unexpected",
        "",
        &mut syncs,
    );
    show(
        "64 offloaded: 2^14 unexpected messages incl. syncs",
        "us",
        &mut whole_h,
    );
    show(
        "64 offloaded minus empty list, per 2^14 (paired rounds)",
        "us",
        &mut extra.clone(),
    );
}
