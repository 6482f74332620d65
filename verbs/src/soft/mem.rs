//! The memory-region table of a soft device and every access to registered
//! memory: validation and the copy happen together here, so the rest of the
//! soft NIC is safe code. (The raw primitives live in `shm`.)

use std::collections::HashMap;

use super::shm;
use crate::api::{AccessFlags, Sge, WcStatus};

/// One registered region.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MrEntry {
    pub pd: u32,
    pub addr: u64,
    pub len: u64,
    pub access: AccessFlags,
}

impl MrEntry {
    fn covers(&self, addr: u64, len: u64) -> bool {
        addr >= self.addr
            && addr
                .checked_add(len)
                .is_some_and(|end| end <= self.addr + self.len)
    }
}

/// Registered regions by key (lkey == rkey on the soft NIC).
///
/// Invariant: every entry describes memory that its registrant promised (in
/// the `unsafe` `reg_mr` contract) to keep valid until the entry is removed,
/// which happens when the region is dropped.
#[derive(Debug, Default)]
pub(crate) struct MrTable {
    map: HashMap<u32, MrEntry>,
}

fn sum_len(sges: &[Sge]) -> u64 {
    sges.iter().map(|s| u64::from(s.length)).sum()
}

impl MrTable {
    pub(crate) fn insert(&mut self, key: u32, e: MrEntry) {
        self.map.insert(key, e);
    }

    pub(crate) fn remove(&mut self, key: u32) {
        self.map.remove(&key);
    }

    /// Checks that every SGE lies in a region of `pd` granting `need`.
    pub(crate) fn check(&self, pd: u32, sges: &[Sge], need: AccessFlags) -> Result<(), WcStatus> {
        for s in sges {
            let mr = self.map.get(&s.lkey).ok_or(WcStatus::LocProtErr)?;
            if mr.pd != pd || !mr.access.contains(need) || !mr.covers(s.addr, u64::from(s.length)) {
                return Err(WcStatus::LocProtErr);
            }
        }
        Ok(())
    }

    /// Copies `data` into `sges` after checking them (LOCAL_WRITE in `pd`).
    pub(crate) fn scatter(&self, pd: u32, sges: &[Sge], data: &[u8]) -> Result<(), WcStatus> {
        self.check(pd, sges, AccessFlags::LOCAL_WRITE)?;
        if (data.len() as u64) > sum_len(sges) {
            return Err(WcStatus::LocLenErr);
        }
        let mut at = 0usize;
        for s in sges {
            if at >= data.len() {
                break;
            }
            let n = (s.length as usize).min(data.len() - at);
            // SAFETY: the SGE lies inside a live region of this device with
            // LOCAL_WRITE (checked above; the table invariant keeps it valid),
            // and the posting contract hands the buffer to the NIC.
            unsafe { shm::copy_to_local(s.addr, &data[at..at + n]) };
            at += n;
        }
        Ok(())
    }

    /// Reads `sges` after checking them (any access in `pd`).
    pub(crate) fn gather(&self, pd: u32, sges: &[Sge]) -> Result<Vec<u8>, WcStatus> {
        self.check(pd, sges, AccessFlags::empty())?;
        let mut v = Vec::with_capacity(sum_len(sges) as usize);
        for s in sges {
            // SAFETY: inside a live registered region (checked above).
            v.extend_from_slice(&unsafe { shm::read_local(s.addr, s.length as usize) });
        }
        Ok(v)
    }

    /// Serves an RDMA request as the target: the region named by `rkey`
    /// must belong to `pd`, grant `need` (REMOTE_READ or REMOTE_WRITE, also
    /// granted on the QP: `qp_access`) and cover `addr..addr+len`, and the
    /// requester's iovecs must add up to `len`. Only then the bytes move,
    /// from (`read`) or into our region, to or from `peer_pid`'s iovecs.
    /// Any failed check is `RemAccessErr` with no memory touched.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn serve_rdma(
        &self,
        pd: u32,
        qp_access: AccessFlags,
        rkey: u32,
        addr: u64,
        len: u64,
        read: bool,
        peer_pid: Option<u32>,
        iov: &[(u64, u64)],
    ) -> WcStatus {
        let need = if read {
            AccessFlags::REMOTE_READ
        } else {
            AccessFlags::REMOTE_WRITE
        };
        let iov_len: u64 = iov.iter().map(|x| x.1).sum();
        let ok = self.map.get(&rkey).is_some_and(|mr| {
            mr.pd == pd
                && mr.access.contains(need)
                && qp_access.contains(need)
                && mr.covers(addr, len)
                && iov_len == len
        });
        if !ok {
            tracing::debug!(target: "verbs", rkey, addr, len, "soft: remote access violation");
            return WcStatus::RemAccessErr;
        }
        let local = [(addr, len)];
        let r = match peer_pid {
            None => Err(std::io::Error::from_raw_os_error(libc::ENOTCONN)),
            // SAFETY: `local` lies inside a live region of this device that
            // grants REMOTE_READ (checked above; table invariant).
            Some(pid) if read => unsafe { shm::vm_write(pid, &local, iov) },
            // SAFETY: as above, with REMOTE_WRITE (so LOCAL_WRITE) granted.
            Some(pid) => unsafe { shm::vm_read(pid, &local, iov) },
        };
        match r {
            Ok(()) => WcStatus::Success,
            Err(e) => {
                tracing::warn!(target: "verbs", error = %e, "soft: process_vm transfer failed");
                WcStatus::RemOpErr
            }
        }
    }
}

/// An atomic operation executed by the target's NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AtomicOp {
    /// Fetch-and-add of the value.
    FetchAdd(u64),
    /// Compare-and-swap: (compare, swap).
    CmpSwap(u64, u64),
}

impl MrTable {
    /// Executes an atomic as the target, under the device's lock (the
    /// caller holds it: `&mut Engine`). The region named by `rkey` must
    /// belong to `pd`, grant `REMOTE_ATOMIC` (also on the QP: `qp_access`)
    /// and cover the 8 bytes at `addr` (else `RemAccessErr`, as rxe's
    /// `check_rkey`); `addr` must be 8-byte aligned (else `RemInvReqErr`, as
    /// rxe's `RESPST_ERR_MISALIGNED_ATOMIC`). No memory is touched on error.
    ///
    /// The read-modify-write is deliberately *not* a CPU atomic instruction:
    /// like an `IBV_ATOMIC_HCA` device it is atomic only with respect to the
    /// other atomics this device executes (they all run under its lock), so a
    /// program that mixes CPU accesses with NIC atomics on one location loses
    /// updates here as it would on hardware. The value is a `u64` in host
    /// byte order (as rxe's `rxe_mr_do_atomic_op` and mlx5 in host-endian
    /// mode, the only mode in which the mlx5 kernel driver reports atomics).
    pub(crate) fn serve_atomic(
        &self,
        pd: u32,
        qp_access: AccessFlags,
        rkey: u32,
        addr: u64,
        op: AtomicOp,
    ) -> Result<u64, WcStatus> {
        let need = AccessFlags::REMOTE_ATOMIC;
        let ok = self.map.get(&rkey).is_some_and(|mr| {
            mr.pd == pd
                && mr.access.contains(need)
                && qp_access.contains(need)
                && mr.covers(addr, 8)
        });
        if !ok {
            tracing::debug!(target: "verbs", rkey, addr, "soft: remote atomic access violation");
            return Err(WcStatus::RemAccessErr);
        }
        if !addr.is_multiple_of(8) {
            tracing::debug!(target: "verbs", rkey, addr, "soft: misaligned atomic");
            return Err(WcStatus::RemInvReqErr);
        }
        // SAFETY: the 8 bytes lie inside a live region of this device that
        // grants REMOTE_ATOMIC (checked above; table invariant); a region
        // with REMOTE_ATOMIC also has LOCAL_WRITE (checked at registration).
        let old_bytes = unsafe { shm::read_local(addr, 8) };
        let mut b = [0u8; 8];
        b.copy_from_slice(&old_bytes);
        let old = u64::from_ne_bytes(b);
        let new = match op {
            AtomicOp::FetchAdd(add) => Some(old.wrapping_add(add)),
            AtomicOp::CmpSwap(compare, swap) => (old == compare).then_some(swap),
        };
        if let Some(new) = new {
            // SAFETY: as above.
            unsafe { shm::copy_to_local(addr, &new.to_ne_bytes()) };
        }
        Ok(old)
    }
}

/// Reads the bytes of inline-send SGEs, which need not be registered.
///
/// # Safety
/// Every SGE must describe readable memory of this process (the
/// `post_send` contract).
pub(crate) unsafe fn gather_unregistered(sges: &[Sge]) -> Vec<u8> {
    let mut v = Vec::with_capacity(sum_len(sges) as usize);
    for s in sges {
        // SAFETY: guaranteed by the caller.
        v.extend_from_slice(&unsafe { shm::read_local(s.addr, s.length as usize) });
    }
    v
}
