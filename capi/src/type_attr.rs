//! Attributes on datatypes (`MPI_Type_create_keyval`, `MPI_Type_set_attr`,
//! ...): the communicators' keyval table and callbacks (`crate::comm`), with
//! the values kept per datatype handle in `Tables::type_attrs`, in the order
//! they were set. `MPI_Type_dup` copies them through the copy callbacks and
//! `MPI_Type_free` runs the delete callbacks (`crate::types`).

use std::ffi::{c_int, c_void};

use crate::comm::delete_callback;
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{get, put};
use crate::state::{tables, Keyval, COMM_WORLD};

fn keyval(k: c_int) -> Res<Keyval> {
    tables()
        .keyvals
        .get(&k)
        .copied()
        .ok_or_else(|| Error::new(C::Keyval, format!("invalid keyval {k}")))
}

fn check_type(t: c_int) -> Res<()> {
    if tables().types.contains_key(&t) {
        Ok(())
    } else {
        Err(Error::new(C::Type, format!("invalid datatype handle {t}")))
    }
}

/// The value of `k` on datatype `t`, if set.
fn value(t: c_int, k: c_int) -> Option<usize> {
    let tb = tables();
    let list = tb.type_attrs.get(&t)?;
    list.iter().find(|&&(kk, _)| kk == k).map(|&(_, v)| v)
}

#[no_mangle]
pub extern "C" fn MPI_Type_create_keyval(
    copy: Option<crate::CopyAttrFn>,
    delete: Option<crate::DeleteAttrFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    crate::comm::create_keyval("MPI_Type_create_keyval", copy, delete, keyval, extra)
}

#[no_mangle]
pub extern "C" fn MPI_Type_free_keyval(k: *mut c_int) -> c_int {
    guard("MPI_Type_free_keyval", COMM_WORLD, || {
        // Attributes already set keep their callbacks: the record stays.
        keyval(get(k, "type_keyval")?)?;
        put(k, 0, "type_keyval")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_set_attr(t: c_int, k: c_int, v: *mut c_void) -> c_int {
    guard("MPI_Type_set_attr", COMM_WORLD, || {
        check_type(t)?;
        let kv = keyval(k)?;
        // The old value's delete callback first: when it fails the call
        // fails and the old value stays (MPI-4.0 7.7.2).
        if let Some(old) = value(t, k) {
            delete_callback(&kv, t, k, old)?;
        }
        let mut tb = tables();
        let list = tb.type_attrs.entry(t).or_default();
        list.retain(|&(kk, _)| kk != k);
        list.push((k, v as usize));
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_get_attr(t: c_int, k: c_int, v: *mut c_void, flag: *mut c_int) -> c_int {
    guard("MPI_Type_get_attr", COMM_WORLD, || {
        check_type(t)?;
        keyval(k)?;
        match value(t, k) {
            Some(x) => {
                crate::ffi::put_ptr(v, x)?;
                put(flag, 1, "flag")
            }
            None => put(flag, 0, "flag"),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Type_delete_attr(t: c_int, k: c_int) -> c_int {
    guard("MPI_Type_delete_attr", COMM_WORLD, || {
        check_type(t)?;
        let kv = keyval(k)?;
        let old = value(t, k)
            .ok_or_else(|| Error::new(C::Keyval, format!("no attribute for keyval {k}")))?;
        // The callback first: when it fails the attribute stays.
        delete_callback(&kv, t, k, old)?;
        if let Some(list) = tables().type_attrs.get_mut(&t) {
            list.retain(|&(kk, _)| kk != k);
        }
        Ok(())
    })
}

/// `MPI_Type_dup`'s attributes: each of `from`'s, in the order set, through
/// its keyval's copy callback onto `to` (none, or a flag of 0: not copied).
/// A callback's failure is the call's error; the caller frees `to`.
pub(crate) fn copy_attrs(from: c_int, to: c_int) -> Res<()> {
    let list = tables().type_attrs.get(&from).cloned().unwrap_or_default();
    let mut out = Vec::new();
    for (k, v) in list {
        let Ok(kv) = keyval(k) else { continue };
        let Some(f) = kv.copy else { continue };
        let (rc, flag, nv) = crate::ffi::call_copy_attr(f, from, k, kv.extra, v);
        if rc != 0 {
            return Err(Error::callback(
                rc,
                format!("attribute copy callback of keyval {k} failed with {rc}"),
            ));
        }
        if flag {
            out.push((k, nv));
        }
    }
    if !out.is_empty() {
        tables().type_attrs.insert(to, out);
    }
    Ok(())
}

/// `MPI_Type_free`'s attributes: the delete callbacks, in the order the
/// attributes were set; the first failure stops the free (the datatype and
/// its remaining attributes stay).
pub(crate) fn delete_attrs(t: c_int) -> Res<()> {
    loop {
        let first = tables().type_attrs.get(&t).and_then(|l| l.first().copied());
        let Some((k, v)) = first else { break };
        if let Ok(kv) = keyval(k) {
            delete_callback(&kv, t, k, v)?;
        }
        if let Some(list) = tables().type_attrs.get_mut(&t) {
            list.retain(|&(kk, _)| kk != k);
        }
    }
    tables().type_attrs.remove(&t);
    Ok(())
}
