//! User reduction functions (`MPI_Op_create`) bound to one call's datatype.
//!
//! MPI calls a user function with the datatype handle the reduction was
//! called with, a count of items of that datatype, and buffers in the
//! datatype's own layout (MPI-4.0 §6.9.5). The collectives run on packed
//! bytes, so each reduction binds the function to its call:
//! - a predefined type with a kernel element type (`MPI_INT`): items of
//!   that element, counts of them;
//! - any other type (a contiguous type of 9 ints, a struct, a vector with
//!   gaps, `MPI_LONG_DOUBLE`): [`Elem::Derived`] items of the type's packed
//!   size, so that every algorithm splits the vector on whole items and the
//!   function sees counts of the caller's items. A type with gaps is laid
//!   out again (items `extent` bytes apart) around each call and its
//!   result packed back.
//!
//! Before, every reduction handed the function counts and a handle of the
//! element type: a function written for its derived type (MPICH's
//! `allred4`, a 3x3 matrix product over `MPI_Type_contiguous(9, MPI_INT)`)
//! read and wrote nine times past its buffers.

use std::ffi::c_int;

use tmpi_coll::{Datatype as Elem, Op, UserOp};

use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};
use crate::ffi::{gather_blocks, scatter_blocks};
use crate::UserOpFn;

/// Where the items of a type with gaps lie in a buffer of its own layout.
struct Layout {
    blocks: Vec<(isize, usize)>,
    extent: isize,
    /// Bytes from the start of the scratch buffer to its item 0 (the
    /// type's lowest byte may lie before the buffer's address).
    shift: usize,
    /// Bytes past the last item's start that a buffer must hold.
    tail: usize,
}

impl Layout {
    fn of(t: &Dtype) -> Res<Layout> {
        let extent = t.extent();
        if extent <= 0 {
            return Err(Error::new(
                C::Type,
                format!(
                    "a user op over {} needs a positive extent (it is {extent})",
                    t.name
                ),
            ));
        }
        let low = t.true_lb.min(0);
        Ok(Layout {
            blocks: t.blocks.clone(),
            extent,
            shift: low.unsigned_abs(),
            // The whole last item, padding included: a function that
            // copies items as C structs reads `extent` bytes of each.
            tail: (t.true_ub.max(extent) - low) as usize,
        })
    }

    /// A buffer holding `count` items laid out from `packed`.
    fn expand(&self, packed: &[u8], count: usize) -> Vec<u8> {
        let len = if count == 0 {
            0
        } else {
            (count - 1) * self.extent as usize + self.tail
        };
        let mut v = vec![0u8; len];
        if count > 0 {
            // `shift < tail <= len`: item 0 starts inside `v`, and every
            // block of every item lies inside it (see `tail`).
            let base = v[self.shift..].as_mut_ptr();
            scatter_blocks(base, count, self.extent, &self.blocks, packed);
        }
        v
    }

    /// Packs the `count` items of `laid` (from [`Layout::expand`]) into
    /// `packed`.
    fn pack_into(&self, laid: &[u8], count: usize, packed: &mut [u8]) {
        if count == 0 {
            return;
        }
        let mut out = Vec::with_capacity(packed.len());
        gather_blocks(
            laid[self.shift..].as_ptr(),
            count,
            self.extent,
            &self.blocks,
            &mut out,
        );
        packed.copy_from_slice(&out);
    }
}

/// The element type and op of a reduction over `t` (handle `dtype`) with
/// the user function `f`.
pub(crate) fn bind(f: UserOpFn, commute: bool, dtype: c_int, t: &Dtype) -> Res<(Elem, Op)> {
    let kernel_elem = t.predefined.then(|| t.reduce_elem()).flatten();
    let elem = match kernel_elem {
        Some(e) => e,
        None if t.size == 0 => Elem::Byte,
        None => Elem::Derived(u32::try_from(t.size).map_err(|_| {
            Error::new(
                C::Type,
                format!("{} is {} bytes: too large for a reduction", t.name, t.size),
            )
        })?),
    };
    let layout = if t.is_contig() {
        None
    } else {
        Some(Layout::of(t)?)
    };
    let op = UserOp::new("user op", commute, move |input, inout, count, _| {
        // Counts of one call are at most the caller's `c_int` count.
        let n = c_int::try_from(count).unwrap_or(c_int::MAX);
        match &layout {
            None => crate::ffi::call_user_op(f, input, inout, 0, n, dtype),
            Some(l) => {
                let a = l.expand(input, count);
                let mut b = l.expand(inout, count);
                crate::ffi::call_user_op(f, &a, &mut b, l.shift, n, dtype);
                l.pack_into(&b, count, inout);
            }
        }
    });
    Ok((elem, Op::User(op)))
}
