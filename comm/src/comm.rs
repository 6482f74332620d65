//! Communicators: creation (dup, split, split_type, create, create_group,
//! the parts of inter-communicator construction), free, compare, names,
//! attributes; the context ids they run on, agreed collectively (`cid`).
//!
//! `MPI_COMM_NULL` is `None` where a constructor may give "no
//! communicator" (split with `MPI_UNDEFINED`, create for non-members).
//! [`Comm`] is a cheap handle (clones share the communicator); its context
//! id is released when the last handle and the last request on it are gone.
//!
//! The collectives are coll's: each communicator holds the collective
//! state coll selects for it ([`CollComm`], Open MPI's `c_coll`), reached
//! through [`Comm::coll`] (and, as a handle of it, through `Deref`:
//! `comm.bcast(..)`). The context-id agreement's allreduces are the one
//! place the constructors call collectives.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use tmpi_base::mca::Registry;
use tmpi_coll::{
    CollComm, CollContext, CollError, CollRequest, Datatype, Endpoint, Input, Op, P2p, Result,
    TagSpace,
};

use crate::cid::{CidPool, SELF_CID, WORLD_CID};
use crate::group::{Compare, Group};

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// An attribute copy callback: `(keyval, extra_state, value)` returns the
/// value for the new communicator, or `None` to not copy (`MPI_NULL_COPY_FN`
/// is no callback at all). An error aborts the dup.
pub type CopyFn = Arc<dyn Fn(u32, usize, usize) -> Result<Option<usize>> + Send + Sync>;
/// An attribute delete callback: `(keyval, extra_state, value)`.
pub type DeleteFn = Arc<dyn Fn(u32, usize, usize) -> Result<()> + Send + Sync>;

struct Keyval {
    copy: Option<CopyFn>,
    delete: Option<DeleteFn>,
    extra: usize,
    freed: bool,
}

/// First keyval handed out (lower values are left to predefined attributes).
pub const FIRST_KEYVAL: u32 = 64;

/// Per-process state of the communicators: the collective layer's context
/// (transport, framework, outstanding non-blocking collectives), the
/// context ids in use, the keyvals.
pub struct CommContext {
    coll: Arc<CollContext>,
    cids: Mutex<CidPool>,
    keyvals: Mutex<BTreeMap<u32, Keyval>>,
    next_keyval: AtomicU32,
    creating: Mutex<()>,
}

impl fmt::Debug for CommContext {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CommContext")
            .field("coll", &self.coll)
            .finish()
    }
}

/// What [`CommContext::init`] returns.
#[derive(Debug)]
pub struct Universe {
    /// The per-process context.
    pub ctx: Arc<CommContext>,
    /// `MPI_COMM_WORLD`.
    pub world: Comm,
    /// `MPI_COMM_SELF`.
    pub self_comm: Comm,
}

impl CommContext {
    /// Opens the coll framework with the parameters of `reg` over `p2p` and
    /// creates `MPI_COMM_WORLD` and `MPI_COMM_SELF`.
    pub fn init(p2p: Arc<dyn P2p>, reg: &Registry) -> Result<Universe> {
        let coll = CollContext::init(p2p, reg)?;
        let limit = crate::cid::register_params(reg)?;
        let ctx = Arc::new(CommContext {
            coll,
            cids: Mutex::new(CidPool::new(limit)),
            keyvals: Mutex::new(BTreeMap::new()),
            next_keyval: AtomicU32::new(FIRST_KEYVAL),
            creating: Mutex::new(()),
        });
        let p2p = ctx.coll.p2p();
        let me = p2p.world_rank();
        let world = Group::from_world_ranks((0..p2p.world_size()).collect())?;
        // World and self exist in the transport from its init: not added, never removed.
        let world = Comm::build(&ctx, world, WORLD_CID, false)?;
        world.set_name("MPI_COMM_WORLD");
        let selfg = Group::from_world_ranks(vec![me])?;
        let self_comm = Comm::build(&ctx, selfg, SELF_CID, false)?;
        self_comm.set_name("MPI_COMM_SELF");
        Ok(Universe {
            ctx,
            world,
            self_comm,
        })
    }

    /// The collective layer's context.
    pub fn coll(&self) -> &Arc<CollContext> {
        &self.coll
    }

    /// The transport.
    pub fn p2p(&self) -> &Arc<dyn P2p> {
        self.coll.p2p()
    }

    /// Advances every outstanding non-blocking collective of the process
    /// ([`CollContext::progress`]).
    pub fn progress(&self) -> bool {
        self.coll.progress()
    }

    /// Number of outstanding non-blocking collectives (for tests).
    pub fn outstanding(&self) -> usize {
        self.coll.outstanding()
    }

    /// `MPI_Comm_create_keyval`.
    pub fn create_keyval(
        &self,
        copy: Option<CopyFn>,
        delete: Option<DeleteFn>,
        extra: usize,
    ) -> u32 {
        let k = self.next_keyval.fetch_add(1, Ordering::Relaxed);
        lock(&self.keyvals).insert(
            k,
            Keyval {
                copy,
                delete,
                extra,
                freed: false,
            },
        );
        k
    }

    /// `MPI_Comm_free_keyval`: attributes already set stay until deleted.
    pub fn free_keyval(&self, k: u32) -> Result<()> {
        match lock(&self.keyvals).get_mut(&k) {
            Some(kv) if !kv.freed => {
                kv.freed = true;
                Ok(())
            }
            _ => Err(CollError::Keyval(format!("keyval {k} does not exist"))),
        }
    }

    /// A copy callback that copies the value (`MPI_COMM_DUP_FN`).
    pub fn dup_fn() -> CopyFn {
        Arc::new(|_, _, v| Ok(Some(v)))
    }

    fn keyval_fns(&self, k: u32) -> Option<(Option<CopyFn>, Option<DeleteFn>, usize, bool)> {
        lock(&self.keyvals)
            .get(&k)
            .map(|kv| (kv.copy.clone(), kv.delete.clone(), kv.extra, kv.freed))
    }
}

/// `MPI_Comm_split_type` split kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitType {
    /// `MPI_COMM_TYPE_SHARED`: processes that share memory (one node).
    Shared,
    /// `MPI_UNDEFINED`: this rank gets no communicator.
    Undefined,
}

/// A duplicate whose context-id agreement is in flight ([`Comm::idup`]).
///
/// The agreement runs in rounds, each a non-blocking AND allreduce over the
/// parent (on a view with tags of this idup's own) of one window of free-id
/// bits and a flag. In a round a rank
/// offers its free ids only while no other pending agreement of this
/// process offers them and none over a parent with a lower context id
/// waits (`CidPool::take_offer`); otherwise it offers none. The offered
/// ids are reserved meanwhile (blocking agreements skip them). A round where
/// every rank offered and some id is free everywhere takes the lowest one;
/// one where every rank offered and none is moves to the next window; any
/// other round is run again. Every rank sees the same AND, so all decide
/// alike, and the agreement over the lowest pending parent always makes
/// progress. The first round offers nothing: it ends once every rank
/// started this idup, and only then does the agreement compete for the
/// offer (a round holding it never waits for a rank that has not come).
#[derive(Debug)]
pub struct PendingDup {
    key: crate::cid::AgreementKey,
    parent: Comm,
    /// The parent's view on which the rounds run, with tags of this idup's
    /// own ([`TagSpace::Idup`]): rounds of several idups pending at once
    /// are started as each rank's tests find them done, in orders that
    /// differ by rank, so they must not take the parent's sequence numbers.
    view: Comm,
    /// The window of this round.
    base: u32,
    /// The ids this rank offers in this round (reserved while `offering`).
    offered: Vec<u64>,
    offering: bool,
    /// Registered with [`CidPool::pend`] (after the first round) and not
    /// yet ended.
    live: bool,
    /// Context ids agreed beside the duplicate's ([`Comm::idup_claiming`]).
    extra: usize,
}

/// What a completed round of a [`PendingDup`] gives.
#[derive(Debug)]
pub enum DupStep {
    /// The duplicate and the extra context ids of [`Comm::idup_claiming`]
    /// (none for [`Comm::idup`]), claimed here and free on every rank of
    /// the parent (the caller owns them: [`Comm::with_claimed_id`],
    /// [`InterContext::claimed`]).
    Done(Comm, Vec<u32>),
    /// Another round is running: its request and the agreement.
    Again(CollRequest, PendingDup),
}

impl PendingDup {
    /// Starts a round: takes the offer if it may, starts the allreduce.
    fn round(mut self) -> Result<(CollRequest, PendingDup)> {
        let ctx = Arc::clone(&self.parent.shared.ctx);
        let key = self.key;
        {
            let mut cids = lock(&ctx.cids);
            self.offering = self.live && cids.take_offer(key, true);
            self.offered = if self.offering {
                cids.reserve(self.base, u32::MAX)
            } else {
                vec![0; (crate::cid::WINDOW / 64) as usize]
            };
        }
        let flag = u64::from(self.offering);
        let bytes: Vec<u8> = self
            .offered
            .iter()
            .chain(std::iter::once(&flag))
            .flat_map(|w| w.to_ne_bytes())
            .collect();
        let req = self.view.iallreduce(bytes, Datatype::U64, &Op::Band)?;
        Ok((req, self))
    }

    /// Ends this round's offer, if it had one.
    fn end_offer(&mut self, cids: &mut CidPool) {
        if self.offering {
            cids.unreserve(self.base, &self.offered);
            cids.drop_offer(true);
            self.offering = false;
        }
    }

    /// Takes a completed round's result (the request's output): the
    /// duplicate, with attributes copied through their copy callbacks as
    /// [`Comm::dup`] does, or the next round.
    pub fn step(mut self, agreed: &[u8]) -> Result<DupStep> {
        let ctx = Arc::clone(&self.parent.shared.ctx);
        let key = self.key;
        let _serial = lock(&ctx.creating);
        let words: Vec<u64> = agreed
            .chunks_exact(8)
            .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
            .collect();
        let Some((&all_offered, mask)) = words.split_last() else {
            return Err(CollError::Intern("idup round without a result".into()));
        };
        let cid = {
            let mut cids = lock(&ctx.cids);
            self.end_offer(&mut cids);
            if !self.live {
                // The arrival round ended: every rank started this idup,
                // so from now on its rounds end without waiting for
                // anything else, and it may compete for the offer.
                cids.pend(key, true);
                self.live = true;
                None
            } else {
                match CidPool::first_free_n(self.base, mask, 1 + self.extra) {
                    Some(ids) => {
                        for &id in &ids {
                            cids.claim(id)?;
                        }
                        cids.unpend(key, true);
                        self.live = false;
                        Some(ids)
                    }
                    None if all_offered == 1 && self.base + crate::cid::WINDOW >= cids.limit() => {
                        cids.unpend(key, true);
                        self.live = false;
                        return Err(CollError::NoContextId {
                            limit: cids.limit(),
                        });
                    }
                    None => None,
                }
            }
        };
        let Some(mut ids) = cid else {
            if all_offered == 1 {
                self.base += crate::cid::WINDOW;
            }
            drop(_serial);
            let (req, next) = self.round()?;
            return Ok(DupStep::Again(req, next));
        };
        let cid = ids.remove(0);
        tracing::debug!(target: "coll_base", "idup agreed context id {cid} (and {ids:?})");
        let parent = self.parent.clone();
        // A failed build releases `cid` itself (the communicator's claim).
        let c = match Comm::build(&ctx, parent.group(), cid, true) {
            Ok(c) => c,
            Err(e) => {
                let mut cids = lock(&ctx.cids);
                for id in ids {
                    cids.release(id);
                }
                return Err(e);
            }
        };
        parent.copy_attrs_to(&c)?;
        Ok(DupStep::Done(c, ids))
    }
}

impl Drop for PendingDup {
    fn drop(&mut self) {
        // An agreement dropped before it finished (an error on the way, a
        // freed request) ends its offer and its registration.
        let ctx = Arc::clone(&self.parent.shared.ctx);
        let mut cids = lock(&ctx.cids);
        self.end_offer(&mut cids);
        if self.live {
            cids.unpend(self.key, true);
            self.live = false;
        }
    }
}

/// The transport context of an inter-communicator ([`Comm::inter_context`]).
pub struct InterContext {
    ctx: Arc<CommContext>,
    cid: u32,
}

impl InterContext {
    /// The context of an inter-communicator on context id `cid`, which the
    /// caller claimed on every process of both groups (released again if
    /// this fails); `comm` is any communicator of this process (its
    /// transport). Rank `r` names process `remote[r]`, this process is
    /// `local_rank`. Local: a message on it that arrives before the other
    /// side registered it waits there as an unexpected one.
    pub fn claimed(comm: &Comm, cid: u32, local_rank: u32, remote: Vec<u32>) -> Result<Self> {
        let ctx = Arc::clone(&comm.shared.ctx);
        let ep = Endpoint {
            context_id: cid,
            rank: local_rank,
            world: remote.into(),
        };
        if let Err(e) = ctx.p2p().comm_added(&ep) {
            lock(&ctx.cids).release(cid);
            return Err(e);
        }
        Ok(InterContext { ctx, cid })
    }

    /// The context id point-to-point traffic on the inter-communicator uses.
    pub fn context_id(&self) -> u32 {
        self.cid
    }
}

impl std::fmt::Debug for InterContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("InterContext")
            .field("cid", &self.cid)
            .finish()
    }
}

impl Drop for InterContext {
    fn drop(&mut self) {
        self.ctx.p2p().comm_removed(self.cid);
        lock(&self.ctx.cids).release(self.cid);
    }
}

fn root_ok(root: u32, size: u32) -> Result<()> {
    if root >= size {
        return Err(CollError::Root {
            root: i64::from(root),
            size,
        });
    }
    Ok(())
}

/// The allreduce of one round of a context-id agreement: the bitwise AND
/// of `u64` words (input, output) over everyone who agrees.
type RoundAnd<'a> = dyn Fn(&[u8], &mut [u8]) -> Result<()> + 'a;

/// What a communicator owns beside its collective state: kept alive by
/// every handle and, through the collective state, by every request on it.
struct Shared {
    ctx: Arc<CommContext>,
    group: Group,
    cid: u32,
    /// The context id is this communicator's own (not world's or self's,
    /// not a view's of a parent): released when the last user is gone.
    owns_cid: bool,
    name: Mutex<String>,
    attrs: Mutex<BTreeMap<u32, usize>>,
    freed: AtomicBool,
}

impl Drop for Shared {
    fn drop(&mut self) {
        if !self.freed.load(Ordering::Acquire) {
            let attrs = std::mem::take(&mut *lock(&self.attrs));
            for (k, v) in attrs {
                if let Some((_, Some(del), extra, _)) = self.ctx.keyval_fns(k) {
                    if let Err(e) = del(k, extra, v) {
                        tracing::warn!(target: "coll_base", "attribute {k} delete callback failed while dropping a communicator: {e}");
                    }
                }
            }
        }
        if self.owns_cid {
            lock(&self.ctx.cids).release(self.cid);
            tracing::debug!(target: "coll_base", "context id {} released", self.cid);
        }
    }
}

/// A communicator.
#[derive(Clone)]
pub struct Comm {
    coll: CollComm,
    shared: Arc<Shared>,
}

impl fmt::Debug for Comm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Comm")
            .field("context_id", &self.context_id())
            .field("rank", &self.rank())
            .field("size", &self.size())
            .field("name", &self.name())
            .finish()
    }
}

/// The collective calls of a communicator are its collective state's
/// ([`Comm::coll`]): `comm.allreduce(..)` is `comm.coll().allreduce(..)`.
impl std::ops::Deref for Comm {
    type Target = CollComm;
    fn deref(&self) -> &CollComm {
        &self.coll
    }
}

impl Comm {
    /// A communicator of `group` on context id `cid`. `owns_cid`: the id
    /// is this communicator's (claimed by the caller; registered with the
    /// transport here, released when the communicator is gone, and also
    /// when this fails).
    fn build(ctx: &Arc<CommContext>, group: Group, cid: u32, owns_cid: bool) -> Result<Comm> {
        let shared = Comm::shared(ctx, &group, cid, owns_cid);
        let world = Arc::clone(group.world_ranks());
        let owner = Box::new(Arc::clone(&shared));
        let coll = CollComm::new(&ctx.coll, world, cid, owns_cid, Some(owner))?;
        Ok(Comm { coll, shared })
    }

    /// A temporary view of this communicator for the members `group` (a
    /// subset), on this communicator's context with collectives in tag
    /// space `space` (an agreement's own).
    fn view(&self, group: Group, space: TagSpace) -> Result<Comm> {
        let shared = Comm::shared(&self.shared.ctx, &group, self.context_id(), false);
        let world = Arc::clone(group.world_ranks());
        let owner = Box::new(Arc::clone(&shared));
        let coll = self.coll.view(world, space, Some(owner))?;
        Ok(Comm { coll, shared })
    }

    fn shared(ctx: &Arc<CommContext>, group: &Group, cid: u32, owns_cid: bool) -> Arc<Shared> {
        Arc::new(Shared {
            ctx: Arc::clone(ctx),
            group: group.clone(),
            cid,
            owns_cid,
            name: Mutex::new(String::new()),
            attrs: Mutex::new(BTreeMap::new()),
            freed: AtomicBool::new(false),
        })
    }

    /// The collective state coll selected for this communicator: every
    /// collective call of it.
    pub fn coll(&self) -> &CollComm {
        &self.coll
    }

    /// The group (`MPI_Comm_group`).
    pub fn group(&self) -> Group {
        self.shared.group.clone()
    }

    /// The per-process context (keyvals, context ids; the collective
    /// layer's context through [`CommContext::coll`]).
    pub fn context(&self) -> &Arc<CommContext> {
        &self.shared.ctx
    }

    /// `MPI_Comm_set_name`.
    pub fn set_name(&self, name: &str) {
        *lock(&self.shared.name) = name.to_owned();
    }

    /// `MPI_Comm_get_name` (empty when never set).
    pub fn name(&self) -> String {
        lock(&self.shared.name).clone()
    }

    /// `MPI_Comm_compare`.
    pub fn compare(&self, other: &Comm) -> Compare {
        if Arc::ptr_eq(&self.shared, &other.shared) {
            return Compare::Ident;
        }
        match self.shared.group.compare(&other.shared.group) {
            Compare::Ident
                if self.context_id() == other.context_id()
                    && self.coll.tag_space() == other.coll.tag_space() =>
            {
                Compare::Ident
            }
            Compare::Ident => Compare::Congruent,
            c => c,
        }
    }

    // ---------------------------------------------------------------- attributes

    /// `MPI_Comm_set_attr`: an existing value is deleted first (its delete callback runs).
    pub fn set_attr(&self, keyval: u32, value: usize) -> Result<()> {
        match self.shared.ctx.keyval_fns(keyval) {
            Some((_, _, _, false)) => {}
            _ => return Err(CollError::Keyval(format!("keyval {keyval} does not exist"))),
        }
        self.delete_attr_inner(keyval, false)?;
        lock(&self.shared.attrs).insert(keyval, value);
        Ok(())
    }

    /// `MPI_Comm_get_attr`: `None` when not set.
    pub fn get_attr(&self, keyval: u32) -> Result<Option<usize>> {
        if self.shared.ctx.keyval_fns(keyval).is_none() {
            return Err(CollError::Keyval(format!("keyval {keyval} does not exist")));
        }
        Ok(lock(&self.shared.attrs).get(&keyval).copied())
    }

    /// `MPI_Comm_delete_attr`: runs the delete callback.
    pub fn delete_attr(&self, keyval: u32) -> Result<()> {
        self.delete_attr_inner(keyval, true)
    }

    fn delete_attr_inner(&self, keyval: u32, must_exist: bool) -> Result<()> {
        let fns = self
            .shared
            .ctx
            .keyval_fns(keyval)
            .ok_or_else(|| CollError::Keyval(format!("keyval {keyval} does not exist")))?;
        let old = lock(&self.shared.attrs).get(&keyval).copied();
        match old {
            None if must_exist => Err(CollError::Keyval(format!("attribute {keyval} is not set"))),
            None => Ok(()),
            Some(v) => {
                if let Some(del) = &fns.1 {
                    del(keyval, fns.2, v)?;
                }
                lock(&self.shared.attrs).remove(&keyval);
                Ok(())
            }
        }
    }

    /// `MPI_Comm_free`: deletes the attributes (their callbacks run; the
    /// first error is returned after all ran) and gives up this handle.
    /// The context id is released once no handle or request uses it.
    pub fn free(self) -> Result<()> {
        let attrs = std::mem::take(&mut *lock(&self.shared.attrs));
        self.shared.freed.store(true, Ordering::Release);
        let mut first = None;
        for (k, v) in attrs {
            if let Some((_, Some(del), extra, _)) = self.shared.ctx.keyval_fns(k) {
                if let Err(e) = del(k, extra, v) {
                    first.get_or_insert(e);
                }
            }
        }
        first.map_or(Ok(()), Err)
    }

    // ---------------------------------------------------------------- construction

    /// Agrees on a context id over this communicator; `claim` on members of
    /// the new one. `same`: one word per rank of this communicator that
    /// every rank naming it must have given alike (`u64::MAX`: not named;
    /// `MPI_Comm_create`'s group hashes), checked in the same allreduce:
    /// the words and their complements, both AND-reduced, are complements
    /// again only if every rank that named a slot gave it the same value.
    fn agree_cid(&self, claim: bool, same: Option<&[u64]>) -> Result<u32> {
        self.agree_cid_from(0, claim, same)
    }

    /// [`Comm::agree_cid`] over the windows from `base` on.
    fn agree_cid_from(&self, mut base: u32, claim: bool, same: Option<&[u64]>) -> Result<u32> {
        if self.size() == 1 {
            // Nobody to agree with (MPI_COMM_SELF and its kin): the lowest
            // id free here and offered by no round in flight, at once. A
            // round would wait for the offer of another thread's agreement,
            // which may wait for a rank whose thread waits for this one
            // (MPICH's threads/comm/comm_dup_deadlock).
            let mut c = lock(&self.shared.ctx.cids);
            while base < c.limit() {
                if let Some(id) = CidPool::first_free(base, &c.free_window(base)) {
                    if claim {
                        c.claim(id)?;
                    }
                    return Ok(id);
                }
                base += crate::cid::WINDOW;
            }
            return Err(CollError::NoContextId { limit: c.limit() });
        }
        let key = self.agreement_key(0);
        let mut registered = false;
        let band =
            |b: &[u8], o: &mut [u8]| self.allreduce(Input::Buf(b), o, Datatype::U64, &Op::Band);
        let r = self.agree_rounds(key, base, claim, same, &band, &mut registered);
        if registered {
            lock(&self.shared.ctx.cids).unpend(key, false);
        }
        r
    }

    /// The rounds of [`Comm::agree_cid_from`] (module `cid`): blocking
    /// allreduces of one window of offered ids, the `same` words and a flag
    /// "every rank offered", run without a process lock held, so that
    /// agreements of several threads of a process all finish. The first
    /// round offers nothing: when it ends every rank has come to this
    /// agreement, and only then is it registered (`registered`) to compete
    /// for the process's offer. A round that holds the offer therefore
    /// never waits for a rank still busy elsewhere (in another agreement
    /// that waits for this process's offer: MPICH's
    /// threads/comm/comm_create_group_threads2). `band` is the round's
    /// allreduce (bitwise AND of `u64` words over everyone who agrees).
    fn agree_rounds(
        &self,
        key: crate::cid::AgreementKey,
        mut base: u32,
        claim: bool,
        same: Option<&[u64]>,
        band: &RoundAnd<'_>,
        registered: &mut bool,
    ) -> Result<u32> {
        let cids = &self.shared.ctx.cids;
        let limit = lock(cids).limit();
        while base < limit {
            let (offering, mut words) = {
                let mut c = lock(cids);
                if *registered && c.take_offer(key, false) {
                    (true, c.reserve(base, u32::MAX))
                } else {
                    (false, vec![0; (crate::cid::WINDOW / 64) as usize])
                }
            };
            let n = words.len();
            let offered = words.clone();
            if let Some(h) = same {
                words.extend_from_slice(h);
                words.extend(h.iter().map(|&w| if w == u64::MAX { w } else { !w }));
            }
            words.push(u64::from(offering));
            let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
            let mut out = vec![0u8; bytes.len()];
            let r = band(&bytes, &mut out);
            let end_offer = |c: &mut CidPool| {
                if offering {
                    c.unreserve(base, &offered);
                    c.drop_offer(false);
                }
            };
            if let Err(e) = r {
                end_offer(&mut lock(cids));
                return Err(e);
            }
            let mut agreed: Vec<u64> = out
                .chunks_exact(8)
                .map(|c| u64::from_ne_bytes(c.try_into().expect("8 bytes")))
                .collect();
            let all_offered = agreed.pop() == Some(1);
            if let Some(h) = same {
                let (a, b) = agreed[n..].split_at(h.len());
                let unnamed = |x: u64, y: u64| x == u64::MAX && y == u64::MAX;
                if a.iter()
                    .zip(b)
                    .any(|(&x, &y)| x ^ y != u64::MAX && !unnamed(x, y))
                {
                    end_offer(&mut lock(cids));
                    return Err(CollError::Group(
                        "MPI_Comm_create: the groups passed differ among their members \
                         or overlap"
                            .into(),
                    ));
                }
                agreed.truncate(n);
            }
            // The offer ends and the id is claimed under one lock: no
            // other round of this process can offer the id in between.
            let mut c = lock(cids);
            end_offer(&mut c);
            if !*registered {
                c.pend(key, false);
                *registered = true;
                continue;
            }
            if !all_offered {
                continue;
            }
            if let Some(id) = CidPool::first_free(base, &agreed) {
                if claim {
                    c.claim(id)?;
                }
                tracing::debug!(target: "coll_base", "agreed context id {id}");
                return Ok(id);
            }
            base += crate::cid::WINDOW;
        }
        Err(CollError::NoContextId { limit })
    }

    /// This communicator's place in the order of a process's agreements
    /// ([`crate::cid::AgreementKey`]).
    fn agreement_key(&self, order: u32) -> crate::cid::AgreementKey {
        let sub = match self.coll.tag_space() {
            TagSpace::CreateGroup(tag) => 1 + i64::from(tag),
            TagSpace::Coll | TagSpace::Idup(_) => 0,
        };
        (self.context_id(), sub, order)
    }

    /// A new communicator of `group` (`None`: this rank gets none) on a
    /// context id agreed over this one; `same` as in [`Comm::agree_cid`].
    fn derive(&self, group: Option<Group>, same: Option<&[u64]>) -> Result<Option<Comm>> {
        let ctx = Arc::clone(&self.shared.ctx);
        let cid = self.agree_cid(group.is_some(), same)?;
        match group {
            None => Ok(None),
            // A failed build releases `cid` itself.
            Some(g) => Comm::build(&ctx, g, cid, true).map(Some),
        }
    }

    /// `MPI_Comm_dup`: same group, new context, attributes copied through
    /// their copy callbacks.
    pub fn dup(&self) -> Result<Comm> {
        let c = self
            .derive(Some(self.group()), None)?
            .ok_or_else(|| CollError::Intern("dup produced no communicator".into()))?;
        self.copy_attrs_to(&c)?;
        Ok(c)
    }

    /// Copies this communicator's attributes to its duplicate `c` through
    /// their copy callbacks.
    fn copy_attrs_to(&self, c: &Comm) -> Result<()> {
        let attrs: Vec<(u32, usize)> = lock(&self.shared.attrs)
            .iter()
            .map(|(k, v)| (*k, *v))
            .collect();
        for (k, v) in attrs {
            if let Some((Some(copy), _, extra, _)) = self.shared.ctx.keyval_fns(k) {
                if let Some(nv) = copy(k, extra, v)? {
                    lock(&c.shared.attrs).insert(k, nv);
                }
            }
        }
        Ok(())
    }

    /// `MPI_Comm_idup`: starts the context-id agreement without blocking
    /// ([`PendingDup`]); each completed round's output goes to
    /// [`PendingDup::step`], which gives the communicator or the next
    /// round's request.
    pub fn idup(&self) -> Result<(CollRequest, PendingDup)> {
        self.idup_claiming(0)
    }

    /// [`Comm::idup`] agreeing on `extra` more context ids free on every
    /// rank, given with the duplicate ([`DupStep::Done`]): the
    /// non-blocking dup of an inter-communicator takes its union's
    /// duplicate, a context for its local group and one for its
    /// point-to-point traffic from one agreement over the union.
    pub fn idup_claiming(&self, extra: usize) -> Result<(CollRequest, PendingDup)> {
        let ctx = Arc::clone(&self.shared.ctx);
        let _serial = lock(&ctx.creating);
        // Idups of this communicator are started in the same order on every
        // rank: a collective sequence number of its own orders them alike
        // everywhere and names the tag space of their rounds.
        let order = self.coll.reserve_seq();
        let key = self.agreement_key(order);
        let view = self.view(self.group(), TagSpace::Idup(order))?;
        PendingDup {
            key,
            parent: self.clone(),
            view,
            base: 0,
            offered: Vec::new(),
            offering: false,
            live: false,
            extra,
        }
        .round()
    }

    /// `MPI_Comm_split`: `color = None` is `MPI_UNDEFINED`. Ranks of one
    /// colour are ordered by `key`, then by rank here.
    pub fn split(&self, color: Option<u32>, key: i32) -> Result<Option<Comm>> {
        let mine: Vec<u8> = [color.map_or(-1i64, i64::from), i64::from(key)]
            .iter()
            .flat_map(|v| v.to_ne_bytes())
            .collect();
        let mut all = vec![0u8; 16 * self.size() as usize];
        self.allgather(Input::Buf(&mine), &mut all)?;
        let entries: Vec<(i64, i64)> = all
            .chunks_exact(16)
            .map(|c| {
                (
                    i64::from_ne_bytes(c[..8].try_into().expect("8 bytes")),
                    i64::from_ne_bytes(c[8..].try_into().expect("8 bytes")),
                )
            })
            .collect();
        let group = match color {
            None => None,
            Some(col) => {
                let mut members: Vec<(i64, u32)> = entries
                    .iter()
                    .enumerate()
                    .filter(|(_, e)| e.0 == i64::from(col))
                    .map(|(r, e)| (e.1, r as u32))
                    .collect();
                members.sort();
                let ranks: Vec<u32> = members.into_iter().map(|(_, r)| r).collect();
                Some(self.shared.group.incl(&ranks)?)
            }
        };
        self.derive(group, None)
    }

    /// `MPI_Comm_split_type`.
    pub fn split_type(&self, kind: SplitType, key: i32) -> Result<Option<Comm>> {
        self.split(self.split_type_color(kind), key)
    }

    /// The color `split_type` splits this process by (`None`: none, it
    /// gets no communicator): the node, for the shared kind. An
    /// inter-communicator's split by type splits by this color.
    pub fn split_type_color(&self, kind: SplitType) -> Option<u32> {
        match kind {
            SplitType::Shared => Some(
                self.shared
                    .ctx
                    .p2p()
                    .node_of(self.shared.ctx.p2p().world_rank()),
            ),
            SplitType::Undefined => None,
        }
    }

    /// `MPI_Comm_create`: every rank of this communicator calls it with the
    /// same group, which must be a subset of this communicator's group;
    /// members get the new communicator, the others `None`.
    pub fn create(&self, group: &Group) -> Result<Option<Comm>> {
        if self.shared.group.intersection(group).size() != group.size() {
            return Err(CollError::Group(
                "MPI_Comm_create: the group is not a subset of the communicator's group".into(),
            ));
        }
        let me = self.shared.ctx.p2p().world_rank();
        let member = group.rank_of(me).is_some();
        // MPI-2.2 and later: the ranks may pass disjoint groups, one per new
        // communicator, every member of a group the same group (in the same
        // order); a rank outside its group gets MPI_COMM_NULL (and may pass
        // the group the others pass, MPI-2.1 style, or an empty one).
        // Checked in the agreement: each rank writes its group's hash into
        // the slot of every member, and a rank outside its group a marker
        // into its own slot; the members of a group that differ, groups that
        // overlap, or a rank named by a group it did not pass, make a slot
        // disagree.
        const OUTSIDE: u64 = 0x6f75_7473_6964_6521;
        let hash = group
            .world_ranks()
            .iter()
            .fold(0xcbf2_9ce4_8422_2325u64, |h, &r| {
                (h ^ u64::from(r)).wrapping_mul(0x0000_0100_0000_01b3)
            })
            .min(u64::MAX - 1);
        let mut slots = vec![u64::MAX; self.size() as usize];
        let ranks: std::collections::HashMap<u32, usize> = self
            .shared
            .group
            .world_ranks()
            .iter()
            .enumerate()
            .map(|(i, &w)| (w, i))
            .collect();
        for w in group.world_ranks().iter() {
            slots[ranks[w]] = hash;
        }
        if !member {
            slots[self.rank() as usize] = OUTSIDE;
        }
        self.derive(member.then(|| group.clone()), Some(&slots))
    }

    /// `MPI_Comm_create_group`: only the members of `group` (a subset of
    /// this communicator's group) call it, with the same `tag`; the
    /// agreement runs among them on this communicator's context with tags
    /// of their own (`TagSpace::CreateGroup`).
    pub fn create_group(&self, group: &Group, tag: i32) -> Result<Comm> {
        if tag < 0 {
            return Err(CollError::Arg(format!(
                "MPI_Comm_create_group: tag {tag} < 0"
            )));
        }
        if self.shared.group.intersection(group).size() != group.size() {
            return Err(CollError::Group(
                "MPI_Comm_create_group: the group is not a subset of the communicator's group"
                    .into(),
            ));
        }
        let me = self.shared.ctx.p2p().world_rank();
        if group.rank_of(me).is_none() {
            return Err(CollError::Group(
                "MPI_Comm_create_group called by a process outside the group".into(),
            ));
        }
        let view = self.view(group.clone(), TagSpace::CreateGroup(tag))?;
        view.derive(Some(group.clone()), None)?
            .ok_or_else(|| CollError::Intern("create_group produced no communicator".into()))
    }

    // ---------------------------------------------------------------- inter-communicators

    /// Gives back a context id claimed by [`Comm::idup_claiming`] and not
    /// used.
    pub fn release_claimed_id(&self, cid: u32) {
        lock(&self.shared.ctx.cids).release(cid);
    }

    /// A new communicator over this one's group on context id `cid`, which
    /// the caller claimed on every member (an extra id of
    /// [`Comm::idup_claiming`]; released again if this fails). Local: no
    /// agreement, no message.
    pub fn with_claimed_id(&self, cid: u32) -> Result<Comm> {
        Comm::build(&self.shared.ctx, self.group(), cid, true)
    }

    /// The transport context of an inter-communicator
    /// (`MPI_Intercomm_create`), agreed over this communicator, which holds
    /// every process of both groups: a context id free on all of them,
    /// registered with the transport so that rank `r` names process
    /// `remote[r]` (world ranks of the other group) and this process is
    /// `local_rank` to the other side. Returns once every member has
    /// registered it (a barrier), so no message on it can arrive first.
    /// The id is released and the transport state removed when the
    /// [`InterContext`] is dropped.
    pub fn inter_context(&self, local_rank: u32, remote: Vec<u32>) -> Result<InterContext> {
        let cid = self.agree_cid(true, None)?;
        let ic = InterContext::claimed(self, cid, local_rank, remote)?;
        self.barrier()?;
        tracing::debug!(target: "coll_base", "inter-communicator context {cid} on cid {}", self.context_id());
        Ok(ic)
    }

    /// The union communicator of `MPI_Intercomm_create`, agreed without
    /// any traffic outside the call's own channels: this communicator (a
    /// fresh duplicate of the caller's local communicator, so its context
    /// id is this call's alone on every member) carries each group's part
    /// of every round, and `swap` the local leaders' exchange of their
    /// groups' parts (the caller's peer communicator and tag, which MPI
    /// makes the caller keep apart). A view of `MPI_COMM_WORLD` under the
    /// user's tag would not do: calls of several threads with one tag on
    /// different peer communicators are legal and would cross there.
    ///
    /// `union` lists every process of both groups, the same on all of
    /// them; `ids` is the pair of this call's local context ids, the
    /// group that comes first in `union` first, the same on every member
    /// (it orders this agreement among the process's others). `swap` is
    /// called on rank `leader` only, with this group's AND of a round and
    /// returns the other group's.
    pub fn bridge_union(
        &self,
        union: &Group,
        leader: u32,
        ids: (u32, u32),
        swap: &mut dyn FnMut(&[u8]) -> Result<Vec<u8>>,
    ) -> Result<Comm> {
        root_ok(leader, self.size())?;
        let swap = Mutex::new(swap);
        let band = |b: &[u8], o: &mut [u8]| -> Result<()> {
            self.allreduce(Input::Buf(b), o, Datatype::U64, &Op::Band)?;
            if self.rank() == leader {
                let theirs = (lock(&swap))(o)?;
                if theirs.len() != o.len() {
                    return Err(CollError::Mismatch(format!(
                        "MPI_Intercomm_create: the leaders' parts differ in length ({} and {} bytes)",
                        o.len(),
                        theirs.len()
                    )));
                }
                for (x, y) in o.iter_mut().zip(theirs) {
                    *x &= y;
                }
            }
            self.bcast(o, leader)
        };
        let key = (ids.0, (1 << 40) + i64::from(ids.1), 0);
        let mut registered = false;
        let r = self.agree_rounds(key, 0, true, None, &band, &mut registered);
        if registered {
            lock(&self.shared.ctx.cids).unpend(key, false);
        }
        let cid = r?;
        // A failed build releases `cid` itself.
        Comm::build(&self.shared.ctx, union.clone(), cid, true)
    }
}
