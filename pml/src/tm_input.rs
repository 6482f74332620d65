//! The offload path's input: the events of tag-offloading BTL modules
//! (`tmpi_btl::TagEvent`, in the NIC's completion order) as the pml's
//! [`TmInput`]s, which the protocol core feeds to the split matcher and to
//! its receives. What a tag means (the envelope, `crate::tag`) and what the
//! bytes of a tagged message are (pml fragments; a rendezvous request
//! taken in software becomes the RNDV it stands for) is the pml's; how the
//! NIC got them there is the module's.

use rustc_hash::FxHashMap;

use tmpi_btl::{TagData, TagEvent, TagMsg, TagOffload, TagRndv};
use tmpi_tm_engine::split::{NicEvent, NicId};

use crate::hdr::{MatchHdr, RndvHdr, FLAG_REGION};
use crate::transport::{NicData, NicFrag, TmInput};

/// Exit status of a process that lost a message to a completion error
/// (see [`lost_message`]; the launcher reports it).
pub(crate) const EXIT_LOST_MESSAGE: i32 = 17;

/// Rendezvous requests taken in software: (peer, token) → the module that
/// took it, until the pml's FIN for `token` goes out as that module's FIN.
pub(crate) type OpenRequests = FxHashMap<(u32, u64), usize>;

/// A rendezvous request taken in software, as the pml RNDV it stands for:
/// envelope from the tag, region = the sender's data, `sreq` = the
/// module's token (the pml's FIN for it becomes the module's FIN,
/// `BtlNet::fin_of_rts`). `None` for a tag that names no communicator
/// the pml offloads.
fn rndv_frag(r: &TagRndv) -> Option<Vec<u8>> {
    let e = crate::tag::unpack(r.tag);
    if e.context >= crate::tag::MAX_CONTEXT {
        return None;
    }
    let region = r.region.to_bytes();
    Some(
        RndvHdr {
            m: MatchHdr {
                ctx: e.context,
                src: e.source as i32,
                tag: e.tag,
                seq: 0,
            },
            flags: FLAG_REGION,
            len: r.len,
            sreq: r.token,
            region: &region,
            data: &[],
        }
        .encode(),
    )
}

/// A tagged message as the pml fragment it carries: an eager message is
/// one; a rendezvous request becomes a RNDV (its token remembered in
/// `rts_in` for module `module`). An unusable one is answered (an error FIN
/// for a rendezvous request) and reported.
fn msg_frag(
    msg: TagMsg,
    peer: u32,
    module: usize,
    rts_in: &mut OpenRequests,
    t: &mut dyn TagOffload,
) -> Result<Vec<u8>, String> {
    match msg {
        TagMsg::Eager(bytes) => Ok(bytes),
        TagMsg::Rndv(r) => match rndv_frag(&r) {
            Some(bytes) => {
                rts_in.insert((peer, r.token), module);
                Ok(bytes)
            }
            None => {
                if let Some(Err(e)) = t.send_fin(peer, r.token, false) {
                    tracing::warn!(target: "pml_ob1", peer, "could not refuse a rendezvous request from rank {peer}: {e}");
                }
                Err(format!(
                    "rendezvous request from rank {peer} with a tag no communicator uses"
                ))
            }
        },
        TagMsg::Invalid(why) => Err(why),
    }
}

/// What a matched receive got, as the pml takes it: a NIC read, or a
/// fragment (copied out whole, or an eager payload already in place).
fn nic_data(
    d: TagData,
    peer: u32,
    module: usize,
    rts_in: &mut OpenRequests,
    t: &mut dyn TagOffload,
) -> Result<NicData, String> {
    let frag = match d {
        TagData::Read(n) => return Ok(NicData::Read(n)),
        TagData::Placed { header, len } => NicFrag::Placed { header, len },
        TagData::Msg(m) => NicFrag::Bytes(msg_frag(m, peer, module, rts_in, t)?),
    };
    Ok(NicData::Frag { peer, frag })
}

/// One event of a tag-offloading module (number `module`; `list`: the one
/// whose list the split matcher drives) as inputs of the offload path.
pub(crate) fn tm_input(
    ev: TagEvent,
    module: usize,
    list: bool,
    rts_in: &mut OpenRequests,
    t: &mut dyn TagOffload,
    out: &mut Vec<TmInput>,
) {
    match ev {
        TagEvent::Unexpected { peer, counted, msg } => {
            let from_nic = list && counted;
            match msg_frag(msg, peer, module, rts_in, t) {
                Ok(bytes) => out.push(TmInput::Frag {
                    peer,
                    from_nic,
                    bytes,
                }),
                Err(why) => {
                    tracing::error!(target: "pml_ob1", peer, "tagged message from rank {peer} dropped: {why}");
                    if from_nic {
                        // Counted by the NIC: the split matcher must count
                        // it too.
                        out.push(TmInput::Frag {
                            peer,
                            from_nic,
                            bytes: Vec::new(),
                        });
                    }
                }
            }
        }
        TagEvent::Added { id, sync_req } => out.push(TmInput::Nic(NicEvent::Added {
            id: NicId(id),
            sync_req,
        })),
        TagEvent::Deleted { id } => out.push(TmInput::Nic(NicEvent::Deleted { id: NicId(id) })),
        TagEvent::DelConsumed { id } => {
            out.push(TmInput::Nic(NicEvent::DelConsumed { id: NicId(id) }))
        }
        TagEvent::Synced => out.push(TmInput::Nic(NicEvent::Synced)),
        TagEvent::Matched {
            id,
            recv,
            peer,
            tag,
            data,
        } => {
            let (id, envelope) = (NicId(id), crate::tag::unpack(tag));
            let data = data.map(|d| d.and_then(|d| nic_data(d, peer, module, rts_in, t)));
            match data {
                None => out.push(TmInput::NicPending { recv, id, envelope }),
                Some(Ok(NicData::Frag { frag, .. })) => out.push(TmInput::Matched {
                    recv,
                    id,
                    peer,
                    envelope,
                    frag,
                }),
                Some(Ok(NicData::Read(_))) => out.push(TmInput::Failed {
                    recv,
                    id,
                    error: "NIC read reported with its match".into(),
                }),
                Some(Err(error)) => out.push(TmInput::Failed { recv, id, error }),
            }
        }
        TagEvent::Data {
            id,
            recv,
            peer,
            result,
        } => {
            let result = result.and_then(|d| nic_data(d, peer, module, rts_in, t));
            out.push(TmInput::NicData {
                recv,
                id: NicId(id),
                result,
            });
        }
        TagEvent::Failed { id, recv, error } => out.push(TmInput::Failed {
            recv,
            id: NicId(id),
            error,
        }),
        TagEvent::RndvSent { id, ok } => out.push(TmInput::SendDone { sreq: id, ok }),
        TagEvent::Lost { peer, error } => lost_message(peer, &error),
    }
}

/// A send that failed after its request completed (eager and fragment
/// sends complete once copied) lost a message no request can report: like
/// Open MPI's ob1 without fault tolerance, the process ends (non-zero), and
/// the launcher ends the job, rather than leave the receiver waiting
/// forever.
fn lost_message(peer: u32, error: &str) {
    tracing::error!(target: "pml_ob1", peer,
        "a message to rank {peer} was lost ({error}); no request can report it: ending the job");
    eprintln!(
        "tmpi: pml: connection to rank {peer} broken by a completion error ({error}); aborting"
    );
    std::process::exit(EXIT_LOST_MESSAGE);
}
