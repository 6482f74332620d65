//! The [`Transport`] over the real BTLs: opening the components allowed by
//! the `btl` selection list, wire-up through the modex, and per-peer
//! selection by exclusivity (Open MPI's bml, reduced to one module per
//! peer: no striping on one node).
//!
//! Wire-up: every allowed component's `init` publishes its addresses →
//! one modex fence → `add_procs(all ranks)` on every module → the module
//! with the highest exclusivity per peer (`tmpi_btl::select`). No second
//! fence: btl-sm unlinks its segment once every peer attached (counted in
//! the segment). A rank no module reaches is an init error naming the rank
//! and the selection.
//!
//! All pml fragments use BTL tag [`BTL_TAG_PML`]; the pml's own header
//! says what the fragment is.

use std::collections::HashMap;

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, SelectionList};
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlComponent, BtlError, BtlFlags, BtlModule, RemoteRegion};

use tmpi_btl_openib::{offload_of, Event, Op, TmEvent, TmHandle};
use tmpi_tm_engine::split::{NicAction, NicEvent, NicId};

use crate::core::Limits;
use crate::hdr::{Header, FRAG_LEN, KIND_MATCH, KIND_RNDV, MATCH_LEN, RNDV_LEN};
use crate::matching::Envelope;
use crate::raw::{RawBuf, RawBufMut};
use crate::transport::{TmInput, Transport, TxError};
use crate::PmlError;

/// Exit status of a process that lost a message to a completion error
/// (see `other_event`).
pub const EXIT_LOST_MESSAGE: i32 = 17;

/// The BTL tag of every pml fragment.
pub const BTL_TAG_PML: u8 = 0x41;

/// The BTL components this build knows, in preference order.
fn components() -> Vec<&'static dyn BtlComponent> {
    vec![
        &tmpi_btl_self::SelfComponent,
        &tmpi_btl_sm::SmComponent,
        &tmpi_btl_openib::OpenibComponent,
    ]
}

/// The pml's transport over BTL modules.
pub struct BtlNet {
    size: u32,
    modules: Vec<Box<dyn BtlModule>>,
    /// Module index per peer.
    route: Vec<usize>,
    limits: Vec<Limits>,
    /// Whether a module may use `sendi`.
    sendi: Vec<bool>,
    /// Registrations in use: region bytes → (module index, how many sends
    /// use it: one buffer may be in several rendezvous at once).
    regs: HashMap<[u8; tmpi_btl::REMOTE_REGION_BYTES], (usize, usize)>,
    dropped: u64,
    /// The offload path, when one openib module has tag matching.
    tm: Option<TmState>,
    /// Whether some module is btl-openib (its non-fragment events are
    /// drained every progress).
    any_openib: bool,
}

/// The tag-matching module and the tagged buffers posted to it.
struct TmState {
    module: usize,
    caps: (u32, u32),
    /// Per world rank: MATCH/RNDV travel tagged.
    peers: Vec<bool>,
    /// Size of every tagged buffer (the module's eager limit: any tagged pml
    /// fragment fits).
    buf_len: usize,
    /// Posted tagged buffers: NIC id → (buffer, handle, receive).
    bufs: HashMap<u64, (Vec<u8>, TmHandle, u64)>,
}

impl std::fmt::Debug for BtlNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.modules.iter().map(|m| m.name()).collect();
        f.debug_struct("BtlNet")
            .field("modules", &names)
            .field("route", &self.route)
            .finish()
    }
}

fn btl_err(e: BtlError) -> PmlError {
    PmlError::Transport(e.to_string())
}

/// A BTL error as a transport error: btl-openib's completion errors and
/// broken connections are [`TxError::Broken`] (the request fails), the rest
/// [`TxError::Fatal`] (the pml may fall back, e.g. from get to fragments).
fn tx_err(btl: &str, e: BtlError) -> TxError {
    match e {
        BtlError::Io { .. } | BtlError::Protocol { .. } if btl == "openib" => {
            TxError::Broken(e.to_string())
        }
        e => TxError::Fatal(e.to_string()),
    }
}

/// Opens the BTLs and wires them up (see the module documentation).
pub(crate) fn open(
    reg: &Registry,
    info: &ProcessInfo,
    modex: &mut dyn Modex,
    eager_cap: u64,
) -> Result<Box<dyn Transport>, PmlError> {
    let sel: SelectionList = reg
        .register_selection(
            "btl",
            "BTL components to use: a list (self,sm) or an exclusion (^sm)",
        )
        .map_err(tmpi_base::error::Error::from)?
        .value();
    let comps = components();
    for c in &comps {
        c.register_params(reg)
            .map_err(tmpi_base::error::Error::from)?;
    }
    let names: Vec<&str> = comps.iter().map(|c| c.name()).collect();
    for u in sel.unknown_names(&names) {
        tracing::warn!(target: "pml_ob1", "btl selection names unknown component {u:?}");
    }
    let mut modules: Vec<Box<dyn BtlModule>> = Vec::new();
    for c in comps.iter().filter(|c| sel.allows(c.name())) {
        match c.init(reg, info, modex) {
            Ok(mut m) => modules.append(&mut m),
            Err(BtlError::Unavailable(why)) => {
                tracing::debug!(target: "pml_ob1", "btl {} unavailable: {why}", c.name());
            }
            Err(e) => {
                return Err(PmlError::Transport(format!("btl {}: {e}", c.name())));
            }
        }
    }
    modex
        .fence()
        .map_err(|e| PmlError::Transport(format!("modex fence: {e}")))?;
    let all: Vec<u32> = (0..info.size).collect();
    let mut reach = Vec::with_capacity(modules.len());
    for m in modules.iter_mut() {
        reach.push(m.add_procs(&all, modex).map_err(btl_err)?);
    }
    let weights: Vec<(u32, &[u32])> = modules
        .iter()
        .zip(&reach)
        .map(|(m, r)| (m.exclusivity(), r.as_slice()))
        .collect();
    let best = tmpi_btl::select::best_per_peer(info.size, &weights);
    let mut route = Vec::with_capacity(best.len());
    for (peer, b) in best.into_iter().enumerate() {
        match b {
            Some(i) => route.push(i),
            None => {
                return Err(PmlError::Transport(format!(
                    "no BTL reaches rank {peer} from rank {} (btl selection {sel:?}, modules {:?})",
                    info.rank,
                    modules.iter().map(|m| m.name()).collect::<Vec<_>>()
                )))
            }
        }
    }
    let limits = route
        .iter()
        .map(|&i| {
            let m = &modules[i];
            let max = m.max_send_size();
            let mut eager = m.eager_limit().min(max.saturating_sub(MATCH_LEN));
            if eager_cap > 0 {
                eager = eager.min(eager_cap as usize);
            }
            Limits {
                eager,
                max_send: max.saturating_sub(FRAG_LEN).max(1),
                get: m.flags().contains(BtlFlags::GET),
            }
        })
        .collect();
    let sendi = modules
        .iter()
        .map(|m| m.flags().contains(BtlFlags::SENDI))
        .collect();
    for (peer, &i) in route.iter().enumerate() {
        tracing::debug!(target: "pml_ob1", peer, btl = modules[i].name(), "route");
    }
    // Only when openib carries traffic: an RDMA device on a one-node job
    // (every peer over sm) must not cost the sm path anything per poll.
    let any_openib = route.iter().any(|&i| modules[i].name() == "openib");
    let mut limits: Vec<Limits> = limits;
    let tm = tm_state(&mut modules, &route, &mut limits);
    Ok(Box::new(BtlNet {
        size: info.size,
        modules,
        route,
        limits,
        sendi,
        regs: HashMap::new(),
        dropped: 0,
        tm,
        any_openib,
    }))
}

/// The offload path: exactly one openib module with tag matching (several
/// would need one split matcher per NIC list; then software matching).
/// Tagged peers get an eager limit that leaves room for the pml header in
/// the tagged payload.
fn tm_state(
    modules: &mut [Box<dyn BtlModule>],
    route: &[usize],
    limits: &mut [Limits],
) -> Option<TmState> {
    let mut found = Vec::new();
    for (i, m) in modules.iter_mut().enumerate() {
        if let Some(ob) = offload_of(m.as_mut()) {
            if let Some(caps) = ob.ob_tm_caps() {
                found.push((i, caps, ob.ob_eager_limit()));
            }
        }
    }
    if found.len() > 1 {
        tracing::warn!(target: "pml_ob1", "{} openib modules with tag matching: matching stays in software", found.len());
        return None;
    }
    let (module, caps, buf_len) = found.pop()?;
    if buf_len < RNDV_LEN + tmpi_btl::REMOTE_REGION_BYTES || caps.0 == 0 {
        return None;
    }
    let peers: Vec<bool> = route.iter().map(|&i| i == module).collect();
    if !peers.iter().any(|&p| p) {
        return None;
    }
    for (l, _) in limits.iter_mut().zip(&peers).filter(|(_, &p)| p) {
        l.eager = l.eager.min(buf_len - MATCH_LEN);
    }
    tracing::debug!(target: "pml_ob1", max_num_tags = caps.0, max_ops = caps.1, "tag matching offload on");
    Some(TmState {
        module,
        caps,
        peers,
        buf_len,
        bufs: HashMap::new(),
    })
}

/// The envelope in a MATCH/RNDV header.
fn envelope_of(hdr: &[u8]) -> Option<Envelope> {
    match Header::parse(hdr).ok()? {
        Header::Match(m, _) => Some(Envelope {
            ctx: m.ctx,
            src: m.src,
            tag: m.tag,
        }),
        Header::Rndv(r) => Some(Envelope {
            ctx: r.m.ctx,
            src: r.m.src,
            tag: r.m.tag,
        }),
        _ => None,
    }
}

impl Transport for BtlNet {
    fn size(&self) -> u32 {
        self.size
    }

    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }

    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Vec<u8>> {
        let i = *self.route.get(peer as usize)?;
        // SAFETY: the buffer belongs to a send request that stays incomplete
        // (its memory valid and unmodified, isend contract) until FIN/ACK,
        // when the core deregisters it before completing the request.
        let r = unsafe { self.modules[i].register_region(buf.ptr(), buf.len()) };
        match r {
            Ok(r) => {
                let b = r.to_bytes();
                self.regs.entry(b).or_insert((i, 0)).1 += 1;
                Some(b.to_vec())
            }
            Err(e) => {
                tracing::debug!(target: "pml_ob1", peer, "register_region: {e}; pipelined");
                None
            }
        }
    }

    fn deregister(&mut self, _peer: u32, region: &[u8]) {
        let Ok(key) = <[u8; tmpi_btl::REMOTE_REGION_BYTES]>::try_from(region) else {
            return;
        };
        let Some(e) = self.regs.get_mut(&key) else {
            return;
        };
        let i = e.0;
        e.1 -= 1;
        if e.1 == 0 {
            self.regs.remove(&key);
        }
        // One deregistration per registration: the module drops one pin.
        if let Ok(r) = RemoteRegion::from_bytes(region) {
            self.modules[i].deregister_region(&r);
        }
    }

    fn send(&mut self, peer: u32, hdr: &[u8], data: &[u8]) -> Result<(), TxError> {
        let Some(&i) = self.route.get(peer as usize) else {
            return Err(TxError::Fatal(format!("no route to rank {peer}")));
        };
        if let Some(tm) = &self.tm {
            if tm.peers[peer as usize] && matches!(hdr.first(), Some(&KIND_MATCH | &KIND_RNDV)) {
                return self.send_tagged(peer, hdr, data);
            }
        }
        let m = &mut self.modules[i];
        let r = if self.sendi[i] {
            match m.sendi(peer, BTL_TAG_PML, hdr, data) {
                Err(BtlError::WouldBlock) => m.send(peer, BTL_TAG_PML, hdr, data),
                r => r,
            }
        } else {
            m.send(peer, BTL_TAG_PML, hdr, data)
        };
        match r {
            Ok(()) => Ok(()),
            Err(BtlError::WouldBlock) => Err(TxError::Busy),
            Err(e) => Err(tx_err(m.name(), e)),
        }
    }

    fn get(&mut self, peer: u32, region: &[u8], dst: RawBufMut) -> Result<(), TxError> {
        let Some(&i) = self.route.get(peer as usize) else {
            return Err(TxError::Fatal(format!("no route to rank {peer}")));
        };
        let r = RemoteRegion::from_bytes(region).map_err(|e| TxError::Fatal(e.to_string()))?;
        // SAFETY: `dst` is the prefix of a receive buffer whose request is
        // in the pulling phase: valid for writes and not accessed by anyone
        // else until the request completes (irecv contract).
        let dst = unsafe { dst.as_mut_slice() };
        let m = &mut self.modules[i];
        m.get(peer, &r, 0, dst).map_err(|e| tx_err(m.name(), e))
    }

    fn progress(&mut self, deliver: &mut dyn FnMut(u32, &[u8])) -> usize {
        let mut n = 0;
        let dropped = &mut self.dropped;
        for m in self.modules.iter_mut() {
            n += m.progress(&mut |peer: u32, tag: u8, bytes: &[u8]| {
                if tag == BTL_TAG_PML {
                    deliver(peer, bytes);
                } else {
                    *dropped += 1;
                    tracing::error!(target: "pml_ob1", peer, tag, "fragment with a foreign BTL tag dropped");
                }
            });
        }
        n
    }

    fn finalize(&mut self) {
        for m in self.modules.iter_mut() {
            if let Err(e) = m.finalize() {
                tracing::warn!(target: "pml_ob1", btl = m.name(), "finalize: {e}");
            }
        }
        // The modules (and their registrations) are gone: the tagged
        // buffers may go.
        if let Some(tm) = &mut self.tm {
            tm.bufs.clear();
        }
    }

    fn tm_caps(&self) -> Option<(u32, u32)> {
        self.tm.as_ref().map(|t| t.caps)
    }

    fn tm_inputs(&self) -> bool {
        self.any_openib
    }

    fn tm_peer(&self, peer: u32) -> bool {
        self.tm
            .as_ref()
            .is_some_and(|t| t.peers.get(peer as usize).copied().unwrap_or(false))
    }

    fn tm_take(&mut self, out: &mut Vec<TmInput>) {
        if !self.any_openib {
            return;
        }
        let tm_module = self.tm.as_ref().map(|t| t.module);
        for (i, m) in self.modules.iter_mut().enumerate() {
            let Some(ob) = offload_of(m.as_mut()) else {
                continue;
            };
            for ev in ob.ob_take_events() {
                match (Some(i) == tm_module, self.tm.as_mut()) {
                    (true, Some(tm)) => tm_input(tm, ev, out),
                    _ => match ev {
                        // A peer with tag matching sent tagged; this
                        // module has none: a plain arrival.
                        Event::Recv(f)
                            if f.tmh.app_ctx == u32::from(BTL_TAG_PML) && f.rvh.is_none() =>
                        {
                            out.push(TmInput::Frag {
                                peer: f.peer,
                                from_nic: false,
                                bytes: f.payload().to_vec(),
                            })
                        }
                        other => other_event(other),
                    },
                }
            }
        }
    }

    fn tm_exec(&mut self, a: NicAction<u64>) -> Option<NicEvent> {
        let tm = self.tm.as_mut()?;
        let Some(ob) = offload_of(self.modules[tm.module].as_mut()) else {
            return match a {
                NicAction::Add { id, .. } => Some(NicEvent::AddRefused { id }),
                NicAction::Del { id, .. } => Some(NicEvent::DelRefused { id }),
                NicAction::Sync { .. } => Some(NicEvent::SyncRefused),
            };
        };
        match a {
            NicAction::Add {
                id,
                recv,
                tag,
                unexpected_cnt,
                ..
            } => {
                let mut buf = vec![0u8; tm.buf_len];
                // SAFETY: the buffer's heap allocation does not move when
                // the Vec moves into `bufs`, where it stays (untouched)
                // until the receive ended (its Matched, Deleted or Failed
                // event removes it) or the modules are finalized.
                let r = unsafe {
                    ob.ob_tm_post_recv(
                        buf.as_mut_ptr(),
                        buf.len(),
                        tag.tag,
                        tag.mask,
                        id.0,
                        unexpected_cnt,
                    )
                };
                match r {
                    Ok(h) => {
                        tm.bufs.insert(id.0, (buf, h, recv));
                        None
                    }
                    Err(e) => {
                        tracing::debug!(target: "pml_ob1", recv, "TAG_ADD refused: {e}");
                        Some(NicEvent::AddRefused { id })
                    }
                }
            }
            NicAction::Del { id, unexpected_cnt } => {
                let Some(&(_, h, _)) = tm.bufs.get(&id.0) else {
                    return Some(NicEvent::DelRefused { id });
                };
                match ob.ob_tm_del(h, unexpected_cnt) {
                    Ok(()) => None,
                    Err(e) => {
                        tracing::debug!(target: "pml_ob1", "TAG_DEL refused: {e}");
                        Some(NicEvent::DelRefused { id })
                    }
                }
            }
            NicAction::Sync { unexpected_cnt } => match ob.ob_tm_sync(unexpected_cnt) {
                Ok(()) => None,
                Err(e) => {
                    tracing::debug!(target: "pml_ob1", "TAG_SYNC refused: {e}");
                    Some(NicEvent::SyncRefused)
                }
            },
        }
    }
}

impl BtlNet {
    /// A MATCH/RNDV to a tagged peer: one tagged eager send of the whole
    /// pml fragment under the envelope's tag.
    fn send_tagged(&mut self, peer: u32, hdr: &[u8], data: &[u8]) -> Result<(), TxError> {
        let Some(tm) = &self.tm else {
            return Err(TxError::Fatal("no tag matching".into()));
        };
        let Some(env) = envelope_of(hdr) else {
            return Err(TxError::Fatal("malformed MATCH/RNDV header".into()));
        };
        let mut frag = Vec::with_capacity(hdr.len() + data.len());
        frag.extend_from_slice(hdr);
        frag.extend_from_slice(data);
        let Some(ob) = offload_of(self.modules[tm.module].as_mut()) else {
            return Err(TxError::Fatal("openib module lost".into()));
        };
        match ob.ob_send_tagged(
            peer,
            crate::offload::msg_tag(env),
            u32::from(BTL_TAG_PML),
            &frag,
        ) {
            Ok(()) => Ok(()),
            Err(BtlError::WouldBlock) => Err(TxError::Busy),
            Err(e) => Err(tx_err("openib", e)),
        }
    }
}

/// One event of the tag-matching module, as an input of the offload path.
fn tm_input(tm: &mut TmState, ev: Event, out: &mut Vec<TmInput>) {
    match ev {
        Event::Recv(f) if f.tmh.app_ctx == u32::from(BTL_TAG_PML) && f.rvh.is_none() => {
            out.push(TmInput::Frag {
                peer: f.peer,
                from_nic: f.unexpected,
                bytes: f.payload().to_vec(),
            });
        }
        Event::Tm(t) => match t {
            TmEvent::Added { recv_id, sync_req } => out.push(TmInput::Nic(NicEvent::Added {
                id: NicId(recv_id),
                sync_req,
            })),
            TmEvent::Matched {
                recv_id,
                peer,
                tag,
                byte_len,
                complete,
                ..
            } => {
                let id = NicId(recv_id);
                let Some((buf, _, recv)) = tm.bufs.remove(&recv_id) else {
                    tracing::error!(target: "pml_ob1", recv_id, "NIC match for no tagged buffer");
                    return;
                };
                if !complete {
                    out.push(TmInput::Failed {
                        recv,
                        id,
                        error: "NIC rendezvous (not used by the pml)".into(),
                    });
                    return;
                }
                let e = tmpi_btl_openib::tag::unpack(tag);
                let n = (byte_len as usize).min(buf.len());
                out.push(TmInput::Matched {
                    recv,
                    id,
                    peer,
                    envelope: tmpi_tm_engine::Envelope::new(e.context, e.source, e.tag),
                    bytes: buf[..n].to_vec(),
                });
            }
            TmEvent::RndvDone { recv_id, .. } => {
                out.push(TmInput::Nic(NicEvent::DataDone { id: NicId(recv_id) }))
            }
            TmEvent::RndvIncomplete { recv_id, .. } => {
                if let Some((_, _, recv)) = tm.bufs.remove(&recv_id) {
                    out.push(TmInput::Failed {
                        recv,
                        id: NicId(recv_id),
                        error: "NIC rendezvous (not used by the pml)".into(),
                    });
                }
            }
            TmEvent::Deleted { recv_id } => {
                tm.bufs.remove(&recv_id);
                out.push(TmInput::Nic(NicEvent::Deleted { id: NicId(recv_id) }));
            }
            TmEvent::DelConsumed { recv_id } => {
                out.push(TmInput::Nic(NicEvent::DelConsumed { id: NicId(recv_id) }))
            }
            TmEvent::Synced => out.push(TmInput::Nic(NicEvent::Synced)),
        },
        Event::Failed {
            id,
            op: Op::TaggedRecv,
            error,
            ..
        } => {
            if let Some((_, _, recv)) = tm.bufs.remove(&id) {
                tracing::error!(target: "pml_ob1", recv, "tagged receive failed: {error}");
                out.push(TmInput::Failed {
                    recv,
                    id: NicId(id),
                    error: error.to_string(),
                });
            }
        }
        other => other_event(other),
    }
}

/// Events of an openib module the pml does not act on: logged. A send
/// that failed after its request completed (eager and fragment sends
/// complete once copied) lost a message no request can report: like Open
/// MPI's ob1 without fault tolerance, the process ends (non-zero), and the
/// launcher ends the job, rather than leave the receiver waiting forever.
fn other_event(ev: Event) {
    match ev {
        Event::Failed {
            peer,
            op: Op::Send,
            error,
            ..
        } => {
            tracing::error!(target: "pml_ob1", peer,
                "a message to rank {peer} was lost ({error}); no request can report it: ending the job");
            eprintln!("tmpi: pml: connection to rank {peer} broken by a completion error ({error}); aborting");
            std::process::exit(EXIT_LOST_MESSAGE);
        }
        Event::Failed {
            peer, op, error, ..
        } => {
            tracing::error!(target: "pml_ob1", peer, ?op, "openib operation failed: {error}");
        }
        Event::Recv(f) => {
            tracing::error!(target: "pml_ob1", peer = f.peer, kind = ?f.kind, "unexpected tagged fragment dropped");
        }
        _ => {}
    }
}
