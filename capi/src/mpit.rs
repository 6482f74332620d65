//! MPI_T, the tool information interface: control variables are the MCA
//! parameters (read-only: they are resolved at registration), performance
//! variables are the pml's protocol counters, categories the MCA frameworks
//! and their components.

use std::ffi::{c_char, c_int, c_void};
use std::sync::atomic::{AtomicI32, Ordering};

use tmpi_base::mca::{self, ParamInfo, Value};

use crate::error::{Error, MpiErrorClass as C, Res};
use crate::ffi::{cstr, get, put, put_cstr};
use crate::state::Rt;

static T_REFS: AtomicI32 = AtomicI32::new(0);

/// MPI_T calls return their error code directly (no error handlers apply).
fn t_guard(f: impl FnOnce() -> Res<()>) -> c_int {
    match std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)) {
        Ok(Ok(())) => 0,
        Ok(Err(e)) => e.class as c_int,
        Err(_) => C::Intern as c_int,
    }
}

fn need_init() -> Res<()> {
    if T_REFS.load(Ordering::Acquire) <= 0 {
        return Err(Error::new(C::TErrNotInitialized, "MPI_T_init_thread first"));
    }
    Ok(())
}

fn cvars() -> Vec<ParamInfo> {
    let mut v = mca::registry().params();
    v.sort_by(|a, b| a.name.cmp(&b.name));
    v
}

fn cvar(i: c_int) -> Res<ParamInfo> {
    usize::try_from(i)
        .ok()
        .and_then(|i| cvars().into_iter().nth(i))
        .ok_or_else(|| Error::new(C::TErrInvalidIndex, format!("no control variable {i}")))
}

/// (MPI datatype, element count) of a value.
fn shape(v: &Value) -> (c_int, c_int) {
    match v {
        Value::Bool(_) => (8, 1),                           // MPI_INT
        Value::Int(_) => (12, 1),                           // MPI_LONG_LONG
        Value::Size(_) => (13, 1),                          // MPI_UNSIGNED_LONG_LONG
        other => (1, other.to_string().len() as c_int + 1), // MPI_CHAR
    }
}

fn verbosity(i: &ParamInfo) -> c_int {
    220 + i.level.as_u8() as c_int
}

fn put_name(name: *mut c_char, len: *mut c_int, s: &str) -> Res<()> {
    // Either may be NULL (the caller asks only for the length).
    if len.is_null() {
        return Ok(());
    }
    let cap = get(len as *const c_int, "name_len")?;
    if !name.is_null() && cap > 0 {
        put_cstr(name, cap as usize, s)?;
    }
    put(len, s.len() as c_int + 1, "name_len")
}

#[no_mangle]
pub extern "C" fn MPI_T_init_thread(_required: c_int, provided: *mut c_int) -> c_int {
    t_guard(|| {
        T_REFS.fetch_add(1, Ordering::AcqRel);
        put(provided, 3, "provided")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_finalize() -> c_int {
    t_guard(|| {
        need_init()?;
        T_REFS.fetch_sub(1, Ordering::AcqRel);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_cvar_get_num(n: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(n, cvars().len() as c_int, "num_cvar")
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_T_cvar_get_info(
    index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    verb: *mut c_int,
    dtype: *mut c_int,
    enumtype: *mut c_int,
    desc: *mut c_char,
    desc_len: *mut c_int,
    bind: *mut c_int,
    scope: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        let p = cvar(index)?;
        put_name(name, name_len, &p.name)?;
        put_name(desc, desc_len, &p.help)?;
        if !verb.is_null() {
            put(verb, verbosity(&p), "verbosity")?;
        }
        if !dtype.is_null() {
            put(dtype, shape(&p.value).0, "datatype")?;
        }
        if !enumtype.is_null() {
            put(enumtype, 0, "enumtype")?;
        }
        if !bind.is_null() {
            put(bind, 9700, "bind")?;
        }
        if !scope.is_null() {
            put(scope, 60439, "scope")?; // MPI_T_SCOPE_READONLY
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_cvar_get_index(name: *const c_char, index: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        let n = cstr(name, "name")?;
        let i = cvars()
            .iter()
            .position(|p| p.name == n)
            .ok_or_else(|| Error::new(C::TErrInvalidName, format!("no control variable {n:?}")))?;
        put(index, i as c_int, "cvar_index")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_cvar_handle_alloc(
    index: c_int,
    _obj: *mut c_void,
    handle: *mut c_int,
    count: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        let p = cvar(index)?;
        put(handle, index + 1, "handle")?;
        put(count, shape(&p.value).1, "count")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_cvar_handle_free(handle: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(handle, 0, "handle")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_cvar_read(handle: c_int, buf: *mut c_void) -> c_int {
    t_guard(|| {
        need_init()?;
        let p = cvar(handle - 1)
            .map_err(|_| Error::new(C::TErrInvalidHandle, "invalid cvar handle"))?;
        match &p.value {
            Value::Bool(b) => put(buf.cast::<c_int>(), c_int::from(*b), "buf"),
            Value::Int(i) => put(buf.cast::<i64>(), *i, "buf"),
            Value::Size(s) => put(buf.cast::<u64>(), *s, "buf"),
            other => {
                let s = other.to_string();
                put_cstr(buf.cast(), s.len() + 1, &s).map(drop)
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_cvar_write(_handle: c_int, _buf: *const c_void) -> c_int {
    t_guard(|| {
        need_init()?;
        Err(Error::new(
            C::TErrCvarSetNever,
            "MCA parameters are fixed once resolved; set them with --mca or TMPI_MCA_*",
        ))
    })
}

const LEVEL: c_int = 241; // MPI_T_PVAR_CLASS_LEVEL
const HIGHWATERMARK: c_int = 244; // MPI_T_PVAR_CLASS_HIGHWATERMARK
const COUNTER: c_int = 246; // MPI_T_PVAR_CLASS_COUNTER

/// One performance variable: name, description, class, and how to read it
/// from the running library (all are `MPI_UNSIGNED_LONG_LONG`, bound to no
/// object, continuous and read-only).
struct Pvar {
    name: &'static str,
    desc: &'static str,
    class: c_int,
    read: fn(&Rt) -> u64,
}

const fn pv(name: &'static str, desc: &'static str, class: c_int, read: fn(&Rt) -> u64) -> Pvar {
    Pvar {
        name,
        desc,
        class,
        read,
    }
}

/// The order is part of the interface only through the names
/// (`MPI_T_pvar_get_index`); new variables go at the end.
const PVARS: &[Pvar] = &[
    pv("pml_eager_sent", "Eager messages sent", COUNTER, |r| {
        r.pml.stats().eager_sent
    }),
    pv("pml_rndv_sent", "Rendezvous messages sent", COUNTER, |r| {
        r.pml.stats().rndv_sent
    }),
    pv(
        "pml_rndv_get",
        "Rendezvous messages completed with a get",
        COUNTER,
        |r| r.pml.stats().rndv_get,
    ),
    pv(
        "pml_rndv_pipelined",
        "Rendezvous messages completed with pipelined fragments",
        COUNTER,
        |r| r.pml.stats().rndv_pipelined,
    ),
    pv(
        "pml_unexpected",
        "Messages that arrived before their receive was posted",
        COUNTER,
        |r| r.pml.stats().unexpected,
    ),
    pv(
        "pml_out_of_order",
        "Fragments that arrived ahead of their sequence turn",
        COUNTER,
        |r| r.pml.stats().out_of_order,
    ),
    pv(
        "pml_dropped",
        "Fragments dropped as malformed or unknown",
        COUNTER,
        |r| r.pml.stats().dropped,
    ),
    pv(
        "pml_live_requests",
        "Requests not yet released",
        LEVEL,
        |r| r.pml.live_requests() as u64,
    ),
    pv(
        "pml_posted_depth",
        "Receives queued in the matcher now (software and offloaded)",
        LEVEL,
        |r| r.pml.queue_stats().posted_depth as u64,
    ),
    pv(
        "pml_posted_high_water",
        "Highest number of receives queued in the matcher at once",
        HIGHWATERMARK,
        |r| r.pml.queue_stats().posted_high_water as u64,
    ),
    pv(
        "pml_unexpected_depth",
        "Unexpected messages queued in the matcher now",
        LEVEL,
        |r| r.pml.queue_stats().unexpected_depth as u64,
    ),
    pv(
        "pml_unexpected_high_water",
        "Highest number of unexpected messages queued at once",
        HIGHWATERMARK,
        |r| r.pml.queue_stats().unexpected_high_water as u64,
    ),
    pv(
        "pml_offloaded",
        "Receives handed to the tag-matching NIC",
        COUNTER,
        |r| r.pml.match_counters().offloaded,
    ),
    pv(
        "pml_nic_matches",
        "Messages the NIC matched into an offloaded receive",
        COUNTER,
        |r| r.pml.match_counters().nic_matches,
    ),
    pv("pml_sw_matches", "Matches made in software", COUNTER, |r| {
        r.pml.match_counters().sw_matches
    }),
    pv(
        "pml_syncs",
        "TAG_SYNC operations issued to the NIC",
        COUNTER,
        |r| r.pml.match_counters().syncs,
    ),
    pv(
        "pml_del_lost",
        "Receive removals (DEL) that lost the race to a NIC match",
        COUNTER,
        |r| r.pml.match_counters().del_lost,
    ),
    pv(
        "pml_fallbacks",
        "Offloadable receives that stayed in software (prefix rule, capacity, refused ADD)",
        COUNTER,
        |r| r.pml.match_counters().fallbacks,
    ),
];

fn pvar_value(i: usize) -> Res<u64> {
    let rt = crate::state::rt()?;
    Ok((PVARS[i].read)(rt))
}

fn pvar_index(i: c_int) -> Res<usize> {
    usize::try_from(i)
        .ok()
        .filter(|&i| i < PVARS.len())
        .ok_or_else(|| Error::new(C::TErrInvalidIndex, format!("no performance variable {i}")))
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_get_num(n: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(n, PVARS.len() as c_int, "num_pvar")
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_T_pvar_get_info(
    index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    verb: *mut c_int,
    class: *mut c_int,
    dtype: *mut c_int,
    enumtype: *mut c_int,
    desc: *mut c_char,
    desc_len: *mut c_int,
    bind: *mut c_int,
    readonly: *mut c_int,
    continuous: *mut c_int,
    atomic: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        let i = pvar_index(index)?;
        put_name(name, name_len, PVARS[i].name)?;
        put_name(desc, desc_len, PVARS[i].desc)?;
        let fields: [(*mut c_int, c_int); 8] = [
            (verb, 224),
            (class, PVARS[i].class),
            (dtype, 13), // MPI_UNSIGNED_LONG_LONG
            (enumtype, 0),
            (bind, 9700),
            (readonly, 1),
            (continuous, 1),
            (atomic, 0),
        ];
        for (p, v) in fields {
            if !p.is_null() {
                put(p, v, "pvar info")?;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_get_index(
    name: *const c_char,
    class: c_int,
    index: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        let n = cstr(name, "name")?;
        let i = PVARS
            .iter()
            .position(|p| p.name == n && p.class == class)
            .ok_or_else(|| {
                Error::new(
                    C::TErrInvalidName,
                    format!("no performance variable {n:?} of class {class}"),
                )
            })?;
        put(index, i as c_int, "pvar_index")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_session_create(session: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(session, 1, "session")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_session_free(session: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(session, 0, "session")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_handle_alloc(
    _s: c_int,
    index: c_int,
    _obj: *mut c_void,
    handle: *mut c_int,
    count: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        pvar_index(index)?;
        put(handle, index + 1, "handle")?;
        put(count, 1, "count")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_handle_free(_s: c_int, handle: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(handle, 0, "handle")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_start(_s: c_int, _h: c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        Err(Error::new(
            C::TErrPvarNoStartstop,
            "tmpi's performance variables are continuous",
        ))
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_stop(s: c_int, h: c_int) -> c_int {
    MPI_T_pvar_start(s, h)
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_read(_s: c_int, handle: c_int, buf: *mut c_void) -> c_int {
    t_guard(|| {
        need_init()?;
        let i = pvar_index(handle - 1)
            .map_err(|_| Error::new(C::TErrInvalidHandle, "invalid pvar handle"))?;
        put(buf.cast::<u64>(), pvar_value(i)?, "buf")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_write(_s: c_int, _h: c_int, _buf: *const c_void) -> c_int {
    t_guard(|| {
        need_init()?;
        Err(Error::new(
            C::TErrPvarNoWrite,
            "tmpi's performance variables are read-only",
        ))
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_reset(s: c_int, h: c_int) -> c_int {
    MPI_T_pvar_write(s, h, std::ptr::null())
}

#[no_mangle]
pub extern "C" fn MPI_T_pvar_readreset(s: c_int, h: c_int, _buf: *mut c_void) -> c_int {
    MPI_T_pvar_write(s, h, std::ptr::null())
}

// ---------------------------------------------------------------- categories

/// A category: an MCA framework (its framework-level control variables and
/// its components' categories; `pml` also holds every performance
/// variable, the pml's counters) or one component of it (its control
/// variables), as Open MPI groups them.
struct Category {
    name: String,
    desc: String,
    cvars: Vec<c_int>,
    pvars: Vec<c_int>,
    subs: Vec<c_int>,
}

/// The categories, frameworks in name order, each followed by its
/// components: derived from the control variables registered now.
fn categories() -> Vec<Category> {
    let cv = cvars();
    let mut frameworks: Vec<&str> = cv.iter().map(|p| p.framework.as_str()).collect();
    frameworks.push("pml");
    frameworks.sort_unstable();
    frameworks.dedup();
    let mut out = Vec::new();
    for f in frameworks {
        let at = out.len();
        let mut comps: Vec<&str> = cv
            .iter()
            .filter(|p| p.framework == f && !p.component.is_empty())
            .map(|p| p.component.as_str())
            .collect();
        comps.sort_unstable();
        comps.dedup();
        let of = |comp: &str| -> Vec<c_int> {
            cv.iter()
                .enumerate()
                .filter(|(_, p)| p.framework == f && p.component == comp)
                .map(|(i, _)| i as c_int)
                .collect()
        };
        out.push(Category {
            name: f.to_string(),
            desc: format!("the {f} framework's parameters and components"),
            cvars: of(""),
            pvars: if f == "pml" {
                (0..PVARS.len() as c_int).collect()
            } else {
                Vec::new()
            },
            subs: (0..comps.len()).map(|k| (at + 1 + k) as c_int).collect(),
        });
        for c in comps {
            out.push(Category {
                name: format!("{f}_{c}"),
                desc: format!("the {c} component of the {f} framework"),
                cvars: of(c),
                pvars: Vec::new(),
                subs: Vec::new(),
            });
        }
    }
    out
}

fn category(i: c_int) -> Res<Category> {
    usize::try_from(i)
        .ok()
        .and_then(|i| categories().into_iter().nth(i))
        .ok_or_else(|| Error::new(C::TErrInvalidIndex, format!("no category {i}")))
}

/// Writes the first `len` of `ids` to `indices`.
fn put_indices(ids: &[c_int], len: c_int, indices: *mut c_int) -> Res<()> {
    let n = usize::try_from(len)
        .map_err(|_| Error::new(C::Arg, format!("len {len} < 0")))?
        .min(ids.len());
    if n == 0 {
        return Ok(());
    }
    if indices.is_null() {
        return Err(Error::new(C::Arg, "indices is NULL"));
    }
    // SAFETY: non-null; the caller provides room for `len` >= `n` ints.
    let out = unsafe { std::slice::from_raw_parts_mut(indices, n) };
    out.copy_from_slice(&ids[..n]);
    Ok(())
}

#[no_mangle]
pub extern "C" fn MPI_T_category_get_num(n: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(n, categories().len() as c_int, "num_cat")
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_T_category_get_info(
    index: c_int,
    name: *mut c_char,
    name_len: *mut c_int,
    desc: *mut c_char,
    desc_len: *mut c_int,
    num_cvars: *mut c_int,
    num_pvars: *mut c_int,
    num_categories: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        let c = category(index)?;
        put_name(name, name_len, &c.name)?;
        put_name(desc, desc_len, &c.desc)?;
        for (p, v) in [
            (num_cvars, c.cvars.len()),
            (num_pvars, c.pvars.len()),
            (num_categories, c.subs.len()),
        ] {
            if !p.is_null() {
                put(p, v as c_int, "category info")?;
            }
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_category_get_index(name: *const c_char, index: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        let n = cstr(name, "name")?;
        let i = categories()
            .iter()
            .position(|c| c.name == n)
            .ok_or_else(|| Error::new(C::TErrInvalidName, format!("no category {n:?}")))?;
        put(index, i as c_int, "cat_index")
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_category_get_cvars(index: c_int, len: c_int, indices: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put_indices(&category(index)?.cvars, len, indices)
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_category_get_pvars(index: c_int, len: c_int, indices: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put_indices(&category(index)?.pvars, len, indices)
    })
}

#[no_mangle]
pub extern "C" fn MPI_T_category_get_categories(
    index: c_int,
    len: c_int,
    indices: *mut c_int,
) -> c_int {
    t_guard(|| {
        need_init()?;
        put_indices(&category(index)?.subs, len, indices)
    })
}

/// The categories follow the registered parameters: their count changes
/// when a component registers more (it never shrinks).
#[no_mangle]
pub extern "C" fn MPI_T_category_changed(stamp: *mut c_int) -> c_int {
    t_guard(|| {
        need_init()?;
        put(stamp, cvars().len() as c_int, "stamp")
    })
}
