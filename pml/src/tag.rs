//! The match header on a tag-matching NIC: the MPI envelope packed into
//! the 64-bit tag that the NIC compares (the TMH tag), and the masks of
//! wildcard receives. This is the pml's format (beside `hdr.rs`'s match
//! header, which it stands for on the tagged path); the BTL carries tags
//! without reading them.
//!
//! # Layout (bit 63 is the most significant bit of the big-endian wire tag)
//!
//! ```text
//!  63            48 47                    24 23 22                   0
//! +----------------+------------------------+--+----------------------+
//! | context (16)   | source rank (24)       |I | tag magnitude (23)   |
//! +----------------+------------------------+--+----------------------+
//! ```
//!
//! - **context**: the communicator's context id, `0..=65_535`
//!   ([`MAX_CONTEXT`]).
//! - **source**: the sender's rank in that communicator, `0..=16_777_215`
//!   ([`MAX_RANK`]).
//! - **tag field** (24 bits): the MPI tag in 24-bit two's complement. Bit 23
//!   ("I", internal) is set exactly for negative tags, which tmpi reserves for
//!   internal traffic (collectives); user tags are `0..=8_388_607`
//!   ([`MAX_USER_TAG`], the `MPI_TAG_UB` of this path), internal tags
//!   `-8_388_608..=-1` ([`MIN_INTERNAL_TAG`]).
//!
//! Values outside these ranges cannot be offloaded: [`pack`] returns a typed
//! [`TagError`] and the pml keeps such messages on the software path.
//!
//! # Masks
//! A receive matches a message when `msg_tag & mask == recv_tag` (the NIC's
//! rule; [`Matcher::recv_tag`] is stored already masked).
//! - Full envelope: every bit (`!0`).
//! - `MPI_ANY_SOURCE`: the source bits are cleared from the mask.
//! - `MPI_ANY_TAG`: the 23 magnitude bits are cleared, but the internal bit
//!   stays in the mask with value 0, so an `ANY_TAG` receive never matches an
//!   internal (negative) tag — exactly MPI's rule that `MPI_ANY_TAG` matches
//!   only non-negative tags.
//!
//! The context bits are always in the mask: no receive crosses communicators.

/// Largest communicator context id that fits the tag (16 bits).
pub const MAX_CONTEXT: u32 = (1 << 16) - 1;
/// Largest source rank that fits the tag (24 bits).
pub const MAX_RANK: u32 = (1 << 24) - 1;
/// Largest user tag (`MPI_TAG_UB` of the offloaded path).
pub const MAX_USER_TAG: i32 = (1 << 23) - 1;
/// Smallest (most negative) internal tag.
pub const MIN_INTERNAL_TAG: i32 = -(1 << 23);

const CONTEXT_SHIFT: u32 = 48;
const SOURCE_SHIFT: u32 = 24;
/// Mask of the context bits.
pub const CONTEXT_BITS: u64 = 0xffff << CONTEXT_SHIFT;
/// Mask of the source bits.
pub const SOURCE_BITS: u64 = 0x00ff_ffff << SOURCE_SHIFT;
/// The internal-tag bit (set for negative tags).
pub const INTERNAL_BIT: u64 = 1 << 23;
/// Mask of the tag magnitude bits (without the internal bit).
pub const TAG_MAGNITUDE_BITS: u64 = (1 << 23) - 1;
/// Mask of the whole 24-bit tag field.
pub const TAG_BITS: u64 = INTERNAL_BIT | TAG_MAGNITUDE_BITS;

/// A value that does not fit the packed tag.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TagError {
    /// The context id is above [`MAX_CONTEXT`].
    #[error("context id {0} does not fit the 16-bit TM tag field (max {MAX_CONTEXT})")]
    Context(u32),
    /// The rank is negative or above [`MAX_RANK`].
    #[error("rank {0} does not fit the 24-bit TM tag field (max {MAX_RANK})")]
    Rank(i64),
    /// The tag is outside `MIN_INTERNAL_TAG..=MAX_USER_TAG`.
    #[error("tag {0} does not fit the 24-bit TM tag field ({MIN_INTERNAL_TAG}..={MAX_USER_TAG})")]
    Tag(i32),
}

/// A message envelope (context, source rank, tag).
pub use tmpi_tm_engine::Envelope;

/// Packs an envelope into the 64-bit TMH tag.
pub fn pack(env: Envelope) -> Result<u64, TagError> {
    if env.context > MAX_CONTEXT {
        return Err(TagError::Context(env.context));
    }
    if env.source > MAX_RANK {
        return Err(TagError::Rank(i64::from(env.source)));
    }
    if !(MIN_INTERNAL_TAG..=MAX_USER_TAG).contains(&env.tag) {
        return Err(TagError::Tag(env.tag));
    }
    let tag_field = (env.tag as u32 as u64) & TAG_BITS;
    Ok((u64::from(env.context) << CONTEXT_SHIFT)
        | (u64::from(env.source) << SOURCE_SHIFT)
        | tag_field)
}

/// Unpacks a TMH tag (any 64-bit value decodes).
pub fn unpack(tag: u64) -> Envelope {
    let field = (tag & TAG_BITS) as u32;
    // Sign-extend the 24-bit field.
    let t = ((field << 8) as i32) >> 8;
    Envelope::new(
        ((tag & CONTEXT_BITS) >> CONTEXT_SHIFT) as u32,
        ((tag & SOURCE_BITS) >> SOURCE_SHIFT) as u32,
        t,
    )
}

/// Source selector of a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Source {
    /// A given rank.
    Rank(u32),
    /// `MPI_ANY_SOURCE`.
    Any,
}

/// Tag selector of a receive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TagSel {
    /// A given tag (negative tags only from internal callers).
    Tag(i32),
    /// `MPI_ANY_TAG`: any non-negative tag.
    Any,
}

/// The `(tag, mask)` pair of a receive, ready for `TAG_ADD`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Matcher {
    /// The receive's tag, already masked (`recv_tag & mask == recv_tag`).
    pub recv_tag: u64,
    /// The mask.
    pub mask: u64,
}

impl Matcher {
    /// The matcher of a receive on `context` from `source` with `tag`.
    pub fn new(context: u32, source: Source, tag: TagSel) -> Result<Matcher, TagError> {
        let (src, src_mask) = match source {
            Source::Rank(r) => (r, SOURCE_BITS),
            Source::Any => (0, 0),
        };
        let (t, tag_mask) = match tag {
            TagSel::Tag(t) => (t, TAG_BITS),
            // Keep the internal bit in the mask, required to be 0.
            TagSel::Any => (0, INTERNAL_BIT),
        };
        let full = pack(Envelope::new(context, src, t))?;
        let mask = CONTEXT_BITS | src_mask | tag_mask;
        Ok(Matcher {
            recv_tag: full & mask,
            mask,
        })
    }

    /// The NIC's matching rule.
    pub fn matches(&self, msg_tag: u64) -> bool {
        msg_tag & self.mask == self.recv_tag
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn env(context: u32, source: u32, tag: i32) -> Envelope {
        Envelope::new(context, source, tag)
    }

    #[test]
    fn layout_is_as_documented() {
        let t = pack(env(0x1234, 0x56789a, 0x0bcdef)).unwrap();
        assert_eq!(t, 0x1234_5678_9a0b_cdef);
        // -1 is all ones in the tag field, with the internal bit.
        let t = pack(env(1, 2, -1)).unwrap();
        assert_eq!(t, 0x0001_0000_02ff_ffff);
        assert_ne!(t & INTERNAL_BIT, 0);
    }

    #[test]
    fn limits_are_typed_errors() {
        assert_eq!(
            pack(env(MAX_CONTEXT + 1, 0, 0)),
            Err(TagError::Context(65_536))
        );
        assert_eq!(pack(env(0, MAX_RANK + 1, 0)), Err(TagError::Rank(1 << 24)));
        assert_eq!(
            pack(env(0, 0, MAX_USER_TAG + 1)),
            Err(TagError::Tag(1 << 23))
        );
        assert_eq!(
            pack(env(0, 0, MIN_INTERNAL_TAG - 1)),
            Err(TagError::Tag(MIN_INTERNAL_TAG - 1))
        );
        assert!(pack(env(MAX_CONTEXT, MAX_RANK, MAX_USER_TAG)).is_ok());
        assert!(pack(env(MAX_CONTEXT, MAX_RANK, MIN_INTERNAL_TAG)).is_ok());
        assert!(Matcher::new(0, Source::Rank(MAX_RANK + 1), TagSel::Any).is_err());
    }

    #[test]
    fn wildcards() {
        let m = Matcher::new(7, Source::Any, TagSel::Tag(5)).unwrap();
        assert!(m.matches(pack(env(7, 0, 5)).unwrap()));
        assert!(m.matches(pack(env(7, MAX_RANK, 5)).unwrap()));
        assert!(!m.matches(pack(env(7, 3, 6)).unwrap()));
        assert!(!m.matches(pack(env(8, 3, 5)).unwrap()));
        let m = Matcher::new(7, Source::Rank(3), TagSel::Any).unwrap();
        assert!(m.matches(pack(env(7, 3, 0)).unwrap()));
        assert!(m.matches(pack(env(7, 3, MAX_USER_TAG)).unwrap()));
        assert!(!m.matches(pack(env(7, 3, -1)).unwrap()));
        assert!(!m.matches(pack(env(7, 4, 1)).unwrap()));
        let m = Matcher::new(7, Source::Any, TagSel::Any).unwrap();
        assert!(!m.matches(pack(env(7, 9, MIN_INTERNAL_TAG)).unwrap()));
        assert!(m.matches(pack(env(7, 9, 0)).unwrap()));
        // An internal receive matches its internal tag exactly.
        let m = Matcher::new(7, Source::Rank(1), TagSel::Tag(-3)).unwrap();
        assert!(m.matches(pack(env(7, 1, -3)).unwrap()));
        assert!(!m.matches(pack(env(7, 1, 3)).unwrap()));
    }

    fn arb_env() -> impl Strategy<Value = Envelope> {
        (
            0..=MAX_CONTEXT,
            0..=MAX_RANK,
            MIN_INTERNAL_TAG..=MAX_USER_TAG,
        )
            .prop_map(|(c, s, t)| env(c, s, t))
    }

    fn arb_source() -> impl Strategy<Value = Source> {
        prop_oneof![Just(Source::Any), (0..=MAX_RANK).prop_map(Source::Rank)]
    }

    fn arb_tagsel() -> impl Strategy<Value = TagSel> {
        prop_oneof![
            Just(TagSel::Any),
            (MIN_INTERNAL_TAG..=MAX_USER_TAG).prop_map(TagSel::Tag)
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(20_000))]

        #[test]
        fn round_trip(e in arb_env()) {
            prop_assert_eq!(unpack(pack(e).unwrap()), e);
        }

        #[test]
        fn matching_equals_mpi_rule(msg in arb_env(), ctx in 0..=MAX_CONTEXT,
                                    src in arb_source(), tag in arb_tagsel(),
                                    near in any::<bool>()) {
            // Half the time, aim the receive at the message so matches happen.
            let (ctx, src, tag) = if near {
                (msg.context,
                 match src { Source::Any => Source::Any, _ => Source::Rank(msg.source) },
                 match tag { TagSel::Any => TagSel::Any, _ => TagSel::Tag(msg.tag) })
            } else { (ctx, src, tag) };
            let m = Matcher::new(ctx, src, tag).unwrap();
            prop_assert_eq!(m.recv_tag & m.mask, m.recv_tag);
            let mpi = msg.context == ctx
                && match src { Source::Any => true, Source::Rank(r) => r == msg.source }
                && match tag { TagSel::Any => msg.tag >= 0, TagSel::Tag(t) => t == msg.tag };
            prop_assert_eq!(m.matches(pack(msg).unwrap()), mpi);
        }

        #[test]
        fn any_tag_never_matches_internal(ctx in 0..=MAX_CONTEXT, src in arb_source(),
                                          msg_src in 0..=MAX_RANK, t in MIN_INTERNAL_TAG..0) {
            let m = Matcher::new(ctx, src, TagSel::Any).unwrap();
            prop_assert!(!m.matches(pack(env(ctx, msg_src, t)).unwrap()));
        }
    }
}
