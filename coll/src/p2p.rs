//! The point-to-point interface the collective framework needs, and nothing
//! more. The pml adapter (or the simulated transport in [`crate::sim`])
//! implements it; coll never depends on the pml crate.
//!
//! Contract:
//! * Messages are matched on (context id, source communicator rank, tag)
//!   with exact source and tag; collective tags are always `<= -16`
//!   ([`crate::tags`]), so `MPI_ANY_TAG` receives of the user never take them.
//! * Non-overtaking: two messages from one source to one destination on one
//!   context with the same tag are received in send order (MPI's rule).
//! * `isend` takes ownership of the bytes; the send may complete at once
//!   (buffered) or later. `irecv` delivers the whole message as owned bytes;
//!   a message longer than `max_len` is an error of class `MPI_ERR_TRUNCATE`.
//! * `test` consumes a completed handle: after it returned `Some`, the
//!   handle is invalid.
//! * `progress` advances the transport; it returns whether anything happened
//!   so that a waiting caller can yield ([`P2p::idle`]) when nothing does
//!   (2 cores, 8 ranks: idle ranks must give the CPU away).

use std::ops::Range;
use std::sync::Arc;

use crate::Result;

/// Largest message [`P2p::send_small`] takes: the pml sends messages up to
/// this size eagerly whatever its flow-control window (docs/pml.md), so a
/// blocking send of one completes without the receiver's help.
pub const SMALL_SEND: usize = 256;

/// Bytes of a shared buffer: a send without a copy. While a transport
/// holds one, the buffer cannot change (writers go through
/// `Arc::make_mut`, which copies a shared buffer instead of mutating it).
#[derive(Debug, Clone)]
pub struct SharedBytes {
    buf: Arc<Vec<u8>>,
    range: Range<usize>,
}

impl SharedBytes {
    /// `range` of `buf`; `None` when it lies outside.
    pub fn new(buf: Arc<Vec<u8>>, range: Range<usize>) -> Option<Self> {
        (range.start <= range.end && range.end <= buf.len()).then_some(SharedBytes { buf, range })
    }

    /// The bytes.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf[self.range.clone()]
    }
}

/// How a communicator is addressed on the wire: what the transport needs to
/// send to and receive from a communicator rank.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// The context id (identical on all members; agreed by `tmpi-comm`).
    pub context_id: u32,
    /// This process's rank in the communicator.
    pub rank: u32,
    /// World rank (process index in the job) of every communicator rank.
    pub world: Arc<[u32]>,
}

impl Endpoint {
    /// Number of ranks.
    pub fn size(&self) -> u32 {
        self.world.len() as u32
    }
}

/// A transport request handle, opaque to coll.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct P2pHandle(pub u64);

/// A completed transport request.
#[derive(Debug)]
pub enum Done {
    /// The send buffer was handed over or delivered.
    Sent,
    /// The received message.
    Received(Vec<u8>),
    /// A receive started by [`P2p::irecv_into`] completed: this many bytes
    /// were written into the caller's region.
    ReceivedInPlace(usize),
}

/// Point-to-point operations used by collectives. Implementations must be
/// usable from the thread that owns the communicator; `Send + Sync` lets
/// requests migrate between threads.
pub trait P2p: Send + Sync + 'static {
    /// This process's world rank.
    fn world_rank(&self) -> u32;
    /// Number of processes in the job.
    fn world_size(&self) -> u32;
    /// Node label of a world rank (equal labels share memory), for
    /// `split_type(SHARED)`.
    fn node_of(&self, world_rank: u32) -> u32;
    /// Starts a send of `data` to communicator rank `dest` with `tag`.
    fn isend(&self, ep: &Endpoint, dest: u32, tag: i32, data: Vec<u8>) -> Result<P2pHandle>;
    /// Starts a send of shared bytes to communicator rank `dest` with `tag`.
    /// A transport that can send from memory it does not own keeps `data`
    /// until the send completed (no copy); the default copies.
    fn isend_shared(
        &self,
        ep: &Endpoint,
        dest: u32,
        tag: i32,
        data: SharedBytes,
    ) -> Result<P2pHandle> {
        self.isend(ep, dest, tag, data.as_slice().to_vec())
    }
    /// Sends the small message `data` (at most `SMALL_SEND` bytes) to
    /// communicator rank `dest` with `tag` and returns once the transport no
    /// longer needs `data` (the message is buffered: it never waits for a
    /// matching receive), without a request to test; `Ok(false)` when the
    /// transport has no such path (the caller then uses
    /// [`P2p::isend_shared`]).
    fn send_small(&self, ep: &Endpoint, dest: u32, tag: i32, data: &[u8]) -> Result<bool> {
        let _ = (ep, dest, tag, data);
        Ok(false)
    }
    /// Blocking standard-mode send of `data` (any size) to communicator rank
    /// `dest` with `tag`, without a request to test: returns once the
    /// transport no longer needs `data`, which above `SMALL_SEND` bytes
    /// may mean once the receiver matched it (rendezvous). `Ok(false)` when
    /// the transport has no such path (the default). Used by the direct
    /// tree algorithms of blocking collectives (`crate::direct`), where no
    /// rank sends to a peer that is itself blocked sending to it.
    fn send_blocking(&self, ep: &Endpoint, dest: u32, tag: i32, data: &[u8]) -> Result<bool> {
        if data.len() <= SMALL_SEND {
            return self.send_small(ep, dest, tag, data);
        }
        Ok(false)
    }
    /// Blocking send of `data` (any size) that goes out only if the
    /// transport sends it eagerly at once, so that it never waits for the
    /// receiver's match: `Ok(false)` (nothing sent) otherwise, and the
    /// default. Lets the exchanges of the direct algorithms skip a request
    /// above `SMALL_SEND` bytes.
    fn send_eager(&self, ep: &Endpoint, dest: u32, tag: i32, data: &[u8]) -> Result<bool> {
        let _ = (ep, dest, tag, data);
        Ok(false)
    }
    /// Starts a receive from communicator rank `source` with `tag` of at most `max_len` bytes.
    fn irecv(&self, ep: &Endpoint, source: u32, tag: i32, max_len: usize) -> Result<P2pHandle>;

    /// Whether [`P2p::recv_small`] is available (it blocks in the
    /// transport's own receive path, without a request to test).
    fn has_recv_small(&self) -> bool {
        false
    }

    /// Blocking receive of a message of at most `buf.len()` bytes into
    /// `buf`: `Ok(Some(received bytes))`, or `Ok(None)` when the transport
    /// has no such path (the default). Used by blocking collectives for
    /// rounds whose messages are all small, once the round's sends are out.
    fn recv_small(
        &self,
        ep: &Endpoint,
        source: u32,
        tag: i32,
        buf: &mut [u8],
    ) -> Result<Option<usize>> {
        let _ = (ep, source, tag, buf);
        Ok(None)
    }

    /// Sends `len` bytes at `data` without taking or copying them (the
    /// blocking collectives' path over the caller's memory). The default
    /// copies them into an owned message ([`P2p::isend`]).
    ///
    /// # Safety
    /// `data..data + len` must stay valid for reads and unmodified until
    /// `test` reported the request complete (or, after an error, until it
    /// reported it complete or failed).
    unsafe fn isend_raw(
        &self,
        ep: &Endpoint,
        dest: u32,
        tag: i32,
        data: *const u8,
        len: usize,
    ) -> Result<P2pHandle> {
        // SAFETY: forwarded contract: valid for reads during this call.
        let bytes = unsafe { std::slice::from_raw_parts(data, len) };
        self.isend(ep, dest, tag, bytes.to_vec())
    }

    /// Like [`P2p::irecv`], but the transport may write the message
    /// straight into the `max_len` bytes at `dst` and complete with
    /// `Done::ReceivedInPlace`. A transport that cannot (the default)
    /// completes with `Done::Received` and the caller copies.
    ///
    /// # Safety
    /// `dst` must be valid for writes of `max_len` bytes inside the
    /// allocation of `keep`, and nothing may read or write that region
    /// until the handle completed (`test` returned `Some`) or the transport
    /// is dropped. The transport holds `keep` until then, so the memory
    /// stays allocated even if the caller gives up.
    unsafe fn irecv_into(
        &self,
        ep: &Endpoint,
        source: u32,
        tag: i32,
        keep: std::sync::Arc<Vec<u8>>,
        dst: *mut u8,
        max_len: usize,
    ) -> Result<P2pHandle> {
        let _ = (keep, dst);
        self.irecv(ep, source, tag, max_len)
    }
    /// Whether the request completed; consumes it when it did.
    fn test(&self, h: P2pHandle) -> Result<Option<Done>>;
    /// Advances communication; `true` if anything happened.
    fn progress(&self) -> bool;
    /// Whether [`P2p::test`] of an incomplete request already advances
    /// communication (the pml's does): a waiting loop then needs no
    /// separate [`P2p::progress`] call per round.
    fn test_progresses(&self) -> bool {
        false
    }
    /// Called by a waiting caller when [`P2p::progress`] found nothing to do:
    /// yield the processor or sleep briefly until something may have arrived.
    fn idle(&self) {
        std::thread::yield_now();
    }
    /// Whether world rank `w` called `MPI_Finalize` (its BYE arrived):
    /// a collective waiting for it then fails instead of waiting forever.
    fn peer_finalized(&self, _w: u32) -> bool {
        false
    }
    /// A communicator with this endpoint now exists (the pml creates its
    /// per-communicator matching state). Called on every member.
    fn comm_added(&self, _ep: &Endpoint) -> Result<()> {
        Ok(())
    }
    /// The communicator with this context id was freed.
    fn comm_removed(&self, _context_id: u32) {}
    /// Asks the transport to run `run` in the waiting rounds of its own
    /// blocking calls while `pending` is non-zero (MPI's progress rule: a
    /// rank blocked in a point-to-point receive still forwards its
    /// non-blocking collectives). Every context registers its own; `false`
    /// when the transport has no such rounds.
    fn set_progress_hook(
        &self,
        _pending: Arc<std::sync::atomic::AtomicUsize>,
        _run: Box<dyn Fn() + Send + Sync>,
    ) -> bool {
        false
    }
    /// Whether ranks on one node ([`P2p::node_of`]) can map one
    /// shared-memory segment (processes of one host, or threads of one
    /// process): the `sm` component needs it.
    fn shares_memory(&self) -> bool {
        false
    }
}
