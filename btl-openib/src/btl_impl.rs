//! btl-openib behind the generic BTL interface of `tmpi-btl`
//! ([`BtlComponent`], [`BtlModule`]).
//!
//! Mapping:
//! - `init`: opens one [`Module`] per selected active port and publishes
//!   all their addresses under [`MODEX_KEY`] (no fence);
//! - `add_procs`: reads each peer's addresses after the pml's fence and
//!   connects module `k` to the peer's module `k`. A peer that sends right
//!   after its own `add_procs` may reach a QP that is not yet ready to
//!   receive; RC retransmission covers that window (`btl_openib_timeout` and
//!   `btl_openib_retry_count`: about 0.5 s with the defaults);
//! - `send`/`sendi`: a generic fragment `TMH(NO_TAG, app_ctx = tag) | header
//!   | payload` (one RC send, copied before returning; FIFO per peer because
//!   one QP serves each peer);
//! - `register_region`/`get`: the registration cache and an RDMA read, which
//!   `get` waits for; `register_window`/`put`: a registration with remote
//!   write access (dropped from the cache at deregistration) and an RDMA
//!   write, waited for alike (bounded by [`GET_TIMEOUT`]; on timeout the connection
//!   is aborted so the NIC cannot write `dst` afterwards);
//! - `progress`: generic fragments go to the handler; everything else
//!   (tagged eager/RTS frags, TM completions, failures) is kept for the
//!   tag capability ([`BtlModule::tag_offload`], `tag_offload.rs`), whose
//!   `take_events` hands it up as `TagEvent`s.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{McaError, Registry};
use tmpi_base::modex::{Modex, ModexError};
use tmpi_btl::{
    AtomicOp, BtlComponent, BtlError, BtlFlags, BtlModule, BtlRecvHandler, RemoteRegion,
    TagOffload, EXCLUSIVITY_DEFAULT,
};
use tmpi_verbs::ibv::IbvProvider;
use tmpi_verbs::soft::{SoftConfig, SoftProvider, DEVICE_NAME};
use tmpi_verbs::wire::Rvh;
use tmpi_verbs::{AccessFlags, Provider};

use crate::addr::{decode, encode, MODEX_KEY};
use crate::buf::FragKind;
use crate::component::open_modules;
use crate::config::OpenibConfig;
use crate::error::OpenibError;
use crate::module::{Event, Module};
use crate::rcache::Reg;
use crate::tag_offload::TagState;

/// Largest piece of a blocking get or put handed to the module at once
/// (an RVH's length is 32 bits).
pub const RDMA_PIECE: usize = 1 << 30;

/// Bound of a blocking [`BtlModule::get`] or [`BtlModule::put`].
pub const GET_TIMEOUT: Duration = Duration::from_secs(60);

/// How long a blocking [`BtlModule::get`] waits for its flush completion
/// after the connection broke (or was aborted) before it returns an error.
pub const ABORT_GRACE: Duration = Duration::from_secs(2);

/// The address and 32-bit rkey of `len` bytes at `offset` of `region`
/// (`OutOfBounds` outside it, `BadRegion` for a key verbs cannot carry).
fn target_of(region: &RemoteRegion, offset: u64, len: usize) -> Result<(u64, u32), BtlError> {
    let va = region.check_access(offset, len)?;
    let rkey =
        u32::try_from(region.key).map_err(|_| BtlError::BadRegion("key above 32 bits".into()))?;
    Ok((va, rkey))
}

pub(crate) fn btl_err(e: OpenibError, peer: u32) -> BtlError {
    match e {
        OpenibError::Busy => BtlError::WouldBlock,
        OpenibError::Unreachable(p) => BtlError::Unreachable(p),
        OpenibError::TooLarge { len, limit } => BtlError::TooLarge { len, max: limit },
        OpenibError::Unavailable(s) => BtlError::Unavailable(s),
        OpenibError::Config(s) => BtlError::Config(s),
        OpenibError::Modex(m) => BtlError::Modex(m),
        OpenibError::PeerFailed(p) => BtlError::Protocol {
            peer: p,
            reason: "connection broken by an earlier completion error".into(),
        },
        other => BtlError::io(
            "openib",
            std::io::Error::other(format!("rank {peer}: {other}")),
        ),
    }
}

/// The openib component for the BTL framework.
#[derive(Debug, Default, Clone, Copy)]
pub struct OpenibComponent;

impl BtlComponent for OpenibComponent {
    fn name(&self) -> &'static str {
        "openib"
    }

    fn register_params(&self, reg: &Registry) -> Result<(), McaError> {
        // Invalid values are reported by `init` with their names.
        let _ = OpenibConfig::register(reg);
        let _ = SoftConfig::register(reg);
        Ok(())
    }

    fn init(
        &self,
        reg: &Registry,
        info: &ProcessInfo,
        modex: &mut dyn Modex,
    ) -> Result<Vec<Box<dyn BtlModule>>, BtlError> {
        let cfg = OpenibConfig::register(reg).map_err(|e| btl_err(e, u32::MAX))?;
        let (me, size) = (info.rank, info.size);
        if cfg.names_device(DEVICE_NAME) {
            let p = SoftProvider::new(
                SoftConfig::register(reg).map_err(|e| BtlError::Config(e.to_string()))?,
            )
            .map_err(|e| BtlError::Unavailable(e.to_string()))?;
            boxed(open_modules(&p, &cfg, me, size), modex, me, size)
        } else {
            let p = IbvProvider::load()
                .map_err(|e| BtlError::Unavailable(format!("libibverbs not usable: {e}")))?;
            boxed(open_modules(&p, &cfg, me, size), modex, me, size)
        }
    }
}

fn boxed<P: Provider>(
    mods: Result<Vec<Module<P>>, OpenibError>,
    modex: &mut dyn Modex,
    me: u32,
    size: u32,
) -> Result<Vec<Box<dyn BtlModule>>, BtlError> {
    let mods = mods.map_err(|e| btl_err(e, u32::MAX))?;
    let addrs: Vec<_> = mods.iter().map(|m| m.address()).collect();
    modex.put(MODEX_KEY, &encode(&addrs))?;
    Ok(mods
        .into_iter()
        .enumerate()
        .map(|(k, m)| Box::new(OpenibBtl::new(m, k, me, size)) as Box<dyn BtlModule>)
        .collect())
}

/// One btl-openib module behind [`BtlModule`].
pub struct OpenibBtl<P: Provider> {
    pub(crate) module: Option<Module<P>>,
    index: usize,
    me: u32,
    size: u32,
    /// Events seen during a blocking `get`, delivered by the next progress.
    pending: VecDeque<Event>,
    /// Events for the tag offload ([`TagOffload::take_events`]).
    pub(crate) events: Vec<Event>,
    /// The tag offload's buffers and open rendezvous requests.
    pub(crate) tags: TagState<P>,
    /// Pins of exported regions; one per `register_region` call: the same
    /// buffer may be exported by several rendezvous at once (two sends of
    /// one buffer), and each `deregister_region` drops one pin.
    regions: HashMap<RemoteRegion, Vec<Reg<P>>>,
    /// Pins of window regions (`register_window`: remote write access);
    /// deregistering one also drops the cached registration.
    windows: HashMap<RemoteRegion, Vec<Reg<P>>>,
    next_get: u64,
    /// Non-blocking RDMA writes ([`BtlModule::put_start`]) not reported yet:
    /// `None` while in flight, the outcome once its event arrived.
    started: HashMap<u64, Option<Result<(), BtlError>>>,
    /// Where the NIC writes an atomic's old value: one buffer for every
    /// atomic (each is waited for), so its registration stays cached.
    /// After `module` in field order: dropped after the registrations.
    atomic_old: Box<u64>,
}

impl<P: Provider> OpenibBtl<P> {
    /// Wraps module number `index` of this process.
    pub fn new(module: Module<P>, index: usize, me: u32, size: u32) -> Self {
        let tags = TagState::new(module.eager_limit());
        OpenibBtl {
            tags,
            module: Some(module),
            index,
            me,
            size,
            pending: VecDeque::new(),
            events: Vec::new(),
            regions: HashMap::new(),
            windows: HashMap::new(),
            next_get: 1 << 40,
            started: HashMap::new(),
            atomic_old: Box::new(0),
        }
    }

    /// The module (for the offload interface), `None` after finalize.
    pub fn module_mut(&mut self) -> Option<&mut Module<P>> {
        self.module.as_mut()
    }

    pub(crate) fn m(&mut self) -> Result<&mut Module<P>, BtlError> {
        self.module.as_mut().ok_or(BtlError::Finalized)
    }

    fn dispatch(&mut self, ev: Event, handler: &mut dyn BtlRecvHandler) -> bool {
        match ev {
            Event::Recv(f) if f.kind == FragKind::NoTag => {
                handler.on_fragment(f.peer, f.tmh.app_ctx as u8, f.payload());
                true
            }
            other => {
                if let Some(ev) = self.take_started(other) {
                    self.events.push(ev);
                }
                false
            }
        }
    }

    /// Keeps the outcome of a non-blocking RDMA write
    /// ([`BtlModule::put_start`]); any other event is handed back.
    fn take_started(&mut self, ev: Event) -> Option<Event> {
        match ev {
            Event::GetDone { id, .. } if self.started.contains_key(&id) => {
                self.started.insert(id, Some(Ok(())));
                None
            }
            Event::Failed {
                id,
                peer,
                op: crate::module::Op::Get,
                error,
            } if self.started.contains_key(&id) => {
                self.started.insert(id, Some(Err(btl_err(error, peer))));
                None
            }
            other => Some(other),
        }
    }
}

impl<P: Provider + 'static> OpenibBtl<P> {
    /// A blocking RDMA read into (`write == false`) or write from
    /// `buf..buf+len` at `offset` of `peer`'s `region`, in pieces that fit
    /// the send queue ([`Module::max_rdma_len`], at most [`RDMA_PIECE`]
    /// bytes: an RVH's length is 32 bits), each waited for; the module
    /// splits a piece into chunks of the port's `max_msg_sz` (the soft
    /// NIC's too).
    ///
    /// # Safety
    /// `buf..buf+len` must be valid (writable for a read) and not accessed
    /// by others during the call.
    unsafe fn rdma(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        buf: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<(), BtlError> {
        let (va, rkey) = target_of(region, offset, len)?;
        let piece = self.m()?.max_rdma_len().clamp(1, RDMA_PIECE);
        let mut done = 0usize;
        let start = Instant::now();
        while done < len {
            let n = (len - done).min(piece);
            let rvh = Rvh {
                va: va + done as u64,
                rkey,
                len: n as u32,
            };
            // SAFETY: forwarded (`done + n <= len`).
            match unsafe { self.rdma_piece(peer, rvh, buf.add(done), n, write) } {
                Ok(()) => done += n,
                // Nothing happened yet: the caller retries after progress.
                Err(BtlError::WouldBlock) if done == 0 => return Err(BtlError::WouldBlock),
                // Part of the transfer is done: wait for room here (the
                // queue holds other operations; they complete as it is
                // polled).
                Err(BtlError::WouldBlock) if start.elapsed() < GET_TIMEOUT => {
                    let m = self.module.as_mut().ok_or(BtlError::Finalized)?;
                    let mut evs = Vec::new();
                    m.progress(&mut evs).map_err(|e| btl_err(e, peer))?;
                    self.pending.extend(evs);
                    std::thread::yield_now();
                }
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// One piece of [`OpenibBtl::rdma`] (`len <= rvh.len`), waited for.
    ///
    /// # Safety
    /// As [`OpenibBtl::rdma`].
    unsafe fn rdma_piece(
        &mut self,
        peer: u32,
        rvh: Rvh,
        buf: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<(), BtlError> {
        let id = self.next_get;
        self.next_get += 1;
        let m = self.module.as_mut().ok_or(BtlError::Finalized)?;
        let posted = if write {
            // SAFETY: the caller keeps `buf` valid and unmodified, and this
            // call returns only after the write's completion (or its flush
            // after an abort) was polled.
            unsafe { m.put(peer, buf, len, rvh, id) }
        } else {
            // SAFETY: the caller keeps `buf` valid and untouched, and this
            // call returns only after the read's completion (or its flush
            // after an abort) was polled.
            unsafe { m.get(peer, buf, len, rvh, id) }
        };
        posted.map_err(|e| btl_err(e, peer))?;
        let what = if write { "RDMA write" } else { "RDMA read" };
        self.wait_rdma(peer, id, len, what)
    }

    /// Waits for the completion of RDMA operation `id` to `peer` (a read,
    /// write or atomic the module posted), bounded by [`GET_TIMEOUT`]:
    /// then the connection is aborted and the flush completion awaited.
    fn wait_rdma(&mut self, peer: u32, id: u64, len: usize, what: &str) -> Result<(), BtlError> {
        let m = self.module.as_mut().ok_or(BtlError::Finalized)?;
        let start = Instant::now();
        let mut evs = Vec::new();
        let mut aborted: Option<Instant> = None;
        loop {
            m.progress(&mut evs).map_err(|e| btl_err(e, peer))?;
            let mut result = None;
            for ev in evs.drain(..) {
                match ev {
                    Event::GetDone { id: i, .. } if i == id => result = Some(Ok(())),
                    Event::Failed {
                        id: i,
                        op: crate::module::Op::Get,
                        error,
                        ..
                    } if i == id => {
                        result = Some(Err(btl_err(error, peer)));
                    }
                    other => self.pending.push_back(other),
                }
            }
            if let Some(r) = result {
                return r;
            }
            match aborted {
                None if start.elapsed() > GET_TIMEOUT => {
                    tracing::error!(target: "btl_openib", peer, len, "{what} not completed after {GET_TIMEOUT:?}; aborting the connection");
                    m.abort_peer(peer, &mut evs);
                    aborted = Some(Instant::now());
                }
                None if !m.reachable(peer) => {
                    // The connection broke meanwhile (another operation's
                    // completion error): its QP is in the error state, so
                    // the read's flush is on its way; wait for it briefly.
                    aborted = Some(Instant::now());
                }
                Some(t) if t.elapsed() > ABORT_GRACE => {
                    // No flush completion: give up rather than spin. The
                    // QP is in the error state, so the NIC no longer touches
                    // the buffer; the read's registration stays pinned until its
                    // completion (or the module's end).
                    tracing::error!(target: "btl_openib", peer, len, "{what} abandoned: connection to rank {peer} broken and no flush completion after {ABORT_GRACE:?}");
                    return Err(btl_err(OpenibError::PeerFailed(peer), peer));
                }
                _ => {}
            }
            std::thread::yield_now();
        }
    }
}

impl<P: Provider + 'static> BtlModule for OpenibBtl<P> {
    fn name(&self) -> &str {
        "openib"
    }

    fn add_procs(&mut self, peers: &[u32], modex: &mut dyn Modex) -> Result<Vec<u32>, BtlError> {
        let (me, size, k) = (self.me, self.size, self.index);
        let m = self.m()?;
        let mut out = Vec::new();
        for &rank in peers {
            if rank == me || rank >= size {
                continue;
            }
            if m.reachable(rank) {
                out.push(rank);
                continue;
            }
            let remote = match modex.get(rank, MODEX_KEY) {
                Ok(v) => decode(&v, size).map_err(|e| ModexError::Malformed {
                    rank,
                    key: MODEX_KEY.into(),
                    reason: e.to_string(),
                })?,
                Err(ModexError::NotFound { .. }) => continue,
                Err(e) => return Err(e.into()),
            };
            let Some(ra) = remote.get(k) else { continue };
            match m.connect(rank, ra) {
                Ok(()) => out.push(rank),
                Err(OpenibError::Unreachable(_)) => {}
                Err(e) => return Err(btl_err(e, rank)),
            }
        }
        Ok(out)
    }

    fn exclusivity(&self) -> u32 {
        EXCLUSIVITY_DEFAULT
    }
    fn latency(&self) -> u32 {
        2
    }
    fn bandwidth(&self) -> u32 {
        100_000
    }
    fn eager_limit(&self) -> usize {
        self.module.as_ref().map_or(0, |m| m.eager_limit())
    }
    fn max_send_size(&self) -> usize {
        self.module.as_ref().map_or(0, |m| m.max_frag())
    }
    fn flags(&self) -> BtlFlags {
        let base = BtlFlags::SEND | BtlFlags::GET | BtlFlags::PUT;
        match &self.module {
            Some(m) if m.atomics() => base | BtlFlags::ATOMIC,
            _ => base,
        }
    }

    fn send(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError> {
        self.m()?
            .send_frag(peer, tag, header, payload, 0)
            .map_err(|e| btl_err(e, peer))
    }

    unsafe fn register_region(
        &mut self,
        ptr: *const u8,
        len: usize,
    ) -> Result<RemoteRegion, BtlError> {
        let m = self.m()?;
        // SAFETY: forwarded from this function's contract (valid until
        // deregister_region, which drops the pin).
        let reg = unsafe { m.register(ptr, len, AccessFlags::REMOTE_READ) }
            .map_err(|e| btl_err(e, u32::MAX))?;
        let r = RemoteRegion {
            addr: reg.addr(),
            len: reg.len(),
            key: u64::from(reg.rkey()),
        };
        self.regions.entry(r).or_default().push(reg);
        Ok(r)
    }

    unsafe fn register_window(
        &mut self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<RemoteRegion, BtlError> {
        let m = self.m()?;
        let mut access =
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_READ | AccessFlags::REMOTE_WRITE;
        if m.atomics() {
            access |= AccessFlags::REMOTE_ATOMIC;
        }
        // SAFETY: forwarded from this function's contract (valid until
        // deregister_region, which drops the pin and the registration).
        let reg = unsafe { m.register(ptr, len, access) }.map_err(|e| btl_err(e, u32::MAX))?;
        let r = RemoteRegion {
            addr: reg.addr(),
            len: reg.len(),
            key: u64::from(reg.rkey()),
        };
        self.windows.entry(r).or_default().push(reg);
        Ok(r)
    }

    fn deregister_region(&mut self, region: &RemoteRegion) {
        if let Some(pins) = self.regions.get_mut(region) {
            pins.pop();
            if pins.is_empty() {
                self.regions.remove(region);
            }
            return;
        }
        if let Some(pins) = self.windows.get_mut(region) {
            pins.pop();
            if pins.is_empty() {
                self.windows.remove(region);
                // A registration peers can write through must not stay in
                // the cache after the window: its memory may be reused.
                if let Some(m) = self.module.as_mut() {
                    m.invalidate(region.addr as *const u8, region.len as usize);
                }
            }
        }
    }

    fn get(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), BtlError> {
        // SAFETY: `dst` is exclusively borrowed for this whole call, and
        // `rdma` returns only after the read's completion (or its flush
        // after an abort) was polled.
        unsafe { self.rdma(peer, region, offset, dst.as_mut_ptr(), dst.len(), false) }
    }

    fn put(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        src: &[u8],
    ) -> Result<(), BtlError> {
        // SAFETY: `src` is borrowed for this whole call and only read (by
        // the NIC), and `rdma` returns only after the write's completion.
        unsafe {
            self.rdma(
                peer,
                region,
                offset,
                src.as_ptr() as *mut u8,
                src.len(),
                true,
            )
        }
    }

    unsafe fn put_start(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<u64, BtlError> {
        let (va, rkey) = target_of(region, offset, len)?;
        let piece = self.m()?.max_rdma_len().clamp(1, RDMA_PIECE);
        if len == 0 || len > piece {
            // Empty, or more than one piece: the blocking path (which
            // splits and waits for room), reported complete.
            // SAFETY: the caller's contract covers the call.
            let src = unsafe { std::slice::from_raw_parts(src, len) };
            return self.put(peer, region, offset, src).map(|()| 0);
        }
        let rvh = Rvh {
            va,
            rkey,
            len: len as u32,
        };
        let id = self.next_get;
        self.next_get += 1;
        let m = self.m()?;
        // SAFETY: the caller keeps `src` valid and unchanged until
        // `rdma_test` reported this id, which is after the write's
        // completion (or its flush) was polled; the module only reads it.
        unsafe { m.put(peer, src, len, rvh, id) }.map_err(|e| btl_err(e, peer))?;
        self.started.insert(id, None);
        Ok(id)
    }

    fn rdma_test(&mut self, token: u64) -> Result<bool, BtlError> {
        if token == 0 {
            return Ok(true);
        }
        if !matches!(self.started.get(&token), Some(Some(_))) {
            // Outcomes a blocking operation's wait set aside, then the
            // module's new events; fragments and every other event wait
            // for the next `progress`, which hands them on.
            let mut evs: Vec<Event> = std::mem::take(&mut self.pending).into();
            let Some(m) = self.module.as_mut() else {
                self.started.remove(&token);
                return Err(BtlError::Finalized);
            };
            let polled = m.progress(&mut evs).map_err(|e| btl_err(e, u32::MAX));
            for ev in evs {
                if let Some(ev) = self.take_started(ev) {
                    self.pending.push_back(ev);
                }
            }
            polled?;
        }
        match self.started.get(&token) {
            Some(Some(_)) => match self.started.remove(&token) {
                Some(Some(r)) => r.map(|()| true),
                _ => Ok(true),
            },
            Some(None) => Ok(false),
            None => Err(BtlError::Protocol {
                peer: u32::MAX,
                reason: format!("no RDMA operation {token} was started"),
            }),
        }
    }

    fn atomic(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        op: AtomicOp,
    ) -> Result<u64, BtlError> {
        let (va, rkey) = target_of(region, offset, 8)?;
        let id = self.next_get;
        self.next_get += 1;
        let dst = (&mut *self.atomic_old as *mut u64).cast::<u8>();
        let m = self.m()?;
        // SAFETY: `atomic_old` lives as long as this module and is read
        // only after `wait_rdma` returned, which is after the atomic's
        // completion (or its flush after an abort) was polled; no other
        // atomic is posted meanwhile (`&mut self`).
        unsafe { m.atomic(peer, dst, va, rkey, op, id) }.map_err(|e| btl_err(e, peer))?;
        self.wait_rdma(peer, id, 8, "atomic")?;
        Ok(*self.atomic_old)
    }

    fn progress(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        let mut n = 0;
        while let Some(ev) = self.pending.pop_front() {
            n += usize::from(self.dispatch(ev, handler));
        }
        let Some(m) = self.module.as_mut() else {
            return n;
        };
        let mut evs = Vec::new();
        if let Err(e) = m.progress(&mut evs) {
            tracing::error!(target: "btl_openib", "progress failed: {e}");
        }
        for ev in evs {
            n += usize::from(self.dispatch(ev, handler));
        }
        n
    }

    fn tag_offload(&mut self) -> Option<&mut dyn TagOffload> {
        Some(self)
    }

    fn finalize(&mut self) -> Result<(), BtlError> {
        // Registrations go before the module they were made with; the
        // tagged buffers' memory after it.
        self.tags.unpin_all();
        self.regions.clear();
        self.windows.clear();
        self.pending.clear();
        if let Some(m) = &self.module {
            let r = m.stats().rcache;
            tracing::debug!(target: "btl_openib",
                "registration cache at finalize: {} hits, {} registrations, {} evictions",
                r.hits, r.misses, r.evictions);
        }
        self.module = None;
        self.tags = TagState::new(0);
        Ok(())
    }
}
