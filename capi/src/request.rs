//! Requests behind `MPI_Request` handles, statuses, completion.

use std::ffi::c_int;
use std::sync::Arc;

use tmpi_coll::CollRequest;
use tmpi_pml::{ReqId, SendMode, Status};

use crate::datatype::Dtype;
use crate::error::{Error, MpiErrorClass as C, Res};
use crate::state::{rt, tables};

/// The C `MPI_Status` (layout of mpi.h).
#[repr(C)]
#[derive(Debug, Clone, Copy, Default)]
pub struct MpiStatus {
    pub count_lo: c_int,
    pub count_hi_and_cancelled: c_int,
    pub source: c_int,
    pub tag: c_int,
    pub error: c_int,
}

/// A completed operation's status as the C API keeps it.
#[derive(Debug, Clone, Copy)]
pub(crate) struct St {
    pub source: c_int,
    pub tag: c_int,
    pub bytes: usize,
    pub error: C,
    pub cancelled: bool,
}

impl St {
    pub(crate) fn empty() -> St {
        St::from(Status::empty())
    }
    pub(crate) fn to_c(self) -> MpiStatus {
        let b = self.bytes as u64;
        MpiStatus {
            count_lo: (b & 0xffff_ffff) as u32 as c_int,
            count_hi_and_cancelled: (((b >> 32) << 1) as c_int) | c_int::from(self.cancelled),
            source: self.source,
            tag: self.tag,
            error: self.error as c_int,
        }
    }
}

impl From<Status> for St {
    fn from(s: Status) -> St {
        St {
            source: s.source,
            tag: s.tag,
            bytes: s.count,
            error: s.error,
            cancelled: s.cancelled,
        }
    }
}

/// Bytes recorded in a C status.
pub(crate) fn status_bytes(s: &MpiStatus) -> u64 {
    (s.count_lo as u32 as u64) | (((s.count_hi_and_cancelled as u32 as u64) >> 1) << 32)
}

/// Writes `st` to a C status pointer unless it is `MPI_STATUS_IGNORE`.
///
/// For the calls that return one status (receive, probe, wait, test,
/// sendrecv): its `MPI_ERROR` field is left as the caller had it (MPI-4.0
/// 3.2.5: the call's return code says it; only the calls that return
/// several statuses write the field, `MPI_ERR_IN_STATUS`). MPICH's
/// pt2pt/mprobe checks that.
pub(crate) fn put_status(p: *mut MpiStatus, st: St) -> Res<()> {
    if p.is_null() || p as usize == crate::ffi::STATUS_IGNORE {
        return Ok(());
    }
    crate::ffi::put_status_keeping_error(p, st.to_c());
    Ok(())
}

/// What a persistent request restarts.
#[derive(Debug, Clone)]
pub(crate) struct Persist {
    pub send: Option<SendMode>,
    pub buf: usize,
    pub count: usize,
    pub dtype: c_int,
    pub peer: c_int,
    pub tag: c_int,
    pub comm: c_int,
    /// A persistent collective: what `MPI_Start` starts (the fields above
    /// are unused then).
    pub coll: Option<Box<crate::pcoll::CollStart>>,
    /// A partitioned request (MPI-4.0 chapter 4): its partitions and
    /// round; `MPI_Start` starts a round of it (`crate::partitioned`).
    pub part: Option<Arc<crate::partitioned::Part>>,
}

impl Persist {
    /// Gives back the datatype handles the request holds (it is freed).
    pub(crate) fn release(&self) {
        tables().release_type(self.dtype);
        if let Some(c) = &self.coll {
            c.release();
        }
        if let Some(p) = &self.part {
            crate::partitioned::forget(p);
        }
    }
}

/// Data staged for a non-contiguous type.
#[derive(Debug)]
pub(crate) enum Stage {
    /// The user's memory is used directly.
    Direct,
    /// Packed send data: owned here so that it lives until completion
    /// (the pml reads it through a raw view).
    Send(#[allow(dead_code)] Vec<u8>),
    /// A non-contiguous buffer packed/unpacked per fragment: the pml's
    /// typed view points at this convertor, so it lives (boxed, unmoved)
    /// until the request completes.
    Typed(#[allow(dead_code)] Box<tmpi_pml::convertor::Convertor>),
    /// Receive staging, unpacked into `dst` on completion (boxed: the
    /// table moves every request record, most of them `Direct`).
    Recv(Box<RecvStage>),
}

/// A staged receive of a non-contiguous type: `count` items of `t` at
/// `dst`, received into `buf` first.
#[derive(Debug)]
pub(crate) struct RecvStage {
    pub buf: Vec<u8>,
    pub dst: usize,
    pub count: usize,
    pub t: Arc<Dtype>,
}

/// How a non-blocking collective's result reaches the user.
#[derive(Debug)]
pub(crate) enum Finish {
    Nothing,
    /// Unpack the result into `count` items of `t` at `dst`.
    Unpack {
        dst: usize,
        count: usize,
        t: Arc<Dtype>,
    },
    /// Copy the result's bytes `displs[i]..displs[i] + counts[i]` to the
    /// same offsets at `dst` (v-collectives: bytes between the blocks stay
    /// untouched).
    Regions {
        dst: usize,
        counts: Vec<usize>,
        displs: Vec<usize>,
    },
    /// Write the staged result back into the caller's blocks (v/w forms on
    /// non-contiguous types).
    Blocks {
        dst: usize,
        layout: crate::coll::VLayout,
    },
    /// A non-blocking reduction on an inter-communicator: the result holds
    /// `blocks` packed vectors of `block` bytes (the remote group's, in rank
    /// order); bytes `seg` of each are folded with `op` in that order and
    /// the fold is unpacked into `count` items of `t` at `dst`.
    Fold {
        dst: usize,
        blocks: usize,
        block: usize,
        seg: std::ops::Range<usize>,
        elem: tmpi_coll::Datatype,
        op: tmpi_coll::Op,
        count: usize,
        t: Arc<Dtype>,
    },
    /// `MPI_Comm_idup`: build the communicator from the agreement's result,
    /// register it and write its handle to `newcomm`. Of an
    /// inter-communicator (`inter`: its local group's communicator and
    /// remote side) the agreement runs over its union and gives the
    /// union's duplicate and two more context ids, from which
    /// [`crate::intercomm::finish_idup`] builds the new one.
    Dup {
        pending: tmpi_comm::PendingDup,
        newcomm: usize,
        inter: Option<(tmpi_comm::Comm, Arc<crate::intercomm::Inter>)>,
    },
}

/// One request.
#[derive(Debug)]
pub(crate) enum Req {
    Pml {
        id: ReqId,
        stage: Stage,
        persist: Option<Arc<Persist>>,
        comm: c_int,
    },
    Coll {
        req: CollRequest,
        /// Boxed: the largest part of a record the table moves on every
        /// point-to-point request too.
        finish: Box<Finish>,
        comm: c_int,
        /// A started persistent collective: inactive again at completion.
        persist: Option<Arc<Persist>>,
    },
    /// Already complete (e.g. a persistent request started on PROC_NULL).
    Done {
        st: St,
        persist: Option<Arc<Persist>>,
    },
    /// A persistent request that is not active.
    Inactive(Arc<Persist>),
    /// `MPI_Grequest_start`: complete once `MPI_Grequest_complete` ran.
    Greq(crate::greq::Greq),
    /// `MPI_Isendrecv(_replace)`: a send and a receive under hidden
    /// handles, complete once both are.
    Pair(Box<Pair>),
    /// An active partitioned request (its `part` is set): complete once
    /// its round's send or receive is (`crate::partitioned`).
    Part(Arc<Persist>),
}

/// The two halves of an `MPI_Isendrecv(_replace)`.
#[derive(Debug)]
pub(crate) struct Pair {
    /// The send, then the receive.
    pub halves: [Half; 2],
    /// The packed outgoing data of `MPI_Isendrecv_replace`: the send reads
    /// it until it completes.
    #[allow(dead_code)]
    pub keep: Vec<u8>,
    pub comm: c_int,
}

/// One half of a [`Pair`].
#[derive(Debug)]
pub(crate) enum Half {
    /// Running under this hidden handle.
    Running(c_int),
    /// Complete with this status.
    Done(St),
}

impl Pair {
    /// Tests the halves still running; the receive's status (with the
    /// send's error class if only the send failed) once both completed.
    fn test(&mut self) -> Option<St> {
        for half in &mut self.halves {
            let Half::Running(h) = *half else { continue };
            let st = match test_handle(h) {
                Ok(Tested::Pending) => continue,
                Ok(Tested::Complete(s, _)) => s,
                Ok(Tested::Inactive) => St::empty(),
                // The half is gone (its handle released): its error class.
                Err(e) => {
                    let mut s = St::empty();
                    s.error = e.class;
                    s
                }
            };
            *half = Half::Done(st);
        }
        let [Half::Done(send), Half::Done(mut st)] = self.halves else {
            return None;
        };
        if st.error == C::Success {
            st.error = send.error;
        }
        Some(st)
    }
}

impl Req {
    pub(crate) fn comm(&self) -> c_int {
        match self {
            Req::Pml { comm, .. } | Req::Coll { comm, .. } => *comm,
            Req::Done { persist, .. } => persist
                .as_ref()
                .map_or(crate::state::COMM_WORLD, |p| p.comm),
            Req::Inactive(p) | Req::Part(p) => p.comm,
            Req::Greq(_) => crate::state::COMM_WORLD,
            Req::Pair(p) => p.comm,
        }
    }
}

/// Outcome of testing a request handle.
pub(crate) enum Tested {
    /// Still running.
    Pending,
    /// Complete: status; the handle was freed (`true`) or kept (inactive,
    /// or parked as completed by [`test_handle_kept`]).
    Complete(St, bool),
    /// Null or inactive persistent: empty status.
    Inactive,
}

/// Tests request `h` once (progressing), completing it if done.
pub(crate) fn test_handle(h: c_int) -> Res<Tested> {
    test_handle_opts(h, true, false)
}

/// Tests request `h` once, completing it if done; `progress`: whether the
/// test of a point-to-point request polls the transports (callers that test
/// many handles per round poll once for all of them instead).
pub(crate) fn test_handle_with(h: c_int, progress: bool) -> Res<Tested> {
    test_handle_opts(h, progress, false)
}

/// [`test_handle`] for callers that report a completion but leave the
/// request to a later call (`MPI_Testall` short of all, and
/// `MPI_Request_get_status`): a completed request stays under its handle
/// as [`Req::Done`] (its persistent part kept), never freed in between.
pub(crate) fn test_handle_kept(h: c_int) -> Res<Tested> {
    test_handle_opts(h, true, true)
}

fn test_handle_opts(h: c_int, progress: bool, keep: bool) -> Res<Tested> {
    if h == 0 {
        return Ok(Tested::Inactive);
    }
    let rt = rt()?;
    // A running point-to-point request is tested in place: its entry stays
    // in the table unless it completed (no take + put back per poll). MPI
    // forbids using one request from two threads at once, so the entry
    // cannot change between the peek and the taking below.
    let peek = match tables().reqs.get(&h) {
        Some(Req::Pml { id, .. }) => Some(*id),
        _ => None,
    };
    if let Some(id) = peek {
        let r = if progress {
            rt.pml.test(id)
        } else {
            rt.pml.test_no_progress(id)
        };
        return match r {
            Ok(None) => Ok(Tested::Pending),
            Ok(Some(s)) => {
                let req = {
                    let mut t = tables();
                    let req = t.reqs.take(&h);
                    // A plain request (not persistent, not kept) puts
                    // nothing back: its handle is freed under this lock,
                    // not under a second one per completed request.
                    let goes_back = match &req {
                        Some(Req::Pml { persist, .. }) => keep || persist.is_some(),
                        _ => false,
                    };
                    if !goes_back {
                        t.reqs.release(&h);
                    }
                    req
                };
                let Some(Req::Pml { stage, persist, .. }) = req else {
                    return Err(Error::new(
                        C::Intern,
                        format!("request handle {h} changed while being tested"),
                    ));
                };
                Ok(finish_pml(h, s, stage, persist, keep))
            }
            Err(e) => {
                // The pml no longer knows it: drop the handle, report.
                tables().reqs.remove(&h);
                Err(e.into())
            }
        };
    }
    // Anything else is taken out while tested; its handle stays reserved
    // (`ReqTable::take`), so another thread's new request cannot get it.
    let req = {
        let mut t = tables();
        match t.reqs.get(&h) {
            Some(Req::Inactive(_)) => return Ok(Tested::Inactive),
            Some(_) => t.reqs.take(&h),
            None => None,
        }
    };
    let Some(req) = req else {
        return Err(Error::new(
            C::Request,
            format!("invalid request handle {h}"),
        ));
    };
    match test_taken(rt, req) {
        Err(e) => {
            tables().reqs.release(&h);
            Err(e)
        }
        Ok(Taken::Again(back)) => {
            tables().reqs.insert(h, back);
            Ok(Tested::Pending)
        }
        Ok(Taken::Done(st, persist)) => Ok(settle(h, st, persist, keep)),
    }
}

/// What testing a taken-out request gave.
enum Taken {
    /// Still running: put this back.
    Again(Req),
    /// Complete, with the persistent part if any.
    Done(St, Option<Arc<Persist>>),
}

/// Tests a request other than a running point-to-point one, taken out of
/// the table (its handle reserved meanwhile).
fn test_taken(rt: &crate::state::Rt, req: Req) -> Res<Taken> {
    match req {
        // Tested in place by the caller; kept for completeness.
        r @ (Req::Pml { .. } | Req::Inactive(_)) => Ok(Taken::Again(r)),
        Req::Done { st, persist } => Ok(Taken::Done(st, persist)),
        Req::Greq(g) => match g.complete()? {
            Some(st) => Ok(Taken::Done(st, None)),
            None => Ok(Taken::Again(Req::Greq(g))),
        },
        Req::Pair(mut p) => match p.test() {
            Some(st) => Ok(Taken::Done(st, None)),
            None => Ok(Taken::Again(Req::Pair(p))),
        },
        Req::Part(p) => match crate::partitioned::complete(&p) {
            Some(st) => Ok(Taken::Done(st, Some(p))),
            None => Ok(Taken::Again(Req::Part(p))),
        },
        Req::Coll {
            req,
            finish,
            comm,
            persist,
        } => {
            let r = req.test();
            if !matches!(r, Ok(false)) {
                crate::state::COLL_ACTIVE.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
            if !r? {
                // Keep the other outstanding collectives moving.
                rt.coll.progress();
                return Ok(Taken::Again(Req::Coll {
                    req,
                    finish,
                    comm,
                    persist,
                }));
            }
            let out = req.wait()?;
            match *finish {
                Finish::Unpack { dst, count, t } => {
                    crate::ffi::scatter_blocks(dst as *mut u8, count, t.extent(), &t.blocks, &out)
                }
                Finish::Regions {
                    dst,
                    counts,
                    displs,
                } => {
                    for (&c, &d) in counts.iter().zip(&displs) {
                        crate::ffi::bytes_mut((dst + d) as *mut u8, c)?
                            .copy_from_slice(&out[d..d + c]);
                    }
                }
                Finish::Blocks { dst, layout } => {
                    layout.write_back(dst as *mut std::ffi::c_void, &out);
                }
                Finish::Fold {
                    dst,
                    blocks,
                    block,
                    seg,
                    elem,
                    op,
                    count,
                    t,
                } => {
                    let acc = crate::intercoll::fold(&out, blocks, block, seg, elem, &op)?;
                    crate::ffi::scatter_blocks(dst as *mut u8, count, t.extent(), &t.blocks, &acc)
                }
                Finish::Dup {
                    pending,
                    newcomm,
                    inter,
                } => match pending.step(&out)? {
                    tmpi_comm::DupStep::Done(c, ids) => {
                        let nh = match &inter {
                            None => crate::comm::register(comm, c, true)?,
                            Some((local, i)) => {
                                crate::intercomm::finish_idup(comm, local, i, c, &ids)?
                            }
                        };
                        crate::ffi::put(newcomm as *mut c_int, nh, "newcomm")?;
                    }
                    tmpi_comm::DupStep::Again(req, pending) => {
                        // Another round of the context-id agreement.
                        crate::state::COLL_ACTIVE
                            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                        let finish = Box::new(Finish::Dup {
                            pending,
                            newcomm,
                            inter,
                        });
                        return Ok(Taken::Again(Req::Coll {
                            req,
                            finish,
                            comm,
                            persist,
                        }));
                    }
                },
                Finish::Nothing => {}
            }
            Ok(Taken::Done(St::empty(), persist))
        }
    }
}

/// Settles a completed request whose handle `h` is reserved: a persistent
/// one goes back to inactive (or, `keep`, to a completed record holding
/// its persistent part), a kept one stays as a completed record, any
/// other frees its handle.
fn settle(h: c_int, st: St, persist: Option<Arc<Persist>>, keep: bool) -> Tested {
    let mut t = tables();
    if keep {
        t.reqs.insert(h, Req::Done { st, persist });
        return Tested::Complete(st, false);
    }
    match persist {
        Some(p) => {
            t.reqs.insert(h, Req::Inactive(p));
            Tested::Complete(st, false)
        }
        None => {
            t.reqs.release(&h);
            Tested::Complete(st, true)
        }
    }
}

/// Completes point-to-point request `h` (taken out of the table) whose
/// pml request finished with `s`: unpacks a staged receive, then
/// [`settle`]s it if something goes back under its handle.
fn finish_pml(
    h: c_int,
    s: Status,
    stage: Stage,
    persist: Option<Arc<Persist>>,
    keep: bool,
) -> Tested {
    let st = St::from(s);
    if let Stage::Recv(r) = &stage {
        let RecvStage { buf, dst, count, t } = &**r;
        let n = st.bytes.min(buf.len());
        crate::ffi::scatter_blocks(*dst as *mut u8, *count, t.extent(), &t.blocks, &buf[..n]);
    }
    if !keep && persist.is_none() {
        // Its handle was freed when it was taken out.
        return Tested::Complete(st, true);
    }
    settle(h, st, persist, keep)
}

/// Between two polls of a waiting call: progresses orphaned requests and
/// non-blocking collectives, and yields when ranks share cores. Busy ranks
/// poll again at once, without a `spin_loop` hint: the EPYC's `pause`
/// delays noticing the peer (the pml's own wait dropped it for the same
/// reason, docs/pml.md; here it was 7% of a 64-byte `MPI_Waitall` window).
pub(crate) fn idle() {
    if let Ok(rt) = rt() {
        if crate::state::ORPHANS.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            let orphans = std::mem::take(&mut tables().orphans);
            for h in orphans {
                match test_handle(h) {
                    Ok(Tested::Pending) => {
                        tables().orphans.push(h);
                        continue;
                    }
                    Ok(Tested::Complete(_, true)) | Err(_) => {}
                    Ok(_) => {
                        // A freed persistent request went back to inactive
                        // under its hidden handle: free it for good.
                        let r = tables().reqs.remove(&h);
                        if let Some(
                            Req::Inactive(p)
                            | Req::Done {
                                persist: Some(p), ..
                            },
                        ) = r
                        {
                            p.release();
                        }
                    }
                }
                crate::state::ORPHANS.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
            }
        }
        if crate::state::COLL_ACTIVE.load(std::sync::atomic::Ordering::Relaxed) > 0 {
            rt.coll.progress();
        }
        if rt.pml.yields_when_idle() {
            std::thread::yield_now();
        }
    }
}

/// Waits for request `h`.
pub(crate) fn wait_handle(h: c_int) -> Res<(St, bool)> {
    loop {
        match test_handle(h)? {
            Tested::Pending => idle(),
            Tested::Complete(st, freed) => return Ok((st, freed)),
            Tested::Inactive => return Ok((St::empty(), false)),
        }
    }
}

/// The error a completed status carries.
pub(crate) fn status_err(st: &St, what: &str) -> Res<()> {
    if st.error != C::Success {
        let msg = match st.error {
            C::Truncate => format!(
                "{what}: message truncated ({} bytes fit the buffer)",
                st.bytes
            ),
            c => format!("{what}: {}", c.message()),
        };
        return Err(Error::new(st.error, msg));
    }
    Ok(())
}
