//! Which Rust types can be sent: plain-old-data whose every bit pattern is
//! a valid value, so a received byte image can be viewed as them.

/// A type that may be sent and received as raw bytes.
///
/// # Safety
/// Implementors must have no padding, no pointers and no invalid bit
/// patterns (any byte image of `size_of::<Self>()` bytes is a valid value).
pub unsafe trait Equivalence: Copy + Send + Sync + 'static {
    /// The element type reductions see (`MPI_INT`, `MPI_DOUBLE`, ...);
    /// bytes (no arithmetic: a reduction with a numeric op is
    /// `MPI_ERR_OP`) unless the type is a primitive number or an array of
    /// them.
    const ELEMENT: tmpi_coll::Datatype = tmpi_coll::Datatype::Byte;
}

macro_rules! pod {
    ($($t:ty => $e:ident),*) => {$(
        // SAFETY: primitive numbers have no padding and no invalid bit patterns.
        unsafe impl Equivalence for $t {
            const ELEMENT: tmpi_coll::Datatype = tmpi_coll::Datatype::$e;
        }
    )*};
}
pod!(u8 => U8, i8 => I8, u16 => U16, i16 => I16, u32 => U32, i32 => I32, u64 => U64,
    i64 => I64, u128 => Byte, i128 => Byte, f32 => F32, f64 => F64);
#[cfg(target_pointer_width = "64")]
pod!(usize => U64, isize => I64);
#[cfg(target_pointer_width = "32")]
pod!(usize => U32, isize => I32);

// SAFETY: an array of padding-free, all-bit-patterns-valid elements is too.
unsafe impl<T: Equivalence, const N: usize> Equivalence for [T; N] {
    const ELEMENT: tmpi_coll::Datatype = T::ELEMENT;
}

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

/// A typed vector holding a copy of `b` (whole elements; a trailing
/// partial element is dropped).
pub(crate) fn vec_from_bytes<T: Equivalence>(b: &[u8]) -> Vec<T> {
    let size = std::mem::size_of::<T>();
    if size == 0 {
        return Vec::new();
    }
    let n = b.len() / size;
    let mut v = Vec::<T>::with_capacity(n);
    // SAFETY: the vector has room for `n` elements = `n * size` bytes,
    // which `b` holds; the regions are distinct allocations. Any byte image
    // is a valid `T` (Equivalence), so the `n` elements are initialised
    // once copied.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), v.as_mut_ptr().cast::<u8>(), n * size);
        v.set_len(n);
    }
    v
}
