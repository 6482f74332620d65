//! Barrier algorithms (zero-byte messages).

use super::{lowbit, Call, Pos};
use crate::schedule::{Schedule, Slice};
use crate::Result;

fn empty(s: &mut Schedule) -> Slice {
    let b = s.zeros(0);
    Slice::new(b, 0, 0)
}

/// Linear: everyone reports to rank 0, which releases everyone.
/// 2(p-1) messages through rank 0; best for tiny communicators.
pub fn linear(_c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let z = empty(&mut s);
    if pos.size == 1 {
        return Ok(s);
    }
    if pos.rank == 0 {
        for r in 1..pos.size {
            s.recv(r, z);
        }
        s.next_round();
        for r in 1..pos.size {
            s.send(r, z);
        }
    } else {
        s.send(0, z);
        s.recv(0, z);
    }
    Ok(s)
}

/// Dissemination (Hensgen et al.): in round k rank r signals `r + 2^k` and
/// waits for `r - 2^k`; ceil(log2 p) rounds for any p.
pub fn dissemination(_c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let z = empty(&mut s);
    let p = pos.size;
    let mut k = 1;
    while k < p {
        s.send((pos.rank + k) % p, z);
        s.recv((pos.rank + p - k) % p, z);
        s.next_round();
        k <<= 1;
    }
    Ok(s)
}

/// Binomial tree: fan-in to rank 0 along a binomial tree, then fan-out.
/// 2 ceil(log2 p) latency, p-1 messages each way.
pub fn tree(_c: &Call, pos: Pos) -> Result<Schedule> {
    let mut s = Schedule::new();
    let z = empty(&mut s);
    let p = pos.size;
    let v = pos.rank;
    // Fan-in: receive from children (v + mask for mask below lowbit(v)), then tell the parent.
    let top = lowbit(v).unwrap_or(p.next_power_of_two());
    let mut mask = 1;
    while mask < top && v + mask < p {
        s.recv(v + mask, z);
        mask <<= 1;
    }
    s.next_round();
    if v != 0 {
        s.send(v - top, z);
        s.next_round();
        s.recv(v - top, z);
        s.next_round();
    }
    let mut mask = top >> 1;
    while mask > 0 {
        if v + mask < p {
            s.send(v + mask, z);
        }
        mask >>= 1;
    }
    Ok(s)
}
