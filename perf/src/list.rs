//! The comparison point: a matcher organised like Open MPI's ob1 (`pml_ob1_comm.h`,
//! `pml_ob1_recvfrag.c`): per communicator, per peer, a list of source-specific posted receives
//! (exact and ANY_TAG) and a list of unexpected fragments; one list of ANY_SOURCE receives per
//! communicator. Every search scans a list from its head; an arrival compares the first matches
//! of its peer's list and of the wildcard list by posting sequence, as ob1 does.
//!
//! Differences from ob1, all in favour of correctness under tmpi's rules rather than speed:
//! an ANY_SOURCE receive takes the earliest-*arrived* matching message across peers (ob1 takes
//! the first peer in rank order that has one), which needs an arrival number per fragment and a
//! scan of every peer's list. Lists are `VecDeque`s; removing from the middle moves the shorter
//! side (ob1's doubly linked `opal_list` unlinks in O(1) after the same linear scan).

use std::collections::VecDeque;

use rustc_hash::FxHashMap;
use tmpi_tm_engine::{ContextId, Envelope, RecvSpec, SourceSpec, Tag, TagSpec};

#[derive(Clone, Copy, Debug)]
struct PostedRecv<R> {
    seq: u64,
    tag: TagSpec,
    recv: R,
}

#[derive(Clone, Copy, Debug)]
struct Frag<M> {
    arrival: u64,
    tag: Tag,
    msg: M,
}

#[derive(Debug)]
struct Peer<R, M> {
    specific: VecDeque<PostedRecv<R>>,
    unexpected: VecDeque<Frag<M>>,
}

impl<R, M> Default for Peer<R, M> {
    fn default() -> Self {
        Peer {
            specific: VecDeque::new(),
            unexpected: VecDeque::new(),
        }
    }
}

#[derive(Debug)]
struct Comm<R, M> {
    peers: Vec<Peer<R, M>>,
    wild: VecDeque<PostedRecv<R>>,
}

impl<R, M> Default for Comm<R, M> {
    fn default() -> Self {
        Comm {
            peers: Vec::new(),
            wild: VecDeque::new(),
        }
    }
}

#[inline]
fn tag_matches(spec: TagSpec, tag: Tag) -> bool {
    match spec {
        TagSpec::Any => tag >= 0,
        TagSpec::Tag(t) => t == tag,
    }
}

/// The ob1-style list matcher. `R` and `M` as in [`tmpi_tm_engine::Engine`]; receives are named
/// by their posting sequence number.
#[derive(Debug)]
pub struct ListMatcher<R, M> {
    comms: FxHashMap<ContextId, Comm<R, M>>,
    next_seq: u64,
    next_arrival: u64,
    posted: usize,
    unexpected: usize,
}

impl<R: Copy, M: Copy> Default for ListMatcher<R, M> {
    fn default() -> Self {
        Self::new()
    }
}

impl<R: Copy, M: Copy> ListMatcher<R, M> {
    /// Empty.
    pub fn new() -> Self {
        ListMatcher {
            comms: FxHashMap::default(),
            next_seq: 0,
            next_arrival: 0,
            posted: 0,
            unexpected: 0,
        }
    }

    fn peer(comm: &mut Comm<R, M>, rank: u32) -> &mut Peer<R, M> {
        let r = rank as usize;
        if comm.peers.len() <= r {
            comm.peers.resize_with(r + 1, Peer::default);
        }
        &mut comm.peers[r]
    }

    /// Where the earliest-arrived message matching `spec` is: (peer, index in its list).
    fn find_unexpected(&self, spec: &RecvSpec) -> Option<(usize, usize)> {
        let comm = self.comms.get(&spec.context)?;
        match spec.source {
            SourceSpec::Rank(r) => {
                let peer = comm.peers.get(r as usize)?;
                let i = peer
                    .unexpected
                    .iter()
                    .position(|f| tag_matches(spec.tag, f.tag))?;
                Some((r as usize, i))
            }
            SourceSpec::Any => {
                let mut best: Option<(u64, usize, usize)> = None;
                for (p, peer) in comm.peers.iter().enumerate() {
                    if let Some(i) = peer
                        .unexpected
                        .iter()
                        .position(|f| tag_matches(spec.tag, f.tag))
                    {
                        let a = peer.unexpected[i].arrival;
                        if !matches!(best, Some(b) if b.0 <= a) {
                            best = Some((a, p, i));
                        }
                    }
                }
                best.map(|b| (b.1, b.2))
            }
        }
    }

    /// Post a receive: the matching unexpected message, removed, or `Err(seq)` when queued.
    pub fn post_recv(&mut self, spec: RecvSpec, recv: R) -> Result<(Envelope, M), u64> {
        let seq = self.next_seq;
        self.next_seq += 1;
        if let Some((p, i)) = self.find_unexpected(&spec) {
            let comm = self.comms.get_mut(&spec.context).expect("found above");
            let f = comm.peers[p].unexpected.remove(i).expect("found above");
            self.unexpected -= 1;
            return Ok((Envelope::new(spec.context, p as u32, f.tag), f.msg));
        }
        let comm = self.comms.entry(spec.context).or_default();
        let entry = PostedRecv {
            seq,
            tag: spec.tag,
            recv,
        };
        match spec.source {
            SourceSpec::Rank(r) => Self::peer(comm, r).specific.push_back(entry),
            SourceSpec::Any => comm.wild.push_back(entry),
        }
        self.posted += 1;
        Err(seq)
    }

    /// A message arrives: the matching receive, removed, or `None` when queued as unexpected.
    pub fn arrive(&mut self, env: Envelope, msg: M) -> Option<R> {
        let comm = self.comms.entry(env.context).or_default();
        let spec_i = comm
            .peers
            .get(env.source as usize)
            .and_then(|p| p.specific.iter().position(|r| tag_matches(r.tag, env.tag)));
        let wild_i = comm.wild.iter().position(|r| tag_matches(r.tag, env.tag));
        let take_wild = match (spec_i, wild_i) {
            (Some(s), Some(w)) => {
                comm.wild[w].seq < comm.peers[env.source as usize].specific[s].seq
            }
            (None, Some(_)) => true,
            (Some(_), None) => false,
            (None, None) => {
                let arrival = self.next_arrival;
                self.next_arrival += 1;
                Self::peer(comm, env.source).unexpected.push_back(Frag {
                    arrival,
                    tag: env.tag,
                    msg,
                });
                self.unexpected += 1;
                return None;
            }
        };
        self.posted -= 1;
        let r = if take_wild {
            comm.wild.remove(wild_i.expect("checked"))
        } else {
            comm.peers[env.source as usize]
                .specific
                .remove(spec_i.expect("checked"))
        };
        r.map(|r| r.recv)
    }

    /// The message a receive of `spec` would match, left in place.
    pub fn probe(&self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        let (p, i) = self.find_unexpected(spec)?;
        let f = self.comms[&spec.context].peers[p].unexpected[i];
        Some((Envelope::new(spec.context, p as u32, f.tag), f.msg))
    }

    /// The message a receive of `spec` would match, removed.
    pub fn mprobe(&mut self, spec: &RecvSpec) -> Option<(Envelope, M)> {
        let (p, i) = self.find_unexpected(spec)?;
        let comm = self.comms.get_mut(&spec.context).expect("found");
        let f = comm.peers[p].unexpected.remove(i).expect("found");
        self.unexpected -= 1;
        Some((Envelope::new(spec.context, p as u32, f.tag), f.msg))
    }

    /// Cancel the receive posted with sequence `seq` (linear search of every list).
    pub fn cancel(&mut self, seq: u64) -> Option<R> {
        for comm in self.comms.values_mut() {
            let lists = comm
                .peers
                .iter_mut()
                .map(|p| &mut p.specific)
                .chain(std::iter::once(&mut comm.wild));
            for l in lists {
                if let Some(i) = l.iter().position(|r| r.seq == seq) {
                    self.posted -= 1;
                    return l.remove(i).map(|r| r.recv);
                }
            }
        }
        None
    }

    /// (posted, unexpected) depths.
    pub fn depths(&self) -> (usize, usize) {
        (self.posted, self.unexpected)
    }
}
