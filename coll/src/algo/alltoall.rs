//! All-to-all algorithms. alltoall, alltoallv and alltoallw share them:
//! after packing, alltoallw is alltoallv with per-peer byte counts.

use super::{Call, Pos};
use crate::schedule::{Schedule, Slice};
use crate::{CollError, Result};

/// (offset, length) per peer, in bytes.
type Blocks = Vec<(usize, usize)>;

/// Send and receive layout of an all-to-all, in bytes, and the receive length.
fn layout(c: &Call, p: u32) -> Result<(Blocks, Blocks, usize)> {
    let p = p as usize;
    if c.kind == super::CollKind::Alltoall {
        let b = c.block;
        let l: Vec<_> = (0..p).map(|i| (i * b, b)).collect();
        return Ok((l.clone(), l, b * p));
    }
    if c.scounts.len() != p || c.sdispls.len() != p || c.counts.len() != p || c.displs.len() != p {
        return Err(CollError::Intern(
            "alltoallv counts/displacements per rank".into(),
        ));
    }
    let snd = c
        .sdispls
        .iter()
        .copied()
        .zip(c.scounts.iter().copied())
        .collect();
    let rcv = c
        .displs
        .iter()
        .copied()
        .zip(c.counts.iter().copied())
        .collect();
    Ok((snd, rcv, c.recv_len))
}

/// Linear: every receive and every send posted at once (one round).
/// Lowest latency while the number of outstanding messages stays small.
pub fn linear(c: &Call, pos: Pos) -> Result<Schedule> {
    let (snd, rcv, len) = layout(c, pos.size)?;
    let mut s = Schedule::new();
    let data = c.input(&mut s);
    let out = c.out_buf(&mut s, len, rcv.iter().copied());
    let me = pos.rank as usize;
    for r in 0..pos.size {
        let (ro, rl) = rcv[r as usize];
        if r as usize != me {
            s.recv(r, Slice::new(out, ro, rl));
        }
    }
    for k in 1..pos.size {
        // Start with the right neighbour, so ranks do not all hit rank 0 first.
        let r = (pos.rank + k) % pos.size;
        let (so, sl) = snd[r as usize];
        s.send(r, Slice::new(data, so, sl));
    }
    let (so, sl) = snd[me];
    let (ro, rl) = rcv[me];
    if sl != rl {
        return Err(CollError::Count(format!(
            "{}: rank {me} sends {sl} bytes to itself but receives {rl}",
            c.kind
        )));
    }
    s.copy(Slice::new(data, so, sl), Slice::new(out, ro, rl));
    s.result = Some(out);
    Ok(s)
}

/// Pairwise exchange: p-1 rounds, in round k rank r sends to r+k and
/// receives from r-k. One message in flight per direction: for large
/// messages, where linear floods the receivers.
pub fn pairwise(c: &Call, pos: Pos) -> Result<Schedule> {
    let (snd, rcv, len) = layout(c, pos.size)?;
    let mut s = Schedule::new();
    let data = c.input(&mut s);
    let out = c.out_buf(&mut s, len, rcv.iter().copied());
    let p = pos.size;
    let me = pos.rank as usize;
    let (so, sl) = snd[me];
    let (ro, rl) = rcv[me];
    if sl != rl {
        return Err(CollError::Count(format!(
            "{}: rank {me} sends {sl} bytes to itself but receives {rl}",
            c.kind
        )));
    }
    s.copy(Slice::new(data, so, sl), Slice::new(out, ro, rl));
    s.next_round();
    for k in 1..p {
        let to = (pos.rank + k) % p;
        let from = (pos.rank + p - k) % p;
        let (so, sl) = snd[to as usize];
        let (ro, rl) = rcv[from as usize];
        s.send(to, Slice::new(data, so, sl));
        s.recv(from, Slice::new(out, ro, rl));
        s.next_round();
    }
    s.result = Some(out);
    Ok(s)
}
