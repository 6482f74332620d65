//! Gather, scatter and allgather algorithms (and their v variants).

use super::{lowbit, Call, Pos};
use crate::schedule::{Schedule, Slice};
use crate::{CollError, Result};

fn check_v(c: &Call, p: u32, send_side: bool) -> Result<()> {
    let (n, d) = if send_side {
        (&c.scounts, &c.sdispls)
    } else {
        (&c.counts, &c.displs)
    };
    if n.len() != p as usize || d.len() != p as usize {
        return Err(CollError::Intern(format!(
            "{}: counts/displacements per rank",
            c.kind
        )));
    }
    Ok(())
}

/// Linear gather: every rank sends its block to the root, which receives
/// all of them at once.
pub fn gather_linear(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let own = c.input(&mut s);
    let b = c.block;
    if pos.rank != c.root {
        s.send(c.root, s.all(own));
        return Ok(s);
    }
    let out = c.output(&mut s, b * pos.size as usize);
    for r in 0..pos.size {
        let dst = Slice::new(out, r as usize * b, b);
        if r == pos.rank {
            s.copy(s.all(own), dst);
        } else {
            s.recv(r, dst);
        }
    }
    s.result = Some(out);
    Ok(s)
}

/// Binomial gather on ranks relative to the root: a rank collects its
/// subtree's blocks (relative order) and passes them to its parent in one
/// message; the root reorders. ceil(log2 p) steps; for small blocks.
pub fn gather_binomial(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let p = pos.size;
    let b = c.block;
    let v = pos.vrank(c.root);
    let sub = lowbit(v).unwrap_or(p.next_power_of_two()).min(p - v);
    let tmp = s.zeros(sub as usize * b);
    let own = c.input(&mut s);
    s.copy(s.all(own), Slice::new(tmp, 0, b));
    s.next_round();
    let mut mask = 1;
    while mask < p {
        if v & mask != 0 {
            s.send(pos.real(v - mask, c.root), s.all(tmp));
            return Ok(s);
        }
        if v + mask < p {
            let k = mask.min(p - v - mask) as usize;
            s.recv(
                pos.real(v + mask, c.root),
                Slice::new(tmp, mask as usize * b, k * b),
            );
            s.next_round();
        }
        mask <<= 1;
    }
    // Root: relative block j belongs to rank (j + root) mod p.
    let out = s.zeros(p as usize * b);
    for j in 0..p {
        let r = pos.real(j, c.root) as usize;
        s.copy(
            Slice::new(tmp, j as usize * b, b),
            Slice::new(out, r * b, b),
        );
    }
    s.result = Some(out);
    Ok(s)
}

/// Linear gatherv: blocks of `counts[r]` bytes land at `displs[r]`.
pub fn gatherv_linear(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let own = c.input(&mut s);
    if pos.rank != c.root {
        s.send(c.root, s.all(own));
        return Ok(s);
    }
    check_v(c, pos.size, false)?;
    let out = s.zeros(c.recv_len);
    for r in 0..pos.size {
        let dst = Slice::new(out, c.displs[r as usize], c.counts[r as usize]);
        if r == pos.rank {
            if c.send_len() != dst.len {
                return Err(CollError::Count(format!(
                    "gatherv root sends {} bytes to itself but expects {}",
                    c.send_len(),
                    dst.len
                )));
            }
            s.copy(s.all(own), dst);
        } else {
            s.recv(r, dst);
        }
    }
    s.result = Some(out);
    Ok(s)
}

/// Linear scatter: the root sends each rank its block.
pub fn scatter_linear(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let b = c.block;
    let out = s.zeros(b);
    s.result = Some(out);
    if pos.rank != c.root {
        s.recv(c.root, s.all(out));
        return Ok(s);
    }
    let data = c.input(&mut s);
    for r in 0..pos.size {
        let src = Slice::new(data, r as usize * b, b);
        if r == pos.rank {
            s.copy(src, s.all(out));
        } else {
            s.send(r, src);
        }
    }
    Ok(s)
}

/// Binomial scatter: the inverse of [`gather_binomial`]; the root first
/// puts the blocks in relative order, each rank receives its subtree's
/// blocks and forwards the children's parts.
pub fn scatter_binomial(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let p = pos.size;
    let b = c.block;
    let v = pos.vrank(c.root);
    let sub = lowbit(v).unwrap_or(p.next_power_of_two()).min(p - v);
    let tmp = s.zeros(sub as usize * b);
    if v == 0 {
        let data = c.input(&mut s);
        for j in 0..p {
            let r = pos.real(j, c.root) as usize;
            s.copy(
                Slice::new(data, r * b, b),
                Slice::new(tmp, j as usize * b, b),
            );
        }
        s.next_round();
    } else {
        s.recv(pos.real(v - lowbit(v).unwrap_or(0), c.root), s.all(tmp));
        s.next_round();
    }
    let top = lowbit(v).unwrap_or(p.next_power_of_two());
    let mut mask = top >> 1;
    while mask > 0 {
        if v + mask < p {
            let k = mask.min(p - v - mask) as usize;
            s.send(
                pos.real(v + mask, c.root),
                Slice::new(tmp, mask as usize * b, k * b),
            );
        }
        mask >>= 1;
    }
    s.next_round();
    let out = s.zeros(b);
    s.copy(Slice::new(tmp, 0, b), s.all(out));
    s.result = Some(out);
    Ok(s)
}

/// Linear scatterv: `scounts[r]` bytes from `sdispls[r]` go to rank r.
pub fn scatterv_linear(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let out = s.zeros(c.block);
    s.result = Some(out);
    if pos.rank != c.root {
        s.recv(c.root, s.all(out));
        return Ok(s);
    }
    check_v(c, pos.size, true)?;
    let data = c.input(&mut s);
    for r in 0..pos.size {
        let src = Slice::new(data, c.sdispls[r as usize], c.scounts[r as usize]);
        if r == pos.rank {
            if src.len != c.block {
                return Err(CollError::Count(format!(
                    "scatterv root sends {} bytes to itself but receives {}",
                    src.len, c.block
                )));
            }
            s.copy(src, s.all(out));
        } else {
            s.send(r, src);
        }
    }
    Ok(s)
}

/// Allgather as gather to rank 0 (binomial) + binomial broadcast (basic).
pub fn allgather_gather_bcast(c: &Call, pos: Pos) -> Result<Schedule> {
    let mut g = c.clone();
    g.root = 0;
    let mut s = gather_binomial(&g, pos)?;
    let out = match s.result {
        Some(o) => o,
        None => s.zeros(c.block * pos.size as usize),
    };
    s.next_round();
    let all = s.all(out);
    super::bcast::binomial_into(&mut s, all, 0, pos);
    s.result = Some(out);
    Ok(s)
}

/// Ring allgather: p-1 steps, in step k rank r passes block r-k to r+1.
/// Bandwidth-optimal for large blocks; any p.
pub fn allgather_ring(c: &Call, pos: Pos) -> Result<Schedule> {
    let p = pos.size;
    let counts = vec![c.block; p as usize];
    let displs = (0..p as usize).map(|i| i * c.block).collect::<Vec<_>>();
    ring_v(c, pos, &counts, &displs, c.block * p as usize)
}

/// Recursive doubling allgather (power-of-two sizes; ring otherwise): in
/// step k ranks r and r^2^k exchange the 2^k blocks each has gathered.
/// log2 p steps; for small blocks.
pub fn allgather_recursive_doubling(c: &Call, pos: Pos) -> Result<Schedule> {
    let p = pos.size;
    if !p.is_power_of_two() {
        return allgather_bruck(c, pos);
    }
    let b = c.block;
    let mut s = Schedule::new();
    let out = c.output(&mut s, b * p as usize);
    let own = c.input(&mut s);
    s.copy(s.all(own), Slice::new(out, pos.rank as usize * b, b));
    s.next_round();
    let mut mask = 1;
    while mask < p {
        let partner = pos.rank ^ mask;
        let mine = (pos.rank & !(mask - 1)) as usize;
        let theirs = (partner & !(mask - 1)) as usize;
        // The first step sends the own block from the input (the same
        // bytes as the copy just written to `out`): the peer's single-copy
        // read of freshly written lines made 16 KiB blocks 2.7x slower at
        // 2 ranks (docs/coll.md).
        let src = if mask == 1 {
            s.all(own)
        } else {
            Slice::new(out, mine * b, mask as usize * b)
        };
        s.send(partner, src);
        s.recv(partner, Slice::new(out, theirs * b, mask as usize * b));
        s.next_round();
        mask <<= 1;
    }
    s.result = Some(out);
    Ok(s)
}

/// Bruck allgather: ceil(log2 p) steps for any p; in step k rank r sends
/// the first min(2^k, p-2^k) blocks it holds (in rotated order) to r-2^k.
/// A final local rotation puts blocks in rank order.
pub fn allgather_bruck(c: &Call, pos: Pos) -> Result<Schedule> {
    let p = pos.size;
    let b = c.block;
    let mut s = Schedule::new();
    // tmp holds blocks of ranks r, r+1, ... (mod p) in that order.
    let tmp = s.scratch(b * p as usize);
    let own = c.input(&mut s);
    s.copy(s.all(own), Slice::new(tmp, 0, b));
    s.next_round();
    let mut k = 1;
    while k < p {
        let n = k.min(p - k) as usize;
        // The first step's one block is the input (as recursive doubling).
        let src = if k == 1 {
            s.all(own)
        } else {
            Slice::new(tmp, 0, n * b)
        };
        s.send((pos.rank + p - k) % p, src);
        s.recv((pos.rank + k) % p, Slice::new(tmp, k as usize * b, n * b));
        s.next_round();
        k <<= 1;
    }
    let out = c.output(&mut s, b * p as usize);
    for j in 0..p {
        let r = ((pos.rank + j) % p) as usize;
        s.copy(
            Slice::new(tmp, j as usize * b, b),
            Slice::new(out, r * b, b),
        );
    }
    s.result = Some(out);
    Ok(s)
}

/// Allgatherv as gatherv to rank 0 + binomial broadcast (basic).
pub fn allgatherv_gatherv_bcast(c: &Call, pos: Pos) -> Result<Schedule> {
    check_v(c, pos.size, false)?;
    let mut g = c.clone();
    g.root = 0;
    let mut s = gatherv_linear(&g, pos)?;
    let out = match s.result {
        Some(o) => o,
        None => s.zeros(c.recv_len),
    };
    s.next_round();
    let all = s.all(out);
    super::bcast::binomial_into(&mut s, all, 0, pos);
    s.result = Some(out);
    Ok(s)
}

/// Ring allgatherv.
pub fn allgatherv_ring(c: &Call, pos: Pos) -> Result<Schedule> {
    check_v(c, pos.size, false)?;
    ring_v(c, pos, &c.counts, &c.displs, c.recv_len)
}

fn ring_v(c: &Call, pos: Pos, counts: &[usize], displs: &[usize], len: usize) -> Result<Schedule> {
    let p = pos.size;
    let r = pos.rank;
    let mut s = Schedule::new();
    let out = c.out_buf(&mut s, len, (0..p as usize).map(|i| (displs[i], counts[i])));
    let own = c.input(&mut s);
    let blk = |i: u32| {
        let i = (i % p) as usize;
        Slice::new(out, displs[i], counts[i])
    };
    if c.send_len() != counts[r as usize] {
        return Err(CollError::Count(format!(
            "{}: rank {r} contributes {} bytes, the counts say {}",
            c.kind,
            c.send_len(),
            counts[r as usize]
        )));
    }
    s.copy(s.all(own), blk(r));
    s.next_round();
    for k in 0..p - 1 {
        // The first step sends the own block from the input (the same
        // bytes), so that its receive can go in place (no send reads `out`).
        let src = if k == 0 { s.all(own) } else { blk(r + p - k) };
        s.send((r + 1) % p, src);
        s.recv((r + p - 1) % p, blk(r + 2 * p - k - 1));
        s.next_round();
    }
    s.result = Some(out);
    Ok(s)
}
