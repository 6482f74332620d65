//! The prefix rule's index: counts of the software-only queued receives by class, so that
//! "could an earlier software-only receive match some envelope this receive can match?" is a
//! handful of hash look-ups, whatever the depth.

use rustc_hash::FxHashMap;

use crate::types::{ContextId, Rank, RecvSpec, SourceSpec, Tag, TagSpec};

/// Counts of software-only queued receives. Two specifications *overlap* when some envelope
/// matches both: same context, compatible sources (equal or one is any), compatible tags (equal,
/// or one is any and the other is `>= 0`: `ANY_TAG` never matches a negative tag).
#[derive(Debug, Default)]
pub(crate) struct SoftIndex {
    /// Exact receives by (context, source, tag).
    exact: FxHashMap<(ContextId, Rank, Tag), u32>,
    /// Exact receives with a tag `>= 0`, by (context, source).
    exact_nonneg_by_cs: FxHashMap<(ContextId, Rank), u32>,
    /// Any-tag receives by (context, source).
    any_tag: FxHashMap<(ContextId, Rank), u32>,
    /// Any-source receives by (context, tag).
    any_src: FxHashMap<(ContextId, Tag), u32>,
    /// Any-source receives with a tag `>= 0`, by context.
    any_src_nonneg_by_c: FxHashMap<ContextId, u32>,
    /// Any-both receives by context.
    any_both: FxHashMap<ContextId, u32>,
    len: usize,
}

fn bump<K: std::hash::Hash + Eq>(m: &mut FxHashMap<K, u32>, k: K, add: bool) {
    if add {
        *m.entry(k).or_insert(0) += 1;
    } else if let Some(v) = m.get_mut(&k) {
        *v -= 1;
        if *v == 0 {
            m.remove(&k);
        }
    }
}

fn get<K: std::hash::Hash + Eq>(m: &FxHashMap<K, u32>, k: &K) -> bool {
    m.get(k).is_some_and(|v| *v > 0)
}

impl SoftIndex {
    /// Software-only receives counted now.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    fn update(&mut self, spec: &RecvSpec, add: bool) {
        let c = spec.context;
        match (spec.source, spec.tag) {
            (SourceSpec::Rank(s), TagSpec::Tag(t)) => {
                bump(&mut self.exact, (c, s, t), add);
                if t >= 0 {
                    bump(&mut self.exact_nonneg_by_cs, (c, s), add);
                }
            }
            (SourceSpec::Rank(s), TagSpec::Any) => {
                bump(&mut self.any_tag, (c, s), add);
            }
            (SourceSpec::Any, TagSpec::Tag(t)) => {
                bump(&mut self.any_src, (c, t), add);
                if t >= 0 {
                    bump(&mut self.any_src_nonneg_by_c, c, add);
                }
            }
            (SourceSpec::Any, TagSpec::Any) => bump(&mut self.any_both, c, add),
        }
    }

    /// A receive of `spec` joins the software-only set.
    pub(crate) fn add(&mut self, spec: &RecvSpec) {
        self.update(spec, true);
        self.len += 1;
    }

    /// A receive of `spec` leaves the software-only set.
    pub(crate) fn remove(&mut self, spec: &RecvSpec) {
        self.update(spec, false);
        self.len -= 1;
    }

    /// Does some software-only receive overlap `spec`? Exact for receives that name their
    /// source; conservative (`true` whenever any software-only receive is counted) for
    /// wildcard-source ones.
    pub(crate) fn overlaps(&self, spec: &RecvSpec) -> bool {
        if self.len == 0 {
            return false;
        }
        let c = spec.context;
        let any_both = get(&self.any_both, &c);
        match (spec.source, spec.tag) {
            (SourceSpec::Rank(s), TagSpec::Tag(t)) => {
                get(&self.exact, &(c, s, t))
                    || get(&self.any_src, &(c, t))
                    || (t >= 0 && (get(&self.any_tag, &(c, s)) || any_both))
            }
            (SourceSpec::Rank(s), TagSpec::Any) => {
                get(&self.exact_nonneg_by_cs, &(c, s))
                    || get(&self.any_tag, &(c, s))
                    || get(&self.any_src_nonneg_by_c, &c)
                    || any_both
            }
            // Wildcard-source receives never go to the NIC, so the index keeps no counts to
            // answer for them exactly (two fewer hash updates per exact receive): any
            // software-only receive on the context is reported as overlapping.
            (SourceSpec::Any, _) => true,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::types::Envelope;

    /// The index agrees with the definition (some envelope matches both) over a small space for
    /// receives that name their source, and is conservative for the others.
    #[test]
    fn overlap_agrees_with_brute_force() {
        let mut specs = Vec::new();
        for source in [SourceSpec::Any, SourceSpec::Rank(0), SourceSpec::Rank(1)] {
            for tag in [
                TagSpec::Any,
                TagSpec::Tag(0),
                TagSpec::Tag(1),
                TagSpec::Tag(-2),
            ] {
                for context in 0..2 {
                    specs.push(RecvSpec {
                        context,
                        source,
                        tag,
                    });
                }
            }
        }
        let mut envs = Vec::new();
        for c in 0..2 {
            for s in 0..2 {
                for t in [-2, 0, 1] {
                    envs.push(Envelope::new(c, s, t));
                }
            }
        }
        for a in &specs {
            let mut idx = SoftIndex::default();
            idx.add(a);
            for b in &specs {
                let brute = envs.iter().any(|e| a.matches(e) && b.matches(e));
                if b.source == SourceSpec::Any {
                    assert!(idx.overlaps(b), "{a} vs {b}: conservative");
                } else {
                    assert_eq!(idx.overlaps(b), brute, "{a} vs {b}");
                }
            }
            idx.remove(a);
            assert_eq!(idx.len(), 0);
            assert!(specs.iter().all(|b| !idx.overlaps(b)));
        }
    }
}
