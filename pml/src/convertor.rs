//! Position-based pack/unpack over a committed type map (the "convertor").
//!
//! A non-contiguous message is `count` items of a type whose bytes are the
//! blocks `(offset, len)` of its type map, item `i` starting at
//! `i * extent`. The packed (wire) form is the blocks' bytes in type-map
//! order. A [`Convertor`] maps any packed range `[pos, pos + n)` to the user
//! memory it covers, so a protocol can pack each fragment straight from the
//! user layout (and unpack each arriving fragment into it) without a
//! whole-message staging buffer. Seeking to `pos` costs `O(log blocks)`.
//!
//! The unsafe accessors ([`Convertor::pack`], [`Convertor::unpack`]) take
//! the user base address; the safe core ([`Convertor::segments`]) only
//! computes offsets and is what the tests check against a naive gather.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use thiserror::Error;

/// The type map of one item: blocks `(offset, len)` in type-map order, the
/// item's packed size (the sum of the lens) and its extent. Shared, not
/// copied: a type map can be as large as the message (a vector of single
/// elements has one block per element).
pub trait TypeMap: Send + Sync + std::fmt::Debug {
    /// The blocks of one item.
    fn blocks(&self) -> &[(isize, usize)];
    /// Packed bytes per item (the sum of the block lengths).
    fn size(&self) -> usize;
    /// Distance between consecutive items.
    fn extent(&self) -> isize;
}

/// A plain type map (tests, simple callers).
#[derive(Debug, Clone)]
pub struct Blocks {
    /// Blocks of one item.
    pub blocks: Vec<(isize, usize)>,
    /// Extent of one item.
    pub extent: isize,
}

impl TypeMap for Blocks {
    fn blocks(&self) -> &[(isize, usize)] {
        &self.blocks
    }
    fn size(&self) -> usize {
        self.blocks.iter().map(|b| b.1).sum()
    }
    fn extent(&self) -> isize {
        self.extent
    }
}

/// A type map that cannot be used for conversion.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum ConvError {
    /// The packed size of `count` items does not fit in `usize`.
    #[error("convertor: {count} items of {size} bytes overflow the address space")]
    Overflow {
        /// Items.
        count: usize,
        /// Packed bytes per item.
        size: usize,
    },
}

/// One contiguous piece of a packed range: `len` bytes at user offset
/// `user` (from the buffer's base) that are packed bytes `packed..`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Segment {
    /// Offset of the piece in user memory, from the buffer's base address.
    pub user: isize,
    /// Offset of the piece in the packed stream.
    pub packed: usize,
    /// Length in bytes.
    pub len: usize,
}

/// Where the last conversion stopped: block `block` of item `item`, whose
/// first byte is packed byte `bstart` of the item.
#[derive(Debug, Clone, Copy, Default)]
struct Cursor {
    item: usize,
    block: usize,
    bstart: usize,
}

/// `count` items of a type map, packed in order.
///
/// Seeking to a position resumes from where the previous conversion
/// stopped when it is at or after it in the same item (fragments go in
/// order: amortised O(1) per fragment, no index over the blocks), else from
/// the item's first block.
#[derive(Debug)]
pub struct Convertor {
    /// Unique per convertor (never reused), naming cached packed bytes.
    id: u64,
    map: Arc<dyn TypeMap>,
    size: usize,
    extent: isize,
    count: usize,
    cursor: Mutex<Cursor>,
}

impl Convertor {
    /// A convertor for `count` items of `map`.
    pub fn new(map: Arc<dyn TypeMap>, count: usize) -> Result<Self, ConvError> {
        let size = map.size();
        size.checked_mul(count)
            .ok_or(ConvError::Overflow { count, size })?;
        static NEXT: AtomicU64 = AtomicU64::new(1);
        Ok(Convertor {
            id: NEXT.fetch_add(1, Ordering::Relaxed),
            extent: map.extent(),
            map,
            size,
            count,
            cursor: Mutex::new(Cursor::default()),
        })
    }

    /// This convertor's unique id.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// Packed length of the whole message.
    pub fn packed_len(&self) -> usize {
        self.size * self.count
    }

    /// The segments covering packed bytes `[pos, pos + n)` (clamped to the
    /// message), in packed order; adjacent pieces are merged.
    pub fn segments(&self, pos: usize, n: usize) -> Segments<'_> {
        let end = pos.saturating_add(n).min(self.packed_len());
        let pos = pos.min(end);
        let cur = self.seek(pos);
        Segments {
            c: self,
            blocks: self.map.blocks(),
            pos,
            end,
            cur,
        }
    }

    /// The cursor at packed byte `pos` (< the packed length, or any cursor
    /// when the range is empty).
    fn seek(&self, pos: usize) -> Cursor {
        if self.size == 0 || pos >= self.packed_len() {
            return Cursor::default();
        }
        let item = pos / self.size;
        let within = pos % self.size;
        let saved = *self.cursor.lock().unwrap_or_else(|p| p.into_inner());
        let mut c = if saved.item == item && saved.bstart <= within {
            saved
        } else {
            Cursor {
                item,
                block: 0,
                bstart: 0,
            }
        };
        let blocks = self.map.blocks();
        while c.bstart + blocks[c.block].1 <= within {
            c.bstart += blocks[c.block].1;
            c.block += 1;
        }
        c
    }

    fn save(&self, c: Cursor) {
        *self.cursor.lock().unwrap_or_else(|p| p.into_inner()) = c;
    }

    /// Packs `out.len()` bytes starting at packed position `pos` from the
    /// user buffer at `base`; returns the bytes written (short at the end of
    /// the message).
    ///
    /// # Safety
    /// `base` must be the base address of a buffer that holds the type map
    /// of `count` items, valid for reads.
    pub unsafe fn pack(&self, base: *const u8, pos: usize, out: &mut [u8]) -> usize {
        let mut w = 0;
        let mut it = self.segments(pos, out.len());
        for s in &mut it {
            // SAFETY: the segment lies inside the type map of the message,
            // which the caller guarantees readable at `base`; `out` has room
            // for it (segments cover at most `out.len()` bytes from `pos`).
            unsafe {
                std::ptr::copy_nonoverlapping(
                    base.wrapping_offset(s.user),
                    out.as_mut_ptr().add(w),
                    s.len,
                )
            };
            w += s.len;
        }
        self.save(it.cur);
        w
    }

    /// Unpacks `data` as packed bytes starting at `pos` into the user buffer
    /// at `base`; returns the bytes consumed (short at the end of the
    /// message: the rest does not fit the receive type).
    ///
    /// # Safety
    /// `base` must be the base address of a buffer that holds the type map
    /// of `count` items, valid for writes and not aliased by `data`.
    pub unsafe fn unpack(&self, base: *mut u8, pos: usize, data: &[u8]) -> usize {
        let mut r = 0;
        let mut it = self.segments(pos, data.len());
        for s in &mut it {
            // SAFETY: as for `pack`, with the type map writable at `base`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    data.as_ptr().add(r),
                    base.wrapping_offset(s.user),
                    s.len,
                )
            };
            r += s.len;
        }
        self.save(it.cur);
        r
    }
}

/// Iterator of [`Convertor::segments`].
#[derive(Debug)]
pub struct Segments<'a> {
    c: &'a Convertor,
    blocks: &'a [(isize, usize)],
    pos: usize,
    end: usize,
    cur: Cursor,
}

impl Iterator for Segments<'_> {
    type Item = Segment;
    fn next(&mut self) -> Option<Segment> {
        let c = self.c;
        let mut out: Option<Segment> = None;
        while self.pos < self.end {
            let (off, len) = self.blocks[self.cur.block];
            let within = self.pos - self.cur.item * c.size - self.cur.bstart;
            let n = (len - within).min(self.end - self.pos);
            if n > 0 {
                let user = (self.cur.item as isize)
                    .wrapping_mul(c.extent)
                    .wrapping_add(off)
                    .wrapping_add(within as isize);
                match &mut out {
                    Some(s) if s.user.wrapping_add(s.len as isize) == user => s.len += n,
                    Some(_) => return out,
                    None => {
                        out = Some(Segment {
                            user,
                            packed: self.pos,
                            len: n,
                        })
                    }
                }
                self.pos += n;
            }
            if within + n == len {
                self.cur.bstart += len;
                self.cur.block += 1;
                if self.cur.block == self.blocks.len() {
                    self.cur = Cursor {
                        item: self.cur.item + 1,
                        block: 0,
                        bstart: 0,
                    };
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn conv(blocks: &[(isize, usize)], extent: isize, count: usize) -> Convertor {
        let m = Blocks {
            blocks: blocks.to_vec(),
            extent,
        };
        Convertor::new(Arc::new(m), count).unwrap()
    }

    /// Naive gather of the whole message from `mem` (base at `base`).
    fn gather(
        mem: &[u8],
        base: usize,
        blocks: &[(isize, usize)],
        ext: isize,
        count: usize,
    ) -> Vec<u8> {
        let mut v = Vec::new();
        for i in 0..count {
            for &(off, len) in blocks {
                let a = (base as isize + i as isize * ext + off) as usize;
                v.extend_from_slice(&mem[a..a + len]);
            }
        }
        v
    }

    /// (blocks, extent, count, base offset into the memory)
    type Case = (Vec<(isize, usize)>, isize, usize, usize);

    fn types() -> Vec<Case> {
        // (blocks, extent, count, base offset into the memory)
        vec![
            (vec![(0, 8)], 16, 100, 0),                // strided doubles
            (vec![(0, 3), (5, 2), (9, 4)], 16, 37, 0), // indexed
            (vec![(8, 4), (-8, 4)], 12, 20, 16),       // negative offsets
            (vec![(0, 4), (4, 4)], 8, 10, 0),          // merges to contiguous
            (vec![(0, 0), (2, 5), (7, 0)], 9, 11, 0),  // empty blocks
            (vec![(4, 1)], -6, 9, 60),                 // negative extent
        ]
    }

    #[test]
    fn every_split_packs_like_a_whole_gather() {
        for (blocks, ext, count, base) in types() {
            let mem: Vec<u8> = (0..2048).map(|i| (i * 7 + 3) as u8).collect();
            let want = gather(&mem, base, &blocks, ext, count);
            let c = conv(&blocks, ext, count);
            assert_eq!(c.packed_len(), want.len());
            for frag in [1, 3, 7, 16, 1000] {
                let mut got = Vec::new();
                let mut pos = 0;
                while pos < c.packed_len() {
                    let mut f = vec![0u8; frag];
                    // SAFETY: the type map lies inside `mem` at `base`.
                    let n = unsafe { c.pack(mem.as_ptr().add(base), pos, &mut f) };
                    assert!(n > 0 && n <= frag);
                    got.extend_from_slice(&f[..n]);
                    pos += n;
                }
                assert_eq!(got, want, "{blocks:?} ext {ext} frag {frag}");
            }
        }
    }

    #[test]
    fn unpack_in_fragments_out_of_order_restores_the_layout() {
        for (blocks, ext, count, base) in types() {
            let src: Vec<u8> = (0..2048).map(|i| (i * 13 + 1) as u8).collect();
            let packed = gather(&src, base, &blocks, ext, count);
            let c = conv(&blocks, ext, count);
            let mut dst = vec![0u8; 2048];
            // Fragments of 5 bytes, delivered last first.
            let frags: Vec<usize> = (0..packed.len()).step_by(5).collect();
            for &p in frags.iter().rev() {
                let e = (p + 5).min(packed.len());
                // SAFETY: the type map lies inside `dst` at `base`.
                let n = unsafe { c.unpack(dst.as_mut_ptr().add(base), p, &packed[p..e]) };
                assert_eq!(n, e - p);
            }
            assert_eq!(gather(&dst, base, &blocks, ext, count), packed);
            // Bytes outside the type map are untouched.
            let mut mask = vec![false; 2048];
            for s in c.segments(0, usize::MAX) {
                for k in 0..s.len {
                    mask[(base as isize + s.user) as usize + k] = true;
                }
            }
            assert!(dst.iter().zip(&mask).all(|(&b, &m)| m || b == 0));
        }
    }

    #[test]
    fn segments_merge_and_clamp() {
        let c = conv(&[(0, 4), (4, 4)], 8, 10);
        assert_eq!(c.segments(0, 80).count(), 1);
        let s: Vec<_> = c.segments(70, 1000).collect();
        assert_eq!(
            s,
            vec![Segment {
                user: 70,
                packed: 70,
                len: 10
            }]
        );
        let v = conv(&[(0, 8)], 16, 4);
        let s: Vec<_> = v.segments(4, 8).collect();
        assert_eq!(
            s,
            vec![
                Segment {
                    user: 4,
                    packed: 4,
                    len: 4
                },
                Segment {
                    user: 16,
                    packed: 8,
                    len: 4
                }
            ]
        );
        assert_eq!(v.segments(32, 10).count(), 0);
        assert_eq!(v.segments(100, 10).count(), 0);
    }

    #[test]
    fn overflowing_sizes_are_an_error() {
        assert!(matches!(
            Convertor::new(
                Arc::new(Blocks {
                    blocks: vec![(0, 1 << 40)],
                    extent: 1 << 40
                }),
                1 << 30
            ),
            Err(ConvError::Overflow { .. })
        ));
    }
}
