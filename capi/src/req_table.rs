//! The table behind C `MPI_Request` handles: a slab indexed by the handle
//! (handle = index + 1; 0 is `MPI_REQUEST_NULL`), so starting and
//! completing a request costs a vector access instead of a hash-map insert
//! and removal (170 instructions per `MPI_Isend`/`MPI_Irecv` with the map,
//! a third of the C layer's share of a windowed small-message stream).
//! Freed handles are reused, most recent first, as Open MPI reuses its
//! request pointers.

use std::ffi::c_int;

use crate::request::Req;

/// One handle's slot.
#[derive(Default)]
enum Slot {
    #[default]
    Free,
    /// Taken out by [`ReqTable::take`] while its owner tests it: not free,
    /// so no other thread's new request gets the handle meanwhile.
    Taken,
    Live(Req),
}

#[derive(Default)]
pub(crate) struct ReqTable {
    slots: Vec<Slot>,
    /// Indices of free slots. An index put back by [`ReqTable::insert`]
    /// may stay listed: [`ReqTable::add`] skips slots that are not free.
    free: Vec<u32>,
}

impl ReqTable {
    fn index(h: c_int) -> Option<usize> {
        usize::try_from(h).ok()?.checked_sub(1)
    }

    /// Stores `r` under a new handle.
    pub(crate) fn add(&mut self, r: Req) -> c_int {
        while let Some(i) = self.free.pop() {
            let slot = &mut self.slots[i as usize];
            if matches!(slot, Slot::Free) {
                *slot = Slot::Live(r);
                return i as c_int + 1;
            }
        }
        self.slots.push(Slot::Live(r));
        self.slots.len() as c_int
    }

    pub(crate) fn get(&self, h: &c_int) -> Option<&Req> {
        match self.slots.get(Self::index(*h)?)? {
            Slot::Live(r) => Some(r),
            _ => None,
        }
    }

    /// The live request of `h`, its slot left as `leave`; a slot that is
    /// not live stays as it was.
    fn take_leaving(&mut self, h: &c_int, leave: Slot) -> Option<(usize, Req)> {
        let i = Self::index(*h)?;
        let slot = self.slots.get_mut(i)?;
        match std::mem::replace(slot, leave) {
            Slot::Live(r) => Some((i, r)),
            other => {
                *slot = other;
                None
            }
        }
    }

    /// Takes the request of `h` out; the handle becomes free.
    pub(crate) fn remove(&mut self, h: &c_int) -> Option<Req> {
        let (i, r) = self.take_leaving(h, Slot::Free)?;
        self.free.push(i as u32);
        Some(r)
    }

    /// Takes the request of `h` out to test it; the handle stays reserved
    /// until [`ReqTable::insert`] puts a request back or
    /// [`ReqTable::release`] frees it. (Removing and inserting again left
    /// the handle free in between: another thread's new request could get
    /// it, and the put-back then overwrote that request, MPICH's
    /// threads/comm/idup_nb.)
    pub(crate) fn take(&mut self, h: &c_int) -> Option<Req> {
        self.take_leaving(h, Slot::Taken).map(|(_, r)| r)
    }

    /// Frees a handle [`ReqTable::take`] reserved.
    pub(crate) fn release(&mut self, h: &c_int) {
        let Some(i) = Self::index(*h) else { return };
        if let Some(slot @ Slot::Taken) = self.slots.get_mut(i) {
            *slot = Slot::Free;
            self.free.push(i as u32);
        }
    }

    /// Puts `r` (back) under `h`: a handle [`ReqTable::take`] reserved, one
    /// [`ReqTable::remove`] freed (the patterns "take out, look, put
    /// back"), or a live one (replaced); returns what was there.
    pub(crate) fn insert(&mut self, h: c_int, r: Req) -> Option<Req> {
        let i = Self::index(h)?;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, Slot::default);
        }
        if matches!(self.slots[i], Slot::Free) {
            if self.free.last() == Some(&(i as u32)) {
                self.free.pop();
            } else if self.free.len() > 2 * self.slots.len() + 64 {
                // Stale entries from put-backs that were not the latest
                // free: rebuild the list (rare; bounds its size).
                let slots = &self.slots;
                self.free.clear();
                self.free.extend(
                    (0..slots.len() as u32)
                        .filter(|&j| matches!(slots[j as usize], Slot::Free) && j as usize != i),
                );
            }
        }
        match std::mem::replace(&mut self.slots[i], Slot::Live(r)) {
            Slot::Live(old) => Some(old),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn done() -> Req {
        Req::Done {
            st: crate::request::St::empty(),
            persist: None,
        }
    }

    #[test]
    fn handles_are_unique_while_live_and_reused_after_removal() {
        let mut t = ReqTable::default();
        let a = t.add(done());
        let b = t.add(done());
        assert_ne!(a, b);
        assert!(a > 0 && b > 0, "0 is MPI_REQUEST_NULL");
        assert!(t.get(&a).is_some());
        assert!(t.get(&0).is_none() && t.get(&-5).is_none() && t.get(&999).is_none());
        assert!(t.remove(&a).is_some());
        assert!(t.get(&a).is_none());
        assert!(t.remove(&a).is_none(), "double removal");
        let c = t.add(done());
        assert_eq!(c, a, "freed handle reused");
        assert_ne!(t.add(done()), b);
    }

    #[test]
    fn put_back_handles_are_not_handed_out_twice() {
        let mut t = ReqTable::default();
        let hs: Vec<c_int> = (0..8).map(|_| t.add(done())).collect();
        // Remove two, put the first back (not the latest freed), many times.
        for _ in 0..1000 {
            let r0 = t.remove(&hs[0]).unwrap();
            let r1 = t.remove(&hs[1]).unwrap();
            assert!(t.insert(hs[0], r0).is_none());
            assert!(t.insert(hs[1], r1).is_none());
        }
        assert!(t.free.len() <= 2 * t.slots.len() + 64, "free list bounded");
        let mut live: Vec<c_int> = hs.clone();
        for _ in 0..20 {
            let h = t.add(done());
            assert!(!live.contains(&h), "handle {h} handed out while live");
            live.push(h);
        }
    }

    #[test]
    fn taken_handles_are_not_handed_out_until_released() {
        let mut t = ReqTable::default();
        let a = t.add(done());
        let b = t.add(done());
        assert!(t.take(&a).is_some());
        assert!(t.get(&a).is_none() && t.take(&a).is_none() && t.remove(&a).is_none());
        // Other requests started meanwhile get other handles.
        let others: Vec<c_int> = (0..4).map(|_| t.add(done())).collect();
        assert!(!others.contains(&a) && !others.contains(&b));
        // Put back: live again under the same handle.
        assert!(t.insert(a, done()).is_none());
        assert!(t.get(&a).is_some());
        // Taken and released: free, handed out again.
        assert!(t.take(&b).is_some());
        t.release(&b);
        t.release(&b);
        assert_eq!(t.add(done()), b);
        // Releasing a live handle does nothing.
        t.release(&a);
        assert!(t.get(&a).is_some());
    }
}
