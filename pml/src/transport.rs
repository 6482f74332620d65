//! What the pml driver needs from the byte-transfer layer, as one trait:
//! the real implementation multiplexes the BTL modules selected per peer
//! (`crate::net`); [`Loopback`] wires several pml instances of one process
//! together in memory for deterministic tests (with knobs to force the
//! pipelined path, back-pressure and out-of-order delivery).

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tmpi_tm_engine::split::{NicAction, NicEvent, NicId};

use crate::core::Limits;
use crate::raw::{RawBuf, RawBufMut};
use crate::region::Region;

/// A transport operation that did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxError {
    /// Out of resources for now (full FIFO); retry at a later progress.
    Busy,
    /// Failed for good.
    Fatal(String),
    /// The connection to the peer is broken (a completion error): the
    /// affected request fails with an MPI error class; no fallback.
    Broken(String),
}

/// Where a transport hands what it received during
/// [`Transport::progress`]: whole fragments, and (for a BTL that reads a
/// byte stream) the placement of a large fragment's payload and its
/// arrival (`tmpi_btl::BtlRecvHandler::place`/`on_placed`). A closure
/// `FnMut(u32, &[u8])` takes whole fragments only.
pub trait Deliver {
    /// A fragment (pml header ++ payload) from world rank `peer`.
    fn frag(&mut self, peer: u32, bytes: &[u8]);
    /// Where the payload of the fragment of `len` bytes from `peer` that
    /// starts with `start` belongs (`None`: deliver it with `frag`).
    fn place(&mut self, peer: u32, start: &[u8], len: usize) -> Option<tmpi_btl::Placement> {
        let _ = (peer, start, len);
        None
    }
    /// The placed fragment with header `head` and `len` bytes in all has
    /// arrived.
    fn placed(&mut self, peer: u32, head: &[u8], len: usize) {
        let _ = (peer, head, len);
    }
}

impl<F: FnMut(u32, &[u8])> Deliver for F {
    fn frag(&mut self, peer: u32, bytes: &[u8]) {
        self(peer, bytes)
    }
}

/// The pml's view of its BTLs.
pub trait Transport: Send {
    /// Number of processes (world ranks `0..size`).
    fn size(&self) -> u32;
    /// Limits of the path to `peer`.
    fn limits(&self, peer: u32) -> Limits;
    /// Registers `buf` so that `peer` can get from it; the description goes
    /// into a RNDV. `None`: not possible (pipelined fallback).
    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Region>;
    /// Releases a registration.
    fn deregister(&mut self, peer: u32, region: &[u8]);
    /// Sends one fragment `hdr ++ data` to `peer` (copies it before
    /// returning `Ok`).
    fn send(&mut self, peer: u32, hdr: &[u8], data: &[u8]) -> Result<(), TxError>;
    /// Copies `dst.len()` bytes from `peer`'s region into `dst`.
    fn get(&mut self, peer: u32, region: &[u8], dst: RawBufMut) -> Result<(), TxError>;
    /// Polls every BTL once, handing each received fragment to `deliver`
    /// as (source world rank, bytes). Returns the number of fragments.
    fn progress(&mut self, deliver: &mut dyn Deliver) -> usize;
    /// [`Transport::progress`] for a caller blocked on one message: the
    /// BTLs may hand over fewer of the fragments already waiting
    /// (`BtlModule::progress_waiting`). Default: `progress`.
    fn progress_waiting(&mut self, deliver: &mut dyn Deliver) -> usize {
        self.progress(deliver)
    }
    /// The direct receive channel from `peer` of the BTL that carries its
    /// traffic (`BtlModule::direct_recv`), for the blocking receive's fast
    /// path; `None` (default): every fragment comes through `progress`.
    fn direct_recv(&self, _peer: u32) -> Option<std::sync::Arc<dyn tmpi_btl::DirectRecv>> {
        None
    }
    /// The direct channel to `peer` of the BTL that carries its traffic
    /// (`BtlModule::direct_send`), for small MATCH fragments of blocking
    /// sends; `None` (default): every fragment goes through `send`.
    fn direct_send(&self, _peer: u32) -> Option<std::sync::Arc<dyn tmpi_btl::DirectSend>> {
        None
    }
    /// Whether a BTL still holds fragments it accepted and has not put on
    /// the wire (`BtlModule::sends_pending`). Default: none.
    fn sends_pending(&self) -> bool {
        false
    }
    /// Releases the BTLs (after the finalize fence).
    fn finalize(&mut self) {}
    /// Peers found dead since the last call (each once), with the reason:
    /// the pml fails the requests that depend on them. Default: none.
    fn take_failed(&mut self) -> Vec<(u32, String)> {
        Vec::new()
    }
    /// Name of the BTL that carries traffic to `peer` (`pml_peers` line).
    fn peer_btl(&self, _peer: u32) -> Option<&str> {
        None
    }

    /// Whether `peer` is reached by a module with RDMA put and get
    /// (`BtlFlags::PUT | BtlFlags::GET`) for one-sided windows. Default:
    /// none.
    fn rdma_peer(&self, _peer: u32) -> bool {
        false
    }
    /// Registers `len` bytes at `ptr` for remote reads and writes with
    /// every module that carries traffic of one of `peers` and has RDMA
    /// put and get (`BtlModule::register_window`): (module index, region)
    /// per module. Default: none.
    ///
    /// # Safety
    /// The memory stays allocated until [`Transport::rdma_deregister`];
    /// peers may write it until then.
    unsafe fn rdma_register(
        &mut self,
        _ptr: *mut u8,
        _len: usize,
        _peers: &[u32],
    ) -> Result<Vec<(u32, tmpi_btl::RemoteRegion)>, TxError> {
        Ok(Vec::new())
    }
    /// Releases what [`Transport::rdma_register`] returned.
    fn rdma_deregister(&mut self, _regions: &[(u32, tmpi_btl::RemoteRegion)]) {}
    /// Blocking RDMA write (`write`) of `len` bytes at `buf` to, or read
    /// into `buf` from, `offset` of `peer`'s registration `regions` (what
    /// the peer's [`Transport::rdma_register`] returned: the region of the
    /// module that carries `peer`'s traffic is used). [`TxError::Busy`]:
    /// nothing happened, progress and retry.
    ///
    /// # Safety
    /// `buf..buf+len` is valid (writable for a read) and not accessed by
    /// others during the call.
    unsafe fn rdma(
        &mut self,
        _peer: u32,
        _regions: &[(u32, tmpi_btl::RemoteRegion)],
        _offset: u64,
        _buf: *mut u8,
        _len: usize,
        _write: bool,
    ) -> Result<(), TxError> {
        Err(TxError::Fatal("no RDMA transport".into()))
    }

    /// Starts an RDMA write as [`Transport::rdma`] does one, without
    /// waiting: (module index, the module's token) for
    /// [`Transport::rdma_test`]. [`TxError::Busy`]: nothing started,
    /// progress and retry.
    ///
    /// # Safety
    /// `buf..buf+len` stays valid and unchanged until `rdma_test` reported
    /// the token complete or failed.
    unsafe fn rdma_put_start(
        &mut self,
        _peer: u32,
        _regions: &[(u32, tmpi_btl::RemoteRegion)],
        _offset: u64,
        _buf: *const u8,
        _len: usize,
    ) -> Result<(u32, u64), TxError> {
        Err(TxError::Fatal("no RDMA transport".into()))
    }
    /// Whether a started RDMA write is complete (`Ok(true)` once), making
    /// progress on its module when not.
    fn rdma_test(&mut self, _module: u32, _token: u64) -> Result<bool, TxError> {
        Err(TxError::Fatal("no RDMA transport".into()))
    }

    /// Whether NIC atomics reach `peer` (this process included):
    /// [`Transport::rdma_atomic`] can work. Default: no.
    fn rdma_atomics(&self, _peer: u32) -> bool {
        false
    }
    /// One blocking NIC atomic on the 8 bytes at `offset` of `peer`'s
    /// registration `regions` (`peer` may be this process): through the
    /// module of the registration's lowest module index that has atomics,
    /// so that every origin's atomics on one target go through one device
    /// there. The value found. [`TxError::Busy`]: nothing happened,
    /// progress and retry.
    fn rdma_atomic(
        &mut self,
        _peer: u32,
        _regions: &[(u32, tmpi_btl::RemoteRegion)],
        _offset: u64,
        _op: tmpi_btl::AtomicOp,
    ) -> Result<u64, TxError> {
        Err(TxError::Fatal("no RDMA transport".into()))
    }

    /// `(max_num_tags, max_ops)` of the one tag-matching module the pml
    /// offloads to; `None` (default): software matching only.
    fn tm_caps(&self) -> Option<(u32, u32)> {
        None
    }
    /// Whether [`Transport::tm_take`] can yield inputs (some module may
    /// receive tagged fragments, even without the offload path here).
    fn tm_inputs(&self) -> bool {
        self.tm_caps().is_some()
    }
    /// Whether messages from and to `peer` travel the tagged path.
    fn tm_peer(&self, _peer: u32) -> bool {
        false
    }
    /// Tagged-path inputs since the last call, in CQ order.
    fn tm_take(&mut self, _out: &mut Vec<TmInput>) {}
    /// Executes a NIC-list operation; `Some(refusal)` when it was refused.
    /// For an ADD: `user` is the receive's own buffer when the split matcher
    /// wants it posted (`NicBuffer::User`), `peer` the world rank of the
    /// receive's source (an offloaded receive names one): the sender of
    /// whatever the NIC matches to it, which the NIC's first completion of a
    /// multi-packet message does not reliably name.
    fn tm_exec(
        &mut self,
        _a: NicAction<u64>,
        _user: Option<RawBufMut>,
        _peer: Option<u32>,
    ) -> Option<NicEvent> {
        None
    }
}

/// What a NIC-matched receive got once its data are in.
#[derive(Debug)]
pub enum NicData {
    /// The NIC read a rendezvous of this many bytes into the receive's
    /// buffer and answered the sender itself.
    Read(usize),
    /// A pml fragment (an eager MATCH, or the RNDV standing for a
    /// rendezvous software must finish) from world rank `peer`.
    Frag {
        /// World rank of the sender.
        peer: u32,
        /// The pml fragment.
        frag: NicFrag,
    },
}

/// A pml fragment a tag-matching NIC delivered to a receive.
#[derive(Debug)]
pub enum NicFrag {
    /// The whole fragment (copied out of a bounce buffer, or the RNDV a
    /// rendezvous request software must finish stands for).
    Bytes(Vec<u8>),
    /// The fragment's header; its `len` payload bytes (a MATCH's payload, a
    /// RNDV's inline data) are already at the start of the receive's own
    /// buffer, the rest of that buffer unchanged (`tmpi_btl::TagData::Placed`).
    Placed {
        /// The fragment's header.
        header: Vec<u8>,
        /// Payload bytes in the receive's buffer.
        len: usize,
    },
}

/// An input of the offload path (btl-openib with tag matching), in CQ order.
#[derive(Debug)]
pub enum TmInput {
    /// A tagged pml fragment (MATCH or RNDV) from `peer`; `from_nic`: the
    /// NIC did not match it (counted as NIC-unexpected), else it came
    /// through an untagged receive queue.
    Frag {
        /// World rank of the sender.
        peer: u32,
        /// Unexpected at the NIC.
        from_nic: bool,
        /// The pml fragment.
        bytes: Vec<u8>,
    },
    /// A NIC completion for the split matcher.
    Nic(NicEvent),
    /// The NIC matched receive `recv` (list entry `id`): the fragment it
    /// placed in the receive's tagged buffer.
    Matched {
        /// The receive.
        recv: u64,
        /// Its list entry.
        id: NicId,
        /// World rank of the sender.
        peer: u32,
        /// The matched envelope (from the tag).
        envelope: tmpi_tm_engine::Envelope,
        /// The pml fragment.
        frag: NicFrag,
    },
    /// The NIC matched receive `recv` (list entry `id`) and its data are
    /// still coming (mlx5's first of two completions: an eager message
    /// longer than one packet, a rendezvous the NIC reads into the receive's
    /// buffer, or a software rendezvous announced early); [`TmInput::NicData`]
    /// follows.
    NicPending {
        /// The receive.
        recv: u64,
        /// Its list entry.
        id: NicId,
        /// The matched envelope (from the tag).
        envelope: tmpi_tm_engine::Envelope,
    },
    /// The data of a [`TmInput::NicPending`] receive, or why it failed.
    NicData {
        /// The receive.
        recv: u64,
        /// Its list entry.
        id: NicId,
        /// What landed.
        result: Result<NicData, String>,
    },
    /// A rendezvous send that went out as a NIC rendezvous request ended
    /// (the receiver's FIN, or an error FIN / broken connection): as a pml
    /// FIN for send request `sreq`.
    SendDone {
        /// The send request.
        sreq: u64,
        /// The receiver read the data.
        ok: bool,
    },
    /// A tagged receive failed (completion error).
    Failed {
        /// The receive.
        recv: u64,
        /// Its list entry.
        id: NicId,
        /// What failed.
        error: String,
    },
}

/// Test knobs of [`Loopback`].
#[derive(Debug, Clone, Copy)]
pub struct LoopbackConfig {
    /// Limits reported for every peer.
    pub limits: Limits,
    /// Refuse every `n`-th send with [`TxError::Busy`] (0 = never).
    pub busy_every: u32,
    /// Deliver each pair of queued fragments swapped (tests sequence
    /// reordering; FRAG/ACK/FIN may be swapped too, which the protocol
    /// tolerates).
    pub swap_pairs: bool,
    /// Make every `get` fail (tests the fallback to FRAGs).
    pub fail_get: bool,
}

impl Default for LoopbackConfig {
    fn default() -> Self {
        LoopbackConfig {
            limits: Limits {
                eager: 4096,
                max_send: 32 * 1024,
                get: true,
            },
            busy_every: 0,
            swap_pairs: false,
            fail_get: false,
        }
    }
}

type Queues = Arc<Mutex<Vec<VecDeque<(u32, Vec<u8>)>>>>;

/// In-memory transport between `n` endpoints of one process.
#[derive(Debug)]
pub struct Loopback {
    me: u32,
    n: u32,
    q: Queues,
    cfg: LoopbackConfig,
    sends: u32,
}

impl Loopback {
    /// `n` connected endpoints, endpoint `i` being world rank `i`.
    pub fn job(n: u32, cfg: LoopbackConfig) -> Vec<Loopback> {
        let q: Queues = Arc::new(Mutex::new((0..n).map(|_| VecDeque::new()).collect()));
        (0..n)
            .map(|me| Loopback {
                me,
                n,
                q: q.clone(),
                cfg,
                sends: 0,
            })
            .collect()
    }
}

impl Transport for Loopback {
    fn size(&self) -> u32 {
        self.n
    }
    fn limits(&self, _peer: u32) -> Limits {
        self.cfg.limits
    }
    fn register(&mut self, _peer: u32, buf: RawBuf) -> Option<Region> {
        let mut v = [0u8; 16];
        v[..8].copy_from_slice(&(buf.ptr() as usize as u64).to_le_bytes());
        v[8..].copy_from_slice(&(buf.len() as u64).to_le_bytes());
        Some(Region::new(&v))
    }
    fn deregister(&mut self, _peer: u32, _region: &[u8]) {}
    fn send(&mut self, peer: u32, hdr: &[u8], data: &[u8]) -> Result<(), TxError> {
        self.sends += 1;
        if self.cfg.busy_every > 0 && self.sends.is_multiple_of(self.cfg.busy_every) {
            return Err(TxError::Busy);
        }
        let mut v = Vec::with_capacity(hdr.len() + data.len());
        v.extend_from_slice(hdr);
        v.extend_from_slice(data);
        let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
        q.get_mut(peer as usize)
            .ok_or_else(|| TxError::Fatal(format!("no peer {peer}")))?
            .push_back((self.me, v));
        Ok(())
    }
    fn get(&mut self, _peer: u32, region: &[u8], dst: RawBufMut) -> Result<(), TxError> {
        if self.cfg.fail_get {
            return Err(TxError::Fatal("get disabled".into()));
        }
        if region.len() != 16 {
            return Err(TxError::Fatal("bad region".into()));
        }
        let mut a = [0u8; 8];
        a.copy_from_slice(&region[..8]);
        let ptr = u64::from_le_bytes(a) as usize as *const u8;
        a.copy_from_slice(&region[8..]);
        let len = u64::from_le_bytes(a) as usize;
        if dst.len() > len {
            return Err(TxError::Fatal("get beyond the region".into()));
        }
        // SAFETY: the region names a live send buffer of this process (the
        // sender keeps it registered until FIN); `dst` is a live receive
        // buffer (pml contract); both are in this address space.
        let src = unsafe { RawBuf::from_raw(ptr, dst.len()).as_slice() };
        // SAFETY: as above.
        unsafe { dst.write_at(0, src) };
        Ok(())
    }
    fn progress(&mut self, deliver: &mut dyn Deliver) -> usize {
        let batch: Vec<(u32, Vec<u8>)> = {
            let mut q = self.q.lock().unwrap_or_else(|p| p.into_inner());
            q[self.me as usize].drain(..).collect()
        };
        let mut batch = batch;
        if self.cfg.swap_pairs {
            for pair in batch.chunks_mut(2) {
                pair.reverse();
            }
        }
        let n = batch.len();
        for (src, b) in batch {
            deliver.frag(src, &b);
        }
        n
    }
}
