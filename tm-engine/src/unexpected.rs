//! The unexpected-message queue: a slab of messages, each linked into up to four FIFO lists in
//! arrival order, one per receive class that could match it:
//!
//! | list | key | holds |
//! |---|---|---|
//! | exact | (context, source, tag) | every message |
//! | any tag | (context, source) | messages with tag >= 0 |
//! | any source | (context, tag) | every message |
//! | any both | (context) | messages with tag >= 0 |
//!
//! So the earliest-arrived message a receive of any class can match is the head of one list:
//! posting a receive, probing and matched probing cost O(1) expected whatever the class.
//! Removing a message unlinks it from its lists in O(1) (doubly linked; a hash look-up only
//! for lists where it is head or tail).

use std::collections::hash_map::Entry as MapEntry;

use crate::bins::{new_maps, BinKey, BinMap, List, CLASSES, NIL};
use crate::types::{Envelope, RecvSpec};

#[derive(Clone, Copy, Debug)]
struct Link {
    prev: u32,
    next: u32,
}

const UNLINKED: Link = Link {
    prev: NIL,
    next: NIL,
};

/// A slot of the message slab. With `M = u64` it is 56 bytes.
#[derive(Clone, Copy, Debug)]
pub(crate) struct MsgSlot<M> {
    pub(crate) msg: M,
    pub(crate) env: Envelope,
    /// One link per class list; for a free slot `links[0].next` is the next free slot.
    links: [Link; 4],
}

/// The unexpected queue.
#[derive(Debug)]
pub(crate) struct Unexpected<M> {
    slots: Vec<MsgSlot<M>>,
    free: u32,
    maps: [BinMap; 4],
    len: usize,
}

impl<M: Copy> Unexpected<M> {
    pub(crate) fn with_capacity(capacity: usize) -> Self {
        Unexpected {
            slots: Vec::with_capacity(capacity),
            free: NIL,
            maps: new_maps(capacity.min(1 << 16)),
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

    /// Queue a message at the tail of each of its lists.
    pub(crate) fn push(&mut self, env: Envelope, msg: M) {
        let idx = if self.free != NIL {
            let i = self.free;
            let s = &mut self.slots[i as usize];
            self.free = s.links[0].next;
            s.msg = msg;
            s.env = env;
            s.links = [UNLINKED; 4];
            i
        } else {
            let i = self.slots.len() as u32;
            self.slots.push(MsgSlot {
                msg,
                env,
                links: [UNLINKED; 4],
            });
            i
        };
        let n = if env.tag >= 0 { 4 } else { 2 };
        // Classes with a negative tag: exact (0) and any-source (2) only.
        for k in 0..n {
            let c = if n == 4 { k } else { k * 2 };
            let class = CLASSES[c];
            match self.maps[c].entry(BinKey::of_env(&env, class)) {
                MapEntry::Occupied(mut o) => {
                    let l = o.get_mut();
                    let tail = l.tail;
                    l.tail = idx;
                    self.slots[tail as usize].links[c].next = idx;
                    self.slots[idx as usize].links[c].prev = tail;
                }
                MapEntry::Vacant(v) => {
                    v.insert(List {
                        head: idx,
                        tail: idx,
                    });
                }
            }
        }
        self.len += 1;
    }

    /// The earliest-arrived message that a receive of `spec` matches.
    #[inline]
    pub(crate) fn find(&self, spec: &RecvSpec) -> Option<u32> {
        if self.len == 0 {
            return None;
        }
        self.maps[spec.class() as usize]
            .get(&BinKey::of_spec(spec))
            .map(|l| l.head)
    }

    #[inline]
    pub(crate) fn slot(&self, idx: u32) -> &MsgSlot<M> {
        &self.slots[idx as usize]
    }

    /// Unlink a live message from all its lists and free its slot.
    pub(crate) fn remove(&mut self, idx: u32) -> (Envelope, M) {
        let s = self.slots[idx as usize];
        let n = if s.env.tag >= 0 { 4 } else { 2 };
        for k in 0..n {
            let c = if n == 4 { k } else { k * 2 };
            let Link { prev, next } = s.links[c];
            if prev != NIL {
                self.slots[prev as usize].links[c].next = next;
            }
            if next != NIL {
                self.slots[next as usize].links[c].prev = prev;
            }
            if prev == NIL || next == NIL {
                if let MapEntry::Occupied(mut o) =
                    self.maps[c].entry(BinKey::of_env(&s.env, CLASSES[c]))
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
        let slot = &mut self.slots[idx as usize];
        slot.links = [UNLINKED; 4];
        slot.links[0].next = self.free;
        self.free = idx;
        self.len -= 1;
        (s.env, s.msg)
    }
}
