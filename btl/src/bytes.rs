//! Copies of the few bytes of a small fragment.
//!
//! `ptr::copy_nonoverlapping` with a length known only at run time is a
//! call to libc's `memcpy`, whose dispatch costs more than the copy for the
//! 8-byte payload or the 20-byte match header of a small message, on every
//! send and receive. [`copy_bytes`] copies up to 32 bytes with at most two
//! (overlapping) loads and stores of one width, inline, and leaves longer
//! copies to `memcpy`.

/// Copies `n` bytes from `src` to `dst`.
///
/// # Safety
/// As `std::ptr::copy_nonoverlapping(src, dst, n)`: `src` valid for reads
/// and `dst` for writes of `n` bytes, the two ranges not overlapping. No
/// alignment is required.
#[inline(always)]
pub unsafe fn copy_bytes(src: *const u8, dst: *mut u8, n: usize) {
    // SAFETY (every branch): each access covers bytes inside `0..n` of
    // `src` / `dst` (for `n >= w`, offsets `0` and `n - w` with width `w`),
    // valid by the caller's contract; unaligned accesses are used.
    unsafe {
        if n > 32 {
            std::ptr::copy_nonoverlapping(src, dst, n);
        } else if n >= 16 {
            let a = (src as *const u128).read_unaligned();
            let b = (src.add(n - 16) as *const u128).read_unaligned();
            (dst as *mut u128).write_unaligned(a);
            (dst.add(n - 16) as *mut u128).write_unaligned(b);
        } else if n >= 8 {
            let a = (src as *const u64).read_unaligned();
            let b = (src.add(n - 8) as *const u64).read_unaligned();
            (dst as *mut u64).write_unaligned(a);
            (dst.add(n - 8) as *mut u64).write_unaligned(b);
        } else if n >= 4 {
            let a = (src as *const u32).read_unaligned();
            let b = (src.add(n - 4) as *const u32).read_unaligned();
            (dst as *mut u32).write_unaligned(a);
            (dst.add(n - 4) as *mut u32).write_unaligned(b);
        } else if n > 0 {
            // 1..=3 bytes: first, middle, last (some written twice).
            *dst = *src;
            *dst.add(n / 2) = *src.add(n / 2);
            *dst.add(n - 1) = *src.add(n - 1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::copy_bytes;

    #[test]
    fn every_length_and_offset_copies_exactly() {
        let src: Vec<u8> = (0..100u8).map(|i| i.wrapping_mul(37) ^ 0x5a).collect();
        for n in 0..=70 {
            for off in 0..8 {
                let mut dst = vec![0xeeu8; 90];
                // SAFETY: `src` holds 100 >= off + n bytes, `dst` 90 >=
                // off + n + 8 bytes; distinct allocations.
                unsafe { copy_bytes(src.as_ptr().add(off), dst.as_mut_ptr().add(off), n) };
                assert_eq!(&dst[off..off + n], &src[off..off + n], "n={n} off={off}");
                assert!(dst[..off].iter().all(|&b| b == 0xee), "before, n={n}");
                assert!(dst[off + n..].iter().all(|&b| b == 0xee), "after, n={n}");
            }
        }
    }
}
