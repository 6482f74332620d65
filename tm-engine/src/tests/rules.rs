//! One test per matching rule and edge case.

use crate::*;

type E = Engine<u64, u64>;

fn posted_key(o: PostOutcome<u64>) -> RecvKey {
    match o {
        PostOutcome::Posted { key, .. } => key,
        other => panic!("expected the receive to be queued, got {other:?}"),
    }
}

fn matched_recv(o: ArriveOutcome<u64>) -> u64 {
    match o {
        ArriveOutcome::Matched { recv, .. } => recv,
        other => panic!("expected a match, got {other:?}"),
    }
}

fn any_src(ctx: u32, tag: i32) -> RecvSpec {
    RecvSpec {
        context: ctx,
        source: SourceSpec::Any,
        tag: TagSpec::Tag(tag),
    }
}

fn any_tag(ctx: u32, src: u32) -> RecvSpec {
    RecvSpec {
        context: ctx,
        source: SourceSpec::Rank(src),
        tag: TagSpec::Any,
    }
}

fn any_both(ctx: u32) -> RecvSpec {
    RecvSpec {
        context: ctx,
        source: SourceSpec::Any,
        tag: TagSpec::Any,
    }
}

#[test]
fn exact_match_after_post() {
    let mut e = E::new();
    let r = e.post_recv(RecvSpec::exact(1, 2, 3), 10).unwrap();
    assert!(matches!(r, PostOutcome::Posted { seq: 0, .. }));
    let a = e.arrive(Envelope::new(1, 2, 3), 20).unwrap();
    assert!(matches!(
        a,
        ArriveOutcome::Matched {
            recv: 10,
            seq: 0,
            ..
        }
    ));
    assert_eq!(e.posted_len(), 0);
    assert_eq!(e.unexpected_len(), 0);
}

#[test]
fn context_source_and_tag_each_separate() {
    let mut e = E::new();
    posted_key(e.post_recv(RecvSpec::exact(1, 2, 3), 10).unwrap());
    for env in [
        Envelope::new(0, 2, 3),
        Envelope::new(1, 0, 3),
        Envelope::new(1, 2, 4),
    ] {
        assert_eq!(e.arrive(env, 0).unwrap(), ArriveOutcome::Unexpected);
    }
    // A wildcard receive on another context sees none of them.
    assert!(e.probe(&any_both(7)).is_none());
    assert_eq!(e.posted_len(), 1);
    assert_eq!(e.unexpected_len(), 3);
}

#[test]
fn unexpected_then_post_matches_earliest_arrival() {
    let mut e = E::new();
    for m in 0..3 {
        e.arrive(Envelope::new(0, 1, 5), m).unwrap();
    }
    for m in 0..3 {
        match e.post_recv(RecvSpec::exact(0, 1, 5), 100 + m).unwrap() {
            PostOutcome::Matched { msg, envelope } => {
                assert_eq!(msg, m);
                assert_eq!(envelope, Envelope::new(0, 1, 5));
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(e.unexpected_len(), 0);
}

#[test]
fn receives_match_in_posting_order_across_classes() {
    let mut e = E::new();
    // Posted: any-both (0), exact (1), any-source (2), any-tag (3); all match (0, 4, 9).
    posted_key(e.post_recv(any_both(0), 0).unwrap());
    posted_key(e.post_recv(RecvSpec::exact(0, 4, 9), 1).unwrap());
    posted_key(e.post_recv(any_src(0, 9), 2).unwrap());
    posted_key(e.post_recv(any_tag(0, 4), 3).unwrap());
    for want in 0..4 {
        assert_eq!(
            matched_recv(e.arrive(Envelope::new(0, 4, 9), 0).unwrap()),
            want
        );
    }
    // Reverse class order: the exact receive posted first wins over later wildcards.
    posted_key(e.post_recv(RecvSpec::exact(0, 4, 9), 10).unwrap());
    posted_key(e.post_recv(any_tag(0, 4), 11).unwrap());
    posted_key(e.post_recv(any_both(0), 12).unwrap());
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 4, 9), 0).unwrap()),
        10
    );
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 4, 9), 0).unwrap()),
        11
    );
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 4, 9), 0).unwrap()),
        12
    );
}

#[test]
fn any_tag_never_matches_negative_tags() {
    let mut e = E::new();
    posted_key(e.post_recv(any_tag(0, 1), 1).unwrap());
    posted_key(e.post_recv(any_both(0), 2).unwrap());
    // Internal tag: goes unexpected although two wildcard receives are queued.
    assert_eq!(
        e.arrive(Envelope::new(0, 1, -7), 50).unwrap(),
        ArriveOutcome::Unexpected
    );
    // Nor does a later wildcard receive or probe see it...
    assert!(e.probe(&any_tag(0, 1)).is_none());
    assert!(e.probe(&any_both(0)).is_none());
    assert!(e.mprobe(&any_both(0)).is_none());
    // ... but ANY_SOURCE with the exact negative tag does, and so does the exact receive.
    assert_eq!(
        e.probe(&any_src(0, -7)),
        Some((Envelope::new(0, 1, -7), 50))
    );
    match e.post_recv(RecvSpec::exact(0, 1, -7), 3).unwrap() {
        PostOutcome::Matched { msg: 50, .. } => {}
        other => panic!("{other:?}"),
    }
    // Tag 0 is an application tag: wildcards take it.
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 1, 0), 51).unwrap()),
        1
    );
}

#[test]
fn from_mpi_maps_wildcards_and_rejects_bad_sources() {
    assert_eq!(
        RecvSpec::from_mpi(3, MPI_ANY_SOURCE, MPI_ANY_TAG).unwrap(),
        any_both(3)
    );
    assert_eq!(
        RecvSpec::from_mpi(3, 2, -10).unwrap(),
        RecvSpec::exact(3, 2, -10)
    );
    assert_eq!(
        RecvSpec::from_mpi(3, -2, 0),
        Err(EngineError::InvalidSource(-2))
    );
}

#[test]
fn messages_from_one_source_match_in_arrival_order_for_wildcards() {
    let mut e = E::new();
    e.arrive(Envelope::new(0, 1, 7), 0).unwrap();
    e.arrive(Envelope::new(0, 1, 3), 1).unwrap();
    e.arrive(Envelope::new(0, 1, 7), 2).unwrap();
    let got: Vec<u64> = (0..3)
        .map(|i| match e.post_recv(any_tag(0, 1), i).unwrap() {
            PostOutcome::Matched { msg, .. } => msg,
            other => panic!("{other:?}"),
        })
        .collect();
    assert_eq!(got, vec![0, 1, 2]);
}

#[test]
fn any_source_takes_earliest_arrival_across_sources() {
    let mut e = E::new();
    // Arrival order: source 3, then 1, then 2, then 1 again.
    e.arrive(Envelope::new(0, 3, 4), 30).unwrap();
    e.arrive(Envelope::new(0, 1, 4), 10).unwrap();
    e.arrive(Envelope::new(0, 2, 4), 20).unwrap();
    e.arrive(Envelope::new(0, 1, 4), 11).unwrap();
    let mut order = vec![];
    while let Some((env, m)) = e.mprobe(&any_src(0, 4)) {
        assert_eq!(env.tag, 4);
        order.push(m);
    }
    // Not by rank, not by source round robin: by arrival.
    assert_eq!(order, vec![30, 10, 20, 11]);
}

#[test]
fn any_both_takes_earliest_arrival_across_sources_and_tags() {
    let mut e = E::new();
    e.arrive(Envelope::new(0, 2, 9), 0).unwrap();
    e.arrive(Envelope::new(0, 0, -3), 1).unwrap();
    e.arrive(Envelope::new(0, 1, 1), 2).unwrap();
    e.arrive(Envelope::new(1, 0, 0), 3).unwrap();
    let got: Vec<u64> = std::iter::from_fn(|| e.mprobe(&any_both(0)).map(|(_, m)| m)).collect();
    assert_eq!(got, vec![0, 2]);
    assert_eq!(e.unexpected_len(), 2);
}

#[test]
fn probe_does_not_consume() {
    let mut e = E::new();
    e.arrive(Envelope::new(0, 1, 2), 77).unwrap();
    for _ in 0..3 {
        assert_eq!(
            e.probe(&RecvSpec::exact(0, 1, 2)),
            Some((Envelope::new(0, 1, 2), 77))
        );
        assert_eq!(e.peek_unexpected(&any_both(0)).map(|x| x.1), Some(77));
    }
    assert_eq!(e.unexpected_len(), 1);
    match e.post_recv(any_src(0, 2), 5).unwrap() {
        PostOutcome::Matched { msg: 77, .. } => {}
        other => panic!("{other:?}"),
    }
    let s = e.stats();
    assert_eq!((s.probes, s.probe_hits, s.mprobe_hits), (3, 3, 0));
}

#[test]
fn mprobe_removes_and_takes_no_sequence_number() {
    let mut e = E::new();
    e.arrive(Envelope::new(0, 1, 2), 1).unwrap();
    e.arrive(Envelope::new(0, 1, 2), 2).unwrap();
    assert_eq!(e.mprobe(&any_tag(0, 1)), Some((Envelope::new(0, 1, 2), 1)));
    assert_eq!(e.next_post_seq(), 0);
    // The second message is now the first any receive sees.
    assert_eq!(e.probe(&any_both(0)), Some((Envelope::new(0, 1, 2), 2)));
    assert_eq!(e.mprobe(&RecvSpec::exact(0, 1, 3)), None);
    assert_eq!(e.unexpected_len(), 1);
}

#[test]
fn cancel_removes_a_queued_receive() {
    let mut e = E::new();
    let k = posted_key(e.post_recv(RecvSpec::exact(0, 1, 2), 9).unwrap());
    assert_eq!(e.posted_recv(k), Some((9, 0)));
    assert_eq!(e.cancel(k), CancelOutcome::Removed(9));
    assert_eq!(e.posted_recv(k), None);
    assert_eq!(e.cancel(k), CancelOutcome::NotFound);
    assert_eq!(
        e.arrive(Envelope::new(0, 1, 2), 0).unwrap(),
        ArriveOutcome::Unexpected
    );
}

#[test]
fn cancel_of_a_matched_receive_reports_not_found_even_after_slot_reuse() {
    let mut e = E::new();
    let k = posted_key(e.post_recv(RecvSpec::exact(0, 1, 2), 9).unwrap());
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 1, 2), 0).unwrap()),
        9
    );
    // The slot is reused by the next receive; the stale key must not cancel it.
    let k2 = posted_key(e.post_recv(RecvSpec::exact(0, 1, 2), 10).unwrap());
    assert_eq!(k.index, k2.index);
    assert_eq!(e.cancel(k), CancelOutcome::NotFound);
    assert_eq!(e.posted_len(), 1);
    assert_eq!(e.cancel(k2), CancelOutcome::Removed(10));
    // Keys that never came from this engine.
    assert_eq!(
        e.cancel(RecvKey::from_u64(u64::MAX)),
        CancelOutcome::NotFound
    );
    assert_eq!(RecvKey::from_u64(k2.to_u64()), k2);
}

#[test]
fn cancel_in_the_middle_keeps_order_of_the_rest() {
    let mut e = E::new();
    let keys: Vec<_> = (0..5)
        .map(|i| posted_key(e.post_recv(any_src(0, 1), i).unwrap()))
        .collect();
    assert_eq!(e.cancel(keys[0]), CancelOutcome::Removed(0));
    assert_eq!(e.cancel(keys[2]), CancelOutcome::Removed(2));
    assert_eq!(e.cancel(keys[4]), CancelOutcome::Removed(4));
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 5, 1), 0).unwrap()),
        1
    );
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 6, 1), 0).unwrap()),
        3
    );
    assert_eq!(e.posted_len(), 0);
}

#[test]
fn peek_posted_reports_the_receive_an_arrival_would_take() {
    let mut e = E::new();
    assert_eq!(e.peek_posted(&Envelope::new(0, 1, 2)), None);
    posted_key(e.post_recv(any_both(0), 7).unwrap());
    let k = posted_key(e.post_recv(RecvSpec::exact(0, 1, -2), 8).unwrap());
    assert_eq!(
        e.peek_posted(&Envelope::new(0, 1, 2)).map(|p| (p.1, p.2)),
        Some((7, 0))
    );
    assert_eq!(e.peek_posted(&Envelope::new(0, 1, -2)), Some((k, 8, 1)));
    assert_eq!(e.posted_len(), 2);
}

#[test]
fn queue_limits_are_typed_errors_and_leave_state_alone() {
    let mut e = E::with_config(EngineConfig {
        max_posted: 2,
        max_unexpected: 1,
        initial_capacity: 1,
    })
    .unwrap();
    posted_key(e.post_recv(RecvSpec::exact(0, 0, 0), 0).unwrap());
    posted_key(e.post_recv(RecvSpec::exact(0, 0, 1), 1).unwrap());
    assert_eq!(
        e.post_recv(RecvSpec::exact(0, 0, 2), 2),
        Err(EngineError::PostedQueueFull { limit: 2 })
    );
    assert_eq!(e.next_post_seq(), 2);
    e.arrive(Envelope::new(0, 0, 5), 0).unwrap();
    assert_eq!(
        e.arrive(Envelope::new(0, 0, 6), 1),
        Err(EngineError::UnexpectedQueueFull { limit: 1 })
    );
    // Matching arrivals still work at the unexpected limit, and posts that match at the posted
    // limit too.
    assert_eq!(
        matched_recv(e.arrive(Envelope::new(0, 0, 1), 2).unwrap()),
        1
    );
    assert!(matches!(
        e.post_recv(RecvSpec::exact(0, 0, 5), 3).unwrap(),
        PostOutcome::Matched { msg: 0, .. }
    ));
    assert_eq!(e.stats().msgs_arrived, 2);
    assert!(E::with_config(EngineConfig {
        max_posted: usize::MAX,
        ..EngineConfig::default()
    })
    .is_err());
}

#[test]
fn stats_count_every_path() {
    let mut e = E::new();
    let k = posted_key(e.post_recv(RecvSpec::exact(0, 0, 0), 0).unwrap());
    e.cancel(k);
    e.cancel(k);
    e.post_recv(RecvSpec::exact(0, 0, 0), 1).unwrap();
    e.arrive(Envelope::new(0, 0, 0), 0).unwrap();
    e.arrive(Envelope::new(0, 0, 0), 1).unwrap();
    e.arrive(Envelope::new(0, 0, 0), 2).unwrap();
    e.post_recv(any_both(0), 2).unwrap();
    let s = e.stats();
    assert_eq!(s.recvs_posted, 3);
    assert_eq!(s.recvs_matched_unexpected, 1);
    assert_eq!(s.msgs_arrived, 3);
    assert_eq!(s.msgs_matched_posted, 1);
    assert_eq!((s.cancels_removed, s.cancels_not_found), (1, 1));
    assert_eq!((s.posted_depth, s.unexpected_depth), (0, 1));
    assert_eq!((s.posted_high_water, s.unexpected_high_water), (1, 2));
}

#[test]
fn steady_state_reuses_slots_and_drops_empty_bins() {
    let mut e = E::new();
    for round in 0..1000u64 {
        // Distinct tags every round: bins must not accumulate.
        let tag = round as i32;
        posted_key(e.post_recv(RecvSpec::exact(0, 1, tag), round).unwrap());
        posted_key(e.post_recv(any_src(0, tag), round).unwrap());
        e.arrive(Envelope::new(0, 2, tag + 1_000_000), round)
            .unwrap();
        assert_eq!(
            matched_recv(e.arrive(Envelope::new(0, 1, tag), 0).unwrap()),
            round
        );
        assert_eq!(
            matched_recv(e.arrive(Envelope::new(0, 3, tag), 0).unwrap()),
            round
        );
        assert!(e.mprobe(&any_both(0)).is_some());
    }
    let (slots, bins) = e.allocation();
    assert!(slots[0] <= 2 && slots[1] <= 1, "slots {slots:?}");
    assert_eq!(bins, [0, 0]);
}

#[test]
fn footprint_within_64_bytes_for_u64_handles() {
    let f = E::footprint();
    assert!(f.posted_slot <= 64, "{f:?}");
    assert!(f.unexpected_slot <= 64, "{f:?}");
}

#[test]
fn wildcard_unexpected_index_is_built_on_demand_and_dropped_when_drained() {
    let mut e = E::new();
    e.arrive(Envelope::new(0, 2, 5), 0).unwrap();
    e.arrive(Envelope::new(0, 1, -4), 1).unwrap();
    e.arrive(Envelope::new(0, 1, 5), 2).unwrap();
    // Exact traffic only: no wildcard index.
    assert!(!e.unexpected_wildcard_indexed());
    assert_eq!(e.probe(&RecvSpec::exact(0, 1, 5)).map(|x| x.1), Some(2));
    assert!(!e.unexpected_wildcard_indexed());
    // peek_unexpected scans without building.
    assert_eq!(e.peek_unexpected(&any_tag(0, 1)).map(|x| x.1), Some(2));
    assert!(!e.unexpected_wildcard_indexed());
    // The first wildcard probe builds it, in arrival order, internal tags excluded.
    assert_eq!(e.probe(&any_both(0)).map(|x| x.1), Some(0));
    assert!(e.unexpected_wildcard_indexed());
    // Messages arriving while it is on are indexed at once.
    e.arrive(Envelope::new(0, 3, -4), 3).unwrap();
    assert_eq!(e.mprobe(&any_src(0, -4)).map(|x| x.1), Some(1));
    assert_eq!(e.mprobe(&any_src(0, -4)).map(|x| x.1), Some(3));
    assert_eq!(e.mprobe(&any_tag(0, 1)).map(|x| x.1), Some(2));
    assert!(e.unexpected_wildcard_indexed());
    assert_eq!(e.mprobe(&RecvSpec::exact(0, 2, 5)).map(|x| x.1), Some(0));
    // Drained: off again, nothing left in any index.
    assert!(!e.unexpected_wildcard_indexed());
    assert_eq!(e.allocation().1, [0, 0]);
}
