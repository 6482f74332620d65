//! Reduction algorithms: reduce, allreduce, reduce_scatter(_block), scan,
//! exscan. Each one states how it keeps non-commutative ops in rank order.

use super::{chunk, pof2_floor, Call, Pos};
use crate::schedule::{BufId, Schedule, Slice};
use crate::{CollError, Result};

fn input(c: &Call, s: &mut Schedule) -> BufId {
    c.input(s)
}

/// Linear reduce: the root receives every contribution into its own
/// buffer, then combines them in rank order (correct for any op). The
/// highest rank's contribution is received into the result buffer (the
/// caller's receive buffer for a blocking call), the others are combined
/// into it downwards; the input is only read.
pub fn reduce_linear(c: &Call, pos: Pos) -> Result<Schedule> {
    c.op()?;
    let mut s = c.schedule();
    let n = c.send_len();
    let own = input(c, &mut s);
    if pos.rank != c.root {
        s.send(c.root, s.all(own));
        return Ok(s);
    }
    let p = pos.size;
    if p == 1 {
        s.result = Some(own);
        return Ok(s);
    }
    let last = p - 1;
    let acc = c.output(&mut s, n);
    // One buffer per rank, own data in place; acc = x_{p-1}, then x_i op acc downwards.
    let bufs: Vec<BufId> = (0..p)
        .map(|r| {
            if r == pos.rank {
                own
            } else if r == last {
                acc
            } else {
                s.zeros(n)
            }
        })
        .collect();
    for r in (0..p).filter(|&r| r != pos.rank) {
        s.recv(r, Slice::new(bufs[r as usize], 0, n));
    }
    if pos.rank == last {
        s.copy(s.all(own), s.all(acc));
    }
    for r in (0..last).rev() {
        s.reduce(
            Slice::new(bufs[r as usize], 0, n),
            Slice::new(acc, 0, n),
            true,
        );
    }
    s.result = Some(acc);
    Ok(s)
}

/// Binomial reduce. Commutative ops: a binomial tree on ranks relative to
/// the root (a rank with bit `mask` set sends its partial result to
/// `v - mask` and stops; the others combine what `v + mask` sends).
/// Non-commutative ops: the same tree on absolute ranks rooted at 0, where
/// every partial result covers a contiguous rank range combined in order,
/// then rank 0 forwards to the root.
pub fn reduce_binomial(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = c.schedule();
    let inp = input(c, &mut s);
    let n = c.send_len();
    // The caller's receive buffer at the root of a blocking call, else a
    // scratch buffer allocated only if this rank receives.
    let out = if pos.rank == c.root {
        c.output(&mut s, n)
    } else {
        s.scratch(n)
    };
    let root = if c.commutative() { c.root } else { 0 };
    let (at_tree_root, cur) = reduce_tree_into(&mut s, inp, out, root, pos);
    if root != c.root {
        if at_tree_root {
            s.send(c.root, s.all(cur));
        } else if pos.rank == c.root {
            s.recv(0, s.all(out));
            s.result = Some(out);
            return Ok(s);
        }
    }
    if pos.rank == c.root {
        s.result = Some(cur);
    }
    Ok(s)
}

/// Appends a binomial fan-in towards `root` of this rank's input `inp`;
/// partial results are built in `out` (the first received vector lands
/// there and the input is combined into it, so the input is only read).
/// Returns whether this rank is the tree's root and the buffer holding its
/// partial result (`inp` if it received nothing). With a non-commutative
/// op, `root` must be 0.
fn reduce_tree_into(
    s: &mut Schedule,
    inp: BufId,
    out: BufId,
    root: u32,
    pos: Pos,
) -> (bool, BufId) {
    let p = pos.size;
    let v = pos.vrank(root);
    let mut cur = inp;
    let mut mask = 1;
    while mask < p {
        if v & mask != 0 {
            s.send(pos.real(v - mask, root), s.all(cur));
            s.next_round();
            return (false, cur);
        }
        if v + mask < p {
            // The sender's partial covers ranks [v+mask, ...): right operand.
            if cur == inp {
                s.recv(pos.real(v + mask, root), s.all(out));
                s.reduce(s.all(inp), s.all(out), true);
                cur = out;
            } else {
                s.recv_reduce(pos.real(v + mask, root), s.all(out), false);
            }
            s.next_round();
        }
        mask <<= 1;
    }
    (true, cur)
}

/// Reduce to rank 0 + binomial broadcast (basic's allreduce).
pub fn allreduce_reduce_bcast(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = c.schedule();
    let inp = input(c, &mut s);
    let out = c.output(&mut s, c.send_len());
    let (_, cur) = reduce_tree_into(&mut s, inp, out, 0, pos);
    if pos.rank == 0 && cur != out {
        // Rank 0 received nothing (p = 1): its input is the result.
        s.copy(s.all(inp), s.all(out));
        s.next_round();
    }
    let all = s.all(out);
    super::bcast::binomial_into(&mut s, all, 0, pos);
    s.result = Some(out);
    Ok(s)
}

/// Recursive doubling (with the usual fold for non-powers of two): log2 p
/// exchanges of the whole vector. The partial result of every rank always
/// covers a contiguous rank range and the lower range is the left operand,
/// so non-commutative ops stay in order. Best for small vectors.
///
/// The input is only read: the first exchange (or the fold) receives the
/// partner's vector into the result buffer ([`Call::output`]: the caller's
/// receive buffer for a blocking call) and combines the input into it, so a
/// 2-rank allreduce is one exchange and one reduction, without copying the
/// input or the result.
pub fn allreduce_recursive_doubling(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = c.schedule();
    let inp = input(c, &mut s);
    let n = c.send_len();
    let p = pos.size;
    let r = pos.rank;
    let pof2 = pof2_floor(p);
    if pof2 < 2 {
        s.result = Some(inp);
        return Ok(s);
    }
    let out = c.output(&mut s, n);
    let (ia, oa) = (s.all(inp), s.all(out));
    let rem = p - pof2;
    // Whether this rank's partial result is in `out` yet (else: `inp`).
    let mut in_out = false;
    // Fold: among the first 2*rem ranks, even ones hand their data to r+1.
    let newrank = if r < 2 * rem {
        if r.is_multiple_of(2) {
            s.send(r + 1, ia);
            s.next_round();
            s.recv(r + 1, oa);
            s.result = Some(out);
            return Ok(s);
        }
        // out = x_{r-1} op x_r: the received (lower) vector on the left.
        s.recv(r - 1, oa);
        s.reduce(ia, oa, false);
        s.next_round();
        in_out = true;
        r / 2
    } else {
        r - rem
    };
    let real = |nr: u32| if nr < rem { nr * 2 + 1 } else { nr + rem };
    let mut mask = 1;
    while mask < pof2 {
        let partner = newrank ^ mask;
        if in_out {
            // The partner's vector is combined straight into `out` from the
            // received message: a round applies its receives only once its
            // sends (of `out`) completed, so no temporary is needed.
            s.send(real(partner), oa);
            s.recv_reduce(real(partner), oa, partner < newrank);
        } else {
            // Receive the partner's vector into `out`, combine the input in.
            s.send(real(partner), ia);
            s.recv(real(partner), oa);
            s.reduce(ia, oa, newrank < partner);
            in_out = true;
        }
        s.next_round();
        mask <<= 1;
    }
    if r < 2 * rem {
        s.send(r - 1, oa);
    }
    s.result = Some(out);
    Ok(s)
}

/// Ring (reduce-scatter ring + allgather ring): 2(p-1) steps of n/p bytes;
/// bandwidth-optimal, for large vectors. Commutative ops only (each chunk
/// is combined in a rotated order); callers fall back otherwise.
pub fn allreduce_ring(c: &Call, pos: Pos) -> Result<Schedule> {
    if !c.commutative() {
        return allreduce_recursive_doubling(c, pos);
    }
    let mut s = c.schedule();
    let acc = input(c, &mut s);
    let p = pos.size;
    let r = pos.rank;
    let n = c.send_len();
    let e = c.dtype.size();
    let ch = |i: u32| {
        let (o, l) = chunk(n, e, p, i % p);
        Slice::new(acc, o, l)
    };
    let right = (r + 1) % p;
    let left = (r + p - 1) % p;
    for k in 0..p - 1 {
        s.send(right, ch(r + p - k));
        s.recv_reduce(left, ch(r + 2 * p - k - 1), true);
        s.next_round();
    }
    for k in 0..p - 1 {
        s.send(right, ch(r + 1 + p - k));
        s.recv(left, ch(r + p - k));
        s.next_round();
    }
    s.result = Some(acc);
    Ok(s)
}

/// `parts` element-aligned blocks of an `n`-byte vector of `e`-byte
/// elements ([`chunk`]).
#[derive(Clone, Copy)]
struct Blocks {
    n: usize,
    e: usize,
    parts: u32,
}

impl Blocks {
    /// Blocks `lo..hi` of `b` as one byte range.
    fn span(self, b: BufId, lo: u32, hi: u32) -> Slice {
        let (o, _) = chunk(self.n, self.e, self.parts, lo);
        let (eo, el) = chunk(self.n, self.e, self.parts, hi - 1);
        Slice::new(b, o, eo + el - o)
    }
}

/// Reduce-scatter by recursive halving among `blocks.parts` (a power of
/// two) ranks numbered `me` = 0..parts, `real` mapping them to
/// communicator ranks: each step keeps the half of the window on this
/// rank's side of the partner, reduces the partner's copy of it in and
/// sends the other half. Partial results live in `out`; unless `in_out`
/// (they already do), the first step sends from `inp` and the partner's
/// half lands in `out` before the input's half is combined into it.
/// Returns the window of blocks this rank ends with (block `me` alone),
/// reduced over all ranks. Commutative ops: the operands of a block meet
/// in a rank-dependent order.
fn recursive_halving(
    s: &mut Schedule,
    (inp, out): (BufId, BufId),
    mut in_out: bool,
    me: u32,
    blocks: Blocks,
    real: impl Fn(u32) -> u32,
) -> (u32, u32) {
    let span = |b: BufId, w: (u32, u32)| blocks.span(b, w.0, w.1);
    let (mut lo, mut hi) = (0, blocks.parts);
    let mut mask = blocks.parts / 2;
    while mask > 0 {
        let partner = me ^ mask;
        let mid = (lo + hi) / 2;
        let (keep, give) = if me & mask == 0 {
            ((lo, mid), (mid, hi))
        } else {
            ((mid, hi), (lo, mid))
        };
        if in_out {
            s.send(real(partner), span(out, give));
            s.recv_reduce(real(partner), span(out, keep), partner < me);
        } else {
            s.send(real(partner), span(inp, give));
            s.recv(real(partner), span(out, keep));
            s.reduce(span(inp, keep), span(out, keep), me < partner);
            in_out = true;
        }
        s.next_round();
        (lo, hi) = keep;
        mask >>= 1;
    }
    (lo, hi)
}

/// Rabenseifner: reduce-scatter by recursive halving, then allgather by
/// recursive doubling, on the largest power of two `pof2 <= p` (the first
/// `2 (p - pof2)` ranks fold in pairs first, as in recursive doubling).
/// 2 log2(pof2) rounds moving about 2n bytes per rank in all (ring:
/// 2(p-1) rounds), each block reduced once by its owner, so every rank ends
/// with identical bits. Commutative ops with at least `pof2` elements only;
/// falls back to recursive doubling otherwise.
pub fn allreduce_rabenseifner(c: &Call, pos: Pos) -> Result<Schedule> {
    let p = pos.size;
    let pof2 = pof2_floor(p);
    let e = c.dtype.size();
    let n = c.send_len();
    if !c.commutative() || e == 0 || n / e < pof2 as usize || pof2 < 2 {
        return allreduce_recursive_doubling(c, pos);
    }
    let mut s = c.schedule();
    // The input is only read; partial results live in `out` (the caller's
    // receive buffer for a blocking call), as in recursive doubling.
    let inp = input(c, &mut s);
    let out = c.output(&mut s, n);
    let (ia, oa) = (s.all(inp), s.all(out));
    let r = pos.rank;
    let rem = p - pof2;
    let mut in_out = false;
    let newrank = if r < 2 * rem {
        if r.is_multiple_of(2) {
            s.send(r + 1, ia);
            s.next_round();
            s.recv(r + 1, oa);
            s.result = Some(out);
            return Ok(s);
        }
        s.recv(r - 1, oa);
        s.reduce(ia, oa, false);
        s.next_round();
        in_out = true;
        r / 2
    } else {
        r - rem
    };
    let real = |nr: u32| if nr < rem { nr * 2 + 1 } else { nr + rem };
    let blocks = Blocks { n, e, parts: pof2 };
    let span = |b: BufId, lo: u32, hi: u32| blocks.span(b, lo, hi);
    let (mut lo, mut hi) = recursive_halving(&mut s, (inp, out), in_out, newrank, blocks, real);
    // Recursive doubling allgather: exchange windows with the sibling.
    let mut mask = 1;
    while mask < pof2 {
        let partner = newrank ^ mask;
        let w = hi - lo;
        let theirs = if newrank & mask == 0 {
            (hi, hi + w)
        } else {
            (lo - w, lo)
        };
        s.send(real(partner), span(out, lo, hi));
        s.recv(real(partner), span(out, theirs.0, theirs.1));
        s.next_round();
        lo = lo.min(theirs.0);
        hi = hi.max(theirs.1);
        mask <<= 1;
    }
    if r < 2 * rem {
        s.send(r - 1, oa);
    }
    s.result = Some(out);
    Ok(s)
}

/// Rabenseifner's reduce: reduce-scatter by recursive halving, then a
/// binomial gather of the reduced blocks to the root, on ranks relative
/// to the root (p a power of two). Every rank reduces about n (p-1)/p
/// bytes and the root receives n (p-1)/p, where the binomial tree makes
/// the root (and half the ranks in its first round) reduce whole vectors:
/// the work is spread over all ranks, whichever of them share a core.
/// Commutative ops with at least p elements only; falls back to
/// [`reduce_binomial`] otherwise.
pub fn reduce_rabenseifner(c: &Call, pos: Pos) -> Result<Schedule> {
    let p = pos.size;
    let e = c.dtype.size();
    let n = c.send_len();
    if !c.commutative() || e == 0 || n / e < p as usize || p < 2 || !p.is_power_of_two() {
        return reduce_binomial(c, pos);
    }
    let mut s = c.schedule();
    let inp = input(c, &mut s);
    let v = pos.vrank(c.root);
    // Partial results and the gathered blocks: the caller's receive buffer
    // at the root of a blocking call, else scratch.
    let out = if pos.rank == c.root {
        c.output(&mut s, n)
    } else {
        s.scratch(n)
    };
    let blocks = Blocks { n, e, parts: p };
    let span = |b: BufId, lo: u32, hi: u32| blocks.span(b, lo, hi);
    let real = |w: u32| pos.real(w, c.root);
    // This rank ends with block v reduced over all.
    let (lo, mut hi) = recursive_halving(&mut s, (inp, out), false, v, blocks, real);
    // Binomial gather of the windows towards v = 0.
    let mut mask = 1;
    while mask < p {
        if v & mask != 0 {
            s.send(real(v - mask), span(out, lo, hi));
            s.next_round();
            break;
        }
        let w = hi - lo;
        s.recv(real(v + mask), span(out, hi, hi + w));
        s.next_round();
        hi += w;
        mask <<= 1;
    }
    if pos.rank == c.root {
        s.result = Some(out);
    }
    Ok(s)
}

fn rs_offsets(c: &Call, p: u32) -> Result<Vec<usize>> {
    if c.counts.len() != p as usize {
        return Err(CollError::Intern("reduce_scatter counts".into()));
    }
    let mut off = Vec::with_capacity(p as usize);
    let mut t = 0;
    for &n in &c.counts {
        off.push(t);
        t += n;
    }
    if t != c.send_len() {
        return Err(CollError::Count(format!(
            "reduce_scatter: counts add up to {t} bytes, the send buffer has {}",
            c.send_len()
        )));
    }
    Ok(off)
}

/// Reduce to rank 0 (binomial, order-preserving) followed by a linear
/// scatterv of the blocks (basic's reduce_scatter).
pub fn reduce_scatter_reduce_scatterv(c: &Call, pos: Pos) -> Result<Schedule> {
    let off = rs_offsets(c, pos.size)?;
    let mut s = c.schedule();
    let inp = input(c, &mut s);
    let tmp = s.scratch(c.send_len());
    let (_, acc) = reduce_tree_into(&mut s, inp, tmp, 0, pos);
    let me = pos.rank as usize;
    let out = s.zeros(c.counts[me]);
    if pos.rank == 0 {
        for (r, (&o, &n)) in off.iter().zip(&c.counts).enumerate().skip(1) {
            s.send(r as u32, Slice::new(acc, o, n));
        }
        s.copy(Slice::new(acc, 0, c.counts[0]), s.all(out));
    } else {
        s.recv(0, s.all(out));
    }
    s.result = Some(out);
    Ok(s)
}

/// Ring reduce-scatter: p-1 steps, each passing one partially reduced block
/// to the right neighbour; rank r ends with block r. Commutative ops only.
pub fn reduce_scatter_ring(c: &Call, pos: Pos) -> Result<Schedule> {
    if !c.commutative() {
        return reduce_scatter_reduce_scatterv(c, pos);
    }
    let off = rs_offsets(c, pos.size)?;
    let mut s = c.schedule();
    let acc = input(c, &mut s);
    let p = pos.size;
    let r = pos.rank;
    let blk = |i: u32| {
        let i = (i % p) as usize;
        Slice::new(acc, off[i], c.counts[i])
    };
    for k in 0..p - 1 {
        s.send((r + 1) % p, blk(r + 2 * p - k - 1));
        s.recv_reduce((r + p - 1) % p, blk(r + 2 * p - k - 2), true);
        s.next_round();
    }
    let out = s.zeros(c.counts[r as usize]);
    s.copy(blk(r), s.all(out));
    s.result = Some(out);
    Ok(s)
}

/// Linear scan (chain): rank r receives the prefix of ranks 0..r-1 from
/// r-1, combines it on the left of its own data, passes the result on.
/// `exclusive` gives exscan (rank 0 has no result).
pub fn scan_linear(c: &Call, pos: Pos, exclusive: bool) -> Result<Schedule> {
    let mut s = c.schedule();
    let own = input(c, &mut s);
    let n = c.send_len();
    let r = pos.rank;
    if r == 0 {
        if pos.size > 1 {
            s.send(1, s.all(own));
        }
        if !exclusive {
            s.result = Some(own);
        }
        return Ok(s);
    }
    let prefix = s.zeros(n);
    s.recv(r - 1, s.all(prefix));
    s.next_round();
    // own := prefix op own
    s.reduce(s.all(prefix), s.all(own), true);
    if r + 1 < pos.size {
        s.send(r + 1, s.all(own));
    }
    s.result = Some(if exclusive { prefix } else { own });
    Ok(s)
}

/// Recursive doubling scan (Hillis-Steele): in step k rank r sends its
/// partial (ranks r-2^k+1..r) to r+2^k and combines the partial of
/// r-2^k (lower ranks, left operand). ceil(log2 p) steps; any op.
pub fn scan_recursive_doubling(c: &Call, pos: Pos, exclusive: bool) -> Result<Schedule> {
    let mut s = c.schedule();
    let n = c.send_len();
    let partial = input(c, &mut s);
    let tmp = s.zeros(n);
    let ex = s.zeros(n);
    let r = pos.rank;
    let p = pos.size;
    let mut have_ex = false;
    let mut k = 1;
    while k < p {
        if r + k < p {
            s.send(r + k, s.all(partial));
        }
        if r >= k {
            s.recv(r - k, s.all(tmp));
            s.next_round();
            s.reduce(s.all(tmp), s.all(partial), true);
            if exclusive {
                if have_ex {
                    s.reduce(s.all(tmp), s.all(ex), true);
                } else {
                    s.copy(s.all(tmp), s.all(ex));
                    have_ex = true;
                }
            }
        }
        s.next_round();
        k <<= 1;
    }
    s.result = match (exclusive, r) {
        (false, _) => Some(partial),
        (true, 0) => None,
        (true, _) => Some(ex),
    };
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::super::{lowbit, pof2_floor};

    #[test]
    fn lowbit_and_pof2() {
        assert_eq!(lowbit(0), None);
        assert_eq!(lowbit(12), Some(4));
        assert_eq!(pof2_floor(7), 4);
        assert_eq!(pof2_floor(8), 8);
        assert_eq!(pof2_floor(1), 1);
    }
}
