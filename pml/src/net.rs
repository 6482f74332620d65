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

use rustc_hash::FxHashMap;

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, SelectionList};
use tmpi_base::modex::Modex;
use tmpi_btl::{
    AtomicOp, BtlComponent, BtlError, BtlFlags, BtlModule, BtlRecvHandler, Placement, RemoteRegion,
};
use tmpi_tm_engine::split::{NicAction, NicEvent};

use crate::core::Limits;
use crate::hdr::{
    Header, FLAG_REGION, FRAG_LEN, KIND_ACK, KIND_FIN, KIND_MATCH, KIND_RNDV, MATCH_LEN, RNDV_LEN,
};
use crate::matching::Envelope;
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;
use crate::tm_input::{tm_input, OpenRequests};
use crate::transport::{Deliver, TmInput, Transport, TxError};
use crate::PmlError;

/// The BTL tag of every pml fragment.
pub const BTL_TAG_PML: u8 = 0x41;

/// A module that carries no peer's traffic (e.g. btl-tcp in a one-node
/// job where every peer is reached over sm) is polled once in this many
/// progress rounds, not every round: its poll may be a system call
/// (`epoll_wait`), which dominates a small sm ping-pong when it runs every
/// round. It is still polled, rarely, so that it accepts (and rejects)
/// connections and reports failures. The period is long enough that a
/// waiting loop makes far fewer system calls than messages at every size,
/// and short enough (well under a second of spinning or yielding) that
/// connection attempts and failures are noticed promptly.
const IDLE_MODULE_POLL: u32 = 16384;

/// The pml's transport over BTL modules.
pub struct BtlNet {
    size: u32,
    /// This process's world rank.
    me: u32,
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
    /// The offload path, when one module has a NIC tag list.
    tm: Option<TmState>,
    /// Whether a module carrying traffic offers the tag capability (its
    /// events are drained every progress).
    any_tagged: bool,
    /// Whether a module offers the tag capability.
    tagged: Vec<bool>,
    /// The tag events of one module's `take_events`, reused every
    /// progress round.
    tag_events: Vec<tmpi_btl::TagEvent>,
    /// Rendezvous requests taken in software: (peer, token) → the module
    /// that took it, until the pml's FIN for `token` (the `sreq` of the
    /// RNDV the pml was given) goes out as that module's FIN.
    rts_in: OpenRequests,
    /// `pml_tm_rndv`: RNDV to tagged peers as NIC rendezvous requests.
    rts_enabled: bool,
}

/// The module with the NIC tag list and what the pml sends through it.
struct TmState {
    module: usize,
    caps: (u32, u32),
    /// Per world rank: MATCH/RNDV travel tagged.
    peers: Vec<bool>,
    /// The module's largest tagged eager message (any tagged pml fragment
    /// fits): a RNDV whose data fit goes as a tagged eager fragment.
    buf_len: usize,
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

/// A BTL error as a transport error: a full queue is [`TxError::Busy`]
/// (retry after progress), btl-openib's and btl-tcp's completion errors
/// and broken connections are [`TxError::Broken`] (the request fails), the
/// rest [`TxError::Fatal`] (the pml may fall back, e.g. from get to
/// fragments).
fn tx_err(btl: &str, e: BtlError) -> TxError {
    match e {
        BtlError::WouldBlock => TxError::Busy,
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
    comps: &[&'static dyn BtlComponent],
) -> Result<Box<dyn Transport>, PmlError> {
    let sel: SelectionList =
        crate::init::register_btl_selection(reg).map_err(tmpi_base::error::Error::from)?;
    for c in comps {
        c.register_params(reg)
            .map_err(tmpi_base::error::Error::from)?;
    }
    let names: Vec<&str> = comps.iter().map(|c| c.name()).collect();
    for u in sel.unknown_names(&names) {
        tracing::warn!(target: "pml_ob1", "the btl selection names an unknown component: {u}");
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
                let sel = match sel.to_string() {
                    s if s.is_empty() => "all".to_string(),
                    s => s,
                };
                let names: Vec<&str> = modules.iter().map(|m| m.name()).collect();
                let opened = match names.join(", ") {
                    s if s.is_empty() => "none".to_string(),
                    s => s,
                };
                return Err(PmlError::Transport(format!(
                    "no BTL reaches rank {peer} from rank {} (btl selection: {sel}; modules opened: {opened})",
                    info.rank
                )));
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
    let carries: Vec<bool> = (0..modules.len()).map(|i| route.contains(&i)).collect();
    let tagged: Vec<bool> = modules
        .iter_mut()
        .map(|m| m.tag_offload().is_some())
        .collect();
    // Only when such a module carries traffic: an RDMA device on a one-node
    // job (every peer over sm) must not cost the sm path anything per poll.
    let any_tagged = (0..modules.len()).any(|i| carries[i] && tagged[i]);
    let carrying = (0..modules.len()).filter(|&i| carries[i]).collect();
    let loopback: Vec<bool> = modules.iter().map(|m| m.input_only_from_sends()).collect();
    let mut limits: Vec<Limits> = limits;
    let tm = tm_state(&mut modules, &route, &mut limits);
    Ok(Box::new(BtlNet {
        size: info.size,
        me: info.rank,
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
        any_tagged,
        tagged,
        tag_events: Vec::new(),
        rts_in: FxHashMap::default(),
        rts_enabled: crate::init::register_tm_rndv(reg).unwrap_or(true),
    }))
}

/// The offload path: exactly one module with a NIC tag list (several
/// would need one split matcher per list; then software matching).
/// Tagged peers get an eager limit that leaves room for the pml header in
/// the tagged payload.
fn tm_state(
    modules: &mut [Box<dyn BtlModule>],
    route: &[usize],
    limits: &mut [Limits],
) -> Option<TmState> {
    let mut found = Vec::new();
    for (i, m) in modules.iter_mut().enumerate() {
        if let Some(t) = m.tag_offload() {
            if let Some(caps) = t.caps() {
                found.push((i, (caps.max_tags, caps.max_ops), t.tagged_limit()));
            }
        }
    }
    if found.len() > 1 {
        tracing::warn!(target: "pml_ob1", "{} modules with a tag-matching list: matching stays in software", found.len());
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
    })
}

/// The envelope in a MATCH/RNDV header.
fn envelope_of(hdr: &[u8]) -> Option<Envelope> {
    match Header::parse(hdr).ok()? {
        Header::Match(m, _) => Some(m.envelope()),
        Header::Rndv(r) => Some(r.m.envelope()),
        _ => None,
    }
}

impl BtlNet {
    /// The module that carries `peer`'s traffic and `peer`'s region of it
    /// in `regions`: module k of this process is connected to module k of
    /// the peer (btl add_procs), so the peer's region of module k is the
    /// one.
    fn rdma_region(
        &self,
        peer: u32,
        regions: &[(u32, RemoteRegion)],
    ) -> Result<(usize, RemoteRegion), TxError> {
        let Some(&i) = self.route.get(peer as usize) else {
            return Err(TxError::Fatal(format!("no route to rank {peer}")));
        };
        match regions.iter().find(|(k, _)| *k as usize == i) {
            Some((_, r)) => Ok((i, *r)),
            None => Err(TxError::Fatal(format!(
                "rank {peer} registered its window with no module of the BTL that reaches it"
            ))),
        }
    }

    /// The module that reaches `peer`, when it offers RDMA put and get.
    fn rdma_module(&self, peer: u32) -> Option<usize> {
        let i = *self.route.get(peer as usize)?;
        self.modules[i]
            .flags()
            .contains(BtlFlags::PUT | BtlFlags::GET)
            .then_some(i)
    }

    /// One polling round of the modules (`Transport::progress`);
    /// `waiting`: the caller is blocked on one message
    /// (`Transport::progress_waiting`). Inlined into both: one call frame
    /// less per polling round. Most rounds poll only the modules that
    /// carry traffic (`carrying`, a quiet loopback skipped); every
    /// [`IDLE_MODULE_POLL`]th round polls them all, out of line.
    #[inline(always)]
    fn poll(&mut self, deliver: &mut dyn Deliver, waiting: bool) -> usize {
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
    fn poll_all(&mut self, deliver: &mut dyn Deliver, waiting: bool) -> usize {
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
    deliver: &mut dyn Deliver,
    waiting: bool,
) -> usize {
    let mut handler = PmlHandler { deliver, dropped };
    if waiting {
        m.progress_waiting(&mut handler)
    } else {
        m.progress(&mut handler)
    }
}

/// The pml's handler of one module's fragments: those under the pml's
/// BTL tag go to `deliver`, anything else is counted in `dropped`.
struct PmlHandler<'a> {
    deliver: &'a mut dyn Deliver,
    dropped: &'a mut u64,
}

impl BtlRecvHandler for PmlHandler<'_> {
    #[inline(always)]
    fn on_fragment(&mut self, peer: u32, tag: u8, bytes: &[u8]) {
        if tag == BTL_TAG_PML {
            self.deliver.frag(peer, bytes);
        } else {
            *self.dropped += 1;
            tracing::error!(target: "pml_ob1", peer, tag, "fragment with a foreign BTL tag dropped");
        }
    }

    fn place(&mut self, peer: u32, tag: u8, start: &[u8], len: usize) -> Option<Placement> {
        if tag == BTL_TAG_PML {
            self.deliver.place(peer, start, len)
        } else {
            None
        }
    }

    fn on_placed(&mut self, peer: u32, tag: u8, head: &[u8], len: usize) {
        // Only fragments under the pml's tag are ever placed.
        if tag == BTL_TAG_PML {
            self.deliver.placed(peer, head, len);
        }
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
        m.send(peer, BTL_TAG_PML, hdr, data)
            .map_err(|e| tx_err(m.name(), e))
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

    fn progress(&mut self, deliver: &mut dyn Deliver) -> usize {
        self.poll(deliver, false)
    }

    fn progress_waiting(&mut self, deliver: &mut dyn Deliver) -> usize {
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

    fn sends_pending(&self) -> bool {
        self.modules.iter().any(|m| m.sends_pending())
    }

    fn finalize(&mut self) {
        for m in self.modules.iter_mut() {
            if let Err(e) = m.finalize() {
                tracing::warn!(target: "pml_ob1", btl = m.name(), "finalize: {e}");
            }
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

    fn rdma_peer(&self, peer: u32) -> bool {
        self.rdma_module(peer).is_some()
    }

    unsafe fn rdma_register(
        &mut self,
        ptr: *mut u8,
        len: usize,
        peers: &[u32],
    ) -> Result<Vec<(u32, RemoteRegion)>, TxError> {
        let mut mods: Vec<usize> = peers.iter().filter_map(|&p| self.rdma_module(p)).collect();
        mods.sort_unstable();
        mods.dedup();
        let mut out: Vec<(u32, RemoteRegion)> = Vec::with_capacity(mods.len());
        for i in mods {
            // SAFETY: forwarded from this function's contract.
            match unsafe { self.modules[i].register_window(ptr, len) } {
                Ok(r) => out.push((i as u32, r)),
                Err(e) => {
                    self.rdma_deregister(&out);
                    return Err(TxError::Fatal(format!(
                        "btl {}: cannot register {len} bytes for RDMA: {e}",
                        self.modules[i].name()
                    )));
                }
            }
        }
        Ok(out)
    }

    fn rdma_deregister(&mut self, regions: &[(u32, RemoteRegion)]) {
        for (i, r) in regions {
            if let Some(m) = self.modules.get_mut(*i as usize) {
                m.deregister_region(r);
            }
        }
    }

    unsafe fn rdma(
        &mut self,
        peer: u32,
        regions: &[(u32, RemoteRegion)],
        offset: u64,
        buf: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<(), TxError> {
        let (i, r) = self.rdma_region(peer, regions)?;
        let r = &r;
        let m = &mut self.modules[i];
        let res = if write {
            // SAFETY: the caller's contract: `buf..buf+len` is readable.
            let src = unsafe { std::slice::from_raw_parts(buf as *const u8, len) };
            m.put(peer, r, offset, src)
        } else {
            // SAFETY: the caller's contract: writable and not accessed by
            // others during the call.
            let dst = unsafe { std::slice::from_raw_parts_mut(buf, len) };
            m.get(peer, r, offset, dst)
        };
        res.map_err(|e| tx_err(m.name(), e))
    }

    unsafe fn rdma_put_start(
        &mut self,
        peer: u32,
        regions: &[(u32, RemoteRegion)],
        offset: u64,
        buf: *const u8,
        len: usize,
    ) -> Result<(u32, u64), TxError> {
        let (i, r) = self.rdma_region(peer, regions)?;
        let m = &mut self.modules[i];
        // SAFETY: forwarded from this function's contract.
        let token = unsafe { m.put_start(peer, &r, offset, buf, len) };
        token
            .map(|t| (i as u32, t))
            .map_err(|e| tx_err(m.name(), e))
    }

    fn rdma_test(&mut self, module: u32, token: u64) -> Result<bool, TxError> {
        let Some(m) = self.modules.get_mut(module as usize) else {
            return Err(TxError::Fatal(format!("no BTL module {module}")));
        };
        m.rdma_test(token).map_err(|e| tx_err(m.name(), e))
    }

    fn rdma_atomics(&self, peer: u32) -> bool {
        if peer == self.me {
            return self
                .modules
                .iter()
                .any(|m| m.flags().contains(BtlFlags::ATOMIC));
        }
        self.route
            .get(peer as usize)
            .is_some_and(|&i| self.modules[i].flags().contains(BtlFlags::ATOMIC))
    }

    fn rdma_atomic(
        &mut self,
        peer: u32,
        regions: &[(u32, RemoteRegion)],
        offset: u64,
        op: AtomicOp,
    ) -> Result<u64, TxError> {
        let found = regions.iter().find(|(k, _)| {
            self.modules
                .get(*k as usize)
                .is_some_and(|m| m.flags().contains(BtlFlags::ATOMIC))
        });
        let Some((k, r)) = found else {
            return Err(TxError::Fatal(format!(
                "rank {peer} registered its memory with no module that has NIC atomics"
            )));
        };
        let m = &mut self.modules[*k as usize];
        m.atomic(peer, r, offset, op)
            .map_err(|e| tx_err(m.name(), e))
    }

    fn peer_btl(&self, peer: u32) -> Option<&str> {
        let &i = self.route.get(peer as usize)?;
        Some(self.modules[i].name())
    }

    fn tm_inputs(&self) -> bool {
        self.any_tagged
    }

    fn tm_peer(&self, peer: u32) -> bool {
        self.tm
            .as_ref()
            .is_some_and(|t| t.peers.get(peer as usize).copied().unwrap_or(false))
    }

    fn tm_take(&mut self, out: &mut Vec<TmInput>) {
        if !self.any_tagged {
            return;
        }
        let tm_module = self.tm.as_ref().map(|t| t.module);
        let evs = &mut self.tag_events;
        for (i, m) in self.modules.iter_mut().enumerate() {
            if !self.tagged[i] {
                continue;
            }
            let Some(t) = m.tag_offload() else {
                continue;
            };
            t.take_events(evs);
            // Only the module whose list the split matcher drives counts
            // unexpected messages.
            let list = Some(i) == tm_module;
            for ev in evs.drain(..) {
                tm_input(ev, i, list, &mut self.rts_in, &mut *t, out);
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
        let Some(t) = self.modules[tm.module].tag_offload() else {
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
                // An offloaded receive names its source (the split matcher
                // keeps wildcard-source receives in software): the sender
                // of whatever the NIC matches to it.
                let Some(source) = peer else {
                    tracing::error!(target: "pml_ob1", recv, "receive without a source offered to the NIC; kept in software");
                    return Some(NicEvent::AddRefused { id });
                };
                let user = user.map(|u| (u.ptr(), u.len()));
                // SAFETY: the receive's buffer belongs to a receive that
                // completes only after its entry left the NIC (the split
                // matcher settles it by the module's Matched/Data, Deleted
                // or Failed event), so it stays valid and untouched by the
                // pml until then.
                let r = unsafe {
                    t.post_recv(id.0, recv, source, tag.tag, tag.mask, user, unexpected_cnt)
                };
                match r {
                    Ok(()) => None,
                    Err(e) => {
                        tracing::debug!(target: "pml_ob1", recv, "TAG_ADD refused: {e}");
                        Some(NicEvent::AddRefused { id })
                    }
                }
            }
            NicAction::Del { id, unexpected_cnt } => match t.del(id.0, unexpected_cnt) {
                Ok(()) => None,
                Err(e) => {
                    tracing::debug!(target: "pml_ob1", "TAG_DEL refused: {e}");
                    Some(NicEvent::DelRefused { id })
                }
            },
            NicAction::Sync { unexpected_cnt } => match t.sync(unexpected_cnt) {
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
    /// pml fragment (header, then payload or inline data) under the
    /// envelope's tag.
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
        let module = tm.module;
        let Some(t) = self.modules[module].tag_offload() else {
            return Err(TxError::Fatal("tag-matching module lost".into()));
        };
        // Header and payload go to the module apart: it copies each once
        // into its send buffer, and a receive that takes the message in its
        // own buffer gets the payload in place (`TagData::Placed`).
        t.send_tagged(peer, tag, hdr, data)
            .map_err(|e| tx_err(self.modules[module].name(), e))
    }

    /// A RNDV with a registered region to a tagged peer goes out as a NIC
    /// rendezvous request (no inline data): a receiver's NIC that matches
    /// it reads the data into the receive buffer and sends the FIN itself;
    /// a receiver that matches it in software reads and FINs
    /// (docs/pml.md). `None`: not applicable (no region, a message that
    /// fits a tagged buffer, an envelope that does not pack, or a request
    /// the module refuses), the RNDV travels as a tagged eager.
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
        if crate::tag::unpack(tag).context >= crate::tag::MAX_CONTEXT {
            return None;
        }
        let region = RemoteRegion::from_bytes(r.region).ok()?;
        if region.len < r.len {
            return None;
        }
        let t = self.modules[tm.module].tag_offload()?;
        // SAFETY: the region is the send request's buffer (registered by
        // `register` above for this RNDV); the request stays incomplete, its
        // buffer valid and unmodified (isend contract), until this
        // request's FIN or failure (`TmInput::SendDone`).
        let res = unsafe {
            t.send_rndv(
                peer,
                tag,
                region.addr as usize as *const u8,
                r.len as usize,
                r.sreq,
            )
        };
        match res {
            Ok(()) => Some(Ok(())),
            Err(BtlError::WouldBlock) => Some(Err(TxError::Busy)),
            Err(e) => {
                tracing::debug!(target: "pml_ob1", peer, "NIC rendezvous request refused ({e}); tagged eager RNDV");
                None
            }
        }
    }

    /// The pml's FIN (or ACK) for a token of [`BtlNet::rts_in`]: the
    /// module's FIN of that rendezvous request instead (an error FIN for a
    /// failed transfer or an ACK: a NIC rendezvous request cannot be
    /// pipelined).
    fn fin_of_rts(&mut self, peer: u32, hdr: &[u8]) -> Option<Result<(), TxError>> {
        let (sreq, ok) = match Header::parse(hdr).ok()? {
            Header::Fin(f) => (f.sreq, f.status == 0),
            Header::Ack(a) => (a.sreq, false),
            _ => return None,
        };
        let i = self.rts_in.remove(&(peer, sreq))?;
        let r = self.modules[i].tag_offload()?.send_fin(peer, sreq, ok)?;
        Some(match r {
            Ok(()) => Ok(()),
            Err(BtlError::WouldBlock) => {
                self.rts_in.insert((peer, sreq), i);
                Err(TxError::Busy)
            }
            Err(e) => Err(tx_err(self.modules[i].name(), e)),
        })
    }
}
