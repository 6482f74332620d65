//! Applying accumulates and compare-and-swap to window memory: the
//! reduction of an origin's packed data into a target region, one body for
//! pt2pt's target (applying a request that arrived) and sm's origin
//! (applying directly, under the target's accumulate lock). The caller
//! makes the application atomic with respect to the others.

use tmpi_coll::{Datatype, Op};

use crate::mem::View;
use crate::{AccOp, OscError, Result};

/// Applies `data` by `op` to the regions `regs()` of `mem` (checked here):
/// the old contents (what get_accumulate answers; empty when the regions
/// are out of range) and whether the accumulate was applied (nothing is
/// written when it was not).
pub(crate) fn accumulate<I>(
    mem: &View<'_>,
    regs: impl Fn() -> I,
    op: Option<&AccOp>,
    elem: Option<Datatype>,
    wide: Option<u8>,
    data: &[u8],
) -> (Vec<u8>, Result<()>)
where
    I: Iterator<Item = (i128, u64)>,
{
    let n = mem.check(regs());
    let mut old = Vec::with_capacity(*n.as_ref().unwrap_or(&0));
    if n.is_ok() {
        mem.gather(regs(), &mut old);
    }
    let res = n.and_then(|_| {
        let op = op.ok_or_else(|| OscError::Op("accumulate without op".into()))?;
        let mut new = old.clone();
        if matches!(op, AccOp::NoOp) {
            return Ok(());
        }
        combine(op, elem, wide, data, &mut new)?;
        mem.scatter(regs(), &new);
        Ok(())
    });
    (old, res)
}

/// Largest scratch buffer a thread keeps between accumulates
/// ([`accumulate_in_place`]); a larger one is given back after use.
const SCRATCH_KEEP: usize = 4 << 20;

thread_local! {
    /// The thread's buffer for [`accumulate_in_place`].
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// [`accumulate`] for an accumulate that returns nothing: the regions are
/// gathered into this thread's scratch buffer, combined there and
/// scattered back, with no allocation once the buffer has grown. (A new
/// copy per call, freed after it, made large accumulates pay page faults
/// every time: glibc gives a freed top of the heap above 128 KiB back to
/// the kernel, and the next call faults it in again.)
pub(crate) fn accumulate_in_place<I>(
    mem: &View<'_>,
    regs: impl Fn() -> I,
    op: &AccOp,
    elem: Option<Datatype>,
    wide: Option<u8>,
    data: &[u8],
) -> Result<()>
where
    I: Iterator<Item = (i128, u64)>,
{
    mem.check(regs())?;
    if matches!(op, AccOp::NoOp) {
        return Ok(());
    }
    SCRATCH.with(|cell| {
        // A scratch buffer already in use on this thread (not expected:
        // nothing here calls back) is left alone; a fresh one serves.
        let mut fresh = Vec::new();
        let mut held = cell.try_borrow_mut();
        let buf = match held.as_deref_mut() {
            Ok(b) => b,
            Err(_) => &mut fresh,
        };
        buf.clear();
        mem.gather(regs(), buf);
        let res = combine(op, elem, wide, data, buf);
        if res.is_ok() {
            mem.scatter(regs(), buf);
        }
        if buf.capacity() > SCRATCH_KEEP {
            *buf = Vec::new();
        }
        res
    })
}

/// `new = data op new` for an op other than `MPI_NO_OP` (which leaves
/// `new` as it is): the reduction of an accumulate, by the predefined
/// element type `elem` or the wide kernel of kind `wide`.
pub(crate) fn combine(
    op: &AccOp,
    elem: Option<Datatype>,
    wide: Option<u8>,
    data: &[u8],
    new: &mut [u8],
) -> Result<()> {
    match op {
        AccOp::NoOp => {}
        AccOp::Replace => {
            if data.len() != new.len() {
                return Err(OscError::Type(format!(
                    "accumulate of {} bytes into {}",
                    data.len(),
                    new.len()
                )));
            }
            new.copy_from_slice(data);
        }
        AccOp::Reduce(o) => {
            if data.len() != new.len() {
                return Err(OscError::Type(format!(
                    "accumulate of {} bytes into {}",
                    data.len(),
                    new.len()
                )));
            }
            if let Some(k) = wide {
                if !crate::wide_apply(k, o, data, new) {
                    return Err(OscError::Op(format!(
                        "{} does not apply to this datatype",
                        o.name()
                    )));
                }
            } else if sum_one_int(o, elem, data, new) {
                // One integer summed: fetch_and_op's usual case.
            } else {
                let e =
                    elem.ok_or_else(|| OscError::Op("accumulate without element type".into()))?;
                o.apply(e, data, new)
                    .map_err(|e| OscError::Op(e.to_string()))?;
            }
        }
    }
    Ok(())
}

/// `new += data` when `o` is `MPI_SUM` and both are one 4- or 8-byte
/// integer of `elem`, as `Op::apply` sums (wrapping, native byte order;
/// signed and unsigned sums are the same bits); `false` (nothing done)
/// otherwise.
fn sum_one_int(o: &Op, elem: Option<Datatype>, data: &[u8], new: &mut [u8]) -> bool {
    use Datatype as D;
    if !matches!(o, Op::Sum) {
        return false;
    }
    match (elem, <&[u8; 8]>::try_from(data), <&[u8; 4]>::try_from(data)) {
        (Some(D::I64 | D::U64), Ok(a), _) if new.len() == 8 => {
            let b = u64::from_ne_bytes(new[..8].try_into().unwrap_or_default());
            new.copy_from_slice(&u64::from_ne_bytes(*a).wrapping_add(b).to_ne_bytes());
            true
        }
        (Some(D::I32 | D::U32), _, Ok(a)) if new.len() == 4 => {
            let b = u32::from_ne_bytes(new[..4].try_into().unwrap_or_default());
            new.copy_from_slice(&u32::from_ne_bytes(*a).wrapping_add(b).to_ne_bytes());
            true
        }
        _ => false,
    }
}

/// Compare-and-swap on the regions `regs()` of `mem`: `data` is the new
/// value followed by the compare value; the old contents (empty when out
/// of range) and whether the regions were in range.
pub(crate) fn compare_and_swap<I>(
    mem: &View<'_>,
    regs: impl Fn() -> I,
    data: &[u8],
) -> (Vec<u8>, Result<()>)
where
    I: Iterator<Item = (i128, u64)>,
{
    let n = mem.check(regs());
    let mut old = Vec::new();
    if n.is_ok() {
        mem.gather(regs(), &mut old);
    }
    let ok = n.as_ref().is_ok_and(|&n| data.len() == 2 * n);
    if ok && old[..] == data[old.len()..] {
        mem.scatter(regs(), &data[..old.len()]);
    }
    (old, n.map(|_| ()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_integer_sum_is_op_applys_sum() {
        let cases: [(Datatype, &[u8], &[u8]); 4] = [
            (Datatype::I64, &(-5i64).to_ne_bytes(), &7i64.to_ne_bytes()),
            (Datatype::U64, &u64::MAX.to_ne_bytes(), &2u64.to_ne_bytes()),
            (Datatype::I32, &i32::MAX.to_ne_bytes(), &1i32.to_ne_bytes()),
            (Datatype::U32, &3u32.to_ne_bytes(), &u32::MAX.to_ne_bytes()),
        ];
        for (e, data, old) in cases {
            let mut fast = old.to_vec();
            assert!(sum_one_int(&Op::Sum, Some(e), data, &mut fast));
            let mut slow = old.to_vec();
            Op::Sum.apply(e, data, &mut slow).unwrap();
            assert_eq!(fast, slow, "{e:?}");
            let mut via = old.to_vec();
            combine(&AccOp::Reduce(Op::Sum), Some(e), None, data, &mut via).unwrap();
            assert_eq!(via, slow, "{e:?}");
        }
        let mut two = [0u8; 16];
        assert!(
            !sum_one_int(&Op::Sum, Some(Datatype::I64), &[1; 16], &mut two),
            "two items take the general kernel"
        );
        let mut one = [0u8; 8];
        assert!(!sum_one_int(
            &Op::Max,
            Some(Datatype::I64),
            &[1; 8],
            &mut one
        ));
        assert!(!sum_one_int(
            &Op::Sum,
            Some(Datatype::F64),
            &[1; 8],
            &mut one
        ));
    }
}
