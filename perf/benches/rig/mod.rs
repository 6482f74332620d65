//! The split matcher driven by the soft NIC model, shared by the `split` and `sync` benches:
//! [`Rig::pump`] pulls every NIC-list operation the matcher asks for, executes it on
//! `TmListModel`, and feeds every completion back, as the pml does (docs/split-matcher.md).

use std::hint::black_box;

use tmpi_tm_engine::split::{NicAction, NicEvent, NicId, RecvInfo, SplitConfig, SplitMatcher};
use tmpi_tm_engine::Envelope;
use tmpi_verbs::soft::tm::{Arrival, TmAction, TmConfig, TmListModel, TmOp};
use tmpi_verbs::wire::{Tmh, TmhOpcode};
use tmpi_verbs::{WcFlags, WcOpcode, WcStatus};

pub const DEL_BIT: u64 = 1 << 62;
pub const SYNC_WR: u64 = 1 << 61;

pub struct Rig {
    pub m: SplitMatcher<u64, u64>,
    pub nic: TmListModel<u32, Vec<u8>>,
    handles: rustc_hash::FxHashMap<u64, u32>,
    untagged: u32,
}

pub fn tag_of(tag: i32) -> u64 {
    (1u64 << 24) | tag as u32 as u64
}

impl Rig {
    pub fn new() -> Self {
        let mut nic = TmListModel::new(TmConfig::default());
        for b in 0..4096 {
            nic.post_untagged(1 << 60 | u64::from(b), b, 256).unwrap();
        }
        Rig {
            m: SplitMatcher::new(SplitConfig::default()).unwrap(),
            nic,
            handles: Default::default(),
            untagged: 4096,
        }
    }

    /// Pull every action, post it, run the NIC, feed every completion back.
    pub fn pump(&mut self) {
        loop {
            let mut moved = false;
            while let Some(a) = self.m.poll_action() {
                moved = true;
                match a {
                    NicAction::Add {
                        id,
                        tag,
                        unexpected_cnt,
                        ..
                    } => {
                        let h = self
                            .nic
                            .post_op(
                                id.0,
                                TmOp::Add {
                                    recv_wr_id: id.0,
                                    buffer: u32::MAX,
                                    len: 4096,
                                    tag: tag.tag,
                                    mask: tag.mask,
                                },
                                true,
                                Some(unexpected_cnt),
                            )
                            .unwrap();
                        self.handles.insert(id.0, h);
                    }
                    NicAction::Del { id, unexpected_cnt } => {
                        let h = self.handles[&id.0];
                        self.nic
                            .post_op(
                                id.0 | DEL_BIT,
                                TmOp::Del { handle: h },
                                true,
                                Some(unexpected_cnt),
                            )
                            .unwrap();
                    }
                    NicAction::Sync { unexpected_cnt } => {
                        self.nic
                            .post_op(SYNC_WR, TmOp::Sync, true, Some(unexpected_cnt))
                            .unwrap();
                    }
                }
            }
            while let Some(a) = self.nic.poll_action() {
                moved = true;
                let TmAction::Complete { wc, tm_ref } = a else {
                    continue;
                };
                self.nic.completion_polled(tm_ref);
                let ev = match wc.opcode {
                    WcOpcode::TmAdd => NicEvent::Added {
                        id: NicId(wc.wr_id),
                        sync_req: wc.flags.contains(WcFlags::TM_SYNC_REQ),
                    },
                    WcOpcode::TmDel if wc.status == WcStatus::Success => NicEvent::Deleted {
                        id: NicId(wc.wr_id & !DEL_BIT),
                    },
                    WcOpcode::TmDel => NicEvent::DelConsumed {
                        id: NicId(wc.wr_id & !DEL_BIT),
                    },
                    WcOpcode::TmSync => NicEvent::Synced,
                    WcOpcode::TmRecv if wc.flags.contains(WcFlags::TM_MATCH) => {
                        let info = wc.tm_info.unwrap();
                        NicEvent::Matched {
                            id: NicId(wc.wr_id),
                            envelope: Envelope::new(0, 1, (info.tag & 0xff_ffff) as i32),
                            complete: true,
                        }
                    }
                    _ => {
                        // Unexpected: hand it to the matcher, give the buffer back.
                        let b = self.untagged;
                        self.untagged += 1;
                        self.nic
                            .post_untagged(1 << 60 | u64::from(b), b, 256)
                            .unwrap();
                        self.m.nic_unexpected(Envelope::new(0, 1, 7), 0).unwrap();
                        continue;
                    }
                };
                self.m.nic_event(ev).unwrap();
            }
            while let Some(e) = self.m.poll_event() {
                black_box(e);
            }
            if !moved {
                return;
            }
        }
    }

    pub fn message(&mut self, tag: i32) {
        let mut b = Tmh {
            opcode: TmhOpcode::Eager,
            app_ctx: 0,
            tag: tag_of(tag),
        }
        .to_bytes()
        .to_vec();
        b.extend_from_slice(&[0; 8]);
        self.nic.message_arrived(Arrival {
            qp_num: 1,
            src_qp: 2,
            message: b,
        });
    }
}

pub fn info(tag: i32) -> RecvInfo {
    RecvInfo::offloadable(4096, tag_of(tag), !0)
}

impl Rig {
    /// One message of tag 7 arrives, the NIC delivers it unexpected and the matcher is handed
    /// it (`nic_unexpected`); the matcher's actions are left unpulled. False if the NIC did
    /// not deliver it unexpected.
    #[allow(dead_code)] // used by the `sync` bench, not by `split`
    pub fn deliver_unexpected(&mut self) -> bool {
        self.message(7);
        let mut delivered = false;
        while let Some(a) = self.nic.poll_action() {
            let TmAction::Complete { wc, tm_ref } = a else {
                continue;
            };
            self.nic.completion_polled(tm_ref);
            if wc.opcode == WcOpcode::TmRecv && !wc.flags.contains(WcFlags::TM_MATCH) {
                let b = self.untagged;
                self.untagged += 1;
                self.nic
                    .post_untagged(1 << 60 | u64::from(b), b, 256)
                    .unwrap();
                self.m.nic_unexpected(Envelope::new(0, 1, 7), 0).unwrap();
                delivered = true;
            }
        }
        delivered
    }
}
