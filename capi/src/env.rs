//! Environment: init, finalize, abort, queries, time, memory.

use std::ffi::{c_char, c_double, c_int, c_void};
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

use tmpi_base::mca::{self, Registry};

use crate::error::{guard, guard_value, Error, MpiErrorClass as C, Res, ERRORS_ARE_FATAL};
use crate::ffi::{put, put_cstr};
use crate::state::{
    self, Rt, COMM_SELF, COMM_WORLD, PHASE, PHASE_FINALIZED, PHASE_INIT, PHASE_NONE,
};

static PARAM_CHECK: AtomicBool = AtomicBool::new(true);
static PACK_PER_FRAGMENT: AtomicBool = AtomicBool::new(true);

/// Whether non-contiguous point-to-point buffers are packed per fragment
/// through a convertor (`mpi_pack_per_fragment`, default 1) rather than
/// staged whole in a temporary.
pub(crate) fn pack_per_fragment() -> bool {
    PACK_PER_FRAGMENT.load(Ordering::Relaxed)
}
static INIT_LOCK: Mutex<()> = Mutex::new(());

/// Whether argument checks are on (`mpi_param_check`, default 1).
pub(crate) fn param_check() -> bool {
    PARAM_CHECK.load(Ordering::Relaxed)
}

fn epoch() -> &'static Instant {
    static E: OnceLock<Instant> = OnceLock::new();
    E.get_or_init(Instant::now)
}

/// Registers the C API's own parameters (`mpi_*`, specified in
/// `tmpi_base::mca` so that `tmpi_info` lists them too) and reads them.
fn register_params(reg: &Registry) -> Res<()> {
    let arg = |e: mca::McaError| Error::new(C::Arg, e.to_string());
    PARAM_CHECK.store(mca::mpi_param_check(reg).map_err(arg)?, Ordering::Relaxed);
    PACK_PER_FRAGMENT.store(
        mca::mpi_pack_per_fragment(reg).map_err(arg)?,
        Ordering::Relaxed,
    );
    Ok(())
}

/// The world model's state (`MPI_Init` .. `MPI_Finalize`), apart from the
/// runtime's (`PHASE`): sessions (MPI-4.0) may start the runtime before
/// `MPI_Init`, or keep it running after `MPI_Finalize`.
static WORLD_MODEL: AtomicU8 = AtomicU8::new(PHASE_NONE);

/// Whether the world model is initialised and not finalised.
pub(crate) fn world_model_active() -> bool {
    WORLD_MODEL.load(Ordering::Acquire) == PHASE_INIT
}

/// `MPI_Init`: the world model, starting the runtime unless a session
/// did already.
fn init(required: c_int) -> Res<c_int> {
    let _g = INIT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    match WORLD_MODEL.load(Ordering::Acquire) {
        PHASE_NONE => {}
        PHASE_INIT => return Err(Error::new(C::Other, "MPI_Init called twice")),
        _ => return Err(Error::new(C::Other, "MPI_Init after MPI_Finalize")),
    }
    let provided = start_runtime_locked(required)?;
    WORLD_MODEL.store(PHASE_INIT, Ordering::Release);
    Ok(provided)
}

/// Starts the runtime for a session (`MPI_Session_init`) unless it runs
/// already; returns its thread level.
pub(crate) fn start_runtime(required: c_int) -> Res<c_int> {
    let _g = INIT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
    start_runtime_locked(required)
}

/// The runtime's start, the same for `MPI_Init` and a first
/// `MPI_Session_init` (the caller holds `INIT_LOCK`). Once it ended (the
/// world model and every session finalised) it cannot start again.
fn start_runtime_locked(required: c_int) -> Res<c_int> {
    match PHASE.load(Ordering::Acquire) {
        PHASE_NONE => {}
        PHASE_INIT => return Ok(state::rt()?.thread_level),
        _ => {
            return Err(Error::new(
                C::Other,
                "MPI cannot be initialized again after it was finalized",
            ))
        }
    }
    epoch();
    // The runtime the Rust facade starts too (`tmpi::runtime`). Our
    // parameters are registered before the pml initialises, as coll's are:
    // it reports the names no component registered (`--mca
    // mpi_param_check 0` must not be "unknown").
    let pml = tmpi::runtime::start(register_params)?;
    // Nodes come from the pml (the launcher's process mapping):
    // split_type(SHARED) and coll's sm component follow them.
    let u = tmpi::runtime::open_coll(&pml)?;
    let mut tables = state::take_early();
    tables.comms.insert(
        COMM_WORLD,
        state::CommEnt {
            comm: u.world.clone(),
            errhandler: ERRORS_ARE_FATAL,
            topo: None,
            inter: None,
            attrs: Default::default(),
            attr_order: Vec::new(),
        },
    );
    tables.comms.insert(
        COMM_SELF,
        state::CommEnt {
            comm: u.self_comm.clone(),
            errhandler: ERRORS_ARE_FATAL,
            topo: None,
            inter: None,
            attrs: Default::default(),
            attr_order: Vec::new(),
        },
    );
    let provided = required.clamp(0, 3);
    tables.infos.insert(
        state::INFO_ENV,
        env_info(cmdline(), pml.size(), Some(provided)),
    );
    let fast = state::FastHandles::new(&tables);
    // MPI_THREAD_MULTIPLE = 3: below it calls are serialized by the user.
    pml.set_serial_calls(provided < 3);
    let rt = Rt {
        world_rank: pml.rank(),
        world_size: pml.size(),
        pml,
        coll: Arc::clone(&u.ctx),
        thread_level: provided,
        main_thread: std::thread::current().id(),
        tables: Mutex::new(tables),
        fast,
    };
    state::set_rt(rt)?;
    // Sessions' communicators derive from a communicator of their own over
    // the world (its tags apart from the user's MPI_Comm_create_group).
    crate::session::set_parent(u.world.dup()?);
    PHASE.store(PHASE_INIT, Ordering::Release);
    tracing::debug!(target: "capi", "MPI initialised");
    Ok(provided)
}

#[no_mangle]
pub extern "C" fn MPI_Init(_argc: *mut c_int, _argv: *mut *mut *mut c_char) -> c_int {
    guard("MPI_Init", COMM_WORLD, || init(0).map(drop))
}

/// This process's command line (`/proc/self/cmdline`).
fn cmdline() -> Vec<String> {
    std::fs::read("/proc/self/cmdline")
        .unwrap_or_default()
        .split(|&b| b == 0)
        .filter(|a| !a.is_empty())
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect()
}

/// `MPI_INFO_ENV`'s keys (MPI-4.0 11.2.3) as this process knows them: the
/// command and its arguments (`args`), the job's size, the working
/// directory and the thread level provided (`None`: not known, left out).
fn env_info(args: Vec<String>, world_size: u32, provided: Option<c_int>) -> Vec<(String, String)> {
    let mut args = args.into_iter();
    let mut kv = Vec::new();
    if let Some(cmd) = args.next() {
        kv.push(("command".to_string(), cmd));
    }
    let rest: Vec<String> = args.collect();
    if !rest.is_empty() {
        kv.push(("argv".to_string(), rest.join(" ")));
    }
    kv.push(("maxprocs".to_string(), world_size.to_string()));
    if let Ok(d) = std::env::current_dir() {
        kv.push(("wdir".to_string(), d.display().to_string()));
    }
    let level = [
        "MPI_THREAD_SINGLE",
        "MPI_THREAD_FUNNELED",
        "MPI_THREAD_SERIALIZED",
        "MPI_THREAD_MULTIPLE",
    ];
    if let Some(p) = provided {
        kv.push((
            "thread_level".to_string(),
            level[p.clamp(0, 3) as usize].to_string(),
        ));
    }
    kv
}

/// MPI-4.0: a new info object with `MPI_INFO_ENV`'s keys, callable before
/// `MPI_Init` and after `MPI_Finalize` too, and the same at every point:
/// the command and arguments from `argc`/`argv` (from the process's
/// command line when `argv` is NULL or `argc` is 0), the job's size as the
/// launcher gave it (`PMI_SIZE`, Slurm's `SLURM_NTASKS`, else 1: a
/// singleton), the working directory; no thread level (not known before
/// init).
#[no_mangle]
pub extern "C" fn MPI_Info_create_env(
    argc: c_int,
    argv: *mut *mut c_char,
    info: *mut c_int,
) -> c_int {
    guard("MPI_Info_create_env", crate::state::COMM_WORLD, || {
        crate::ffi::out_arg(info, "info")?;
        let args = match crate::ffi::c_strings(argc, argv)? {
            Some(a) => a,
            None => cmdline(),
        };
        let size = ["PMI_SIZE", "SLURM_NTASKS"]
            .iter()
            .find_map(|v| std::env::var(v).ok()?.parse::<u32>().ok())
            .unwrap_or(1);
        let h = crate::state::tables().add_info(env_info(args, size, None));
        put(info, h, "info")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Init_thread(
    _argc: *mut c_int,
    _argv: *mut *mut *mut c_char,
    required: c_int,
    provided: *mut c_int,
) -> c_int {
    guard("MPI_Init_thread", COMM_WORLD, || {
        if !(0..=3).contains(&required) {
            return Err(Error::new(
                C::Arg,
                format!("required thread level {required} is not one of MPI_THREAD_*"),
            ));
        }
        let p = init(required)?;
        put(provided, p, "provided")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Finalize() -> c_int {
    guard("MPI_Finalize", COMM_WORLD, || {
        let _g = INIT_LOCK.lock().unwrap_or_else(|p| p.into_inner());
        state::rt()?;
        if !world_model_active() {
            return Err(Error::new(
                C::Other,
                "MPI_Finalize without MPI_Init (sessions end with MPI_Session_finalize)",
            ));
        }
        // MPI-2.2: first delete MPI_COMM_SELF's attributes, as if the
        // communicator were freed, in the reverse order of setting (what
        // libraries hook their cleanup to; MPI_Finalized is still false).
        delete_self_attrs();
        WORLD_MODEL.store(PHASE_FINALIZED, Ordering::Release);
        if crate::session::any_open() {
            // Sessions still use the runtime (and may use communicators
            // made before): the last MPI_Session_finalize ends it.
            return Ok(());
        }
        // Synchronise so that no peer still needs us, drop user objects.
        {
            let world = state::tables().comm(COMM_WORLD)?.comm.clone();
            world.barrier()?;
        }
        let leftovers = {
            let mut t = state::tables();
            let user: Vec<c_int> = t.comms.keys().copied().filter(|&h| h > COMM_SELF).collect();
            let mut v = Vec::new();
            for h in user {
                if let Some(c) = t.comms.remove(&h) {
                    v.push(c.comm);
                }
            }
            v
        };
        drop(leftovers);
        end_runtime()
    })
}

/// Ends the runtime: after `MPI_Finalize`, or the last
/// `MPI_Session_finalize` once the world model is not active (the caller
/// synchronised with the peers).
pub(crate) fn end_runtime() -> Res<()> {
    let rt = state::rt()?;
    PHASE.store(PHASE_FINALIZED, Ordering::Release);
    rt.pml.finalize()?;
    Ok(())
}

/// Serialises the end of a session with `MPI_Init`/`MPI_Finalize`.
pub(crate) fn init_lock() -> std::sync::MutexGuard<'static, ()> {
    INIT_LOCK.lock().unwrap_or_else(|p| p.into_inner())
}

/// Runs the delete callbacks of MPI_COMM_SELF's attributes, last set
/// first, and removes them (a failing callback is logged; finalizing goes on).
fn delete_self_attrs() {
    loop {
        let next = {
            let mut t = state::tables();
            let Ok(e) = t.comm_mut(COMM_SELF) else {
                return;
            };
            let Some(k) = e.attr_order.pop() else {
                return;
            };
            let v = e.attrs.remove(&k);
            (k, v, t.keyvals.get(&k).copied())
        };
        if let (k, Some(v), Some(kv)) = next {
            if let Some(f) = kv.delete {
                let rc = crate::ffi::call_delete_attr(f, COMM_SELF, k, v, kv.extra);
                if rc != 0 {
                    tracing::warn!(target: "mpi", "MPI_Finalize: delete callback of keyval {k} on MPI_COMM_SELF failed with {rc}");
                }
            }
        }
    }
}

#[no_mangle]
pub extern "C" fn MPI_Initialized(flag: *mut c_int) -> c_int {
    guard("MPI_Initialized", COMM_WORLD, || {
        put(
            flag,
            c_int::from(WORLD_MODEL.load(Ordering::Acquire) != PHASE_NONE),
            "flag",
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Finalized(flag: *mut c_int) -> c_int {
    guard("MPI_Finalized", COMM_WORLD, || {
        put(
            flag,
            c_int::from(WORLD_MODEL.load(Ordering::Acquire) == PHASE_FINALIZED),
            "flag",
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Query_thread(provided: *mut c_int) -> c_int {
    guard("MPI_Query_thread", COMM_WORLD, || {
        put(provided, state::rt()?.thread_level, "provided")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Is_thread_main(flag: *mut c_int) -> c_int {
    guard("MPI_Is_thread_main", COMM_WORLD, || {
        let rt = state::rt()?;
        put(
            flag,
            c_int::from(std::thread::current().id() == rt.main_thread),
            "flag",
        )
    })
}

/// Ends the whole job: the launcher's PMI `abort` (it kills every rank and
/// exits non-zero), then exit.
pub(crate) fn abort_job(code: c_int, msg: &str) -> ! {
    eprintln!("tmpi: rank {}: {msg}", state::world_rank());
    let code = if code == 0 { 1 } else { code };
    // Under a PMIx runtime (Open MPI's mpirun, srun --mpi=pmix) the PMIx
    // library's abort ends the job with this code.
    if tmpi_base::pmi::pmix_abort(code, msg) {
        std::process::exit(code)
    }
    // The PMI client lives inside the pml; PMI-1 (tmpirun, Hydra) takes a
    // single abort line on the same descriptor.
    let v2 = std::env::var("PMI_JOBID").is_ok_and(|j| !j.is_empty())
        || std::env::var("TMPI_PMI_VERSION").is_ok_and(|v| v.trim() == "2");
    // The connection's descriptor as the client holds it (adopting
    // `PMI_FD` moved it to another number).
    if let (Some(fd), false) = (tmpi_base::pmi::abort_fd(), v2) {
        // `message` for any server (a PMI-1 value holds no space), the
        // exact text encoded for tmpirun (`tmpi_base::pmi::ABORT_TEXT_KEY`);
        // within Slurm's 1024-byte line.
        let clean: String = msg
            .chars()
            .map(|c| {
                if c.is_control() || c == ' ' || c == ';' || c == '=' {
                    '_'
                } else {
                    c
                }
            })
            .take(300)
            .collect();
        let line = format!(
            "cmd=abort exitcode={code} message={clean} {}={}\n",
            tmpi_base::pmi::ABORT_TEXT_KEY,
            tmpi_base::pmi::encode_abort_text(msg, 600)
        );
        crate::ffi::pmi_abort_line(fd, line.as_bytes());
    }
    std::process::exit(code)
}

#[no_mangle]
pub extern "C" fn MPI_Abort(comm: c_int, errorcode: c_int) -> c_int {
    guard("MPI_Abort", comm, || {
        abort_job(
            errorcode,
            &format!("MPI_Abort called with error code {errorcode}"),
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Get_version(version: *mut c_int, subversion: *mut c_int) -> c_int {
    guard("MPI_Get_version", COMM_WORLD, || {
        put(version, 3, "version")?;
        put(subversion, 1, "subversion")
    })
}

/// The library version string.
pub(crate) fn library_version() -> String {
    format!(
        "tmpi {} (MPI 3.1 C interface; pml ob1-style with NIC tag matching offload)",
        env!("CARGO_PKG_VERSION")
    )
}

#[no_mangle]
pub extern "C" fn MPI_Get_library_version(version: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard("MPI_Get_library_version", COMM_WORLD, || {
        let n = put_cstr(version, 8192, &library_version())?;
        put(resultlen, n, "resultlen")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Get_processor_name(name: *mut c_char, resultlen: *mut c_int) -> c_int {
    guard("MPI_Get_processor_name", COMM_WORLD, || {
        let host = tmpi_base::pmi::hostname();
        let n = put_cstr(name, 256, &host)?;
        put(resultlen, n, "resultlen")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Wtime() -> c_double {
    guard_value(0.0, || epoch().elapsed().as_secs_f64())
}

#[no_mangle]
pub extern "C" fn MPI_Wtick() -> c_double {
    1e-9
}

#[no_mangle]
pub extern "C" fn MPI_Alloc_mem(size: isize, _info: c_int, baseptr: *mut c_void) -> c_int {
    guard("MPI_Alloc_mem", COMM_WORLD, || {
        let n = usize::try_from(size)
            .map_err(|_| Error::new(C::Arg, format!("size {size} is negative")))?;
        let p = crate::ffi::alloc(n);
        if p.is_null() {
            return Err(Error::new(C::NoMem, format!("cannot allocate {n} bytes")));
        }
        put(baseptr.cast::<*mut c_void>(), p, "baseptr")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Free_mem(base: *mut c_void) -> c_int {
    guard("MPI_Free_mem", COMM_WORLD, || {
        crate::ffi::free(base);
        Ok(())
    })
}

#[no_mangle]
pub extern "C" fn MPI_Pcontrol(_level: c_int) -> c_int {
    0
}
