//! The tag capability of the BTL interface (`BtlModule::tag_offload`,
//! `tmpi_btl::TagOffload`) over the soft NIC held to mlx5, across two real
//! processes, with no pml above: what the pml relies on when it drives a
//! NIC tag list through the interface alone.
//!
//! Rank 0 sends (every eager message as a caller's header and a payload),
//! rank 1 receives:
//! - tagged eager messages into a receive's own buffer, in one packet and
//!   in two (mlx5's two completions: a match without data, then the data),
//!   and ones whose payload is shorter than the header, or empty: the NIC
//!   scattered header and payload at the start of the buffer; the event
//!   hands up the header alone (`TagData::Placed`), the payload is at the
//!   start of the buffer and every byte past it holds its original value
//!   (MPI lets a receive modify only the bytes of the message it gets);
//! - one into a bounce buffer: header and payload come up copied, whole;
//! - a rendezvous request the NIC matches and reads into the receive's
//!   buffer (match, then `Read`), and one no receive takes, which software
//!   reads and answers with `send_fin` by its token (once only);
//! - an unexpected eager message, counted by the NIC;
//! - DEL and SYNC carrying the caller's count.
//!
//! Without a NIC list (`btl_openib_tm_enable 0`) the capability is still
//! offered: tagged messages come up as uncounted unexpected ones, and list
//! operations are refused.

mod common;

use std::time::Instant;

use common::*;
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlError, BtlModule, TagData, TagEvent, TagMsg};
use tmpi_pml::tag::{pack, Envelope};

const SENTINEL: u8 = 0xA5;
/// Length of the caller's header in front of every eager payload (a pml
/// MATCH header's size).
const HDR_LEN: usize = 20;

/// The caller's header of the message with tag `t`: no byte equals the
/// sentinel, so a header byte left in a receive's buffer shows.
fn header(t: u8) -> Vec<u8> {
    (0..HDR_LEN as u8)
        .map(|i| t.wrapping_mul(32) ^ (i + 1))
        .collect()
}

/// Header and payload as one message (what comes up copied).
fn whole(t: u8, payload: &[u8]) -> Vec<u8> {
    [header(t), payload.to_vec()].concat()
}

/// Asserts a `Placed` result: the header handed up, the payload at the
/// start of `buf`, every other byte of `buf` untouched.
fn assert_placed(d: &TagData, t: u8, payload: &[u8], buf: &[u8]) {
    let TagData::Placed { header: h, len } = d else {
        panic!("tag {t}: an eager message into the receive's own buffer is placed, not copied out: {d:?}");
    };
    assert_eq!(h, &header(t), "tag {t}: the header alone comes up");
    assert_eq!(*len, payload.len(), "tag {t}: payload length");
    assert_eq!(&buf[..payload.len()], payload, "tag {t}: payload in place");
    assert!(
        buf[payload.len()..].iter().all(|&x| x == SENTINEL),
        "tag {t}: bytes past the payload changed: {:?}",
        &buf[payload.len()..(payload.len() + 2 * HDR_LEN).min(buf.len())]
    );
}
const RNDV_LEN: usize = 200_000;
const LOST_RNDV_LEN: usize = 70_000;

fn tag(t: i32) -> u64 {
    pack(Envelope::new(5, 0, t)).unwrap()
}

/// Progresses `m` and collects its tag events until `done` holds.
fn collect(
    m: &mut Box<dyn BtlModule>,
    evs: &mut Vec<TagEvent>,
    mut done: impl FnMut(&[TagEvent]) -> bool,
) {
    let start = Instant::now();
    while !done(evs) {
        m.progress(&mut |_: u32, _: u8, _: &[u8]| panic!("no generic fragment expected"));
        m.tag_offload().expect("tag capability").take_events(evs);
        assert!(start.elapsed() < WAIT, "timed out; events so far: {evs:#?}");
    }
}

fn matched(evs: &[TagEvent], id: u64) -> Option<&TagEvent> {
    evs.iter()
        .find(|e| matches!(e, TagEvent::Matched { id: i, .. } if *i == id))
}

fn data(evs: &[TagEvent], id: u64) -> Option<&TagEvent> {
    evs.iter()
        .find(|e| matches!(e, TagEvent::Data { id: i, .. } if *i == id))
}

#[test]
fn child_entry() {
    let Ok(role) = std::env::var(ROLE_ENV) else {
        return;
    };
    let mut job = child_job();
    let mut mods = init_btl(&mut job);
    let m: &mut Box<dyn BtlModule> = &mut mods[0];
    m.add_procs(&[0, 1], &mut job.modex).unwrap();
    job.modex.fence().unwrap();
    match role.as_str() {
        "tm" => with_list(&mut job, m),
        "notm" => without_list(&mut job, m),
        r => panic!("unknown role {r}"),
    }
    m.finalize().unwrap();
}

fn with_list(job: &mut Job, m: &mut Box<dyn BtlModule>) {
    let t = m.tag_offload().expect("openib offers the tag capability");
    let caps = t.caps().expect("a NIC list on tmsoft0");
    assert!(caps.max_tags > 0 && caps.max_ops > 0);
    let limit = t.tagged_limit();
    let small = pattern(1, 100);
    let long = pattern(2, limit.min(3000) - HDR_LEN);
    // Shorter than the header the NIC places in front of it: the bytes
    // the header covered past the payload must get their values back.
    let short = pattern(7, 5);
    let empty: Vec<u8> = Vec::new();
    let bounced = pattern(3, 50);
    let unexpected = pattern(4, 10);
    let rndv = pattern(5, RNDV_LEN);
    let lost = pattern(6, LOST_RNDV_LEN);
    let mut evs = Vec::new();
    if job.rank == 1 {
        // Own buffers: bigger than the tagged limit (so they are used
        // instead of bounce buffers), filled with a sentinel.
        let mut own = vec![SENTINEL; limit + 4096];
        let mut own_long = vec![SENTINEL; limit + 4096];
        let mut own_short = vec![SENTINEL; limit + 1];
        let mut own_empty = vec![SENTINEL; limit];
        let mut read_into = vec![SENTINEL; RNDV_LEN.max(limit) + 64];
        let t = m.tag_offload().unwrap();
        // SAFETY: the buffers outlive their receives (each ends with an
        // event collected below before the buffers are read or dropped).
        unsafe {
            t.post_recv(
                1,
                101,
                0,
                tag(1),
                !0,
                Some((own.as_mut_ptr(), own.len())),
                0,
            )
            .unwrap();
            t.post_recv(2, 102, 0, tag(2), !0, None, 0).unwrap();
            t.post_recv(
                3,
                103,
                0,
                tag(3),
                !0,
                Some((own_long.as_mut_ptr(), own_long.len())),
                0,
            )
            .unwrap();
            t.post_recv(
                4,
                104,
                0,
                tag(4),
                !0,
                Some((read_into.as_mut_ptr(), read_into.len())),
                0,
            )
            .unwrap();
            t.post_recv(
                7,
                107,
                0,
                tag(7),
                !0,
                Some((own_short.as_mut_ptr(), own_short.len())),
                0,
            )
            .unwrap();
            t.post_recv(
                8,
                108,
                0,
                tag(8),
                !0,
                Some((own_empty.as_mut_ptr(), own_empty.len())),
                0,
            )
            .unwrap();
        }
        collect(m, &mut evs, |e| {
            e.iter()
                .filter(|e| matches!(e, TagEvent::Added { .. }))
                .count()
                == 6
        });
        assert!(evs.iter().all(|e| matches!(
            e,
            TagEvent::Added {
                sync_req: false,
                ..
            }
        )));
        evs.clear();
        job.modex.fence().unwrap();
        // Everything rank 0 sends: 6 matches, 2 unexpected.
        let mut unexp = 0u32;
        let mut token = None;
        collect(m, &mut evs, |e| {
            let done = [1, 2, 7, 8].iter().all(|&i| matched(e, i).is_some())
                && [3, 4].iter().all(|&i| data(e, i).is_some());
            done && e
                .iter()
                .filter(|e| matches!(e, TagEvent::Unexpected { .. }))
                .count()
                == 2
        });
        for e in &evs {
            match e {
                TagEvent::Matched {
                    id: 1,
                    recv: 101,
                    peer: 0,
                    data: Some(Ok(d)),
                    ..
                } => assert_placed(d, 1, &small, &own),
                TagEvent::Matched {
                    id: 7,
                    recv: 107,
                    data: Some(Ok(d)),
                    ..
                } => assert_placed(d, 7, &short, &own_short),
                TagEvent::Matched {
                    id: 8,
                    recv: 108,
                    data: Some(Ok(d)),
                    ..
                } => assert_placed(d, 8, &empty, &own_empty),
                TagEvent::Matched {
                    id: 2,
                    data: Some(Ok(TagData::Msg(TagMsg::Eager(b)))),
                    ..
                } => assert_eq!(b, &whole(2, &bounced), "a bounce buffer's copy"),
                TagEvent::Matched {
                    id: 3,
                    tag: tg,
                    data: None,
                    ..
                } => assert_eq!(
                    *tg,
                    tag(3),
                    "mlx5: the match of a multi-packet message first"
                ),
                TagEvent::Data {
                    id: 3,
                    recv: 103,
                    peer: 0,
                    result: Ok(d),
                } => assert_placed(d, 3, &long, &own_long),
                TagEvent::Matched {
                    id: 4, data: None, ..
                } => {}
                TagEvent::Data {
                    id: 4,
                    result: Ok(TagData::Read(n)),
                    ..
                } => {
                    assert_eq!(*n, RNDV_LEN);
                    assert_eq!(&read_into[..RNDV_LEN], &rndv[..], "the NIC read in place");
                    assert!(read_into[RNDV_LEN..].iter().all(|&x| x == SENTINEL));
                }
                TagEvent::Unexpected {
                    peer: 0,
                    counted: true,
                    msg: TagMsg::Eager(b),
                } => {
                    assert_eq!(b, &whole(5, &unexpected));
                    unexp += 1;
                }
                TagEvent::Unexpected {
                    peer: 0,
                    counted: true,
                    msg: TagMsg::Rndv(r),
                } => {
                    assert_eq!((r.tag, r.len), (tag(6), LOST_RNDV_LEN as u64));
                    token = Some(*r);
                    unexp += 1;
                }
                other => panic!("unexpected event {other:?}"),
            }
        }
        assert_eq!(unexp, 2);
        // Software finishes the rendezvous nobody posted for.
        let r = token.expect("the unexpected rendezvous request");
        let mut dst = vec![0u8; LOST_RNDV_LEN];
        m.get(0, &r.region, 0, &mut dst).expect("software read");
        assert_eq!(dst, lost);
        let t = m.tag_offload().unwrap();
        assert!(matches!(t.send_fin(0, r.token, true), Some(Ok(()))));
        assert!(
            t.send_fin(0, r.token, true).is_none(),
            "a token answers once"
        );
        // DEL and SYNC with the count of the two unexpected messages.
        evs.clear();
        // SAFETY: a bounce buffer (no user memory).
        unsafe { t.post_recv(9, 109, 0, tag(9), !0, None, unexp) }.unwrap();
        collect(m, &mut evs, |e| {
            matches!(
                e,
                [TagEvent::Added {
                    id: 9,
                    sync_req: false
                }]
            )
        });
        m.tag_offload().unwrap().del(9, unexp).unwrap();
        m.tag_offload().unwrap().sync(unexp).unwrap();
        collect(m, &mut evs, |e| {
            e.contains(&TagEvent::Deleted { id: 9 }) && e.contains(&TagEvent::Synced)
        });
        assert!(matches!(
            m.tag_offload().unwrap().del(9, unexp),
            Err(BtlError::Unsupported(_))
        ));
        let mut sink = |_: u32, _: u8, _: &[u8]| {};
        job.modex
            .barrier_with(|| {
                m.progress(&mut sink);
            })
            .unwrap();
        drop((own, own_long, own_short, own_empty, read_into));
    } else {
        job.modex.fence().unwrap();
        let t = m.tag_offload().unwrap();
        // A header the NIC's app_ctx cannot describe is refused, nothing
        // sent.
        assert!(matches!(
            t.send_tagged(1, tag(1), &vec![0; 65_536], &[]),
            Err(BtlError::TooLarge { .. })
        ));
        t.send_tagged(1, tag(1), &header(1), &small).unwrap();
        t.send_tagged(1, tag(2), &header(2), &bounced).unwrap();
        t.send_tagged(1, tag(3), &header(3), &long).unwrap();
        t.send_tagged(1, tag(7), &header(7), &short).unwrap();
        t.send_tagged(1, tag(8), &header(8), &empty).unwrap();
        // SAFETY: `rndv` and `lost` stay untouched until their RndvSent
        // events, collected before they are dropped.
        unsafe {
            t.send_rndv(1, tag(4), rndv.as_ptr(), rndv.len(), 7)
                .unwrap();
            t.send_tagged(1, tag(5), &header(5), &unexpected).unwrap();
            t.send_rndv(1, tag(6), lost.as_ptr(), lost.len(), 8)
                .unwrap();
        }
        collect(m, &mut evs, |e| {
            e.contains(&TagEvent::RndvSent { id: 7, ok: true })
                && e.contains(&TagEvent::RndvSent { id: 8, ok: true })
        });
        let mut sink = |_: u32, _: u8, _: &[u8]| {};
        job.modex
            .barrier_with(|| {
                m.progress(&mut sink);
            })
            .unwrap();
        drop((rndv, lost));
    }
}

fn without_list(job: &mut Job, m: &mut Box<dyn BtlModule>) {
    let t = m.tag_offload().expect("offered without a list too");
    assert!(t.caps().is_none());
    // SAFETY: no buffer is handed over (the call is refused).
    let r = unsafe { t.post_recv(1, 1, 0, tag(1), !0, None, 0) };
    assert!(matches!(r, Err(BtlError::Unsupported(_))), "{r:?}");
    let msg = pattern(9, 64);
    let mut evs = Vec::new();
    if job.rank == 0 {
        t.send_tagged(1, tag(1), &header(1), &msg).unwrap();
    } else {
        collect(m, &mut evs, |e| !e.is_empty());
        assert_eq!(
            evs,
            vec![TagEvent::Unexpected {
                peer: 0,
                counted: false,
                msg: TagMsg::Eager(whole(1, &msg))
            }]
        );
    }
    let mut sink = |_: u32, _: u8, _: &[u8]| {};
    job.modex
        .barrier_with(|| {
            m.progress(&mut sink);
        })
        .unwrap();
}

#[test]
fn tag_capability_over_the_nic_list() {
    run_job("tm", 2, &[("btl_openib_if_include", "tmsoft0")]);
}

#[test]
fn tag_capability_without_a_nic_list() {
    run_job(
        "notm",
        2,
        &[
            ("btl_openib_if_include", "tmsoft0"),
            ("btl_openib_tm_enable", "0"),
        ],
    );
}
