//! The tag space of internal traffic. User tags are `>= 0` and
//! `MPI_ANY_TAG` (-1) matches only those, so every tag here is `<= -16`
//! and can never be taken by a user receive.
//!
//! | range | use |
//! |---|---|
//! | `-15 ..= -2` | reserved for the pml and the facade |
//! | `-16 ..= -(16 + 2^29 - 1)` | collectives on a communicator: `-16 - (seq mod 2^29)` |
//! | `-2^30 ..= -(2^30 + 2^24 - 1)` | `comm_create_group` on the parent's context: `-2^30 - (user_tag mod 2^16) * 256 - (seq mod 256)` |
//! | `-(2^30 + 2^24) ..= -(2^30 + 2^25 - 1)` | rounds of `comm_idup` on the parent's context: `-(2^30 + 2^24) - (order mod 2^16) * 256 - (round mod 256)` |
//!
//! `seq` is the communicator's collective sequence number: every rank calls
//! the collectives of a communicator in the same order (MPI requires it),
//! so the n-th collective gets the same tag everywhere, and concurrent
//! non-blocking collectives on one communicator never cross-match (until
//! 2^29 of them are outstanding at once). Messages of one collective
//! between one pair of ranks are told apart by the transport's
//! non-overtaking order, which every schedule respects (a receive of round
//! k is posted only after the receives of earlier rounds completed).

/// Tags of collectives start here (inclusive) and go down.
pub const COLL_TAG_BASE: i32 = -16;
/// Number of distinct collective tags.
pub const COLL_TAG_SPACE: u32 = 1 << 29;
/// Base of the `comm_create_group` tags.
pub const CREATE_GROUP_TAG_BASE: i32 = -(1 << 30);
/// Base of the tags of `comm_idup` rounds.
pub const IDUP_TAG_BASE: i32 = CREATE_GROUP_TAG_BASE - (1 << 24);

/// How a communicator (or a temporary view of one) numbers its internal tags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSpace {
    /// Ordinary collectives.
    Coll,
    /// Agreement traffic of `comm_create_group(tag)` on the parent's context.
    CreateGroup(i32),
    /// The rounds of one `comm_idup` on the parent's context, named by the
    /// parent's collective sequence number when it started.
    Idup(u32),
}

impl TagSpace {
    /// The tag of collective number `seq`.
    pub fn tag(self, seq: u32) -> i32 {
        match self {
            TagSpace::Coll => COLL_TAG_BASE - (seq % COLL_TAG_SPACE) as i32,
            TagSpace::CreateGroup(t) => {
                CREATE_GROUP_TAG_BASE - (t.rem_euclid(1 << 16) << 8) - (seq % 256) as i32
            }
            TagSpace::Idup(order) => {
                IDUP_TAG_BASE - ((order % (1 << 16)) << 8) as i32 - (seq % 256) as i32
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranges_are_disjoint_and_internal() {
        for seq in [
            0u32,
            1,
            255,
            256,
            COLL_TAG_SPACE - 1,
            COLL_TAG_SPACE,
            u32::MAX,
        ] {
            let t = TagSpace::Coll.tag(seq);
            assert!((-(16 + (1 << 29) - 1)..=-16).contains(&t), "{seq} -> {t}");
            for ut in [0, 1, 65535, 65536, i32::MAX] {
                let g = TagSpace::CreateGroup(ut).tag(seq);
                assert!(
                    g <= CREATE_GROUP_TAG_BASE && g > CREATE_GROUP_TAG_BASE - (1 << 24),
                    "{g}"
                );
            }
            for order in [0u32, 1, 65535, 65536, u32::MAX] {
                let i = TagSpace::Idup(order).tag(seq);
                assert!(i <= IDUP_TAG_BASE && i > IDUP_TAG_BASE - (1 << 24), "{i}");
            }
        }
        assert_ne!(TagSpace::Coll.tag(1), TagSpace::Coll.tag(2));
        assert_eq!(TagSpace::Coll.tag(0), TagSpace::Coll.tag(COLL_TAG_SPACE));
    }
}
