//! Predefined reductions on the C types Rust has no arithmetic for: long
//! double (MAX, MIN, SUM, PROD), the C complex types (SUM, PROD) and
//! `MPI_LONG_DOUBLE_INT` (MAXLOC, MINLOC), MPI-4.0 §6.9.2. The kernels are C
//! (`c/wide_ops.c`, built by `build.rs`), so `long double` is whatever the
//! platform's C compiler makes of it (x87 extended on x86-64). tmpi-coll
//! runs them as commutative user-style ops over [`Elem::Derived`] items, so
//! every algorithm splits the vector between items.

use std::ffi::c_int;

use tmpi_coll::{Datatype as Elem, Op, UserOp};

use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};

extern "C" {
    fn tmpi_wide_op(kind: c_int, op: c_int, input: *const u8, inout: *mut u8, n: usize) -> c_int;
}

/// The kernel kind and item size of a type made of one of these types.
pub(crate) fn kind_of(t: &Dtype) -> Option<(c_int, usize)> {
    match crate::fortran_types::wide_alias(t.elem?.0) {
        16 => Some((0, 16)),
        26 => Some((1, 8)),
        27 => Some((2, 16)),
        28 => Some((3, 32)),
        38 => Some((4, 20)),
        _ => None,
    }
}

fn op_code(o: &Op) -> c_int {
    match o {
        Op::Max => 0,
        Op::Min => 1,
        Op::Sum => 2,
        Op::Prod => 3,
        Op::Maxloc => 4,
        Op::Minloc => 5,
        _ => -1,
    }
}

/// Runs the kernel over `n` items; `false` when the op does not apply.
fn run(kind: c_int, op: c_int, input: &[u8], inout: &mut [u8], n: usize, item: usize) -> bool {
    if input.len() < n * item || inout.len() < n * item {
        return false;
    }
    // SAFETY: both buffers hold `n` packed items of `item` bytes (checked
    // above); the kernel copies each item in and out with memcpy, so
    // alignment does not matter, and writes only `inout`'s first n items.
    unsafe { tmpi_wide_op(kind, op, input.as_ptr(), inout.as_mut_ptr(), n) == 0 }
}

/// The element type and op of the predefined op `o` on `t`, when `t` is
/// made of one of these types; `None` for other types.
/// The Fortran and C++ named types are bound here first
/// ([`crate::fortran_types::bind`]: their op classes differ from C's).
pub(crate) fn bind(o: &Op, t: &Dtype) -> Option<Res<(Elem, Op)>> {
    if let Some(bound) = crate::fortran_types::bind(o, t) {
        return Some(bound);
    }
    let (kind, item) = kind_of(t)?;
    let op = op_code(o);
    if !t.size.is_multiple_of(item) || !run(kind, op, &[], &mut [], 0, item) {
        return Some(Err(Error::new(
            C::Op,
            format!("{} is not defined on {}", o.name(), t.name),
        )));
    }
    let f = move |input: &[u8], inout: &mut [u8], count: usize, _: Elem| {
        run(kind, op, input, inout, count, item);
    };
    Some(Ok((
        Elem::Derived(item as u32),
        Op::User(UserOp::new(o.name(), true, f)),
    )))
}

/// One-sided accumulates' kernel (`tmpi_osc::WideKernel`): `inout = input
/// op inout` over the packed items of kind `kind` in `inout`; with empty
/// buffers, whether `o` applies to the kind.
pub(crate) fn osc_kernel(kind: u8, o: &Op, input: &[u8], inout: &mut [u8]) -> bool {
    let item = match kind {
        0 | 2 => 16,
        1 => 8,
        3 => 32,
        4 => 20,
        _ => return false,
    };
    if !inout.len().is_multiple_of(item) || input.len() != inout.len() {
        return false;
    }
    let n = inout.len() / item;
    run(kind as c_int, op_code(o), input, inout, n, item)
}
