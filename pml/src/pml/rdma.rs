//! RDMA for one-sided users (the osc framework's `rdma` component): which
//! peers a BTL with RDMA put and get reaches, registration of a window's
//! memory with those BTLs, and blocking puts and gets into a peer's
//! registered memory. The pml only routes: the module that carries a
//! peer's traffic does the transfer (`BtlModule::put`/`get`), under the
//! pml's lock like every other BTL call.
//!
//! A registration is described by [`RdmaKeys`]: one (module index,
//! region) pair per module it was made with, exchanged by the user (a
//! window's creation allgathers them). Module `k` of one process is
//! connected to module `k` of each peer (btl `add_procs`), so an origin
//! whose traffic to a target goes through its module `k` uses the target's
//! region of module `k`.

use tmpi_btl::{RemoteRegion, REMOTE_REGION_BYTES};

/// An RDMA write in flight ([`Pml::rdma_put_start`], [`Pml::rdma_wait`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RdmaToken {
    module: u32,
    token: u64,
}

/// A NIC atomic on one 64-bit word ([`Pml::rdma_atomic`]).
pub use tmpi_btl::AtomicOp as RdmaAtomic;

use super::Pml;
use crate::transport::TxError;
use crate::PmlError;

/// The regions of one registration ([`Pml::rdma_register`]), to be sent
/// to the peers that will put and get.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RdmaKeys {
    regions: Vec<(u32, RemoteRegion)>,
}

impl RdmaKeys {
    /// Largest number of modules a registration may span in its encoded
    /// form ([`RdmaKeys::BYTES`]).
    pub const MAX_MODULES: usize = 4;
    /// Bytes of one encoded registration: a count, then
    /// [`RdmaKeys::MAX_MODULES`] slots of (module index, region).
    pub const BYTES: usize = 4 + Self::MAX_MODULES * (4 + REMOTE_REGION_BYTES);

    /// Whether no module registered the memory.
    pub fn is_empty(&self) -> bool {
        self.regions.is_empty()
    }

    /// The fixed-size encoding ([`RdmaKeys::BYTES`]); `None` when the
    /// registration spans more than [`RdmaKeys::MAX_MODULES`] modules.
    pub fn encode(&self) -> Option<[u8; Self::BYTES]> {
        if self.regions.len() > Self::MAX_MODULES {
            return None;
        }
        let mut b = [0u8; Self::BYTES];
        b[..4].copy_from_slice(&(self.regions.len() as u32).to_le_bytes());
        for (k, (m, r)) in self.regions.iter().enumerate() {
            let at = 4 + k * (4 + REMOTE_REGION_BYTES);
            b[at..at + 4].copy_from_slice(&m.to_le_bytes());
            b[at + 4..at + 4 + REMOTE_REGION_BYTES].copy_from_slice(&r.to_bytes());
        }
        Some(b)
    }

    /// The registration [`RdmaKeys::encode`] encoded; `None` when `b` is
    /// not such an encoding.
    pub fn decode(b: &[u8]) -> Option<RdmaKeys> {
        if b.len() != Self::BYTES {
            return None;
        }
        let n = u32::from_le_bytes(b[..4].try_into().ok()?) as usize;
        if n > Self::MAX_MODULES {
            return None;
        }
        let mut regions = Vec::with_capacity(n);
        for k in 0..n {
            let at = 4 + k * (4 + REMOTE_REGION_BYTES);
            let m = u32::from_le_bytes(b[at..at + 4].try_into().ok()?);
            let r = RemoteRegion::from_bytes(&b[at + 4..at + 4 + REMOTE_REGION_BYTES]).ok()?;
            regions.push((m, r));
        }
        Some(RdmaKeys { regions })
    }
}

fn pml_err(e: TxError) -> PmlError {
    match e {
        TxError::Busy => PmlError::NoMem("RDMA resources busy".into()),
        TxError::Fatal(s) | TxError::Broken(s) => PmlError::Transport(s),
    }
}

impl Pml {
    /// Whether world rank `peer` is reached through a BTL module with RDMA
    /// put and get (btl-openib; not self, sm or tcp).
    pub fn rdma_reachable(&self, peer: u32) -> bool {
        self.lock().net.rdma_peer(peer)
    }

    /// Registers `len` bytes at `ptr` for RDMA reads and writes by peers,
    /// with every module that carries traffic of one of the world ranks
    /// `peers` and has RDMA put and get; empty keys when there is none.
    ///
    /// # Safety
    /// The memory must stay allocated until [`Pml::rdma_deregister`] of
    /// the returned keys; the peers that get the keys may write it at any
    /// time until then.
    pub unsafe fn rdma_register(
        &self,
        ptr: *mut u8,
        len: usize,
        peers: &[u32],
    ) -> Result<RdmaKeys, PmlError> {
        let mut g = self.lock();
        // SAFETY: forwarded from this function's contract.
        let regions = unsafe { g.net.rdma_register(ptr, len, peers) }.map_err(pml_err)?;
        Ok(RdmaKeys { regions })
    }

    /// Releases a registration of this process ([`Pml::rdma_register`]);
    /// afterwards no peer can write the memory through it.
    pub fn rdma_deregister(&self, keys: &RdmaKeys) {
        self.lock().net.rdma_deregister(&keys.regions);
    }

    /// Writes `len` bytes at `src` to byte `offset` of world rank `peer`'s
    /// registration `keys` by RDMA write, complete in the peer's memory
    /// when this returns (the write's completion was polled). The peer's
    /// process takes no part on hardware; on the soft NIC its verbs calls
    /// (any progress) serve the request.
    ///
    /// # Safety
    /// `src..src+len` must be readable during the call.
    pub unsafe fn rdma_put(
        &self,
        peer: u32,
        keys: &RdmaKeys,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<(), PmlError> {
        // SAFETY: forwarded; a write only reads the buffer.
        unsafe { self.rdma(peer, keys, offset, src as *mut u8, len, true) }
    }

    /// Reads `len` bytes at byte `offset` of world rank `peer`'s
    /// registration `keys` into `dst` by RDMA read, there when this
    /// returns.
    ///
    /// # Safety
    /// `dst..dst+len` must be writable and not accessed by others during
    /// the call.
    pub unsafe fn rdma_get(
        &self,
        peer: u32,
        keys: &RdmaKeys,
        offset: u64,
        dst: *mut u8,
        len: usize,
    ) -> Result<(), PmlError> {
        // SAFETY: forwarded.
        unsafe { self.rdma(peer, keys, offset, dst, len, false) }
    }

    /// Starts an RDMA write of `len` bytes at `src` to byte `offset` of
    /// world rank `peer`'s registration `keys` ([`Pml::rdma_put`] without
    /// the wait): complete at the target once [`Pml::rdma_wait`] returned
    /// for its token.
    ///
    /// # Safety
    /// `src..src+len` must stay readable and unchanged until
    /// [`Pml::rdma_wait`] of the token returned.
    pub unsafe fn rdma_put_start(
        &self,
        peer: u32,
        keys: &RdmaKeys,
        offset: u64,
        src: *const u8,
        len: usize,
    ) -> Result<RdmaToken, PmlError> {
        loop {
            let mut g = self.lock();
            // SAFETY: forwarded from this function's contract.
            match unsafe { g.net.rdma_put_start(peer, &keys.regions, offset, src, len) } {
                Ok((module, token)) => return Ok(RdmaToken { module, token }),
                Err(TxError::Busy) => {
                    g.progress();
                    drop(g);
                    std::thread::yield_now();
                }
                Err(e) => return Err(pml_err(e)),
            }
        }
    }

    /// Waits until every write of `tokens` ([`Pml::rdma_put_start`]) is
    /// complete at its target; the first failure, after all are done.
    pub fn rdma_wait(&self, tokens: &[RdmaToken]) -> Result<(), PmlError> {
        let mut left = tokens.to_vec();
        let mut first = Ok(());
        loop {
            let mut g = self.lock();
            left.retain(|t| match g.net.rdma_test(t.module, t.token) {
                Ok(done) => !done,
                Err(e) => {
                    if first.is_ok() {
                        first = Err(pml_err(e));
                    }
                    false
                }
            });
            if left.is_empty() {
                return first;
            }
            g.progress();
            drop(g);
            std::thread::yield_now();
        }
    }

    /// Whether NIC atomics reach world rank `peer` (this process
    /// included, through the NIC's loopback): [`Pml::rdma_atomic`] works
    /// on memory it registered with [`Pml::rdma_register`].
    pub fn rdma_atomics(&self, peer: u32) -> bool {
        self.lock().net.rdma_atomics(peer)
    }

    /// One NIC atomic on the 8-byte-aligned word at byte `offset` of world
    /// rank `peer`'s registration `keys` (`peer` may be this process: its
    /// own memory is then changed through the NIC too, atomically with
    /// the peers' atomics, which a CPU atomic would not be); the value
    /// found. Complete at the target when this returns. The peer's process
    /// takes no part on hardware; on the soft NIC its progress serves it.
    pub fn rdma_atomic(
        &self,
        peer: u32,
        keys: &RdmaKeys,
        offset: u64,
        op: RdmaAtomic,
    ) -> Result<u64, PmlError> {
        loop {
            let mut g = self.lock();
            match g.net.rdma_atomic(peer, &keys.regions, offset, op) {
                Ok(old) => return Ok(old),
                Err(TxError::Busy) => {
                    g.progress();
                    drop(g);
                    std::thread::yield_now();
                }
                Err(e) => return Err(pml_err(e)),
            }
        }
    }

    /// The blocking transfer: retried after a progress round (with the
    /// lock released in between) while the module's send queue is full.
    unsafe fn rdma(
        &self,
        peer: u32,
        keys: &RdmaKeys,
        offset: u64,
        buf: *mut u8,
        len: usize,
        write: bool,
    ) -> Result<(), PmlError> {
        if len == 0 {
            return Ok(());
        }
        loop {
            let mut g = self.lock();
            // SAFETY: forwarded from the callers' contracts.
            match unsafe { g.net.rdma(peer, &keys.regions, offset, buf, len, write) } {
                Ok(()) => return Ok(()),
                Err(TxError::Busy) => {
                    g.progress();
                    drop(g);
                    std::thread::yield_now();
                }
                Err(e) => return Err(pml_err(e)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_reject_garbage() {
        let k = RdmaKeys {
            regions: vec![
                (
                    0,
                    RemoteRegion {
                        addr: 0x1000,
                        len: 64,
                        key: 7,
                    },
                ),
                (
                    2,
                    RemoteRegion {
                        addr: 0x2000,
                        len: 8,
                        key: 9,
                    },
                ),
            ],
        };
        let b = k.encode().unwrap();
        assert_eq!(RdmaKeys::decode(&b), Some(k));
        assert!(RdmaKeys::decode(&[0u8; RdmaKeys::BYTES])
            .unwrap()
            .is_empty());
        assert_eq!(RdmaKeys::decode(&b[1..]), None);
        let mut bad = b;
        bad[0] = 9;
        assert_eq!(RdmaKeys::decode(&bad), None);
        let many = RdmaKeys {
            regions: vec![
                (
                    0,
                    RemoteRegion {
                        addr: 0,
                        len: 0,
                        key: 0
                    }
                );
                RdmaKeys::MAX_MODULES + 1
            ],
        };
        assert_eq!(many.encode(), None);
    }
}
