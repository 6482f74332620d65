//! Hash bins: the index from a (class-normalised) key to the head and tail of an intrusive FIFO
//! list of slab entries. Shared by the posted and the unexpected queue.

use rustc_hash::FxHashMap;

use crate::types::{Envelope, RecvSpec, SourceSpec, TagSpec, WildClass};

/// End of a list / no entry.
pub(crate) const NIL: u32 = u32::MAX;

/// A bin key: the context plus whichever of source and tag the class names (the others are 0).
/// 12 bytes; FxHash over three words (peers of one job are trusted, so no DoS-resistant hash).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct BinKey {
    context: u32,
    source: u32,
    tag: i32,
}

impl BinKey {
    /// The key under which a receive of this spec is filed (and under which the unexpected
    /// messages it could match are listed).
    #[inline]
    pub(crate) fn of_spec(spec: &RecvSpec) -> BinKey {
        BinKey {
            context: spec.context,
            source: match spec.source {
                SourceSpec::Any => 0,
                SourceSpec::Rank(r) => r,
            },
            tag: match spec.tag {
                TagSpec::Any => 0,
                TagSpec::Tag(t) => t,
            },
        }
    }

    /// The key of the list of class `class` that an envelope belongs to.
    #[inline]
    pub(crate) fn of_env(env: &Envelope, class: WildClass) -> BinKey {
        match class {
            WildClass::Exact => BinKey {
                context: env.context,
                source: env.source,
                tag: env.tag,
            },
            WildClass::AnyTag => BinKey {
                context: env.context,
                source: env.source,
                tag: 0,
            },
            WildClass::AnySource => BinKey {
                context: env.context,
                source: 0,
                tag: env.tag,
            },
            WildClass::AnyBoth => BinKey {
                context: env.context,
                source: 0,
                tag: 0,
            },
        }
    }
}

/// Head and tail of a non-empty list (empty lists are removed from the map, so the map never
/// grows with the number of distinct tags ever seen, only with the number queued).
#[derive(Clone, Copy, Debug)]
pub(crate) struct List {
    pub(crate) head: u32,
    pub(crate) tail: u32,
}

/// One index per class.
pub(crate) type BinMap = FxHashMap<BinKey, List>;

/// All four indexes of a queue.
pub(crate) fn new_maps(capacity: usize) -> [BinMap; 4] {
    std::array::from_fn(|_| FxHashMap::with_capacity_and_hasher(capacity, Default::default()))
}

/// All classes, in index order.
pub(crate) const CLASSES: [WildClass; 4] = [
    WildClass::Exact,
    WildClass::AnyTag,
    WildClass::AnySource,
    WildClass::AnyBoth,
];
