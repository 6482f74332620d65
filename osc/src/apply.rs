//! Applying accumulates and compare-and-swap to window memory: the
//! reduction of an origin's packed data into a target region, one body for
//! pt2pt's target (applying a request that arrived) and sm's origin
//! (applying directly, under the target's accumulate lock). The caller
//! makes the application atomic with respect to the others.

use tmpi_coll::Datatype;

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
