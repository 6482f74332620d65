//! MPI-4.0 sessions (chapter 11.3): `MPI_Session_init`/`finalize`, the
//! process sets `mpi://WORLD` and `mpi://SELF`, groups from them and
//! communicators from groups (`MPI_Comm_create_from_group`,
//! `MPI_Intercomm_create_from_groups`).
//!
//! Sessions share the one runtime with the world model: the first of
//! `MPI_Init` and `MPI_Session_init` starts it (the same way), and it ends
//! with the last of `MPI_Finalize` and `MPI_Session_finalize` (`env`). A
//! runtime that ended cannot start again.
//!
//! Communicators from groups are made by `MPI_Comm_create_group`'s
//! machinery (collective over the group's members only) on an internal
//! communicator over the whole world, duplicated at the runtime's start;
//! the string tag is hashed into that call's tag. The members of one call
//! must give the same string tag (MPI requires it); concurrent calls with
//! different tags on overlapping groups are told apart by the hash.

use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::sync::{Mutex, OnceLock};

use tmpi_comm::{Comm, Group};

use crate::error::{catching, Error, Handler, MpiErrorClass as C, Res};
use crate::ffi::{cstr, put, put_cstr};
use crate::state::{rt, tables, COMM_WORLD};

/// `MPI_SESSION_NULL` (mpi.h).
const SESSION_NULL: c_int = 0;
/// `MPI_MAX_STRINGTAG_LEN` (mpi.h).
const MAX_STRINGTAG_LEN: usize = 256;
/// The process sets every process knows.
const PSETS: [&str; 2] = ["mpi://WORLD", "mpi://SELF"];
const THREAD_LEVELS: [&str; 4] = [
    "MPI_THREAD_SINGLE",
    "MPI_THREAD_FUNNELED",
    "MPI_THREAD_SERIALIZED",
    "MPI_THREAD_MULTIPLE",
];

struct Session {
    errhandler: c_int,
    thread_level: c_int,
}

#[derive(Default)]
struct Sessions {
    open: HashMap<c_int, Session>,
    next: c_int,
}

static SESSIONS: Mutex<Option<Sessions>> = Mutex::new(None);
static PARENT: OnceLock<Comm> = OnceLock::new();

fn sessions() -> std::sync::MutexGuard<'static, Option<Sessions>> {
    SESSIONS.lock().unwrap_or_else(|p| p.into_inner())
}

/// Records the internal communicator over the world (at the runtime's
/// start).
pub(crate) fn set_parent(c: Comm) {
    let _ = PARENT.set(c);
}

fn parent() -> Res<&'static Comm> {
    rt()?;
    PARENT
        .get()
        .ok_or_else(|| Error::new(C::Intern, "the sessions' communicator is missing"))
}

/// Whether any session is open (then `MPI_Finalize` leaves the runtime
/// running).
pub(crate) fn any_open() -> bool {
    sessions().as_ref().is_some_and(|s| !s.open.is_empty())
}

fn errhandler_of(session: c_int) -> Option<c_int> {
    sessions()
        .as_ref()
        .and_then(|s| s.open.get(&session))
        .map(|s| s.errhandler)
}

/// What error handler `h` does (`MPI_ERRORS_ARE_FATAL` for an unknown one).
fn handler(h: c_int) -> Handler {
    match h {
        crate::error::ERRORS_RETURN => Handler::Return,
        crate::error::ERRORS_ARE_FATAL | crate::error::ERRORS_ABORT => Handler::Fatal,
        other => match tables().errhandlers.get(&other) {
            Some(f) => Handler::User(*f),
            None => Handler::Fatal,
        },
    }
}

/// Raises `e` of call `name` through error handler `eh` (invoked with
/// `session` as its object) and returns the code.
fn raise_on(name: &str, session: c_int, eh: c_int, e: Error) -> c_int {
    let code = e.code.unwrap_or(e.class as c_int);
    tracing::debug!(target: "capi", "{name}: {} ({})", e.msg, e.class.name());
    match handler(eh) {
        Handler::Return => {}
        Handler::Fatal => crate::error::fatal(name, &e),
        Handler::User(f) => crate::ffi::call_errhandler(f, session, code),
    }
    code
}

/// [`crate::error::guard`] for calls on a session: errors go to the
/// session's error handler; with no valid session the error is returned
/// (there is no handler to call, and these calls run outside the world
/// model, whose `MPI_COMM_WORLD` handler does not apply).
fn guard_session(name: &'static str, session: c_int, f: impl FnOnce() -> Res<()>) -> c_int {
    match catching(f) {
        Ok(()) => 0,
        Err(e) => {
            let eh = errhandler_of(session).unwrap_or(crate::error::ERRORS_RETURN);
            raise_on(name, session, eh, e)
        }
    }
}

/// `MPI_ERR_SESSION` unless `session` is an open session
/// (`MPI_SESSION_NULL`, a finalised or a made-up handle).
fn check_session(session: c_int) -> Res<()> {
    if errhandler_of(session).is_none() {
        return Err(Error::new(
            C::Session,
            format!("invalid session handle {session}"),
        ));
    }
    Ok(())
}

fn check_errhandler(h: c_int) -> Res<c_int> {
    match h {
        0 => Ok(crate::error::ERRORS_ARE_FATAL),
        1..=3 => Ok(h),
        _ if tables().errhandlers.contains_key(&h) => Ok(h),
        _ => Err(Error::new(C::Arg, format!("invalid errhandler handle {h}"))),
    }
}

/// The thread level asked for in info `h` (`thread_level`), default
/// `MPI_THREAD_MULTIPLE`.
fn asked_thread_level(info: c_int) -> Res<c_int> {
    if info == 0 {
        return Ok(3);
    }
    let t = tables();
    let kv = t
        .infos
        .get(&info)
        .ok_or_else(|| Error::new(C::Info, format!("invalid info handle {info}")))?;
    Ok(kv
        .iter()
        .find(|(k, _)| k == "thread_level")
        .and_then(|(_, v)| THREAD_LEVELS.iter().position(|l| l == v))
        .map(|p| p as c_int)
        .unwrap_or(3))
}

#[no_mangle]
pub extern "C" fn MPI_Session_init(info: c_int, errhandler: c_int, session: *mut c_int) -> c_int {
    let eh = if errhandler == 0 {
        crate::error::ERRORS_ARE_FATAL
    } else {
        errhandler
    };
    match catching(|| {
        crate::ffi::out_arg(session, "session")?;
        let eh = check_errhandler(errhandler)?;
        let level = asked_thread_level(info)?;
        let provided = crate::env::start_runtime(level)?;
        let mut g = sessions();
        let s = g.get_or_insert_with(|| Sessions {
            open: HashMap::new(),
            next: 1,
        });
        let h = s.next;
        s.next += 1;
        s.open.insert(
            h,
            Session {
                errhandler: eh,
                thread_level: provided,
            },
        );
        drop(g);
        put(session, h, "session")
    }) {
        Ok(()) => 0,
        Err(e) => raise_on("MPI_Session_init", SESSION_NULL, eh, e),
    }
}

#[no_mangle]
pub extern "C" fn MPI_Session_finalize(session: *mut c_int) -> c_int {
    let h = crate::ffi::get(session.cast_const(), "session").unwrap_or(SESSION_NULL);
    guard_session("MPI_Session_finalize", h, || {
        let _g = crate::env::init_lock();
        crate::ffi::get(session.cast_const(), "session")?;
        check_session(h)?;
        crate::comm_buffer::forget_session(h)?;
        let last = {
            let mut g = sessions();
            let s = g.as_mut().expect("a session is open");
            s.open.remove(&h);
            s.open.is_empty()
        };
        put(session, SESSION_NULL, "session")?;
        if last && !crate::env::world_model_active() {
            // Every process ends its last session (or MPI_Finalize):
            // synchronise so that no peer still needs this one.
            parent()?.barrier()?;
            crate::env::end_runtime()?;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_get_num_psets(
    session: c_int,
    _info: c_int,
    npset_names: *mut c_int,
) -> c_int {
    guard_session("MPI_Session_get_num_psets", session, || {
        check_session(session)?;
        put(npset_names, PSETS.len() as c_int, "npset_names")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_get_nth_pset(
    session: c_int,
    _info: c_int,
    n: c_int,
    pset_len: *mut c_int,
    pset_name: *mut c_char,
) -> c_int {
    guard_session("MPI_Session_get_nth_pset", session, || {
        check_session(session)?;
        let name = usize::try_from(n)
            .ok()
            .and_then(|i| PSETS.get(i))
            .ok_or_else(|| {
                Error::new(
                    C::Arg,
                    format!(
                        "n {n} is not in 0..{} (MPI_Session_get_num_psets)",
                        PSETS.len()
                    ),
                )
            })?;
        let len = crate::ffi::get(pset_len.cast_const(), "pset_len")?;
        // 0: the length the name needs, its terminating NUL included.
        if len == 0 {
            return put(pset_len, name.len() as c_int + 1, "pset_len");
        }
        let cap =
            usize::try_from(len).map_err(|_| Error::new(C::Arg, format!("pset_len {len} < 0")))?;
        let short: String = name.chars().take(cap - 1).collect();
        put_cstr(pset_name, cap, &short)?;
        Ok(())
    })
}

/// The world ranks of process set `name`.
fn pset_ranks(name: &str) -> Res<Vec<u32>> {
    let rt = rt()?;
    if name.eq_ignore_ascii_case(PSETS[0]) {
        Ok((0..rt.world_size).collect())
    } else if name.eq_ignore_ascii_case(PSETS[1]) {
        Ok(vec![rt.world_rank])
    } else {
        Err(Error::new(
            C::Arg,
            format!("unknown process set {name:?} (tmpi has mpi://WORLD and mpi://SELF)"),
        ))
    }
}

#[no_mangle]
pub extern "C" fn MPI_Session_get_pset_info(
    session: c_int,
    pset_name: *const c_char,
    info: *mut c_int,
) -> c_int {
    guard_session("MPI_Session_get_pset_info", session, || {
        check_session(session)?;
        let name = cstr(pset_name, "pset_name")?;
        let n = pset_ranks(&name)?.len();
        let h = tables().add_info(vec![("mpi_size".to_string(), n.to_string())]);
        put(info, h, "info")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_get_info(session: c_int, info_used: *mut c_int) -> c_int {
    guard_session("MPI_Session_get_info", session, || {
        check_session(session)?;
        let level = sessions()
            .as_ref()
            .and_then(|s| s.open.get(&session))
            .map(|s| s.thread_level)
            .unwrap_or(0);
        let h = tables().add_info(vec![(
            "thread_level".to_string(),
            THREAD_LEVELS[level.clamp(0, 3) as usize].to_string(),
        )]);
        put(info_used, h, "info_used")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_create_errhandler(
    function: Option<crate::ErrFn>,
    errhandler: *mut c_int,
) -> c_int {
    guard_session("MPI_Session_create_errhandler", SESSION_NULL, || {
        let f = function.ok_or_else(|| Error::new(C::Arg, "function is NULL"))?;
        let h = tables().add_errhandler(f);
        put(errhandler, h, "errhandler")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_set_errhandler(session: c_int, errhandler: c_int) -> c_int {
    guard_session("MPI_Session_set_errhandler", session, || {
        check_session(session)?;
        let eh = check_errhandler(errhandler)?;
        if let Some(s) = sessions().as_mut().and_then(|s| s.open.get_mut(&session)) {
            s.errhandler = eh;
        }
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_get_errhandler(session: c_int, errhandler: *mut c_int) -> c_int {
    guard_session("MPI_Session_get_errhandler", session, || {
        check_session(session)?;
        let eh = errhandler_of(session).unwrap_or(crate::error::ERRORS_ARE_FATAL);
        put(errhandler, eh, "errhandler")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_call_errhandler(session: c_int, errorcode: c_int) -> c_int {
    let Some(eh) = errhandler_of(session) else {
        return C::Session as c_int;
    };
    let class = crate::error::class_of(errorcode)
        .and_then(C::from_raw)
        .unwrap_or(C::Other);
    let e = Error {
        class,
        code: Some(errorcode),
        msg: format!("MPI_Session_call_errhandler with error code {errorcode}"),
    };
    raise_on("MPI_Session_call_errhandler", session, eh, e);
    // MPI: the call itself succeeds once the handler returned.
    0
}

#[no_mangle]
pub extern "C" fn MPI_Session_c2f(session: c_int) -> c_int {
    session
}

#[no_mangle]
pub extern "C" fn MPI_Session_f2c(session: c_int) -> c_int {
    session
}

#[no_mangle]
pub extern "C" fn MPI_Group_from_session_pset(
    session: c_int,
    pset_name: *const c_char,
    newgroup: *mut c_int,
) -> c_int {
    guard_session("MPI_Group_from_session_pset", session, || {
        check_session(session)?;
        let name = cstr(pset_name, "pset_name")?;
        let g = Group::from_world_ranks(pset_ranks(&name)?)?;
        let h = tables().add_group(g);
        put(newgroup, h, "newgroup")
    })
}

/// The tag of a string tag in `MPI_Comm_create_group`'s tag space (FNV-1a;
/// `salt` keeps the steps of one call apart).
fn tag_of(stringtag: &str, salt: u8) -> c_int {
    let mut h: u32 = 0x811c_9dc5;
    for b in std::iter::once(salt).chain(stringtag.bytes()) {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    (h & 0x7fff_ffff) as c_int
}

fn stringtag(p: *const c_char) -> Res<String> {
    let s = cstr(p, "stringtag")?;
    if s.len() >= MAX_STRINGTAG_LEN {
        return Err(Error::new(
            C::Arg,
            format!(
                "stringtag is {} bytes, MPI_MAX_STRINGTAG_LEN is {MAX_STRINGTAG_LEN}",
                s.len()
            ),
        ));
    }
    Ok(s)
}

/// The communicator over `g` (this process a member), collective over its
/// members.
fn comm_over(g: &Group, tag: c_int, what: &str) -> Res<Comm> {
    if g.rank_of(rt()?.world_rank).is_none() {
        return Err(Error::new(
            C::Group,
            format!("{what}: the calling process is not in the group"),
        ));
    }
    Ok(parent()?.create_group(g, tag)?)
}

#[no_mangle]
pub extern "C" fn MPI_Comm_create_from_group(
    group: c_int,
    stringtag_: *const c_char,
    _info: c_int,
    errhandler: c_int,
    newcomm: *mut c_int,
) -> c_int {
    crate::error::guard("MPI_Comm_create_from_group", COMM_WORLD, || {
        crate::ffi::out_arg(newcomm, "newcomm")?;
        let g = tables().group(group)?;
        let tag = tag_of(&stringtag(stringtag_)?, 0);
        let eh = check_errhandler(errhandler)?;
        let c = comm_over(&g, tag, "MPI_Comm_create_from_group")?;
        let h = tables().add_comm(c, eh);
        put(newcomm, h, "newcomm")
    })
}

#[no_mangle]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn MPI_Intercomm_create_from_groups(
    local_group: c_int,
    local_leader: c_int,
    remote_group: c_int,
    remote_leader: c_int,
    stringtag_: *const c_char,
    _info: c_int,
    errhandler: c_int,
    newintercomm: *mut c_int,
) -> c_int {
    crate::error::guard("MPI_Intercomm_create_from_groups", COMM_WORLD, || {
        crate::ffi::out_arg(newintercomm, "newintercomm")?;
        let (lg, rg) = {
            let t = tables();
            (t.group(local_group)?, t.group(remote_group)?)
        };
        for (leader, g, which) in [
            (local_leader, &lg, "local_leader"),
            (remote_leader, &rg, "remote_leader"),
        ] {
            if u32::try_from(leader).map_or(true, |l| l >= g.size()) {
                return Err(Error::new(
                    C::Rank,
                    format!("{which} {leader} is not a rank of its group"),
                ));
            }
        }
        if lg.size() == 0 || rg.size() == 0 || lg.intersection(&rg).size() != 0 {
            return Err(Error::new(
                C::Group,
                "MPI_Intercomm_create_from_groups: the groups overlap or one is empty",
            ));
        }
        let s = stringtag(stringtag_)?;
        let eh = check_errhandler(errhandler)?;
        // Every process knows both groups: no leaders' exchange. The local
        // group's communicator, then the union's (the same order on both
        // sides), as MPI_Intercomm_create builds them.
        let local = comm_over(&lg, tag_of(&s, 1), "MPI_Intercomm_create_from_groups")?;
        let mine = lg.world_ranks().to_vec();
        let remote = rg.world_ranks().to_vec();
        let (a, b) = if crate::intercomm::goes_first(&mine, &remote) {
            (&mine, &remote)
        } else {
            (&remote, &mine)
        };
        let union = Group::from_world_ranks(a.iter().chain(b.iter()).copied().collect())?;
        let u = comm_over(&union, tag_of(&s, 2), "MPI_Intercomm_create_from_groups")?;
        let h = crate::intercomm::build(COMM_WORLD, local, u, remote, false)?;
        tables().comm_mut(h)?.errhandler = eh;
        put(newintercomm, h, "newintercomm")
    })
}

// ---------------------------------------------------------------- buffered-mode buffers (MPI-4.1)

#[no_mangle]
pub extern "C" fn MPI_Session_attach_buffer(
    session: c_int,
    buffer: *mut c_void,
    size: c_int,
) -> c_int {
    guard_session("MPI_Session_attach_buffer", session, || {
        check_session(session)?;
        crate::comm_buffer::session_attach(session, buffer, size)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_detach_buffer(
    session: c_int,
    buffer_addr: *mut c_void,
    size: *mut c_int,
) -> c_int {
    guard_session("MPI_Session_detach_buffer", session, || {
        check_session(session)?;
        crate::comm_buffer::session_detach(session, buffer_addr, size)
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_flush_buffer(session: c_int) -> c_int {
    guard_session("MPI_Session_flush_buffer", session, || {
        check_session(session)?;
        crate::comm_buffer::flush()
    })
}

#[no_mangle]
pub extern "C" fn MPI_Session_iflush_buffer(session: c_int, request: *mut c_int) -> c_int {
    guard_session("MPI_Session_iflush_buffer", session, || {
        check_session(session)?;
        crate::comm_buffer::flush()?;
        crate::comm_buffer::completed_request(request)
    })
}

/// `MPI_Session_attach_buffer` with an `MPI_Count` size.
#[no_mangle]
pub extern "C" fn MPI_Session_attach_buffer_c(
    session: c_int,
    buffer: *mut c_void,
    size: i64,
) -> c_int {
    match c_int::try_from(size) {
        Ok(s) => MPI_Session_attach_buffer(session, buffer, s),
        Err(_) => guard_session("MPI_Session_attach_buffer_c", session, || {
            Err(Error::new(
                C::Count,
                format!("size {size} is beyond INT_MAX: tmpi's MPI_Session_attach_buffer_c takes int-sized sizes only"),
            ))
        }),
    }
}

/// `MPI_Session_detach_buffer` with an `MPI_Count` size.
#[no_mangle]
pub extern "C" fn MPI_Session_detach_buffer_c(
    session: c_int,
    buffer_addr: *mut c_void,
    size: *mut i64,
) -> c_int {
    let mut s: c_int = 0;
    let rc = MPI_Session_detach_buffer(session, buffer_addr, &mut s);
    if rc != 0 {
        return rc;
    }
    guard_session("MPI_Session_detach_buffer_c", session, || {
        put(size, i64::from(s), "size")
    })
}
