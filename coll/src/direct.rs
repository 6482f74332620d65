//! Direct algorithms of small blocking collectives (issue 8): barrier,
//! bcast, reduce, allreduce, allgather (per block; the whole result when p
//! is not a power of two) and alltoall (per block; at most 9 ranks above
//! [`SMALL_SEND`] bytes) of at most [`DIRECT_CAP`] bytes, and bcast and
//! alltoall (not in place) of any size where tuned decides binomial /
//! linear, and allgather of any size at 2 ranks (they need no stack buffer:
//! the messages land in the caller's buffer), run straight on the transport's
//! request-less calls ([`P2p::send_small`], eager, or
//! [`P2p::send_blocking`] above [`SMALL_SEND`] bytes, and
//! [`P2p::recv_small`], a blocking receive into caller or stack memory),
//! without building a schedule: no heap allocation, no map entry per call
//! (transport requests only for the sends above [`SMALL_SEND`] bytes of
//! allreduce's and allgather's exchanges that do not go eager at once,
//! and of alltoall).
//!
//! Each function mirrors, message for message and reduction for
//! reduction, the schedule tuned's decision table picks for the same call
//! (`algo::barrier::dissemination`, `algo::bcast::binomial`,
//! `algo::reduce::reduce_linear` at p <= 2 and `reduce_binomial` above,
//! `algo::reduce::allreduce_recursive_doubling`,
//! `algo::gather::allgather_recursive_doubling` / `allgather_bruck`,
//! `algo::alltoall::linear`), so results are
//! bit-identical to the schedule path for every op and datatype, and
//! non-commutative ops combine in the same (rank) order. [`CollComm`] decides
//! when to take this path (`CollComm::direct`): the winning module offers it
//! ([`crate::framework::CollModule::direct_max`]), the transport has the
//! request-less calls, and no non-blocking collective is outstanding on
//! the context (a blocking receive would stop progressing it).
//!
//! No deadlock is added: a send of at most [`SMALL_SEND`] bytes is eager
//! (the pml always sends those eagerly) and returns without the receiver,
//! and each rank sends everything a round needs before it blocks in that
//! round's receive, as the schedule's small rounds do. A larger send may
//! wait for its receiver: the trees (bcast, reduce, the allreduce fold)
//! only send to a rank that is waiting for, or about to post, that very
//! receive, and the allreduce's exchanges send with [`P2p::send_eager`]
//! (the pml's eager fast path or nothing: never waits for the peer) and
//! otherwise start their send as a request ([`P2p::isend_raw`]) and wait
//! for it after the blocking receive. A bcast
//! above [`DIRECT_CAP`] bytes with more than one child starts all the
//! children's sends as requests and then waits for them (one after the
//! other, each would wait for its receiver's rendezvous in turn).
//!
//! [`CollComm`]: crate::CollComm

use std::cell::Cell;
use std::mem::MaybeUninit;

use crate::algo::{lowbit, pof2_floor, Pos};
use crate::datatype::Datatype;
use crate::op::Op;
use crate::p2p::{Endpoint, P2p, SMALL_SEND};
use crate::{CollError, Result};

/// Largest vector (bytes) a direct algorithm takes (the size of its stack
/// buffers); `coll_tuned_direct_max` is capped here.
pub const DIRECT_CAP: usize = 1024;

/// A stack buffer for one message, aligned for any element type. Not
/// initialised as a whole: [`Scratch::get`] zeroes only the bytes it hands
/// out (zeroing 1 KiB per call showed in the 8-byte latency).
#[repr(C, align(16))]
pub(crate) struct Scratch([MaybeUninit<u8>; DIRECT_CAP]);

impl Scratch {
    pub(crate) fn new() -> Self {
        Scratch([MaybeUninit::uninit(); DIRECT_CAP])
    }

    /// The first `n` bytes (at most [`DIRECT_CAP`]), zeroed.
    pub(crate) fn get(&mut self, n: usize) -> &mut [u8] {
        let part = &mut self.0[..n];
        part.fill(MaybeUninit::new(0));
        // SAFETY: every byte of `part` was initialised just above, and
        // `MaybeUninit<u8>` has the layout of `u8`; the slice borrows
        // `self` mutably for its lifetime.
        unsafe { std::slice::from_raw_parts_mut(part.as_mut_ptr().cast::<u8>(), n) }
    }
}

/// Scratch bytes above [`DIRECT_CAP`]: a pooled buffer
/// ([`crate::pool::filled`]), given back on drop. Separate from [`Scratch`]
/// so that the small calls pay nothing for it (a struct holding both, made
/// per call, cost 8 B and 1 KiB reduces ~17% at 2 ranks).
#[derive(Default)]
pub(crate) struct Heap(Vec<u8>);

impl Heap {
    /// `n` bytes of unspecified content (every caller writes them before
    /// reading).
    pub(crate) fn get(&mut self, n: usize) -> &mut [u8] {
        self.0 = crate::pool::filled(n);
        &mut self.0
    }
}

impl Drop for Heap {
    fn drop(&mut self) {
        if self.0.capacity() > 0 {
            crate::pool::give(std::mem::take(&mut self.0));
        }
    }
}

/// `n` bytes from `stack` (zeroed) up to [`DIRECT_CAP`], else from `heap`.
pub(crate) fn tmp_bytes<'a>(stack: &'a mut Scratch, heap: &'a mut Heap, n: usize) -> &'a mut [u8] {
    if n <= DIRECT_CAP {
        stack.get(n)
    } else {
        heap.get(n)
    }
}

/// One call's transport context: the communicator's endpoint and view map,
/// this rank's position and the call's tag.
pub(crate) struct Direct<'a> {
    pub(crate) p2p: &'a dyn P2p,
    pub(crate) ep: &'a Endpoint,
    pub(crate) map: Option<&'a [u32]>,
    pub(crate) pos: Pos,
    pub(crate) tag: i32,
    /// The first message of another length than expected, kept for the end
    /// of the call as on the schedule path ([`Direct::finish`]).
    pub(crate) mismatch: Cell<Option<CollError>>,
    /// Whether `mismatch` holds one (read on every send).
    pub(crate) mismatched: Cell<bool>,
}

impl Direct<'_> {
    fn wire(&self, peer: u32) -> Result<u32> {
        match self.map {
            None => Ok(peer),
            Some(m) => m
                .get(peer as usize)
                .copied()
                .ok_or_else(|| CollError::Intern(format!("peer {peer} outside the view"))),
        }
    }

    /// Blocking send: eager up to [`SMALL_SEND`] bytes, else it may wait
    /// for the receiver.
    fn send(&self, peer: u32, data: &[u8]) -> Result<()> {
        let wire = self.wire(peer)?;
        // After a length mismatch: an empty message (as on the schedule
        // path, `Exec::tolerate`).
        let data = if self.mismatched() { &[] } else { data };
        let sent = if data.len() <= SMALL_SEND {
            self.p2p.send_small(self.ep, wire, self.tag, data)?
        } else {
            self.p2p.send_blocking(self.ep, wire, self.tag, data)?
        };
        if !sent {
            return Err(CollError::Intern(
                "transport with recv_small refused a blocking send".into(),
            ));
        }
        Ok(())
    }

    /// Sends `data` to `peer` and receives `buf.len()` bytes from it, where
    /// `peer` does the same: above [`SMALL_SEND`] bytes the send is a
    /// request started before the blocking receive and waited for after
    /// it (also after an error of the receive: `data` is borrowed).
    fn exchange(&self, peer: u32, data: &[u8], buf: &mut [u8]) -> Result<()> {
        self.sendrecv(peer, data, peer, buf)
    }

    /// Sends `data` to `dest` and receives `buf.len()` bytes from `source`
    /// (each of them doing the same with its own partners): as
    /// [`Direct::exchange`].
    fn sendrecv(&self, dest: u32, data: &[u8], source: u32, buf: &mut [u8]) -> Result<()> {
        if data.len() <= SMALL_SEND || self.mismatched() {
            self.send(dest, data)?;
            return self.recv(source, buf);
        }
        let wire = self.wire(dest)?;
        // Eager now (within the eager limit and the peer's credit): no
        // request; it never waits for the peer, which sends first too.
        if self.p2p.send_eager(self.ep, wire, self.tag, data)? {
            return self.recv(source, buf);
        }
        // SAFETY: `data` is borrowed (valid, unmodified) for this whole
        // call, and the request is waited for below before returning, on
        // every path after it started.
        let h = unsafe {
            self.p2p
                .isend_raw(self.ep, wire, self.tag, data.as_ptr(), data.len())
        }?;
        let r = self.recv(source, buf);
        let w = self.wait(h);
        r.and(w)
    }

    /// Waits for a transport request (consumed also when it fails).
    fn wait(&self, h: crate::p2p::P2pHandle) -> Result<()> {
        loop {
            if self.p2p.test(h)?.is_some() {
                return Ok(());
            }
            if !self.p2p.test_progresses() && self.p2p.progress() {
                continue;
            }
            self.p2p.idle();
        }
    }

    /// Receives `buf.len()` bytes from `peer`. Another length is
    /// `MPI_ERR_TRUNCATE`, as on the schedule path, returned by
    /// [`Direct::finish`] once the algorithm is through: the bytes that fit
    /// are in `buf` and the algorithm goes on, so that its sends reach the
    /// ranks waiting for them.
    fn recv(&self, peer: u32, buf: &mut [u8]) -> Result<()> {
        let expected = buf.len();
        let got = match self
            .p2p
            .recv_small(self.ep, self.wire(peer)?, self.tag, buf)
        {
            Ok(got) => {
                got.ok_or_else(|| CollError::Intern("transport without recv_small".into()))?
            }
            Err(e) if crate::schedule::is_length_mismatch(&e) => return self.keep(e),
            Err(e) => return Err(e),
        };
        if got != expected {
            return self.keep(CollError::Truncate {
                peer,
                got,
                expected,
            });
        }
        Ok(())
    }

    fn mismatched(&self) -> bool {
        self.mismatched.get()
    }

    fn keep(&self, e: CollError) -> Result<()> {
        tracing::debug!(target: "coll_base", "finishing the collective after: {e}");
        self.mismatched.set(true);
        let first = self.mismatch.take().unwrap_or(e);
        self.mismatch.set(Some(first));
        Ok(())
    }

    /// The algorithm's result `r`, or the first length mismatch it went
    /// past.
    pub(crate) fn finish(&self, r: Result<()>) -> Result<()> {
        r?;
        self.mismatch.take().map_or(Ok(()), Err)
    }
}

/// `out = incoming op out` when `incoming_left`, else `out = out op incoming`.
fn combine(
    op: &Op,
    dtype: Datatype,
    incoming: &[u8],
    out: &mut [u8],
    incoming_left: bool,
) -> Result<()> {
    if incoming_left {
        op.apply(dtype, incoming, out)
    } else {
        op.apply_rev(dtype, incoming, out)
    }
}

/// Dissemination barrier (`algo::barrier::dissemination`): in round k rank
/// r signals `r + 2^k` and waits for `r - 2^k`.
pub(crate) fn barrier(d: &Direct<'_>) -> Result<()> {
    let (p, r) = (d.pos.size, d.pos.rank);
    let mut k = 1;
    while k < p {
        d.send((r + k) % p, &[])?;
        d.recv((r + p - k) % p, &mut [])?;
        k <<= 1;
    }
    Ok(())
}

/// Binomial broadcast of `buf` from `root` (`algo::bcast::binomial`): the
/// message lands in `buf`; the root returns once its eager sends are out
/// (a rendezvous-sized message: once its children took it).
pub(crate) fn bcast(d: &Direct<'_>, buf: &mut [u8], root: u32) -> Result<()> {
    let pos = d.pos;
    let p = pos.size;
    let v = pos.vrank(root);
    let top = lowbit(v).unwrap_or(p.next_power_of_two());
    if v != 0 {
        d.recv(pos.real(v - top, root), buf)?;
    }
    // Children, largest subtree first (at most 32: p < 2^32).
    let mut kids = [0u32; 32];
    let mut nk = 0;
    let mut mask = top >> 1;
    while mask > 0 {
        if v + mask < p {
            kids[nk] = pos.real(v + mask, root);
            nk += 1;
        }
        mask >>= 1;
    }
    let kids = &kids[..nk];
    if buf.len() <= DIRECT_CAP || kids.len() <= 1 {
        for &k in kids {
            d.send(k, buf)?;
        }
        return Ok(());
    }
    // A large message goes rendezvous (a blocking send waits for its
    // receiver): the children's sends start together, as the schedule's
    // one round of them, instead of each waiting for the one before (4 and
    // 8 ranks on 2 cores: 64 KiB 1.3-1.9x slower one after the other).
    let mut pending = [None; 32];
    let mut res = Ok(());
    for (i, &k) in kids.iter().enumerate() {
        // SAFETY: `buf` is borrowed for this whole call and every request
        // started here is waited for below before returning.
        let started = d
            .wire(k)
            .and_then(|w| unsafe { d.p2p.isend_raw(d.ep, w, d.tag, buf.as_ptr(), buf.len()) });
        match started {
            Ok(h) => pending[i] = Some(h),
            Err(e) => {
                res = Err(e);
                break;
            }
        }
    }
    for h in pending.into_iter().flatten() {
        let w = d.wait(h);
        res = res.and(w);
    }
    res
}

/// Reduce of `inp` to `root`, the result in `out` (the root's receive
/// buffer, `inp.len()` bytes; `None` elsewhere). At p <= 2 tuned's linear
/// order (`x0 op x1`), above its binomial tree: relative to the root for a
/// commutative op, else on absolute ranks rooted at 0 and forwarded.
pub(crate) fn reduce(
    d: &Direct<'_>,
    inp: &[u8],
    out: Option<&mut [u8]>,
    dtype: Datatype,
    op: &Op,
    root: u32,
) -> Result<()> {
    let pos = d.pos;
    let n = inp.len();
    let is_root = pos.rank == root;
    if pos.size <= 2 && !is_root {
        // `reduce_linear`: the non-root sends.
        return d.send(root, inp);
    }
    let mut scratch = Scratch::new();
    let out: &mut [u8] = match out {
        Some(o) if is_root => o,
        _ => scratch.get(n),
    };
    if out.len() != n {
        return Err(CollError::Intern(format!(
            "reduce into {} bytes from {n}",
            out.len()
        )));
    }
    if pos.size <= 2 {
        // `reduce_linear`: the root combines x0 op x1.
        let other = 1 - pos.rank;
        if pos.rank == 0 {
            d.recv(other, out)?;
            return op.apply(dtype, inp, out);
        }
        let (mut stack, mut heap) = (Scratch::new(), Heap::default());
        let tmp = tmp_bytes(&mut stack, &mut heap, n);
        d.recv(other, tmp)?;
        out.copy_from_slice(inp);
        return op.apply(dtype, tmp, out);
    }
    // `reduce_binomial` / `reduce_tree_into`.
    let tree_root = if op.is_commutative() { root } else { 0 };
    let p = pos.size;
    let v = pos.vrank(tree_root);
    let mut in_out = false;
    let mut mask = 1;
    let mut at_tree_root = true;
    while mask < p {
        if v & mask != 0 {
            let cur: &[u8] = if in_out { out } else { inp };
            d.send(pos.real(v - mask, tree_root), cur)?;
            at_tree_root = false;
            break;
        }
        if v + mask < p {
            let from = pos.real(v + mask, tree_root);
            if in_out {
                let mut tmp = Scratch::new();
                let tmp = tmp.get(n);
                d.recv(from, tmp)?;
                combine(op, dtype, tmp, out, false)?;
            } else {
                d.recv(from, out)?;
                op.apply(dtype, inp, out)?;
                in_out = true;
            }
        }
        mask <<= 1;
    }
    if tree_root != root {
        if at_tree_root {
            let cur: &[u8] = if in_out { out } else { inp };
            return d.send(root, cur);
        } else if is_root {
            return d.recv(tree_root, out);
        }
        return Ok(());
    }
    if is_root && !in_out {
        // Unreachable with p > 2 (the tree root receives), kept exact.
        out.copy_from_slice(inp);
    }
    Ok(())
}

/// Recursive-doubling allreduce of `inp` into `out` (same length), with
/// the fold of the first `2 (p - pof2)` ranks
/// (`algo::reduce::allreduce_recursive_doubling`).
pub(crate) fn allreduce(
    d: &Direct<'_>,
    inp: &[u8],
    out: &mut [u8],
    dtype: Datatype,
    op: &Op,
) -> Result<()> {
    let pos = d.pos;
    let n = inp.len();
    if out.len() != n {
        return Err(CollError::Intern(format!(
            "allreduce into {} bytes from {n}",
            out.len()
        )));
    }
    let (p, r) = (pos.size, pos.rank);
    let pof2 = pof2_floor(p);
    if pof2 < 2 {
        out.copy_from_slice(inp);
        return Ok(());
    }
    let rem = p - pof2;
    let mut in_out = false;
    let newrank = if r < 2 * rem {
        if r % 2 == 0 {
            d.send(r + 1, inp)?;
            return d.recv(r + 1, out);
        }
        // out = x_{r-1} op x_r.
        d.recv(r - 1, out)?;
        op.apply_rev(dtype, inp, out)?;
        in_out = true;
        r / 2
    } else {
        r - rem
    };
    let real = |nr: u32| if nr < rem { nr * 2 + 1 } else { nr + rem };
    let mut tmp = Scratch::new();
    let tmp = tmp.get(n);
    let mut mask = 1;
    while mask < pof2 {
        let partner = newrank ^ mask;
        let peer = real(partner);
        if in_out {
            d.exchange(peer, out, tmp)?;
            combine(op, dtype, tmp, out, partner < newrank)?;
        } else {
            d.exchange(peer, inp, out)?;
            // `reduce(inp, out, src_left = newrank < partner)`.
            combine(op, dtype, inp, out, newrank < partner)?;
            in_out = true;
        }
        mask <<= 1;
    }
    if r < 2 * rem {
        d.send(r - 1, out)?;
    }
    Ok(())
}

/// Allgather of `own` (one block) into `out` (p blocks): recursive
/// doubling when p is a power of two
/// (`algo::gather::allgather_recursive_doubling`), else Bruck
/// (`algo::gather::allgather_bruck`: blocks in rotated order in a stack
/// buffer, rotated into `out` at the end).
pub(crate) fn allgather(d: &Direct<'_>, own: &[u8], out: &mut [u8]) -> Result<()> {
    let (p, r) = (d.pos.size, d.pos.rank);
    let b = own.len();
    if out.len() != b * p as usize {
        return Err(CollError::Intern(format!(
            "allgather of {b}-byte blocks into {} bytes",
            out.len()
        )));
    }
    if p.is_power_of_two() {
        let mut mask = 1;
        while mask < p {
            let partner = r ^ mask;
            let mine = (r & !(mask - 1)) as usize * b;
            let theirs = (partner & !(mask - 1)) as usize * b;
            let len = mask as usize * b;
            if mask == 1 {
                // The own block from the input (see `allgather_ring`),
                // copied into `out` after this first exchange, which does
                // not wait for the copy (the next step sends it).
                d.exchange(partner, own, &mut out[theirs..theirs + len])?;
                out[r as usize * b..(r as usize + 1) * b].copy_from_slice(own);
            } else if mine < theirs {
                let (lo, hi) = out.split_at_mut(theirs);
                d.exchange(partner, &lo[mine..mine + len], &mut hi[..len])?;
            } else {
                let (lo, hi) = out.split_at_mut(mine);
                d.exchange(partner, &hi[..len], &mut lo[theirs..theirs + len])?;
            }
            mask <<= 1;
        }
        return Ok(());
    }
    let mut scratch = Scratch::new();
    let tmp = scratch.get(out.len());
    tmp[..b].copy_from_slice(own);
    let mut k = 1;
    while k < p {
        let n = k.min(p - k) as usize;
        let (held, rest) = tmp.split_at_mut(k as usize * b);
        // The first step's one block from the input (as the schedule).
        let src = if k == 1 { own } else { &held[..n * b] };
        d.sendrecv((r + p - k) % p, src, (r + k) % p, &mut rest[..n * b])?;
        k <<= 1;
    }
    for j in 0..p {
        let src = ((r + j) % p) as usize;
        out[src * b..(src + 1) * b].copy_from_slice(&tmp[j as usize * b..(j as usize + 1) * b]);
    }
    Ok(())
}

/// Ring allgather into `out` (p blocks) of `own` (one block; `None`: in
/// place, this rank's block is already in `out`)
/// (`algo::gather::allgather_ring`, tuned's choice above
/// [`ALLGATHER_RING_ABOVE`] bytes): in step k rank r sends block r - k to
/// r + 1 and receives block r - k - 1 from r - 1, in place in `out`.
///
/// [`ALLGATHER_RING_ABOVE`]: crate::component::tuned::ALLGATHER_RING_ABOVE
pub(crate) fn allgather_ring(d: &Direct<'_>, own: Option<&[u8]>, out: &mut [u8]) -> Result<()> {
    let (p, r) = (d.pos.size as usize, d.pos.rank as usize);
    let b = out.len() / p;
    if b * p != out.len() || own.is_some_and(|o| o.len() != b) {
        return Err(CollError::Intern(format!(
            "ring allgather into {} bytes at {p} ranks",
            out.len()
        )));
    }
    let (right, left) = (((r + 1) % p) as u32, ((r + p - 1) % p) as u32);
    for k in 0..p - 1 {
        // Blocks `si` (sent, r - k) and `ri` (received, r - k - 1) differ.
        let si = (r + p - k) % p;
        let ri = (r + 2 * p - k - 1) % p;
        if let (0, Some(own)) = (k, own) {
            // The first step sends the own block from the input, as the
            // schedule does: sending the copy just written into `out` was
            // 1.8-5x slower at 2 ranks (the peer's single-copy read pulls
            // the lines this core has just dirtied; Open MPI alike).
            d.sendrecv(right, own, left, &mut out[ri * b..(ri + 1) * b])?;
        } else if si < ri {
            let (lo, hi) = out.split_at_mut(ri * b);
            d.sendrecv(right, &lo[si * b..(si + 1) * b], left, &mut hi[..b])?;
        } else {
            let (lo, hi) = out.split_at_mut(si * b);
            d.sendrecv(right, &hi[..b], left, &mut lo[ri * b..(ri + 1) * b])?;
        }
    }
    // The own block is sent from the input only (step 0), so it is copied
    // last, after the exchanges that wait for the neighbours.
    if let Some(own) = own {
        out[r * b..(r + 1) * b].copy_from_slice(own);
    }
    Ok(())
}

/// Most sends a direct alltoall keeps outstanding (blocks above
/// [`SMALL_SEND`] bytes: one request per peer, held on the stack).
pub const ALLTOALL_MAX_PENDING: usize = 8;

/// Alltoall of `data` (p blocks, block i for rank i) into `out`
/// (`algo::alltoall::linear`): every block is sent, starting with the right
/// neighbour, then each incoming block is received in place. Blocks of at
/// most [`SMALL_SEND`] bytes go out eagerly; larger ones as requests
/// (at most [`ALLTOALL_MAX_PENDING`], the caller checks) waited for after
/// the receives, also after an error (they read the caller's memory).
pub(crate) fn alltoall(d: &Direct<'_>, data: &[u8], out: &mut [u8]) -> Result<()> {
    let (p, r) = (d.pos.size as usize, d.pos.rank as usize);
    let b = out.len() / p;
    if data.len() != out.len()
        || b * p != out.len()
        || (b > SMALL_SEND && p - 1 > ALLTOALL_MAX_PENDING)
    {
        return Err(CollError::Intern(format!(
            "direct alltoall of {} bytes into {}",
            data.len(),
            out.len()
        )));
    }
    let mut pending = [None; ALLTOALL_MAX_PENDING];
    let mut res = Ok(());
    for k in 1..p {
        let to = (r + k) % p;
        let block = &data[to * b..(to + 1) * b];
        if b <= SMALL_SEND {
            res = d.send(to as u32, block);
        } else {
            // SAFETY: `data` is borrowed for this whole call and every
            // request started here is waited for below before returning.
            let started = d.wire(to as u32).and_then(|w| unsafe {
                d.p2p.isend_raw(d.ep, w, d.tag, block.as_ptr(), block.len())
            });
            res = started.map(|h| pending[k - 1] = Some(h));
        }
        if res.is_err() {
            break;
        }
    }
    if res.is_ok() {
        for from in (0..p).filter(|&f| f != r) {
            res = d.recv(from as u32, &mut out[from * b..(from + 1) * b]);
            if res.is_err() {
                break;
            }
        }
    }
    for h in pending.into_iter().flatten() {
        let w = d.wait(h);
        res = res.and(w);
    }
    res?;
    out[r * b..(r + 1) * b].copy_from_slice(&data[r * b..(r + 1) * b]);
    Ok(())
}
