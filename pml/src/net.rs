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

use rustc_hash::FxHashMap;

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, SelectionList};
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlComponent, BtlError, BtlFlags, BtlModule, RemoteRegion};

use tmpi_btl_openib::{
    offload_of, Event, FragKind, Op, RecvFrag, Rvh, TmEvent, TmHandle, Tmh, TmhOpcode, RVH_LEN,
    TMH_LEN,
};
use tmpi_tm_engine::split::{NicAction, NicEvent, NicId};

use crate::core::Limits;
use crate::hdr::{
    Header, MatchHdr, RndvHdr, FLAG_REGION, FRAG_LEN, KIND_ACK, KIND_FIN, KIND_MATCH, KIND_RNDV,
    MATCH_LEN, RNDV_LEN,
};
use crate::matching::Envelope;
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;
use crate::transport::{NicData, TmInput, Transport, TxError};
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
        &tmpi_btl_tcp::TcpComponent,
    ]
}

/// A module that carries no peer's traffic (e.g. btl-tcp in a one-node
/// job where every peer is reached over sm) is polled once in this many
/// progress rounds, not every round: its poll may be a system call
/// (`epoll_wait`), which measured ~45% of an 8-byte sm ping-pong's time
/// when it ran every round. It is still polled, rarely, so that it accepts
/// (and rejects) connections and reports failures. Once in 256 rounds
/// still cost one `epoll_wait` per ~5 us of waiting, about one per 8 KiB
/// ping-pong iteration (Open MPI: 186 in a whole run); a round is 20-50 ns
/// when spinning, ~1 us when yielding, so 16384 rounds are 0.3-16 ms.
const IDLE_MODULE_POLL: u32 = 16384;

/// The pml's transport over BTL modules.
pub struct BtlNet {
    size: u32,
    modules: Vec<Box<dyn BtlModule>>,
    /// Module index per peer.
    route: Vec<usize>,
    limits: Vec<Limits>,
    /// Whether a module may use `sendi`.
    sendi: Vec<bool>,
    /// Whether a module carries some peer's traffic (is in `route`).
    carries: Vec<bool>,
    /// Indices of those modules (polled every round; all modules are
    /// polled every [`IDLE_MODULE_POLL`]th round).
    carrying: Vec<usize>,
    /// Whether a module gets input only from its own sends (btl-self,
    /// [`BtlModule::input_only_from_sends`]).
    loopback: Vec<bool>,
    /// For such a module: nothing sent to it since its last progress that
    /// delivered nothing, so its poll is skipped (saves a virtual call per
    /// progress round in a waiting loop).
    quiet: Vec<bool>,
    /// Progress rounds so far (modules that carry nothing are polled only
    /// every [`IDLE_MODULE_POLL`] rounds).
    polls: u32,
    /// Registrations in use: region bytes → (module index, how many sends
    /// use it: one buffer may be in several rendezvous at once).
    regs: FxHashMap<[u8; tmpi_btl::REMOTE_REGION_BYTES], (usize, usize)>,
    dropped: u64,
    /// The offload path, when one openib module has tag matching.
    tm: Option<TmState>,
    /// Whether some module is btl-openib (its non-fragment events are
    /// drained every progress).
    any_openib: bool,
    /// NIC rendezvous requests taken in software: (peer, token) → the
    /// request's TMH and RVH, until the pml's FIN for `token` (the `sreq`
    /// of the RNDV the pml was given) goes out as the btl FIN.
    rts_in: HashMap<(u32, u64), (Tmh, Rvh)>,
    next_token: u64,
    /// `pml_tm_rndv`: RNDV to tagged peers as NIC rendezvous requests.
    rts_enabled: bool,
}

/// First token of [`BtlNet::rts_in`] (high bit set: distinct from request
/// ids in practice; only `(peer, token)` pairs present are intercepted).
const TOKEN_BASE: u64 = 1 << 63;

/// A tagged buffer: a pml bounce buffer, or the receive's own buffer with
/// a copy of its first bytes (what a tagged eager fragment or an incomplete
/// rendezvous request may overwrite: MPI lets a receive modify only the
/// bytes of the message it gets).
enum TagBuf {
    Bounce(Bounce),
    User(RawBufMut, Vec<u8>),
}

/// A bounce buffer for tagged receives, registered once for its lifetime
/// (`pin`; `None` when registering failed: the ADD registers it then) and
/// reused from [`TmState::pool`].
struct Bounce {
    mem: Vec<u8>,
    pin: Option<Box<dyn std::any::Any + Send>>,
}

impl TagBuf {
    /// The first `n` bytes (at most the buffer), as the NIC placed them; a
    /// user buffer gets its original first bytes back.
    fn take_head(&self, n: usize) -> Vec<u8> {
        match self {
            TagBuf::Bounce(b) => b.mem[..n.min(b.mem.len())].to_vec(),
            TagBuf::User(u, saved) => {
                let n = n.min(u.len());
                // SAFETY: the receive's buffer, valid until the receive
                // completes (it has not: the NIC just matched it, and the
                // entry left the NIC); the NIC wrote these bytes before the
                // completion was polled; nothing else accesses it meanwhile.
                let s = unsafe { std::slice::from_raw_parts_mut(u.ptr(), n) };
                let out = s.to_vec();
                let k = n.min(saved.len());
                s[..k].copy_from_slice(&saved[..k]);
                out
            }
        }
    }
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
    /// Posted tagged buffers by NIC id.
    bufs: HashMap<u64, Tagged>,
    /// Tagged buffers the NIC matched whose data are still coming (its
    /// first of two completions was seen), by NIC id.
    pending: HashMap<u64, PendingMatch>,
    /// Bounce buffers not in use (at most `caps.0`).
    pool: Vec<Bounce>,
}

impl TmState {
    /// A tagged buffer is back from the NIC: a bounce buffer returns to
    /// the pool.
    fn recycle(&mut self, buf: TagBuf) {
        if let TagBuf::Bounce(b) = buf {
            if self.pool.len() < self.caps.0 as usize {
                self.pool.push(b);
            }
        }
    }

    /// Every registration the offload path holds is released (before the
    /// modules go); the memory stays until the modules are gone.
    fn unpin_all(&mut self) {
        let bufs = self.bufs.values_mut().map(|t| &mut t.buf);
        let pending = self.pending.values_mut().map(|p| &mut p.buf);
        for b in bufs.chain(pending) {
            if let TagBuf::Bounce(b) = b {
                b.pin = None;
            }
        }
        for b in &mut self.pool {
            b.pin = None;
        }
    }
}

/// A tagged buffer in the NIC's list.
struct Tagged {
    buf: TagBuf,
    handle: TmHandle,
    recv: u64,
    /// World rank of the receive's source: the sender of whatever matches.
    peer: Option<u32>,
}

/// A tagged buffer the NIC matched, waiting for its data.
struct PendingMatch {
    buf: TagBuf,
    recv: u64,
    peer: Option<u32>,
    /// The message's TMH as the match completion gave it (opcode EAGER for
    /// a pml eager fragment, RNDV otherwise).
    tmh: Tmh,
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

/// A BTL error as a transport error: btl-openib's and btl-tcp's completion
/// errors and broken connections are [`TxError::Broken`] (the request
/// fails), the rest [`TxError::Fatal`] (the pml may fall back, e.g. from get
/// to fragments).
fn tx_err(btl: &str, e: BtlError) -> TxError {
    match e {
        BtlError::Io { .. } | BtlError::Protocol { .. } if btl == "openib" || btl == "tcp" => {
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
    let carries: Vec<bool> = (0..modules.len()).map(|i| route.contains(&i)).collect();
    let carrying = (0..modules.len()).filter(|&i| carries[i]).collect();
    let loopback: Vec<bool> = modules.iter().map(|m| m.input_only_from_sends()).collect();
    let mut limits: Vec<Limits> = limits;
    let tm = tm_state(&mut modules, &route, &mut limits);
    Ok(Box::new(BtlNet {
        size: info.size,
        modules,
        route,
        limits,
        sendi,
        quiet: loopback.clone(),
        loopback,
        carries,
        carrying,
        polls: 0,
        regs: FxHashMap::default(),
        dropped: 0,
        tm,
        any_openib,
        rts_in: HashMap::new(),
        next_token: TOKEN_BASE,
        rts_enabled: reg
            .register_bool(
                tmpi_base::mca::ParamSpec::new("pml", "", "tm_rndv")
                    .help("Rendezvous to peers on a tag-matching NIC as NIC rendezvous requests (the receiver's NIC reads the data when it matched the receive)"),
                true,
            )
            .map(|p| p.value())
            .unwrap_or(true),
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
        pending: HashMap::new(),
        pool: Vec::new(),
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

impl BtlNet {
    /// One polling round of the modules (`Transport::progress`);
    /// `waiting`: the caller is blocked on one message
    /// (`Transport::progress_waiting`). Inlined into both: one call frame
    /// less per polling round. Most rounds poll only the modules that
    /// carry traffic (`carrying`, a quiet loopback skipped); every
    /// [`IDLE_MODULE_POLL`]th round polls them all, out of line.
    #[inline(always)]
    fn poll(&mut self, deliver: &mut dyn FnMut(u32, &[u8]), waiting: bool) -> usize {
        self.polls = self.polls.wrapping_add(1);
        if self.polls.is_multiple_of(IDLE_MODULE_POLL) {
            return self.poll_all(deliver, waiting);
        }
        let BtlNet {
            modules,
            carrying,
            loopback,
            quiet,
            dropped,
            ..
        } = self;
        let mut n = 0;
        for &i in carrying.iter() {
            if quiet[i] {
                continue;
            }
            let k = poll_module(&mut *modules[i], dropped, deliver, waiting);
            // A loopback that delivered something is polled again next
            // round (conservative); one that delivered nothing waits for
            // the next send to it.
            quiet[i] = loopback[i] && k == 0;
            n += k;
        }
        n
    }

    /// A round that polls every module, carrying traffic or not.
    #[cold]
    #[inline(never)]
    fn poll_all(&mut self, deliver: &mut dyn FnMut(u32, &[u8]), waiting: bool) -> usize {
        let mut n = 0;
        for (i, m) in self.modules.iter_mut().enumerate() {
            let k = poll_module(&mut **m, &mut self.dropped, deliver, waiting);
            self.quiet[i] = self.loopback[i] && k == 0;
            n += k;
        }
        n
    }
}

/// One module's polling: its pml fragments to `deliver`, anything else
/// counted in `dropped`.
#[inline(always)]
fn poll_module(
    m: &mut dyn BtlModule,
    dropped: &mut u64,
    deliver: &mut dyn FnMut(u32, &[u8]),
    waiting: bool,
) -> usize {
    let mut handler = |peer: u32, tag: u8, bytes: &[u8]| {
        if tag == BTL_TAG_PML {
            deliver(peer, bytes);
        } else {
            *dropped += 1;
            tracing::error!(target: "pml_ob1", peer, tag, "fragment with a foreign BTL tag dropped");
        }
    };
    if waiting {
        m.progress_waiting(&mut handler)
    } else {
        m.progress(&mut handler)
    }
}

impl Transport for BtlNet {
    fn size(&self) -> u32 {
        self.size
    }

    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }

    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Region> {
        let i = *self.route.get(peer as usize)?;
        // SAFETY: the buffer belongs to a send request that stays incomplete
        // (its memory valid and unmodified, isend contract) until FIN/ACK,
        // when the core deregisters it before completing the request.
        let r = unsafe { self.modules[i].register_region(buf.ptr(), buf.len()) };
        match r {
            Ok(r) => {
                let b = r.to_bytes();
                self.regs.entry(b).or_insert((i, 0)).1 += 1;
                Some(Region::new(&b))
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
        self.quiet[i] = false;
        if let Some(tm) = &self.tm {
            if tm.peers[peer as usize] && matches!(hdr.first(), Some(&KIND_MATCH | &KIND_RNDV)) {
                return self.send_tagged(peer, hdr, data);
            }
        }
        if !self.rts_in.is_empty() && matches!(hdr.first(), Some(&KIND_FIN | &KIND_ACK)) {
            if let Some(r) = self.fin_of_rts(peer, hdr) {
                return r;
            }
        }
        let m = &mut self.modules[i];
        // The send-immediate answer comes back in a register (a `Result`
        // read back from memory stalled the sender: `BtlModule::try_sendi`);
        // `send` reports what made it refuse, if anything.
        if self.sendi[i] && m.try_sendi(peer, BTL_TAG_PML, hdr, data) {
            return Ok(());
        }
        let r = m.send(peer, BTL_TAG_PML, hdr, data);
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
        // openib: every failure of a read is final for the request (a NIC
        // rendezvous request has no pipelined fallback); a full send queue
        // is retried after progress.
        m.get(peer, &r, 0, dst).map_err(|e| match e {
            BtlError::WouldBlock => TxError::Busy,
            e if m.name() == "openib" => TxError::Broken(e.to_string()),
            e => TxError::Fatal(e.to_string()),
        })
    }

    fn progress(&mut self, deliver: &mut dyn FnMut(u32, &[u8])) -> usize {
        self.poll(deliver, false)
    }

    fn progress_waiting(&mut self, deliver: &mut dyn FnMut(u32, &[u8])) -> usize {
        self.poll(deliver, true)
    }

    fn direct_recv(&self, peer: u32) -> Option<std::sync::Arc<dyn tmpi_btl::DirectRecv>> {
        let &i = self.route.get(peer as usize)?;
        // As `direct_send`: the tagged path and loopbacks keep their own
        // receive logic.
        if self.tm_peer(peer) || self.loopback[i] {
            return None;
        }
        self.modules[i].direct_recv(peer)
    }

    fn direct_send(&self, peer: u32) -> Option<std::sync::Arc<dyn tmpi_btl::DirectSend>> {
        let &i = self.route.get(peer as usize)?;
        // The tagged path and loopbacks keep their own send logic
        // (`BtlNet::send`); so do modules without send-immediate.
        if self.tm_peer(peer) || self.loopback[i] || !self.sendi[i] {
            return None;
        }
        self.modules[i].direct_send(peer)
    }

    fn finalize(&mut self) {
        if let Some(tm) = &mut self.tm {
            tm.unpin_all();
        }
        for m in self.modules.iter_mut() {
            if let Err(e) = m.finalize() {
                tracing::warn!(target: "pml_ob1", btl = m.name(), "finalize: {e}");
            }
        }
        // The modules (and their registrations) are gone: the tagged
        // buffers may go.
        if let Some(tm) = &mut self.tm {
            tm.bufs.clear();
            tm.pending.clear();
            tm.pool.clear();
        }
    }

    fn tm_caps(&self) -> Option<(u32, u32)> {
        self.tm.as_ref().map(|t| t.caps)
    }

    fn take_failed(&mut self) -> Vec<(u32, String)> {
        let mut out = Vec::new();
        let all = self.polls.is_multiple_of(IDLE_MODULE_POLL);
        for (i, m) in self.modules.iter_mut().enumerate() {
            if !(self.carries[i] || all) {
                continue;
            }
            for (peer, why) in m.take_failed_peers() {
                // Only the module that carries the peer matters (a module
                // that merely reaches it carries nothing to it).
                if self.route.get(peer as usize) == Some(&i) {
                    out.push((peer, format!("btl {}: {why}", m.name())));
                }
            }
        }
        out
    }

    fn peer_btl(&self, peer: u32) -> Option<&str> {
        let &i = self.route.get(peer as usize)?;
        Some(self.modules[i].name())
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
                // A NIC rendezvous request taken in software: the pml gets
                // it as a RNDV whose region is the request's RVH.
                let ev = match ev {
                    Event::Recv(f) if f.kind == FragKind::Rndv && f.rvh.is_some() => {
                        let from_nic = Some(i) == tm_module && f.unexpected;
                        match rts_as_rndv(&mut self.rts_in, &mut self.next_token, &f) {
                            Some(bytes) => out.push(TmInput::Frag {
                                peer: f.peer,
                                from_nic,
                                bytes,
                            }),
                            None => {
                                tracing::error!(target: "pml_ob1", peer = f.peer, "malformed rendezvous request dropped");
                                if from_nic {
                                    // Counted by the NIC: the split matcher
                                    // must count it too.
                                    out.push(TmInput::Frag {
                                        peer: f.peer,
                                        from_nic,
                                        bytes: Vec::new(),
                                    });
                                }
                            }
                        }
                        continue;
                    }
                    ev => ev,
                };
                match (Some(i) == tm_module, self.tm.as_mut()) {
                    (true, Some(tm)) => {
                        let mut ctx = TmInputCtx {
                            tm,
                            ob: &mut *ob,
                            rts_in: &mut self.rts_in,
                            next_token: &mut self.next_token,
                        };
                        ctx.input(ev, out)
                    }
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

    fn tm_exec(
        &mut self,
        a: NicAction<u64>,
        user: Option<RawBufMut>,
        peer: Option<u32>,
    ) -> Option<NicEvent> {
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
                // The receive's own buffer when the split matcher asks for
                // it and every tagged pml fragment fits (an eager message
                // lands there whole, header first, and is copied out like
                // from a bounce buffer); a NIC rendezvous is then read
                // straight into it. Otherwise a bounce buffer.
                let mut buf = match user {
                    Some(u) if u.len() >= tm.buf_len && u.len() <= u32::MAX as usize => {
                        // SAFETY: the receive's buffer (valid, pml
                        // contract), not yet given to the NIC.
                        let head = unsafe { std::slice::from_raw_parts(u.ptr(), tm.buf_len) };
                        TagBuf::User(u, head.to_vec())
                    }
                    _ => TagBuf::Bounce(tm.pool.pop().unwrap_or_else(|| {
                        let mut mem = vec![0u8; tm.buf_len];
                        // SAFETY: the Vec's heap memory stays allocated
                        // while the pin lives (both move together; the pin
                        // is dropped first, in `unpin_all`, before the
                        // modules are finalized).
                        let pin = unsafe { ob.ob_pin(mem.as_mut_ptr(), mem.len()) }.ok();
                        Bounce { mem, pin }
                    })),
                };
                let (ptr, len) = match &mut buf {
                    TagBuf::Bounce(b) => (b.mem.as_mut_ptr(), b.mem.len()),
                    TagBuf::User(u, _) => (u.ptr(), u.len()),
                };
                // SAFETY: a bounce buffer's heap allocation does not move
                // when the Vec moves into `bufs`, where it stays (untouched)
                // until the receive ended (its Matched, Deleted or Failed
                // event removes it) or the modules are finalized. A user
                // buffer belongs to a receive that completes only after its
                // entry left the NIC (split matcher), so it stays valid.
                let r = unsafe {
                    ob.ob_tm_post_recv(ptr, len, tag.tag, tag.mask, id.0, unexpected_cnt)
                };
                match r {
                    Ok(handle) => {
                        tm.bufs.insert(
                            id.0,
                            Tagged {
                                buf,
                                handle,
                                recv,
                                peer,
                            },
                        );
                        None
                    }
                    Err(e) => {
                        tracing::debug!(target: "pml_ob1", recv, "TAG_ADD refused: {e}");
                        tm.recycle(buf);
                        Some(NicEvent::AddRefused { id })
                    }
                }
            }
            NicAction::Del { id, unexpected_cnt } => {
                let Some(t) = tm.bufs.get(&id.0) else {
                    return Some(NicEvent::DelRefused { id });
                };
                match ob.ob_tm_del(t.handle, unexpected_cnt) {
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
        let Some(env) = envelope_of(hdr) else {
            return Err(TxError::Fatal("malformed MATCH/RNDV header".into()));
        };
        let tag = crate::offload::msg_tag(env);
        if let Some(r) = self.send_rts(peer, hdr, tag) {
            return r;
        }
        let Some(tm) = &self.tm else {
            return Err(TxError::Fatal("no tag matching".into()));
        };
        let mut frag = Vec::with_capacity(hdr.len() + data.len());
        frag.extend_from_slice(hdr);
        frag.extend_from_slice(data);
        let Some(ob) = offload_of(self.modules[tm.module].as_mut()) else {
            return Err(TxError::Fatal("openib module lost".into()));
        };
        match ob.ob_send_tagged(peer, tag, u32::from(BTL_TAG_PML), &frag) {
            Ok(()) => Ok(()),
            Err(BtlError::WouldBlock) => Err(TxError::Busy),
            Err(e) => Err(tx_err("openib", e)),
        }
    }
}

impl BtlNet {
    /// A RNDV with a registered region to a tagged peer goes out as a NIC
    /// rendezvous request `TMH(RNDV) | RVH` (no inline data): a receiver's
    /// NIC that matches it reads the data into the receive buffer and sends
    /// the FIN itself; a receiver that matches it in software reads and
    /// FINs (docs/pml.md). `None`: not applicable (no region, a message
    /// that fits a tagged buffer, an envelope that does not pack, or a
    /// request the module refuses), the RNDV travels as a tagged eager.
    fn send_rts(&mut self, peer: u32, hdr: &[u8], tag: u64) -> Option<Result<(), TxError>> {
        let tm = self.tm.as_ref()?;
        if !self.rts_enabled {
            return None;
        }
        let Ok(Header::Rndv(r)) = Header::parse(hdr) else {
            return None;
        };
        if r.flags & FLAG_REGION == 0 || (r.len as usize) <= tm.buf_len {
            return None;
        }
        if tmpi_btl_openib::tag::unpack(tag).context >= tmpi_btl_openib::tag::MAX_CONTEXT {
            return None;
        }
        let region = RemoteRegion::from_bytes(r.region).ok()?;
        if region.len < r.len || r.len > tmpi_btl_openib::MAX_RNDV_LEN as u64 {
            return None;
        }
        let ob = offload_of(self.modules[tm.module].as_mut())?;
        // The FIN is found by (peer, tag, app_ctx): the send request's id
        // folded to 32 bits keeps concurrent requests of one envelope apart
        // (a collision is refused and takes the tagged-eager path).
        let app_ctx = (r.sreq as u32) ^ ((r.sreq >> 32) as u32);
        if app_ctx == u32::from(BTL_TAG_PML) {
            // The receiver tells eager fragments from rendezvous requests
            // it matched by this app_ctx: keep them apart.
            return None;
        }
        // SAFETY: the region is the send request's buffer (registered by
        // `register` above for this RNDV); the request stays incomplete, its
        // buffer valid and unmodified (isend contract), until this
        // request's FIN or failure (`TmInput::SendDone`).
        let res = unsafe {
            ob.ob_send_rndv(
                peer,
                tag,
                app_ctx,
                region.addr as usize as *const u8,
                r.len as usize,
                r.sreq,
            )
        };
        match res {
            Ok(()) => Some(Ok(())),
            Err(tmpi_btl_openib::OpenibError::Busy) => Some(Err(TxError::Busy)),
            Err(e) => {
                tracing::debug!(target: "pml_ob1", peer, "NIC rendezvous request refused ({e}); tagged eager RNDV");
                None
            }
        }
    }

    /// The pml's FIN (or ACK) for a token of [`BtlNet::rts_in`]: the btl
    /// FIN of that rendezvous request instead (an error FIN for a failed
    /// transfer or an ACK: a NIC rendezvous request cannot be pipelined).
    fn fin_of_rts(&mut self, peer: u32, hdr: &[u8]) -> Option<Result<(), TxError>> {
        let (sreq, ok) = match Header::parse(hdr).ok()? {
            Header::Fin(f) => (f.sreq, f.status == 0),
            Header::Ack(a) => (a.sreq, false),
            _ => return None,
        };
        let (tmh, rvh) = self.rts_in.remove(&(peer, sreq))?;
        if !ok {
            tracing::error!(target: "pml_ob1", peer, "rendezvous request from rank {peer} not read; error FIN");
        }
        let i = *self.route.get(peer as usize)?;
        let ob = offload_of(self.modules[i].as_mut())?;
        Some(match ob.ob_send_fin(peer, tmh, rvh, ok) {
            Ok(()) => Ok(()),
            Err(BtlError::WouldBlock) => {
                self.rts_in.insert((peer, sreq), (tmh, rvh));
                Err(TxError::Busy)
            }
            Err(e) => Err(tx_err("openib", e)),
        })
    }
}

/// A NIC rendezvous request handed to software (unexpected, on a module
/// without tag matching, or too long for the tagged buffer), as the pml
/// RNDV it stands for: envelope from the tag, region = the RVH, `sreq` = a
/// fresh token remembered in `rts_in` with the request's TMH/RVH.
fn rts_as_rndv(
    rts_in: &mut HashMap<(u32, u64), (Tmh, Rvh)>,
    next_token: &mut u64,
    f: &RecvFrag,
) -> Option<Vec<u8>> {
    rts_hdr(rts_in, next_token, f.peer, f.tmh, f.rvh?)
}

fn rts_hdr(
    rts_in: &mut HashMap<(u32, u64), (Tmh, Rvh)>,
    next_token: &mut u64,
    peer: u32,
    tmh: Tmh,
    rvh: Rvh,
) -> Option<Vec<u8>> {
    let e = tmpi_btl_openib::tag::unpack(tmh.tag);
    if e.context >= tmpi_btl_openib::tag::MAX_CONTEXT || rvh.len == tmpi_btl_openib::FIN_ERROR_LEN {
        return None;
    }
    let token = *next_token;
    *next_token = next_token.wrapping_add(1) | TOKEN_BASE;
    let region = RemoteRegion {
        addr: rvh.va,
        len: u64::from(rvh.len),
        key: u64::from(rvh.rkey),
    }
    .to_bytes();
    let hdr = RndvHdr {
        m: MatchHdr {
            ctx: e.context,
            src: e.source as i32,
            tag: e.tag,
            seq: 0,
        },
        flags: FLAG_REGION,
        len: u64::from(rvh.len),
        sreq: token,
        region: &region,
        data: &[],
    }
    .encode();
    rts_in.insert((peer, token), (tmh, rvh));
    Some(hdr)
}

/// What turning one event of the tag-matching module into offload-path
/// inputs needs.
struct TmInputCtx<'a> {
    tm: &'a mut TmState,
    ob: &'a mut dyn tmpi_btl_openib::OffloadBtl,
    rts_in: &'a mut HashMap<(u32, u64), (Tmh, Rvh)>,
    next_token: &'a mut u64,
}

/// The split matcher's envelope of a message's TMH tag.
fn tag_envelope(tag: u64) -> tmpi_tm_engine::Envelope {
    let e = tmpi_btl_openib::tag::unpack(tag);
    tmpi_tm_engine::Envelope::new(e.context, e.source, e.tag)
}

/// The sender of a NIC-matched message: the receive's source, known since
/// its ADD (an offloaded receive names one source).
fn sender_of(peer: Option<u32>, recv: u64) -> Result<u32, String> {
    peer.ok_or_else(|| format!("NIC match for receive {recv}, which names no source"))
}

impl TmInputCtx<'_> {
    /// One event of the tag-matching module, as inputs of the offload path.
    fn input(&mut self, ev: Event, out: &mut Vec<TmInput>) {
        match ev {
            Event::RndvDone { id, .. } => out.push(TmInput::SendDone { sreq: id, ok: true }),
            Event::Failed {
                id,
                op: Op::Rndv,
                peer,
                error,
            } => {
                tracing::error!(target: "pml_ob1", peer, "rendezvous send to rank {peer} failed: {error}");
                out.push(TmInput::SendDone {
                    sreq: id,
                    ok: false,
                })
            }
            Event::Recv(f) if f.tmh.app_ctx == u32::from(BTL_TAG_PML) && f.rvh.is_none() => {
                out.push(TmInput::Frag {
                    peer: f.peer,
                    from_nic: f.unexpected,
                    bytes: f.payload().to_vec(),
                });
            }
            Event::Tm(t) => self.tm_event(t, out),
            Event::Failed {
                id,
                op: Op::TaggedRecv,
                error,
                ..
            } => self.failed(id, error.to_string(), out),
            other => other_event(other),
        }
    }

    fn tm_event(&mut self, t: TmEvent, out: &mut Vec<TmInput>) {
        match t {
            TmEvent::Added { recv_id, sync_req } => out.push(TmInput::Nic(NicEvent::Added {
                id: NicId(recv_id),
                sync_req,
            })),
            TmEvent::Matched {
                recv_id,
                tag,
                app_ctx,
                byte_len,
                complete,
                ..
            } => self.matched(recv_id, tag, app_ctx, byte_len, complete, out),
            TmEvent::DataValid { recv_id, byte_len } => self.data_valid(recv_id, byte_len, out),
            TmEvent::RndvIncomplete {
                recv_id,
                tmh,
                rvh,
                after_match,
            } => self.rndv_incomplete(recv_id, tmh, rvh, after_match, out),
            TmEvent::Deleted { recv_id } => {
                if let Some(t) = self.tm.bufs.remove(&recv_id) {
                    self.tm.recycle(t.buf);
                }
                out.push(TmInput::Nic(NicEvent::Deleted { id: NicId(recv_id) }));
            }
            TmEvent::DelConsumed { recv_id } => {
                out.push(TmInput::Nic(NicEvent::DelConsumed { id: NicId(recv_id) }))
            }
            TmEvent::Synced => out.push(TmInput::Nic(NicEvent::Synced)),
        }
    }

    /// The NIC's match of a tagged buffer, in matching order: complete (a
    /// single-packet eager fragment is in the buffer), or the first of two
    /// completions (the data follow).
    fn matched(
        &mut self,
        recv_id: u64,
        tag: u64,
        app_ctx: u32,
        byte_len: u32,
        complete: bool,
        out: &mut Vec<TmInput>,
    ) {
        let id = NicId(recv_id);
        let Some(t) = self.tm.bufs.remove(&recv_id) else {
            tracing::error!(target: "pml_ob1", recv_id, "NIC match for no tagged buffer");
            return;
        };
        let envelope = tag_envelope(tag);
        if !complete {
            let opcode = if app_ctx == u32::from(BTL_TAG_PML) {
                TmhOpcode::Eager
            } else {
                TmhOpcode::Rndv
            };
            self.tm.pending.insert(
                recv_id,
                PendingMatch {
                    buf: t.buf,
                    recv: t.recv,
                    peer: t.peer,
                    tmh: Tmh {
                        opcode,
                        app_ctx,
                        tag,
                    },
                },
            );
            out.push(TmInput::NicPending {
                recv: t.recv,
                id,
                envelope,
            });
            return;
        }
        let bytes = t.buf.take_head(byte_len as usize);
        self.tm.recycle(t.buf);
        match sender_of(t.peer, t.recv) {
            Ok(peer) => out.push(TmInput::Matched {
                recv: t.recv,
                id,
                peer,
                envelope,
                bytes,
            }),
            Err(error) => out.push(TmInput::Failed {
                recv: t.recv,
                id,
                error,
            }),
        }
    }

    /// The data of a pending match are in: the rest of an eager fragment,
    /// or a rendezvous the NIC read (and FINed).
    fn data_valid(&mut self, recv_id: u64, byte_len: u32, out: &mut Vec<TmInput>) {
        let Some(p) = self.tm.pending.remove(&recv_id) else {
            tracing::error!(target: "pml_ob1", recv_id, "NIC data for no pending match");
            out.push(TmInput::Nic(NicEvent::DataDone { id: NicId(recv_id) }));
            return;
        };
        let result = if p.tmh.opcode == TmhOpcode::Eager {
            let bytes = p.buf.take_head(byte_len as usize);
            sender_of(p.peer, p.recv).map(|peer| NicData::Frag { peer, bytes })
        } else if matches!(p.buf, TagBuf::User(..)) {
            Ok(NicData::Read(byte_len as usize))
        } else {
            Err("NIC rendezvous into a bounce buffer".to_string())
        };
        self.tm.recycle(p.buf);
        out.push(TmInput::NicData {
            recv: p.recv,
            id: NicId(recv_id),
            result,
        });
    }

    /// A rendezvous request longer than the tagged buffer: the NIC consumed
    /// the entry and left TMH+RVH in the buffer; software reads and FINs
    /// (the pml gets it as a RNDV whose region is the RVH).
    fn rndv_incomplete(
        &mut self,
        recv_id: u64,
        tmh: Tmh,
        rvh: Option<Rvh>,
        after_match: bool,
        out: &mut Vec<TmInput>,
    ) {
        let id = NicId(recv_id);
        let (buf, recv, peer, tmh) = if after_match {
            let Some(p) = self.tm.pending.remove(&recv_id) else {
                tracing::error!(target: "pml_ob1", recv_id, "software rendezvous for no pending match");
                return;
            };
            (
                p.buf,
                p.recv,
                p.peer,
                Tmh {
                    opcode: TmhOpcode::Rndv,
                    ..p.tmh
                },
            )
        } else {
            let Some(t) = self.tm.bufs.remove(&recv_id) else {
                tracing::error!(target: "pml_ob1", recv_id, "software rendezvous for no tagged buffer");
                return;
            };
            (t.buf, t.recv, t.peer, tmh)
        };
        // TMH + RVH landed in the buffer: give a user buffer its bytes back.
        let _ = buf.take_head(TMH_AND_RVH);
        self.tm.recycle(buf);
        let envelope = tag_envelope(tmh.tag);
        let frag = sender_of(peer, recv).and_then(|peer| {
            rvh.and_then(|rvh| rts_hdr(self.rts_in, self.next_token, peer, tmh, rvh))
                .map(|bytes| (peer, bytes))
                .ok_or_else(|| "incomplete NIC rendezvous without its request".to_string())
        });
        match (after_match, frag) {
            (true, r) => out.push(TmInput::NicData {
                recv,
                id,
                result: r.map(|(peer, bytes)| NicData::Frag { peer, bytes }),
            }),
            (false, Ok((peer, bytes))) => out.push(TmInput::Matched {
                recv,
                id,
                peer,
                envelope,
                bytes,
            }),
            (false, Err(error)) => out.push(TmInput::Failed { recv, id, error }),
        }
    }

    /// A tagged receive failed at the NIC: before its match (the receive
    /// fails) or after it (its data never came). A rendezvous the NIC was
    /// reading gets an error FIN, so the send fails rather than hangs: to
    /// the receive's source, since the NIC's completions need not name the
    /// sender's QP.
    fn failed(&mut self, recv_id: u64, error: String, out: &mut Vec<TmInput>) {
        let id = NicId(recv_id);
        if let Some(p) = self.tm.pending.remove(&recv_id) {
            tracing::error!(target: "pml_ob1", recv = p.recv, "offloaded receive failed after its match: {error}");
            if p.tmh.opcode == TmhOpcode::Rndv {
                match p.peer {
                    Some(peer) => {
                        let rvh = Rvh {
                            va: 0,
                            rkey: 0,
                            len: 0,
                        };
                        if let Err(e) = self.ob.ob_send_fin(peer, p.tmh, rvh, false) {
                            tracing::warn!(target: "pml_ob1", peer, "could not tell rank {peer} its rendezvous failed: {e}");
                        }
                    }
                    None => {
                        tracing::warn!(target: "pml_ob1", recv = p.recv, "failed NIC rendezvous of a receive without a source: no error FIN")
                    }
                }
            }
            self.tm.recycle(p.buf);
            out.push(TmInput::NicData {
                recv: p.recv,
                id,
                result: Err(error),
            });
        } else if let Some(t) = self.tm.bufs.remove(&recv_id) {
            self.tm.recycle(t.buf);
            tracing::error!(target: "pml_ob1", recv = t.recv, "tagged receive failed: {error}");
            out.push(TmInput::Failed {
                recv: t.recv,
                id,
                error,
            });
        }
    }
}

/// Bytes of TMH + RVH (what an incomplete rendezvous leaves in the buffer).
const TMH_AND_RVH: usize = TMH_LEN + RVH_LEN;

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
