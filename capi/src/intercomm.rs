//! Inter-communicators: `MPI_Intercomm_create`, `MPI_Intercomm_merge`,
//! `MPI_Comm_remote_size/group`, point-to-point traffic, dup, idup, split,
//! create and free (their collectives: [`crate::intercoll`]).
//!
//! An inter-communicator's handle holds an intra-communicator of its local
//! group (size, rank, group, attributes, name), the **union** of both
//! groups as an intra-communicator (created over `MPI_COMM_WORLD` by
//! `MPI_Comm_create_group`: only the members of both groups take part), and
//! its own transport context agreed over the union
//! (`tmpi_comm::InterContext`): in the pml rank `r` of that context names
//! process `r` of the remote group and this process sends as its local
//! rank, so point-to-point calls need nothing else (`CommEnt::p2p_target`).

use std::ffi::{c_int, c_void};
use std::sync::Arc;

use tmpi_coll::Input;
use tmpi_comm::{Comm, Group, InterContext};

use crate::comm::register;
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{out_arg, put};
use crate::state::{tables, COMM_WORLD};

/// The remote side of an inter-communicator.
#[derive(Debug)]
pub(crate) struct Inter {
    /// The point-to-point context (released when the last handle goes).
    pub ctx: InterContext,
    /// Every process of both groups, the group whose first world rank is
    /// lower first.
    pub union: Comm,
    /// The remote group.
    pub remote: Group,
    /// Whether the local group comes first in `union` (ranks
    /// `0..local size`) or after the remote one.
    pub local_first: bool,
}

impl Inter {
    /// The union rank of remote rank `r`.
    pub(crate) fn remote_u(&self, r: u32) -> u32 {
        if self.local_first {
            self.union.size() - self.remote.size() + r
        } else {
            r
        }
    }

    /// The union ranks of the whole remote group, in remote rank order.
    pub(crate) fn remotes(&self) -> impl Iterator<Item = u32> + '_ {
        (0..self.remote.size()).map(|r| self.remote_u(r))
    }
}

/// The error of a call MPI defines on intra-communicators only (scan and
/// exscan, topologies, neighbourhood collectives, `MPI_Comm_split_type`,
/// `MPI_Comm_create_group`) made on an inter-communicator.
pub(crate) fn not_on_inter() -> Error {
    Error::new(
        C::Comm,
        "the call needs an intra-communicator and was given an inter-communicator",
    )
}

fn inter_of(h: c_int) -> Res<(Comm, Arc<Inter>)> {
    let t = tables();
    let e = t.comm(h)?;
    match &e.inter {
        Some(i) => Ok((e.comm.clone(), Arc::clone(i))),
        None => Err(Error::new(
            C::Comm,
            format!("communicator {h} is not an inter-communicator"),
        )),
    }
}

const MPI_INT: c_int = 8;

/// One `MPI_Sendrecv` of ints with `remote_leader` over `peer`.
fn swap_ints(
    peer: c_int,
    remote_leader: c_int,
    tag: c_int,
    send: &[c_int],
    recv: &mut [c_int],
) -> Res<()> {
    let rc = crate::p2p::MPI_Sendrecv(
        send.as_ptr().cast(),
        send.len() as c_int,
        MPI_INT,
        remote_leader,
        tag,
        recv.as_mut_ptr().cast::<c_void>(),
        recv.len() as c_int,
        MPI_INT,
        remote_leader,
        tag,
        peer,
        std::ptr::null_mut(),
    );
    match rc {
        0 => Ok(()),
        rc => Err(Error::callback(
            rc,
            "MPI_Intercomm_create: the leaders' exchange failed",
        )),
    }
}

/// The local leader's half of `MPI_Intercomm_create`: this group's world
/// ranks to the remote leader over `peer`, the remote group's back (a
/// length, then the ranks, with the caller's tag).
fn leaders_exchange(
    peer: c_int,
    remote_leader: c_int,
    tag: c_int,
    mine: &[c_int],
) -> Res<Vec<c_int>> {
    let mut m = [0 as c_int];
    swap_ints(peer, remote_leader, tag, &[mine.len() as c_int], &mut m)?;
    let len = usize::try_from(m[0]).map_err(|_| Error::new(C::Intern, "negative group size"))?;
    let mut theirs = vec![0 as c_int; len];
    swap_ints(peer, remote_leader, tag, mine, &mut theirs)?;
    Ok(theirs)
}

/// Whether the group of world ranks `a` comes before `b` in their union:
/// the group whose first world rank is lower comes first (every process of
/// both groups orders them alike).
pub(crate) fn goes_first(a: &[u32], b: &[u32]) -> bool {
    a[0] < b[0]
}

/// Builds the inter-communicator of `local` (an intra-communicator of
/// this group, owned by it) and `remote` (world ranks) over the union
/// `union`, registers it under a handle derived from `parent` (its
/// attributes copied: `dup`).
pub(crate) fn build(
    parent: c_int,
    local: Comm,
    union: Comm,
    remote: Vec<u32>,
    dup: bool,
) -> Res<c_int> {
    let ctx = union.inter_context(local.rank(), remote.clone())?;
    let remote = Group::from_world_ranks(remote)?;
    register_inter(parent, local, ctx, union, remote, dup)
}

/// Registers the inter-communicator of `local`, `ctx`, `union` and
/// `remote` under a handle derived from `parent` (its attributes copied:
/// `dup`).
fn register_inter(
    parent: c_int,
    local: Comm,
    ctx: InterContext,
    union: Comm,
    remote: Group,
    dup: bool,
) -> Res<c_int> {
    let local_first = goes_first(local.group().world_ranks(), remote.world_ranks());
    let h = register(parent, local, dup)?;
    tables().comm_mut(h)?.inter = Some(Arc::new(Inter {
        ctx,
        union,
        remote,
        local_first,
    }));
    Ok(h)
}

#[no_mangle]
pub extern "C" fn MPI_Intercomm_create(
    local_comm: c_int,
    local_leader: c_int,
    peer_comm: c_int,
    remote_leader: c_int,
    tag: c_int,
    newintercomm: *mut c_int,
) -> c_int {
    guard("MPI_Intercomm_create", local_comm, || {
        out_arg(newintercomm, "newintercomm")?;
        let lc = crate::coll::comm_of(local_comm)?;
        let leader = u32::try_from(local_leader)
            .ok()
            .filter(|&l| l < lc.size())
            .ok_or_else(|| {
                Error::new(
                    C::Rank,
                    format!("local_leader {local_leader} is not a rank of local_comm"),
                )
            })?;
        if tag < 0 {
            return Err(Error::new(C::Tag, format!("tag {tag} < 0")));
        }
        let mine: Vec<u32> = lc.group().world_ranks().to_vec();
        // The local communicator first: its context id is this call's
        // alone on every member of this group while the call runs.
        let local = lc.dup()?;
        let my_id = local.context_id();
        // The leaders swap their groups' context ids and members; each
        // bcasts the other's locally.
        let theirs = if lc.rank() == leader {
            let m: Vec<c_int> = std::iter::once(my_id as c_int)
                .chain(mine.iter().map(|&w| w as c_int))
                .collect();
            leaders_exchange(peer_comm, remote_leader, tag, &m)?
        } else {
            Vec::new()
        };
        let mut len = (theirs.len() as u64).to_ne_bytes();
        local.bcast(&mut len, leader)?;
        let n = u64::from_ne_bytes(len) as usize;
        let mut bytes: Vec<u8> = if lc.rank() == leader {
            theirs.iter().flat_map(|w| w.to_ne_bytes()).collect()
        } else {
            vec![0; n * 4]
        };
        local.bcast(&mut bytes, leader)?;
        let mut ints = bytes
            .chunks_exact(4)
            .map(|b| c_int::from_ne_bytes([b[0], b[1], b[2], b[3]]) as u32);
        let their_id = ints.next().unwrap_or(u32::MAX);
        let remote: Vec<u32> = ints.collect();
        if remote.is_empty() || remote.iter().any(|w| mine.contains(w)) {
            return Err(Error::new(
                C::Comm,
                "MPI_Intercomm_create: the local and remote groups overlap or one is empty",
            ));
        }
        // The union, the same order on both sides, agreed over the local
        // communicators and the leaders' channel (peer_comm, tag) only.
        let first = goes_first(&mine, &remote);
        let (a, b, ids) = if first {
            (&mine, &remote, (my_id, their_id))
        } else {
            (&remote, &mine, (their_id, my_id))
        };
        let union = Group::from_world_ranks(a.iter().chain(b.iter()).copied().collect())?;
        let mut swap = |part: &[u8]| -> Result<Vec<u8>, tmpi_coll::CollError> {
            let send: Vec<c_int> = part
                .chunks_exact(4)
                .map(|b| c_int::from_ne_bytes([b[0], b[1], b[2], b[3]]))
                .collect();
            let mut recv = vec![0 as c_int; send.len()];
            swap_ints(peer_comm, remote_leader, tag, &send, &mut recv).map_err(|e| {
                tmpi_coll::CollError::P2p {
                    class: e.class,
                    message: e.msg,
                }
            })?;
            Ok(recv.iter().flat_map(|w| w.to_ne_bytes()).collect())
        };
        let u = local.bridge_union(&union, leader, ids, &mut swap)?;
        let h = build(local_comm, local, u, remote, false)?;
        put(newintercomm, h, "newintercomm")
    })
}

/// `MPI_Comm_dup` of an inter-communicator: the local group and the union
/// duplicated, a new context over the new union.
pub(crate) fn dup(comm: c_int) -> Res<c_int> {
    let (local, inter) = inter_of(comm)?;
    let l = local.dup()?;
    let u = inter.union.dup()?;
    let remote = inter.remote.world_ranks().to_vec();
    build(comm, l, u, remote, true)
}

/// `MPI_Comm_idup` of an inter-communicator: one non-blocking agreement
/// over the union for the union's duplicate and two more context ids (the
/// local group's communicator, the point-to-point context); the handle is
/// written when the request completes ([`finish_idup`]).
pub(crate) fn idup(comm: c_int, newcomm: *mut c_int, request: *mut c_int) -> Res<()> {
    let (local, inter) = inter_of(comm)?;
    let (req, pending) = inter.union.idup_claiming(2)?;
    crate::coll::coll_req(
        request,
        comm,
        req,
        crate::request::Finish::Dup {
            pending,
            newcomm: newcomm as usize,
            inter: Some((local, inter)),
        },
    )
}

/// The end of [`idup`]: the inter-communicator from the union's duplicate
/// `union` and the extra ids `ids` (local group, point-to-point), its
/// attributes copied from `parent`'s.
pub(crate) fn finish_idup(
    parent: c_int,
    local: &Comm,
    inter: &Inter,
    union: Comm,
    ids: &[u32],
) -> Res<c_int> {
    let &[lid, pid] = ids else {
        return Err(Error::new(C::Intern, "idup: two context ids expected"));
    };
    let l = match local.with_claimed_id(lid) {
        Ok(l) => l,
        Err(e) => {
            // with_claimed_id released lid; pid is still ours.
            union.release_claimed_id(pid);
            return Err(e.into());
        }
    };
    let remote = inter.remote.world_ranks().to_vec();
    let ctx = InterContext::claimed(&union, pid, l.rank(), remote)?;
    register_inter(parent, l, ctx, union, inter.remote.clone(), true)
}

#[no_mangle]
pub extern "C" fn MPI_Intercomm_merge(intercomm: c_int, high: c_int, newcomm: *mut c_int) -> c_int {
    guard("MPI_Intercomm_merge", intercomm, || {
        out_arg(newcomm, "newintracomm")?;
        let (local, inter) = inter_of(intercomm)?;
        let u = &inter.union;
        let mut all = vec![0u8; u.size() as usize];
        u.allgather(Input::Buf(&[u8::from(high != 0)]), &mut all)?;
        let ug = u.group();
        let local_w = local.group().world_ranks().to_vec();
        let remote_w = inter.remote.world_ranks().to_vec();
        let pos = |w: u32| ug.rank_of(w).unwrap_or(0) as usize;
        let (lh, rh) = (all[pos(local_w[0])], all[pos(remote_w[0])]);
        // The group that passed high = false first; if both passed the
        // same, the union's order.
        let local_first = if lh != rh {
            lh == 0
        } else {
            pos(local_w[0]) < pos(remote_w[0])
        };
        let order: Vec<u32> = if local_first {
            local_w.iter().chain(&remote_w).copied().collect()
        } else {
            remote_w.iter().chain(&local_w).copied().collect()
        };
        let merged = u
            .create(&Group::from_world_ranks(order)?)?
            .ok_or_else(|| Error::new(C::Intern, "merge gave no communicator"))?;
        let h = register(intercomm, merged, false)?;
        put(newcomm, h, "newintracomm")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_remote_size(comm: c_int, size: *mut c_int) -> c_int {
    guard("MPI_Comm_remote_size", comm, || {
        let (_, inter) = inter_of(comm)?;
        put(size, inter.remote.size() as c_int, "size")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Comm_remote_group(comm: c_int, group: *mut c_int) -> c_int {
    guard("MPI_Comm_remote_group", comm, || {
        let (_, inter) = inter_of(comm)?;
        let h = tables().add_group(inter.remote.clone());
        put(group, h, "group")
    })
}

/// Every process's `(a, b)` pair across the union of `inter`, by union
/// rank (an allgather over the union).
fn pairs_over_union(inter: &Inter, a: i64, b: i64) -> Res<Vec<(i64, i64)>> {
    let u = &inter.union;
    let mine: Vec<u8> = a.to_ne_bytes().into_iter().chain(b.to_ne_bytes()).collect();
    let mut all = vec![0u8; 16 * u.size() as usize];
    u.allgather(Input::Buf(&mine), &mut all)?;
    Ok(all
        .chunks_exact(16)
        .map(|c| {
            let (x, y) = c.split_at(8);
            (
                i64::from_ne_bytes(x.try_into().unwrap_or_default()),
                i64::from_ne_bytes(y.try_into().unwrap_or_default()),
            )
        })
        .collect())
}

/// The end of `MPI_Comm_split` and `MPI_Comm_create` on an
/// inter-communicator: this process's new local communicator (if any), the
/// new remote group (world ranks, in their new rank order) and the union
/// split `color` their members share. The new union is split from the old
/// one, the group with the lower first world rank first (as
/// `MPI_Intercomm_create` orders it); a process without a local
/// communicator or without a remote group gets `MPI_COMM_NULL`.
fn derived(
    parent: c_int,
    inter: &Inter,
    local: Option<Comm>,
    remote: Vec<u32>,
    color: u32,
) -> Res<c_int> {
    let member = match &local {
        Some(l) if !remote.is_empty() => {
            let first = goes_first(l.group().world_ranks(), &remote);
            let r = l.rank() as i32;
            Some(if first { r } else { remote.len() as i32 + r })
        }
        _ => None,
    };
    let union = inter
        .union
        .split(member.map(|_| color), member.unwrap_or(0))?;
    match (local, union) {
        (Some(l), Some(u)) => build(parent, l, u, remote, false),
        (l, u) => {
            if let Some(l) = l {
                l.free()?;
            }
            if let Some(u) = u {
                u.free()?;
            }
            Ok(0)
        }
    }
}

/// The world ranks of the remote ranks `r` of `(order, r)` pairs, sorted
/// by order (then by remote rank).
fn in_order(inter: &Inter, mut picked: Vec<(i64, u32)>) -> Vec<u32> {
    picked.sort_unstable();
    let rw = inter.remote.world_ranks();
    picked.into_iter().map(|(_, r)| rw[r as usize]).collect()
}

/// `MPI_Comm_split` of an inter-communicator (MPI-4.0 §7.4.2): each group
/// splits by `color` and `key`; processes of one colour in the two groups
/// form a new inter-communicator (`MPI_COMM_NULL` where a colour has
/// processes in one group only).
pub(crate) fn split(comm: c_int, color: Option<u32>, key: c_int) -> Res<c_int> {
    let (local, inter) = inter_of(comm)?;
    let l = local.split(color, key)?;
    let all = pairs_over_union(&inter, color.map_or(-1, i64::from), i64::from(key))?;
    let mut remote: Vec<(i64, u32)> = Vec::new();
    if let Some(c) = color {
        for r in 0..inter.remote.size() {
            let (rc, rk) = all[inter.remote_u(r) as usize];
            if rc == i64::from(c) {
                remote.push((rk, r));
            }
        }
    }
    // The remote group's new order, as its own split orders it: by key,
    // then by old rank.
    let remote = in_order(&inter, remote);
    derived(comm, &inter, l, remote, color.unwrap_or(0))
}

/// `MPI_Comm_create` of an inter-communicator: `group`, a subgroup of the
/// local group, against the subgroup the other group's processes passed;
/// `MPI_COMM_NULL` outside `group` or when either is empty.
pub(crate) fn create(comm: c_int, group: &Group) -> Res<c_int> {
    let (local, inter) = inter_of(comm)?;
    let l = local.create(group)?;
    let me = crate::state::rt()?.world_rank;
    let pos = group.rank_of(me).map_or(-1, i64::from);
    let all = pairs_over_union(&inter, pos, 0)?;
    let remote: Vec<(i64, u32)> = (0..inter.remote.size())
        .filter_map(|r| {
            let p = all[inter.remote_u(r) as usize].0;
            (p >= 0).then_some((p, r))
        })
        .collect();
    let remote = in_order(&inter, remote);
    derived(comm, &inter, l, remote, 0)
}

/// Whether handle `h` is an inter-communicator (`false` for bad handles:
/// the caller's own lookup reports them).
pub(crate) fn is_inter(h: c_int) -> bool {
    h != COMM_WORLD
        && h != crate::state::COMM_SELF
        && tables().comm(h).is_ok_and(|e| e.inter.is_some())
}
