//! Process groups (MPI-3.1 §6.3): ordered sets of processes, identified by
//! world rank. Groups are immutable values; "free" is dropping them.
//! `MPI_GROUP_EMPTY` is [`Group::empty`]; `MPI_UNDEFINED` results are `None`.

use std::collections::HashSet;
use std::sync::Arc;

use tmpi_coll::{CollError, Result};

/// Result of comparing two groups or communicators.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compare {
    /// `MPI_IDENT`: the same members in the same order (groups) or the same communicator.
    Ident,
    /// `MPI_CONGRUENT`: communicators with identical groups but different contexts.
    Congruent,
    /// `MPI_SIMILAR`: the same members in another order.
    Similar,
    /// `MPI_UNEQUAL`.
    Unequal,
}

/// An ordered set of processes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Group {
    procs: Arc<[u32]>,
}

impl Group {
    /// `MPI_GROUP_EMPTY`.
    pub fn empty() -> Self {
        Group {
            procs: Arc::from(Vec::new()),
        }
    }

    /// A group of these world ranks in this order; duplicates are an error.
    pub fn from_world_ranks(procs: Vec<u32>) -> Result<Self> {
        let mut seen = HashSet::with_capacity(procs.len());
        for &p in &procs {
            if !seen.insert(p) {
                return Err(CollError::Group(format!("process {p} appears twice")));
            }
        }
        Ok(Group {
            procs: procs.into(),
        })
    }

    /// Number of members (`MPI_Group_size`).
    pub fn size(&self) -> u32 {
        self.procs.len() as u32
    }

    /// Rank of world rank `world` in the group (`MPI_Group_rank` with the caller's world rank), `None` = `MPI_UNDEFINED`.
    pub fn rank_of(&self, world: u32) -> Option<u32> {
        self.procs
            .iter()
            .position(|&p| p == world)
            .map(|i| i as u32)
    }

    /// World ranks of the members in group order.
    pub fn world_ranks(&self) -> &Arc<[u32]> {
        &self.procs
    }

    /// World rank of group rank `r`.
    pub fn world_rank(&self, r: u32) -> Result<u32> {
        self.procs.get(r as usize).copied().ok_or(CollError::Rank {
            rank: i64::from(r),
            size: self.size(),
        })
    }

    fn check_ranks(&self, ranks: &[u32]) -> Result<()> {
        let mut seen = HashSet::with_capacity(ranks.len());
        for &r in ranks {
            if r >= self.size() {
                return Err(CollError::Rank {
                    rank: i64::from(r),
                    size: self.size(),
                });
            }
            if !seen.insert(r) {
                return Err(CollError::Rank {
                    rank: i64::from(r),
                    size: self.size(),
                });
            }
        }
        Ok(())
    }

    /// `MPI_Group_incl`: members `ranks` in that order (distinct, in range).
    pub fn incl(&self, ranks: &[u32]) -> Result<Group> {
        self.check_ranks(ranks)?;
        Ok(Group {
            procs: ranks.iter().map(|&r| self.procs[r as usize]).collect(),
        })
    }

    /// `MPI_Group_excl`: every member except `ranks` (distinct, in range), in group order.
    pub fn excl(&self, ranks: &[u32]) -> Result<Group> {
        self.check_ranks(ranks)?;
        let out: HashSet<u32> = ranks.iter().copied().collect();
        Ok(Group {
            procs: (0..self.size())
                .filter(|r| !out.contains(r))
                .map(|r| self.procs[r as usize])
                .collect(),
        })
    }

    /// Expands `(first, last, stride)` triplets (MPI-3.1 §6.3.2).
    fn expand(&self, ranges: &[(i64, i64, i64)]) -> Result<Vec<u32>> {
        let mut out = Vec::new();
        for &(first, last, stride) in ranges {
            if stride == 0 {
                return Err(CollError::Arg("range stride 0".into()));
            }
            for r in [first, last] {
                if r < 0 || r >= i64::from(self.size()) {
                    return Err(CollError::Rank {
                        rank: r,
                        size: self.size(),
                    });
                }
            }
            let mut r = first;
            while (stride > 0 && r <= last) || (stride < 0 && r >= last) {
                out.push(r as u32);
                r += stride;
            }
        }
        Ok(out)
    }

    /// `MPI_Group_range_incl`.
    pub fn range_incl(&self, ranges: &[(i64, i64, i64)]) -> Result<Group> {
        self.incl(&self.expand(ranges)?)
    }

    /// `MPI_Group_range_excl`.
    pub fn range_excl(&self, ranges: &[(i64, i64, i64)]) -> Result<Group> {
        self.excl(&self.expand(ranges)?)
    }

    /// `MPI_Group_union`: members of `self`, then those of `other` not in `self`.
    pub fn union(&self, other: &Group) -> Group {
        let mine: HashSet<u32> = self.procs.iter().copied().collect();
        let mut v = self.procs.to_vec();
        v.extend(other.procs.iter().filter(|p| !mine.contains(p)));
        Group { procs: v.into() }
    }

    /// `MPI_Group_intersection`: members of `self` also in `other`, in `self`'s order.
    pub fn intersection(&self, other: &Group) -> Group {
        let theirs: HashSet<u32> = other.procs.iter().copied().collect();
        Group {
            procs: self
                .procs
                .iter()
                .copied()
                .filter(|p| theirs.contains(p))
                .collect(),
        }
    }

    /// `MPI_Group_difference`: members of `self` not in `other`, in `self`'s order.
    pub fn difference(&self, other: &Group) -> Group {
        let theirs: HashSet<u32> = other.procs.iter().copied().collect();
        Group {
            procs: self
                .procs
                .iter()
                .copied()
                .filter(|p| !theirs.contains(p))
                .collect(),
        }
    }

    /// `MPI_Group_translate_ranks`: the rank in `other` of each of `ranks`
    /// (`None` = `MPI_UNDEFINED`).
    pub fn translate_ranks(&self, ranks: &[u32], other: &Group) -> Result<Vec<Option<u32>>> {
        ranks
            .iter()
            .map(|&r| Ok(other.rank_of(self.world_rank(r)?)))
            .collect()
    }

    /// `MPI_Group_compare`.
    pub fn compare(&self, other: &Group) -> Compare {
        if self.procs == other.procs {
            return Compare::Ident;
        }
        if self.size() == other.size() {
            let a: HashSet<u32> = self.procs.iter().copied().collect();
            if other.procs.iter().all(|p| a.contains(p)) {
                return Compare::Similar;
            }
        }
        Compare::Unequal
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn g(v: &[u32]) -> Group {
        Group::from_world_ranks(v.to_vec()).unwrap()
    }

    #[test]
    fn set_operations_keep_mpi_order() {
        let a = g(&[5, 3, 9, 1]);
        let b = g(&[1, 7, 5]);
        assert_eq!(a.union(&b), g(&[5, 3, 9, 1, 7]));
        assert_eq!(a.intersection(&b), g(&[5, 1]));
        assert_eq!(b.intersection(&a), g(&[1, 5]));
        assert_eq!(a.difference(&b), g(&[3, 9]));
        assert_eq!(a.incl(&[3, 0]).unwrap(), g(&[1, 5]));
        assert_eq!(a.excl(&[0, 2]).unwrap(), g(&[3, 1]));
        assert_eq!(
            a.translate_ranks(&[0, 1, 3], &b).unwrap(),
            [Some(2), None, Some(0)]
        );
        assert_eq!(a.rank_of(9), Some(2));
        assert_eq!(a.rank_of(2), None);
        assert_eq!(Group::empty().size(), 0);
        assert_eq!(a.intersection(&Group::empty()), Group::empty());
    }

    #[test]
    fn ranges() {
        let w = g(&(0..10).collect::<Vec<_>>());
        assert_eq!(w.range_incl(&[(0, 9, 3)]).unwrap(), g(&[0, 3, 6, 9]));
        assert_eq!(
            w.range_incl(&[(8, 2, -3), (1, 1, 1)]).unwrap(),
            g(&[8, 5, 2, 1])
        );
        assert_eq!(w.range_excl(&[(0, 8, 2)]).unwrap(), g(&[1, 3, 5, 7, 9]));
        assert_eq!(
            w.range_incl(&[(0, 10, 1)]).unwrap_err().class(),
            tmpi_base::error::MpiErrorClass::Rank
        );
        assert_eq!(
            w.range_incl(&[(0, 4, 0)]).unwrap_err().class(),
            tmpi_base::error::MpiErrorClass::Arg
        );
        // Overlapping ranges name a rank twice.
        assert!(w.range_incl(&[(0, 4, 1), (4, 6, 1)]).is_err());
    }

    #[test]
    fn compare_and_errors() {
        assert_eq!(g(&[1, 2, 3]).compare(&g(&[1, 2, 3])), Compare::Ident);
        assert_eq!(g(&[1, 2, 3]).compare(&g(&[3, 1, 2])), Compare::Similar);
        assert_eq!(g(&[1, 2, 3]).compare(&g(&[1, 2, 4])), Compare::Unequal);
        assert_eq!(g(&[1, 2]).compare(&g(&[1, 2, 3])), Compare::Unequal);
        assert_eq!(Group::empty().compare(&Group::empty()), Compare::Ident);
        let a = g(&[4, 5]);
        assert_eq!(
            a.incl(&[2]).unwrap_err().class(),
            tmpi_base::error::MpiErrorClass::Rank
        );
        assert_eq!(
            a.incl(&[1, 1]).unwrap_err().class(),
            tmpi_base::error::MpiErrorClass::Rank
        );
        assert!(Group::from_world_ranks(vec![1, 1]).is_err());
        assert!(a.translate_ranks(&[7], &a).is_err());
    }
}
