//! A registered region's description as the pml carries it (from the
//! transport's `register` into the RNDV, from a received RNDV into the
//! `get`): opaque bytes, inline up to [`Region::INLINE`] (every BTL's
//! description is 24 bytes, `tmpi_btl::REMOTE_REGION_BYTES`), on the heap
//! beyond (up to `hdr::MAX_REGION_LEN` from the wire). A rendezvous no
//! longer allocates for it: four allocations and frees per rendezvous
//! round trip before.

use std::ops::Deref;

/// Region description bytes.
#[derive(Clone, PartialEq, Eq)]
pub enum Region {
    /// Up to [`Region::INLINE`] bytes.
    Inline([u8; Region::INLINE], u8),
    /// Anything longer.
    Heap(Box<[u8]>),
}

impl Region {
    /// Bytes kept inline.
    pub const INLINE: usize = 32;

    /// A copy of `b`.
    pub fn new(b: &[u8]) -> Self {
        if b.len() <= Self::INLINE {
            let mut a = [0u8; Self::INLINE];
            a[..b.len()].copy_from_slice(b);
            Region::Inline(a, b.len() as u8)
        } else {
            Region::Heap(b.into())
        }
    }
}

impl Deref for Region {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Region::Inline(a, n) => &a[..*n as usize],
            Region::Heap(b) => b,
        }
    }
}

impl std::fmt::Debug for Region {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Region({:02x?})", &**self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inline_and_heap_keep_their_bytes() {
        for n in [0usize, 1, 24, Region::INLINE, Region::INLINE + 1, 256] {
            let b: Vec<u8> = (0..n).map(|i| i as u8 ^ 0x5a).collect();
            let r = Region::new(&b);
            assert_eq!(&*r, &b[..], "{n} bytes");
            assert_eq!(matches!(r, Region::Inline(..)), n <= Region::INLINE);
            assert_eq!(r.clone(), r);
        }
    }
}
