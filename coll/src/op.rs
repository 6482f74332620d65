//! Reduction operations: typed kernels for every predefined op on every
//! predefined type it applies to, and user-defined ops.
//!
//! Kernel convention (MPI's `MPI_User_function`): `inout[i] = in[i] op inout[i]`,
//! `in` being the left operand. For non-commutative ops the framework always
//! passes the contribution of the lower ranks as `in`, so results combine in
//! rank order: `x0 op x1 op ... op x(p-1)`.
//!
//! Which op applies to which class (MPI-3.1 §5.9.2), checked by [`Op::check`]:
//!
//! | op | integer | float | logical | byte | pair |
//! |----|---------|-------|---------|------|------|
//! | MAX, MIN, SUM, PROD | yes | yes | - | - | - |
//! | LAND, LOR, LXOR | yes | - | yes | - | - |
//! | BAND, BOR, BXOR | yes | - | - | yes | - |
//! | MAXLOC, MINLOC | - | - | - | - | yes |
//!
//! Integer arithmetic wraps (C leaves signed overflow undefined; wrapping is
//! what every MPI does in practice). Logical results are 1 or 0. MAXLOC keeps
//! the larger value and, on a tie, the smaller index (MINLOC likewise).
//! Long double and the C complex types have no Rust arithmetic: the C API
//! reduces them with C kernels run as commutative user-style ops over
//! [`Datatype::Derived`] items (`capi/src/wide_ops.rs`).

use std::fmt;
use std::sync::Arc;

use crate::datatype::{Datatype, TypeClass};
use crate::{CollError, Result};

/// The signature of a user-defined reduction: `(in, inout, count, datatype)`,
/// computing `inout = in op inout` element-wise over `count` elements. The C
/// API wraps `MPI_User_function` into this.
pub type UserFn = dyn Fn(&[u8], &mut [u8], usize, Datatype) + Send + Sync;

/// A user-defined op (`MPI_Op_create`).
#[derive(Clone)]
pub struct UserOp {
    f: Arc<UserFn>,
    commutative: bool,
    name: String,
}

impl UserOp {
    /// Wraps `f`; `commutative = false` makes every algorithm combine in rank order.
    pub fn new(
        name: &str,
        commutative: bool,
        f: impl Fn(&[u8], &mut [u8], usize, Datatype) + Send + Sync + 'static,
    ) -> Self {
        UserOp {
            f: Arc::new(f),
            commutative,
            name: name.to_owned(),
        }
    }
}

impl fmt::Debug for UserOp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "UserOp({}, commutative={})", self.name, self.commutative)
    }
}

/// A reduction operation.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum Op {
    /// `MPI_MAX`.
    Max,
    /// `MPI_MIN`.
    Min,
    /// `MPI_SUM`.
    Sum,
    /// `MPI_PROD`.
    Prod,
    /// `MPI_LAND`.
    Land,
    /// `MPI_LOR`.
    Lor,
    /// `MPI_LXOR`.
    Lxor,
    /// `MPI_BAND`.
    Band,
    /// `MPI_BOR`.
    Bor,
    /// `MPI_BXOR`.
    Bxor,
    /// `MPI_MAXLOC`.
    Maxloc,
    /// `MPI_MINLOC`.
    Minloc,
    /// A user-defined op.
    User(UserOp),
}

impl Op {
    /// Every predefined op.
    pub const PREDEFINED: &'static [Op] = &[
        Op::Max,
        Op::Min,
        Op::Sum,
        Op::Prod,
        Op::Land,
        Op::Lor,
        Op::Lxor,
        Op::Band,
        Op::Bor,
        Op::Bxor,
        Op::Maxloc,
        Op::Minloc,
    ];

    /// The MPI name (`"MPI_SUM"`), or the user op's name.
    pub fn name(&self) -> &str {
        match self {
            Op::Max => "MPI_MAX",
            Op::Min => "MPI_MIN",
            Op::Sum => "MPI_SUM",
            Op::Prod => "MPI_PROD",
            Op::Land => "MPI_LAND",
            Op::Lor => "MPI_LOR",
            Op::Lxor => "MPI_LXOR",
            Op::Band => "MPI_BAND",
            Op::Bor => "MPI_BOR",
            Op::Bxor => "MPI_BXOR",
            Op::Maxloc => "MPI_MAXLOC",
            Op::Minloc => "MPI_MINLOC",
            Op::User(u) => &u.name,
        }
    }

    /// Whether the op is commutative (all predefined ones are).
    pub fn is_commutative(&self) -> bool {
        match self {
            Op::User(u) => u.commutative,
            _ => true,
        }
    }

    /// Whether the op applies to `dtype` (user ops apply to every type).
    pub fn applies_to(&self, dtype: Datatype) -> bool {
        use TypeClass::*;
        let c = dtype.class();
        match self {
            Op::Max | Op::Min | Op::Sum | Op::Prod => matches!(c, Integer | Float),
            Op::Land | Op::Lor | Op::Lxor => matches!(c, Integer | Logical),
            Op::Band | Op::Bor | Op::Bxor => matches!(c, Integer | Byte),
            Op::Maxloc | Op::Minloc => c == Pair,
            Op::User(_) => true,
        }
    }

    /// `Ok` if the op applies to `dtype`, else `MPI_ERR_OP`.
    pub fn check(&self, dtype: Datatype) -> Result<()> {
        if self.applies_to(dtype) {
            Ok(())
        } else {
            Err(CollError::OpType {
                op: self.name().to_owned(),
                dtype: dtype.name(),
            })
        }
    }

    /// `inout = input op inout`, element-wise. Both slices must have the same
    /// length, a multiple of the element size.
    pub fn apply(&self, dtype: Datatype, input: &[u8], inout: &mut [u8]) -> Result<()> {
        self.apply_dir::<false>(dtype, input, inout)
    }

    /// `inout = inout op input`, element-wise (the incoming operand on the
    /// right): what a rank holding the lower ranks' partial result does with
    /// a higher rank's data, without copying either vector. Predefined ops
    /// swap the operands inside the typed kernel (exact even where the
    /// order matters, e.g. MAX with NaN); user ops go through one copy.
    pub fn apply_rev(&self, dtype: Datatype, input: &[u8], inout: &mut [u8]) -> Result<()> {
        if let Op::User(u) = self {
            if input.len() != inout.len() {
                return Err(CollError::Intern(format!(
                    "reduction over {} and {} bytes",
                    input.len(),
                    inout.len()
                )));
            }
            let count = dtype.count_of(input.len())?;
            let mut tmp = input.to_vec();
            (u.f)(inout, &mut tmp, count, dtype);
            inout.copy_from_slice(&tmp);
            return Ok(());
        }
        self.apply_dir::<true>(dtype, input, inout)
    }

    /// The typed kernels; `REV` puts `input` on the right.
    fn apply_dir<const REV: bool>(
        &self,
        dtype: Datatype,
        input: &[u8],
        inout: &mut [u8],
    ) -> Result<()> {
        if input.len() != inout.len() {
            return Err(CollError::Intern(format!(
                "reduction over {} and {} bytes",
                input.len(),
                inout.len()
            )));
        }
        let count = dtype.count_of(input.len())?;
        if let Op::User(u) = self {
            if REV {
                return Err(CollError::Intern("user op in the reversed kernel".into()));
            }
            (u.f)(input, inout, count, dtype);
            return Ok(());
        }
        self.check(dtype)?;
        match dtype {
            Datatype::I8 => int::<i8, REV>(self, input, inout),
            Datatype::U8 => int::<u8, REV>(self, input, inout),
            Datatype::I16 => int::<i16, REV>(self, input, inout),
            Datatype::U16 => int::<u16, REV>(self, input, inout),
            Datatype::I32 => int::<i32, REV>(self, input, inout),
            Datatype::U32 => int::<u32, REV>(self, input, inout),
            Datatype::I64 => int::<i64, REV>(self, input, inout),
            Datatype::U64 => int::<u64, REV>(self, input, inout),
            Datatype::F32 => float::<f32, REV>(self, input, inout),
            Datatype::F64 => float::<f64, REV>(self, input, inout),
            Datatype::Bool => int::<u8, REV>(self, input, inout),
            Datatype::Byte => int::<u8, REV>(self, input, inout),
            Datatype::Char => int::<std::ffi::c_char, REV>(self, input, inout),
            Datatype::FloatInt => pair::<f32, REV>(self, input, inout, 8, 4),
            Datatype::DoubleInt => pair::<f64, REV>(self, input, inout, 16, 8),
            Datatype::LongInt => pair::<i64, REV>(self, input, inout, 16, 8),
            Datatype::TwoInt => pair::<i32, REV>(self, input, inout, 8, 4),
            Datatype::ShortInt => pair::<i16, REV>(self, input, inout, 8, 4),
            Datatype::PackedDoubleInt => pair::<f64, REV>(self, input, inout, 12, 8),
            Datatype::PackedLongInt => pair::<i64, REV>(self, input, inout, 12, 8),
            Datatype::PackedShortInt => pair::<i16, REV>(self, input, inout, 6, 2),
            Datatype::Derived(_) => unreachable_class(self, dtype),
        }
    }
}

fn unreachable_class(op: &Op, dtype: Datatype) -> Result<()> {
    Err(CollError::OpType {
        op: op.name().to_owned(),
        dtype: dtype.name(),
    })
}

/// A fixed-size native-endian element.
trait Elem: Copy + PartialOrd {
    const SIZE: usize;
    fn read(b: &[u8]) -> Self;
    fn write(self, b: &mut [u8]);
}

/// Integer element operations.
trait IntElem: Elem {
    fn add(self, o: Self) -> Self;
    fn mul(self, o: Self) -> Self;
    fn and(self, o: Self) -> Self;
    fn or(self, o: Self) -> Self;
    fn xor(self, o: Self) -> Self;
    fn is_true(self) -> bool;
    fn from_bool(b: bool) -> Self;
}

macro_rules! elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn read(b: &[u8]) -> Self {
                let mut a = [0u8; std::mem::size_of::<$t>()];
                a.copy_from_slice(&b[..Self::SIZE]);
                <$t>::from_ne_bytes(a)
            }
            #[inline(always)]
            fn write(self, b: &mut [u8]) {
                b[..Self::SIZE].copy_from_slice(&self.to_ne_bytes());
            }
        }
    )*};
}
elem!(i8, u8, i16, u16, i32, u32, i64, u64, f32, f64);

macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl IntElem for $t {
            #[inline(always)] fn add(self, o: Self) -> Self { self.wrapping_add(o) }
            #[inline(always)] fn mul(self, o: Self) -> Self { self.wrapping_mul(o) }
            #[inline(always)] fn and(self, o: Self) -> Self { self & o }
            #[inline(always)] fn or(self, o: Self) -> Self { self | o }
            #[inline(always)] fn xor(self, o: Self) -> Self { self ^ o }
            #[inline(always)] fn is_true(self) -> bool { self != 0 }
            #[inline(always)] fn from_bool(b: bool) -> Self { b as $t }
        }
    )*};
}
int_elem!(i8, u8, i16, u16, i32, u32, i64, u64);

#[inline(always)]
fn zip<T: Elem, const REV: bool>(input: &[u8], inout: &mut [u8], f: impl Fn(T, T) -> T) {
    for (a, b) in input
        .chunks_exact(T::SIZE)
        .zip(inout.chunks_exact_mut(T::SIZE))
    {
        let r = if REV {
            f(T::read(b), T::read(a))
        } else {
            f(T::read(a), T::read(b))
        };
        r.write(b);
    }
}

fn int<T: IntElem, const REV: bool>(op: &Op, input: &[u8], inout: &mut [u8]) -> Result<()> {
    match op {
        Op::Max => zip::<T, REV>(input, inout, |a, b| if a > b { a } else { b }),
        Op::Min => zip::<T, REV>(input, inout, |a, b| if a < b { a } else { b }),
        Op::Sum => zip::<T, REV>(input, inout, T::add),
        Op::Prod => zip::<T, REV>(input, inout, T::mul),
        Op::Land => zip::<T, REV>(input, inout, |a, b| {
            T::from_bool(a.is_true() && b.is_true())
        }),
        Op::Lor => zip::<T, REV>(input, inout, |a, b| {
            T::from_bool(a.is_true() || b.is_true())
        }),
        Op::Lxor => zip::<T, REV>(input, inout, |a, b| {
            T::from_bool(a.is_true() != b.is_true())
        }),
        Op::Band => zip::<T, REV>(input, inout, T::and),
        Op::Bor => zip::<T, REV>(input, inout, T::or),
        Op::Bxor => zip::<T, REV>(input, inout, T::xor),
        Op::Maxloc | Op::Minloc | Op::User(_) => {
            return Err(CollError::Intern(format!(
                "{} in the integer kernel",
                op.name()
            )))
        }
    }
    Ok(())
}

trait FloatElem: Elem + std::ops::Add<Output = Self> + std::ops::Mul<Output = Self> {}
impl FloatElem for f32 {}
impl FloatElem for f64 {}

fn float<T: FloatElem, const REV: bool>(op: &Op, input: &[u8], inout: &mut [u8]) -> Result<()> {
    match op {
        // NaN handling follows C's `a > b ? a : b` as Open MPI's kernels do.
        Op::Max => zip::<T, REV>(input, inout, |a, b| if a > b { a } else { b }),
        Op::Min => zip::<T, REV>(input, inout, |a, b| if a < b { a } else { b }),
        Op::Sum => zip::<T, REV>(input, inout, |a, b| a + b),
        Op::Prod => zip::<T, REV>(input, inout, |a, b| a * b),
        _ => {
            return Err(CollError::Intern(format!(
                "{} in the float kernel",
                op.name()
            )))
        }
    }
    Ok(())
}

/// MAXLOC/MINLOC on `struct { V v; int i; }` of `stride` bytes with the index at `idx_off`.
fn pair<V: Elem, const REV: bool>(
    op: &Op,
    input: &[u8],
    inout: &mut [u8],
    stride: usize,
    idx_off: usize,
) -> Result<()> {
    let max = match op {
        Op::Maxloc => true,
        Op::Minloc => false,
        _ => {
            return Err(CollError::Intern(format!(
                "{} in the pair kernel",
                op.name()
            )))
        }
    };
    for (a, b) in input
        .chunks_exact(stride)
        .zip(inout.chunks_exact_mut(stride))
    {
        let (mut av, mut ai) = (V::read(a), i32::read(&a[idx_off..]));
        let (mut bv, mut bi) = (V::read(b), i32::read(&b[idx_off..]));
        if REV {
            std::mem::swap(&mut av, &mut bv);
            std::mem::swap(&mut ai, &mut bi);
        }
        let take_a = if max { av > bv } else { av < bv };
        let (v, i) = if take_a {
            (av, ai)
        } else if av == bv {
            (av, ai.min(bi))
        } else {
            (bv, bi)
        };
        v.write(b);
        i.write(&mut b[idx_off..]);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes_i32(v: &[i32]) -> Vec<u8> {
        v.iter().flat_map(|x| x.to_ne_bytes()).collect()
    }
    fn i32s(b: &[u8]) -> Vec<i32> {
        b.chunks_exact(4)
            .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
            .collect()
    }

    #[test]
    fn applicability_table() {
        for op in Op::PREDEFINED {
            for &t in Datatype::ALL {
                let expect = match (op, t.class()) {
                    (_, TypeClass::None) => false,
                    (Op::Maxloc | Op::Minloc, c) => c == TypeClass::Pair,
                    (_, TypeClass::Pair) => false,
                    (Op::Max | Op::Min | Op::Sum | Op::Prod, c) => {
                        c == TypeClass::Integer || c == TypeClass::Float
                    }
                    (Op::Land | Op::Lor | Op::Lxor, c) => {
                        c == TypeClass::Integer || c == TypeClass::Logical
                    }
                    (_, c) => c == TypeClass::Integer || c == TypeClass::Byte,
                };
                assert_eq!(op.applies_to(t), expect, "{} on {t}", op.name());
                let n = t.size() * 3;
                let r = op.apply(t, &vec![1u8; n], &mut vec![2u8; n]);
                assert_eq!(r.is_ok(), expect, "{} on {t}: {r:?}", op.name());
                if !expect {
                    assert_eq!(r.unwrap_err().class(), tmpi_base::error::MpiErrorClass::Op);
                }
            }
        }
    }

    /// `apply_rev(x, y)` gives `y op x` exactly: checked on a non-commutative
    /// user op, on MAX with a NaN (where the operand order shows) and on
    /// MAXLOC ties, against `apply` with the operands swapped.
    #[test]
    fn reversed_kernels_put_the_input_on_the_right() {
        // 2x2 matrix product on i32: not commutative.
        let mat = Op::User(UserOp::new("matmul", false, |a, b, n, _| {
            for k in 0..n / 4 {
                let x = i32s(&a[k * 16..k * 16 + 16]);
                let y = i32s(&b[k * 16..k * 16 + 16]);
                let r = [
                    x[0] * y[0] + x[1] * y[2],
                    x[0] * y[1] + x[1] * y[3],
                    x[2] * y[0] + x[3] * y[2],
                    x[2] * y[1] + x[3] * y[3],
                ];
                b[k * 16..k * 16 + 16].copy_from_slice(&bytes_i32(&r));
            }
        }));
        let x = bytes_i32(&[1, 2, 3, 4, 0, 1, 1, 0]);
        let y = bytes_i32(&[5, 6, 7, 8, 2, 0, 0, 3]);
        let f64s = |v: &[f64]| v.iter().flat_map(|x| x.to_ne_bytes()).collect::<Vec<u8>>();
        let cases: Vec<(Op, Datatype, Vec<u8>, Vec<u8>)> = vec![
            (mat, Datatype::I32, x.clone(), y.clone()),
            (Op::Sum, Datatype::I32, x.clone(), y.clone()),
            (
                Op::Max,
                Datatype::F64,
                f64s(&[f64::NAN, 1.0, 2.0]),
                f64s(&[3.0, f64::NAN, 1.0]),
            ),
            (
                Op::Maxloc,
                Datatype::TwoInt,
                x.clone(),
                bytes_i32(&[1, 9, 5, 0, 0, 1, 1, 1]),
            ),
        ];
        for (op, t, input, inout) in cases {
            let mut want = input.clone();
            op.apply(t, &inout, &mut want).unwrap();
            let mut got = inout.clone();
            op.apply_rev(t, &input, &mut got).unwrap();
            let mut forward = inout.clone();
            op.apply(t, &input, &mut forward).unwrap();
            assert_eq!(got, want, "{} on {t}", op.name());
            if op.name() == "matmul" {
                assert_ne!(forward, want, "the op must not commute for this case");
            }
        }
    }

    #[test]
    fn integer_kernels() {
        let a = bytes_i32(&[5, -3, 0, i32::MAX]);
        let cases: Vec<(Op, Vec<i32>)> = vec![
            (Op::Max, vec![5, 7, 0, i32::MAX]),
            (Op::Min, vec![2, -3, -1, 1]),
            (Op::Sum, vec![7, 4, -1, i32::MIN]),
            (Op::Prod, vec![10, -21, 0, i32::MAX]),
            (Op::Land, vec![1, 1, 0, 1]),
            (Op::Lor, vec![1, 1, 1, 1]),
            (Op::Lxor, vec![0, 0, 1, 0]),
            (Op::Band, vec![0, 5, 0, 1]),
            (Op::Bor, vec![7, -1, -1, i32::MAX]),
            (Op::Bxor, vec![7, -6, -1, i32::MAX - 1]),
        ];
        for (op, want) in cases {
            let mut b = bytes_i32(&[2, 7, -1, 1]);
            op.apply(Datatype::I32, &a, &mut b).unwrap();
            assert_eq!(i32s(&b), want, "{}", op.name());
        }
    }

    #[test]
    fn unsigned_and_float() {
        let mut b = 250u8.to_ne_bytes().to_vec();
        Op::Sum.apply(Datatype::U8, &[10], &mut b).unwrap();
        assert_eq!(b, [4]);
        let mut f: Vec<u8> = [1.5f64, -2.0]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        let a: Vec<u8> = [0.25f64, 8.0]
            .iter()
            .flat_map(|x| x.to_ne_bytes())
            .collect();
        Op::Prod.apply(Datatype::F64, &a, &mut f).unwrap();
        let r: Vec<f64> = f
            .chunks_exact(8)
            .map(|c| f64::from_ne_bytes(c.try_into().unwrap()))
            .collect();
        assert_eq!(r, [0.375, -16.0]);
    }

    #[test]
    fn maxloc_ties_take_lower_index() {
        // MPI_DOUBLE_INT: value f64 at 0, index i32 at 8, 4 padding bytes.
        let enc = |v: f64, i: i32| {
            let mut b = [0xAAu8; 16];
            b[..8].copy_from_slice(&v.to_ne_bytes());
            b[8..12].copy_from_slice(&i.to_ne_bytes());
            b
        };
        let a = [enc(3.0, 7), enc(1.0, 2), enc(5.0, 9)].concat();
        let mut b = [enc(3.0, 4), enc(2.0, 8), enc(5.0, 1)].concat();
        let mut c = b.clone();
        Op::Maxloc.apply(Datatype::DoubleInt, &a, &mut b).unwrap();
        assert_eq!(b, [enc(3.0, 4), enc(2.0, 8), enc(5.0, 1)].concat());
        Op::Minloc.apply(Datatype::DoubleInt, &a, &mut c).unwrap();
        assert_eq!(c, [enc(3.0, 4), enc(1.0, 2), enc(5.0, 1)].concat());
        // MPI_SHORT_INT: index at offset 4.
        let mut s = [0u8; 8];
        s[..2].copy_from_slice(&9i16.to_ne_bytes());
        s[4..].copy_from_slice(&3i32.to_ne_bytes());
        let mut t = [0u8; 8];
        t[..2].copy_from_slice(&(-9i16).to_ne_bytes());
        t[4..].copy_from_slice(&1i32.to_ne_bytes());
        Op::Maxloc.apply(Datatype::ShortInt, &s, &mut t).unwrap();
        assert_eq!(t, s);
    }

    #[test]
    fn packed_pairs_have_no_padding() {
        // The C API's MPI_DOUBLE_INT / MPI_LONG_INT: 12 bytes, index at 8;
        // MPI_SHORT_INT: 6 bytes, index at 2.
        let d = |v: f64, i: i32| [&v.to_ne_bytes()[..], &i.to_ne_bytes()].concat();
        let a = [d(3.0, 7), d(1.0, 2), d(5.0, 9)].concat();
        let mut b = [d(3.0, 4), d(2.0, 8), d(6.0, 1)].concat();
        assert_eq!(Datatype::PackedDoubleInt.count_of(b.len()).unwrap(), 3);
        Op::Minloc
            .apply(Datatype::PackedDoubleInt, &a, &mut b)
            .unwrap();
        assert_eq!(b, [d(3.0, 4), d(1.0, 2), d(5.0, 9)].concat());
        let l = |v: i64, i: i32| [&v.to_ne_bytes()[..], &i.to_ne_bytes()].concat();
        let mut m = [l(-1, 5), l(9, 0)].concat();
        Op::Maxloc
            .apply_rev(
                Datatype::PackedLongInt,
                &[l(4, 1), l(9, 3)].concat(),
                &mut m,
            )
            .unwrap();
        assert_eq!(m, [l(4, 1), l(9, 0)].concat());
        let s = |v: i16, i: i32| [&v.to_ne_bytes()[..], &i.to_ne_bytes()].concat();
        let mut t = [s(2, 1), s(-3, 4)].concat();
        Op::Maxloc
            .apply(
                Datatype::PackedShortInt,
                &[s(7, 0), s(-3, 2)].concat(),
                &mut t,
            )
            .unwrap();
        assert_eq!(t, [s(7, 0), s(-3, 2)].concat());
        assert!(Op::Sum.check(Datatype::PackedShortInt).is_err());
    }

    #[test]
    fn user_op_and_length_errors() {
        let concat = Op::User(UserOp::new("first", false, |a, b, n, t| {
            assert_eq!(t, Datatype::I32);
            assert_eq!(n * 4, a.len());
            b.copy_from_slice(a);
        }));
        assert!(!concat.is_commutative());
        let mut b = bytes_i32(&[1]);
        concat
            .apply(Datatype::I32, &bytes_i32(&[9]), &mut b)
            .unwrap();
        assert_eq!(i32s(&b), [9]);
        assert!(Op::Sum.apply(Datatype::I32, &[0; 4], &mut [0; 8]).is_err());
        let e = Op::Sum
            .apply(Datatype::I32, &[0; 6], &mut [0; 6])
            .unwrap_err();
        assert_eq!(e.class(), tmpi_base::error::MpiErrorClass::Count);
    }
}
