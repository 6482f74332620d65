//! The buffers of the v and w collectives (and of the neighbourhood and
//! inter-communicator collectives, which build theirs the same way): per
//! peer a block of items of a datatype, as tmpi-coll sees them.

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use super::{pack, ty, unpack};
use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};
use crate::ffi::count as ccount;
use crate::request::Finish;

/// The blocks of a v/w collective's buffer as tmpi-coll sees them: byte
/// counts and displacements into a buffer of `end` bytes. That buffer is
/// the caller's own when every block's type is contiguous; else a staged
/// copy with the blocks packed back to back (`staged`: per block its byte
/// offset in the caller's buffer, its items and their type), read from and
/// written back to the caller's buffer by the type maps, so bytes between
/// and inside the blocks that the types do not name stay untouched.
#[derive(Debug, Clone)]
pub(crate) struct VLayout {
    pub(crate) counts: Vec<usize>,
    pub(crate) displs: Vec<usize>,
    pub(crate) end: usize,
    staged: Option<Vec<(isize, usize, Arc<Dtype>)>>,
}

impl VLayout {
    /// Per peer `counts[i]` items of the type `types(i)` at byte offset
    /// `offsets(i)` of the caller's buffer.
    pub(crate) fn new(
        counts: &[c_int],
        types: &[Arc<Dtype>],
        offsets: impl Fn(usize, &Dtype) -> Res<isize>,
    ) -> Res<VLayout> {
        VLayout::new_at(counts, types, offsets, false)
    }

    /// [`VLayout::new`]; `bottom`: the buffer is `MPI_BOTTOM` (NULL), the
    /// offsets absolute addresses, so the blocks are staged whatever their
    /// types (the caller's memory is not one slice from NULL).
    fn new_at(
        counts: &[c_int],
        types: &[Arc<Dtype>],
        offsets: impl Fn(usize, &Dtype) -> Res<isize>,
        bottom: bool,
    ) -> Res<VLayout> {
        let p = counts.len();
        let contig = !bottom && types.iter().all(|t| t.is_contig());
        let mut cb = Vec::with_capacity(p);
        let mut db = Vec::with_capacity(p);
        let mut blocks = Vec::with_capacity(p);
        let mut end = 0usize;
        for i in 0..p {
            let t = &types[i];
            let n = ccount(counts[i], C::Count, "counts[i]")?;
            let c = n
                .checked_mul(t.size)
                .ok_or_else(|| Error::new(C::Count, "counts[i] x datatype size overflows"))?;
            let off = offsets(i, t)?;
            if contig {
                let d = usize::try_from(off)
                    .map_err(|_| Error::new(C::Arg, format!("displacement {off} < 0")))?;
                end = end.max(d + c);
                db.push(d);
            } else {
                db.push(end);
                end += c;
                blocks.push((off, n, Arc::clone(t)));
            }
            cb.push(c);
        }
        Ok(VLayout {
            counts: cb,
            displs: db,
            end,
            staged: (!contig).then_some(blocks),
        })
    }

    /// The v-forms: `counts[i]` items of `t` at `displs[i]` extents.
    pub(crate) fn v(
        counts: *const c_int,
        displs: *const c_int,
        p: usize,
        t: &Arc<Dtype>,
    ) -> Res<VLayout> {
        VLayout::v_where(counts, displs, p, t, |_| true)
    }

    /// [`VLayout::v`] with the blocks `keep` rejects counted as empty
    /// (neither read nor written: a neighbourhood collective's
    /// `MPI_PROC_NULL` neighbours).
    pub(crate) fn v_where(
        counts: *const c_int,
        displs: *const c_int,
        p: usize,
        t: &Arc<Dtype>,
        keep: impl Fn(usize) -> bool,
    ) -> Res<VLayout> {
        let cs = kept(crate::ffi::array(counts, p, "counts")?, keep);
        let ds = crate::ffi::array(displs, p, "displs")?;
        let ts = vec![Arc::clone(t); p];
        VLayout::new(&cs, &ts, |i, t| {
            isize::try_from(ds[i])
                .ok()
                .and_then(|d| d.checked_mul(t.extent()))
                .ok_or_else(|| Error::new(C::Arg, "displs[i] x extent overflows"))
        })
    }

    /// The w-forms: `counts[i]` items of `types[i]` at byte `displs[i]` of
    /// `buf` (only whether it is `MPI_BOTTOM` matters here).
    pub(crate) fn w(
        counts: *const c_int,
        displs: *const c_int,
        types: *const c_int,
        p: usize,
        buf: *const c_void,
    ) -> Res<VLayout> {
        let ds = crate::ffi::array(displs, p, "displs")?;
        let ds: Vec<isize> = ds.into_iter().map(|d| d as isize).collect();
        VLayout::w_where(counts, &ds, types, |_| true, buf)
    }

    /// [`VLayout::w`] on byte displacements already read (one per block),
    /// with the blocks `keep` rejects counted as empty ([`VLayout::v_where`]).
    pub(crate) fn w_where(
        counts: *const c_int,
        displs: &[isize],
        types: *const c_int,
        keep: impl Fn(usize) -> bool,
        buf: *const c_void,
    ) -> Res<VLayout> {
        let p = displs.len();
        let cs = kept(crate::ffi::array(counts, p, "counts")?, keep);
        let ts = crate::ffi::array(types, p, "types")?
            .into_iter()
            .map(ty)
            .collect::<Res<Vec<_>>>()?;
        VLayout::new_at(&cs, &ts, |i, _| Ok(displs[i]), buf.is_null())
    }

    /// The buffer as tmpi-coll sees it: the caller's bytes, or a staged copy.
    pub(crate) fn read<'a>(&self, buf: *const c_void) -> Res<std::borrow::Cow<'a, [u8]>> {
        match &self.staged {
            None => crate::ffi::bytes(buf.cast(), self.end).map(std::borrow::Cow::Borrowed),
            Some(blocks) => {
                let mut v = Vec::with_capacity(self.end);
                for (off, n, t) in blocks {
                    v.extend_from_slice(&pack(
                        buf.cast::<u8>().wrapping_offset(*off).cast(),
                        *n,
                        t,
                    ));
                }
                Ok(std::borrow::Cow::Owned(v))
            }
        }
    }

    /// Block `i` as tmpi-coll sees it, copied.
    pub(super) fn block(&self, buf: *const c_void, i: usize) -> Res<Vec<u8>> {
        let (d, c) = (self.displs[i], self.counts[i]);
        match &self.staged {
            None => block_copy(buf, d, c),
            Some(blocks) => {
                let (off, n, t) = &blocks[i];
                Ok(pack(buf.cast::<u8>().wrapping_offset(*off).cast(), *n, t))
            }
        }
    }

    /// A receive buffer for a blocking call: the caller's own, or a staged
    /// copy of it (blocks the call does not write keep their bytes).
    pub(crate) fn out<'a>(&self, buf: *mut c_void) -> Res<VOut<'a>> {
        match &self.staged {
            None => crate::ffi::bytes_mut(buf.cast(), self.end).map(VOut::Direct),
            Some(_) => Ok(VOut::Staged(self.read(buf)?.into_owned())),
        }
    }

    /// Writes staged `data` (the whole buffer as tmpi-coll saw it) back
    /// into the caller's blocks.
    pub(crate) fn write_back(&self, buf: *mut c_void, data: &[u8]) {
        if let Some(blocks) = &self.staged {
            for (i, (off, n, t)) in blocks.iter().enumerate() {
                let d = self.displs[i];
                unpack(
                    buf.cast::<u8>().wrapping_offset(*off).cast(),
                    *n,
                    t,
                    &data[d..d + self.counts[i]],
                );
            }
        }
    }

    /// How a non-blocking call's result reaches the caller's buffer.
    pub(crate) fn finish(self, buf: *mut c_void) -> Finish {
        if self.staged.is_some() {
            Finish::Blocks {
                dst: buf as usize,
                layout: self,
            }
        } else {
            regions(buf, self.counts, self.displs)
        }
    }
}

/// `counts` with the blocks `keep` rejects set to 0.
fn kept(mut counts: Vec<c_int>, keep: impl Fn(usize) -> bool) -> Vec<c_int> {
    for (i, c) in counts.iter_mut().enumerate() {
        if !keep(i) {
            *c = 0;
        }
    }
    counts
}

/// A blocking v/w call's receive buffer ([`VLayout::out`]).
pub(crate) enum VOut<'a> {
    Direct(&'a mut [u8]),
    Staged(Vec<u8>),
}

impl VOut<'_> {
    pub(crate) fn bytes(&mut self) -> &mut [u8] {
        match self {
            VOut::Direct(b) => b,
            VOut::Staged(v) => v,
        }
    }

    /// Writes a staged buffer back into the caller's blocks.
    pub(crate) fn done(self, layout: &VLayout, buf: *mut c_void) {
        if let VOut::Staged(v) = self {
            layout.write_back(buf, &v);
        }
    }
}

/// The finish of a call whose result tmpi-coll wrote in place: its blocks
/// copied to the same offsets at `dst`.
fn regions(dst: *mut c_void, counts: Vec<usize>, displs: Vec<usize>) -> Finish {
    Finish::Regions {
        dst: dst as usize,
        counts,
        displs,
    }
}

/// A copy of `len` bytes at `base + off` (a block of the caller's buffer).
fn block_copy(base: *const c_void, off: usize, len: usize) -> Res<Vec<u8>> {
    if len == 0 {
        return Ok(Vec::new());
    }
    Ok(crate::ffi::bytes(base.cast::<u8>().wrapping_add(off), len)?.to_vec())
}
