//! Broadcast algorithms. The schedule's result buffer starts as the root's
//! data (zeros of the same length elsewhere).

use super::{chunk, lowbit, Call, Pos};
use crate::schedule::{BufId, Schedule, Slice};
use crate::{CollError, Result};

fn setup(c: &Call, pos: Pos) -> Result<(Schedule, BufId)> {
    let mut s = Schedule::new();
    let b = if pos.rank == c.root {
        if c.send_len() != c.block {
            return Err(CollError::Intern("bcast root data length".into()));
        }
        c.input(&mut s)
    } else {
        // Every bcast algorithm writes the whole buffer at a non-root
        // (straight into the caller's buffer for a blocking call).
        c.output(&mut s, c.block)
    };
    s.result = Some(b);
    Ok((s, b))
}

/// Linear: the root sends the whole buffer to every rank.
pub fn linear(c: &Call, pos: Pos) -> Result<Schedule> {
    let (mut s, b) = setup(c, pos)?;
    let all = s.all(b);
    if pos.rank == c.root {
        for r in (0..pos.size).filter(|&r| r != c.root) {
            s.send(r, all);
        }
    } else {
        s.recv(c.root, all);
    }
    Ok(s)
}

/// Binomial tree rooted at `root` (relative ranks): receive from the
/// parent `v - lowbit(v)`, then send to children `v + 2^k`, largest subtree
/// first. ceil(log2 p) steps of the whole message.
pub fn binomial(c: &Call, pos: Pos) -> Result<Schedule> {
    let (mut s, b) = setup(c, pos)?;
    let all = s.all(b);
    binomial_into(&mut s, all, c.root, pos);
    Ok(s)
}

/// Appends a binomial broadcast of `buf` from `root` to `s`.
pub(crate) fn binomial_into(s: &mut Schedule, buf: Slice, root: u32, pos: Pos) {
    let p = pos.size;
    let v = pos.vrank(root);
    let top = lowbit(v).unwrap_or(p.next_power_of_two());
    if v != 0 {
        s.recv(pos.real(v - top, root), buf);
        s.next_round();
    }
    let mut mask = top >> 1;
    while mask > 0 {
        if v + mask < p {
            s.send(pos.real(v + mask, root), buf);
        }
        mask >>= 1;
    }
    s.next_round();
}

/// Scatter + ring allgather (van de Geijn): the message is cut into p
/// chunks scattered along a binomial tree, then a ring allgather completes
/// every rank. About 2 n bytes per rank instead of n log2 p: for large
/// messages.
pub fn scatter_allgather(c: &Call, pos: Pos) -> Result<Schedule> {
    let (mut s, b) = setup(c, pos)?;
    let p = pos.size;
    let n = c.block;
    let v = pos.vrank(c.root);
    // Chunk j (relative rank j) covers chunk(n, 1, p, j); a subtree [v, v+k)
    // covers a contiguous byte range.
    let span = |from: u32, k: u32| -> Slice {
        let last = (from + k).min(p);
        let (o, _) = chunk(n, 1, p, from);
        let (eo, el) = chunk(n, 1, p, last - 1);
        Slice::new(b, o, eo + el - o)
    };
    let top = lowbit(v).unwrap_or(p.next_power_of_two());
    if v != 0 {
        s.recv(pos.real(v - top, c.root), span(v, top));
        s.next_round();
    }
    let mut mask = top >> 1;
    while mask > 0 {
        if v + mask < p {
            s.send(pos.real(v + mask, c.root), span(v + mask, mask));
        }
        mask >>= 1;
    }
    s.next_round();
    // Ring allgather over relative ranks: step k sends chunk v-k to v+1.
    let right = pos.real((v + 1) % p, c.root);
    let left = pos.real((v + p - 1) % p, c.root);
    for k in 0..p - 1 {
        let sc = (v + p - k) % p;
        let rc = (v + 2 * p - k - 1) % p;
        let (so, sl) = chunk(n, 1, p, sc);
        let (ro, rl) = chunk(n, 1, p, rc);
        s.send(right, Slice::new(b, so, sl));
        s.recv(left, Slice::new(b, ro, rl));
        s.next_round();
    }
    Ok(s)
}

/// Pipelined chain: the root sends segments of `seg` bytes down the chain
/// root -> root+1 -> ...; each rank forwards segment i while receiving
/// segment i+1. Latency (p-1) + n/seg segment times.
pub fn chain(c: &Call, pos: Pos, seg: usize) -> Result<Schedule> {
    let (mut s, b) = setup(c, pos)?;
    let p = pos.size;
    let n = c.block;
    let v = pos.vrank(c.root);
    let seg = seg.max(1);
    let nseg = n.div_ceil(seg).max(1);
    let piece = |i: usize| Slice::new(b, i * seg, seg.min(n - (i * seg).min(n)));
    let next = (v + 1 < p).then(|| pos.real(v + 1, c.root));
    let prev = (v > 0).then(|| pos.real(v - 1, c.root));
    // Round i: receive segment i, send segment i-1.
    for i in 0..=nseg {
        if let (Some(pr), true) = (prev, i < nseg) {
            s.recv(pr, piece(i));
        }
        if let (Some(nx), true) = (next, i > 0 || prev.is_none()) {
            let j = if prev.is_none() { i } else { i - 1 };
            if j < nseg {
                s.send(nx, piece(j));
            }
        }
        s.next_round();
    }
    Ok(s)
}
