//! Datatypes: the predefined C types and derived types as flattened
//! typemaps (byte blocks of one item), with their bounds.
//!
//! Sends and receives of a non-contiguous type pack into (or unpack from) a
//! contiguous staging buffer of the whole message (see `docs/capi.md`:
//! per-fragment packing inside the pml is future work).

use std::ffi::c_int;
use std::sync::{Arc, OnceLock};

use tmpi_coll::Datatype as Elem;
use tmpi_osc::Layout;

use crate::error::{Error, MpiErrorClass as C, Res};

/// Combiners (values of mpi.h).
pub(crate) mod combiner {
    pub const NAMED: i32 = 1;
    pub const DUP: i32 = 2;
    pub const CONTIGUOUS: i32 = 3;
    pub const VECTOR: i32 = 4;
    pub const HVECTOR: i32 = 6;
    pub const INDEXED: i32 = 7;
    pub const HINDEXED: i32 = 9;
    pub const INDEXED_BLOCK: i32 = 10;
    pub const STRUCT: i32 = 12;
    pub const SUBARRAY: i32 = 13;
    pub const DARRAY: i32 = 14;
    pub const F90_REAL: i32 = 15;
    pub const F90_COMPLEX: i32 = 16;
    pub const F90_INTEGER: i32 = 17;
    pub const RESIZED: i32 = 18;
    pub const HINDEXED_BLOCK: i32 = 19;
}

/// One datatype.
#[derive(Debug, Clone)]
pub(crate) struct Dtype {
    /// Bytes of data in one item.
    pub size: usize,
    pub lb: isize,
    pub ub: isize,
    pub true_lb: isize,
    pub true_ub: isize,
    /// Alignment (for the extent padding of structs).
    pub align: usize,
    /// (offset, length) byte blocks of one item, in typemap order, merged.
    pub blocks: Vec<(isize, usize)>,
    /// The single predefined element type, when homogeneous.
    pub elem: Option<(c_int, Option<Elem>)>,
    /// Primitive elements per item (MPI_Get_elements).
    pub nprim: usize,
    /// The primitive elements of one item in type-map order, as runs of
    /// (count, bytes each); `None` when that list would be too long (then
    /// partial items are counted as if all primitives had one size).
    pub prims: Option<Vec<(usize, usize)>>,
    pub name: String,
    pub combiner: i32,
    pub ints: Vec<c_int>,
    pub addrs: Vec<isize>,
    pub types: Vec<c_int>,
    /// The datatypes `types` named when this one was made (filled in by
    /// [`crate::state::Tables::add_type`]): `MPI_Type_get_contents` hands
    /// out new handles to them, valid even after the user freed theirs.
    pub inner: Vec<Option<Arc<Dtype>>>,
    pub committed: bool,
    pub predefined: bool,
    /// The one-sided layout of the type, made on first use (a window
    /// operation then borrows it instead of building one per call).
    pub osc_cache: OscLayoutCache,
}

/// The cell of [`Dtype::osc_layout`]. A clone starts empty: a type cloned to
/// make another (resized, dup, ...) computes its own.
#[derive(Debug, Default)]
pub(crate) struct OscLayoutCache(OnceLock<Layout>);

impl Clone for OscLayoutCache {
    fn clone(&self) -> Self {
        OscLayoutCache::default()
    }
}

/// The pml's convertor reads the type map in place (no copy per message).
impl tmpi_pml::convertor::TypeMap for Dtype {
    fn blocks(&self) -> &[(isize, usize)] {
        &self.blocks
    }
    fn size(&self) -> usize {
        self.size
    }
    fn extent(&self) -> isize {
        Dtype::extent(self)
    }
}

impl Dtype {
    /// The layout one-sided operations on this type use (made once).
    pub(crate) fn osc_layout(&self) -> &Layout {
        self.osc_cache.0.get_or_init(|| Layout {
            blocks: self.blocks.clone(),
            extent: self.extent(),
            size: self.size,
            elem: self.reduce_elem(),
            wide: crate::wide_ops::kind_of(self).map(|(k, _)| k as u8),
        })
    }
    pub(crate) fn extent(&self) -> isize {
        self.ub - self.lb
    }
    /// One block starting at 0 of `size` bytes with extent `size`: the
    /// user's memory can be sent as is.
    pub(crate) fn is_contig(&self) -> bool {
        self.lb == 0
            && self.extent() == self.size as isize
            && (self.blocks.is_empty() || (self.blocks.len() == 1 && self.blocks[0].0 == 0))
    }
    /// The reduction element type, when the type is made of one predefined
    /// type. The pair types with padding are their packed forms: the data
    /// of a collective is packed by the type map, or contiguous only when
    /// the type has no gaps (MPI_DOUBLE_INT's 12 bytes, not its extent's 16).
    pub(crate) fn reduce_elem(&self) -> Option<Elem> {
        self.elem.and_then(|(_, e)| e).map(|e| match e {
            Elem::DoubleInt => Elem::PackedDoubleInt,
            Elem::LongInt => Elem::PackedLongInt,
            Elem::ShortInt => Elem::PackedShortInt,
            e => e,
        })
    }
}

/// (handle, name, size, align, element type for reductions)
const PREDEF: &[(c_int, &str, usize, usize, Option<Elem>)] = &[
    (1, "MPI_CHAR", 1, 1, Some(Elem::Char)),
    (2, "MPI_SIGNED_CHAR", 1, 1, Some(Elem::I8)),
    (3, "MPI_UNSIGNED_CHAR", 1, 1, Some(Elem::U8)),
    (4, "MPI_BYTE", 1, 1, Some(Elem::Byte)),
    (5, "MPI_WCHAR", 4, 4, Some(Elem::I32)),
    (6, "MPI_SHORT", 2, 2, Some(Elem::I16)),
    (7, "MPI_UNSIGNED_SHORT", 2, 2, Some(Elem::U16)),
    (8, "MPI_INT", 4, 4, Some(Elem::I32)),
    (9, "MPI_UNSIGNED", 4, 4, Some(Elem::U32)),
    (10, "MPI_LONG", 8, 8, Some(Elem::I64)),
    (11, "MPI_UNSIGNED_LONG", 8, 8, Some(Elem::U64)),
    (12, "MPI_LONG_LONG_INT", 8, 8, Some(Elem::I64)),
    (13, "MPI_UNSIGNED_LONG_LONG", 8, 8, Some(Elem::U64)),
    (14, "MPI_FLOAT", 4, 4, Some(Elem::F32)),
    (15, "MPI_DOUBLE", 8, 8, Some(Elem::F64)),
    (16, "MPI_LONG_DOUBLE", 16, 16, None),
    (17, "MPI_INT8_T", 1, 1, Some(Elem::I8)),
    (18, "MPI_INT16_T", 2, 2, Some(Elem::I16)),
    (19, "MPI_INT32_T", 4, 4, Some(Elem::I32)),
    (20, "MPI_INT64_T", 8, 8, Some(Elem::I64)),
    (21, "MPI_UINT8_T", 1, 1, Some(Elem::U8)),
    (22, "MPI_UINT16_T", 2, 2, Some(Elem::U16)),
    (23, "MPI_UINT32_T", 4, 4, Some(Elem::U32)),
    (24, "MPI_UINT64_T", 8, 8, Some(Elem::U64)),
    (25, "MPI_C_BOOL", 1, 1, Some(Elem::Bool)),
    (26, "MPI_C_COMPLEX", 8, 4, None),
    (27, "MPI_C_DOUBLE_COMPLEX", 16, 8, None),
    (28, "MPI_C_LONG_DOUBLE_COMPLEX", 32, 16, None),
    (29, "MPI_AINT", 8, 8, Some(Elem::I64)),
    (30, "MPI_OFFSET", 8, 8, Some(Elem::I64)),
    (31, "MPI_COUNT", 8, 8, Some(Elem::I64)),
    (32, "MPI_PACKED", 1, 1, Some(Elem::Byte)),
    (33, "MPI_FLOAT_INT", 8, 4, Some(Elem::FloatInt)),
    (34, "MPI_DOUBLE_INT", 16, 8, Some(Elem::DoubleInt)),
    (35, "MPI_LONG_INT", 16, 8, Some(Elem::LongInt)),
    (36, "MPI_2INT", 8, 4, Some(Elem::TwoInt)),
    (37, "MPI_SHORT_INT", 8, 4, Some(Elem::ShortInt)),
    (38, "MPI_LONG_DOUBLE_INT", 32, 16, None),
];

/// The predefined types in handle order (the C types, then the Fortran and
/// C++ ones of [`crate::fortran_types`]), built once.
pub(crate) fn predefined() -> Vec<Arc<Dtype>> {
    let c_types = PREDEF
        .iter()
        .map(|&(h, name, size, align, elem)| (h, name, size, align, elem, blocks_prims(h, size)));
    c_types
        .chain(crate::fortran_types::named())
        .map(|(h, name, size, align, elem, prim_sizes)| {
            // Pair types carry their padding inside the extent; data bytes
            // are the two members.
            let blocks = match h {
                34 | 35 => vec![(0, 8), (8, 4)],
                37 => vec![(0, 2), (4, 4)],
                38 => vec![(0, 16), (16, 4)],
                _ => vec![(0, size)],
            };
            let data: usize = blocks.iter().map(|b| b.1).sum();
            let nprim = prim_sizes.len();
            Arc::new(Dtype {
                size: data,
                lb: 0,
                ub: size as isize,
                true_lb: 0,
                true_ub: blocks.last().map(|b| b.0 + b.1 as isize).unwrap_or(0),
                align,
                blocks,
                elem: Some((h, elem)),
                nprim,
                prims: Some(prim_runs(prim_sizes)),
                name: name.into(),
                combiner: combiner::NAMED,
                ints: Vec::new(),
                addrs: Vec::new(),
                types: Vec::new(),
                inner: Vec::new(),
                committed: true,
                predefined: true,
                osc_cache: OscLayoutCache::default(),
            })
        })
        .collect()
}

/// The primitive sizes of a predefined type's item: its members for the
/// pair types, itself for the others.
fn blocks_prims(h: c_int, size: usize) -> Vec<usize> {
    match h {
        33 => vec![4, 4],
        34 | 35 => vec![8, 4],
        36 => vec![4, 4],
        37 => vec![2, 4],
        38 => vec![16, 4],
        _ => vec![size],
    }
}

/// Runs of equal sizes.
fn prim_runs(sizes: Vec<usize>) -> Vec<(usize, usize)> {
    let mut runs = Vec::new();
    for sz in sizes {
        push_prims(&mut runs, 1, sz);
    }
    runs
}

fn push_prims(runs: &mut Vec<(usize, usize)>, n: usize, sz: usize) {
    match runs.last_mut() {
        Some((c, s)) if *s == sz => *c += n,
        _ => runs.push((n, sz)),
    }
}

/// Longest [`Dtype::prims`] list kept.
const MAX_PRIM_RUNS: usize = 4096;

fn push_block(blocks: &mut Vec<(isize, usize)>, off: isize, len: usize) {
    if len == 0 {
        return;
    }
    if let Some(last) = blocks.last_mut() {
        if last.0 + last.1 as isize == off {
            last.1 += len;
            return;
        }
    }
    blocks.push((off, len));
}

/// Upper bound on the typemap blocks of one derived item (protects against
/// accidental gigantic typemaps; such types need a lazy representation).
const MAX_BLOCKS: usize = 1 << 26;

/// Builder for derived types: children placed at byte displacements.
pub(crate) struct Builder {
    blocks: Vec<(isize, usize)>,
    lb: Option<isize>,
    ub: Option<isize>,
    tlb: Option<isize>,
    tub: Option<isize>,
    size: usize,
    align: usize,
    elem: Option<Option<(c_int, Option<Elem>)>>,
    nprim: usize,
    prims: Option<Vec<(usize, usize)>>,
}

impl Builder {
    pub(crate) fn new() -> Self {
        Builder {
            blocks: Vec::new(),
            lb: None,
            ub: None,
            tlb: None,
            tub: None,
            size: 0,
            align: 1,
            elem: None,
            nprim: 0,
            prims: Some(Vec::new()),
        }
    }

    /// Places `n` consecutive items of `t` starting at byte `disp`.
    pub(crate) fn place(&mut self, t: &Dtype, disp: isize, n: usize) -> Res<()> {
        if n == 0 {
            return Ok(());
        }
        let ext = t.extent();
        let bytes = n
            .checked_mul(t.size)
            .filter(|&b| isize::try_from(b).is_ok())
            .ok_or_else(|| {
                Error::new(C::Count, "derived datatype larger than the address space")
            })?;
        match t.blocks.as_slice() {
            // One block filling the whole extent (a predefined type, a
            // contiguous one): n copies side by side are one block, however
            // large n is (a contiguous type of 2^31 bytes, or a large-count
            // call's message, costs one entry).
            &[(o, l)] if ext > 0 && l as isize == ext => {
                push_block(&mut self.blocks, disp + o, bytes);
            }
            // No data (an empty type): nothing to place, whatever n is.
            [] => {}
            blocks => {
                if self
                    .blocks
                    .len()
                    .saturating_add(n.saturating_mul(blocks.len()))
                    > MAX_BLOCKS
                {
                    return Err(Error::new(C::NoMem, "derived datatype typemap too large"));
                }
                for i in 0..n {
                    let base = disp + i as isize * ext;
                    for &(o, l) in blocks {
                        push_block(&mut self.blocks, base + o, l);
                    }
                }
            }
        }
        let last = disp + (n as isize - 1) * ext;
        let (lo, hi) = (disp.min(last), disp.max(last));
        self.lb = Some(self.lb.map_or(lo + t.lb, |v| v.min(lo + t.lb)));
        self.ub = Some(self.ub.map_or(hi + t.ub, |v| v.max(hi + t.ub)));
        self.tlb = Some(self.tlb.map_or(lo + t.true_lb, |v| v.min(lo + t.true_lb)));
        self.tub = Some(self.tub.map_or(hi + t.true_ub, |v| v.max(hi + t.true_ub)));
        self.size += bytes;
        self.nprim += n * t.nprim;
        self.prims = match (self.prims.take(), &t.prims) {
            (Some(mut runs), Some(tp)) => {
                // One run repeated stays one run; otherwise n copies.
                if let [(c, sz)] = tp.as_slice() {
                    push_prims(&mut runs, n * c, *sz);
                } else {
                    for _ in 0..n.min(MAX_PRIM_RUNS + 1) {
                        for &(c, sz) in tp {
                            push_prims(&mut runs, c, sz);
                        }
                    }
                }
                (runs.len() <= MAX_PRIM_RUNS).then_some(runs)
            }
            _ => None,
        };
        self.align = self.align.max(t.align);
        self.elem = Some(match self.elem {
            None => t.elem,
            Some(e) if e.map(|x| x.0) == t.elem.map(|x| x.0) => e,
            Some(_) => None,
        });
        Ok(())
    }

    pub(crate) fn finish(
        self,
        combiner: i32,
        ints: Vec<c_int>,
        addrs: Vec<isize>,
        types: Vec<c_int>,
        pad_to_align: bool,
    ) -> Dtype {
        let lb = self.lb.unwrap_or(0);
        let mut ub = self.ub.unwrap_or(0);
        if pad_to_align && self.align > 1 {
            let ext = ub - lb;
            let a = self.align as isize;
            let rem = ext.rem_euclid(a);
            if rem != 0 {
                ub += a - rem;
            }
        }
        Dtype {
            size: self.size,
            lb,
            ub,
            true_lb: self.tlb.unwrap_or(0),
            true_ub: self.tub.unwrap_or(0),
            align: self.align,
            blocks: self.blocks,
            elem: self.elem.flatten(),
            nprim: self.nprim,
            prims: self.prims,
            name: String::new(),
            combiner,
            ints,
            addrs,
            types,
            inner: Vec::new(),
            committed: false,
            predefined: false,
            osc_cache: OscLayoutCache::default(),
        }
    }
}

/// `MPI_Type_create_resized`.
pub(crate) fn resized(old: &Dtype, old_h: c_int, lb: isize, extent: isize) -> Dtype {
    let mut t = old.clone();
    t.lb = lb;
    t.ub = lb + extent;
    t.name = String::new();
    t.combiner = combiner::RESIZED;
    t.ints = Vec::new();
    t.addrs = vec![lb, extent];
    t.types = vec![old_h];
    t.committed = false;
    t.predefined = false;
    t
}

/// Bytes of `count` items (overflow is an error).
pub(crate) fn total_size(t: &Dtype, count: usize) -> Res<usize> {
    t.size
        .checked_mul(count)
        .ok_or_else(|| Error::new(C::Count, "message size overflows"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn predefined_named(name: &str) -> Arc<Dtype> {
        predefined()
            .into_iter()
            .find(|t| t.name == name)
            .expect("a predefined type")
    }

    #[test]
    fn a_run_of_a_type_that_fills_its_extent_is_one_block_at_any_count() {
        let n = (1usize << 33) + 3;
        let mut b = Builder::new();
        b.place(&predefined_named("MPI_BYTE"), 8, n).unwrap();
        let t = b.finish(combiner::CONTIGUOUS, vec![], vec![], vec![4], false);
        assert_eq!(t.blocks, vec![(8, n)]);
        assert_eq!((t.size, t.lb, t.extent()), (n, 8, n as isize));
        // Of that type again: still one block.
        let mut b = Builder::new();
        b.place(&t, 0, 3).unwrap();
        let t3 = b.finish(combiner::CONTIGUOUS, vec![], vec![], vec![], false);
        assert_eq!(t3.blocks, vec![(8, 3 * n)]);
        assert_eq!(t3.size, 3 * n);
    }

    #[test]
    fn a_type_with_gaps_keeps_one_block_per_item_up_to_the_limit() {
        // MPI_DOUBLE_INT: 12 data bytes in an extent of 16.
        let pair = predefined_named("MPI_DOUBLE_INT");
        let mut b = Builder::new();
        b.place(&pair, 0, 3).unwrap();
        let t = b.finish(combiner::CONTIGUOUS, vec![], vec![], vec![], false);
        assert_eq!(t.blocks, vec![(0, 12), (16, 12), (32, 12)]);
        assert_eq!(t.size, 36);
        let mut b = Builder::new();
        let e = b.place(&pair, 0, MAX_BLOCKS + 1).unwrap_err();
        assert_eq!(e.class, C::NoMem);
    }

    #[test]
    fn a_type_larger_than_the_address_space_is_a_count_error() {
        let mut b = Builder::new();
        let e = b
            .place(&predefined_named("MPI_INT"), 0, usize::MAX / 2)
            .unwrap_err();
        assert_eq!(e.class, C::Count);
    }
}
