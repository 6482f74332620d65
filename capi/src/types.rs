//! Datatype entry points: constructors, commit/free, queries, pack/unpack.

use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use crate::datatype::{combiner as cb, resized, Builder, Dtype};
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{array, count as ccount, cstr, get, put, put_array, put_cstr};
use crate::state::{tables, COMM_WORLD};

fn old(h: c_int) -> Res<Arc<Dtype>> {
    tables().dtype(h)
}

fn make(newtype: *mut c_int, t: Dtype) -> Res<()> {
    if newtype.is_null() {
        return Err(Error::new(C::Arg, "newtype is NULL"));
    }
    let h = tables().add_type(t);
    put(newtype, h, "newtype")
}

#[no_mangle]
pub extern "C" fn MPI_Type_contiguous(count: c_int, oldtype: c_int, newtype: *mut c_int) -> c_int {
    guard("MPI_Type_contiguous", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let o = old(oldtype)?;
        let mut b = Builder::new();
        b.place(&o, 0, n)?;
        make(
            newtype,
            b.finish(cb::CONTIGUOUS, vec![count], vec![], vec![oldtype], false),
        )
    })
}

fn hvector(
    count: c_int,
    bl: c_int,
    stride_bytes: isize,
    oldtype: c_int,
    comb: i32,
    ints: Vec<c_int>,
    addrs: Vec<isize>,
) -> Res<Dtype> {
    let n = ccount(count, C::Count, "count")?;
    let l = ccount(bl, C::Arg, "blocklength")?;
    let o = old(oldtype)?;
    let mut b = Builder::new();
    for i in 0..n {
        b.place(&o, i as isize * stride_bytes, l)?;
    }
    Ok(b.finish(comb, ints, addrs, vec![oldtype], false))
}

#[no_mangle]
pub extern "C" fn MPI_Type_vector(
    count: c_int,
    blocklength: c_int,
    stride: c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_vector", COMM_WORLD, || {
        let ext = old(oldtype)?.extent();
        let t = hvector(
            count,
            blocklength,
            stride as isize * ext,
            oldtype,
            cb::VECTOR,
            vec![count, blocklength, stride],
            vec![],
        )?;
        make(newtype, t)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_hvector", COMM_WORLD, || {
        let t = hvector(
            count,
            blocklength,
            stride,
            oldtype,
            cb::HVECTOR,
            vec![count, blocklength],
            vec![stride],
        )?;
        make(newtype, t)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_hvector(
    count: c_int,
    blocklength: c_int,
    stride: isize,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    MPI_Type_create_hvector(count, blocklength, stride, oldtype, newtype)
}

fn indexed(
    lens: &[c_int],
    disps_bytes: &[isize],
    oldtype: c_int,
    comb: i32,
    ints: Vec<c_int>,
    addrs: Vec<isize>,
) -> Res<Dtype> {
    let o = old(oldtype)?;
    let mut b = Builder::new();
    for (&l, &d) in lens.iter().zip(disps_bytes) {
        let l = ccount(l, C::Arg, "blocklength")?;
        b.place(&o, d, l)?;
    }
    Ok(b.finish(comb, ints, addrs, vec![oldtype], false))
}

#[no_mangle]
pub extern "C" fn MPI_Type_indexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_indexed", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let lens = array(blocklengths, n, "array_of_blocklengths")?;
        let d = array(displacements, n, "array_of_displacements")?;
        let ext = old(oldtype)?.extent();
        let db: Vec<isize> = d.iter().map(|&x| x as isize * ext).collect();
        let mut ints = vec![count];
        ints.extend(&lens);
        ints.extend(&d);
        make(
            newtype,
            indexed(&lens, &db, oldtype, cb::INDEXED, ints, vec![])?,
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_hindexed", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let lens = array(blocklengths, n, "array_of_blocklengths")?;
        let d = array(displacements, n, "array_of_displacements")?;
        let mut ints = vec![count];
        ints.extend(&lens);
        make(
            newtype,
            indexed(&lens, &d, oldtype, cb::HINDEXED, ints, d.clone())?,
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_hindexed(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    MPI_Type_create_hindexed(count, blocklengths, displacements, oldtype, newtype)
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_indexed_block(
    count: c_int,
    blocklength: c_int,
    displacements: *const c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_indexed_block", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let d = array(displacements, n, "array_of_displacements")?;
        let ext = old(oldtype)?.extent();
        let db: Vec<isize> = d.iter().map(|&x| x as isize * ext).collect();
        let mut ints = vec![count, blocklength];
        ints.extend(&d);
        make(
            newtype,
            indexed(
                &vec![blocklength; n],
                &db,
                oldtype,
                cb::INDEXED_BLOCK,
                ints,
                vec![],
            )?,
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_hindexed_block(
    count: c_int,
    blocklength: c_int,
    displacements: *const isize,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_hindexed_block", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let d = array(displacements, n, "array_of_displacements")?;
        make(
            newtype,
            indexed(
                &vec![blocklength; n],
                &d,
                oldtype,
                cb::HINDEXED_BLOCK,
                vec![count, blocklength],
                d.clone(),
            )?,
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    types: *const c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_struct", COMM_WORLD, || {
        let n = ccount(count, C::Count, "count")?;
        let lens = array(blocklengths, n, "array_of_blocklengths")?;
        let d = array(displacements, n, "array_of_displacements")?;
        let ts = array(types, n, "array_of_types")?;
        let mut b = Builder::new();
        for i in 0..n {
            let o = old(ts[i])?;
            b.place(&o, d[i], ccount(lens[i], C::Arg, "blocklength")?)?;
        }
        let mut ints = vec![count];
        ints.extend(&lens);
        make(newtype, b.finish(cb::STRUCT, ints, d, ts, true))
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_struct(
    count: c_int,
    blocklengths: *const c_int,
    displacements: *const isize,
    types: *const c_int,
    newtype: *mut c_int,
) -> c_int {
    MPI_Type_create_struct(count, blocklengths, displacements, types, newtype)
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_resized(
    oldtype: c_int,
    lb: isize,
    extent: isize,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_resized", COMM_WORLD, || {
        let o = old(oldtype)?;
        make(newtype, resized(&o, oldtype, lb, extent))
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_dup(oldtype: c_int, newtype: *mut c_int) -> c_int {
    guard("MPI_Type_dup", COMM_WORLD, || {
        let o = old(oldtype)?;
        let mut t = (*o).clone();
        t.predefined = false;
        t.combiner = cb::DUP;
        t.ints = vec![];
        t.addrs = vec![];
        t.types = vec![oldtype];
        t.name = String::new();
        make(newtype, t)?;
        let h = get(newtype, "newtype")?;
        // Attributes through their copy callbacks; a failing callback
        // fails the call with MPI_DATATYPE_NULL in `newtype`.
        if let Err(e) = crate::type_attr::copy_attrs(oldtype, h) {
            tables().types.remove(&h);
            put(newtype, 0, "newtype")?;
            return Err(e);
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_commit(datatype: *mut c_int) -> c_int {
    guard("MPI_Type_commit", COMM_WORLD, || {
        let h = get(datatype, "datatype")?;
        let mut t = tables();
        let e = t
            .types
            .get_mut(&h)
            .ok_or_else(|| Error::new(C::Type, format!("invalid datatype handle {h}")))?;
        Arc::make_mut(e).committed = true;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_free(datatype: *mut c_int) -> c_int {
    guard("MPI_Type_free", COMM_WORLD, || {
        let h = get(datatype, "datatype")?;
        match tables().types.get(&h) {
            None => return Err(Error::new(C::Type, format!("invalid datatype handle {h}"))),
            Some(d) if d.predefined => {
                return Err(Error::new(C::Type, "a predefined datatype cannot be freed"))
            }
            Some(_) => {}
        }
        // The attributes' delete callbacks first (without the tables' lock:
        // they may call MPI); a failure leaves the datatype.
        crate::type_attr::delete_attrs(h)?;
        tables().types.remove(&h);
        put(datatype, 0, "datatype")
    })
}

macro_rules! query {
    ($name:ident, $ty:ty, |$t:ident| $e:expr) => {
        #[no_mangle]
        pub extern "C" fn $name(datatype: c_int, out: *mut $ty) -> c_int {
            guard(stringify!($name), COMM_WORLD, || {
                let $t = old(datatype)?;
                put(out, $e, "result")
            })
        }
    };
}

query!(MPI_Type_size, c_int, |t| c_int::try_from(t.size)
    .unwrap_or(-32766));
query!(MPI_Type_size_x, i64, |t| t.size as i64);
query!(MPI_Type_extent, isize, |t| t.extent());
query!(MPI_Type_lb, isize, |t| t.lb);
query!(MPI_Type_ub, isize, |t| t.ub);

macro_rules! extent2 {
    ($name:ident, $ty:ty, |$t:ident| $a:expr, $b:expr) => {
        #[no_mangle]
        pub extern "C" fn $name(datatype: c_int, a: *mut $ty, b: *mut $ty) -> c_int {
            guard(stringify!($name), COMM_WORLD, || {
                let $t = old(datatype)?;
                put(a, $a as $ty, "lb")?;
                put(b, $b as $ty, "extent")
            })
        }
    };
}

extent2!(MPI_Type_get_extent, isize, |t| t.lb, t.extent());
extent2!(MPI_Type_get_extent_x, i64, |t| t.lb, t.extent());
extent2!(
    MPI_Type_get_true_extent,
    isize,
    |t| t.true_lb,
    t.true_ub - t.true_lb
);
extent2!(
    MPI_Type_get_true_extent_x,
    i64,
    |t| t.true_lb,
    t.true_ub - t.true_lb
);

#[no_mangle]
pub extern "C" fn MPI_Type_get_name(
    datatype: c_int,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_name", COMM_WORLD, || {
        let t = old(datatype)?;
        let n = put_cstr(name, 128, &t.name)?;
        put(resultlen, n, "resultlen")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_set_name(datatype: c_int, name: *const c_char) -> c_int {
    guard("MPI_Type_set_name", COMM_WORLD, || {
        let s = cstr(name, "type_name")?;
        let mut t = tables();
        let e = t
            .types
            .get_mut(&datatype)
            .ok_or_else(|| Error::new(C::Type, format!("invalid datatype handle {datatype}")))?;
        Arc::make_mut(e).name = s.chars().take(127).collect();
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_get_envelope(
    datatype: c_int,
    ni: *mut c_int,
    na: *mut c_int,
    nd: *mut c_int,
    combiner: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_envelope", COMM_WORLD, || {
        let t = old(datatype)?;
        put(ni, t.ints.len() as c_int, "num_integers")?;
        put(na, t.addrs.len() as c_int, "num_addresses")?;
        put(nd, t.types.len() as c_int, "num_datatypes")?;
        put(combiner, t.combiner, "combiner")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_get_contents(
    datatype: c_int,
    max_i: c_int,
    max_a: c_int,
    max_d: c_int,
    ints: *mut c_int,
    addrs: *mut isize,
    types: *mut c_int,
) -> c_int {
    guard("MPI_Type_get_contents", COMM_WORLD, || {
        let t = old(datatype)?;
        // The f90 types are predefined but not named: their contents are
        // the (p, r) they were made for (MPI-4.0 §5.1.13).
        if t.predefined && t.combiner == cb::NAMED {
            return Err(Error::new(
                C::Type,
                "MPI_Type_get_contents of a predefined datatype",
            ));
        }
        if (max_i as usize) < t.ints.len()
            || (max_a as usize) < t.addrs.len()
            || (max_d as usize) < t.types.len()
        {
            return Err(Error::new(
                C::Arg,
                "arrays too small (see MPI_Type_get_envelope)",
            ));
        }
        put_array(ints, &t.ints, "array_of_integers")?;
        put_array(addrs, &t.addrs, "array_of_addresses")?;
        // New handles for derived inner types (MPI-4.0 §5.1.13: the caller
        // frees them), not the ones the type was made from: freeing those
        // would free the user's own.
        if !t.types.is_empty() && types.is_null() {
            return Err(Error::new(C::Arg, "array_of_datatypes is NULL"));
        }
        let mut tb = tables();
        let hs: Vec<c_int> = t
            .types
            .iter()
            .zip(&t.inner)
            .map(|(&h, inner)| match inner {
                Some(it) => tb.new_handle(it, h),
                None => h,
            })
            .collect();
        drop(tb);
        put_array(types, &hs, "array_of_datatypes")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_match_size(
    typeclass: c_int,
    size: c_int,
    datatype: *mut c_int,
) -> c_int {
    guard("MPI_Type_match_size", COMM_WORLD, || {
        let h = match (typeclass, size) {
            (1, 4) => 14,
            (1, 8) => 15,
            (1, 16) => 16,
            (2, 1) => 17,
            (2, 2) => 18,
            (2, 4) => 19,
            (2, 8) => 20,
            (3, 8) => 26,
            (3, 16) => 27,
            _ => {
                return Err(Error::new(
                    C::Arg,
                    format!("no type of class {typeclass} and size {size}"),
                ))
            }
        };
        put(datatype, h, "datatype")
    })
}

fn pack_into(
    inbuf: *const c_void,
    n: usize,
    t: &Dtype,
    outbuf: *mut c_void,
    outsize: usize,
    pos: usize,
) -> Res<usize> {
    let mut v = Vec::with_capacity(t.size * n);
    crate::ffi::gather_blocks(inbuf.cast(), n, t.extent(), &t.blocks, &mut v);
    if pos.checked_add(v.len()).is_none_or(|e| e > outsize) {
        return Err(Error::new(
            C::Truncate,
            format!(
                "pack: {} bytes at position {pos} exceed the {outsize}-byte buffer",
                v.len()
            ),
        ));
    }
    let out = crate::ffi::bytes_mut(outbuf.cast(), outsize)?;
    out[pos..pos + v.len()].copy_from_slice(&v);
    Ok(pos + v.len())
}

fn unpack_from(
    inbuf: *const c_void,
    insize: usize,
    pos: usize,
    outbuf: *mut c_void,
    n: usize,
    t: &Dtype,
) -> Res<usize> {
    let need = t.size * n;
    if pos.checked_add(need).is_none_or(|e| e > insize) {
        return Err(Error::new(
            C::Truncate,
            format!("unpack: {need} bytes at position {pos} exceed the {insize}-byte buffer"),
        ));
    }
    let input = crate::ffi::bytes(inbuf.cast(), insize)?;
    crate::ffi::scatter_blocks(
        outbuf.cast(),
        n,
        t.extent(),
        &t.blocks,
        &input[pos..pos + need],
    );
    Ok(pos + need)
}

#[no_mangle]
pub extern "C" fn MPI_Pack(
    inbuf: *const c_void,
    incount: c_int,
    datatype: c_int,
    outbuf: *mut c_void,
    outsize: c_int,
    position: *mut c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Pack", comm, || {
        let n = ccount(incount, C::Count, "incount")?;
        let t = tables().comm_type(datatype)?;
        let pos = ccount(get(position, "position")?, C::Arg, "position")?;
        let end = pack_into(
            inbuf,
            n,
            &t,
            outbuf,
            ccount(outsize, C::Arg, "outsize")?,
            pos,
        )?;
        put(position, end as c_int, "position")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Unpack(
    inbuf: *const c_void,
    insize: c_int,
    position: *mut c_int,
    outbuf: *mut c_void,
    outcount: c_int,
    datatype: c_int,
    comm: c_int,
) -> c_int {
    guard("MPI_Unpack", comm, || {
        let n = ccount(outcount, C::Count, "outcount")?;
        let t = tables().comm_type(datatype)?;
        let pos = ccount(get(position, "position")?, C::Arg, "position")?;
        let end = unpack_from(inbuf, ccount(insize, C::Arg, "insize")?, pos, outbuf, n, &t)?;
        put(position, end as c_int, "position")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Pack_size(
    incount: c_int,
    datatype: c_int,
    comm: c_int,
    size: *mut c_int,
) -> c_int {
    guard("MPI_Pack_size", comm, || {
        let n = ccount(incount, C::Count, "incount")?;
        let t = tables().dtype(datatype)?;
        let s = c_int::try_from(t.size * n)
            .map_err(|_| Error::new(C::Count, "pack size overflows int"))?;
        put(size, s, "size")
    })
}

fn external32(datarep: *const c_char) -> Res<()> {
    let d = cstr(datarep, "datarep")?;
    if d != "external32" {
        return Err(Error::new(
            C::Arg,
            format!("data representation {d:?} is not \"external32\""),
        ));
    }
    // Native little-endian is not external32 (big-endian): refuse rather
    // than produce wrong bytes.
    Err(Error::new(
        C::UnsupportedDatarep,
        "external32 packing is not implemented by tmpi",
    ))
}

#[no_mangle]
pub extern "C" fn MPI_Pack_external(
    datarep: *const c_char,
    _inbuf: *const c_void,
    _incount: c_int,
    _datatype: c_int,
    _outbuf: *mut c_void,
    _outsize: isize,
    _position: *mut isize,
) -> c_int {
    guard("MPI_Pack_external", COMM_WORLD, || external32(datarep))
}

#[no_mangle]
pub extern "C" fn MPI_Unpack_external(
    datarep: *const c_char,
    _inbuf: *const c_void,
    _insize: isize,
    _position: *mut isize,
    _outbuf: *mut c_void,
    _outcount: c_int,
    _datatype: c_int,
) -> c_int {
    guard("MPI_Unpack_external", COMM_WORLD, || external32(datarep))
}

#[no_mangle]
pub extern "C" fn MPI_Pack_external_size(
    datarep: *const c_char,
    incount: c_int,
    datatype: c_int,
    size: *mut isize,
) -> c_int {
    guard("MPI_Pack_external_size", COMM_WORLD, || {
        let d = cstr(datarep, "datarep")?;
        if d != "external32" {
            return Err(Error::new(
                C::Arg,
                format!("data representation {d:?} is not \"external32\""),
            ));
        }
        let n = ccount(incount, C::Count, "incount")?;
        let t = tables().dtype(datatype)?;
        put(size, (t.size * n) as isize, "size")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Get_address(location: *const c_void, address: *mut isize) -> c_int {
    guard("MPI_Get_address", COMM_WORLD, || {
        put(address, location as isize, "address")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Address(location: *const c_void, address: *mut isize) -> c_int {
    MPI_Get_address(location, address)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_add(base: isize, disp: isize) -> isize {
    base.wrapping_add(disp)
}

#[no_mangle]
pub extern "C" fn MPI_Aint_diff(a: isize, b: isize) -> isize {
    a.wrapping_sub(b)
}

/// `MPI_Type_create_subarray`: a block of an `ndims`-dimensional array,
/// extent of the whole array (C or Fortran order).
/// The indices of one dimension of `g` elements that process coordinate
/// `c` of `p` owns under `MPI_Type_create_darray`'s distribution `dist`
/// with argument `darg`, as runs `(first, length)` in increasing order.
fn darray_runs(
    dim: usize,
    g: c_int,
    dist: c_int,
    darg: c_int,
    p: c_int,
    c: c_int,
) -> Res<Vec<(isize, usize)>> {
    const BLOCK: c_int = 121;
    const CYCLIC: c_int = 122;
    const NONE: c_int = 123;
    const DFLT: c_int = -49767;
    let bad = |what: String| Error::new(C::Arg, format!("dimension {dim}: {what}"));
    match dist {
        NONE => {
            if p != 1 {
                return Err(bad(format!("MPI_DISTRIBUTE_NONE over {p} processes")));
            }
            Ok(vec![(0, g as usize)])
        }
        BLOCK => {
            let d = if darg == DFLT { (g + p - 1) / p } else { darg };
            if d <= 0 || (d as i64) * (p as i64) < g as i64 {
                return Err(bad(format!(
                    "block size {d} x {p} processes < {g} elements"
                )));
            }
            let first = c as i64 * d as i64;
            let end = (first + d as i64).min(g as i64);
            Ok(if first < end {
                vec![(first as isize, (end - first) as usize)]
            } else {
                vec![]
            })
        }
        CYCLIC => {
            let d = if darg == DFLT { 1 } else { darg };
            if d <= 0 {
                return Err(bad(format!("cyclic block size {d}")));
            }
            let mut runs = Vec::new();
            let mut first = c as i64 * d as i64;
            while first < g as i64 {
                let end = (first + d as i64).min(g as i64);
                runs.push((first as isize, (end - first) as usize));
                first += d as i64 * p as i64;
            }
            Ok(runs)
        }
        _ => Err(bad(format!("distribution {dist} is not MPI_DISTRIBUTE_*"))),
    }
}

/// `MPI_Type_create_darray`: this rank's part of a global array of
/// `gsizes` distributed over a row-major grid of `psizes` processes, each
/// dimension by block, cyclic(darg) or not at all; the elements in the
/// array's memory order (`order`), extent the whole global array.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Type_create_darray(
    size: c_int,
    rank: c_int,
    ndims: c_int,
    gsizes: *const c_int,
    distribs: *const c_int,
    dargs: *const c_int,
    psizes: *const c_int,
    order: c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_darray", COMM_WORLD, || {
        let n = ccount(ndims, C::Arg, "ndims")?;
        if n == 0 {
            return Err(Error::new(C::Arg, "ndims must be positive"));
        }
        let mut g = array(gsizes, n, "array_of_gsizes")?;
        let mut dist = array(distribs, n, "array_of_distribs")?;
        let mut darg = array(dargs, n, "array_of_dargs")?;
        let mut ps = array(psizes, n, "array_of_psizes")?;
        if g.iter().any(|&x| x <= 0) || ps.iter().any(|&x| x <= 0) {
            return Err(Error::new(C::Arg, "gsizes and psizes must be positive"));
        }
        let grid: i64 = ps.iter().map(|&x| x as i64).product();
        if grid != size as i64 || !(0..size).contains(&rank) {
            return Err(Error::new(
                C::Arg,
                format!("rank {rank} of {size} on a process grid of {grid}"),
            ));
        }
        let fortran = match order {
            56 => false,
            57 => true,
            _ => {
                return Err(Error::new(
                    C::Arg,
                    format!("order {order} is not MPI_ORDER_C or MPI_ORDER_FORTRAN"),
                ))
            }
        };
        let mut ints = vec![size, rank, ndims];
        for v in [&g, &dist, &darg, &ps] {
            ints.extend(v.iter());
        }
        ints.push(order);
        // The process grid is row-major whatever the array order.
        let mut coords = vec![0; n];
        let mut rest = rank;
        for i in (0..n).rev() {
            coords[i] = rest % ps[i];
            rest /= ps[i];
        }
        if fortran {
            // Fortran order is C order of the reversed dimensions.
            for v in [&mut g, &mut dist, &mut darg, &mut ps, &mut coords] {
                v.reverse();
            }
        }
        let runs = (0..n)
            .map(|i| darray_runs(i, g[i], dist[i], darg[i], ps[i], coords[i]))
            .collect::<Res<Vec<_>>>()?;
        let o = old(oldtype)?;
        let ext = o.extent();
        let mut stride = vec![1isize; n];
        for i in (0..n - 1).rev() {
            stride[i] = stride[i + 1] * g[i + 1] as isize;
        }
        // Every owned index of the outer dimensions, in order; then the
        // runs of the last one.
        let outer: Vec<Vec<isize>> = runs[..n - 1]
            .iter()
            .map(|r| r.iter().flat_map(|&(f, l)| f..f + l as isize).collect())
            .collect();
        let combos: usize = outer.iter().map(Vec::len).product();
        let mut b = Builder::new();
        for k in 0..combos {
            let mut rest = k;
            let mut off = 0isize;
            for i in (0..n - 1).rev() {
                let idx = &outer[i];
                off += idx[rest % idx.len()] * stride[i];
                rest /= idx.len();
            }
            for &(first, len) in &runs[n - 1] {
                b.place(&o, (off + first) * ext, len)?;
            }
        }
        let mut t = b.finish(cb::DARRAY, ints, vec![], vec![oldtype], false);
        let total: isize = g.iter().map(|&s| s as isize).product();
        t.lb = 0;
        t.ub = total * ext;
        make(newtype, t)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_subarray(
    ndims: c_int,
    sizes: *const c_int,
    subsizes: *const c_int,
    starts: *const c_int,
    order: c_int,
    oldtype: c_int,
    newtype: *mut c_int,
) -> c_int {
    guard("MPI_Type_create_subarray", COMM_WORLD, || {
        let n = ccount(ndims, C::Arg, "ndims")?;
        if n == 0 {
            return Err(Error::new(C::Arg, "ndims must be positive"));
        }
        let mut sz = array(sizes, n, "array_of_sizes")?;
        let mut sub = array(subsizes, n, "array_of_subsizes")?;
        let mut st = array(starts, n, "array_of_starts")?;
        for i in 0..n {
            if sz[i] <= 0 || sub[i] < 0 || st[i] < 0 || st[i] + sub[i] > sz[i] {
                return Err(Error::new(
                    C::Arg,
                    format!(
                        "dimension {i}: size {}, subsize {}, start {} do not fit",
                        sz[i], sub[i], st[i]
                    ),
                ));
            }
        }
        let fortran = match order {
            56 => false,
            57 => true,
            _ => {
                return Err(Error::new(
                    C::Arg,
                    format!("order {order} is not MPI_ORDER_C or MPI_ORDER_FORTRAN"),
                ))
            }
        };
        let mut ints = vec![ndims];
        ints.extend(&sz);
        ints.extend(&sub);
        ints.extend(&st);
        ints.push(order);
        if fortran {
            // Fortran order is C order of the reversed dimensions.
            sz.reverse();
            sub.reverse();
            st.reverse();
        }
        let o = old(oldtype)?;
        let ext = o.extent();
        // Row-major strides in elements.
        let mut stride = vec![1isize; n];
        for i in (0..n - 1).rev() {
            stride[i] = stride[i + 1] * sz[i + 1] as isize;
        }
        let mut b = Builder::new();
        // One run of sub[n-1] items per combination of the outer indices.
        let runs: usize = sub[..n - 1].iter().map(|&s| s as usize).product();
        if sub[n - 1] > 0 {
            for k in 0..runs {
                let mut rest = k;
                let mut off = st[n - 1] as isize;
                for i in (0..n - 1).rev() {
                    let s = sub[i] as usize;
                    off += (st[i] as isize + (rest % s) as isize) * stride[i];
                    rest /= s;
                }
                b.place(&o, off * ext, sub[n - 1] as usize)?;
            }
        }
        let mut t = b.finish(cb::SUBARRAY, ints, vec![], vec![oldtype], false);
        let total: isize = sz.iter().map(|&s| s as isize).product();
        t.lb = 0;
        t.ub = total * ext;
        make(newtype, t)
    })
}
