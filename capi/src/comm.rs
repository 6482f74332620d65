//! Communicators, groups, attributes, Cartesian topologies.

use std::collections::BTreeMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::Arc;

use tmpi_comm::{Comm, Compare, Group};

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{array, count as ccount, cstr, get, put, put_array, put_cstr};
use crate::state::{rt, tables, Cart, Topo, COMM_SELF, COMM_WORLD};

const UNDEFINED: c_int = -32766;

fn comm_of(h: c_int) -> Res<Comm> {
    Ok(tables().comm(h)?.comm.clone())
}

#[no_mangle]
pub extern "C" fn MPI_Comm_size(comm: c_int, size: *mut c_int) -> c_int {
    guard("MPI_Comm_size", comm, || {
        put(size, tables().comm(comm)?.comm.size() as c_int, "size")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_rank(comm: c_int, rank: *mut c_int) -> c_int {
    guard("MPI_Comm_rank", comm, || {
        put(rank, tables().comm(comm)?.comm.rank() as c_int, "rank")
    })
}

fn cmp_code(c: Compare) -> c_int {
    match c {
        Compare::Ident => 0,
        Compare::Congruent => 1,
        Compare::Similar => 2,
        Compare::Unequal => 3,
    }
}

#[no_mangle]
pub extern "C" fn MPI_Comm_compare(a: c_int, b: c_int, result: *mut c_int) -> c_int {
    guard("MPI_Comm_compare", a, || {
        if a == b {
            tables().comm(a)?;
            return put(result, 0, "result");
        }
        let (x, y) = (comm_of(a)?, comm_of(b)?);
        let mut r = cmp_code(x.compare(&y));
        if r == 0 {
            r = 1; // different handles are at most congruent
        }
        put(result, r, "result")
    })
}

/// Registers a new communicator derived from `parent` (errhandler and
/// attributes copied, as MPI_Comm_dup does).
pub(crate) fn register(parent: c_int, c: Comm, copy_attrs: bool) -> Res<c_int> {
    let (eh, attrs, topo) = {
        let t = tables();
        let p = t.comm(parent)?;
        (
            p.errhandler,
            if copy_attrs {
                p.attrs.clone()
            } else {
                BTreeMap::new()
            },
            p.topo.clone(),
        )
    };
    let h = tables().add_comm(c, eh);
    if copy_attrs {
        let mut out = BTreeMap::new();
        for (k, v) in attrs {
            let kv = tables().keyvals.get(&k).copied();
            if let Some(kv) = kv {
                if let Some(f) = kv.copy {
                    let (rc, flag, nv) = crate::ffi::call_copy_attr(f, parent, k, kv.extra, v);
                    if rc != 0 {
                        if let Some(e) = tables().comms.remove(&h) {
                            let _ = e.comm.free();
                        }
                        return Err(Error::callback(
                            rc,
                            format!("attribute copy callback of keyval {k} failed with {rc}"),
                        ));
                    }
                    if flag {
                        out.insert(k, nv);
                    }
                }
            }
        }
        let mut t = tables();
        let e = t.comm_mut(h)?;
        e.attr_order = out.keys().copied().collect();
        e.attrs = out;
        e.topo = topo;
    }
    Ok(h)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_dup(comm: c_int, newcomm: *mut c_int) -> c_int {
    guard("MPI_Comm_dup", comm, || {
        if crate::intercomm::is_inter(comm) {
            return put(newcomm, crate::intercomm::dup(comm)?, "newcomm");
        }
        let c = comm_of(comm)?.dup()?;
        let h = register(comm, c, true)?;
        put(newcomm, h, "newcomm")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_dup_with_info(comm: c_int, _info: c_int, newcomm: *mut c_int) -> c_int {
    MPI_Comm_dup(comm, newcomm)
}

/// MPI-4.0: the info hints are accepted and ignored, as in
/// `MPI_Comm_dup_with_info`.
#[no_mangle]
pub extern "C" fn MPI_Comm_idup_with_info(
    comm: c_int,
    _info: c_int,
    newcomm: *mut c_int,
    request: *mut c_int,
) -> c_int {
    MPI_Comm_idup(comm, newcomm, request)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_idup(comm: c_int, newcomm: *mut c_int, request: *mut c_int) -> c_int {
    guard("MPI_Comm_idup", comm, || {
        if newcomm.is_null() {
            return Err(Error::new(C::Arg, "newcomm is NULL"));
        }
        // The context-id agreement runs as a non-blocking allreduce: a rank
        // may go on (e.g. send to a rank that has not called idup yet)
        // before the others join. The handle is written at completion.
        if crate::intercomm::is_inter(comm) {
            return crate::intercomm::idup(comm, newcomm, request);
        }
        let (req, pending) = crate::coll::comm_of(comm)?.idup()?;
        crate::coll::coll_req(
            request,
            comm,
            req,
            crate::request::Finish::Dup {
                pending,
                newcomm: newcomm as usize,
                inter: None,
            },
        )
    })
}

fn put_opt(comm: c_int, newcomm: *mut c_int, c: Option<Comm>) -> Res<()> {
    let h = match c {
        Some(c) => register(comm, c, false)?,
        None => 0,
    };
    put(newcomm, h, "newcomm")
}

#[no_mangle]
pub extern "C" fn MPI_Comm_split(
    comm: c_int,
    color: c_int,
    key: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Comm_split", comm, || {
        let col = if color == UNDEFINED {
            None
        } else {
            Some(
                u32::try_from(color)
                    .map_err(|_| Error::new(C::Arg, format!("color {color} is negative")))?,
            )
        };
        if crate::intercomm::is_inter(comm) {
            let h = crate::intercomm::split(comm, col, key)?;
            return put(newcomm, h, "newcomm");
        }
        let c = crate::coll::comm_of(comm)?.split(col, key)?;
        put_opt(comm, newcomm, c)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_split_type(
    comm: c_int,
    split_type: c_int,
    key: c_int,
    info: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Comm_split_type", comm, || {
        use tmpi_comm::SplitType::{Shared, Undefined};
        let kind = match split_type {
            1 => Shared,
            // MPI-4.0 MPI_COMM_TYPE_HW_GUIDED: the resource named by the
            // info key "mpi_hw_resource_type"; the one level tmpi knows is
            // the node's shared memory, any other (or no key) gives
            // MPI_COMM_NULL, as MPI-4.0 7.4.2 says for an unknown type.
            2 => match crate::misc::info_value(info, "mpi_hw_resource_type")?.as_deref() {
                Some("mpi_shared_memory") => Shared,
                _ => Undefined,
            },
            // MPI_COMM_TYPE_HW_UNGUIDED: a level finer than the node is not
            // known here, so MPI_COMM_NULL (allowed when none exists).
            3 => Undefined,
            UNDEFINED => Undefined,
            _ => {
                return Err(Error::new(
                    C::Arg,
                    format!(
                        "split_type {split_type} is not MPI_COMM_TYPE_SHARED, \
                         MPI_COMM_TYPE_HW_GUIDED, MPI_COMM_TYPE_HW_UNGUIDED or MPI_UNDEFINED"
                    ),
                ))
            }
        };
        if crate::intercomm::is_inter(comm) {
            // The processes of one type on both sides (MPI-4.0 §7.4.2).
            let color = tables().comm(comm)?.comm.split_type_color(kind);
            let h = crate::intercomm::split(comm, color, key)?;
            return put(newcomm, h, "newcomm");
        }
        let c = crate::coll::comm_of(comm)?.split_type(kind, key)?;
        put_opt(comm, newcomm, c)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_create(comm: c_int, group: c_int, newcomm: *mut c_int) -> c_int {
    guard("MPI_Comm_create", comm, || {
        let g = tables().group(group)?;
        if crate::intercomm::is_inter(comm) {
            let h = crate::intercomm::create(comm, &g)?;
            return put(newcomm, h, "newcomm");
        }
        let c = crate::coll::comm_of(comm)?.create(&g)?;
        put_opt(comm, newcomm, c)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_create_group(
    comm: c_int,
    group: c_int,
    tag: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Comm_create_group", comm, || {
        let g = tables().group(group)?;
        // A caller outside the group gets MPI_COMM_NULL (as MPICH does).
        if g.rank_of(rt()?.world_rank).is_none() {
            return put(newcomm, 0, "newcomm");
        }
        let c = crate::coll::comm_of(comm)?.create_group(&g, tag)?;
        put_opt(comm, newcomm, Some(c))
    })
}

fn free_comm(comm: *mut c_int) -> Res<()> {
    let h = get(comm, "comm")?;
    if h == COMM_WORLD || h == COMM_SELF {
        return Err(Error::new(
            C::Comm,
            "MPI_COMM_WORLD and MPI_COMM_SELF cannot be freed",
        ));
    }
    // The attributes' delete callbacks run while the communicator is still
    // valid (MPI-4.0 §7.7.2: they may query it), last set first, one at a
    // time without the tables' lock (they may call MPI). A failing callback
    // fails the call and leaves the communicator with the attributes not
    // yet deleted.
    loop {
        let next = {
            let t = tables();
            let e = t.comm(h)?;
            e.attr_order
                .iter()
                .rev()
                .find_map(|k| e.attrs.get(k).map(|&v| (*k, v)))
                .or_else(|| e.attrs.iter().next().map(|(&k, &v)| (k, v)))
                .map(|(k, v)| (k, v, t.keyvals.get(&k).copied()))
        };
        let Some((k, v, kv)) = next else { break };
        if let Some(kv) = kv {
            delete_callback(&kv, h, k, v)?;
        }
        let mut t = tables();
        let e = t.comm_mut(h)?;
        e.attrs.remove(&k);
        e.attr_order.retain(|&x| x != k);
    }
    let ent = tables()
        .comms
        .remove(&h)
        .ok_or_else(|| Error::new(C::Comm, format!("invalid communicator handle {h}")))?;
    ent.comm.free()?;
    crate::comm_buffer::forget(h)?;
    put(comm, 0, "comm")
}

#[no_mangle]
pub extern "C" fn MPI_Comm_free(comm: *mut c_int) -> c_int {
    guard("MPI_Comm_free", COMM_WORLD, || free_comm(comm))
}

#[no_mangle]
pub extern "C" fn MPI_Comm_disconnect(comm: *mut c_int) -> c_int {
    guard("MPI_Comm_disconnect", COMM_WORLD, || free_comm(comm))
}

#[no_mangle]
pub extern "C" fn MPI_Comm_group(comm: c_int, group: *mut c_int) -> c_int {
    guard("MPI_Comm_group", comm, || {
        let g = comm_of(comm)?.group();
        let h = tables().add_group(g);
        put(group, h, "group")
    })
}

/// Processes started by tmpirun have no parent: `MPI_COMM_NULL`.
#[no_mangle]
pub extern "C" fn MPI_Comm_get_parent(parent: *mut c_int) -> c_int {
    guard("MPI_Comm_get_parent", COMM_WORLD, || {
        rt()?;
        put(parent, 0, "parent")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_test_inter(comm: c_int, flag: *mut c_int) -> c_int {
    guard("MPI_Comm_test_inter", comm, || {
        let inter = tables().comm(comm)?.inter.is_some();
        put(flag, c_int::from(inter), "flag")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_set_name(comm: c_int, name: *const c_char) -> c_int {
    guard("MPI_Comm_set_name", comm, || {
        let s = cstr(name, "comm_name")?;
        comm_of(comm)?.set_name(&s.chars().take(127).collect::<String>());
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_get_name(
    comm: c_int,
    name: *mut c_char,
    resultlen: *mut c_int,
) -> c_int {
    guard("MPI_Comm_get_name", comm, || {
        let n = put_cstr(name, 128, &comm_of(comm)?.name())?;
        put(resultlen, n, "resultlen")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_set_info(comm: c_int, _info: c_int) -> c_int {
    guard("MPI_Comm_set_info", comm, || tables().comm(comm).map(drop))
}

#[no_mangle]
pub extern "C" fn MPI_Comm_get_info(comm: c_int, info: *mut c_int) -> c_int {
    guard("MPI_Comm_get_info", comm, || {
        let mut t = tables();
        t.comm(comm)?;
        let h = t.add_info(Vec::new());
        drop(t);
        put(info, h, "info_used")
    })
}

// ---------------------------------------------------------------- error handlers

#[no_mangle]
pub extern "C" fn MPI_Comm_create_errhandler(
    f: Option<crate::ErrFn>,
    errhandler: *mut c_int,
) -> c_int {
    guard("MPI_Comm_create_errhandler", COMM_WORLD, || {
        let f = f.ok_or_else(|| Error::new(C::Arg, "function is NULL"))?;
        let h = tables().add_errhandler(f);
        put(errhandler, h, "errhandler")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Errhandler_create(f: Option<crate::ErrFn>, errhandler: *mut c_int) -> c_int {
    MPI_Comm_create_errhandler(f, errhandler)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_set_errhandler(comm: c_int, errhandler: c_int) -> c_int {
    guard("MPI_Comm_set_errhandler", comm, || {
        let mut t = tables();
        if !((1..=3).contains(&errhandler) || t.errhandlers.contains_key(&errhandler)) {
            return Err(Error::new(
                C::Arg,
                format!("invalid errhandler handle {errhandler}"),
            ));
        }
        t.comm_mut(comm)?.errhandler = errhandler;
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Errhandler_set(comm: c_int, errhandler: c_int) -> c_int {
    MPI_Comm_set_errhandler(comm, errhandler)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_get_errhandler(comm: c_int, errhandler: *mut c_int) -> c_int {
    guard("MPI_Comm_get_errhandler", comm, || {
        put(errhandler, tables().comm(comm)?.errhandler, "errhandler")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Errhandler_get(comm: c_int, errhandler: *mut c_int) -> c_int {
    MPI_Comm_get_errhandler(comm, errhandler)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_call_errhandler(comm: c_int, errorcode: c_int) -> c_int {
    let class = crate::error::class_of(errorcode)
        .and_then(tmpi_base::error::MpiErrorClass::from_raw)
        .unwrap_or(C::Other);
    let mut e = Error::new(
        class,
        format!("MPI_Comm_call_errhandler with error code {errorcode}"),
    );
    e.code = Some(errorcode);
    crate::error::raise("MPI_Comm_call_errhandler", comm, e);
    0
}

#[no_mangle]
pub extern "C" fn MPI_Errhandler_free(errhandler: *mut c_int) -> c_int {
    guard("MPI_Errhandler_free", COMM_WORLD, || {
        let h = get(errhandler, "errhandler")?;
        if h == 0 {
            return Err(Error::new(C::Arg, "MPI_ERRHANDLER_NULL cannot be freed"));
        }
        if h > crate::error::ERRORS_ABORT {
            tables().errhandlers.remove(&h);
        }
        put(errhandler, 0, "errhandler")
    })
}

// ---------------------------------------------------------------- attributes

/// Predefined attribute values (static storage: MPI returns pointers).
static TAG_UB_VAL: c_int = tmpi_pml::TAG_UB;
static HOST_VAL: c_int = -2; // MPI_PROC_NULL: no host process
static IO_VAL: c_int = -1; // MPI_ANY_SOURCE: every process can do I/O
static WTIME_GLOBAL_VAL: c_int = 0;
/// MPI_APPNUM: this process's program in an MPMD job: `TMPI_APPNUM` (set
/// by tmpirun per program; its PMI server answers 0 to every rank), else
/// what the launcher told the PMI/PMIx client (Hydra, Open MPI's mpirun);
/// 0 otherwise.
static APPNUM_VAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(0);

fn appnum() -> c_int {
    std::env::var("TMPI_APPNUM")
        .ok()
        .and_then(|v| v.trim().parse::<c_int>().ok())
        .filter(|&n| n >= 0)
        .or_else(tmpi_base::pmi::job_appnum)
        .unwrap_or(0)
}
/// MPI_LASTUSEDCODE: the largest error class or code in use, at least
/// MPI_ERR_LASTCODE (99; user classes and codes count up from 100).
pub(crate) static LASTUSED_VAL: std::sync::atomic::AtomicI32 =
    std::sync::atomic::AtomicI32::new(99);
static UNIVERSE_VAL: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(1);

#[no_mangle]
pub extern "C" fn MPI_Comm_create_keyval(
    copy: Option<crate::CopyAttrFn>,
    delete: Option<crate::DeleteAttrFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    create_keyval("MPI_Comm_create_keyval", copy, delete, keyval, extra)
}

/// `MPI_Comm_create_keyval` and `MPI_Type_create_keyval`: one table of
/// keyvals for both.
pub(crate) fn create_keyval(
    name: &'static str,
    copy: Option<crate::CopyAttrFn>,
    delete: Option<crate::DeleteAttrFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    guard(name, COMM_WORLD, || {
        let h = tables().add_keyval(crate::state::Keyval {
            copy,
            delete,
            extra: extra as usize,
        });
        put(keyval, h, "keyval")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Keyval_create(
    copy: Option<crate::CopyAttrFn>,
    delete: Option<crate::DeleteAttrFn>,
    keyval: *mut c_int,
    extra: *mut c_void,
) -> c_int {
    MPI_Comm_create_keyval(copy, delete, keyval, extra)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_free_keyval(keyval: *mut c_int) -> c_int {
    guard("MPI_Comm_free_keyval", COMM_WORLD, || {
        let k = get(keyval, "comm_keyval")?;
        // Attributes already set keep their callbacks: keep the record.
        if !tables().keyvals.contains_key(&k) {
            return Err(Error::new(C::Keyval, format!("invalid keyval {k}")));
        }
        put(keyval, 0, "comm_keyval")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Keyval_free(keyval: *mut c_int) -> c_int {
    MPI_Comm_free_keyval(keyval)
}

/// Runs `kv`'s delete callback on `v` (none: nothing); its failure is
/// the calling function's error.
pub(crate) fn delete_callback(
    kv: &crate::state::Keyval,
    comm: c_int,
    keyval: c_int,
    v: usize,
) -> Res<()> {
    if let Some(f) = kv.delete {
        let rc = crate::ffi::call_delete_attr(f, comm, keyval, v, kv.extra);
        if rc != 0 {
            return Err(Error::callback(
                rc,
                format!("attribute delete callback of keyval {keyval} failed with {rc}"),
            ));
        }
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn MPI_Comm_set_attr(comm: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    guard("MPI_Comm_set_attr", comm, || {
        let kv = tables().keyvals.get(&keyval).copied().ok_or_else(|| {
            Error::new(C::Keyval, format!("invalid or predefined keyval {keyval}"))
        })?;
        // The old value's delete callback first: when it fails the call
        // fails and the old value stays (MPI-4.0 7.7.2).
        if let Some(v) = tables().comm(comm)?.attrs.get(&keyval).copied() {
            delete_callback(&kv, comm, keyval, v)?;
        }
        let mut t = tables();
        let e = t.comm_mut(comm)?;
        e.attrs.insert(keyval, value as usize);
        e.attr_order.retain(|&k| k != keyval);
        e.attr_order.push(keyval);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Attr_put(comm: c_int, keyval: c_int, value: *mut c_void) -> c_int {
    MPI_Comm_set_attr(comm, keyval, value)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_get_attr(
    comm: c_int,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    guard("MPI_Comm_get_attr", comm, || {
        let predefined: Option<*const c_int> = match keyval {
            1 => Some(&TAG_UB_VAL),
            2 => Some(&HOST_VAL),
            3 => Some(&IO_VAL),
            4 => Some(&WTIME_GLOBAL_VAL),
            5 => {
                UNIVERSE_VAL.store(
                    rt()?.world_size as c_int,
                    std::sync::atomic::Ordering::Relaxed,
                );
                Some(UNIVERSE_VAL.as_ptr())
            }
            6 => Some(LASTUSED_VAL.as_ptr()),
            7 => {
                APPNUM_VAL.store(appnum(), std::sync::atomic::Ordering::Relaxed);
                Some(APPNUM_VAL.as_ptr())
            }
            _ => None,
        };
        tables().comm(comm)?;
        if let Some(p) = predefined {
            crate::ffi::put_ptr(value, p as usize)?;
            return put(flag, 1, "flag");
        }
        if !tables().keyvals.contains_key(&keyval) {
            return Err(Error::new(C::Keyval, format!("invalid keyval {keyval}")));
        }
        match tables().comm(comm)?.attrs.get(&keyval).copied() {
            Some(v) => {
                crate::ffi::put_ptr(value, v)?;
                put(flag, 1, "flag")
            }
            None => put(flag, 0, "flag"),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Attr_get(
    comm: c_int,
    keyval: c_int,
    value: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    MPI_Comm_get_attr(comm, keyval, value, flag)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_delete_attr(comm: c_int, keyval: c_int) -> c_int {
    guard("MPI_Comm_delete_attr", comm, || {
        // The callback first: when it fails the call fails and the
        // attribute stays (MPI-4.0 7.7.2).
        let old = tables().comm(comm)?.attrs.get(&keyval).copied();
        let kv = tables().keyvals.get(&keyval).copied();
        match (old, kv) {
            (Some(v), Some(kv)) => {
                delete_callback(&kv, comm, keyval, v)?;
                let mut t = tables();
                let e = t.comm_mut(comm)?;
                e.attrs.remove(&keyval);
                e.attr_order.retain(|&k| k != keyval);
                Ok(())
            }
            _ => Err(Error::new(
                C::Keyval,
                format!("no attribute for keyval {keyval}"),
            )),
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Attr_delete(comm: c_int, keyval: c_int) -> c_int {
    MPI_Comm_delete_attr(comm, keyval)
}

#[no_mangle]
pub extern "C" fn tmpi_comm_dup_fn(
    _c: c_int,
    _k: c_int,
    _e: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    let r = crate::ffi::put_ptr(vout, vin as usize).and_then(|_| put(flag, 1, "flag"));
    if r.is_err() {
        12
    } else {
        0
    }
}

#[no_mangle]
pub extern "C" fn tmpi_type_dup_fn(
    c: c_int,
    k: c_int,
    e: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    tmpi_comm_dup_fn(c, k, e, vin, vout, flag)
}

#[no_mangle]
pub extern "C" fn tmpi_win_dup_fn(
    c: c_int,
    k: c_int,
    e: *mut c_void,
    vin: *mut c_void,
    vout: *mut c_void,
    flag: *mut c_int,
) -> c_int {
    tmpi_comm_dup_fn(c, k, e, vin, vout, flag)
}

// ---------------------------------------------------------------- groups

fn group_ranks(v: &[c_int], size: u32) -> Res<Vec<u32>> {
    v.iter()
        .map(|&r| {
            u32::try_from(r).ok().filter(|&r| r < size).ok_or_else(|| {
                Error::new(C::Rank, format!("rank {r} is not in the group of {size}"))
            })
        })
        .collect()
}

fn new_group(out: *mut c_int, g: Group) -> Res<()> {
    let h = if g.size() == 0 {
        1
    } else {
        tables().add_group(g)
    };
    put(out, h, "newgroup")
}

#[no_mangle]
pub extern "C" fn MPI_Group_size(group: c_int, size: *mut c_int) -> c_int {
    guard("MPI_Group_size", COMM_WORLD, || {
        put(size, tables().group(group)?.size() as c_int, "size")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Group_rank(group: c_int, rank: *mut c_int) -> c_int {
    guard("MPI_Group_rank", COMM_WORLD, || {
        let g = tables().group(group)?;
        let me = rt()?.world_rank;
        put(
            rank,
            g.rank_of(me).map_or(UNDEFINED, |r| r as c_int),
            "rank",
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Group_translate_ranks(
    g1: c_int,
    n: c_int,
    ranks1: *const c_int,
    g2: c_int,
    ranks2: *mut c_int,
) -> c_int {
    guard("MPI_Group_translate_ranks", COMM_WORLD, || {
        let (a, b) = {
            let t = tables();
            (t.group(g1)?, t.group(g2)?)
        };
        let n = ccount(n, C::Arg, "n")?;
        let r = array(ranks1, n, "ranks1")?;
        let mut out = Vec::with_capacity(n);
        for &x in &r {
            if x == -2 {
                out.push(-2);
                continue;
            }
            let v = group_ranks(&[x], a.size())?;
            let tr = a.translate_ranks(&v, &b)?;
            out.push(tr[0].map_or(UNDEFINED, |r| r as c_int));
        }
        put_array(ranks2, &out, "ranks2")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Group_compare(g1: c_int, g2: c_int, result: *mut c_int) -> c_int {
    guard("MPI_Group_compare", COMM_WORLD, || {
        let (a, b) = {
            let t = tables();
            (t.group(g1)?, t.group(g2)?)
        };
        put(result, cmp_code(a.compare(&b)), "result")
    })
}

macro_rules! setop {
    ($name:ident, $m:ident) => {
        #[no_mangle]
        pub extern "C" fn $name(g1: c_int, g2: c_int, out: *mut c_int) -> c_int {
            guard(stringify!($name), COMM_WORLD, || {
                let (a, b) = {
                    let t = tables();
                    (t.group(g1)?, t.group(g2)?)
                };
                new_group(out, a.$m(&b))
            })
        }
    };
}
setop!(MPI_Group_union, union);
setop!(MPI_Group_intersection, intersection);
setop!(MPI_Group_difference, difference);

#[no_mangle]
pub extern "C" fn MPI_Group_incl(
    group: c_int,
    n: c_int,
    ranks: *const c_int,
    out: *mut c_int,
) -> c_int {
    guard("MPI_Group_incl", COMM_WORLD, || {
        crate::ffi::out_arg(out, "newgroup")?;
        let g = tables().group(group)?;
        let r = group_ranks(&array(ranks, ccount(n, C::Arg, "n")?, "ranks")?, g.size())?;
        new_group(out, g.incl(&r)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Group_excl(
    group: c_int,
    n: c_int,
    ranks: *const c_int,
    out: *mut c_int,
) -> c_int {
    guard("MPI_Group_excl", COMM_WORLD, || {
        crate::ffi::out_arg(out, "newgroup")?;
        let g = tables().group(group)?;
        let r = group_ranks(&array(ranks, ccount(n, C::Arg, "n")?, "ranks")?, g.size())?;
        new_group(out, g.excl(&r)?)
    })
}

fn ranges(p: *const [c_int; 3], n: c_int) -> Res<Vec<(i64, i64, i64)>> {
    Ok(array(p, ccount(n, C::Arg, "n")?, "ranges")?
        .into_iter()
        .map(|r| (r[0] as i64, r[1] as i64, r[2] as i64))
        .collect())
}

#[no_mangle]
pub extern "C" fn MPI_Group_range_incl(
    group: c_int,
    n: c_int,
    r: *const [c_int; 3],
    out: *mut c_int,
) -> c_int {
    guard("MPI_Group_range_incl", COMM_WORLD, || {
        crate::ffi::out_arg(out, "newgroup")?;
        let g = tables().group(group)?;
        new_group(out, g.range_incl(&ranges(r, n)?)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Group_range_excl(
    group: c_int,
    n: c_int,
    r: *const [c_int; 3],
    out: *mut c_int,
) -> c_int {
    guard("MPI_Group_range_excl", COMM_WORLD, || {
        crate::ffi::out_arg(out, "newgroup")?;
        let g = tables().group(group)?;
        new_group(out, g.range_excl(&ranges(r, n)?)?)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Group_free(group: *mut c_int) -> c_int {
    guard("MPI_Group_free", COMM_WORLD, || {
        let h = get(group, "group")?;
        if h > 1 && tables().groups.remove(&h).is_none() {
            return Err(Error::new(C::Group, format!("invalid group handle {h}")));
        }
        put(group, 0, "group")
    })
}

// ---------------------------------------------------------------- Cartesian topology

/// The factorisation of `n` into `k` factors, non-increasing, that is the
/// most balanced: the smallest spread (largest minus smallest factor), ties
/// to the larger smallest factor, then the larger second smallest, and so
/// on. (MPICH's choice: its topo/dims5 table of 75 395 cases; the earlier
/// greedy "largest prime to the smallest slot" gave 12 x 6 for 72 where
/// 9 x 8 exists.) A search over the divisors of `n`, pruned by the spread
/// of the best so far.
fn balanced_factors(n: i64, k: usize) -> Vec<i64> {
    fn spread(d: &[i64]) -> i64 {
        d[0] - d[d.len() - 1]
    }
    /// Whether `a` is more balanced than `b` (both non-increasing).
    fn better(a: &[i64], b: &[i64]) -> bool {
        if spread(a) != spread(b) {
            return spread(a) < spread(b);
        }
        a.iter()
            .rev()
            .zip(b.iter().rev())
            .find(|(x, y)| x != y)
            .is_some_and(|(x, y)| x > y)
    }
    /// The largest `r` with `r^m <= x` (`m >= 1`).
    fn iroot(x: i64, m: u32) -> i64 {
        let mut r = (x as f64).powf(1.0 / f64::from(m)).round() as i64;
        while r > 1 && r.checked_pow(m).is_none_or(|p| p > x) {
            r -= 1;
        }
        while (r + 1).checked_pow(m).is_some_and(|p| p <= x) {
            r += 1;
        }
        r.max(1)
    }
    struct Search<'a> {
        divisors: &'a [i64],
        cur: Vec<i64>,
        best: Option<Vec<i64>>,
    }
    impl Search<'_> {
        fn run(&mut self, rest: i64, slots: usize, maxf: i64) {
            if slots == 1 {
                if rest <= maxf {
                    self.cur.push(rest);
                    if self.best.as_ref().is_none_or(|b| better(&self.cur, b)) {
                        self.best = Some(self.cur.clone());
                    }
                    self.cur.pop();
                }
                return;
            }
            let m = (slots - 1) as u32;
            // The largest factor comes first: below rest^(1/slots) the
            // others cannot make up the product. Upwards from there the
            // bound on the spread (the first factor minus the largest the
            // smallest can be) only grows, so the first miss ends the loop.
            let from = self
                .divisors
                .partition_point(|&f| f.checked_pow(slots as u32).is_some_and(|p| p < rest));
            for i in from..self.divisors.len() {
                let f = self.divisors[i];
                if f > maxf {
                    break;
                }
                if rest % f != 0 {
                    continue;
                }
                if let Some(b) = &self.best {
                    let top = self.cur.first().copied().unwrap_or(f);
                    let smallest_at_most = iroot(rest / f, m).min(f);
                    if top - smallest_at_most > spread(b) {
                        break;
                    }
                }
                self.cur.push(f);
                self.run(rest / f, slots - 1, f);
                self.cur.pop();
            }
        }
    }
    if k == 0 {
        return Vec::new();
    }
    let mut divisors: Vec<i64> = (1..)
        .take_while(|&d| d * d <= n)
        .filter(|&d| n % d == 0)
        .flat_map(|d| [d, n / d])
        .collect();
    divisors.sort_unstable();
    divisors.dedup();
    let mut s = Search {
        divisors: &divisors,
        cur: Vec::with_capacity(k),
        best: None,
    };
    s.run(n, k, n);
    s.best.unwrap_or_else(|| vec![1; k])
}

/// `MPI_Dims_create`: the most balanced factorisation ([`balanced_factors`]),
/// non-increasing order.
pub(crate) fn dims_create(nnodes: c_int, dims: &mut [c_int]) -> Res<()> {
    if nnodes <= 0 {
        return Err(Error::new(
            C::Dims,
            format!("nnodes {nnodes} must be positive"),
        ));
    }
    let fixed: i64 = dims.iter().filter(|&&d| d > 0).map(|&d| d as i64).product();
    if dims.iter().any(|&d| d < 0) {
        return Err(Error::new(C::Dims, "negative entry in dims"));
    }
    if nnodes as i64 % fixed != 0 {
        return Err(Error::new(
            C::Dims,
            format!("{nnodes} is not a multiple of the fixed dimensions' product {fixed}"),
        ));
    }
    let free = dims.iter().filter(|&&d| d == 0).count();
    if free == 0 {
        if fixed != nnodes as i64 {
            return Err(Error::new(C::Dims, "dims do not multiply to nnodes"));
        }
        return Ok(());
    }
    let slots = balanced_factors(nnodes as i64 / fixed, free);
    let mut it = slots.into_iter();
    for d in dims.iter_mut().filter(|d| **d == 0) {
        *d = it.next().unwrap_or(1) as c_int;
    }
    Ok(())
}

#[no_mangle]
pub extern "C" fn MPI_Dims_create(nnodes: c_int, ndims: c_int, dims: *mut c_int) -> c_int {
    guard("MPI_Dims_create", COMM_WORLD, || {
        let n = ccount(ndims, C::Dims, "ndims")?;
        let mut d = array(dims as *const c_int, n, "dims")?;
        dims_create(nnodes, &mut d)?;
        put_array(dims, &d, "dims")
    })
}

pub(crate) fn cart_of(comm: c_int) -> Res<Cart> {
    match tables().comm(comm)?.topo.as_deref() {
        Some(Topo::Cart(c)) => Ok(c.clone()),
        _ => Err(Error::new(
            C::Topology,
            format!("communicator {comm} has no Cartesian topology"),
        )),
    }
}

pub(crate) fn coords_of(c: &Cart, mut rank: c_int) -> Vec<c_int> {
    let mut out = vec![0; c.dims.len()];
    for i in (0..c.dims.len()).rev() {
        out[i] = rank % c.dims[i];
        rank /= c.dims[i];
    }
    out
}

pub(crate) fn rank_of(c: &Cart, coords: &[c_int]) -> Res<c_int> {
    let mut r = 0;
    for (i, &x) in coords.iter().enumerate() {
        let d = c.dims[i];
        let x = if c.periods[i] {
            x.rem_euclid(d)
        } else if (0..d).contains(&x) {
            x
        } else {
            return Err(Error::new(
                C::Arg,
                format!("coordinate {x} outside dimension {i} of size {d}"),
            ));
        };
        r = r * d + x;
    }
    Ok(r)
}

#[no_mangle]
pub extern "C" fn MPI_Cart_create(
    comm: c_int,
    ndims: c_int,
    dims: *const c_int,
    periods: *const c_int,
    _reorder: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Cart_create", comm, || {
        let n = ccount(ndims, C::Dims, "ndims")?;
        let d = array(dims, n, "dims")?;
        let p = array(periods, n, "periods")?;
        if d.iter().any(|&x| x <= 0) {
            return Err(Error::new(C::Dims, "dimensions must be positive"));
        }
        let total: i64 = d.iter().map(|&x| x as i64).product();
        let base = crate::coll::comm_of(comm)?;
        if total > base.size() as i64 {
            return Err(Error::new(
                C::Topology,
                format!(
                    "grid of {total} processes exceeds the communicator's {}",
                    base.size()
                ),
            ));
        }
        let g = base.group().incl(&(0..total as u32).collect::<Vec<_>>())?;
        let c = base.create(&g)?;
        match c {
            None => put(newcomm, 0, "comm_cart"),
            Some(c) => {
                let h = register(comm, c, false)?;
                tables().comm_mut(h)?.topo = Some(Arc::new(Topo::Cart(Cart {
                    dims: d,
                    periods: p.iter().map(|&x| x != 0).collect(),
                })));
                put(newcomm, h, "comm_cart")
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Topo_test(comm: c_int, status: *mut c_int) -> c_int {
    guard("MPI_Topo_test", comm, || {
        let kind = match tables().comm(comm)?.topo.as_deref() {
            None => UNDEFINED,
            Some(Topo::Graph { .. }) => 1,
            Some(Topo::Cart(_)) => 2,
            Some(Topo::DistGraph { .. }) => 3,
        };
        put(status, kind, "status")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cartdim_get(comm: c_int, ndims: *mut c_int) -> c_int {
    guard("MPI_Cartdim_get", comm, || {
        put(ndims, cart_of(comm)?.dims.len() as c_int, "ndims")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cart_get(
    comm: c_int,
    maxdims: c_int,
    dims: *mut c_int,
    periods: *mut c_int,
    coords: *mut c_int,
) -> c_int {
    guard("MPI_Cart_get", comm, || {
        let c = cart_of(comm)?;
        if (maxdims as usize) < c.dims.len() {
            return Err(Error::new(
                C::Arg,
                "maxdims is smaller than the topology's dimensions",
            ));
        }
        let me = comm_of(comm)?.rank() as c_int;
        put_array(dims, &c.dims, "dims")?;
        put_array(
            periods,
            &c.periods
                .iter()
                .map(|&p| c_int::from(p))
                .collect::<Vec<_>>(),
            "periods",
        )?;
        put_array(coords, &coords_of(&c, me), "coords")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cart_rank(comm: c_int, coords: *const c_int, rank: *mut c_int) -> c_int {
    guard("MPI_Cart_rank", comm, || {
        let c = cart_of(comm)?;
        let x = array(coords, c.dims.len(), "coords")?;
        put(rank, rank_of(&c, &x)?, "rank")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cart_coords(
    comm: c_int,
    rank: c_int,
    maxdims: c_int,
    coords: *mut c_int,
) -> c_int {
    guard("MPI_Cart_coords", comm, || {
        let c = cart_of(comm)?;
        let size: c_int = c.dims.iter().product();
        if !(0..size).contains(&rank) {
            return Err(Error::new(
                C::Rank,
                format!("rank {rank} is not in 0..{size}"),
            ));
        }
        if (maxdims as usize) < c.dims.len() {
            return Err(Error::new(
                C::Arg,
                "maxdims is smaller than the topology's dimensions",
            ));
        }
        put_array(coords, &coords_of(&c, rank), "coords")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cart_shift(
    comm: c_int,
    direction: c_int,
    disp: c_int,
    source: *mut c_int,
    dest: *mut c_int,
) -> c_int {
    guard("MPI_Cart_shift", comm, || {
        let c = cart_of(comm)?;
        let dir = usize::try_from(direction)
            .ok()
            .filter(|&d| d < c.dims.len())
            .ok_or_else(|| Error::new(C::Arg, format!("direction {direction} out of range")))?;
        let me = comm_of(comm)?.rank() as c_int;
        let at = coords_of(&c, me);
        let shifted = |delta: c_int| -> c_int {
            let mut x = at.clone();
            x[dir] += delta;
            rank_of(&c, &x).unwrap_or(-2)
        };
        put(source, shifted(-disp), "rank_source")?;
        put(dest, shifted(disp), "rank_dest")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cart_sub(comm: c_int, remain: *const c_int, newcomm: *mut c_int) -> c_int {
    guard("MPI_Cart_sub", comm, || {
        let c = cart_of(comm)?;
        let r = array(remain, c.dims.len(), "remain_dims")?;
        let me = comm_of(comm)?.rank() as c_int;
        let at = coords_of(&c, me);
        // colour = coordinates of the dropped dimensions, key = kept ones.
        let (mut color, mut key) = (0i64, 0i64);
        for i in 0..c.dims.len() {
            if r[i] != 0 {
                key = key * c.dims[i] as i64 + at[i] as i64;
            } else {
                color = color * c.dims[i] as i64 + at[i] as i64;
            }
        }
        let sub = crate::coll::comm_of(comm)?
            .split(Some(color as u32), key as c_int)?
            .ok_or_else(|| Error::new(C::Intern, "cart_sub: no communicator"))?;
        let h = register(comm, sub, false)?;
        let dims: Vec<c_int> = (0..c.dims.len())
            .filter(|&i| r[i] != 0)
            .map(|i| c.dims[i])
            .collect();
        let periods: Vec<bool> = (0..c.dims.len())
            .filter(|&i| r[i] != 0)
            .map(|i| c.periods[i])
            .collect();
        tables().comm_mut(h)?.topo = Some(Arc::new(Topo::Cart(Cart { dims, periods })));
        put(newcomm, h, "newcomm")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Cart_map(
    comm: c_int,
    ndims: c_int,
    dims: *const c_int,
    _periods: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    guard("MPI_Cart_map", comm, || {
        let d = array(dims, ccount(ndims, C::Dims, "ndims")?, "dims")?;
        let total: i64 = d.iter().map(|&x| x as i64).product();
        let me = comm_of(comm)?.rank() as i64;
        put(
            newrank,
            if me < total { me as c_int } else { UNDEFINED },
            "newrank",
        )
    })
}

/// `MPI_Graph_map`: as `MPI_Cart_map`, the identity placement: ranks below
/// `nnodes` keep their rank, the others get `MPI_UNDEFINED`.
#[no_mangle]
pub extern "C" fn MPI_Graph_map(
    comm: c_int,
    nnodes: c_int,
    index: *const c_int,
    _edges: *const c_int,
    newrank: *mut c_int,
) -> c_int {
    guard("MPI_Graph_map", comm, || {
        let c = comm_of(comm)?;
        let n = ccount(nnodes, C::Arg, "nnodes")?;
        if n > c.size() as usize {
            return Err(Error::new(
                C::Arg,
                format!("nnodes {n} exceeds the communicator's size {}", c.size()),
            ));
        }
        if n > 0 {
            array(index, n, "index")?;
        }
        let me = c.rank() as usize;
        put(
            newrank,
            if me < n { me as c_int } else { UNDEFINED },
            "newrank",
        )
    })
}

#[cfg(test)]
mod tests {
    use super::dims_create;
    use std::ffi::c_int;

    #[test]
    fn dims_balanced() {
        let mut d = [0, 0];
        dims_create(6, &mut d).unwrap();
        assert_eq!(d, [3, 2]);
        let mut d = [0, 0, 0];
        dims_create(8, &mut d).unwrap();
        assert_eq!(d, [2, 2, 2]);
        let mut d = [0, 3, 0];
        dims_create(12, &mut d).unwrap();
        assert_eq!(d, [2, 3, 2]);
        let mut d = [0, 0];
        dims_create(7, &mut d).unwrap();
        assert_eq!(d, [7, 1]);
        assert!(dims_create(7, &mut [2, 0]).is_err());
    }

    /// Cases of MPICH's topo/dims5 table where a greedy assignment is not
    /// the most balanced, and ties between equal spreads.
    #[test]
    fn dims_match_mpich_table() {
        let cases: [(c_int, &[c_int]); 8] = [
            (72, &[9, 8]),
            (420, &[21, 20]),
            (228072, &[86, 52, 51]),
            (117936, &[14, 13, 9, 9, 8]),
            (712656, &[101, 14, 9, 8, 7]),
            (980784, &[139, 14, 9, 8, 7]),
            (143520, &[26, 23, 16, 15]),
            (883008, &[73, 14, 12, 9, 8]),
        ];
        for (n, want) in cases {
            let mut d = vec![0; want.len()];
            dims_create(n, &mut d).unwrap();
            assert_eq!(d, want, "{n}");
        }
    }

    /// Against every non-increasing factorisation, for small n.
    #[test]
    fn dims_are_the_most_balanced_by_brute_force() {
        fn all(n: i64, k: usize, maxf: i64) -> Vec<Vec<i64>> {
            if k == 1 {
                return if n <= maxf { vec![vec![n]] } else { vec![] };
            }
            let mut out = Vec::new();
            for f in (1..=maxf.min(n)).filter(|f| n % f == 0) {
                for mut rest in all(n / f, k - 1, f) {
                    rest.insert(0, f);
                    out.push(rest);
                }
            }
            out
        }
        for n in 1..=240i64 {
            for k in 1..=4usize {
                let best = all(n, k, n)
                    .into_iter()
                    .min_by_key(|d| {
                        (
                            d[0] - d[k - 1],
                            d.iter().rev().map(|x| -x).collect::<Vec<_>>(),
                        )
                    })
                    .unwrap();
                let mut d = vec![0; k];
                dims_create(n as c_int, &mut d).unwrap();
                let got: Vec<i64> = d.iter().map(|&x| i64::from(x)).collect();
                assert_eq!(got, best, "{n} in {k}d");
            }
        }
        // Large ones finish (many dimensions, many divisors).
        let mut d = [0; 20];
        dims_create(1 << 30, &mut d).unwrap();
        assert_eq!(d.iter().map(|&x| i64::from(x)).product::<i64>(), 1 << 30);
        assert_eq!(d[0], 4);
        let mut d = [0; 8];
        dims_create(735_134_400, &mut d).unwrap();
        assert_eq!(
            d.iter().map(|&x| i64::from(x)).product::<i64>(),
            735_134_400
        );
    }
}
