//! The finalize handshake: a finalizing process sends BYE to its peers
//! after its last message, and a peer that gets it fails what can then
//! never complete, instead of waiting forever on a process that sits in
//! `MPI_Finalize` (MPI-4.0 §11.2: no call may block forever on a peer that
//! has finalized).
//!
//! What fails once a peer said BYE: receives that name it and found no
//! message of it (posted before or after), `MPI_ANY_SOURCE` receives on a
//! communicator whose every other member said BYE or died, and rendezvous
//! sends to it still waiting for its answer (it posts no receive any
//! more). Nothing else: an `MPI_ANY_SOURCE` receive that another member
//! can still satisfy stays posted (a manager collecting results while
//! workers finish is a correct program), and messages the peer sent before
//! its BYE are still matched.
//!
//! Ordering: BYE travels behind the peer's earlier fragments on the same
//! BTL, but tag-matching NIC inputs are taken in the same polling round
//! after the BTL's plain fragments; so a BYE is applied only after the
//! NIC inputs of its round ([`Core::apply_byes`], called by the driver
//! after them) and only once no fragment of that peer waits out of order.

use super::*;

impl Core {
    /// Sets `pml_ob1_bye_all_max`: in jobs of at most this many ranks
    /// [`Core::say_bye`] tells every peer.
    pub fn set_bye_all_max(&mut self, ranks: u64) {
        self.bye_all_max = ranks;
    }

    /// Queues a BYE to every peer this process talked with, to those
    /// `local` says are cheap to reach (shared memory, self), and in jobs
    /// of at most `pml_ob1_bye_all_max` ranks to every other: called by
    /// finalize once nothing of ours is in flight. In a larger job a peer
    /// never talked with over a network BTL gets none (a connection per
    /// pair at finalize would cost such jobs dearly). Returns how many
    /// BYEs were queued.
    pub fn say_bye(&mut self, local: &dyn Fn(u32) -> bool) -> usize {
        let all = self.peers.len() as u64 <= self.bye_all_max;
        let mut n = 0;
        for p in 0..self.peers.len() as u32 {
            if p == self.me || self.dead.get(p as usize).copied().unwrap_or(false) {
                continue;
            }
            let ps = &self.peers[p as usize];
            let talked = ps.send_seq.iter().any(|&s| s != 0) || ps.recv_seq.iter().any(|&s| s != 0);
            if all || talked || local(p) {
                self.actions.push(Action::Send {
                    peer: p,
                    hdr: HdrBuf::from(&encode_bye()),
                    data: RawBuf::empty(),
                    done: None,
                });
                n += 1;
            }
        }
        n
    }

    /// Whether finalize may enter its fence as far as BYEs go: in jobs of at
    /// most `pml_ob1_bye_all_max` ranks, where every rank tells every
    /// other, once every live peer's BYE arrived. Then no rank leaves the
    /// fence and closes its connections while a BYE to it is still unread
    /// (a close with unread bytes resets the connection under the sender).
    /// Larger jobs do not wait: who tells whom is not symmetric there.
    pub fn byes_complete(&self) -> bool {
        if self.peers.len() as u64 > self.bye_all_max {
            return true;
        }
        (0..self.peers.len() as u32).all(|p| {
            p == self.me || self.peer_gone(p) || self.dead.get(p as usize).copied().unwrap_or(false)
        })
    }

    /// Whether a BYE arrived and waits for [`Core::apply_byes`].
    #[inline]
    pub fn has_byes(&self) -> bool {
        !self.byes.is_empty()
    }

    /// Whether world rank `peer` said BYE (it is finalizing).
    pub fn peer_gone(&self, peer: u32) -> bool {
        self.gone.get(peer as usize).copied().unwrap_or(false)
    }

    /// Applies the BYEs that arrived (the driver calls this after the
    /// round's NIC inputs): fails what waits on those peers. Returns
    /// (peer, requests failed) for each BYE applied; a BYE whose peer
    /// still has fragments held out of order waits for a later round.
    pub fn apply_byes(&mut self) -> Vec<(u32, usize)> {
        let mut done = Vec::new();
        let byes = std::mem::take(&mut self.byes);
        for p in byes {
            if !self.peers[p as usize].ahead.is_empty() {
                self.byes.push(p);
                continue;
            }
            if self.gone.is_empty() {
                self.gone = vec![false; self.peers.len()];
            }
            self.gone[p as usize] = true;
            done.push((p, self.fail_waiting_on_gone(p)));
        }
        done
    }

    /// Whether a receive on `ctx` from world rank `src` (`None`: any
    /// source) that found no message can never be satisfied now: its source
    /// said BYE, or (any source) every other member of the communicator
    /// said BYE or died.
    pub(super) fn waits_on_gone(&self, ctx: u32, src: Option<u32>) -> bool {
        if self.gone.is_empty() {
            return false;
        }
        match src {
            Some(w) => self.peer_gone(w),
            None => self.comm(ctx).is_ok_and(|c| {
                c.world.iter().all(|&w| {
                    w == self.me
                        || self.peer_gone(w)
                        || self.dead.get(w as usize).copied().unwrap_or(false)
                })
            }),
        }
    }

    /// Fails the requests that wait on `peer`, which said BYE.
    fn fail_waiting_on_gone(&mut self, peer: u32) -> usize {
        let mut n = 0;
        for idx in 0..self.slots.len() {
            let s = &self.slots[idx];
            let id = ReqId::new(idx as u32, s.gen);
            let fail = match (&s.state, s.dep) {
                (
                    ReqState::Send {
                        phase: SendPhase::Rndv { peer: p, .. },
                        ..
                    },
                    _,
                ) => *p == peer,
                (
                    ReqState::Recv {
                        phase: RecvPhase::Posted { token: Some(tok) },
                        ..
                    },
                    Some((ctx, src)),
                ) if src.is_none_or(|w| w == peer) => {
                    let tok = *tok;
                    self.waits_on_gone(ctx, src) && self.withdraw(tok, id)
                }
                _ => false,
            };
            if fail {
                let st = Status {
                    error: MpiErrorClass::Other,
                    ..self.slots[idx].status
                };
                self.complete(id, st);
                n += 1;
            }
        }
        n
    }

    /// Takes posted receive `id` (matcher token `tok`) out of matching;
    /// false when it cannot be withdrawn (a match is under way).
    pub(super) fn withdraw(&mut self, tok: u64, id: ReqId) -> bool {
        match self.matcher.as_split() {
            Some(sm) if self.tm => sm.cancel_recv(tok, id.0),
            _ => self.matcher.cancel(tok),
        }
    }
}
