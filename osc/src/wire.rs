//! The messages of the pt2pt component: one request per operation, sent to
//! the target on the window's context with tag [`TAG_REQ`], alone or with
//! other small requests to the same target in a batch ([`BATCH`]); the
//! replies a request asks for come back on a tag of its sequence number.
//!
//! Request layout (native byte order: both ends run the same build on
//! machines of one architecture, as the rest of tmpi assumes):
//!
//! | bytes | field |
//! |---|---|
//! | 1 | kind ([`Kind`]) |
//! | 1 | op code ([`op_code`]) |
//! | 1 | element type code ([`elem_code`], 0 = none; `0x80 | kind` for a [`crate::WideKernel`] kind) |
//! | 1 | lock type (1 exclusive, 2 shared) |
//! | 4 | sequence number (reply tag) |
//! | 8 | byte offset of the target region in the window |
//! | 8 | count of target items |
//! | 8 | extent of a target item |
//! | 4 | number of blocks of a target item |
//! | 16 each | blocks (offset, length) |
//! | rest | data |

use tmpi_coll::{Datatype, Op};

use crate::{AccOp, OscError, Result};

/// Requests to a target.
pub(crate) const TAG_REQ: i32 = 1;

/// The first byte of a batch: several small requests to one target in
/// one message ([`batch_push`], [`batch_items`]); no request starts with
/// it (kinds are 1-9).
pub(crate) const BATCH: u8 = 0xB0;

/// Appends the encoded request `req` to batch `b` (started when empty):
/// its length (4 bytes, native order), then the request.
pub(crate) fn batch_push(b: &mut Vec<u8>, req: &[u8]) {
    if b.is_empty() {
        b.push(BATCH);
    }
    b.extend_from_slice(&(req.len() as u32).to_ne_bytes());
    b.extend_from_slice(req);
}

/// The requests of batch `m` (which starts with [`BATCH`]), in order; an
/// error for a length that runs past the end (the requests before it are
/// still returned).
pub(crate) fn batch_items(m: &[u8]) -> impl Iterator<Item = Result<&[u8]>> {
    let mut pos = 1usize;
    let mut broken = false;
    std::iter::from_fn(move || {
        if broken || pos >= m.len() {
            return None;
        }
        let item = m
            .get(pos..pos + 4)
            .and_then(|l| <[u8; 4]>::try_from(l).ok())
            .map(|l| u32::from_ne_bytes(l) as usize)
            .and_then(|n| m.get(pos + 4..pos + 4 + n));
        match item {
            Some(r) => {
                pos += 4 + r.len();
                Some(Ok(r))
            }
            None => {
                broken = true;
                Some(Err(OscError::Comm(format!(
                    "malformed batch of one-sided requests ({} bytes, broken at byte {pos})",
                    m.len()
                ))))
            }
        }
    })
}
/// Window creation's exchange of sizes.
pub(crate) const TAG_INFO: i32 = 2;
/// `MPI_Win_post`'s notices to the origins.
pub(crate) const TAG_POST: i32 = 3;
/// The window's barrier rounds (`TAG_BARRIER + round`).
pub(crate) const TAG_BARRIER: i32 = 64;
/// Replies: `TAG_REPLY + (seq % REPLY_TAGS)`.
pub(crate) const TAG_REPLY: i32 = 1 << 20;
pub(crate) const REPLY_TAGS: u32 = 1 << 20;

pub(crate) fn reply_tag(seq: u32) -> i32 {
    TAG_REPLY + (seq % REPLY_TAGS) as i32
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Kind {
    Put = 1,
    Get = 2,
    Acc = 3,
    GetAcc = 4,
    Cas = 5,
    Lock = 6,
    Unlock = 7,
    Flush = 8,
    Complete = 9,
}

impl Kind {
    fn from(b: u8) -> Option<Kind> {
        Some(match b {
            1 => Kind::Put,
            2 => Kind::Get,
            3 => Kind::Acc,
            4 => Kind::GetAcc,
            5 => Kind::Cas,
            6 => Kind::Lock,
            7 => Kind::Unlock,
            8 => Kind::Flush,
            9 => Kind::Complete,
            _ => return None,
        })
    }
}

/// The packed pair layouts, which coll's `Datatype::ALL` (the native
/// layouts) leaves out.
const PACKED: &[Datatype] = &[
    Datatype::PackedDoubleInt,
    Datatype::PackedLongInt,
    Datatype::PackedShortInt,
];

/// Element types by wire code (index + 1): coll's predefined types, then
/// the packed pairs.
fn elems() -> impl Iterator<Item = Datatype> {
    Datatype::ALL.iter().chain(PACKED).copied()
}

pub(crate) fn elem_code(e: Option<Datatype>) -> u8 {
    e.and_then(|e| elems().position(|x| x == e))
        .map_or(0, |i| i as u8 + 1)
}

fn elem_of(c: u8) -> Option<Datatype> {
    (c as usize).checked_sub(1).and_then(|i| elems().nth(i))
}

pub(crate) fn op_code(op: &AccOp) -> u8 {
    match op {
        AccOp::Replace => 13,
        AccOp::NoOp => 14,
        AccOp::Reduce(o) => match o {
            Op::Max => 1,
            Op::Min => 2,
            Op::Sum => 3,
            Op::Prod => 4,
            Op::Land => 5,
            Op::Band => 6,
            Op::Lor => 7,
            Op::Bor => 8,
            Op::Lxor => 9,
            Op::Bxor => 10,
            Op::Minloc => 11,
            Op::Maxloc => 12,
            _ => 0,
        },
    }
}

fn op_of(c: u8) -> Option<AccOp> {
    Some(match c {
        1 => AccOp::Reduce(Op::Max),
        2 => AccOp::Reduce(Op::Min),
        3 => AccOp::Reduce(Op::Sum),
        4 => AccOp::Reduce(Op::Prod),
        5 => AccOp::Reduce(Op::Land),
        6 => AccOp::Reduce(Op::Band),
        7 => AccOp::Reduce(Op::Lor),
        8 => AccOp::Reduce(Op::Bor),
        9 => AccOp::Reduce(Op::Lxor),
        10 => AccOp::Reduce(Op::Bxor),
        11 => AccOp::Reduce(Op::Minloc),
        12 => AccOp::Reduce(Op::Maxloc),
        13 => AccOp::Replace,
        14 => AccOp::NoOp,
        _ => return None,
    })
}

/// A request's header fields.
#[derive(Debug, Clone)]
pub(crate) struct Req {
    pub kind: Kind,
    pub op: Option<AccOp>,
    pub elem: Option<Datatype>,
    pub wide: Option<u8>,
    pub lock: u8,
    pub seq: u32,
    pub offset: i64,
    pub count: u64,
    pub extent: i64,
    pub blocks: Vec<(i64, u64)>,
}

impl Req {
    /// A request with no target region (lock, unlock, flush, complete).
    pub fn control(kind: Kind, seq: u32, lock: u8) -> Req {
        Req {
            kind,
            op: None,
            elem: None,
            wide: None,
            lock,
            seq,
            offset: 0,
            count: 0,
            extent: 0,
            blocks: Vec::new(),
        }
    }

    /// The encoded request followed by `data`.
    pub fn encode(&self, data: &[&[u8]]) -> Vec<u8> {
        let dlen: usize = data.iter().map(|d| d.len()).sum();
        let mut v = Vec::with_capacity(36 + 16 * self.blocks.len() + dlen);
        v.push(self.kind as u8);
        v.push(self.op.as_ref().map_or(0, op_code));
        v.push(self.wide.map_or_else(|| elem_code(self.elem), |k| 0x80 | k));
        v.push(self.lock);
        v.extend_from_slice(&self.seq.to_ne_bytes());
        v.extend_from_slice(&self.offset.to_ne_bytes());
        v.extend_from_slice(&self.count.to_ne_bytes());
        v.extend_from_slice(&self.extent.to_ne_bytes());
        v.extend_from_slice(&(self.blocks.len() as u32).to_ne_bytes());
        for &(o, l) in &self.blocks {
            v.extend_from_slice(&o.to_ne_bytes());
            v.extend_from_slice(&l.to_ne_bytes());
        }
        for d in data {
            v.extend_from_slice(d);
        }
        v
    }

    /// Decodes a request: its header and the data after it.
    pub fn decode(m: &[u8]) -> Result<(Req, &[u8])> {
        let bad = || OscError::Comm(format!("malformed one-sided request of {} bytes", m.len()));
        let mut r = Rd { m, pos: 0 };
        let kind = Kind::from(r.u8().ok_or_else(bad)?).ok_or_else(bad)?;
        let opc = r.u8().ok_or_else(bad)?;
        let op = if opc == 0 {
            None
        } else {
            Some(op_of(opc).ok_or_else(bad)?)
        };
        let ec = r.u8().ok_or_else(bad)?;
        let (elem, wide) = if ec & 0x80 != 0 {
            (None, Some(ec & 0x7f))
        } else {
            (elem_of(ec), None)
        };
        let lock = r.u8().ok_or_else(bad)?;
        let seq = u32::from_ne_bytes(r.take(4).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let offset = r.i64().ok_or_else(bad)?;
        let count = r.i64().ok_or_else(bad)? as u64;
        let extent = r.i64().ok_or_else(bad)?;
        let nb = u32::from_ne_bytes(r.take(4).ok_or_else(bad)?.try_into().map_err(|_| bad())?);
        let mut blocks = Vec::with_capacity((nb as usize).min(m.len() / 16));
        for _ in 0..nb {
            let o = r.i64().ok_or_else(bad)?;
            let l = r.i64().ok_or_else(bad)? as u64;
            blocks.push((o, l));
        }
        let data = &m[r.pos..];
        Ok((
            Req {
                kind,
                op,
                elem,
                wide,
                lock,
                seq,
                offset,
                count,
                extent,
                blocks,
            },
            data,
        ))
    }
}

struct Rd<'a> {
    m: &'a [u8],
    pos: usize,
}

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.m.get(self.pos..self.pos.checked_add(n)?)?;
        self.pos += n;
        Some(s)
    }
    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|s| s[0])
    }
    fn i64(&mut self) -> Option<i64> {
        self.take(8)
            .and_then(|s| s.try_into().ok())
            .map(i64::from_ne_bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn batches_keep_their_requests_in_order_and_refuse_a_cut_one() {
        let a = Req::control(Kind::Flush, 0, 0).encode(&[]);
        let b = Req::control(Kind::Unlock, 0, 0).encode(&[b"xyz"]);
        let mut m = Vec::new();
        batch_push(&mut m, &a);
        batch_push(&mut m, &b);
        batch_push(&mut m, &[]);
        assert_eq!(m[0], BATCH);
        let items: Vec<&[u8]> = batch_items(&m).map(|r| r.unwrap()).collect();
        assert_eq!(items, vec![&a[..], &b[..], &[][..]]);
        assert_eq!(Req::decode(items[1]).unwrap().1, b"xyz");
        // Cut inside the second request: the first still comes, then one
        // error, then nothing.
        let cut = &m[..1 + 4 + a.len() + 4 + 3];
        let got: Vec<_> = batch_items(cut).collect();
        assert_eq!(got.len(), 2);
        assert_eq!(got[0].as_ref().unwrap(), &&a[..]);
        assert!(matches!(got[1], Err(OscError::Comm(_))));
        assert_eq!(batch_items(&[BATCH]).count(), 0);
    }

    #[test]
    fn request_round_trips() {
        let r = Req {
            kind: Kind::GetAcc,
            op: Some(AccOp::Reduce(Op::Maxloc)),
            elem: Some(Datatype::PackedDoubleInt),
            wide: None,
            lock: 2,
            seq: 77,
            offset: -5,
            count: 3,
            extent: 24,
            blocks: vec![(0, 8), (16, 4)],
        };
        let m = r.encode(&[b"abc", b"de"]);
        let (d, data) = Req::decode(&m).unwrap();
        assert_eq!(d.kind, Kind::GetAcc);
        assert_eq!(op_code(d.op.as_ref().unwrap()), 12);
        assert_eq!(d.elem, Some(Datatype::PackedDoubleInt));
        assert_eq!(
            (d.lock, d.seq, d.offset, d.count, d.extent),
            (2, 77, -5, 3, 24)
        );
        assert_eq!(d.blocks, vec![(0, 8), (16, 4)]);
        assert_eq!(data, b"abcde");
        // Every truncation is an error, never a panic.
        for n in 0..36 + 32 {
            assert!(Req::decode(&m[..n]).is_err(), "{n} bytes decoded");
        }
    }
}
