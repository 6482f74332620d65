//! Error classes and strings, info objects, user ops, handle conversions.

use std::ffi::{c_char, c_int, c_void};

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{count as ccount, cstr, get, put, put_cstr};
use crate::state::{tables, COMM_WORLD};

#[no_mangle]
pub extern "C" fn MPI_Error_class(code: c_int, class: *mut c_int) -> c_int {
    guard("MPI_Error_class", COMM_WORLD, || {
        let c = crate::error::class_of(code)
            .ok_or_else(|| Error::new(C::Arg, format!("{code} is not an error code")))?;
        put(class, c, "errorclass")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Error_string(code: c_int, s: *mut c_char, len: *mut c_int) -> c_int {
    guard("MPI_Error_string", COMM_WORLD, || {
        let text = crate::error::string_of(code)
            .ok_or_else(|| Error::new(C::Arg, format!("{code} is not an error code")))?;
        let n = put_cstr(s, 512, &text)?;
        put(len, n, "resultlen")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Add_error_class(class: *mut c_int) -> c_int {
    guard("MPI_Add_error_class", COMM_WORLD, || {
        let mut t = tables();
        let c = t.next_code;
        t.next_code += 1;
        t.user_codes.insert(c, (c, String::new()));
        drop(t);
        crate::comm::LASTUSED_VAL.fetch_max(c, std::sync::atomic::Ordering::Relaxed);
        put(class, c, "errorclass")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Add_error_code(class: c_int, code: *mut c_int) -> c_int {
    guard("MPI_Add_error_code", COMM_WORLD, || {
        let mut t = tables();
        if !t.user_codes.contains_key(&class) && C::from_raw(class).is_none() {
            return Err(Error::new(C::Arg, format!("{class} is not an error class")));
        }
        let c = t.next_code;
        t.next_code += 1;
        t.user_codes.insert(c, (class, String::new()));
        drop(t);
        crate::comm::LASTUSED_VAL.fetch_max(c, std::sync::atomic::Ordering::Relaxed);
        put(code, c, "errorcode")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Add_error_string(code: c_int, s: *const c_char) -> c_int {
    guard("MPI_Add_error_string", COMM_WORLD, || {
        let text = cstr(s, "string")?;
        let mut t = tables();
        let e = t
            .user_codes
            .get_mut(&code)
            .ok_or_else(|| Error::new(C::Arg, format!("{code} is not a user error code")))?;
        e.1 = text;
        Ok(())
    })
}

// ---------------------------------------------------------------- info

fn read_only(h: c_int) -> Res<()> {
    if h == crate::state::INFO_ENV {
        return Err(Error::new(C::Info, "MPI_INFO_ENV cannot be modified"));
    }
    Ok(())
}

fn info_mut<T>(h: c_int, f: impl FnOnce(&mut Vec<(String, String)>) -> Res<T>) -> Res<T> {
    let mut t = tables();
    let v = t
        .infos
        .get_mut(&h)
        .ok_or_else(|| Error::new(C::Info, format!("invalid info handle {h}")))?;
    f(v)
}

/// The value of `key` in info `h`.
fn lookup(h: c_int, key: &str) -> Res<Option<String>> {
    info_mut(h, |kv| {
        Ok(kv.iter().find(|e| e.0 == key).map(|e| e.1.clone()))
    })
}

/// [`lookup`] that takes `MPI_INFO_NULL` for an empty info (hints).
pub(crate) fn info_value(h: c_int, key: &str) -> Res<Option<String>> {
    if h == 0 {
        return Ok(None);
    }
    lookup(h, key)
}

fn key(p: *const c_char) -> Res<String> {
    let k = cstr(p, "key")?;
    if k.is_empty() || k.len() > 255 {
        return Err(Error::new(
            C::InfoKey,
            format!("info key {k:?} is empty or longer than MPI_MAX_INFO_KEY"),
        ));
    }
    Ok(k)
}

#[no_mangle]
pub extern "C" fn MPI_Info_create(info: *mut c_int) -> c_int {
    guard("MPI_Info_create", COMM_WORLD, || {
        let h = tables().add_info(Vec::new());
        put(info, h, "info")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_set(info: c_int, k: *const c_char, v: *const c_char) -> c_int {
    guard("MPI_Info_set", COMM_WORLD, || {
        read_only(info)?;
        let k = key(k)?;
        let v = cstr(v, "value")?;
        if v.len() > 1024 {
            return Err(Error::new(
                C::InfoValue,
                "info value longer than MPI_MAX_INFO_VAL",
            ));
        }
        info_mut(info, |kv| {
            match kv.iter_mut().find(|e| e.0 == k) {
                Some(e) => e.1 = v,
                None => kv.push((k, v)),
            }
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_get(
    info: c_int,
    k: *const c_char,
    valuelen: c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Info_get", COMM_WORLD, || {
        let k = key(k)?;
        let cap = ccount(valuelen, C::Arg, "valuelen")?;
        match lookup(info, &k)? {
            Some(v) => {
                put_cstr(value, cap + 1, &v)?;
                put(flag, 1, "flag")
            }
            None => put(flag, 0, "flag"),
        }
    })
}

/// MPI-4.0: the value of `key` into `value` (at most `*buflen` bytes with
/// the terminating NUL, cut to fit; nothing written when `*buflen` is 0),
/// and `*buflen` set to the value's length plus one, so a caller can ask
/// for the size first. `*flag` false (and `*buflen` untouched) when the
/// key is not set.
#[no_mangle]
pub extern "C" fn MPI_Info_get_string(
    info: c_int,
    k: *const c_char,
    buflen: *mut c_int,
    value: *mut c_char,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Info_get_string", COMM_WORLD, || {
        let k = key(k)?;
        let cap = ccount(get(buflen, "buflen")?, C::Arg, "buflen")?;
        match lookup(info, &k)? {
            Some(v) => {
                if cap > 0 {
                    put_cstr(value, cap, &v)?;
                }
                let n = c_int::try_from(v.len() + 1)
                    .map_err(|_| Error::new(C::Arg, "value longer than an int counts"))?;
                put(buflen, n, "buflen")?;
                put(flag, 1, "flag")
            }
            None => put(flag, 0, "flag"),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_get_valuelen(
    info: c_int,
    k: *const c_char,
    valuelen: *mut c_int,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Info_get_valuelen", COMM_WORLD, || {
        let k = key(k)?;
        match info_mut(info, |kv| {
            Ok(kv.iter().find(|e| e.0 == k).map(|e| e.1.len()))
        })? {
            Some(n) => {
                put(valuelen, n as c_int, "valuelen")?;
                put(flag, 1, "flag")
            }
            None => put(flag, 0, "flag"),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_get_nkeys(info: c_int, nkeys: *mut c_int) -> c_int {
    guard("MPI_Info_get_nkeys", COMM_WORLD, || {
        let n = info_mut(info, |kv| Ok(kv.len()))?;
        put(nkeys, n as c_int, "nkeys")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_get_nthkey(info: c_int, n: c_int, k: *mut c_char) -> c_int {
    guard("MPI_Info_get_nthkey", COMM_WORLD, || {
        let i = ccount(n, C::Arg, "n")?;
        let name = info_mut(info, |kv| {
            kv.get(i)
                .map(|e| e.0.clone())
                .ok_or_else(|| Error::new(C::Arg, format!("no key number {n}")))
        })?;
        put_cstr(k, 256, &name).map(drop)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_delete(info: c_int, k: *const c_char) -> c_int {
    guard("MPI_Info_delete", COMM_WORLD, || {
        read_only(info)?;
        let k = key(k)?;
        info_mut(info, |kv| {
            let before = kv.len();
            kv.retain(|e| e.0 != k);
            if kv.len() == before {
                return Err(Error::new(C::InfoNokey, format!("key {k:?} is not set")));
            }
            Ok(())
        })
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_dup(info: c_int, newinfo: *mut c_int) -> c_int {
    guard("MPI_Info_dup", COMM_WORLD, || {
        let kv = info_mut(info, |kv| Ok(kv.clone()))?;
        let h = tables().add_info(kv);
        put(newinfo, h, "newinfo")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Info_free(info: *mut c_int) -> c_int {
    guard("MPI_Info_free", COMM_WORLD, || {
        let h = get(info, "info")?;
        read_only(h)?;
        if tables().infos.remove(&h).is_none() {
            return Err(Error::new(C::Info, format!("invalid info handle {h}")));
        }
        put(info, 0, "info")
    })
}

// ---------------------------------------------------------------- ops

#[no_mangle]
pub extern "C" fn MPI_Op_create(f: Option<crate::UserFn>, commute: c_int, op: *mut c_int) -> c_int {
    guard("MPI_Op_create", COMM_WORLD, || {
        let f = f.ok_or_else(|| Error::new(C::Arg, "user_fn is NULL"))?;
        let h = tables().add_op((crate::UserOpFn::Int(f), commute != 0));
        put(op, h, "op")
    })
}

/// `MPI_Op_create` with a function taking the length as an `MPI_Count`.
#[no_mangle]
pub extern "C" fn MPI_Op_create_c(
    f: Option<crate::UserFnC>,
    commute: c_int,
    op: *mut c_int,
) -> c_int {
    guard("MPI_Op_create_c", COMM_WORLD, || {
        let f = f.ok_or_else(|| Error::new(C::Arg, "user_fn is NULL"))?;
        let h = tables().add_op((crate::UserOpFn::Large(f), commute != 0));
        put(op, h, "op")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Op_free(op: *mut c_int) -> c_int {
    guard("MPI_Op_free", COMM_WORLD, || {
        let h = get(op, "op")?;
        if tables().ops.remove(&h).is_none() {
            return Err(Error::new(
                C::Op,
                format!("op {h} is predefined or invalid"),
            ));
        }
        put(op, 0, "op")
    })
}

/// `MPI_REPLACE` and `MPI_NO_OP` (mpi.h).
const REPLACE: c_int = 13;
const NO_OP: c_int = 14;

#[no_mangle]
pub extern "C" fn MPI_Op_commutative(op: c_int, commute: *mut c_int) -> c_int {
    guard("MPI_Op_commutative", COMM_WORLD, || {
        // MPI_REPLACE and MPI_NO_OP (one-sided only) keep one side's
        // value: not commutative (as MPICH answers).
        let c = match crate::state::predefined_op(op) {
            Some(_) => true,
            None if op == REPLACE || op == NO_OP => false,
            None => tables().user_op(op)?.1,
        };
        put(commute, c_int::from(c), "commute")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Reduce_local(
    inbuf: *const c_void,
    inoutbuf: *mut c_void,
    count: c_int,
    dtype: c_int,
    op: c_int,
) -> c_int {
    guard("MPI_Reduce_local", COMM_WORLD, || {
        if crate::ffi::is_in_place(inbuf) || crate::ffi::is_in_place(inoutbuf) {
            return Err(Error::new(
                C::Buffer,
                "MPI_IN_PLACE is not a buffer of MPI_Reduce_local",
            ));
        }
        crate::coll::not_aliased(inbuf, inoutbuf, count)?;
        let n = ccount(count, C::Count, "count")?;
        let t = tables().comm_type(dtype)?;
        let (e, o) = crate::coll::red(&t, op, dtype)?;
        let len = t
            .size
            .checked_mul(n)
            .ok_or_else(|| Error::new(C::Count, "count x datatype size overflows"))?;
        if t.is_contig() {
            let input = crate::ffi::bytes(inbuf.cast(), len)?.to_vec();
            let inout = crate::ffi::bytes_mut(inoutbuf.cast(), len)?;
            o.apply(e, &input, inout)?;
        } else {
            let input = crate::coll::pack(inbuf, n, &t);
            let mut inout = crate::coll::pack(inoutbuf, n, &t);
            o.apply(e, &input, &mut inout)?;
            crate::coll::unpack(inoutbuf, n, &t, &inout);
        }
        Ok(())
    })
}

// ---------------------------------------------------------------- c2f / f2c

macro_rules! conv {
    ($($c2f:ident $f2c:ident),*) => {$(
        #[no_mangle]
        pub extern "C" fn $c2f(h: c_int) -> c_int { h }
        #[no_mangle]
        pub extern "C" fn $f2c(h: c_int) -> c_int { h }
    )*};
}
conv!(MPI_Comm_c2f MPI_Comm_f2c, MPI_Type_c2f MPI_Type_f2c, MPI_Group_c2f MPI_Group_f2c,
      MPI_Request_c2f MPI_Request_f2c, MPI_Op_c2f MPI_Op_f2c, MPI_Errhandler_c2f MPI_Errhandler_f2c,
      MPI_Info_c2f MPI_Info_f2c, MPI_Message_c2f MPI_Message_f2c, MPI_Win_c2f MPI_Win_f2c,
      MPI_File_c2f MPI_File_f2c);

#[no_mangle]
pub extern "C" fn MPI_Status_c2f(c: *const crate::request::MpiStatus, f: *mut c_int) -> c_int {
    guard("MPI_Status_c2f", COMM_WORLD, || {
        let s = get(c, "c_status")?;
        crate::ffi::put_array(
            f,
            &[
                s.count_lo,
                s.count_hi_and_cancelled,
                s.source,
                s.tag,
                s.error,
            ],
            "f_status",
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Status_f2c(f: *const c_int, c: *mut crate::request::MpiStatus) -> c_int {
    guard("MPI_Status_f2c", COMM_WORLD, || {
        let v = crate::ffi::array(f, 5, "f_status")?;
        put(
            c,
            crate::request::MpiStatus {
                count_lo: v[0],
                count_hi_and_cancelled: v[1],
                source: v[2],
                tag: v[3],
                error: v[4],
            },
            "c_status",
        )
    })
}
