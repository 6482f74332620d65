//! The unexpected-message queue: a slab of messages in one arrival-ordered list, each also
//! linked into FIFO lists (arrival order) for every receive class that could match it:
//!
//! | list | key | holds | maintained |
//! |---|---|---|---|
//! | arrival | (none) | every message | always |
//! | exact | (context, source, tag) | every message | always |
//! | any tag | (context, source) | messages with tag >= 0 | while wildcard indexing is on |
//! | any source | (context, tag) | every message | while wildcard indexing is on |
//! | any both | (context) | messages with tag >= 0 | while wildcard indexing is on |
//!
//! The earliest-arrived message a receive of any class can match is the head of one list, so
//! posting a receive, probing and matched probing cost one hash look-up.
//!
//! **Wildcard indexing is lazy.** It is off while the queue has only seen exact receives and
//! probes: a message then costs one hash operation to queue and one to remove. The first
//! wildcard receive or probe that finds it off switches it on by walking the arrival list once
//! (O(queued)); it stays on, each message costing up to 4 hash operations, until the queue
//! drains, which switches it off again for free (every wildcard list is empty then). Each
//! message is indexed at most once per switch-on, so the rebuild is amortised O(1) per message.

use std::collections::hash_map::Entry as MapEntry;

use crate::bins::{new_maps, BinKey, BinMap, List, CLASSES, NIL};
use crate::types::{Envelope, RecvSpec, WildClass};

#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
};

/// Index of the arrival-list link in [`MsgSlot::links`].
const ARRIVAL: usize = 4;

/// A slot of the message slab. With `M = u64` it is 64 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MsgSlot<M> {
    pub(crate) msg: M,
    pub(crate) env: Envelope,
    /// One link per class list (indexed by `WildClass as usize`) and the arrival list
    /// ([`ARRIVAL`]); for a free slot `links[0].next` is the next free slot.
    links: [Link; 5],
}

/// The unexpected queue.
#[derive(Debug)]
pub(crate) struct Unexpected<M> {
    slots: Vec<MsgSlot<M>>,
    free: u32,
    maps: [BinMap; 4],
    /// All queued messages in arrival order.
    arrival: List,
    /// Are the any-tag, any-source and any-both lists maintained?
    wild_indexed: bool,
    len: usize,
}

/// The wildcard classes a message with this tag belongs to.
#[inline]
fn wild_classes(tag: i32) -> &'static [usize] {
    const ALL: [usize; 3] = [
        WildClass::AnyTag as usize,
        WildClass::AnySource as usize,
        WildClass::AnyBoth as usize,
    ];
    const NEGATIVE: [usize; 1] = [WildClass::AnySource as usize];
    if tag >= 0 {
        &ALL
    } else {
        &NEGATIVE
    }
}

impl<M: Copy> Unexpected<M> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Unexpected {
            slots: Vec::with_capacity(capacity),
            free: NIL,
            maps: new_maps(capacity.min(1 << 16)),
            arrival: List {
                head: NIL,
                tail: NIL,
            },
            wild_indexed: false,
            len: 0,
        }
    }

    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// Number of distinct (class, key) lists currently indexed.
    pub(crate) fn bins(&self) -> usize {
        self.maps.iter().map(|m| m.len()).sum()
    }

    /// Slab slots allocated (live + free).
    pub(crate) fn slots_allocated(&self) -> usize {
        self.slots.len()
    }

    /// Is wildcard indexing on (for tests and statistics)?
    pub(crate) fn wild_indexed(&self) -> bool {
        self.wild_indexed
    }

    /// Append `idx` to its list of class `c`.
    #[inline]
    fn link(&mut self, idx: u32, c: usize) {
        let key = BinKey::of_env(&self.slots[idx as usize].env, CLASSES[c]);
        match self.maps[c].entry(key) {
            MapEntry::Occupied(mut o) => {
                let l = o.get_mut();
                let tail = l.tail;
                l.tail = idx;
                self.slots[tail as usize].links[c].next = idx;
                self.slots[idx as usize].links[c] = Link {
                    prev: tail,
                    next: NIL,
                };
            }
            MapEntry::Vacant(v) => {
                v.insert(List {
                    head: idx,
                    tail: idx,
                });
                self.slots[idx as usize].links[c] = UNLINKED;
            }
        }
    }

    /// Remove `idx` from its list of class `c`.
    #[inline]
    fn unlink(&mut self, idx: u32, c: usize) {
        let s = &self.slots[idx as usize];
        let Link { prev, next } = s.links[c];
        let env = s.env;
        if prev != NIL {
            self.slots[prev as usize].links[c].next = next;
        }
        if next != NIL {
            self.slots[next as usize].links[c].prev = prev;
        }
        if prev == NIL || next == NIL {
            if let MapEntry::Occupied(mut o) = self.maps[c].entry(BinKey::of_env(&env, CLASSES[c]))
            {
                if prev == NIL && next == NIL {
                    o.remove();
                } else if prev == NIL {
                    o.get_mut().head = next;
                } else {
                    o.get_mut().tail = prev;
                }
            } else {
                debug_assert!(false, "unexpected message without its bin");
            }
        }
    }

    /// Queue a message at the tail of each of its lists.
    pub(crate) fn push(&mut self, env: Envelope, msg: M) {
        let slot = MsgSlot {
            msg,
            env,
            links: [UNLINKED; 5],
        };
        let idx = if self.free != NIL {
            let i = self.free;
            self.free = self.slots[i as usize].links[0].next;
            self.slots[i as usize] = slot;
            i
        } else {
            self.slots.push(slot);
            (self.slots.len() - 1) as u32
        };
        // Arrival list: no hashing.
        let tail = self.arrival.tail;
        if tail == NIL {
            self.arrival.head = idx;
        } else {
            self.slots[tail as usize].links[ARRIVAL].next = idx;
            self.slots[idx as usize].links[ARRIVAL].prev = tail;
        }
        self.arrival.tail = idx;
        self.link(idx, WildClass::Exact as usize);
        if self.wild_indexed {
            for &c in wild_classes(env.tag) {
                self.link(idx, c);
            }
        }
        self.len += 1;
    }

    /// Switch wildcard indexing on: one pass over the arrival list.
    #[cold]
    fn build_wild_index(&mut self) {
        tracing::trace!(
            depth = self.len,
            "tm-engine: building wildcard unexpected index"
        );
        let mut idx = self.arrival.head;
        while idx != NIL {
            for &c in wild_classes(self.slots[idx as usize].env.tag) {
                self.link(idx, c);
            }
            idx = self.slots[idx as usize].links[ARRIVAL].next;
        }
        self.wild_indexed = true;
    }

    /// The earliest-arrived message that a receive of `spec` matches (switches wildcard
    /// indexing on if `spec` is a wildcard and it was off).
    #[inline]
    pub(crate) fn find(&mut self, spec: &RecvSpec) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let class = spec.class();
        if class != WildClass::Exact && !self.wild_indexed {
            self.build_wild_index();
        }
        self.maps[class as usize]
            .get(&BinKey::of_spec(spec))
            .map(|l| l.head)
    }

    /// Like [`Unexpected::find`] without changing anything: a wildcard spec with indexing off
    /// walks the arrival list (O(queued)).
    pub(crate) fn peek(&self, spec: &RecvSpec) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        let class = spec.class();
        if class == WildClass::Exact || self.wild_indexed {
            return self.maps[class as usize]
                .get(&BinKey::of_spec(spec))
                .map(|l| l.head);
        }
        let mut idx = self.arrival.head;
        while idx != NIL {
            let s = &self.slots[idx as usize];
            if spec.matches(&s.env) {
                return Some(idx);
            }
            idx = s.links[ARRIVAL].next;
        }
        None
    }

    #[inline]
    pub(crate) fn slot(&self, idx: u32) -> &MsgSlot<M> {
        &self.slots[idx as usize]
    }

    /// Unlink a live message from all its lists and free its slot.
    pub(crate) fn remove(&mut self, idx: u32) -> (Envelope, M) {
        let s = self.slots[idx as usize];
        self.unlink(idx, WildClass::Exact as usize);
        if self.wild_indexed {
            for &c in wild_classes(s.env.tag) {
                self.unlink(idx, c);
            }
        }
        let Link { prev, next } = s.links[ARRIVAL];
        if prev == NIL {
            self.arrival.head = next;
        } else {
            self.slots[prev as usize].links[ARRIVAL].next = next;
        }
        if next == NIL {
            self.arrival.tail = prev;
        } else {
            self.slots[next as usize].links[ARRIVAL].prev = prev;
        }
        let slot = &mut self.slots[idx as usize];
        slot.links = [UNLINKED; 5];
        slot.links[0].next = self.free;
        self.free = idx;
        self.len -= 1;
        if self.len == 0 {
            // Every list is empty: indexing off costs nothing and is rebuilt on demand.
            self.wild_indexed = false;
        }
        (s.env, s.msg)
    }
}
