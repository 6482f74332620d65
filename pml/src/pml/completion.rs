//! Completion: `MPI_Test`, `MPI_Wait` and their any/some/all forms,
//! cancel and free, and the single polling round they wait with.

use crate::request::{ReqId, Status};
use crate::PmlError;

use super::Pml;

impl Pml {
    /// Whether request `id` completed, without releasing it (no progress).
    pub fn is_done(&self, id: ReqId) -> Result<bool, PmlError> {
        self.lock().core.is_done(id)
    }

    /// Polls the BTLs once.
    pub fn progress(&self) -> usize {
        self.lock().progress()
    }

    /// `MPI_Test`: the status if complete (the request is then released).
    pub fn test(&self, id: ReqId) -> Result<Option<Status>, PmlError> {
        let mut g = self.lock();
        if let Some(s) = g.core.test(id)? {
            return Ok(Some(s));
        }
        g.progress();
        g.core.test(id)
    }

    /// As [`Pml::test`] without polling the transports: for callers that
    /// test many requests per round and progress once for all of them.
    pub fn test_no_progress(&self, id: ReqId) -> Result<Option<Status>, PmlError> {
        self.lock().core.test(id)
    }

    /// `MPI_Wait`.
    pub fn wait(&self, id: ReqId) -> Result<Status, PmlError> {
        // The first round validates `id` (an error for a stale one); later
        // rounds use the cheap check.
        if let Some(s) = self.test(id)? {
            return Ok(s);
        }
        loop {
            self.idle();
            let mut g = self.lock();
            g.progress();
            if let Some(s) = g.core.take_done(id).map_err(|()| PmlError::Request)? {
                return Ok(s);
            }
        }
    }

    /// `MPI_Testany`: the index and status of one completed request (which
    /// is released and its slot set to `None`); `Ok(None)` if none is done.
    /// All-`None` input gives `Some((None, empty))` as MPI's MPI_UNDEFINED.
    pub fn testany(
        &self,
        ids: &mut [Option<ReqId>],
    ) -> Result<Option<(Option<usize>, Status)>, PmlError> {
        if ids.iter().all(Option::is_none) {
            return Ok(Some((None, Status::empty())));
        }
        let mut g = self.lock();
        for round in 0..2 {
            for (i, slot) in ids.iter_mut().enumerate() {
                if let Some(id) = *slot {
                    if let Some(s) = g.core.test(id)? {
                        *slot = None;
                        return Ok(Some((Some(i), s)));
                    }
                }
            }
            if round == 0 {
                g.progress();
            }
        }
        Ok(None)
    }

    /// `MPI_Waitany`.
    pub fn waitany(&self, ids: &mut [Option<ReqId>]) -> Result<(Option<usize>, Status), PmlError> {
        loop {
            if let Some(r) = self.testany(ids)? {
                return Ok(r);
            }
            self.idle();
        }
    }

    /// `MPI_Testsome`: every completed request (released, slot set to
    /// `None`), as (index, status).
    pub fn testsome(&self, ids: &mut [Option<ReqId>]) -> Result<Vec<(usize, Status)>, PmlError> {
        let mut g = self.lock();
        g.progress();
        let mut out = Vec::new();
        for (i, slot) in ids.iter_mut().enumerate() {
            if let Some(id) = *slot {
                if let Some(s) = g.core.test(id)? {
                    *slot = None;
                    out.push((i, s));
                }
            }
        }
        Ok(out)
    }

    /// `MPI_Waitsome`: waits until at least one completes (empty result only
    /// when every slot is `None`).
    pub fn waitsome(&self, ids: &mut [Option<ReqId>]) -> Result<Vec<(usize, Status)>, PmlError> {
        loop {
            if ids.iter().all(Option::is_none) {
                return Ok(Vec::new());
            }
            let r = self.testsome(ids)?;
            if !r.is_empty() {
                return Ok(r);
            }
            self.idle();
        }
    }

    /// `MPI_Testall`: all statuses once every request is complete (then all
    /// are released); `None` (nothing released) otherwise.
    pub fn testall(&self, ids: &mut [Option<ReqId>]) -> Result<Option<Vec<Status>>, PmlError> {
        let mut g = self.lock();
        g.progress();
        for id in ids.iter().flatten() {
            if !g.core.is_done(*id)? {
                return Ok(None);
            }
        }
        let mut out = Vec::with_capacity(ids.len());
        for slot in ids.iter_mut() {
            match slot.take() {
                Some(id) => out.push(g.core.test(id)?.unwrap_or_else(Status::empty)),
                None => out.push(Status::empty()),
            }
        }
        Ok(Some(out))
    }

    /// One round of a caller's `MPI_Waitall` loop, under one lock: when
    /// `test`, tests every pending request of `ids` (a completed one is
    /// released, its status put in `out` at its index and its slot set to
    /// `None`); then, if any is still pending, polls the transports once.
    /// Returns the polling round's events (0 when it did not poll) and the
    /// number still pending. The caller decides when to test again (after
    /// a round that handled something: testing 64 pending requests between
    /// two arrivals was most of a windowed receiver's time) and what to do
    /// between rounds (collectives' progress, yielding).
    pub fn waitall_round(
        &self,
        ids: &mut [Option<ReqId>],
        out: &mut [Status],
        test: bool,
    ) -> Result<(usize, usize), PmlError> {
        let mut g = self.lock();
        let mut left = 0;
        for (i, slot) in ids.iter_mut().enumerate() {
            let Some(id) = *slot else { continue };
            if test {
                if let Some(s) = g.core.test(id)? {
                    if let Some(o) = out.get_mut(i) {
                        *o = s;
                    }
                    *slot = None;
                    continue;
                }
            }
            left += 1;
        }
        let events = if left > 0 { g.progress() } else { 0 };
        Ok((events, left))
    }

    /// `MPI_Waitall`: waits for every request; statuses in input order
    /// (empty statuses for `None` slots).
    pub fn waitall(&self, ids: &mut [Option<ReqId>]) -> Result<Vec<Status>, PmlError> {
        let mut out = vec![Status::empty(); ids.len()];
        let mut left = ids.iter().filter(|s| s.is_some()).count();
        while left > 0 {
            {
                let mut g = self.lock();
                g.progress();
                for (i, slot) in ids.iter_mut().enumerate() {
                    if let Some(id) = *slot {
                        if let Some(s) = g.core.test(id)? {
                            out[i] = s;
                            *slot = None;
                            left -= 1;
                        }
                    }
                }
            }
            if left > 0 {
                self.idle();
            }
        }
        Ok(out)
    }

    /// `MPI_Cancel`: whether the request was cancelled (receives not yet
    /// matched only). The request must still be waited for or tested.
    pub fn cancel(&self, id: ReqId) -> Result<bool, PmlError> {
        let mut g = self.lock();
        let r = g.core.cancel(id)?;
        if r || !g.tm {
            return Ok(r);
        }
        // The offload path: a receive the NIC holds is cancelled by a DEL
        // that settles at the NIC (removed, or lost to a match already
        // made); wait for that so the answer is final.
        loop {
            if let Some(c) = g.core.cancel_outcome(id)? {
                return Ok(c);
            }
            g.progress();
            if let Some(c) = g.core.cancel_outcome(id)? {
                return Ok(c);
            }
            drop(g);
            self.idle();
            g = self.lock();
        }
    }

    /// `MPI_Request_free`.
    pub fn request_free(&self, id: ReqId) -> Result<(), PmlError> {
        self.lock().core.free_request(id)
    }
}
