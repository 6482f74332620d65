//! Which Rust types can be sent: plain-old-data whose every bit pattern is
//! a valid value, so a received byte image can be viewed as them.

/// A type that may be sent and received as raw bytes.
///
/// # Safety
/// Implementors must have no padding, no pointers and no invalid bit
/// patterns (any byte image of `size_of::<Self>()` bytes is a valid value).
pub unsafe trait Equivalence: Copy + Send + Sync + 'static {}

macro_rules! pod {
    ($($t:ty),*) => {$(
        // SAFETY: primitive numbers have no padding and no invalid bit patterns.
        unsafe impl Equivalence for $t {}
    )*};
}
pod!(u8, i8, u16, i16, u32, i32, u64, i64, u128, i128, usize, isize, f32, f64);

// SAFETY: an array of padding-free, all-bit-patterns-valid elements is too.
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {}

/// The bytes of a typed slice.
pub(crate) fn bytes<T: Equivalence>(s: &[T]) -> &[u8] {
    // SAFETY: T is Equivalence (no padding), so every byte of the slice is
    // initialised; the length in bytes is the slice's size.
    unsafe { std::slice::from_raw_parts(s.as_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}

/// The bytes of a typed slice, mutably.
pub(crate) fn bytes_mut<T: Equivalence>(s: &mut [T]) -> &mut [u8] {
    // SAFETY: any byte image is a valid T (Equivalence), so writing arbitrary
    // bytes keeps the slice valid.
    unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(s)) }
}
