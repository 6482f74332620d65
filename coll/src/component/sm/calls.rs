//! sm's call lines: every collective call of a kind sm won is announced
//! in the rank's call line, and a rank left waiting looks there for
//! evidence that the ranks' calls differ (another operation, root or route
//! at the same point), so that an erroneous program fails instead of
//! waiting forever (docs/coll.md, "Calls that take different paths").

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};

use super::{Node, Route, LINE};
use crate::algo::CollKind;
use crate::{CollContext, CollError, Result};

/// Header word: 0, or (from bit [`BROKEN_BY_BITS`]) 1 + the number of the
/// call in which some rank found that the ranks' calls differ (the rings
/// are out of step from there) and (below it) that rank.
const BROKEN: usize = 32;
const BROKEN_BY_BITS: u32 = 20;
const BROKEN_BY_MASK: u64 = (1 << BROKEN_BY_BITS) - 1;
/// Calls each rank keeps described in its call line (one word each).
const HISTORY: u64 = 8;
/// Bits of a call's number in its word (above its [`CallInfo`]) and in a
/// flag; ranks are never 2^19 calls apart (each path bounds how far a rank
/// runs ahead: the rings by their slots, the messages by the pml's
/// buffers).
pub(super) const CALL_BITS: u32 = 20;
pub(super) const CALL_MASK: u64 = (1 << CALL_BITS) - 1;
/// Polls of a wait between two looks at the other ranks' call lines.
pub(super) const CHECK_POLLS: u32 = 1024;

/// What a rank passed to one collective call, as its call line describes
/// it: bytes (21 bits, saturated above every `coll_sm_max`), root (16, all
/// ones: none), operation (5), whether the call is on the segment (1),
/// whether it is a non-blocking one (1).
/// Its route follows from these ([`Node::route`]): the description is
/// cheap to make, and every call makes one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct CallInfo(u64);

const MAX_BYTES: u64 = (1 << 21) - 1;
const NO_ROOT: u64 = (1 << 16) - 1;
const INFO_BITS: u32 = 44;

impl CallInfo {
    #[inline]
    fn new(kind: CollKind, bytes: usize, root: Option<u32>, on_segment: bool) -> CallInfo {
        let root = root.map_or(NO_ROOT, |r| u64::from(r).min(NO_ROOT - 1));
        let bytes = (bytes as u64).min(MAX_BYTES);
        CallInfo(bytes | root << 21 | (kind.index() as u64) << 37 | u64::from(on_segment) << 42)
    }

    /// The same call made as a non-blocking one (always over messages).
    fn nonblocking(self) -> CallInfo {
        CallInfo(self.0 | 1 << 43)
    }

    fn is_nonblocking(self) -> bool {
        self.0 >> 43 & 1 == 1
    }

    /// The same call with another length.
    fn with_bytes(self, bytes: usize) -> CallInfo {
        CallInfo(self.0 & !MAX_BYTES | (bytes as u64).min(MAX_BYTES))
    }

    fn bytes(self) -> usize {
        (self.0 & MAX_BYTES) as usize
    }

    fn root(self) -> Option<u64> {
        let r = self.0 >> 21 & NO_ROOT;
        (r != NO_ROOT).then_some(r)
    }

    fn kind(self) -> Option<CollKind> {
        CollKind::ALL.get((self.0 >> 37 & 31) as usize).copied()
    }

    fn on_segment(self) -> bool {
        self.0 >> 42 & 1 == 1
    }
}

impl fmt::Display for CallInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let i = if self.is_nonblocking() { "i" } else { "" };
        match self.kind() {
            Some(k) => write!(f, "{i}{k}")?,
            None => f.write_str("an unknown collective")?,
        }
        if self.0 & MAX_BYTES == MAX_BYTES {
            write!(f, " of over {MAX_BYTES} bytes")?;
        } else {
            write!(f, " of {} bytes", self.bytes())?;
        }
        if let Some(r) = self.root() {
            write!(f, ", root {r}")?;
        }
        Ok(())
    }
}

impl Node {
    /// The route of a described call.
    fn route_of(&self, a: CallInfo) -> Option<Route> {
        Some(self.route(a.kind()?, a.bytes(), a.on_segment()))
    }

    /// The route of a call: the ring of its first op, single copy, or the
    /// messages (`on_segment` false: above the limit). Ranks whose calls
    /// differ only in length but take the same route stay in step (each
    /// op's length is checked, [`Step::expect_len`]; chunked calls compare
    /// lengths first); on different routes they would wait for each other
    /// forever.
    fn route(&self, kind: CollKind, bytes: usize, on_segment: bool) -> Route {
        if !on_segment {
            return Route::Messages;
        }
        match kind {
            // Chunked: the lengths first, in a small op.
            CollKind::Bcast | CollKind::Allreduce if bytes > self.max => Node::ring_of(8, false),
            CollKind::Bcast | CollKind::Reduce => Node::ring_of(bytes, true),
            CollKind::Allgather | CollKind::Alltoall if bytes > self.max => Route::SingleCopy,
            _ => Node::ring_of(bytes, false),
        }
    }

    /// Publishes this rank's next collective call on the communicator in
    /// its call line (every call of a kind sm won, through the segment or
    /// not; `bytes` as `CollComm` measures them for the limit), where a rank
    /// that waits long looks for evidence that the ranks' calls differ
    /// (`Node::wait`): one word, the call's number over its description,
    /// in the slot of the last `HISTORY` calls. Fails once some rank
    /// found they differ: the rings are out of step from that call on.
    #[inline(always)]
    pub fn announce(
        &self,
        kind: CollKind,
        bytes: usize,
        root: Option<u32>,
        on_segment: bool,
    ) -> Result<()> {
        self.announce_info(CallInfo::new(kind, bytes, root, on_segment))
    }

    /// [`Node::announce`] for a non-blocking collective of a kind sm won
    /// (over messages: sm runs blocking calls only). MPI does not match a
    /// non-blocking collective with a blocking one; a rank waiting on the
    /// segment in the blocking one finds the difference.
    pub fn announce_nonblocking(
        &self,
        kind: CollKind,
        bytes: usize,
        root: Option<u32>,
    ) -> Result<()> {
        self.announce_info(CallInfo::new(kind, bytes, root, false).nonblocking())
    }

    #[inline(always)]
    fn announce_info(&self, info: CallInfo) -> Result<()> {
        let c = self.call.load(Ordering::Relaxed) + 1;
        self.call.store(c, Ordering::Relaxed);
        // Release: whatever this rank did in its earlier calls is visible
        // to a rank that reads this number.
        self.call_word(self.me, c)
            .store((c & CALL_MASK) << INFO_BITS | info.0, Ordering::Release);
        if self.seg.atomic(BROKEN).load(Ordering::Acquire) != 0 {
            return Err(self.broken_at(c));
        }
        Ok(())
    }

    /// The error of call `c` on a broken segment. A rank that comes to the
    /// call found to differ only then gets the error of its own evidence
    /// (the same as if it had found it), whichever rank found it first.
    #[cold]
    fn broken_at(&self, c: u64) -> CollError {
        let word = self.seg.atomic(BROKEN).load(Ordering::Acquire);
        if word >> BROKEN_BY_BITS == c + 1 {
            if let Some(own) = (0..self.p)
                .filter(|&r| r != self.me)
                .find_map(|r| self.evidence(r))
            {
                return own;
            }
        }
        self.check_broken()
            .err()
            .unwrap_or_else(|| CollError::Intern("sm: broken segment without a record".into()))
    }

    /// Offset of rank `r`'s pid: the word after the [`HISTORY`] call
    /// words of its call line.
    pub(super) fn pid_word(p: u32, r: u32) -> usize {
        Node::call_lines(p) + LINE * r as usize + 8 * HISTORY as usize
    }

    /// The error for rank `r` when its process no longer runs: a rank
    /// killed in the middle of a collective never raises the flag the
    /// others wait for. (A reused pid looks alive: a death may go
    /// unnoticed, never the reverse.)
    fn gone(&self, r: u32) -> Option<CollError> {
        let pid = self
            .seg
            .atomic(Node::pid_word(self.p, r))
            .load(Ordering::Acquire) as u32;
        let p = libc::pid_t::try_from(pid).ok().filter(|&p| p > 0)?;
        // SAFETY: signal 0 only checks whether the process exists.
        let r0 = unsafe { libc::kill(p, 0) };
        (r0 != 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH))
            .then_some(CollError::PeerGone { rank: r, pid })
    }

    /// Rank `r`'s word for call `c` in its call line.
    fn call_word(&self, r: u32, c: u64) -> &AtomicU64 {
        self.seg
            .atomic(Node::call_lines(self.p) + LINE * r as usize + 8 * (c % HISTORY) as usize)
    }

    /// Rank `r`'s description of its call `c`, if its line still holds it.
    fn described(&self, r: u32, c: u64) -> Option<CallInfo> {
        let w = self.call_word(r, c).load(Ordering::Acquire);
        (w >> INFO_BITS == c & CALL_MASK).then_some(CallInfo(w & ((1 << INFO_BITS) - 1)))
    }

    /// The latest call rank `r` announced (0: none; its number is kept
    /// modulo 2^[`CALL_BITS`], read relative to this rank's). When `r` is
    /// past a call, everything it did in that call is visible after this
    /// (acquire of a release store).
    fn latest_call(&self, r: u32) -> u64 {
        let mine = self.call.load(Ordering::Relaxed);
        let half = 1i64 << (CALL_BITS - 1);
        (0..HISTORY)
            .map(|i| {
                let n = self.call_word(r, i).load(Ordering::Acquire) >> INFO_BITS;
                let mut d = (n.wrapping_sub(mine) & CALL_MASK) as i64;
                if d >= half {
                    d -= 2 * half;
                }
                (mine as i64 + d).max(0) as u64
            })
            .max()
            .unwrap_or(0)
    }

    /// Evidence that rank `r`'s calls differ from this rank's: a call both
    /// call lines still describe with another operation, root or route.
    /// Marks the segment broken and gives the error then: for this rank's
    /// current call, `MPI_ERR_TRUNCATE` where only the length differs (the
    /// route with it), else the calls named.
    fn evidence(&self, r: u32) -> Option<CollError> {
        let mine = self.call.load(Ordering::Relaxed);
        let theirs = self.latest_call(r);
        let lo = mine.max(theirs).saturating_sub(HISTORY - 1).max(1);
        for c in lo..=mine.min(theirs) {
            let (Some(a), Some(b)) = (self.described(self.me, c), self.described(r, c)) else {
                continue;
            };
            let same_call = a.kind().is_some()
                && a.kind() == b.kind()
                && a.root() == b.root()
                && a.is_nonblocking() == b.is_nonblocking();
            if same_call && self.route_of(a) == self.route_of(b) {
                continue;
            }
            if same_call && c < mine && c == theirs {
                // Only the length differs, in a call `r` is still in: it
                // may be about to follow this rank's route
                // (`Node::wait_or_diverge` then rewrites its description);
                // if it cannot, it finds the difference itself.
                continue;
            }
            if same_call && c == mine && self.may_follow(a, r, b) {
                // This rank's caller takes the other ranks' route
                // (`Node::wait_or_diverge`): the rings stay in step.
                self.diverged.store(1 + b.bytes() as u64, Ordering::Relaxed);
                return Some(CollError::Truncate {
                    peer: r,
                    got: b.bytes(),
                    expected: a.bytes(),
                });
            }
            self.set_broken(c);
            return Some(if same_call && c == mine {
                CollError::Truncate {
                    peer: r,
                    got: b.bytes(),
                    expected: a.bytes(),
                }
            } else {
                CollError::Mismatch(format!(
                    "call #{c} on this communicator: rank {r} called {b}, rank {} {a}",
                    self.me
                ))
            });
        }
        None
    }

    /// Whether this rank, in a wait that may follow another route
    /// ([`Node::wait_or_diverge`]), follows rank `r`'s call `b` of the same
    /// collective as its own `a` whose length sent it on another ring: a
    /// bcast's non-root follows the root; a reduce's root follows the
    /// other ranks when every one of them described the call with that
    /// ring (as far as they came to it). Non-roots' lengths that differ
    /// among themselves, or a call on messages, leave the segment to be
    /// marked broken as before.
    fn may_follow(&self, a: CallInfo, r: u32, b: CallInfo) -> bool {
        if !self.follow.load(Ordering::Relaxed) || !a.on_segment() || !b.on_segment() {
            return false;
        }
        let root = a.root();
        match a.kind() {
            Some(CollKind::Bcast) => root == Some(u64::from(r)) && root != Some(u64::from(self.me)),
            Some(CollKind::Reduce) if root == Some(u64::from(self.me)) => {
                let c = self.call.load(Ordering::Relaxed);
                let route = self.route_of(b);
                // Ranks not at this call yet are not known to differ: if
                // one does, the root finds it in the op it follows.
                (0..self.p).filter(|&q| q != self.me).all(|q| {
                    self.described(q, c).is_none_or(|d| {
                        d.kind() == a.kind() && d.root() == root && self.route_of(d) == route
                    })
                })
            }
            _ => false,
        }
    }

    /// Runs `wait` (a wait for other ranks' flags in this rank's current
    /// call) so that evidence of their call on another ring ends it with
    /// their length recorded instead of marking the segment broken:
    /// `Some(their length)` then, for the caller to follow them (its call
    /// line now describes that length, the route it follows, so later
    /// looks do not take this call for one that differs); else the wait's
    /// outcome.
    pub(super) fn wait_or_diverge(
        &self,
        wait: impl FnOnce() -> Result<()>,
    ) -> Result<Option<usize>> {
        self.follow.store(true, Ordering::Relaxed);
        let waited = wait();
        self.follow.store(false, Ordering::Relaxed);
        if self.diverged.load(Ordering::Relaxed) != 0 {
            return Ok(Some(self.take_diverged()));
        }
        waited.map(|()| None)
    }

    /// The length recorded by [`Node::evidence`], cleared, and written
    /// into this rank's call line.
    #[cold]
    #[inline(never)]
    fn take_diverged(&self) -> usize {
        let n = self.diverged.swap(0, Ordering::Relaxed) as usize - 1;
        let c = self.call.load(Ordering::Relaxed);
        if let Some(a) = self.described(self.me, c) {
            self.call_word(self.me, c).store(
                (c & CALL_MASK) << INFO_BITS | a.with_bytes(n).0,
                Ordering::Release,
            );
        }
        n
    }

    /// The length rank `r` described for this rank's current call, if its
    /// call line holds it and it is the same collective.
    pub(super) fn bytes_of_call(&self, r: u32) -> Option<usize> {
        let c = self.call.load(Ordering::Relaxed);
        let (a, b) = (self.described(self.me, c)?, self.described(r, c)?);
        (a.kind() == b.kind() && a.root() == b.root()).then_some(b.bytes())
    }

    /// Looks, while waiting for rank `r`, for evidence that `r`'s calls
    /// differ from this rank's ([`Node::evidence`]), or for `r` past this
    /// rank's call while what this rank waits for from it (`pending`) is
    /// still missing. Fails as well when another rank found a difference
    /// (its own evidence first: the more precise error).
    #[cold]
    pub(super) fn look_for_mismatch(
        &self,
        r: u32,
        pending: &mut impl FnMut() -> Option<u32>,
    ) -> Result<()> {
        if let Some(e) = self.evidence(r) {
            return Err(e);
        }
        if let Some(e) = self.gone(r) {
            return Err(e);
        }
        let mine = self.call.load(Ordering::Relaxed);
        let theirs = self.latest_call(r);
        if theirs > mine && pending() == Some(r) {
            self.set_broken(mine);
            return Err(CollError::Mismatch(format!(
                "rank {r} left call #{mine} on this communicator{} without what rank {} waits \
                 for from it, and is at call #{theirs}",
                self.here(mine),
                self.me
            )));
        }
        self.check_broken()
    }

    /// Fails when rank `r`, which this rank still waits for, called
    /// `MPI_Finalize` (the pml got its BYE): it will never raise the flag.
    /// Asked again after the pml's answer: whatever `r` did before it
    /// finalized is visible by then.
    #[cold]
    pub(super) fn look_for_finalized(
        &self,
        ctx: &CollContext,
        r: u32,
        pending: &mut impl FnMut() -> Option<u32>,
    ) -> Result<()> {
        let Some(&w) = self.world.get(r as usize) else {
            return Ok(());
        };
        if ctx.p2p().peer_finalized(w) && pending() == Some(r) {
            return Err(CollError::PeerFinalized { rank: r });
        }
        Ok(())
    }

    /// The error for an op of rank `r` that carries another call's number
    /// (`theirs`, modulo 2^[`CALL_BITS`]) than this rank's: the evidence if the call
    /// lines still hold it, else the two numbers. Marks the segment broken.
    #[cold]
    pub(super) fn wrong_call(&self, r: u32, theirs: u64) -> CollError {
        self.evidence(r).unwrap_or_else(|| {
            let mine = self.call.load(Ordering::Relaxed);
            self.set_broken(mine);
            CollError::Mismatch(format!(
                "rank {r}'s data for call #{mine} on this communicator{} comes from its call \
                 #{theirs} (mod 2^{CALL_BITS})",
                self.here(mine)
            ))
        })
    }

    /// `" (<this rank's call c>, here)"`, or nothing when no longer described.
    fn here(&self, c: u64) -> String {
        self.described(self.me, c)
            .map_or_else(String::new, |a| format!(" ({a} here)"))
    }

    /// Records that call `c` differed across ranks (the first finder wins).
    fn set_broken(&self, c: u64) {
        let word = ((c + 1) << BROKEN_BY_BITS) | u64::from(self.me) & BROKEN_BY_MASK;
        let _ =
            self.seg
                .atomic(BROKEN)
                .compare_exchange(0, word, Ordering::AcqRel, Ordering::Relaxed);
        tracing::warn!(target: "coll_sm", "collective call #{c} differs across ranks: the segment's rings are out of step");
    }

    /// Fails once some rank found that the ranks' calls differ.
    fn check_broken(&self) -> Result<()> {
        let word = self.seg.atomic(BROKEN).load(Ordering::Acquire);
        if word == 0 {
            return Ok(());
        }
        Err(CollError::Mismatch(format!(
            "rank {} found that call #{} on this communicator differed across ranks; its \
             shared-memory collectives are out of step from there",
            word & BROKEN_BY_MASK,
            (word >> BROKEN_BY_BITS) - 1
        )))
    }
}
