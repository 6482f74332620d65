//! Protection domains and memory regions.

use std::ptr::NonNull;
use std::sync::Arc;

use super::device::Context;
use super::error::{IbvError, Result};
use super::inline;
use super::sys::*;

/// Memory access rights of a region (`IBV_ACCESS_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Access(pub u32);

impl Access {
    /// The NIC may write into the region locally (needed for receives and RDMA read targets).
    pub const LOCAL_WRITE: Access = Access(IBV_ACCESS_LOCAL_WRITE);
    /// Peers may RDMA-write into the region.
    pub const REMOTE_WRITE: Access = Access(IBV_ACCESS_REMOTE_WRITE);
    /// Peers may RDMA-read from the region.
    pub const REMOTE_READ: Access = Access(IBV_ACCESS_REMOTE_READ);
    /// Peers may perform atomics on the region.
    pub const REMOTE_ATOMIC: Access = Access(IBV_ACCESS_REMOTE_ATOMIC);
    /// Relaxed PCIe ordering (optional: ignored by kernels that lack it).
    pub const RELAXED_ORDERING: Access = Access(IBV_ACCESS_RELAXED_ORDERING);
    /// Local write plus remote read and write: what a rendezvous buffer needs.
    pub const ALL_RDMA: Access =
        Access(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
}

impl std::ops::BitOr for Access {
    type Output = Access;
    fn bitor(self, o: Access) -> Access {
        Access(self.0 | o.0)
    }
}

/// A protection domain (`ibv_pd`). Keeps its [`Context`] alive.
pub struct ProtectionDomain {
    pub(crate) ctx: Arc<Context>,
    pub(crate) pd: NonNull<ibv_pd>,
}

// SAFETY: libibverbs objects are thread-safe; Rust never dereferences `pd` mutably.
unsafe impl Send for ProtectionDomain {}
// SAFETY: as above.
unsafe impl Sync for ProtectionDomain {}

impl std::fmt::Debug for ProtectionDomain {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ProtectionDomain")
            .field("device", &self.ctx.name())
            .finish()
    }
}

impl Context {
    /// `ibv_alloc_pd`.
    pub fn alloc_pd(self: &Arc<Self>) -> Result<Arc<ProtectionDomain>> {
        // SAFETY: live context.
        let pd = unsafe { (self.lib().fns.alloc_pd)(self.ctx.as_ptr()) };
        let pd = NonNull::new(pd).ok_or_else(|| IbvError::errno("ibv_alloc_pd"))?;
        Ok(Arc::new(ProtectionDomain {
            ctx: self.clone(),
            pd,
        }))
    }
}

impl ProtectionDomain {
    /// The device context.
    pub fn context(&self) -> &Arc<Context> {
        &self.ctx
    }

    /// Allocates a zeroed buffer of `len` bytes and registers it.
    pub fn alloc_mr(self: &Arc<Self>, len: usize, access: Access) -> Result<MemoryRegion> {
        if len == 0 {
            return Err(IbvError::InvalidArgument("cannot register 0 bytes".into()));
        }
        let mut buf = vec![0u8; len].into_boxed_slice();
        // SAFETY: the boxed slice is moved into the MemoryRegion, which
        // deregisters before freeing it; a Box never moves its heap data.
        let raw = unsafe { self.register_raw(buf.as_mut_ptr(), len, access)? };
        Ok(MemoryRegion { raw, buf })
    }

    /// Registers memory the caller owns (e.g. a user's send buffer for a
    /// zero-copy rendezvous).
    ///
    /// # Safety
    /// `addr..addr+len` must stay mapped (and not be freed or reused for
    /// anything the NIC must not touch) until the returned region is dropped.
    pub unsafe fn register_raw(
        self: &Arc<Self>,
        addr: *mut u8,
        len: usize,
        access: Access,
    ) -> Result<RawMemoryRegion> {
        if len == 0 || addr.is_null() {
            return Err(IbvError::InvalidArgument("empty or NULL region".into()));
        }
        // SAFETY: pd is live; the caller keeps the memory mapped.
        let mr =
            unsafe { inline::reg_mr(self.ctx.lib(), self.pd.as_ptr(), addr.cast(), len, access.0) };
        let mr = NonNull::new(mr).ok_or_else(|| IbvError::errno("ibv_reg_mr"))?;
        // SAFETY: mr is a live region returned by ibv_reg_mr.
        let (lkey, rkey) = unsafe { ((*mr.as_ptr()).lkey, (*mr.as_ptr()).rkey) };
        tracing::trace!(target: "verbs", len, lkey, rkey, "registered memory");
        Ok(RawMemoryRegion {
            pd: self.clone(),
            mr,
            addr,
            len,
            lkey,
            rkey,
        })
    }
}

impl Drop for ProtectionDomain {
    fn drop(&mut self) {
        // SAFETY: live PD; its children (which hold Arcs to it) are gone.
        let rc = unsafe { (self.ctx.lib().fns.dealloc_pd)(self.pd.as_ptr()) };
        if rc != 0 {
            tracing::warn!(target: "verbs", rc, "ibv_dealloc_pd failed");
        }
    }
}

/// A registration of caller-owned memory (`ibv_mr`). Deregistered on drop.
pub struct RawMemoryRegion {
    pd: Arc<ProtectionDomain>,
    mr: NonNull<ibv_mr>,
    addr: *mut u8,
    len: usize,
    lkey: u32,
    rkey: u32,
}

// SAFETY: the registration is a kernel object; the raw address is only handed
// to the NIC, never dereferenced by this type.
unsafe impl Send for RawMemoryRegion {}
// SAFETY: as above.
unsafe impl Sync for RawMemoryRegion {}

impl std::fmt::Debug for RawMemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryRegion")
            .field("addr", &self.addr)
            .field("len", &self.len)
            .field("lkey", &self.lkey)
            .field("rkey", &self.rkey)
            .finish()
    }
}

impl RawMemoryRegion {
    /// Local key (for SGEs).
    pub fn lkey(&self) -> u32 {
        self.lkey
    }
    /// Remote key (for peers' RDMA).
    pub fn rkey(&self) -> u32 {
        self.rkey
    }
    /// Start address (what peers use as remote address).
    pub fn addr(&self) -> u64 {
        self.addr as u64
    }
    /// Length in bytes.
    pub fn len(&self) -> usize {
        self.len
    }
    /// Always false (empty regions are rejected at registration).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
    /// The protection domain.
    pub fn pd(&self) -> &Arc<ProtectionDomain> {
        &self.pd
    }
    /// A scatter/gather entry for `offset..offset+len` of this region.
    pub fn sge(&self, offset: usize, len: usize) -> Result<Sge> {
        let end = offset
            .checked_add(len)
            .filter(|&e| e <= self.len)
            .ok_or_else(|| {
                IbvError::InvalidArgument(format!(
                    "range {offset}+{len} outside the {}-byte region",
                    self.len
                ))
            })?;
        let length = u32::try_from(end - offset)
            .map_err(|_| IbvError::InvalidArgument("SGE longer than 4 GiB".into()))?;
        Ok(Sge {
            addr: self.addr as u64 + offset as u64,
            length,
            lkey: self.lkey,
        })
    }
}

impl Drop for RawMemoryRegion {
    fn drop(&mut self) {
        // SAFETY: live MR, deregistered exactly once.
        let rc = unsafe { (self.pd.ctx.lib().fns.dereg_mr)(self.mr.as_ptr()) };
        if rc != 0 {
            tracing::warn!(target: "verbs", rc, "ibv_dereg_mr failed");
        }
    }
}

/// A registered buffer owned by the region: freed after deregistration.
pub struct MemoryRegion {
    // Field order matters: `raw` (deregistration) drops before `buf`.
    raw: RawMemoryRegion,
    buf: Box<[u8]>,
}

impl std::fmt::Debug for MemoryRegion {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.raw.fmt(f)
    }
}

impl std::ops::Deref for MemoryRegion {
    type Target = RawMemoryRegion;
    fn deref(&self) -> &RawMemoryRegion {
        &self.raw
    }
}

impl MemoryRegion {
    /// The buffer. Reading it while the NIC may write into it (posted
    /// receive, RDMA target) observes unspecified bytes: wait for the completion.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }
    /// The buffer, mutably (fill it before posting a send).
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        &mut self.buf
    }
}

/// A scatter/gather element, laid out exactly like `struct ibv_sge`.
#[repr(C)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sge {
    /// Start address inside a registered region.
    pub addr: u64,
    /// Length in bytes.
    pub length: u32,
    /// The region's local key.
    pub lkey: u32,
}

impl From<Sge> for ibv_sge {
    fn from(s: Sge) -> ibv_sge {
        ibv_sge {
            addr: s.addr,
            length: s.length,
            lkey: s.lkey,
        }
    }
}

// Sge is passed to libibverbs as `struct ibv_sge` (see srq.rs / qp.rs).
const _: () = {
    assert!(std::mem::size_of::<Sge>() == std::mem::size_of::<ibv_sge>());
    assert!(std::mem::align_of::<Sge>() == std::mem::align_of::<ibv_sge>());
    assert!(std::mem::offset_of!(Sge, addr) == std::mem::offset_of!(ibv_sge, addr));
    assert!(std::mem::offset_of!(Sge, length) == std::mem::offset_of!(ibv_sge, length));
    assert!(std::mem::offset_of!(Sge, lkey) == std::mem::offset_of!(ibv_sge, lkey));
};
