//! The deterministic TM core of the soft NIC against reference/tag-matching.md
//! §3, §4 and §6: every behaviour and every race, reproduced exactly by
//! holding and releasing operations and arrivals.

use tmpi_verbs::soft::tm::{
    Arrival, SyncMode, TmAction, TmConfig, TmListModel, TmOp, TmPostError, TmRef,
};
use tmpi_verbs::wire::{Rvh, TagHeader, Tmh, TmhOpcode};
use tmpi_verbs::{Completion, WcFlags, WcOpcode, WcStatus, WorkCompletion};

/// Buffers are (id, len); messages are byte vectors.
type Model = TmListModel<u32, Vec<u8>>;

fn model(cfg: TmConfig) -> Model {
    TmListModel::new(cfg)
}

fn eager(tag: u64, app_ctx: u32, payload: &[u8]) -> Vec<u8> {
    let mut m = Tmh {
        opcode: TmhOpcode::Eager,
        app_ctx,
        tag,
    }
    .to_bytes()
    .to_vec();
    m.extend_from_slice(payload);
    m
}

fn rndv(tag: u64, va: u64, len: u32) -> Vec<u8> {
    let h = TagHeader {
        tmh: Tmh {
            opcode: TmhOpcode::Rndv,
            app_ctx: 5,
            tag,
        },
        rvh: Some(Rvh { va, rkey: 77, len }),
    };
    let mut b = vec![0u8; 32];
    h.emit(&mut b).unwrap();
    b
}

fn arrive(m: &mut Model, msg: Vec<u8>) {
    m.message_arrived(Arrival {
        qp_num: 1,
        src_qp: 2,
        message: msg,
    });
}

fn add(m: &mut Model, id: u64, tag: u64, mask: u64, sync: Option<u32>) -> u32 {
    m.post_op(
        1000 + id,
        TmOp::Add {
            recv_wr_id: id,
            buffer: id as u32,
            len: 4096,
            tag,
            mask,
        },
        true,
        sync,
    )
    .unwrap()
}

fn del(m: &mut Model, handle: u32, sync: Option<u32>) {
    m.post_op(9000 + u64::from(handle), TmOp::Del { handle }, true, sync)
        .unwrap();
}

fn sync(m: &mut Model, cnt: u32) {
    m.post_op(7777, TmOp::Sync, true, Some(cnt)).unwrap();
}

/// Drains the outputs, acknowledging completions as software would poll them.
fn drain(m: &mut Model) -> Vec<WorkCompletion> {
    let mut v = Vec::new();
    while let Some(a) = m.poll_action() {
        if let TmAction::Complete { wc, tm_ref } = a {
            m.completion_polled(tm_ref);
            v.push(wc);
        }
    }
    v
}

fn untagged(m: &mut Model, n: u32) {
    for i in 0..n {
        m.post_untagged(50_000 + u64::from(i), 50_000 + i, 4096)
            .unwrap();
    }
}

fn kinds(v: &[WorkCompletion]) -> Vec<Completion> {
    v.iter().map(|w| w.kind()).collect()
}

#[test]
fn first_match_in_append_order_wins_and_tags_are_masked() {
    let mut m = model(TmConfig::default());
    untagged(&mut m, 4);
    add(&mut m, 1, 0x10, 0xF0, None); // matches 0x1?
    add(&mut m, 2, 0x12, !0, None); // exact 0x12, but added second
    drain(&mut m);
    assert_eq!(m.entries()[0].1, 0x10);
    arrive(&mut m, eager(0x12, 9, b"abc"));
    arrive(&mut m, eager(0x12, 9, b"def"));
    let v = drain(&mut m);
    assert_eq!(v[0].wr_id, 1);
    assert_eq!(v[1].wr_id, 2);
    assert_eq!(
        v[0].kind(),
        Completion::TagMatched {
            info: tmpi_verbs::TmInfo {
                tag: 0x12,
                priv_: 9
            },
            data_valid: true,
            byte_len: 3
        }
    );
    assert!(m.entries().is_empty());
}

#[test]
fn eager_match_scatters_payload_without_tmh() {
    let mut m = model(TmConfig::default());
    add(&mut m, 1, 7, !0, None);
    drain(&mut m);
    arrive(&mut m, eager(7, 1, b"payload"));
    let mut scattered = None;
    while let Some(a) = m.poll_action() {
        match a {
            TmAction::Scatter {
                buffer,
                message,
                offset,
                len,
            } => scattered = Some((buffer, message[offset..offset + len].to_vec())),
            TmAction::Complete { wc, tm_ref } => {
                assert!(wc
                    .flags
                    .contains(WcFlags::TM_MATCH | WcFlags::TM_DATA_VALID));
                m.completion_polled(tm_ref);
            }
            other => panic!("unexpected action {other:?}"),
        }
    }
    assert_eq!(scattered, Some((1, b"payload".to_vec())));
}

#[test]
fn list_full_is_enomem_and_handles_free_only_after_polling() {
    let mut m = model(TmConfig {
        max_num_tags: 2,
        ..TmConfig::default()
    });
    let h1 = add(&mut m, 1, 1, !0, None);
    add(&mut m, 2, 2, !0, None);
    let e = m
        .post_op(
            3,
            TmOp::Add {
                recv_wr_id: 3,
                buffer: 3,
                len: 8,
                tag: 3,
                mask: !0,
            },
            true,
            None,
        )
        .unwrap_err();
    assert_eq!(e, TmPostError::ListFull);
    assert_eq!(e.errno(), libc::ENOMEM);
    drain(&mut m);
    // Consume entry 1; its handle stays live until the match completion is polled.
    arrive(&mut m, eager(1, 0, b"x"));
    let mut pending = Vec::new();
    while let Some(a) = m.poll_action() {
        if let TmAction::Complete { tm_ref, .. } = a {
            pending.push(tm_ref);
        }
    }
    assert_eq!(
        m.live_handles(),
        2,
        "handle of a consumed, unpolled entry is not reused"
    );
    assert!(m
        .post_op(
            4,
            TmOp::Add {
                recv_wr_id: 4,
                buffer: 4,
                len: 8,
                tag: 4,
                mask: !0
            },
            true,
            None
        )
        .is_err());
    for r in pending {
        m.completion_polled(r);
    }
    assert_eq!(m.live_handles(), 1);
    let h = add(&mut m, 5, 5, !0, None);
    assert_eq!(h, h1, "the freed handle is reused");
}

#[test]
fn max_ops_enforced_until_completions_polled() {
    let mut m = model(TmConfig {
        max_ops: 3,
        ..TmConfig::default()
    });
    m.hold_ops(true);
    add(&mut m, 1, 1, !0, None);
    add(&mut m, 2, 2, !0, None);
    add(&mut m, 3, 3, !0, None);
    let e = m.post_op(4, TmOp::Sync, true, Some(0)).unwrap_err();
    assert_eq!(e, TmPostError::TooManyOps);
    m.hold_ops(false);
    // Executed but not polled: still outstanding.
    let mut refs = Vec::new();
    while let Some(a) = m.poll_action() {
        if let TmAction::Complete { tm_ref, .. } = a {
            refs.push(tm_ref);
        }
    }
    assert_eq!(m.outstanding_ops(), 3);
    assert!(m.post_op(4, TmOp::Sync, true, Some(0)).is_err());
    // Polling the last completion retires every earlier operation too.
    m.completion_polled(*refs.last().unwrap());
    assert_eq!(m.outstanding_ops(), 0);
    m.post_op(4, TmOp::Sync, true, Some(0)).unwrap();
}

#[test]
fn unexpected_goes_to_untagged_buffer_and_counts() {
    let mut m = model(TmConfig::default());
    untagged(&mut m, 2);
    arrive(&mut m, eager(3, 0, b"hello"));
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::Unexpected { byte_len: 21 }]);
    assert_eq!(v[0].opcode, WcOpcode::TmRecv);
    assert_eq!(m.hw_count(), 1);
    assert!(m.matching_suspended());
}

#[test]
fn no_tag_and_fin_are_not_counted() {
    let mut m = model(TmConfig::default());
    untagged(&mut m, 3);
    let mut nt = Tmh {
        opcode: TmhOpcode::NoTag,
        app_ctx: 0,
        tag: 1,
    }
    .to_bytes()
    .to_vec();
    nt.extend_from_slice(b"zz");
    arrive(&mut m, nt);
    let mut fin = rndv(1, 0, 0);
    fin[0] = TmhOpcode::Fin as u8;
    arrive(&mut m, fin);
    arrive(&mut m, b"short".to_vec()); // no TMH at all
    let v = drain(&mut m);
    assert_eq!(v.len(), 3);
    assert!(v.iter().all(|w| w.opcode == WcOpcode::TmNoTag));
    assert_eq!(m.hw_count(), 0);
}

#[test]
fn no_untagged_buffer_holds_message_rnr() {
    let mut m = model(TmConfig::default());
    arrive(&mut m, eager(3, 0, b"hello"));
    assert!(drain(&mut m).is_empty());
    assert_eq!(m.queued_arrivals(), 1);
    // A receive posted meanwhile is matched on retry.
    add(&mut m, 1, 3, !0, None);
    let v = drain(&mut m);
    assert_eq!(v.len(), 2);
    assert_eq!(v[0].opcode, WcOpcode::TmAdd);
    assert!(v[1].flags.contains(WcFlags::TM_MATCH));
}

#[test]
fn rendezvous_match_read_fin_data_valid() {
    let mut m = model(TmConfig::default());
    add(&mut m, 1, 8, !0, None);
    drain(&mut m);
    arrive(&mut m, rndv(8, 0xabc000, 1000));
    let mut seq = Vec::new();
    let mut read_id = None;
    while let Some(a) = m.poll_action() {
        match a {
            TmAction::Complete { wc, tm_ref } => {
                seq.push(format!("{:?}", wc.kind()));
                m.completion_polled(tm_ref);
            }
            TmAction::RdmaRead {
                id, rvh, buffer, ..
            } => {
                assert_eq!((rvh.va, rvh.rkey, rvh.len, buffer), (0xabc000, 77, 1000, 1));
                read_id = Some(id);
                seq.push("read".into());
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        m.live_handles(),
        1,
        "handle held while the read is in flight"
    );
    m.rndv_finished(read_id.unwrap(), WcStatus::Success);
    while let Some(a) = m.poll_action() {
        match a {
            TmAction::SendFin { header, .. } => {
                assert_eq!(header.tmh.opcode, TmhOpcode::Fin);
                assert_eq!(header.tmh.tag, 8);
                assert_eq!(header.rvh.unwrap().len, 1000);
                seq.push("fin".into());
            }
            TmAction::Complete { wc, tm_ref } => {
                seq.push(format!("{:?}", wc.kind()));
                m.completion_polled(tm_ref);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(
        seq,
        vec![
            "TagMatched { info: TmInfo { tag: 8, priv_: 5 }, data_valid: false, byte_len: 0 }",
            "read",
            "fin",
            "TagData { byte_len: 1000 }"
        ]
    );
    assert_eq!(m.live_handles(), 0);
}

#[test]
fn rendezvous_into_small_buffer_is_incomplete_with_headers() {
    let mut m = model(TmConfig::default());
    m.post_op(
        1,
        TmOp::Add {
            recv_wr_id: 1,
            buffer: 1,
            len: 64,
            tag: 8,
            mask: !0,
        },
        true,
        None,
    )
    .unwrap();
    drain(&mut m);
    let msg = rndv(8, 0x1000, 65);
    arrive(&mut m, msg.clone());
    let mut got = Vec::new();
    while let Some(a) = m.poll_action() {
        match a {
            TmAction::Scatter {
                message,
                offset,
                len,
                ..
            } => got = message[offset..offset + len].to_vec(),
            TmAction::Complete { wc, tm_ref } => {
                assert_eq!(wc.status, WcStatus::TmRndvIncomplete);
                assert!(wc.flags.contains(WcFlags::TM_MATCH));
                m.completion_polled(tm_ref);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(got, msg, "TMH+RVH land in the buffer");
    assert!(m.entries().is_empty(), "the tag is consumed");
}

#[test]
fn oversized_rndv_request_is_not_matched() {
    let mut m = model(TmConfig {
        max_rndv_hdr_size: 40,
        ..TmConfig::default()
    });
    untagged(&mut m, 1);
    add(&mut m, 1, 8, !0, None);
    drain(&mut m);
    let mut msg = rndv(8, 0x1000, 10);
    msg.extend_from_slice(&[0; 16]); // 48 bytes > 40
    arrive(&mut m, msg);
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::Unexpected { byte_len: 48 }]);
}

/// §4: m1 arrives unexpected; software, not having seen it, posts r1 with a
/// stale count; m2 (same envelope) must not match r1 and overtake m1.
#[test]
fn race_unexpected_before_add_sync_req() {
    let mut m = model(TmConfig::default());
    untagged(&mut m, 4);
    arrive(&mut m, eager(42, 1, b"m1"));
    // r1 carries sw_cnt = 0: software has not processed m1.
    add(&mut m, 1, 42, !0, Some(0));
    arrive(&mut m, eager(42, 2, b"m2"));
    let v = drain(&mut m);
    assert_eq!(
        kinds(&v),
        vec![
            Completion::Unexpected { byte_len: 18 },
            Completion::TagAdded { sync_req: true },
            Completion::Unexpected { byte_len: 18 },
        ],
        "m2 must not match r1 while the counts differ"
    );
    assert_eq!(m.hw_count(), 2);
    assert_eq!(m.entries().len(), 1, "the ADD was not rejected");
    // Software processes m1 and m2 (m1 matches r1 in software), removes r1
    // from the NIC and resynchronises; matching resumes.
    let h = m.entries()[0].0;
    del(&mut m, h, Some(2));
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::TagDeleted]);
    assert!(!m.matching_suspended());
    add(&mut m, 2, 42, !0, Some(2));
    arrive(&mut m, eager(42, 3, b"m3"));
    let v = drain(&mut m);
    assert_eq!(v[0].kind(), Completion::TagAdded { sync_req: false });
    assert!(v[1].flags.contains(WcFlags::TM_MATCH));
}

/// §4: the same race with the other reading of the rule: only entries added
/// with a stale count are skipped.
#[test]
fn race_unexpected_before_add_stale_entries_mode() {
    let mut m = model(TmConfig {
        sync_mode: SyncMode::StaleEntries,
        ..TmConfig::default()
    });
    untagged(&mut m, 4);
    add(&mut m, 1, 7, !0, Some(0)); // fresh entry on another tag
    drain(&mut m);
    arrive(&mut m, eager(42, 1, b"m1"));
    add(&mut m, 2, 42, !0, Some(0)); // stale
    arrive(&mut m, eager(42, 2, b"m2"));
    arrive(&mut m, eager(7, 3, b"x"));
    let v = drain(&mut m);
    assert_eq!(v[0].kind(), Completion::Unexpected { byte_len: 18 });
    assert_eq!(v[1].kind(), Completion::TagAdded { sync_req: true });
    assert_eq!(
        v[2].kind(),
        Completion::Unexpected { byte_len: 18 },
        "stale entry skipped"
    );
    assert!(
        v[3].flags.contains(WcFlags::TM_MATCH),
        "fresh entry still matches"
    );
    assert_eq!(v[3].wr_id, 1);
    // A SYNC with the right count makes the stale entry eligible.
    sync(&mut m, 2);
    arrive(&mut m, eager(42, 4, b"m4"));
    let v = drain(&mut m);
    assert_eq!(v[0].kind(), Completion::TagSynced);
    assert_eq!(v[1].wr_id, 2);
    assert!(v[1].flags.contains(WcFlags::TM_MATCH));
}

/// §4: cancel (DEL) races with the NIC consuming the entry: TM_ERR on the
/// DEL, the receive completes through its match; never both, never neither.
#[test]
fn race_del_vs_match_tm_err() {
    let mut m = model(TmConfig::default());
    let h = add(&mut m, 1, 5, !0, Some(0));
    drain(&mut m);
    m.hold_ops(true);
    del(&mut m, h, Some(0)); // software cancels; the DEL waits in the NIC
    arrive(&mut m, eager(5, 0, b"data"));
    let v = drain(&mut m);
    assert_eq!(v.len(), 1);
    assert!(
        v[0].flags.contains(WcFlags::TM_MATCH),
        "match wins the race"
    );
    assert!(m.release_op());
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::TagDelConsumed]);
    assert_eq!(v[0].status, WcStatus::TmErr);
    assert_eq!(m.live_handles(), 0, "handle free after both completions");

    // The other order: DEL first, the message goes unexpected.
    let mut m = model(TmConfig::default());
    untagged(&mut m, 1);
    let h = add(&mut m, 1, 5, !0, Some(0));
    drain(&mut m);
    m.hold_arrivals(true);
    arrive(&mut m, eager(5, 0, b"data"));
    del(&mut m, h, Some(0));
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::TagDeleted]);
    assert!(m.release_arrival());
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::Unexpected { byte_len: 20 }]);
}

/// §4: the DEL of a consumed entry whose match completion has not been polled
/// yet: the handle is not reused in between, so the DEL cannot hit a new entry.
#[test]
fn race_handle_not_reused_before_completions() {
    let mut m = model(TmConfig {
        max_num_tags: 1,
        ..TmConfig::default()
    });
    let h = add(&mut m, 1, 5, !0, Some(0));
    drain(&mut m);
    arrive(&mut m, eager(5, 0, b"d"));
    // The NIC produced the match; software has not polled it.
    let mut unpolled = Vec::new();
    while let Some(a) = m.poll_action() {
        if let TmAction::Complete { tm_ref, .. } = a {
            unpolled.push(tm_ref);
        }
    }
    del(&mut m, h, Some(0));
    assert_eq!(
        m.post_op(
            2,
            TmOp::Add {
                recv_wr_id: 2,
                buffer: 2,
                len: 8,
                tag: 6,
                mask: !0
            },
            true,
            None
        ),
        Err(TmPostError::ListFull)
    );
    let v = drain(&mut m);
    assert_eq!(v[0].status, WcStatus::TmErr);
    for r in unpolled {
        m.completion_polled(r);
    }
    assert_eq!(m.live_handles(), 0);
}

/// §4: software matched an unexpected message to a receive that is also in
/// the NIC list. Without a DEL the NIC later scatters another message into
/// it (the hazard); with the DEL it does not.
#[test]
fn race_sw_match_requires_del() {
    // Hazard: no DEL.
    let mut m = model(TmConfig::default());
    untagged(&mut m, 2);
    let _h = add(&mut m, 1, 9, !0, Some(0));
    drain(&mut m);
    // m1 came in before r1 was added? No: r1 was added, but software matched
    // m0 (unexpected earlier, counted and synced) to r1 in software.
    // Software completes r1 in software and forgets the NIC copy:
    arrive(&mut m, eager(9, 0, b"m2"));
    let v = drain(&mut m);
    assert_eq!(
        v[0].wr_id, 1,
        "the NIC scattered m2 into a receive software already completed"
    );

    // Correct: DEL before completing in software.
    let mut m = model(TmConfig::default());
    untagged(&mut m, 2);
    let h = add(&mut m, 1, 9, !0, Some(0));
    drain(&mut m);
    del(&mut m, h, Some(0));
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::TagDeleted]);
    arrive(&mut m, eager(9, 0, b"m2"));
    let v = drain(&mut m);
    assert_eq!(kinds(&v), vec![Completion::Unexpected { byte_len: 18 }]);
}

/// §4: completions come out in matching order, interleaved with list ops in
/// execution order.
#[test]
fn completions_in_matching_order() {
    let mut m = model(TmConfig::default());
    untagged(&mut m, 8);
    m.hold_ops(true);
    m.hold_arrivals(true);
    add(&mut m, 1, 1, !0, Some(0));
    arrive(&mut m, eager(2, 0, b"a")); // unexpected
    arrive(&mut m, eager(1, 0, b"b"));
    add(&mut m, 2, 2, !0, Some(1));
    // Chosen order: op1, arrival a, op2, arrival b.
    assert!(m.release_op());
    assert!(m.release_arrival());
    assert!(m.release_op());
    assert!(m.release_arrival());
    let v = drain(&mut m);
    assert_eq!(
        v.iter().map(|w| (w.opcode, w.wr_id)).collect::<Vec<_>>(),
        vec![
            (WcOpcode::TmAdd, 1001),
            (WcOpcode::TmRecv, 50_000),
            (WcOpcode::TmAdd, 1002),
            (WcOpcode::TmRecv, 1),
        ]
    );
}

/// §4: software must sync at least every 2^14 unexpected messages; with a
/// SYNC every 2^14 messages matching resumes each time.
#[test]
fn sync_every_2_14_unexpected() {
    let mut m = model(TmConfig {
        max_untagged: 1 << 15,
        ..TmConfig::default()
    });
    let mut sw: u32 = 0;
    for round in 0..3u32 {
        untagged(&mut m, 1 << 14);
        for _ in 0..(1u32 << 14) {
            arrive(&mut m, eager(100, 0, b""));
        }
        let v = drain(&mut m);
        assert_eq!(v.len(), 1 << 14);
        assert!(v
            .iter()
            .all(|w| w.kind() == Completion::Unexpected { byte_len: 16 }));
        sw += 1 << 14;
        assert_eq!(u32::from(m.hw_count()), sw % 65536, "round {round}");
        sync(&mut m, sw);
        add(&mut m, u64::from(round), 100, !0, Some(sw));
        arrive(&mut m, eager(100, 0, b"x"));
        let v = drain(&mut m);
        assert_eq!(v[0].kind(), Completion::TagSynced);
        assert_eq!(v[1].kind(), Completion::TagAdded { sync_req: false });
        assert!(
            v[2].flags.contains(WcFlags::TM_MATCH),
            "round {round}: matching resumed"
        );
    }
}

/// The unexpected counter is 16 bits: 65 536 unexpected messages bring it
/// back to 0, and a count of 65 536 (or 0) reported by software agrees for
/// matching. The ADD's completion still asks for a sync: mlx5 compares the
/// 16-bit hardware count with the whole count software passed.
#[test]
fn counter_wraps_16_bit() {
    let mut m = model(TmConfig {
        max_untagged: 1 << 16,
        ..TmConfig::default()
    });
    for _ in 0..4 {
        untagged(&mut m, 1 << 14);
        for _ in 0..(1u32 << 14) {
            arrive(&mut m, eager(1, 0, b""));
        }
        drain(&mut m);
    }
    assert_eq!(m.unexpected_total(), 65_536);
    assert_eq!(m.hw_count(), 0, "wrapped");
    assert!(!m.matching_suspended(), "0 == 65536 mod 2^16");
    add(&mut m, 1, 1, !0, Some(65_536));
    untagged(&mut m, 1);
    arrive(&mut m, eager(1, 0, b"y"));
    let v = drain(&mut m);
    assert_eq!(v[0].kind(), Completion::TagAdded { sync_req: true });
    assert!(v[1].flags.contains(WcFlags::TM_MATCH));
    // One more unexpected: 1 != 0 -> suspended.
    arrive(&mut m, eager(2, 0, b""));
    drain(&mut m);
    assert_eq!(m.hw_count(), 1);
    assert!(m.matching_suspended());
}

#[test]
fn del_unknown_handle_is_einval() {
    let mut m = model(TmConfig::default());
    let e = m
        .post_op(1, TmOp::Del { handle: 3 }, true, None)
        .unwrap_err();
    assert_eq!(e, TmPostError::BadHandle(3));
    assert_eq!(e.errno(), libc::EINVAL);
    let e = m
        .post_op(1, TmOp::Del { handle: 99_999 }, true, None)
        .unwrap_err();
    assert_eq!(e, TmPostError::BadHandle(99_999));
}

#[test]
fn unsignaled_del_of_consumed_entry_still_reports_tm_err() {
    let mut m = model(TmConfig::default());
    let h = add(&mut m, 1, 5, !0, None);
    drain(&mut m);
    m.hold_ops(true);
    m.post_op(2, TmOp::Del { handle: h }, false, None).unwrap();
    arrive(&mut m, eager(5, 0, b""));
    drain(&mut m);
    m.release_op();
    let v = drain(&mut m);
    assert_eq!(v.len(), 1);
    assert_eq!(v[0].status, WcStatus::TmErr);
    let _ = TmRef::default();
}

/// Random programs of ADD/DEL/SYNC, arrivals (eager and rendezvous), holds
/// and releases, with completions polled at random times. Invariants: every
/// message completes exactly once (matched, unexpected or no-tag); every
/// tagged buffer is settled exactly once (matched xor deleted); a handle is
/// never handed out while software may still hear of it (in the list, DEL
/// pending, or a completion naming it not yet polled); handles in the list
/// are unique and bounded by the capacity.
#[test]
fn randomized_invariants() {
    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next() % n
        }
    }
    #[derive(Default)]
    struct Sw {
        in_nic: Vec<u32>,                             // handles believed in the list
        dels: Vec<u32>,                               // DELs posted, not completed
        unpolled: Vec<TmRef>,                         // completions not yet polled
        settled: std::collections::HashMap<u64, u32>, // recv_wr_id -> settlements
        by_handle: std::collections::HashMap<u32, u64>,
        msgs_done: u64,
        unexpected_seen: u32,
        reads: Vec<u64>,
        tm_errs: u64,
    }
    impl Sw {
        fn absorb(&mut self, a: TmAction<u32, Vec<u8>>) {
            match a {
                TmAction::Complete { wc, tm_ref } => {
                    self.unpolled.push(tm_ref);
                    let f = wc.flags;
                    match wc.opcode {
                        WcOpcode::TmRecv if f.contains(WcFlags::TM_MATCH) => {
                            *self.settled.entry(wc.wr_id).or_default() += 1;
                            self.msgs_done += 1;
                            let h = tm_ref.handle.unwrap();
                            self.in_nic.retain(|x| *x != h);
                        }
                        WcOpcode::TmRecv if f.contains(WcFlags::TM_DATA_VALID) => {}
                        WcOpcode::TmRecv => {
                            self.msgs_done += 1;
                            self.unexpected_seen += 1;
                        }
                        WcOpcode::TmNoTag => self.msgs_done += 1,
                        WcOpcode::TmDel => {
                            let h = tm_ref.handle.unwrap();
                            if let Some(p) = self.dels.iter().position(|x| *x == h) {
                                self.dels.swap_remove(p);
                            }
                            if wc.status == WcStatus::TmErr {
                                self.tm_errs += 1;
                            }
                            if wc.status == WcStatus::Success {
                                let wr = self.by_handle[&h];
                                *self.settled.entry(wr).or_default() += 1;
                            }
                        }
                        _ => {}
                    }
                }
                TmAction::RdmaRead { id, .. } => self.reads.push(id),
                _ => {}
            }
        }
        fn busy(&self, h: u32) -> bool {
            self.in_nic.contains(&h)
                || self.dels.contains(&h)
                || self.unpolled.iter().any(|r| r.handle == Some(h))
        }
    }
    let (mut matched, mut unexpected, mut tm_errs) = (0u64, 0u64, 0u64);
    for seed in 1..=300u64 {
        let mut r = Rng(seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
        let mode = if seed % 2 == 0 {
            SyncMode::Global
        } else {
            SyncMode::StaleEntries
        };
        let mut m = model(TmConfig {
            max_num_tags: 8,
            max_ops: 6,
            max_rndv_hdr_size: 64,
            max_untagged: 1000,
            sync_mode: mode,
        });
        untagged(&mut m, 1000);
        let mut sw = Sw::default();
        let mut sent = 0u64;
        let mut next_wr = 1u64;
        let mut adds = 0u64;
        for _ in 0..300 {
            match r.below(10) {
                0 | 1 => {
                    let wr = next_wr;
                    next_wr += 1;
                    let sync = (r.below(2) == 0).then_some(sw.unexpected_seen);
                    let op = TmOp::Add {
                        recv_wr_id: wr,
                        buffer: wr as u32,
                        len: 64,
                        tag: r.below(4),
                        mask: if r.below(4) == 0 { 0 } else { !0 },
                    };
                    match m.post_op(wr, op, r.below(3) != 0, sync) {
                        Ok(h) => {
                            assert!(!sw.busy(h), "seed {seed}: handle {h} reused too early");
                            sw.in_nic.push(h);
                            sw.by_handle.insert(h, wr);
                            adds += 1;
                        }
                        Err(TmPostError::ListFull) => assert_eq!(m.live_handles(), 8),
                        Err(TmPostError::TooManyOps) => assert!(m.outstanding_ops() >= 6),
                        Err(e) => panic!("seed {seed}: {e}"),
                    }
                }
                2 if !sw.in_nic.is_empty() => {
                    let i = r.below(sw.in_nic.len() as u64) as usize;
                    let h = sw.in_nic[i];
                    // DELs are signaled: an unsignaled successful DEL is never
                    // reported, so software could not settle its buffer.
                    if m.post_op(7, TmOp::Del { handle: h }, true, Some(sw.unexpected_seen))
                        .is_ok()
                    {
                        sw.in_nic.swap_remove(i);
                        sw.dels.push(h);
                    }
                }
                3 => {
                    let _ = m.post_op(8, TmOp::Sync, r.below(2) == 0, Some(sw.unexpected_seen));
                }
                4..=6 => {
                    let tag = r.below(4);
                    let msg = match r.below(6) {
                        0 => rndv(tag, 0x1000, 32),
                        1 => {
                            let mut v = rndv(tag, 0, 0);
                            v[0] = TmhOpcode::NoTag as u8;
                            v
                        }
                        _ => eager(tag, sent as u32, b"p"),
                    };
                    arrive(&mut m, msg);
                    sent += 1;
                }
                7 => m.hold_ops(r.below(3) == 0),
                8 => m.hold_arrivals(r.below(3) == 0),
                _ => {
                    if r.below(2) == 0 {
                        m.release_op();
                    } else {
                        m.release_arrival();
                    }
                }
            }
            if r.below(3) == 0 {
                for t in sw.unpolled.drain(..) {
                    m.completion_polled(t);
                }
                if let Some(id) = sw.reads.pop() {
                    m.rndv_finished(id, WcStatus::Success);
                }
            }
            while let Some(a) = m.poll_action() {
                sw.absorb(a);
            }
            assert!(m.live_handles() <= 8, "seed {seed}");
            let mut hs: Vec<u32> = m.entries().iter().map(|e| e.0).collect();
            let n = hs.len();
            hs.sort_unstable();
            hs.dedup();
            assert_eq!(hs.len(), n, "seed {seed}: duplicate handle in the list");
        }
        // Quiesce: release everything, finish reads, poll everything.
        m.hold_ops(false);
        m.hold_arrivals(false);
        for _ in 0..20 {
            for id in std::mem::take(&mut sw.reads) {
                m.rndv_finished(id, WcStatus::Success);
            }
            while let Some(a) = m.poll_action() {
                sw.absorb(a);
            }
            for t in sw.unpolled.drain(..) {
                m.completion_polled(t);
            }
        }
        assert_eq!(
            sw.msgs_done, sent,
            "seed {seed}: every message completes exactly once"
        );
        assert!(
            sw.settled.values().all(|n| *n == 1),
            "seed {seed}: a buffer settled twice"
        );
        let settled = sw.settled.len() as u64;
        assert_eq!(
            settled + sw.in_nic.len() as u64,
            adds,
            "seed {seed}: a buffer lost"
        );
        assert_eq!(m.entries().len(), sw.in_nic.len(), "seed {seed}");
        assert_eq!(m.queued_arrivals() + m.queued_ops() + m.rndv_in_flight(), 0);
        matched += m.matched_total();
        unexpected += m.unexpected_total();
        tm_errs += sw.tm_errs;
    }
    // The programs do exercise every path.
    assert!(
        matched > 1000 && unexpected > 1000 && tm_errs > 10,
        "{matched} {unexpected} {tm_errs}"
    );
}

/// Too long for the buffer: the tag (or untagged buffer) is consumed, the
/// data truncated, and the completion says `LocLenErr`.
#[test]
fn too_long_eager_is_loc_len_err() {
    let mut m = model(TmConfig::default());
    m.post_op(
        1,
        TmOp::Add {
            recv_wr_id: 1,
            buffer: 1,
            len: 4,
            tag: 3,
            mask: !0,
        },
        true,
        Some(0),
    )
    .unwrap();
    m.post_untagged(2, 2, 8).unwrap();
    drain(&mut m);
    arrive(&mut m, eager(3, 0, b"123456"));
    arrive(&mut m, eager(3, 0, b"unexpected and long"));
    let mut lens = Vec::new();
    let mut wcs = Vec::new();
    while let Some(a) = m.poll_action() {
        match a {
            TmAction::Scatter { len, .. } => lens.push(len),
            TmAction::Complete { wc, tm_ref } => {
                m.completion_polled(tm_ref);
                wcs.push(wc);
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(lens, vec![4, 8], "truncated to the buffers");
    assert_eq!((wcs[0].wr_id, wcs[0].status), (1, WcStatus::LocLenErr));
    assert!(wcs[0].flags.contains(WcFlags::TM_MATCH));
    assert_eq!((wcs[1].wr_id, wcs[1].status), (2, WcStatus::LocLenErr));
    assert!(m.entries().is_empty());
    assert_eq!(m.live_handles(), 0);
}
