//! MPI-4.1 calls on statuses, requests and error classes:
//! `MPI_Status_get/set_source/tag/error`, `MPI_Request_get_status_any/
//! all/some` (test without freeing) and `MPI_Remove_error_class/code/
//! string`.

use std::ffi::c_int;

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{get, put};
use crate::request::{put_status, MpiStatus, St, Tested};
use crate::state::{tables, COMM_WORLD};

/// `MPI_UNDEFINED` (mpi.h).
const UNDEFINED: c_int = -32766;

fn status_field(
    name: &'static str,
    status: *const MpiStatus,
    out: *mut c_int,
    f: fn(&MpiStatus) -> c_int,
) -> c_int {
    guard(name, COMM_WORLD, || {
        let s = get(status, "status")?;
        put(out, f(&s), name)
    })
}

fn set_status_field(
    name: &'static str,
    status: *mut MpiStatus,
    v: c_int,
    f: fn(&mut MpiStatus, c_int),
) -> c_int {
    guard(name, COMM_WORLD, || {
        let mut s = get(status.cast_const(), "status")?;
        f(&mut s, v);
        put(status, s, "status")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Status_get_source(status: *const MpiStatus, source: *mut c_int) -> c_int {
    status_field("MPI_Status_get_source", status, source, |s| s.source)
}

#[no_mangle]
pub extern "C" fn MPI_Status_get_tag(status: *const MpiStatus, tag: *mut c_int) -> c_int {
    status_field("MPI_Status_get_tag", status, tag, |s| s.tag)
}

#[no_mangle]
pub extern "C" fn MPI_Status_get_error(status: *const MpiStatus, error: *mut c_int) -> c_int {
    status_field("MPI_Status_get_error", status, error, |s| s.error)
}

#[no_mangle]
pub extern "C" fn MPI_Status_set_source(status: *mut MpiStatus, source: c_int) -> c_int {
    set_status_field("MPI_Status_set_source", status, source, |s, v| s.source = v)
}

#[no_mangle]
pub extern "C" fn MPI_Status_set_tag(status: *mut MpiStatus, tag: c_int) -> c_int {
    set_status_field("MPI_Status_set_tag", status, tag, |s, v| s.tag = v)
}

#[no_mangle]
pub extern "C" fn MPI_Status_set_error(status: *mut MpiStatus, error: c_int) -> c_int {
    set_status_field("MPI_Status_set_error", status, error, |s, v| s.error = v)
}

// ---------------------------------------------------------------- request status

/// Request `i` of a C array of `count`.
fn request_at(requests: *const c_int, i: usize) -> Res<c_int> {
    get(requests.wrapping_add(i), "array_of_requests")
}

fn checked_count(count: c_int) -> Res<usize> {
    usize::try_from(count).map_err(|_| Error::new(C::Count, format!("count {count} < 0")))
}

/// Tests request `h` keeping it (a completed one stays under its handle
/// as completed, for the wait or test that frees it): `Some(status)` when
/// complete, `None` while pending or when null/inactive (`active` false).
fn peek(h: c_int) -> Res<(bool, Option<St>)> {
    Ok(match crate::request::test_handle_kept(h)? {
        Tested::Pending => (true, None),
        Tested::Inactive => (false, None),
        Tested::Complete(st, _) => (true, Some(st)),
    })
}

fn put_statuses_at(p: *mut MpiStatus, i: usize, st: St) -> Res<()> {
    if p.is_null() || p as usize == crate::ffi::STATUS_IGNORE {
        return Ok(());
    }
    put(p.wrapping_add(i), st.to_c(), "array_of_statuses")
}

/// `MPI_Request_get_status_any`: the first completed active request's
/// index and status (flag true); flag true and index `MPI_UNDEFINED` when
/// no request is active; flag false while active ones are pending. No
/// request is freed.
#[no_mangle]
pub extern "C" fn MPI_Request_get_status_any(
    count: c_int,
    requests: *const c_int,
    index: *mut c_int,
    flag: *mut c_int,
    status: *mut MpiStatus,
) -> c_int {
    guard("MPI_Request_get_status_any", COMM_WORLD, || {
        let n = checked_count(count)?;
        let mut any_active = false;
        for i in 0..n {
            let (active, st) = peek(request_at(requests, i)?)?;
            any_active |= active;
            if let Some(st) = st {
                put(index, i as c_int, "index")?;
                put(flag, 1, "flag")?;
                return put_status(status, st);
            }
        }
        put(index, UNDEFINED, "index")?;
        if any_active {
            put(flag, 0, "flag")
        } else {
            put(flag, 1, "flag")?;
            // The empty status, its error field included (mpi4py checks
            // MPI_SUCCESS there).
            put_status(status, St::empty())?;
            crate::ffi::put_status_error(status, 0);
            Ok(())
        }
    })
}

/// `MPI_Request_get_status_all`: flag true and every status when all
/// requests are complete (null and inactive ones give empty statuses),
/// else flag false; no request is freed.
#[no_mangle]
pub extern "C" fn MPI_Request_get_status_all(
    count: c_int,
    requests: *const c_int,
    flag: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    guard("MPI_Request_get_status_all", COMM_WORLD, || {
        let n = checked_count(count)?;
        let mut done = Vec::with_capacity(n);
        for i in 0..n {
            match peek(request_at(requests, i)?)? {
                (true, None) => return put(flag, 0, "flag"),
                (_, st) => done.push(st.unwrap_or_else(St::empty)),
            }
        }
        put(flag, 1, "flag")?;
        for (i, st) in done.into_iter().enumerate() {
            put_statuses_at(statuses, i, st)?;
        }
        Ok(())
    })
}

/// `MPI_Request_get_status_some`: the indices and statuses of the
/// completed active requests (`outcount` may be 0); `MPI_UNDEFINED` when
/// none is active; no request is freed.
#[no_mangle]
pub extern "C" fn MPI_Request_get_status_some(
    incount: c_int,
    requests: *const c_int,
    outcount: *mut c_int,
    indices: *mut c_int,
    statuses: *mut MpiStatus,
) -> c_int {
    guard("MPI_Request_get_status_some", COMM_WORLD, || {
        let n = checked_count(incount)?;
        let mut any_active = false;
        let mut k = 0usize;
        for i in 0..n {
            let (active, st) = peek(request_at(requests, i)?)?;
            any_active |= active;
            if let Some(st) = st {
                put(indices.wrapping_add(k), i as c_int, "array_of_indices")?;
                put_statuses_at(statuses, k, st)?;
                k += 1;
            }
        }
        let out = if any_active { k as c_int } else { UNDEFINED };
        put(outcount, out, "outcount")
    })
}

// ---------------------------------------------------------------- error classes

/// Lowers `MPI_LASTUSEDCODE` to the largest class or code still in use.
fn recompute_lastused(t: &crate::state::Tables) {
    let last = t
        .user_codes
        .keys()
        .next_back()
        .copied()
        .unwrap_or(99)
        .max(99);
    crate::comm::LASTUSED_VAL.store(last, std::sync::atomic::Ordering::Relaxed);
}

/// `MPI_Remove_error_class`: a class added by `MPI_Add_error_class`, no
/// code of which is left and whose string (if one was set) was removed
/// first (`MPI_ERR_ARG` otherwise, as for a predefined class).
#[no_mangle]
pub extern "C" fn MPI_Remove_error_class(errorclass: c_int) -> c_int {
    guard("MPI_Remove_error_class", COMM_WORLD, || {
        let mut t = tables();
        match t.user_codes.get(&errorclass) {
            Some((class, _)) if *class == errorclass => {}
            _ => {
                return Err(Error::new(
                    C::Arg,
                    format!("{errorclass} is not an error class added by MPI_Add_error_class"),
                ))
            }
        }
        if t.user_codes
            .iter()
            .any(|(&code, &(class, _))| class == errorclass && code != errorclass)
        {
            return Err(Error::new(
                C::Arg,
                format!("error class {errorclass} still has error codes (MPI_Remove_error_code them first)"),
            ));
        }
        if t.user_codes
            .get(&errorclass)
            .is_some_and(|(_, s)| !s.is_empty())
        {
            return Err(Error::new(
                C::Arg,
                format!("error class {errorclass} still has a string (MPI_Remove_error_string it first)"),
            ));
        }
        t.user_codes.remove(&errorclass);
        recompute_lastused(&t);
        Ok(())
    })
}

/// `MPI_Remove_error_code`: a code added by `MPI_Add_error_code`, whose
/// string (if one was set) was removed first (`MPI_ERR_ARG` otherwise).
#[no_mangle]
pub extern "C" fn MPI_Remove_error_code(errorcode: c_int) -> c_int {
    guard("MPI_Remove_error_code", COMM_WORLD, || {
        let mut t = tables();
        match t.user_codes.get(&errorcode) {
            Some((class, _)) if *class != errorcode => {}
            _ => {
                return Err(Error::new(
                    C::Arg,
                    format!("{errorcode} is not an error code added by MPI_Add_error_code"),
                ))
            }
        }
        if t.user_codes
            .get(&errorcode)
            .is_some_and(|(_, s)| !s.is_empty())
        {
            return Err(Error::new(
                C::Arg,
                format!(
                    "error code {errorcode} still has a string (MPI_Remove_error_string it first)"
                ),
            ));
        }
        t.user_codes.remove(&errorcode);
        recompute_lastused(&t);
        Ok(())
    })
}

/// `MPI_Remove_error_string`: the string set by `MPI_Add_error_string`
/// on a user class or code is removed (`MPI_ERR_ARG` when none is set).
#[no_mangle]
pub extern "C" fn MPI_Remove_error_string(errorcode: c_int) -> c_int {
    guard("MPI_Remove_error_string", COMM_WORLD, || {
        let mut t = tables();
        match t.user_codes.get_mut(&errorcode) {
            Some((_, s)) if !s.is_empty() => {
                s.clear();
                Ok(())
            }
            _ => Err(Error::new(
                C::Arg,
                format!("error code {errorcode} has no string set by MPI_Add_error_string"),
            )),
        }
    })
}
