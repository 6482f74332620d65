//! The Fortran and C++ named datatypes usable from C (MPI-4.0 §3.2.2,
//! §19.1.9), the Fortran 90 parameterized types (`MPI_Type_create_f90_*`)
//! and `MPI_Type_get_value_index` (MPI-4.1).
//!
//! Sizes are gfortran's and g++'s on x86-64 and AArch64 Linux (INTEGER,
//! REAL, LOGICAL 4 bytes; DOUBLE PRECISION 8; COMPLEX 8; CHARACTER 1). The
//! optional sized types with no C equivalent here (`MPI_INTEGER16`,
//! `MPI_REAL2`, `MPI_REAL16`, `MPI_COMPLEX4`, `MPI_COMPLEX32`) are
//! `MPI_DATATYPE_NULL` in `mpi.h`, as MPICH and Open MPI make absent ones.
//!
//! Reductions follow the type classes of MPI-4.0 §6.9.2, which differ from
//! the C types' classes the element kernels check (a Fortran integer has no
//! logical ops, a LOGICAL no arithmetic): so these types carry no reduction
//! element of their own ([`Dtype::reduce_elem`] is `None`, which keeps them
//! off the collectives' fast paths) and [`bind`] checks the class, then
//! hands the reduction to the C type's kernel of the same layout.

use std::collections::BTreeMap;
use std::ffi::c_int;
use std::sync::Mutex;

use tmpi_coll::{Datatype as Elem, Op, UserOp};

use crate::datatype::{combiner, Dtype};
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::put;
use crate::state::{tables, COMM_WORLD};

/// Reduction classes of MPI-4.0 §6.9.2 for these types.
#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Class {
    /// Fortran integer: MAX, MIN, SUM, PROD and the bitwise ops.
    Integer,
    /// Floating point: MAX, MIN, SUM, PROD.
    Float,
    /// Logical: LAND, LOR, LXOR.
    Logical,
    /// Complex: SUM, PROD.
    Complex,
    /// Value/index pair: MAXLOC, MINLOC.
    Pair,
    /// No predefined op (MPI_CHARACTER).
    None,
}

/// How a reduction over one of these types is computed.
#[derive(Clone, Copy, Debug)]
enum Kernel {
    /// The element kernel of the C type of the same layout.
    Elem(Elem),
    /// The C complex kernels of [`crate::wide_ops`], under this C handle.
    Wide(c_int),
    /// A pair of floats (`MPI_2REAL`): value then index.
    PairF32,
    /// A pair of doubles (`MPI_2DOUBLE_PRECISION`).
    PairF64,
    /// No kernel.
    None,
}

/// `MPI_CXX_BOOL`'s handle: a C `bool` for reductions, so it keeps the
/// element type of `MPI_C_BOOL` (same class, same ops).
pub(crate) const CXX_BOOL: c_int = 61;

/// (handle, name, size, align, class, kernel): the values of `mpi.h`.
#[rustfmt::skip]
const NAMED: &[(c_int, &str, usize, usize, Class, Kernel)] = &[
    (39, "MPI_INTEGER", 4, 4, Class::Integer, Kernel::Elem(Elem::I32)),
    (40, "MPI_REAL", 4, 4, Class::Float, Kernel::Elem(Elem::F32)),
    (41, "MPI_DOUBLE_PRECISION", 8, 8, Class::Float, Kernel::Elem(Elem::F64)),
    (42, "MPI_LOGICAL", 4, 4, Class::Logical, Kernel::Elem(Elem::I32)),
    (43, "MPI_COMPLEX", 8, 4, Class::Complex, Kernel::Wide(26)),
    (44, "MPI_DOUBLE_COMPLEX", 16, 8, Class::Complex, Kernel::Wide(27)),
    (45, "MPI_CHARACTER", 1, 1, Class::None, Kernel::None),
    (46, "MPI_2INTEGER", 8, 4, Class::Pair, Kernel::Elem(Elem::TwoInt)),
    (47, "MPI_2REAL", 8, 4, Class::Pair, Kernel::PairF32),
    (48, "MPI_2DOUBLE_PRECISION", 16, 8, Class::Pair, Kernel::PairF64),
    (49, "MPI_INTEGER1", 1, 1, Class::Integer, Kernel::Elem(Elem::I8)),
    (50, "MPI_INTEGER2", 2, 2, Class::Integer, Kernel::Elem(Elem::I16)),
    (51, "MPI_INTEGER4", 4, 4, Class::Integer, Kernel::Elem(Elem::I32)),
    (52, "MPI_INTEGER8", 8, 8, Class::Integer, Kernel::Elem(Elem::I64)),
    (53, "MPI_REAL4", 4, 4, Class::Float, Kernel::Elem(Elem::F32)),
    (54, "MPI_REAL8", 8, 8, Class::Float, Kernel::Elem(Elem::F64)),
    (55, "MPI_COMPLEX8", 8, 4, Class::Complex, Kernel::Wide(26)),
    (56, "MPI_COMPLEX16", 16, 8, Class::Complex, Kernel::Wide(27)),
    (57, "MPI_LOGICAL1", 1, 1, Class::Logical, Kernel::Elem(Elem::I8)),
    (58, "MPI_LOGICAL2", 2, 2, Class::Logical, Kernel::Elem(Elem::I16)),
    (59, "MPI_LOGICAL4", 4, 4, Class::Logical, Kernel::Elem(Elem::I32)),
    (60, "MPI_LOGICAL8", 8, 8, Class::Logical, Kernel::Elem(Elem::I64)),
    (CXX_BOOL, "MPI_CXX_BOOL", 1, 1, Class::Logical, Kernel::Elem(Elem::Bool)),
    (62, "MPI_CXX_FLOAT_COMPLEX", 8, 4, Class::Complex, Kernel::Wide(26)),
    (63, "MPI_CXX_DOUBLE_COMPLEX", 16, 8, Class::Complex, Kernel::Wide(27)),
    (64, "MPI_CXX_LONG_DOUBLE_COMPLEX", 32, 16, Class::Complex, Kernel::Wide(28)),
];

/// (handle, name, size, align, element type for the collectives' own op
/// check, primitive sizes of one item) of a named type.
pub(crate) type NamedType = (c_int, &'static str, usize, usize, Option<Elem>, Vec<usize>);

/// The named types of this module in handle order (they follow the C
/// types' handles).
pub(crate) fn named() -> impl Iterator<Item = NamedType> {
    NAMED.iter().map(|&(h, name, size, align, class, _)| {
        let elem = (h == CXX_BOOL).then_some(Elem::Bool);
        let prims = if class == Class::Pair {
            vec![size / 2, size / 2]
        } else {
            vec![size]
        };
        (h, name, size, align, elem, prims)
    })
}

fn entry(h: c_int) -> Option<(c_int, &'static str, Class, Kernel)> {
    NAMED
        .iter()
        .find(|e| e.0 == h)
        .map(|&(h, name, _, _, class, kernel)| (h, name, class, kernel))
}

/// The C complex type whose [`crate::wide_ops`] kernel reduces type handle
/// `h` (`h` itself for the C types).
pub(crate) fn wide_alias(h: c_int) -> c_int {
    match entry(h) {
        Some((_, _, _, Kernel::Wide(c))) => c,
        _ => h,
    }
}

fn allowed(class: Class, o: &Op) -> bool {
    match class {
        Class::Integer => matches!(
            o,
            Op::Max | Op::Min | Op::Sum | Op::Prod | Op::Band | Op::Bor | Op::Bxor
        ),
        Class::Float => matches!(o, Op::Max | Op::Min | Op::Sum | Op::Prod),
        Class::Logical => matches!(o, Op::Land | Op::Lor | Op::Lxor),
        Class::Complex => matches!(o, Op::Sum | Op::Prod),
        Class::Pair => matches!(o, Op::Maxloc | Op::Minloc),
        Class::None => false,
    }
}

/// The element type and op of the predefined op `o` on `t`, when `t` is
/// made of one of these types (except `MPI_CXX_BOOL`, reduced as a C bool);
/// `None` for other types, and for the complex ones the standard defines
/// `o` on (then [`crate::wide_ops::bind`], the caller, reduces them with the
/// C complex kernel). A pair the standard does not define is `MPI_ERR_OP`.
pub(crate) fn bind(o: &Op, t: &Dtype) -> Option<Res<(Elem, Op)>> {
    let (_, name, class, kernel) = entry(t.elem?.0)?;
    if !allowed(class, o) {
        return Some(Err(Error::new(
            C::Op,
            format!("{} is not defined on {name} (MPI-4.0 §6.9.2)", o.name()),
        )));
    }
    Some(match kernel {
        Kernel::Elem(e) => Ok((e, o.clone())),
        // `crate::wide_ops::bind` goes on with the C complex kernel.
        Kernel::Wide(_) => return None,
        Kernel::PairF32 => Ok(pair_op::<4>(o, f32_of)),
        Kernel::PairF64 => Ok(pair_op::<8>(o, f64_of)),
        Kernel::None => Err(Error::new(C::Op, format!("no op is defined on {name}"))),
    })
}

fn f32_of(b: &[u8]) -> f64 {
    f32::from_ne_bytes(b[..4].try_into().expect("4 bytes")) as f64
}

fn f64_of(b: &[u8]) -> f64 {
    f64::from_ne_bytes(b[..8].try_into().expect("8 bytes"))
}

/// MAXLOC / MINLOC over pairs of two reals of `W` bytes each (value,
/// index): the larger (smaller) value wins, a tie keeps the smaller index.
fn pair_op<const W: usize>(o: &Op, read: fn(&[u8]) -> f64) -> (Elem, Op) {
    let max = matches!(o, Op::Maxloc);
    let f = move |input: &[u8], inout: &mut [u8], _count: usize, _: Elem| {
        for (a, b) in input.chunks_exact(2 * W).zip(inout.chunks_exact_mut(2 * W)) {
            let (av, ai) = (read(a), read(&a[W..]));
            let (bv, bi) = (read(b), read(&b[W..]));
            let take_a = if max { av > bv } else { av < bv };
            if take_a || (av == bv && ai < bi) {
                b.copy_from_slice(a);
            }
        }
    };
    (
        Elem::Derived(2 * W as u32),
        Op::User(UserOp::new(o.name(), true, f)),
    )
}

/// The predefined-like types `MPI_Type_create_f90_*` returned, by
/// (combiner, p, r): MPI-4.0 §19.1.9 asks for the same handle on the same
/// arguments, and these handles are never freed.
static F90_TYPES: Mutex<BTreeMap<F90Key, c_int>> = Mutex::new(BTreeMap::new());

/// (combiner, p, r) of an f90 type.
type F90Key = (i32, c_int, c_int);

const UNDEFINED: c_int = -32766;

/// A type of combiner `comb` with parameters `ints`, of the layout of the
/// named type `base`.
fn f90_type(comb: i32, p: c_int, r: c_int, ints: Vec<c_int>, base: c_int) -> Res<c_int> {
    let mut cache = F90_TYPES.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(&h) = cache.get(&(comb, p, r)) {
        return Ok(h);
    }
    let mut tb = tables();
    let mut t = (*tb.dtype(base)?).clone();
    t.combiner = comb;
    t.ints = ints;
    t.predefined = true;
    t.committed = true;
    let h = tb.add_type(t);
    cache.insert((comb, p, r), h);
    Ok(h)
}

/// The gfortran kind of `SELECTED_REAL_KIND(p, r)` as a REAL handle, or
/// an error for what no C type holds (beyond double precision).
fn real_kind(p: c_int, r: c_int, what: &str) -> Res<usize> {
    if p == UNDEFINED && r == UNDEFINED {
        return Err(Error::new(
            C::Arg,
            format!("{what}: p and r cannot both be MPI_UNDEFINED"),
        ));
    }
    let p = if p == UNDEFINED { 0 } else { p };
    let r = if r == UNDEFINED { 0 } else { r };
    if p <= 6 && r <= 37 {
        Ok(4)
    } else if p <= 15 && r <= 307 {
        Ok(8)
    } else {
        Err(Error::new(
            C::Arg,
            format!("{what}: no real type has precision {p} and range {r}"),
        ))
    }
}

/// `MPI_Type_create_f90_integer`: the INTEGER kind of `SELECTED_INT_KIND(r)`.
#[no_mangle]
pub extern "C" fn MPI_Type_create_f90_integer(r: c_int, newtype: *mut c_int) -> c_int {
    guard("MPI_Type_create_f90_integer", COMM_WORLD, || {
        let base = match r {
            _ if r == UNDEFINED => 0,
            ..=2 => 49,
            3..=4 => 50,
            5..=9 => 51,
            10..=18 => 52,
            _ => 0,
        };
        if base == 0 {
            return Err(Error::new(
                C::Arg,
                format!("MPI_Type_create_f90_integer: no integer type has range {r}"),
            ));
        }
        let h = f90_type(combiner::F90_INTEGER, UNDEFINED, r, vec![r], base)?;
        put(newtype, h, "newtype")
    })
}

/// `MPI_Type_create_f90_real`: the REAL kind of `SELECTED_REAL_KIND(p, r)`.
#[no_mangle]
pub extern "C" fn MPI_Type_create_f90_real(p: c_int, r: c_int, newtype: *mut c_int) -> c_int {
    guard("MPI_Type_create_f90_real", COMM_WORLD, || {
        let base = match real_kind(p, r, "MPI_Type_create_f90_real")? {
            4 => 53,
            _ => 54,
        };
        let h = f90_type(combiner::F90_REAL, p, r, vec![p, r], base)?;
        put(newtype, h, "newtype")
    })
}

/// `MPI_Type_create_f90_complex`: the COMPLEX of the REAL kind of
/// `SELECTED_REAL_KIND(p, r)`.
#[no_mangle]
pub extern "C" fn MPI_Type_create_f90_complex(p: c_int, r: c_int, newtype: *mut c_int) -> c_int {
    guard("MPI_Type_create_f90_complex", COMM_WORLD, || {
        let base = match real_kind(p, r, "MPI_Type_create_f90_complex")? {
            4 => 55,
            _ => 56,
        };
        let h = f90_type(combiner::F90_COMPLEX, p, r, vec![p, r], base)?;
        put(newtype, h, "newtype")
    })
}

/// `MPI_Type_get_value_index` (MPI-4.1 §6.9.4): the predefined pair type
/// of a value type and an index type, `MPI_DATATYPE_NULL` when there is
/// none.
#[no_mangle]
pub extern "C" fn MPI_Type_get_value_index(
    value_type: c_int,
    index_type: c_int,
    pair_type: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_value_index", COMM_WORLD, || {
        {
            let tb = tables();
            tb.dtype(value_type)?;
            tb.dtype(index_type)?;
        }
        let pair = match (value_type, index_type) {
            (14, 8) => 33,
            (15, 8) => 34,
            (10, 8) => 35,
            (8, 8) => 36,
            (6, 8) => 37,
            (16, 8) => 38,
            (39, 39) => 46,
            (40, 40) => 47,
            (41, 41) => 48,
            _ => 0,
        };
        put(pair_type, pair, "pair_type")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_follow_the_standard() {
        assert!(allowed(Class::Integer, &Op::Bxor));
        assert!(!allowed(Class::Integer, &Op::Land));
        assert!(allowed(Class::Logical, &Op::Lxor));
        assert!(!allowed(Class::Logical, &Op::Sum));
        assert!(!allowed(Class::Complex, &Op::Max));
        assert!(!allowed(Class::None, &Op::Sum));
    }

    #[test]
    fn real_pairs_take_the_lower_index_on_ties() {
        let (_, op) = pair_op::<4>(&Op::Minloc, f32_of);
        let bytes = |v: &[f32]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let a = bytes(&[1.0, 5.0, 2.0, 1.0, 3.0, 7.0]);
        let mut b = bytes(&[1.0, 3.0, 1.0, 9.0, 3.0, 8.0]);
        op.apply(Elem::Derived(8), &a, &mut b).unwrap();
        assert_eq!(b, bytes(&[1.0, 3.0, 1.0, 9.0, 3.0, 7.0]));
    }
}
