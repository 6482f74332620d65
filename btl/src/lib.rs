//! tmpi-btl: the byte transfer layer (BTL) framework interface, shared by
//! every BTL (self, sm, and later tcp and openib), in the spirit of Open
//! MPI's `opal/mca/btl/btl.h`.
//!
//! # Lifecycle
//! 1. **Register** ([`BtlComponent::register_params`]): every component
//!    registers its MCA parameters, usable here or not.
//! 2. **Init** ([`BtlComponent::init`]): the component decides whether it
//!    can run ([`BtlError::Unavailable`] with a one-line reason otherwise),
//!    creates its modules and publishes its addresses with
//!    [`Modex::put`]. Init never fences.
//! 3. The pml runs **one** [`Modex::fence`] for all components.
//! 4. **add_procs** ([`BtlModule::add_procs`]): each module reads its peers'
//!    addresses and answers which peers it reaches.
//! 5. The pml picks, per peer, the reachable module with the highest
//!    [`BtlModule::exclusivity`] ([`select::best_per_peer`]).
//! 6. **Send / get / progress** from the pml's single progress thread (a
//!    module is `Send`, not `Sync`: the pml serialises calls on one module).
//! 7. **finalize** ([`BtlModule::finalize`]) after the pml's finalize fence.
//!
//! # Fragments
//! A fragment is `header ++ payload` (both copied by the BTL before
//! [`BtlModule::send`] returns `Ok`) plus a one-byte *tag* chosen by the
//! upper layer. The receiving module hands the fragment, contiguous, to the
//! [`BtlRecvHandler`] given to [`BtlModule::progress`], as
//! `(source world rank, tag, bytes)`. The BTL does not interpret tags: all
//! 256 values belong to the upper layer (the handler is the callback table).
//! A module reading a byte stream may instead offer a large fragment to
//! [`BtlRecvHandler::place`] and write its payload where the handler says
//! (receive in place: no copy out of the module's receive buffer), then
//! report it with [`BtlRecvHandler::on_placed`]; ordering and exactly-once
//! apply to both kinds of delivery alike.
//!
//! **Ordering**: fragments from one peer over one module are delivered in
//! the order their `send`/`sendi` calls returned `Ok` (FIFO per peer per
//! module). Nothing is said about ordering across modules or across peers.
//!
//! **Exactly once**: a fragment accepted by `send` (returned `Ok`) is
//! delivered exactly once unless the peer dies. A refused fragment
//! ([`BtlError::WouldBlock`]) was not sent and must be retried by the caller
//! after a progress call; a BTL never drops silently and never buffers
//! without bound.
//!
//! # RDMA
//! Where a module has [`BtlFlags::GET`], a process registers a buffer
//! ([`BtlModule::register_region`]) and sends the resulting
//! [`RemoteRegion`] (24 bytes on the wire, [`RemoteRegion::to_bytes`]) to a
//! peer, which copies from it with [`BtlModule::get`]. Reads are
//! bounds-checked against the region: only `addr..addr+len` can be read.
//! Where a module also has [`BtlFlags::PUT`], memory registered with
//! [`BtlModule::register_window`] (a one-sided window) can be written by
//! peers with [`BtlModule::put`], bounds-checked alike. `get` and `put`
//! are blocking: the transfer is complete at both ends when they return.

pub mod bytes;
mod error;
pub mod offload;
mod placement;
mod region;
pub mod select;
pub mod testing;

pub use error::BtlError;
pub use offload::{TagCaps, TagData, TagEvent, TagMsg, TagOffload, TagRndv};
pub use placement::{Placement, PLACE_HEAD_MAX};
pub use region::{RemoteRegion, REMOTE_REGION_BYTES};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{McaError, Registry};
use tmpi_base::modex::Modex;

/// Exclusivity of a BTL that must win over every other (self).
pub const EXCLUSIVITY_HIGH: u32 = 64 * 1024;
/// Exclusivity of a fast network BTL (openib).
pub const EXCLUSIVITY_DEFAULT: u32 = 1024;
/// Exclusivity of a fallback BTL (tcp).
pub const EXCLUSIVITY_LOW: u32 = 256;

/// Capabilities of a module (a small bit set).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct BtlFlags(u32);

impl BtlFlags {
    /// No capability.
    pub const NONE: BtlFlags = BtlFlags(0);
    /// [`BtlModule::send`] works.
    pub const SEND: BtlFlags = BtlFlags(1);
    /// [`BtlModule::sendi`] is a real fast path (not just `send`).
    pub const SENDI: BtlFlags = BtlFlags(2);
    /// [`BtlModule::get`] works (single copy / RDMA read).
    pub const GET: BtlFlags = BtlFlags(4);
    /// [`BtlModule::put`] works (RDMA write).
    pub const PUT: BtlFlags = BtlFlags(8);
    /// [`BtlModule::atomic`] works (the NIC's 64-bit fetch-add and
    /// compare-swap), to peers and to this process itself, and
    /// [`BtlModule::register_window`] regions accept them.
    pub const ATOMIC: BtlFlags = BtlFlags(16);

    /// Whether every bit of `other` is set in `self`.
    pub const fn contains(self, other: BtlFlags) -> bool {
        self.0 & other.0 == other.0
    }
    /// `self` without the bits of `other`.
    pub const fn without(self, other: BtlFlags) -> BtlFlags {
        BtlFlags(self.0 & !other.0)
    }
    /// The raw bits.
    pub const fn bits(self) -> u32 {
        self.0
    }
}

impl std::ops::BitOr for BtlFlags {
    type Output = BtlFlags;
    fn bitor(self, rhs: BtlFlags) -> BtlFlags {
        BtlFlags(self.0 | rhs.0)
    }
}

/// A NIC atomic on one 64-bit word ([`BtlModule::atomic`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AtomicOp {
    /// Adds the value (modulo 2^64).
    FetchAdd(u64),
    /// Writes `swap` if the word equals `compare`.
    CmpSwap { compare: u64, swap: u64 },
}

/// Receives the fragments a module delivers during [`BtlModule::progress`].
///
/// `bytes` is `header ++ payload` as sent; it is only valid during the call
/// (it may point into shared memory that is recycled right after).
/// Handlers must not call back into the same module.
pub trait BtlRecvHandler {
    /// One fragment from world rank `peer`, tagged `tag`.
    fn on_fragment(&mut self, peer: u32, tag: u8, bytes: &[u8]);

    /// Receive in place, asked by modules that read a byte stream (tcp)
    /// when a large fragment of `len` bytes from `peer` is only partly
    /// here: `start` is its beginning (at least `min(len,
    /// PLACE_HEAD_MAX)` bytes). `Some`: the module writes bytes
    /// `head..len` of the fragment straight to the placement and, once all
    /// arrived, calls [`BtlRecvHandler::on_placed`] instead of
    /// `on_fragment`. The module asks again (with `start` = the header
    /// bytes only) before each later write into the placement; when the
    /// answer changes to `None` or another placement, it discards the rest
    /// of the fragment and reports nothing. Default: `None` (every
    /// fragment through `on_fragment`).
    fn place(&mut self, peer: u32, tag: u8, start: &[u8], len: usize) -> Option<Placement> {
        let _ = (peer, tag, start, len);
        None
    }

    /// A fragment of `len` bytes whose payload was placed
    /// ([`BtlRecvHandler::place`]) has arrived whole; `head` is its header
    /// (the first [`Placement::head`] bytes).
    fn on_placed(&mut self, peer: u32, tag: u8, head: &[u8], len: usize) {
        let _ = (peer, tag, head, len);
    }
}

impl<F: FnMut(u32, u8, &[u8])> BtlRecvHandler for F {
    fn on_fragment(&mut self, peer: u32, tag: u8, bytes: &[u8]) {
        self(peer, tag, bytes)
    }
}

/// A BTL component: decides at start-up whether it can run and creates its
/// modules (Open MPI's `mca_btl_base_component_t`).
pub trait BtlComponent: Send + Sync {
    /// Component name (`"sm"`), as used in the `btl` selection list.
    fn name(&self) -> &'static str;
    /// Registers the component's MCA parameters (idempotent).
    fn register_params(&self, reg: &Registry) -> Result<(), McaError>;
    /// Opens the component: returns its modules (possibly none, e.g. sm in a
    /// job with no other process on the node) or
    /// [`BtlError::Unavailable`] with the reason it cannot run here.
    /// Publishes the modules' addresses with `modex.put`; never fences.
    fn init(
        &self,
        reg: &Registry,
        info: &ProcessInfo,
        modex: &mut dyn Modex,
    ) -> Result<Vec<Box<dyn BtlModule>>, BtlError>;
}

/// One instance of a BTL (Open MPI's `mca_btl_base_module_t`): an
/// I/O driver for fragments to a set of peers.
pub trait BtlModule: Send {
    /// Component name of this module (`"sm"`).
    fn name(&self) -> &str;

    /// After the pml's modex fence: connects to `peers` (world ranks, may
    /// include this process) and returns those this module reaches, in the
    /// order given. Calling it again with other peers adds them.
    fn add_procs(&mut self, peers: &[u32], modex: &mut dyn Modex) -> Result<Vec<u32>, BtlError>;

    /// Selection weight: for each peer the pml uses the reachable module
    /// with the highest exclusivity ([`EXCLUSIVITY_HIGH`] …).
    fn exclusivity(&self) -> u32;
    /// Typical one-way latency in microseconds (informational).
    fn latency(&self) -> u32;
    /// Typical bandwidth in Mbit/s (informational, for striping).
    fn bandwidth(&self) -> u32;
    /// Largest payload the pml should send in one eager fragment.
    fn eager_limit(&self) -> usize;
    /// Largest fragment (`header.len() + payload.len()`) accepted by
    /// [`BtlModule::send`]; pipelined protocols cut data into pieces of
    /// at most this size minus their header.
    fn max_send_size(&self) -> usize;
    /// Capabilities.
    fn flags(&self) -> BtlFlags;

    /// Sends one fragment `header ++ payload` tagged `tag` to `peer`,
    /// copying it before returning `Ok`. [`BtlError::WouldBlock`] when flow
    /// control or resources say "not now" (nothing was sent; retry after
    /// [`BtlModule::progress`]); [`BtlError::TooLarge`] above
    /// [`BtlModule::max_send_size`]; [`BtlError::Unreachable`] for a peer not
    /// added.
    fn send(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError>;

    /// Send-immediate fast path for small fragments: same contract as
    /// [`BtlModule::send`], but may refuse ([`BtlError::WouldBlock`]) in
    /// more cases (no fast resource free right now); the caller then uses
    /// `send`. Default: `send`.
    fn sendi(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError> {
        self.send(peer, tag, header, payload)
    }

    /// [`BtlModule::sendi`] reduced to whether the fragment went out:
    /// `false` means "use [`BtlModule::send`]", which then reports any error.
    /// The answer comes back in a register. A `Result` with an error payload
    /// is returned through memory, and the caller's read of it right after
    /// the call failed store-to-load forwarding and waited until the
    /// callee's stores reached the cache, i.e. until the fragment's stores
    /// into the peer's shared-memory line had taken that line from the
    /// receiver: a stall per message, a large share of a streaming sender's
    /// time over btl-sm. Default: `sendi(..).is_ok()`.
    fn try_sendi(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> bool {
        self.sendi(peer, tag, header, payload).is_ok()
    }

    /// Makes `len` bytes at `ptr` readable by peers through
    /// [`BtlModule::get`]. Default: [`BtlError::Unsupported`].
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay allocated and readable (and not be written
    /// if readers must see stable data) until
    /// [`BtlModule::deregister_region`] is called for the returned region.
    unsafe fn register_region(
        &mut self,
        ptr: *const u8,
        len: usize,
    ) -> Result<RemoteRegion, BtlError> {
        let _ = (ptr, len);
        Err(BtlError::Unsupported("register_region"))
    }

    /// Makes `len` bytes at `ptr` readable **and writable** by peers
    /// through [`BtlModule::get`] and [`BtlModule::put`] (a one-sided
    /// window's memory; [`BtlModule::register_region`] grants reads only),
    /// and by [`BtlModule::atomic`] on modules with [`BtlFlags::ATOMIC`].
    /// Released by [`BtlModule::deregister_region`], after which the BTL
    /// keeps no registration of the range that peers could write through
    /// (btl-openib deregisters it rather than caching it). Default:
    /// [`BtlError::Unsupported`] (modules without [`BtlFlags::PUT`]).
    ///
    /// # Safety
    /// `ptr..ptr+len` must stay allocated until
    /// [`BtlModule::deregister_region`] is called for the returned region;
    /// peers may write it at any time until then.
    unsafe fn register_window(
        &mut self,
        ptr: *mut u8,
        len: usize,
    ) -> Result<RemoteRegion, BtlError> {
        let _ = (ptr, len);
        Err(BtlError::Unsupported("register_window"))
    }

    /// Starts copying `len` bytes at `src` to `offset` within `peer`'s
    /// `region` (as [`BtlModule::put`]) without waiting: a token for
    /// [`BtlModule::rdma_test`], which reports its completion (complete at
    /// the target, as `put`'s return). [`BtlError::WouldBlock`]: nothing
    /// was started (the send queue is full), progress and retry. Default:
    /// a blocking [`BtlModule::put`] and a token already complete.
    ///
    /// # Safety
    /// `src..src+len` must stay valid and unchanged until `rdma_test`
    /// reported the token complete (or failed).
    unsafe fn put_start(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<u64, BtlError> {
        // SAFETY: the caller's contract covers the call.
        let src = unsafe { std::slice::from_raw_parts(src, len) };
        self.put(peer, region, offset, src).map(|()| 0)
    }

    /// Whether the operation of `token` ([`BtlModule::put_start`]) is
    /// complete: `Ok(true)` once (the token is then forgotten), `Ok(false)`
    /// not yet (progress was made), an error when it failed (also once).
    /// Default: every token is complete (the default `put_start` blocks).
    fn rdma_test(&mut self, token: u64) -> Result<bool, BtlError> {
        let _ = token;
        Ok(true)
    }

    /// One NIC atomic on the 8 bytes at `offset` (8-byte aligned) of
    /// `peer`'s `region` (registered with [`BtlModule::register_window`]),
    /// complete at the target when it returns: the value found there,
    /// which `op` replaced as it says. `peer` may be this process (the
    /// module reaches its own memory through the NIC, so that its atomics
    /// and the peers' are atomic with respect to each other: a CPU
    /// atomic is not, see docs/verbs.md "Atomic operations").
    /// [`BtlError::OutOfBounds`] when the 8 bytes leave the region,
    /// [`BtlError::WouldBlock`] when the send queue is full (nothing
    /// happened). Default: [`BtlError::Unsupported`] (modules without
    /// [`BtlFlags::ATOMIC`]).
    fn atomic(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        op: AtomicOp,
    ) -> Result<u64, BtlError> {
        let _ = (peer, region, offset, op);
        Err(BtlError::Unsupported("atomic"))
    }

    /// Releases a registration; later gets of it fail (where the BTL can
    /// tell) and the memory is the caller's again.
    fn deregister_region(&mut self, region: &RemoteRegion) {
        let _ = region;
    }

    /// Copies `dst.len()` bytes starting at `offset` within `peer`'s
    /// `region` into `dst`. [`BtlError::OutOfBounds`] when
    /// `offset + dst.len()` exceeds the region; [`BtlError::GetDenied`] when
    /// the OS forbids it (the pml then falls back to a copy protocol).
    /// Completes before returning. Default: [`BtlError::Unsupported`].
    fn get(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), BtlError> {
        let _ = (peer, region, offset, dst);
        Err(BtlError::Unsupported("get"))
    }

    /// Copies `src` to `offset` within `peer`'s `region` (one registered
    /// with [`BtlModule::register_window`]): bounds and errors as
    /// [`BtlModule::get`]; complete at the target (btl-openib: the RDMA
    /// write's completion was polled, so the data is in the target's
    /// memory) before returning. Default: [`BtlError::Unsupported`] (self
    /// and sm have no put).
    fn put(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        src: &[u8],
    ) -> Result<(), BtlError> {
        let _ = (peer, region, offset, src);
        Err(BtlError::Unsupported("put"))
    }

    /// Makes progress: delivers arrived fragments to `handler`, recycles
    /// resources, retries internal pending work. Returns the number of
    /// fragments delivered. Bounded work per call; never blocks.
    fn progress(&mut self, handler: &mut dyn BtlRecvHandler) -> usize;

    /// [`BtlModule::progress`] for a caller blocked on one message (a
    /// blocking receive): a module may hand over fewer of the fragments
    /// already waiting, leaving the rest for the next call, so that a
    /// receiver behind a fast sender takes each message when its receive
    /// is posted instead of queueing a burst as unexpected. Default: the
    /// same as `progress`.
    fn progress_waiting(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        self.progress(handler)
    }

    /// A handle that writes small fragments to `peer` without going
    /// through this module's `send` (btl-sm: the peer's fast box), for the
    /// pml's blocking-send fast path; `None` (the default): not offered.
    /// What goes through it is ordered with this module's own sends to the
    /// peer: the handle refuses while the module has fragments to the peer
    /// that the handle could overtake. See [`DirectSend`] for the rules.
    fn direct_send(&self, _peer: u32) -> Option<std::sync::Arc<dyn DirectSend>> {
        None
    }

    /// A handle that offers the next small fragment from `peer` to the
    /// pml's blocking receive without a polling round (btl-sm: the head
    /// record of the peer's fast box); `None` (the default): not offered.
    /// See [`DirectRecv`] for the rules.
    fn direct_recv(&self, _peer: u32) -> Option<std::sync::Arc<dyn DirectRecv>> {
        None
    }

    /// Whether fragments reach this module only through its own `send` /
    /// `sendi` (a loopback such as btl-self): then a caller may skip
    /// `progress` while it has sent nothing since the last progress that
    /// delivered nothing. Default: `false` (input arrives from elsewhere).
    fn input_only_from_sends(&self) -> bool {
        false
    }

    /// Peers this module found dead since the last call (connection reset,
    /// EOF in the middle of a message, failed connect), with the reason;
    /// each peer is reported once. The pml fails every request that depends
    /// on them. Default: none (the module never declares a peer dead).
    fn take_failed_peers(&mut self) -> Vec<(u32, String)> {
        Vec::new()
    }

    /// Whether fragments the module accepted still wait for the wire (a
    /// connection being made, a full socket). Finalize waits for them
    /// before its fence, so that its last fragments (the pml's BYE) reach
    /// peers that are still there to read them. Default: never.
    fn sends_pending(&self) -> bool {
        false
    }

    /// Releases the module's resources (after the pml's finalize fence:
    /// peers no longer read from this module). Idempotent.
    fn finalize(&mut self) -> Result<(), BtlError>;

    /// The module's hardware tag matching ([`TagOffload`]), for a module
    /// that can carry tagged traffic; `None` (the default): not offered.
    fn tag_offload(&mut self) -> Option<&mut dyn TagOffload> {
        None
    }
}

/// A module's direct receive channel from one peer
/// ([`BtlModule::direct_recv`]): the pml's blocking receive looks at the
/// fragment the module would deliver next from that peer and takes it
/// only if it is the message that receive wants next, with no request,
/// no matching queue and no polling round. A fragment left in place is
/// delivered by the module's next `progress` as usual. Taking the head
/// fragment keeps the module's per-peer order (it is the next one).
pub trait DirectRecv: Send + Sync {
    /// Hands the fragment at the head of the channel, if any, to `take`
    /// as (tag, bytes): consumed when `take` returns `true`, left in
    /// place otherwise. Returns whether one was consumed. A finalized
    /// module's handles offer nothing.
    ///
    /// # Safety
    /// Calls on this handle, on every other handle of the same module and
    /// on the module's own progress functions are serialized (the pml
    /// makes them all under its lock).
    unsafe fn take_head(&self, take: &mut dyn FnMut(u8, &[u8]) -> bool) -> bool;
}

/// A module's direct channel to one peer ([`BtlModule::direct_send`]): one
/// indirect call from the pml to the bytes in shared memory, instead of
/// the transport, the module's `try_sendi`, its checks and its fast-box
/// lookup (about a third of a small `MPI_Send`'s work).
pub trait DirectSend: Send + Sync {
    /// Sends `header ++ payload` tagged `tag` if it can be done at once
    /// without reordering against the module's other sends to the peer;
    /// `false` (nothing was sent): use the module's `send`/`sendi`.
    ///
    /// An implementation makes its handles refuse once the module is
    /// finalized or dropped (the memory they write may be unmapped then):
    /// a caller may keep a handle longer than the module.
    ///
    /// # Safety
    /// Calls on this handle, on every other handle of the same module and
    /// on the module's own send and progress functions are serialized (the
    /// pml makes them all under its lock).
    unsafe fn try_send(&self, tag: u8, header: &[u8], payload: &[u8]) -> bool;

    /// The largest `header ++ payload` this handle ever takes (0 once it
    /// refuses everything): a larger fragment is refused whatever the
    /// peer does, so waiting for room is pointless.
    fn max_fragment(&self) -> usize;
}
