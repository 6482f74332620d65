//! The process-wide state behind the integer handles.
//!
//! Handles are small integers (mpi.h); each kind has its own table.
//! Predefined handles are fixed numbers, user handles are allocated above
//! them and never reused while live.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap;
use std::ffi::c_int;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};

use tmpi_coll::Op;
use tmpi_comm::{Comm, CommContext, Group};
use tmpi_pml::Pml;

use crate::datatype::{self, Dtype};
use crate::error::{Error, Handler, MpiErrorClass as C, Res, ERRORS_ARE_FATAL, ERRORS_RETURN};
use crate::request::Req;

pub(crate) const COMM_WORLD: c_int = 1;
/// `MPI_INFO_ENV` (mpi.h): predefined at init, read-only.
pub(crate) const INFO_ENV: c_int = 1;
pub(crate) const COMM_SELF: c_int = 2;

/// Phases of the library.
pub(crate) const PHASE_NONE: u8 = 0;
pub(crate) const PHASE_INIT: u8 = 1;
pub(crate) const PHASE_FINALIZED: u8 = 2;
pub(crate) static PHASE: AtomicU8 = AtomicU8::new(PHASE_NONE);
/// Non-blocking collectives started and not yet completed: waiting loops
/// drive coll's progress only while there are some.
pub(crate) static COLL_ACTIVE: std::sync::atomic::AtomicUsize =
    std::sync::atomic::AtomicUsize::new(0);
/// Number of requests freed while running (see `Tables::orphans`).
pub(crate) static ORPHANS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// A Cartesian topology attached to a communicator.
#[derive(Debug, Clone)]
pub(crate) struct Cart {
    pub dims: Vec<c_int>,
    pub periods: Vec<bool>,
}

/// A communicator's virtual topology (`MPI_Topo_test`).
#[derive(Debug, Clone)]
pub(crate) enum Topo {
    Cart(Cart),
    /// `MPI_Graph_create`: `index` and `edges` as given (every rank holds
    /// the whole graph).
    Graph {
        index: Vec<c_int>,
        edges: Vec<c_int>,
    },
    /// `MPI_Dist_graph_create(_adjacent)`: this rank's edges in the order
    /// the neighbourhood collectives use, weights `None` when unweighted.
    DistGraph {
        sources: Vec<c_int>,
        source_weights: Option<Vec<c_int>>,
        destinations: Vec<c_int>,
        dest_weights: Option<Vec<c_int>>,
    },
}

/// A communicator handle's record.
pub(crate) struct CommEnt {
    pub comm: Comm,
    pub errhandler: c_int,
    pub topo: Option<Arc<Topo>>,
    /// An inter-communicator's remote side (`comm` is then its local
    /// group's own intra-communicator).
    pub inter: Option<Arc<crate::intercomm::Inter>>,
    pub attrs: BTreeMap<c_int, usize>,
    /// The keyvals of `attrs` in the order they were set.
    pub attr_order: Vec<c_int>,
}

impl CommEnt {
    /// Size and context id of this communicator's point-to-point traffic:
    /// the remote group and the inter-communicator's own context for an
    /// inter-communicator, else the communicator's.
    pub(crate) fn p2p_target(&self) -> (c_int, u32) {
        match &self.inter {
            Some(i) => (i.remote.size() as c_int, i.ctx.context_id()),
            None => (self.comm.size() as c_int, self.comm.context_id()),
        }
    }
}

/// A user keyval.
#[derive(Clone, Copy)]
pub(crate) struct Keyval {
    pub copy: Option<crate::CopyAttrFn>,
    pub delete: Option<crate::DeleteAttrFn>,
    pub extra: usize,
}

/// Every handle table.
pub(crate) struct Tables {
    pub comms: FxHashMap<c_int, CommEnt>,
    pub next_comm: c_int,
    pub groups: FxHashMap<c_int, Group>,
    pub next_group: c_int,
    pub types: FxHashMap<c_int, Arc<Dtype>>,
    pub next_type: c_int,
    pub reqs: crate::req_table::ReqTable,
    /// User ops: the function and whether it commutes (bound to each
    /// call's datatype by `user_op::bind`).
    pub ops: FxHashMap<c_int, (crate::UserOpFn, bool)>,
    pub next_op: c_int,
    pub errhandlers: FxHashMap<c_int, crate::ErrFn>,
    pub next_errhandler: c_int,
    pub infos: FxHashMap<c_int, Vec<(String, String)>>,
    pub next_info: c_int,
    pub keyvals: FxHashMap<c_int, Keyval>,
    /// Attributes of datatypes: per handle, (keyval, value) in the order set.
    pub type_attrs: FxHashMap<c_int, Vec<(c_int, usize)>>,
    /// Generalized requests by handle: whether `MPI_Grequest_complete` ran
    /// (found here while a waiting thread has the request taken out).
    pub greqs: FxHashMap<c_int, std::sync::Arc<std::sync::atomic::AtomicBool>>,
    pub next_keyval: c_int,
    pub messages: FxHashMap<c_int, tmpi_pml::MessageId>,
    pub next_message: c_int,
    /// User error classes/codes: code -> (class, string).
    pub user_codes: BTreeMap<c_int, (c_int, String)>,
    pub next_code: c_int,
    /// Requests freed by the user while still running (staged data).
    pub orphans: Vec<c_int>,
}

fn alloc_handle<T>(map: &FxHashMap<c_int, T>, next: &mut c_int, first: c_int) -> c_int {
    loop {
        let h = *next;
        *next = if *next == c_int::MAX {
            first
        } else {
            *next + 1
        };
        if !map.contains_key(&h) {
            return h;
        }
    }
}

impl Tables {
    pub(crate) fn new() -> Self {
        let mut types = FxHashMap::default();
        for (i, t) in datatype::predefined().into_iter().enumerate() {
            types.insert(i as c_int + 1, t);
        }
        let mut groups = FxHashMap::default();
        groups.insert(1, Group::empty());
        Tables {
            comms: FxHashMap::default(),
            next_comm: 3,
            groups,
            next_group: 2,
            types,
            next_type: 1000,
            reqs: Default::default(),
            ops: FxHashMap::default(),
            next_op: 100,
            errhandlers: FxHashMap::default(),
            next_errhandler: 4,
            infos: FxHashMap::default(),
            next_info: 2,
            keyvals: FxHashMap::default(),
            type_attrs: FxHashMap::default(),
            greqs: FxHashMap::default(),
            next_keyval: 100,
            messages: FxHashMap::default(),
            next_message: 2,
            user_codes: BTreeMap::new(),
            next_code: 100,
            orphans: Vec::new(),
        }
    }

    pub(crate) fn orphans_push(&mut self, h: c_int) {
        self.orphans.push(h);
        ORPHANS.fetch_add(1, Ordering::Relaxed);
    }
    pub(crate) fn comm(&self, h: c_int) -> Res<&CommEnt> {
        self.comms
            .get(&h)
            .ok_or_else(|| Error::new(C::Comm, format!("invalid communicator handle {h}")))
    }
    pub(crate) fn comm_mut(&mut self, h: c_int) -> Res<&mut CommEnt> {
        self.comms
            .get_mut(&h)
            .ok_or_else(|| Error::new(C::Comm, format!("invalid communicator handle {h}")))
    }
    pub(crate) fn add_comm(&mut self, comm: Comm, errhandler: c_int) -> c_int {
        let h = alloc_handle(&self.comms, &mut self.next_comm, 3);
        self.comms.insert(
            h,
            CommEnt {
                comm,
                errhandler,
                topo: None,
                inter: None,
                attrs: BTreeMap::new(),
                attr_order: Vec::new(),
            },
        );
        h
    }
    pub(crate) fn dtype(&self, h: c_int) -> Res<Arc<Dtype>> {
        self.types
            .get(&h)
            .cloned()
            .ok_or_else(|| Error::new(C::Type, format!("invalid datatype handle {h}")))
    }
    /// A datatype usable for communication (committed).
    pub(crate) fn comm_type(&self, h: c_int) -> Res<Arc<Dtype>> {
        let t = self.dtype(h)?;
        if !t.committed {
            return Err(Error::new(
                C::Type,
                format!("datatype {h} is not committed (MPI_Type_commit)"),
            ));
        }
        Ok(t)
    }
    /// A handle of the datatype `h` that stays valid after the user frees
    /// `h` (MPI_Type_free while a persistent request uses the type, which
    /// MPI allows): a hidden second handle of a derived type, `h` itself
    /// for a predefined one or an invalid one (the start reports it).
    pub(crate) fn hold_type(&mut self, h: c_int) -> c_int {
        match self.types.get(&h) {
            Some(t) if !t.predefined => {
                let t = Arc::clone(t);
                let held = alloc_handle(&self.types, &mut self.next_type, 1000);
                self.types.insert(held, t);
                held
            }
            _ => h,
        }
    }
    /// Ends what [`Tables::hold_type`] held.
    pub(crate) fn release_type(&mut self, held: c_int) {
        if self.types.get(&held).is_some_and(|t| !t.predefined) {
            self.types.remove(&held);
        }
    }
    pub(crate) fn add_type(&mut self, mut t: Dtype) -> c_int {
        t.inner = t.types.iter().map(|h| self.types.get(h).cloned()).collect();
        let h = alloc_handle(&self.types, &mut self.next_type, 1000);
        self.types.insert(h, Arc::new(t));
        h
    }
    /// A new handle to datatype `t` (the same handle for a predefined one),
    /// to be freed by its receiver as any other.
    pub(crate) fn new_handle(&mut self, t: &Arc<Dtype>, h: c_int) -> c_int {
        if t.predefined {
            return h;
        }
        let new = alloc_handle(&self.types, &mut self.next_type, 1000);
        self.types.insert(new, Arc::clone(t));
        new
    }
    pub(crate) fn group(&self, h: c_int) -> Res<Group> {
        self.groups
            .get(&h)
            .cloned()
            .ok_or_else(|| Error::new(C::Group, format!("invalid group handle {h}")))
    }
    pub(crate) fn add_group(&mut self, g: Group) -> c_int {
        let h = alloc_handle(&self.groups, &mut self.next_group, 2);
        self.groups.insert(h, g);
        h
    }
    pub(crate) fn add_req(&mut self, r: Req) -> c_int {
        self.reqs.add(r)
    }
    /// A user op's function and whether it commutes.
    pub(crate) fn user_op(&self, h: c_int) -> Res<(crate::UserOpFn, bool)> {
        self.ops
            .get(&h)
            .copied()
            .ok_or_else(|| Error::new(C::Op, format!("invalid op handle {h}")))
    }
    pub(crate) fn add_op(&mut self, op: (crate::UserOpFn, bool)) -> c_int {
        let h = alloc_handle(&self.ops, &mut self.next_op, 100);
        self.ops.insert(h, op);
        h
    }
    pub(crate) fn add_errhandler(&mut self, f: crate::ErrFn) -> c_int {
        let h = alloc_handle(&self.errhandlers, &mut self.next_errhandler, 4);
        self.errhandlers.insert(h, f);
        h
    }
    pub(crate) fn add_info(&mut self, kv: Vec<(String, String)>) -> c_int {
        let h = alloc_handle(&self.infos, &mut self.next_info, 2);
        self.infos.insert(h, kv);
        h
    }
    pub(crate) fn add_keyval(&mut self, k: Keyval) -> c_int {
        let h = alloc_handle(&self.keyvals, &mut self.next_keyval, 100);
        self.keyvals.insert(h, k);
        h
    }
    pub(crate) fn add_message(&mut self, m: tmpi_pml::MessageId) -> c_int {
        let h = alloc_handle(&self.messages, &mut self.next_message, 2);
        self.messages.insert(h, m);
        h
    }
}

/// The initialised library.
pub(crate) struct Rt {
    pub pml: Arc<Pml>,
    pub coll: Arc<CommContext>,
    pub world_rank: u32,
    pub world_size: u32,
    pub thread_level: c_int,
    pub main_thread: std::thread::ThreadId,
    pub tables: Mutex<Tables>,
    /// Predefined handles resolved without `tables` (blocking send/recv).
    pub fast: FastHandles,
}

/// The reduction of a predefined op handle (`MPI_MAX` 1 .. `MPI_MAXLOC`
/// 12 in mpi.h), without the tables.
pub(crate) fn predefined_op(h: c_int) -> Option<Op> {
    Some(match h {
        1 => Op::Max,
        2 => Op::Min,
        3 => Op::Sum,
        4 => Op::Prod,
        5 => Op::Land,
        6 => Op::Band,
        7 => Op::Lor,
        8 => Op::Bor,
        9 => Op::Lxor,
        10 => Op::Bxor,
        11 => Op::Minloc,
        12 => Op::Maxloc,
        _ => return None,
    })
}

/// Datatype handles below this bound may be predefined (mpi.h numbers
/// them from 1; user types start at 1000).
pub(crate) const FAST_TYPES: usize = 64;

/// MPI_COMM_WORLD, MPI_COMM_SELF and the predefined datatypes, copied out
/// of the handle tables at MPI_Init for the point-to-point and collective
/// calls' fast paths. None of these entries can change until MPI_Finalize
/// (the two communicators and predefined datatypes cannot be freed or
/// modified), so reading the copy needs no lock; an 8-byte MPI_Send spent
/// ~170 instructions and four atomic operations (the tables' mutex, an
/// `Arc` clone and drop) resolving its handles (callgrind, docs/capi.md).
/// A name given later with MPI_Type_set_name goes to the table's copy only
/// (names serve error messages; nothing else of a predefined type changes).
pub(crate) struct FastHandles {
    world: Option<FastComm>,
    self_: Option<FastComm>,
    /// Predefined datatype `h` at index `h`.
    dtypes: Vec<Option<FastType>>,
}

/// A predefined communicator with what the message path reads of it
/// (computing the size from the group on every call cost more than the
/// lookup it replaced).
pub(crate) struct FastComm {
    pub comm: tmpi_comm::Comm,
    pub ctx: u32,
    pub size: c_int,
}

/// A predefined datatype; `plain_size` is its size when it is contiguous
/// from offset 0 (the message path's case), 0 otherwise.
pub(crate) struct FastType {
    pub t: Arc<crate::datatype::Dtype>,
    pub plain_size: usize,
}

impl FastHandles {
    pub(crate) fn new(t: &Tables) -> FastHandles {
        let comm = |h| {
            t.comms.get(&h).map(|c: &CommEnt| FastComm {
                comm: c.comm.clone(),
                ctx: c.comm.context_id(),
                size: c.comm.size() as c_int,
            })
        };
        let dtypes = (0..FAST_TYPES as c_int)
            .map(|h| {
                let d = t.types.get(&h).filter(|d| d.predefined && d.committed)?;
                let plain = d.is_contig() && d.true_lb == 0;
                Some(FastType {
                    t: Arc::clone(d),
                    plain_size: if plain { d.size } else { 0 },
                })
            })
            .collect();
        FastHandles {
            world: comm(COMM_WORLD),
            self_: comm(COMM_SELF),
            dtypes,
        }
    }

    /// MPI_COMM_WORLD or MPI_COMM_SELF; `None` for any other handle.
    #[inline]
    pub(crate) fn comm(&self, h: c_int) -> Option<&FastComm> {
        match h {
            COMM_WORLD => self.world.as_ref(),
            COMM_SELF => self.self_.as_ref(),
            _ => None,
        }
    }

    /// Predefined datatype `h`; `None` for any other handle.
    #[inline]
    pub(crate) fn dtype(&self, h: c_int) -> Option<&FastType> {
        self.dtypes.get(usize::try_from(h).ok()?)?.as_ref()
    }
}

/// The fast paths' common resolution (point-to-point and collective
/// calls): the runtime, a predefined communicator, a predefined contiguous
/// datatype and the byte length of `count` items of it, read without the
/// tables' lock or a reference count. `None` (a negative count, another
/// handle, a zero-size or overflowing length, before MPI_Init or after
/// MPI_Finalize): the caller's general path, which reports every error.
#[inline(always)]
pub(crate) fn fast_call(
    comm: c_int,
    dtype: c_int,
    count: c_int,
) -> Option<(&'static Rt, &'static FastComm, &'static FastType, usize)> {
    let rt = rt().ok()?;
    let c = rt.fast.comm(comm)?;
    let t = rt.fast.dtype(dtype)?;
    let n = usize::try_from(count).ok()?;
    if t.plain_size == 0 {
        return None;
    }
    Some((rt, c, t, t.plain_size.checked_mul(n)?))
}

/// A datatype handle's object: the copy of a predefined datatype made at
/// MPI_Init, borrowed ([`FastHandles`]), or the table's entry, held.
pub(crate) enum TypeRef {
    Fast(&'static Arc<crate::datatype::Dtype>),
    Table(Arc<crate::datatype::Dtype>),
}

impl std::ops::Deref for TypeRef {
    type Target = Arc<crate::datatype::Dtype>;
    fn deref(&self) -> &Self::Target {
        match self {
            TypeRef::Fast(t) => t,
            TypeRef::Table(t) => t,
        }
    }
}

/// A communicator handle's object, the same way: MPI_COMM_WORLD and
/// MPI_COMM_SELF borrowed from [`FastHandles`], any other held.
pub(crate) enum CommRef {
    Fast(&'static tmpi_comm::Comm),
    Table(tmpi_comm::Comm),
}

impl std::ops::Deref for CommRef {
    type Target = tmpi_comm::Comm;
    fn deref(&self) -> &Self::Target {
        match self {
            CommRef::Fast(c) => c,
            CommRef::Table(c) => c,
        }
    }
}

/// Datatype `h`, usable for communication (committed): without the
/// tables' lock for the predefined ones.
#[inline]
pub(crate) fn type_ref(h: c_int) -> Res<TypeRef> {
    match rt().ok().and_then(|rt| rt.fast.dtype(h)) {
        Some(t) => Ok(TypeRef::Fast(&t.t)),
        None => tables().comm_type(h).map(TypeRef::Table),
    }
}

static RT: OnceLock<Rt> = OnceLock::new();
/// Tables usable before MPI_Init (error classes, info, datatypes queries).
static EARLY: OnceLock<Mutex<Tables>> = OnceLock::new();

pub(crate) fn set_rt(rt: Rt) -> Res<()> {
    RT.set(rt)
        .map_err(|_| Error::new(C::Other, "MPI is already initialized"))
}

/// Calls MPI allows after `MPI_Finalize` (MPI-4.0 §11.2.1 and §11.3: the
/// version and state queries, info objects, error strings, the tools
/// interface, sessions), and these plus datatype and error-class calls
/// (which tmpi serves from its early tables) before `MPI_Init`.
fn allowed_outside_init(name: &str, before_init: bool) -> bool {
    const ALWAYS: [&str; 10] = [
        "MPI_Initialized",
        "MPI_Finalized",
        "MPI_Get_version",
        "MPI_Get_library_version",
        "MPI_Error_class",
        "MPI_Error_string",
        "MPI_Init",
        "MPI_Init_thread",
        "MPI_Finalize",
        "MPI_Abort",
    ];
    const ALWAYS_PREFIXES: [&str; 3] = ["MPI_Info_", "MPI_T_", "MPI_Session_"];
    const EARLY_PREFIXES: [&str; 6] = [
        "MPI_Type_",
        "MPI_Add_error_",
        "MPI_Get_",
        "MPI_Query_thread",
        "MPI_Is_thread_main",
        "MPI_Errhandler_",
    ];
    ALWAYS.contains(&name)
        || ALWAYS_PREFIXES.iter().any(|p| name.starts_with(p))
        || (before_init && EARLY_PREFIXES.iter().any(|p| name.starts_with(p)))
}

/// Whether call `name` may run now: every call between MPI_Init and
/// MPI_Finalize; outside, only those MPI allows there (a call after
/// MPI_Finalize must not communicate, nor say it succeeded).
#[inline]
pub(crate) fn callable(name: &str) -> Res<()> {
    // Between MPI_Init and MPI_Finalize, every call: one load, inlined
    // into each call's entry (the one-sided calls' fast paths).
    if PHASE.load(Ordering::Acquire) == PHASE_INIT {
        return Ok(());
    }
    callable_outside(name)
}

/// [`callable`] outside MPI_Init .. MPI_Finalize.
#[cold]
fn callable_outside(name: &str) -> Res<()> {
    match PHASE.load(Ordering::Acquire) {
        PHASE_INIT => Ok(()),
        PHASE_FINALIZED if !allowed_outside_init(name, false) => Err(Error::new(
            C::Other,
            format!("{name} called after MPI_Finalize"),
        )),
        PHASE_NONE if !allowed_outside_init(name, true) => Err(Error::new(
            C::Other,
            format!("{name} called before MPI_Init: MPI is not initialized"),
        )),
        _ => Ok(()),
    }
}

/// The runtime between MPI_Init and MPI_Finalize.
#[inline]
pub(crate) fn rt() -> Res<&'static Rt> {
    match PHASE.load(Ordering::Acquire) {
        PHASE_INIT => RT
            .get()
            .ok_or_else(|| Error::new(C::Intern, "runtime missing")),
        PHASE_FINALIZED => Err(Error::new(C::Other, "MPI was already finalized")),
        _ => Err(Error::new(
            C::Other,
            "MPI is not initialized (call MPI_Init first)",
        )),
    }
}

/// The handle tables (the runtime's once initialised, else the early set).
pub(crate) fn tables() -> MutexGuard<'static, Tables> {
    let m = match RT.get() {
        Some(rt) => &rt.tables,
        None => EARLY.get_or_init(|| Mutex::new(Tables::new())),
    };
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// Moves the early tables (types, infos, error codes made before init) into
/// the runtime's.
pub(crate) fn take_early() -> Tables {
    match EARLY.get() {
        Some(m) => std::mem::replace(
            &mut *m.lock().unwrap_or_else(|p| p.into_inner()),
            Tables::new(),
        ),
        None => Tables::new(),
    }
}

/// This process's world rank (for messages), 0 before init.
pub(crate) fn world_rank() -> u32 {
    RT.get().map(|r| r.world_rank).unwrap_or(0)
}

/// The error handler of communicator `comm` (world's for unknown handles;
/// fatal before init).
pub(crate) fn errhandler_of(comm: c_int) -> Handler {
    let Some(rt) = RT.get() else {
        return Handler::Fatal;
    };
    let t = rt.tables.lock().unwrap_or_else(|p| p.into_inner());
    let h = t
        .comms
        .get(&comm)
        .or_else(|| t.comms.get(&COMM_WORLD))
        .map(|c| c.errhandler)
        .unwrap_or(ERRORS_ARE_FATAL);
    match h {
        ERRORS_RETURN => Handler::Return,
        ERRORS_ARE_FATAL | crate::error::ERRORS_ABORT => Handler::Fatal,
        other => match t.errhandlers.get(&other) {
            Some(f) => Handler::User(*f),
            None => Handler::Fatal,
        },
    }
}

pub(crate) fn user_code_class(code: c_int) -> Option<c_int> {
    tables().user_codes.get(&code).map(|c| c.0)
}

/// The string of an added error class or code: empty until
/// `MPI_Add_error_string` sets one (MPI-4.0 9.5).
pub(crate) fn user_code_string(code: c_int) -> Option<String> {
    tables().user_codes.get(&code).map(|c| c.1.clone())
}
