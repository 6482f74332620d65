//! The posted-receive queue: a slab of receives, each on exactly one FIFO list keyed by its
//! class and (context, source?, tag?). Lists are in posting order; the posting sequence number
//! stored in each entry merges the (at most four) candidate list heads of an arrival.

use std::collections::hash_map::Entry as MapEntry;

use crate::bins::{new_maps, BinKey, BinMap, List, CLASSES, NIL};
use crate::types::{Envelope, PostSeq, RecvKey, RecvSpec, WildClass};

/// A slot of the receive slab. With `R = u64` it is 48 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct RecvSlot<R> {
    /// Posting sequence number.
    pub(crate) seq: PostSeq,
    /// The caller's handle (stale once the slot is free).
    pub(crate) recv: R,
    /// The spec, class-normalised (see [`BinKey`]).
    pub(crate) key: BinKey,
    pub(crate) prev: u32,
    /// Next in the list, or next free slot when free.
    pub(crate) next: u32,
    /// Bumped each time the slot is freed, so stale [`RecvKey`]s are detected.
    pub(crate) generation: u32,
    /// `WildClass as u8`, or [`FREE`].
    pub(crate) class: u8,
}

const FREE: u8 = u8::MAX;

/// The posted queue.
#[derive(Debug)]
pub(crate) struct Posted<R> {
    slots: Vec<RecvSlot<R>>,
    free: u32,
    maps: [BinMap; 4],
    /// Receives queued per class (wildcard counts let an arrival skip empty classes).
    per_class: [usize; 4],
    len: usize,
}

impl<R: Copy> Posted<R> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Posted {
            slots: Vec::with_capacity(capacity),
            free: NIL,
            maps: new_maps(capacity.min(1 << 16)),
            per_class: [0; 4],
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    #[inline]
    pub(crate) fn per_class(&self) -> [usize; 4] {
        self.per_class
    }

    /// Number of distinct (class, key) lists currently indexed.
    pub(crate) fn bins(&self) -> usize {
        self.maps.iter().map(|m| m.len()).sum()
    }

    /// Queue a receive at the tail of its list. The caller has checked the capacity limit and
    /// that no slab index reaches `NIL`.
    pub(crate) fn push(&mut self, spec: &RecvSpec, recv: R, seq: PostSeq) -> RecvKey {
        let class = spec.class();
        let key = BinKey::of_spec(spec);
        let idx = if self.free != NIL {
            let i = self.free;
            let s = &mut self.slots[i as usize];
            self.free = s.next;
            s.seq = seq;
            s.recv = recv;
            s.key = key;
            s.class = class as u8;
            i
        } else {
            let i = self.slots.len() as u32;
            self.slots.push(RecvSlot {
                seq,
                recv,
                key,
                prev: NIL,
                next: NIL,
                generation: 0,
                class: class as u8,
            });
            i
        };
        match self.maps[class as usize].entry(key) {
            MapEntry::Occupied(mut o) => {
                let l = o.get_mut();
                let tail = l.tail;
                l.tail = idx;
                self.slots[tail as usize].next = idx;
                let s = &mut self.slots[idx as usize];
                s.prev = tail;
                s.next = NIL;
            }
            MapEntry::Vacant(v) => {
                v.insert(List {
                    head: idx,
                    tail: idx,
                });
                let s = &mut self.slots[idx as usize];
                s.prev = NIL;
                s.next = NIL;
            }
        }
        self.per_class[class as usize] += 1;
        self.len += 1;
        RecvKey {
            index: idx,
            generation: self.slots[idx as usize].generation,
        }
    }

    /// The earliest-posted receive that matches `env`: the minimum posting sequence over the
    /// heads of the (up to four) lists whose receives match it. O(1) expected: at most four hash
    /// look-ups, fewer when a wildcard class is empty.
    #[inline]
    pub(crate) fn find(&self, env: &Envelope) -> Option<u32> {
        let mut best = NIL;
        let mut best_seq = PostSeq::MAX;
        for class in CLASSES {
            let c = class as usize;
            if self.per_class[c] == 0 {
                continue;
            }
            if env.tag < 0 && matches!(class, WildClass::AnyTag | WildClass::AnyBoth) {
                continue;
            }
            if let Some(l) = self.maps[c].get(&BinKey::of_env(env, class)) {
                let seq = self.slots[l.head as usize].seq;
                if seq < best_seq {
                    best_seq = seq;
                    best = l.head;
                }
            }
        }
        (best != NIL).then_some(best)
    }

    /// Fast path of find + remove when no wildcard receive is queued: one hash operation.
    /// Returns `None` without looking when a wildcard class is non-empty (the caller then uses
    /// [`Posted::find`] and [`Posted::remove`]) and `Some(None)` when nothing matched.
    #[inline]
    #[allow(clippy::option_option)]
    pub(crate) fn take_exact_only(
        &mut self,
        env: &Envelope,
    ) -> Option<Option<(R, RecvKey, PostSeq)>> {
        if self.per_class[1] | self.per_class[2] | self.per_class[3] != 0 {
            return None;
        }
        if self.per_class[0] == 0 {
            return Some(None);
        }
        let MapEntry::Occupied(mut o) = self.maps[0].entry(BinKey::of_env(env, WildClass::Exact))
        else {
            return Some(None);
        };
        let idx = o.get().head;
        let next = self.slots[idx as usize].next;
        if next == NIL {
            o.remove();
        } else {
            o.get_mut().head = next;
            self.slots[next as usize].prev = NIL;
        }
        Some(Some(self.release(idx, 0)))
    }

    /// Mark an unlinked slot free; its handle, old key and sequence.
    #[inline]
    fn release(&mut self, idx: u32, class: usize) -> (R, RecvKey, PostSeq) {
        let free = self.free;
        let slot = &mut self.slots[idx as usize];
        let out = (
            slot.recv,
            RecvKey {
                index: idx,
                generation: slot.generation,
            },
            slot.seq,
        );
        slot.class = FREE;
        slot.generation = slot.generation.wrapping_add(1);
        slot.prev = NIL;
        slot.next = free;
        self.free = idx;
        self.per_class[class] -= 1;
        self.len -= 1;
        out
    }

    /// The slot at `idx` (live or not).
    #[inline]
    pub(crate) fn slot(&self, idx: u32) -> &RecvSlot<R> {
        &self.slots[idx as usize]
    }

    /// The live slot named by `key`, if any.
    pub(crate) fn lookup(&self, key: RecvKey) -> Option<u32> {
        let s = self.slots.get(key.index as usize)?;
        (s.class != FREE && s.generation == key.generation).then_some(key.index)
    }

    /// Unlink and free a live slot; returns the handle and the key it had.
    pub(crate) fn remove(&mut self, idx: u32) -> (R, RecvKey, PostSeq) {
        let s = self.slots[idx as usize];
        debug_assert_ne!(s.class, FREE);
        let c = s.class as usize;
        if s.prev != NIL {
            self.slots[s.prev as usize].next = s.next;
        }
        if s.next != NIL {
            self.slots[s.next as usize].prev = s.prev;
        }
        if s.prev == NIL || s.next == NIL {
            if let MapEntry::Occupied(mut o) = self.maps[c].entry(s.key) {
                if s.prev == NIL && s.next == NIL {
                    o.remove();
                } else if s.prev == NIL {
                    o.get_mut().head = s.next;
                } else {
                    o.get_mut().tail = s.prev;
                }
            } else {
                debug_assert!(false, "posted receive without its bin");
            }
        }
        self.release(idx, c)
    }

    /// Live receives in posting order (O(n log n); for diagnostics and tests).
    pub(crate) fn snapshot(&self) -> Vec<(PostSeq, R)> {
        let mut v: Vec<(PostSeq, R)> = self
            .slots
            .iter()
            .filter(|s| s.class != FREE)
            .map(|s| (s.seq, s.recv))
            .collect();
        v.sort_by_key(|e| e.0);
        v
    }

    /// Slab slots allocated (live + free).
    pub(crate) fn slots_allocated(&self) -> usize {
        self.slots.len()
    }
}
