//! The unsafe corner of the soft NIC: POSIX shared-memory segments, the
//! single-producer/single-consumer record ring that lives in them, raw copies
//! into registered local memory, and `process_vm_readv`/`process_vm_writev`.
//! Everything above this module is safe code.
//!
//! # Ring
//! One ring per QP, in a segment the receiving QP creates
//! (`/dev/shm/tmpi-soft.<pid>.<instance>.<qpn>`, mode 0600). The connected
//! peer QP is the only producer; the owner the only consumer. `head` and
//! `tail` are monotonic byte positions (offset = position % capacity) on
//! separate cache lines. A record is a [`RecHdr`] followed by its payload,
//! padded to 8 bytes, never split across the end: when the contiguous room
//! at the end is too small, the producer writes a `SKIP` marker (or, with
//! fewer than [`HDR_LEN`] bytes left, the consumer skips implicitly).
//! The producer publishes with a release store of `tail`, the consumer frees
//! with a release store of `head` (acquire loads on the other side).

use std::ffi::CString;
use std::io;
use std::ptr;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};

/// Magic number at the start of every segment ("TMSOFT01").
const MAGIC: u64 = 0x544d_534f_4654_3031;

/// Segment header (first 256 bytes of a segment).
#[repr(C)]
struct SegHeader {
    magic: u64,
    owner_pid: u32,
    owner_instance: u32,
    qpn: u32,
    /// Set to 1 by the peer when it has mapped the segment.
    attached: AtomicU32,
    capacity: u64,
    /// Peer identity written at attach: pid, instance, qpn.
    peer_pid: AtomicU32,
    peer_instance: AtomicU32,
    peer_qpn: AtomicU32,
    /// Set to 1 by the owner when its QP is destroyed.
    closed: AtomicU32,
    _pad0: [u8; 16],
    /// Producer position (cache line 1).
    tail: AtomicU64,
    _pad1: [u8; 56],
    /// Consumer position (cache line 2).
    head: AtomicU64,
    _pad2: [u8; 56],
    _pad3: [u8; 64],
}

const SEG_HDR_LEN: usize = 256;
const _: () = assert!(std::mem::size_of::<SegHeader>() == SEG_HDR_LEN);

/// Record kinds.
pub(crate) mod kind {
    /// Padding to the end of the ring.
    pub const SKIP: u32 = 0x5350;
    /// A send: payload = the message.
    pub const SEND: u32 = 1;
    /// RDMA write request: payload = requester iovecs (source).
    pub const WRITE_REQ: u32 = 2;
    /// RDMA read request: payload = requester iovecs (destination).
    pub const READ_REQ: u32 = 3;
    /// Response to a read/write/atomic request: `status` (an atomic's
    /// response carries the old value, 8 bytes in host order, as payload).
    pub const RESP: u32 = 4;
    /// Atomic request: `addr`, `rkey`; payload = op (1 fetch-add, 2
    /// compare-swap), compare_add, swap: three u64 in host order.
    pub const ATOMIC_REQ: u32 = 5;
}

/// Header of a ring record.
#[repr(C)]
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct RecHdr {
    pub kind: u32,
    /// Whole record length (header + payload + padding).
    pub total: u32,
    pub req_id: u64,
    /// Target address (RDMA requests).
    pub addr: u64,
    /// Byte count (RDMA requests) or payload length (SEND).
    pub len: u64,
    pub rkey: u32,
    pub status: u32,
    pub imm: u32,
    pub flags: u32,
    /// Payload length in bytes.
    pub payload_len: u32,
    pub _pad: u32,
}

/// Record header length.
pub(crate) const HDR_LEN: usize = std::mem::size_of::<RecHdr>();
const _: () = assert!(HDR_LEN & 7 == 0);

/// `RecHdr::flags`: the SEND carries immediate data.
pub(crate) const FLAG_IMM: u32 = 1;
/// On an RDMA request: the target refuses it as for a bad rkey (fault
/// injection, `btl_openib_tmsoft_inject_error read:N`).
pub(crate) const FLAG_REFUSE: u32 = 2;
/// On a SEND: a work request of the peer, which completes when the
/// receiver acknowledges it (a `RESP` with the record's `req_id`) once the
/// message is in a receive buffer or with the TM-SRQ (the NIC's own FIN
/// messages carry no such flag and want no acknowledgement).
pub(crate) const FLAG_ACK: u32 = 4;

fn align8(n: usize) -> usize {
    (n + 7) & !7
}

/// A mapped shared-memory segment holding one ring.
#[derive(Debug)]
pub(crate) struct Segment {
    base: *mut u8,
    map_len: usize,
    capacity: usize,
    name: CString,
    owner: bool,
    unlinked: bool,
}

// SAFETY: the mapping is process-wide memory; all shared fields are accessed
// through atomics or under the ring's single-producer/single-consumer
// discipline, which the engine's mutex enforces within a process.
unsafe impl Send for Segment {}
// SAFETY: as above; `&Segment` only exposes atomic loads/stores and reads of
// immutable header fields.
unsafe impl Sync for Segment {}

/// The segment name of QP `qpn` of device instance (`pid`, `instance`).
pub(crate) fn segment_name(pid: u32, instance: u32, qpn: u32) -> String {
    format!("/tmpi-soft.{pid}.{instance}.{qpn}")
}

impl Segment {
    /// Creates (exclusively, mode 0600) and maps the ring segment of a QP.
    /// A leftover of a dead process with the same name is replaced.
    pub(crate) fn create(
        pid: u32,
        instance: u32,
        qpn: u32,
        capacity: usize,
    ) -> io::Result<Segment> {
        let capacity = align8(capacity.max(4096));
        let name = CString::new(segment_name(pid, instance, qpn)).map_err(io::Error::other)?;
        let map_len = SEG_HDR_LEN + capacity;
        let fd = loop {
            // SAFETY: `name` is a valid NUL-terminated string.
            let fd = unsafe {
                libc::shm_open(
                    name.as_ptr(),
                    libc::O_CREAT | libc::O_EXCL | libc::O_RDWR | libc::O_CLOEXEC,
                    0o600,
                )
            };
            if fd >= 0 {
                break fd;
            }
            let e = io::Error::last_os_error();
            if e.raw_os_error() == Some(libc::EEXIST) {
                // Our own pid and instance: any existing file is stale.
                // SAFETY: valid C string.
                unsafe { libc::shm_unlink(name.as_ptr()) };
                continue;
            }
            return Err(e);
        };
        let seg = Self::map(fd, name, map_len, true, true)?;
        // SAFETY: freshly mapped, zero-filled, at least SEG_HDR_LEN bytes,
        // page aligned; nobody else can have it before the peer attaches.
        unsafe {
            let h = seg.base as *mut SegHeader;
            (*h).owner_pid = pid;
            (*h).owner_instance = instance;
            (*h).qpn = qpn;
            (*h).capacity = capacity as u64;
            ptr::write_volatile(&mut (*h).magic, MAGIC);
        }
        Ok(seg)
    }

    /// Opens and maps the ring segment of a remote QP.
    pub(crate) fn open(pid: u32, instance: u32, qpn: u32) -> io::Result<Segment> {
        let name = CString::new(segment_name(pid, instance, qpn)).map_err(io::Error::other)?;
        // SAFETY: valid C string.
        let fd = unsafe { libc::shm_open(name.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC, 0) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: an all-zero stat is a valid value; fstat fills it.
        let mut st: libc::stat = unsafe { std::mem::zeroed() };
        // SAFETY: fd is open, st is a valid out-pointer.
        if unsafe { libc::fstat(fd, &mut st) } != 0 {
            let e = io::Error::last_os_error();
            // SAFETY: fd is open and ours.
            unsafe { libc::close(fd) };
            return Err(e);
        }
        let map_len = st.st_size as usize;
        if map_len < SEG_HDR_LEN + 4096 {
            // SAFETY: fd is open and ours.
            unsafe { libc::close(fd) };
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        let mut seg = Self::map(fd, name, map_len, false, false)?;
        // SAFETY: the mapping holds at least the header.
        let (magic, cap, owner_qpn) = unsafe {
            let h = seg.base as *const SegHeader;
            (ptr::read_volatile(&(*h).magic), (*h).capacity, (*h).qpn)
        };
        if magic != MAGIC || cap as usize + SEG_HDR_LEN != map_len || owner_qpn != qpn {
            return Err(io::Error::from_raw_os_error(libc::EPROTO));
        }
        seg.capacity = cap as usize;
        Ok(seg)
    }

    fn map(
        fd: libc::c_int,
        name: CString,
        map_len: usize,
        truncate: bool,
        owner: bool,
    ) -> io::Result<Segment> {
        // SAFETY: fd is an open shm descriptor we own; it is closed on every path.
        unsafe {
            if truncate && libc::ftruncate(fd, map_len as libc::off_t) != 0 {
                let e = io::Error::last_os_error();
                libc::close(fd);
                if owner {
                    libc::shm_unlink(name.as_ptr());
                }
                return Err(e);
            }
            let p = libc::mmap(
                ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd,
                0,
            );
            let e = io::Error::last_os_error();
            libc::close(fd);
            if p == libc::MAP_FAILED {
                if owner {
                    libc::shm_unlink(name.as_ptr());
                }
                return Err(e);
            }
            Ok(Segment {
                base: p as *mut u8,
                map_len,
                capacity: map_len - SEG_HDR_LEN,
                name,
                owner,
                unlinked: false,
            })
        }
    }

    fn hdr(&self) -> &SegHeader {
        // SAFETY: the mapping starts with a SegHeader and lives as long as self.
        unsafe { &*(self.base as *const SegHeader) }
    }

    /// Claims the segment for the peer (pid, instance, qpn): the ring has a
    /// single producer, so a second, different claimant gets `EBUSY`.
    pub(crate) fn claim(&self, pid: u32, instance: u32, qpn: u32) -> io::Result<()> {
        let h = self.hdr();
        // 0 = free, 2 = being claimed, 1 = attached.
        match h
            .attached
            .compare_exchange(0, 2, Ordering::AcqRel, Ordering::Acquire)
        {
            Ok(_) => {
                h.peer_pid.store(pid, Ordering::Relaxed);
                h.peer_instance.store(instance, Ordering::Relaxed);
                h.peer_qpn.store(qpn, Ordering::Relaxed);
                h.attached.store(1, Ordering::Release);
                Ok(())
            }
            Err(_) => {
                if self.attached_peer() == Some((pid, instance, qpn)) {
                    Ok(())
                } else {
                    Err(io::Error::from_raw_os_error(libc::EBUSY))
                }
            }
        }
    }

    /// Whether the peer attached, and who it is (pid, instance, qpn).
    pub(crate) fn attached_peer(&self) -> Option<(u32, u32, u32)> {
        let h = self.hdr();
        if h.attached.load(Ordering::Acquire) != 1 {
            return None;
        }
        Some((
            h.peer_pid.load(Ordering::Relaxed),
            h.peer_instance.load(Ordering::Relaxed),
            h.peer_qpn.load(Ordering::Relaxed),
        ))
    }

    /// True once the owner destroyed its QP (called by the peer).
    pub(crate) fn closed(&self) -> bool {
        self.hdr().closed.load(Ordering::Acquire) != 0
    }

    /// Marks the owner's QP as gone (error state or destroyed): the peer's
    /// waiting work fails. Owner only; idempotent.
    pub(crate) fn mark_closed(&self) {
        if self.owner {
            self.hdr().closed.store(1, Ordering::Release);
        }
    }

    /// Removes the name (the mapping stays). Idempotent.
    pub(crate) fn unlink(&mut self) {
        if self.owner && !self.unlinked {
            // SAFETY: valid C string.
            unsafe { libc::shm_unlink(self.name.as_ptr()) };
            self.unlinked = true;
        }
    }

    /// Largest payload a record can carry.
    pub(crate) fn max_payload(&self) -> usize {
        self.capacity / 2 - HDR_LEN
    }

    fn data(&self) -> *mut u8 {
        // SAFETY: SEG_HDR_LEN < map_len.
        unsafe { self.base.add(SEG_HDR_LEN) }
    }

    /// Producer: appends a record whose payload is the concatenation of
    /// `parts`. Returns false when the ring has no room (retry later).
    pub(crate) fn push(&self, mut hdr: RecHdr, parts: &[&[u8]]) -> bool {
        let payload: usize = parts.iter().map(|p| p.len()).sum();
        if payload > self.max_payload() {
            return false;
        }
        let need = align8(HDR_LEN + payload);
        let h = self.hdr();
        let cap = self.capacity as u64;
        let head = h.head.load(Ordering::Acquire);
        let mut tail = h.tail.load(Ordering::Relaxed);
        let off = (tail % cap) as usize;
        let contig = self.capacity - off;
        let used = (tail - head) as usize;
        if contig < need {
            if used + contig + need > self.capacity {
                return false;
            }
            if contig >= 4 {
                // SAFETY: off + 4 <= capacity; this area is free (producer-owned).
                unsafe { ptr::write_unaligned(self.data().add(off) as *mut u32, kind::SKIP) };
            }
            tail += contig as u64;
        } else if used + need > self.capacity {
            return false;
        }
        let off = (tail % cap) as usize;
        hdr.total = need as u32;
        hdr.payload_len = payload as u32;
        // SAFETY: off + need <= capacity (checked above) and the region
        // [tail, tail+need) is free: the consumer does not read past `tail`.
        unsafe {
            let p = self.data().add(off);
            ptr::write_unaligned(p as *mut RecHdr, hdr);
            let mut at = HDR_LEN;
            for part in parts {
                ptr::copy_nonoverlapping(part.as_ptr(), p.add(at), part.len());
                at += part.len();
            }
        }
        h.tail.store(tail + need as u64, Ordering::Release);
        true
    }

    /// Consumer: the next record (header and a copy of its payload), without
    /// consuming it. Skip markers are consumed on the way.
    pub(crate) fn peek(&self) -> Option<(RecHdr, Vec<u8>)> {
        let h = self.hdr();
        let cap = self.capacity as u64;
        loop {
            let head = h.head.load(Ordering::Relaxed);
            let tail = h.tail.load(Ordering::Acquire);
            if head == tail {
                return None;
            }
            let off = (head % cap) as usize;
            let contig = self.capacity - off;
            if contig < HDR_LEN {
                h.head.store(head + contig as u64, Ordering::Release);
                continue;
            }
            // SAFETY: off + HDR_LEN <= capacity and [head, tail) was published
            // by the producer's release store.
            let k = unsafe { ptr::read_unaligned(self.data().add(off) as *const u32) };
            if k == kind::SKIP {
                h.head.store(head + contig as u64, Ordering::Release);
                continue;
            }
            // SAFETY: as above.
            let rec = unsafe { ptr::read_unaligned(self.data().add(off) as *const RecHdr) };
            let plen = rec.payload_len as usize;
            if rec.total as usize > contig
                || HDR_LEN + plen > rec.total as usize
                || (rec.total as u64) > tail - head
            {
                tracing::error!(target: "verbs", ?rec, "soft: corrupt ring record");
                return None;
            }
            let mut payload = vec![0u8; plen];
            // SAFETY: bounds checked against the record and the ring above.
            unsafe {
                ptr::copy_nonoverlapping(self.data().add(off + HDR_LEN), payload.as_mut_ptr(), plen)
            };
            return Some((rec, payload));
        }
    }

    /// Consumer: releases the record returned by the last `peek`.
    pub(crate) fn advance(&self, rec: &RecHdr) {
        let h = self.hdr();
        let head = h.head.load(Ordering::Relaxed);
        h.head.store(head + u64::from(rec.total), Ordering::Release);
    }
}

impl Drop for Segment {
    fn drop(&mut self) {
        if self.owner {
            self.hdr().closed.store(1, Ordering::Release);
        }
        self.unlink();
        // SAFETY: base/map_len describe our own live mapping.
        if unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) } != 0 {
            tracing::warn!(target: "verbs", error = %io::Error::last_os_error(), "soft: munmap failed");
        }
    }
}

/// Copies `src` to local address `addr`.
///
/// # Safety
/// `addr..addr+src.len()` must be writable memory of this process (the
/// engine checks it lies inside a registered region with LOCAL_WRITE).
pub(crate) unsafe fn copy_to_local(addr: u64, src: &[u8]) {
    // SAFETY: guaranteed by the caller.
    unsafe { ptr::copy_nonoverlapping(src.as_ptr(), addr as *mut u8, src.len()) }
}

/// Reads `len` bytes at local address `addr`.
///
/// # Safety
/// `addr..addr+len` must be readable memory of this process (inside a
/// registered region).
pub(crate) unsafe fn read_local(addr: u64, len: usize) -> Vec<u8> {
    let mut v = vec![0u8; len];
    // SAFETY: guaranteed by the caller.
    unsafe { ptr::copy_nonoverlapping(addr as *const u8, v.as_mut_ptr(), len) };
    v
}

fn iovecs(list: &[(u64, u64)]) -> Vec<libc::iovec> {
    list.iter()
        .map(|&(a, l)| libc::iovec {
            iov_base: a as *mut libc::c_void,
            iov_len: l as usize,
        })
        .collect()
}

/// Copies from remote process `pid` (`remote` iovecs) into local memory
/// (`local` iovecs). Returns an error unless every byte moved.
///
/// # Safety
/// The local iovecs must be writable memory of this process.
pub(crate) unsafe fn vm_read(
    pid: u32,
    local: &[(u64, u64)],
    remote: &[(u64, u64)],
) -> io::Result<()> {
    let l = iovecs(local);
    let r = iovecs(remote);
    let want: u64 = local.iter().map(|x| x.1).sum();
    // SAFETY: iovec arrays are valid for the call; local memory validity is
    // the caller's contract; the kernel checks the remote side.
    let n = unsafe {
        libc::process_vm_readv(
            pid as libc::pid_t,
            l.as_ptr(),
            l.len() as libc::c_ulong,
            r.as_ptr(),
            r.len() as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as u64 != want {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Copies local memory (`local` iovecs) into remote process `pid`.
///
/// # Safety
/// The local iovecs must be readable memory of this process.
pub(crate) unsafe fn vm_write(
    pid: u32,
    local: &[(u64, u64)],
    remote: &[(u64, u64)],
) -> io::Result<()> {
    let l = iovecs(local);
    let r = iovecs(remote);
    let want: u64 = local.iter().map(|x| x.1).sum();
    // SAFETY: as for vm_read.
    let n = unsafe {
        libc::process_vm_writev(
            pid as libc::pid_t,
            l.as_ptr(),
            l.len() as libc::c_ulong,
            r.as_ptr(),
            r.len() as libc::c_ulong,
            0,
        )
    };
    if n < 0 {
        return Err(io::Error::last_os_error());
    }
    if n as u64 != want {
        return Err(io::Error::from_raw_os_error(libc::EFAULT));
    }
    Ok(())
}

/// Lets processes of the same user use `process_vm_*` on this one even under
/// Yama's `ptrace_scope = 1` (no-op elsewhere).
pub(crate) fn allow_peers() {
    // SAFETY: prctl with integer arguments has no memory effects.
    let _ = unsafe { libc::prctl(libc::PR_SET_PTRACER, libc::PR_SET_PTRACER_ANY, 0, 0, 0) };
}

/// True when process `pid` exists (or exists but belongs to someone else).
pub(crate) fn process_alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks existence and permission.
    let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
    r == 0 || io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// Unlinks ring segments left in `/dev/shm` by processes that no longer
/// exist (a crashed job never cleans up).
pub(crate) fn sweep_stale() {
    for name in tmpi_base::shm_sweep::sweep_dead_creators("tmpi-soft.") {
        tracing::info!(target: "verbs", segment = %name, "soft: removed stale segment of a dead process");
    }
}
