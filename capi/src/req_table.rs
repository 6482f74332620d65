//! The table behind C `MPI_Request` handles: a slab indexed by the handle
//! (handle = index + 1; 0 is `MPI_REQUEST_NULL`), so starting and
//! completing a request costs a vector access instead of a hash-map insert
//! and removal (170 instructions per `MPI_Isend`/`MPI_Irecv` with the map,
//! a third of the C layer's share of a windowed small-message stream).
//! Freed handles are reused, most recent first, as Open MPI reuses its
//! request pointers.

use std::ffi::c_int;

use crate::request::Req;

#[derive(Default)]
pub(crate) struct ReqTable {
    slots: Vec<Option<Req>>,
    /// Indices of empty slots. An index put back by [`ReqTable::insert`]
    /// may stay listed: [`ReqTable::add`] skips occupied ones.
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
            if slot.is_none() {
                *slot = Some(r);
                return i as c_int + 1;
            }
        }
        self.slots.push(Some(r));
        self.slots.len() as c_int
    }

    pub(crate) fn get(&self, h: &c_int) -> Option<&Req> {
        self.slots.get(Self::index(*h)?)?.as_ref()
    }

    /// Takes the request of `h` out; the handle becomes free.
    pub(crate) fn remove(&mut self, h: &c_int) -> Option<Req> {
        let i = Self::index(*h)?;
        let r = self.slots.get_mut(i)?.take()?;
        self.free.push(i as u32);
        Some(r)
    }

    /// Puts `r` (back) under `h`, a handle [`ReqTable::remove`] freed (the
    /// patterns "take out, look, put back"); returns what was there.
    pub(crate) fn insert(&mut self, h: c_int, r: Req) -> Option<Req> {
        let i = Self::index(h)?;
        if i >= self.slots.len() {
            self.slots.resize_with(i + 1, || None);
        }
        if self.free.last() == Some(&(i as u32)) {
            self.free.pop();
        } else if self.free.len() > 2 * self.slots.len() + 64 {
            // Stale entries from put-backs that were not the latest free:
            // rebuild the list (rare; bounds its size).
            self.free.clear();
            let empty = (0..self.slots.len() as u32).filter(|&j| self.slots[j as usize].is_none());
            self.free.extend(empty.filter(|&j| j as usize != i));
        }
        self.slots[i].replace(r)
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
}
