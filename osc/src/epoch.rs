//! An origin's synchronisation state, shared by every component: which
//! access and exposure epochs are open (fence, locks, lock_all, PSCW), and
//! the checks MPI's rules put on each call, with the same
//! [`OscError::Sync`] errors whichever component serves the window. The
//! components do the communication; this module only says whether a call
//! fits the window's state and records what it opened or closed.

use std::collections::BTreeMap;

use crate::{assert, LockType, OscError, Result};

/// `Ok` when `r` is a rank of a window of `size` ranks.
#[inline]
pub(crate) fn check_rank(r: i32, size: i32) -> Result<()> {
    if (0..size).contains(&r) {
        Ok(())
    } else {
        Err(OscError::Rank(format!(
            "rank {r} is not in the window's group of {size}"
        )))
    }
}

/// The epochs open on one window at this process.
#[derive(Debug, Default)]
pub(crate) struct Epochs {
    /// A fence opened an access and exposure epoch.
    pub fence: bool,
    /// Operations were issued in the fence's epoch.
    pub fence_ops: bool,
    /// Passive-target locks held: target → (type, taken with NOCHECK).
    pub locks: BTreeMap<i32, (LockType, bool)>,
    /// `MPI_Win_lock_all` is open (taken with NOCHECK).
    pub lock_all: Option<bool>,
    /// The targets of an open PSCW access epoch.
    pub start: Option<Vec<i32>>,
    /// The origins of an open PSCW exposure epoch.
    pub post: Option<Vec<i32>>,
}

impl Epochs {
    /// A lock or PSCW access epoch begins: a fence's epoch, if one was
    /// opened, ends here when no operation used it (MPI: a fence starts an
    /// epoch only when operations follow); with operations in it, or a
    /// PSCW access epoch open, the call is misplaced.
    pub fn leave_fence(&mut self, call: &str) -> Result<()> {
        if self.start.is_some() {
            return Err(OscError::Sync(format!(
                "{call} inside a PSCW access epoch (MPI_Win_start ... MPI_Win_complete)"
            )));
        }
        if self.fence && self.fence_ops {
            return Err(OscError::Sync(format!(
                "{call} inside a fence epoch with operations (call MPI_Win_fence first)"
            )));
        }
        self.fence = false;
        Ok(())
    }

    /// Whether the origin may access `target` now (some epoch covers it).
    pub fn access(&self, target: i32) -> Result<()> {
        if self.fence
            || self.lock_all.is_some()
            || self.locks.contains_key(&target)
            || self.start.as_ref().is_some_and(|g| g.contains(&target))
        {
            Ok(())
        } else {
            Err(OscError::Sync(format!(
                "no access epoch covers rank {target} (call MPI_Win_fence, MPI_Win_lock, MPI_Win_lock_all or MPI_Win_start first)"
            )))
        }
    }

    /// An operation towards `target` is issued: [`Epochs::access`], and a
    /// fence's epoch now has operations.
    pub fn operation(&mut self, target: i32) -> Result<()> {
        self.access(target)?;
        if self.fence && self.locks.is_empty() && self.lock_all.is_none() && self.start.is_none() {
            self.fence_ops = true;
        }
        Ok(())
    }

    /// `MPI_Win_fence` may run (no lock or PSCW epoch open).
    pub fn fence_check(&self) -> Result<()> {
        if !self.locks.is_empty()
            || self.lock_all.is_some()
            || self.start.is_some()
            || self.post.is_some()
        {
            return Err(OscError::Sync(
                "MPI_Win_fence inside a lock or PSCW epoch".into(),
            ));
        }
        Ok(())
    }

    /// A fence with assertions `a` ended: it opens the next epoch unless
    /// `MPI_MODE_NOSUCCEED`.
    pub fn fence_done(&mut self, a: u32) {
        self.fence = a & assert::NOSUCCEED == 0;
        self.fence_ops = false;
    }

    /// `MPI_Win_lock` of `rank` may run (checked in range by the caller).
    pub fn lock_check(&mut self, rank: i32) -> Result<()> {
        if self.locks.contains_key(&rank) || self.lock_all.is_some() {
            return Err(OscError::Sync(format!(
                "rank {rank} of this window is locked already"
            )));
        }
        self.leave_fence("MPI_Win_lock")
    }

    /// `MPI_Win_unlock` of `rank` may run: whether the lock was taken with
    /// `MPI_MODE_NOCHECK`.
    pub fn unlock_check(&self, rank: i32) -> Result<bool> {
        match self.locks.get(&rank) {
            Some(&(_, nocheck)) => Ok(nocheck),
            None => Err(OscError::Sync(format!(
                "MPI_Win_unlock of rank {rank}, which this process has not locked"
            ))),
        }
    }

    /// `MPI_Win_lock_all` may run.
    pub fn lock_all_check(&mut self) -> Result<()> {
        if !self.locks.is_empty() || self.lock_all.is_some() {
            return Err(OscError::Sync(
                "MPI_Win_lock_all while holding locks on this window".into(),
            ));
        }
        self.leave_fence("MPI_Win_lock_all")
    }

    /// `MPI_Win_unlock_all` may run: whether lock_all was taken with
    /// `MPI_MODE_NOCHECK`.
    pub fn unlock_all_check(&self) -> Result<bool> {
        self.lock_all
            .ok_or_else(|| OscError::Sync("MPI_Win_unlock_all without MPI_Win_lock_all".into()))
    }

    /// `MPI_Win_flush(rank)` (`None`: `_all`) may run on a window of
    /// `size` ranks: a passive-target epoch covers its targets.
    pub fn flush_check(&self, rank: Option<i32>, size: i32) -> Result<()> {
        match rank {
            Some(r) => {
                check_rank(r, size)?;
                if !self.locks.contains_key(&r) && self.lock_all.is_none() {
                    return Err(OscError::Sync(format!(
                        "MPI_Win_flush of rank {r} outside a passive-target epoch on it"
                    )));
                }
            }
            None => {
                if self.locks.is_empty() && self.lock_all.is_none() {
                    return Err(OscError::Sync(
                        "MPI_Win_flush_all outside a passive-target epoch".into(),
                    ));
                }
            }
        }
        Ok(())
    }

    /// The targets `MPI_Win_flush(rank)` (`None`: `_all`) completes on a
    /// window of `size` ranks, when a passive-target epoch covers them.
    pub fn flush_targets(&self, rank: Option<i32>, size: i32) -> Result<Vec<i32>> {
        self.flush_check(rank, size)?;
        Ok(match rank {
            Some(r) => vec![r],
            None if self.lock_all.is_some() => (0..size).collect(),
            None => self.locks.keys().copied().collect(),
        })
    }

    /// `MPI_Win_flush_local(rank)` (`None`: `_all`) may run.
    pub fn flush_local_check(&self, rank: Option<i32>, size: i32) -> Result<()> {
        if let Some(r) = rank {
            check_rank(r, size)?;
            if !self.locks.contains_key(&r) && self.lock_all.is_none() {
                return Err(OscError::Sync(format!(
                    "MPI_Win_flush_local of rank {r} outside a passive-target epoch on it"
                )));
            }
        } else if self.locks.is_empty() && self.lock_all.is_none() {
            return Err(OscError::Sync(
                "MPI_Win_flush_local_all outside a passive-target epoch".into(),
            ));
        }
        Ok(())
    }

    /// A passive-target epoch covers `rank` (request-based operations need
    /// one).
    pub fn passive(&self, rank: i32) -> Result<()> {
        if self.locks.contains_key(&rank) || self.lock_all.is_some() {
            Ok(())
        } else {
            Err(OscError::Sync(format!(
                "request-based operations need a passive-target epoch on rank {rank} (MPI_Win_lock or MPI_Win_lock_all)"
            )))
        }
    }

    /// `MPI_Win_post` to `group` opens the exposure epoch.
    pub fn post_begin(&mut self, group: &[i32]) -> Result<()> {
        if self.post.is_some() {
            return Err(OscError::Sync(
                "MPI_Win_post while an exposure epoch is open".into(),
            ));
        }
        self.post = Some(group.to_vec());
        Ok(())
    }

    /// `MPI_Win_start` may run (the caller records the group once the
    /// targets posted).
    pub fn start_check(&mut self) -> Result<()> {
        if self.start.is_some() || !self.locks.is_empty() || self.lock_all.is_some() {
            return Err(OscError::Sync(
                "MPI_Win_start while an access epoch is open".into(),
            ));
        }
        self.leave_fence("MPI_Win_start")
    }

    /// The targets `MPI_Win_complete` completes.
    pub fn complete_group(&self) -> Result<Vec<i32>> {
        self.start
            .clone()
            .ok_or_else(|| OscError::Sync("MPI_Win_complete without MPI_Win_start".into()))
    }

    /// How many origins `MPI_Win_wait`/`MPI_Win_test` waits for.
    pub fn wait_count(&self) -> Result<usize> {
        self.post.as_ref().map(Vec::len).ok_or_else(|| {
            OscError::Sync("MPI_Win_wait or MPI_Win_test without MPI_Win_post".into())
        })
    }

    /// `MPI_Win_free` may run (every epoch closed).
    pub fn free_check(&self) -> Result<()> {
        if !self.locks.is_empty()
            || self.lock_all.is_some()
            || self.start.is_some()
            || self.post.is_some()
        {
            return Err(OscError::Sync(
                "MPI_Win_free with an epoch still open (unlock, complete or wait first)".into(),
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_base::error::MpiErrorClass;

    #[test]
    fn epochs_follow_mpis_rules() {
        let mut e = Epochs::default();
        assert_eq!(e.access(0).unwrap_err().class(), MpiErrorClass::RmaSync);
        e.fence_done(0);
        e.operation(1).unwrap();
        assert!(
            e.lock_check(1).is_err(),
            "lock inside a fence epoch with ops"
        );
        e.fence_done(assert::NOSUCCEED);
        e.lock_check(1).unwrap();
        e.locks.insert(1, (LockType::Shared, false));
        assert!(e.lock_check(1).is_err(), "locked twice");
        assert!(e.lock_all_check().is_err());
        assert!(e.fence_check().is_err());
        assert!(e.free_check().is_err());
        assert_eq!(e.flush_targets(None, 4).unwrap(), vec![1]);
        assert!(e.flush_targets(Some(2), 4).is_err());
        assert_eq!(
            e.flush_targets(Some(9), 4).unwrap_err().class(),
            MpiErrorClass::Rank
        );
        assert!(!e.unlock_check(1).unwrap());
        assert!(e.unlock_check(2).is_err());
        e.locks.clear();
        e.start_check().unwrap();
        e.start = Some(vec![0, 2]);
        assert!(e.access(2).is_ok() && e.access(1).is_err());
        assert!(e.leave_fence("MPI_Win_lock").is_err());
        assert_eq!(e.complete_group().unwrap(), vec![0, 2]);
        assert!(e.wait_count().is_err());
        e.post_begin(&[3]).unwrap();
        assert!(e.post_begin(&[3]).is_err());
        assert_eq!(e.wait_count().unwrap(), 1);
    }
}
