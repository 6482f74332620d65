//! The only module that dereferences pointers handed in by C callers.
//!
//! Every helper validates what it can (null pointers, negative lengths) and
//! converts to safe Rust values; the rest of the crate works on those. The
//! remaining contract (a non-null pointer really addresses `n` valid
//! elements) is the C caller's, as for any C library.

use std::ffi::{c_char, c_int, CStr};

use crate::error::{Error, Res};
use tmpi_base::error::MpiErrorClass as C;

/// `MPI_STATUS_IGNORE` / `MPI_STATUSES_IGNORE` as addresses.
pub(crate) const STATUS_IGNORE: usize = 1;
/// `MPI_IN_PLACE` as an address.
pub(crate) const IN_PLACE: usize = usize::MAX;

/// Whether `p` is `MPI_IN_PLACE`.
pub(crate) fn is_in_place<T>(p: *const T) -> bool {
    p as usize == IN_PLACE
}

/// Stores `v` through the out-parameter `p` (named `what` in the error).
pub(crate) fn put<T>(p: *mut T, v: T, what: &str) -> Res<()> {
    if p.is_null() {
        return Err(Error::new(C::Arg, format!("{what} is NULL")));
    }
    // SAFETY: non-null; the C caller passes a pointer to a writable `T`
    // (the documented contract of the MPI call).
    unsafe { p.write_unaligned(v) };
    Ok(())
}

/// Writes every field of `v` to the status at `p` but its error field.
pub(crate) fn put_status_keeping_error(
    p: *mut crate::request::MpiStatus,
    v: crate::request::MpiStatus,
) {
    // SAFETY: `p` is non-null (the caller checked it and the
    // `MPI_STATUS_IGNORE` sentinel) and points to a writable `MPI_Status`
    // (the call's contract); each field is written through a raw place,
    // unaligned-tolerant, without reading the struct (the caller's status
    // may be uninitialized).
    unsafe {
        std::ptr::addr_of_mut!((*p).count_lo).write_unaligned(v.count_lo);
        std::ptr::addr_of_mut!((*p).count_hi_and_cancelled)
            .write_unaligned(v.count_hi_and_cancelled);
        std::ptr::addr_of_mut!((*p).source).write_unaligned(v.source);
        std::ptr::addr_of_mut!((*p).tag).write_unaligned(v.tag);
    }
}

/// Writes `error` to the error field of the status at `p` unless `p` is
/// NULL or `MPI_STATUS_IGNORE` (the "empty" status of MPI-4.0 §3.7.3 has
/// `MPI_SUCCESS` there).
pub(crate) fn put_status_error(p: *mut crate::request::MpiStatus, error: c_int) {
    if p.is_null() || p as usize == STATUS_IGNORE {
        return;
    }
    // SAFETY: as in `put_status_keeping_error`: `p` is non-null, not the
    // ignore sentinel, and points to a writable `MPI_Status`.
    unsafe { std::ptr::addr_of_mut!((*p).error).write_unaligned(error) }
}

/// `MPI_ERR_ARG` if the output argument `p` is NULL: checked before a call
/// does its work, so that the NULL is what it reports (a group constructor
/// with a bad range as well reported the range, MPICH's
/// errors/group/group_range_incl_nullarg).
pub(crate) fn out_arg<T>(p: *mut T, what: &str) -> Res<()> {
    if p.is_null() {
        return Err(Error::new(C::Arg, format!("{what} is NULL")));
    }
    Ok(())
}

/// Reads a `T` through `p`.
pub(crate) fn get<T: Copy>(p: *const T, what: &str) -> Res<T> {
    if p.is_null() {
        return Err(Error::new(C::Arg, format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller passes a pointer to a readable `T`.
    Ok(unsafe { p.read_unaligned() })
}

/// Converts a C count to `usize` (negative: `MPI_ERR_COUNT` or `class`).
pub(crate) fn count(n: c_int, class: C, what: &str) -> Res<usize> {
    usize::try_from(n).map_err(|_| Error::new(class, format!("{what} = {n} is negative")))
}

/// A copy of the array of `n` elements at `p` (`n == 0` allows NULL).
pub(crate) fn array<T: Copy>(p: *const T, n: usize, what: &str) -> Res<Vec<T>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    if p.is_null() {
        return Err(Error::new(C::Arg, format!("{what} is NULL")));
    }
    // SAFETY: non-null and the caller passes `n` readable elements.
    Ok(unsafe { std::slice::from_raw_parts(p, n) }.to_vec())
}

/// Writes `v` to the array at `p` (at least `v.len()` elements).
pub(crate) fn put_array<T: Copy>(p: *mut T, v: &[T], what: &str) -> Res<()> {
    if v.is_empty() {
        return Ok(());
    }
    if p.is_null() {
        return Err(Error::new(C::Arg, format!("{what} is NULL")));
    }
    // SAFETY: non-null; the caller passes room for `v.len()` elements.
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) };
    Ok(())
}

/// A C string argument.
pub(crate) fn cstr(p: *const c_char, what: &str) -> Res<String> {
    if p.is_null() {
        return Err(Error::new(C::Arg, format!("{what} is NULL")));
    }
    // SAFETY: non-null, NUL-terminated by the MPI contract.
    Ok(unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned())
}

/// The `argc` strings of a C `argv`, `None` when `argv` is NULL or `argc`
/// is not positive.
pub(crate) fn c_strings(argc: c_int, argv: *mut *mut c_char) -> Res<Option<Vec<String>>> {
    if argv.is_null() || argc <= 0 {
        return Ok(None);
    }
    (0..argc as usize)
        .map(|i| {
            // SAFETY: `argv` is non-null and holds `argc` entries (main's
            // contract, which MPI_Info_create_env takes over).
            let p = unsafe { *argv.add(i) };
            cstr(p, "argv entry")
        })
        .collect::<Res<Vec<String>>>()
        .map(Some)
}

/// Copies `s` as a NUL-terminated string into `p` (capacity `cap` bytes
/// including the NUL; truncated to fit) and returns the length written.
pub(crate) fn put_cstr(p: *mut c_char, cap: usize, s: &str) -> Res<c_int> {
    if p.is_null() {
        return Err(Error::new(C::Arg, "string buffer is NULL"));
    }
    if cap == 0 {
        return Ok(0);
    }
    let b = s.as_bytes();
    let n = b.len().min(cap - 1);
    // SAFETY: non-null, the caller provides `cap` writable bytes (the
    // MPI_MAX_* length of this call) and `n + 1 <= cap`.
    unsafe {
        std::ptr::copy_nonoverlapping(b.as_ptr(), p.cast::<u8>(), n);
        *p.add(n) = 0;
    }
    Ok(n as c_int)
}

/// Copies the typemap `blocks` (offset, length) of `count` items laid out
/// `extent` bytes apart from `base` into `out`.
pub(crate) fn gather_blocks(
    base: *const u8,
    count: usize,
    extent: isize,
    blocks: &[(isize, usize)],
    out: &mut Vec<u8>,
) {
    if let [(0, len)] = blocks {
        if *len as isize == extent {
            // Contiguous items: one copy instead of one per item.
            let total = count.saturating_mul(*len);
            if total > 0 {
                // SAFETY: as below; the items are adjacent, so the typemap
                // of `count` items is these `total` bytes.
                out.extend_from_slice(unsafe { std::slice::from_raw_parts(base, total) });
            }
            return;
        }
    }
    for i in 0..count {
        let item = (i as isize).wrapping_mul(extent);
        for &(off, len) in blocks {
            let p = base.wrapping_offset(item.wrapping_add(off));
            // SAFETY: the datatype describes memory of the caller's buffer;
            // MPI requires every byte it names to be readable.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(p, len) });
        }
    }
}

/// The reverse of [`gather_blocks`]: writes `data` into the typemap,
/// stopping when `data` runs out (a short message).
pub(crate) fn scatter_blocks(
    base: *mut u8,
    count: usize,
    extent: isize,
    blocks: &[(isize, usize)],
    data: &[u8],
) {
    if let [(0, len)] = blocks {
        if *len as isize == extent {
            // Contiguous items: one copy instead of one per item.
            let n = count.saturating_mul(*len).min(data.len());
            if n > 0 {
                // SAFETY: as below; the items are adjacent, so the typemap
                // of `count` items covers these `n <= data.len()` bytes.
                unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), base, n) };
            }
            return;
        }
    }
    let mut at = 0usize;
    'outer: for i in 0..count {
        let item = (i as isize).wrapping_mul(extent);
        for &(off, len) in blocks {
            if at >= data.len() {
                break 'outer;
            }
            let n = len.min(data.len() - at);
            let p = base.wrapping_offset(item.wrapping_add(off));
            // SAFETY: the datatype describes writable memory of the caller's
            // receive buffer (MPI contract); `at + n <= data.len()`.
            unsafe { std::ptr::copy_nonoverlapping(data.as_ptr().add(at), p, n) };
            at += n;
        }
    }
}

/// A read-only byte view of contiguous user memory.
pub(crate) fn bytes<'a>(p: *const u8, len: usize) -> Res<&'a [u8]> {
    if len == 0 {
        return Ok(&[]);
    }
    if p.is_null() {
        return Err(Error::new(
            C::Buffer,
            "buffer is NULL with a non-zero count",
        ));
    }
    if p as usize == IN_PLACE {
        return Err(in_place_here());
    }
    // SAFETY: non-null, not the MPI_IN_PLACE sentinel; the caller's buffer
    // holds `len` readable bytes.
    Ok(unsafe { std::slice::from_raw_parts(p, len) })
}

/// `MPI_IN_PLACE` passed where the call takes a real buffer (it is an
/// address no process can read: dereferencing it crashed, MPICH's
/// errors/coll/reduce_local).
#[cold]
fn in_place_here() -> Error {
    Error::new(C::Buffer, "MPI_IN_PLACE where this call needs a buffer")
}

/// A writable byte view of contiguous user memory.
pub(crate) fn bytes_mut<'a>(p: *mut u8, len: usize) -> Res<&'a mut [u8]> {
    if len == 0 {
        return Ok(&mut []);
    }
    if p.is_null() {
        return Err(Error::new(
            C::Buffer,
            "buffer is NULL with a non-zero count",
        ));
    }
    if p as usize == IN_PLACE {
        return Err(in_place_here());
    }
    // SAFETY: non-null, not the MPI_IN_PLACE sentinel; the caller's buffer
    // holds `len` writable bytes not accessed elsewhere during the call.
    Ok(unsafe { std::slice::from_raw_parts_mut(p, len) })
}

/// Calls a user reduction function `f(in, inout, &len, &dtype)` on
/// buffers in the datatype's own layout: item 0 of both starts `shift`
/// bytes in (0 for a contiguous type; with gaps its lowest byte may lie
/// before it, user_op::Layout).
pub(crate) fn call_user_op(
    f: crate::UserOpFn,
    input: &[u8],
    inout: &mut [u8],
    shift: usize,
    len: c_int,
    dtype: c_int,
) {
    if shift > input.len() || shift > inout.len() {
        return;
    }
    let mut d = dtype;
    // SAFETY: `shift` is within both buffers (checked above).
    let (a, b) = unsafe {
        (
            input.as_ptr().add(shift) as *mut std::ffi::c_void,
            inout.as_mut_ptr().add(shift).cast::<std::ffi::c_void>(),
        )
    };
    match f {
        crate::UserOpFn::Int(f) => {
            let mut l = len;
            // SAFETY: `f` is the function pointer the user registered with
            // MPI_Op_create; both buffers hold `len` items of `dtype` laid
            // out from `shift`.
            unsafe { f(a, b, &mut l, &mut d) }
        }
        crate::UserOpFn::Large(f) => {
            let mut l = i64::from(len);
            // SAFETY: as above, the function registered with
            // MPI_Op_create_c, which takes the length as an MPI_Count.
            unsafe { f(a, b, &mut l, &mut d) }
        }
    }
}

/// Calls a user error handler `f(&comm, &code)`.
pub(crate) fn call_errhandler(f: crate::ErrFn, comm: c_int, code: c_int) {
    let mut c = comm;
    let mut e = code;
    // SAFETY: `f` was registered by MPI_Comm_create_errhandler.
    unsafe { f(&mut c, &mut e) }
}

/// Calls an attribute copy callback; returns (error code, flag, value out).
pub(crate) fn call_copy_attr(
    f: crate::CopyAttrFn,
    obj: c_int,
    keyval: c_int,
    extra: usize,
    val: usize,
) -> (c_int, bool, usize) {
    let mut out: usize = 0;
    let mut flag: c_int = 0;
    // SAFETY: registered by MPI_Comm_create_keyval; the out pointers are
    // valid locals.
    let rc = unsafe {
        f(
            obj,
            keyval,
            extra as *mut std::ffi::c_void,
            val as *mut std::ffi::c_void,
            (&mut out as *mut usize).cast(),
            &mut flag,
        )
    };
    (rc, flag != 0, out)
}

/// Calls an attribute delete callback.
pub(crate) fn call_delete_attr(
    f: crate::DeleteAttrFn,
    obj: c_int,
    keyval: c_int,
    val: usize,
    extra: usize,
) -> c_int {
    // SAFETY: registered by MPI_Comm_create_keyval.
    unsafe {
        f(
            obj,
            keyval,
            val as *mut std::ffi::c_void,
            extra as *mut std::ffi::c_void,
        )
    }
}

/// Stores a pointer-sized attribute value through `attribute_val` (a
/// `void **` in disguise, as MPI_Comm_get_attr defines it).
pub(crate) fn put_ptr(p: *mut std::ffi::c_void, v: usize) -> Res<()> {
    put(p.cast::<usize>(), v, "attribute_val")
}

/// Allocation for MPI_Alloc_mem (malloc, so C's free-lists are unaffected).
pub(crate) fn alloc(size: usize) -> *mut std::ffi::c_void {
    // SAFETY: plain malloc of at least one byte.
    unsafe { libc::malloc(size.max(1)) }
}

/// Release for MPI_Free_mem.
pub(crate) fn free(p: *mut std::ffi::c_void) {
    // SAFETY: `p` came from MPI_Alloc_mem (malloc) or is NULL.
    unsafe { libc::free(p) }
}

/// Sends the PMI-1 `abort` line on the launcher's descriptor, if any.
pub(crate) fn pmi_abort_line(fd: c_int, line: &[u8]) {
    // SAFETY: writing a byte buffer to a descriptor number; a bad fd only
    // yields an error return.
    let _ = unsafe { libc::write(fd, line.as_ptr().cast(), line.len()) };
}

/// Calls a generalized request's query callback on a status that starts
/// empty; returns its error code and the status.
pub(crate) fn call_greq_query(
    f: crate::GreqQueryFn,
    extra: usize,
    empty: crate::request::MpiStatus,
) -> (c_int, crate::request::MpiStatus) {
    let mut st = empty;
    // SAFETY: registered by MPI_Grequest_start; `st` is a valid local
    // status of mpi.h's layout.
    let rc = unsafe { f(extra as *mut std::ffi::c_void, &mut st) };
    (rc, st)
}

/// Calls a generalized request's free callback.
pub(crate) fn call_greq_free(f: crate::GreqFreeFn, extra: usize) -> c_int {
    // SAFETY: registered by MPI_Grequest_start.
    unsafe { f(extra as *mut std::ffi::c_void) }
}

/// Calls a generalized request's cancel callback.
pub(crate) fn call_greq_cancel(f: crate::GreqCancelFn, extra: usize, complete: bool) -> c_int {
    // SAFETY: registered by MPI_Grequest_start.
    unsafe { f(extra as *mut std::ffi::c_void, c_int::from(complete)) }
}
