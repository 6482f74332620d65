//! The MPI owner and communicators.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tmpi_pml::raw::{RawBuf, RawBufMut};
use tmpi_pml::{Pml, SendMode, ANY_SOURCE, ANY_TAG, CTX_SELF, CTX_WORLD, PROC_NULL, TAG_UB};

use crate::coll::{CollHandle, CollSlot};
use crate::datatype::{bytes, bytes_mut, Equivalence};
use crate::error::{check, Error};
use crate::request::{Message, Request, Scope, Status};
use crate::MpiErrorClass;

static INITIALIZED: AtomicBool = AtomicBool::new(false);

/// The initialised MPI library of this process. Dropping it finalizes MPI
/// (completes outstanding traffic, synchronises with every peer, releases
/// the transports). Communicators used after that fail or hang: keep the
/// owner alive for as long as you communicate.
pub struct Mpi {
    pml: Arc<Pml>,
    coll: Arc<CollSlot>,
}

impl std::fmt::Debug for Mpi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Mpi")
            .field("rank", &self.pml.rank())
            .field("size", &self.pml.size())
            .finish()
    }
}

impl Mpi {
    pub(crate) fn init() -> Result<Mpi, Error> {
        if INITIALIZED.swap(true, Ordering::AcqRel) {
            return Err(Error::new(
                MpiErrorClass::Other,
                "MPI is already initialised in this process (and cannot be re-initialised)",
            ));
        }
        // No parameters of its own; coll's are registered by `start`
        // (coll opens on first use, `crate::coll`).
        let pml = crate::runtime::start(|_| Ok::<(), Error>(()))?;
        Ok(Mpi {
            pml,
            coll: Arc::new(CollSlot::new()),
        })
    }

    /// `MPI_COMM_WORLD`.
    pub fn world(&self) -> Comm {
        Comm::new(
            self.pml.clone(),
            CTX_WORLD,
            CollHandle::World(self.coll.clone()),
        )
    }

    /// `MPI_COMM_SELF`.
    pub fn self_comm(&self) -> Comm {
        Comm::new(
            self.pml.clone(),
            CTX_SELF,
            CollHandle::SelfComm(self.coll.clone()),
        )
    }

    /// Attaches `bytes` bytes of space for buffered sends
    /// (`MPI_Buffer_attach`; the pml keeps its own copies and accounts
    /// them, `BSEND_OVERHEAD` per message, against this size).
    pub fn buffer_attach(&self, bytes: usize) -> Result<(), Error> {
        Ok(self.pml.buffer_attach(bytes)?)
    }

    /// Waits for every buffered send to complete and detaches the space
    /// (`MPI_Buffer_detach`); returns its size.
    pub fn buffer_detach(&self) -> Result<usize, Error> {
        Ok(self.pml.buffer_detach()?)
    }

    /// Seconds since an arbitrary point (`MPI_Wtime`).
    pub fn wtime(&self) -> f64 {
        static T0: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();
        T0.get_or_init(std::time::Instant::now)
            .elapsed()
            .as_secs_f64()
    }

    /// A point-to-point handle on a communicator that a layer built on top
    /// (coll's dup/split/create) registered with the pml under context id
    /// `ctx`; an error (`MPI_ERR_COMM` class) when no such context exists.
    /// Its collectives other than [`Comm::barrier`] are `MPI_ERR_COMM`: run
    /// them on the layer's own handle.
    pub fn comm_for_context(&self, ctx: u32) -> Result<Comm, Error> {
        let (rank, size) = self.pml.comm_rank_size(ctx)?;
        Ok(Comm {
            pml: self.pml.clone(),
            ctx,
            rank,
            size,
            coll: CollHandle::None,
        })
    }

    /// The pml (for layers built on top: coll, the C API).
    pub fn pml(&self) -> &Arc<Pml> {
        &self.pml
    }

    /// Pml counters (eager/rendezvous/unexpected/out-of-order).
    pub fn stats(&self) -> tmpi_pml::Stats {
        self.pml.stats()
    }
}

impl Drop for Mpi {
    /// Finalizes MPI. While unwinding from a panic it does not: finalize
    /// synchronises with every peer, which would hang the job; exiting
    /// without finalize makes the launcher end the job instead.
    fn drop(&mut self) {
        if std::thread::panicking() {
            self.pml.abandon();
            return;
        }
        if let Err(e) = self.pml.finalize() {
            eprintln!("tmpi: finalize failed: {e}");
        }
    }
}

/// A communicator: a context id plus this process's rank and the size.
#[derive(Clone)]
pub struct Comm {
    pml: Arc<Pml>,
    ctx: u32,
    rank: i32,
    size: i32,
    pub(crate) coll: CollHandle,
}

impl std::fmt::Debug for Comm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Comm")
            .field("ctx", &self.ctx)
            .field("rank", &self.rank)
            .field("size", &self.size)
            .finish()
    }
}

fn send_tag(tag: i32) -> Result<(), Error> {
    if !(0..=TAG_UB).contains(&tag) {
        return Err(Error::new(
            MpiErrorClass::Tag,
            format!("tag {tag} outside 0..={TAG_UB}"),
        ));
    }
    Ok(())
}

fn recv_tag(tag: i32) -> Result<(), Error> {
    if tag == ANY_TAG {
        return Ok(());
    }
    send_tag(tag)
}

impl Comm {
    fn new(pml: Arc<Pml>, ctx: u32, coll: CollHandle) -> Comm {
        let (rank, size) = pml.comm_rank_size(ctx).expect("predefined communicator");
        Comm {
            pml,
            ctx,
            rank,
            size,
            coll,
        }
    }

    /// A handle on a communicator coll created (dup, split).
    pub(crate) fn from_coll(pml: Arc<Pml>, c: tmpi_comm::Comm) -> Comm {
        Comm {
            pml,
            ctx: c.context_id(),
            rank: c.rank() as i32,
            size: c.size() as i32,
            coll: CollHandle::Made(c),
        }
    }

    pub(crate) fn pml_handle(&self) -> &Arc<Pml> {
        &self.pml
    }

    /// This process's rank.
    pub fn rank(&self) -> i32 {
        self.rank
    }

    /// Number of ranks.
    pub fn size(&self) -> i32 {
        self.size
    }

    /// The context id (for layers built on top).
    pub fn context_id(&self) -> u32 {
        self.ctx
    }

    fn dest_ok(&self, dest: i32) -> Result<(), Error> {
        if dest == PROC_NULL || (0..self.size).contains(&dest) {
            Ok(())
        } else {
            Err(Error::new(
                MpiErrorClass::Rank,
                format!("rank {dest} outside 0..{}", self.size),
            ))
        }
    }

    fn src_ok(&self, src: i32) -> Result<(), Error> {
        if src == ANY_SOURCE {
            Ok(())
        } else {
            self.dest_ok(src)
        }
    }

    fn send_mode<T: Equivalence>(
        &self,
        buf: &[T],
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<(), Error> {
        send_tag(tag)?;
        self.dest_ok(dest)?;
        let b = bytes(buf);
        // SAFETY: `b` is borrowed for the whole blocking call.
        let st = unsafe {
            self.pml
                .send_blocking(self.ctx, dest, tag, RawBuf::from_slice(b), mode)
        }?;
        check(st).map(drop)
    }

    /// Standard-mode blocking send (`MPI_Send`).
    pub fn send<T: Equivalence>(&self, buf: &[T], dest: i32, tag: i32) -> Result<(), Error> {
        self.send_mode(buf, dest, tag, SendMode::Standard)
    }

    /// Synchronous send (`MPI_Ssend`): returns once the receiver matched.
    pub fn ssend<T: Equivalence>(&self, buf: &[T], dest: i32, tag: i32) -> Result<(), Error> {
        self.send_mode(buf, dest, tag, SendMode::Synchronous)
    }

    /// Ready send (`MPI_Rsend`): the receive must already be posted.
    pub fn rsend<T: Equivalence>(&self, buf: &[T], dest: i32, tag: i32) -> Result<(), Error> {
        self.send_mode(buf, dest, tag, SendMode::Ready)
    }

    /// Buffered send (`MPI_Bsend`): copies into the attached buffer space
    /// and returns; `MPI_ERR_BUFFER` when it does not fit.
    pub fn bsend<T: Equivalence>(&self, buf: &[T], dest: i32, tag: i32) -> Result<(), Error> {
        send_tag(tag)?;
        self.dest_ok(dest)?;
        let b = bytes(buf);
        // SAFETY: buffered: the data is copied during the call.
        let id = unsafe {
            self.pml.isend(
                self.ctx,
                dest,
                tag,
                RawBuf::from_slice(b),
                SendMode::Buffered,
            )
        }?;
        // The returned request is complete already (the copy is sent by an
        // internal request).
        self.pml.wait(id)?;
        Ok(())
    }

    /// Blocking receive (`MPI_Recv`); `src` may be `ANY_SOURCE`, `tag`
    /// `ANY_TAG`.
    pub fn recv<T: Equivalence>(&self, buf: &mut [T], src: i32, tag: i32) -> Result<Status, Error> {
        recv_tag(tag)?;
        self.src_ok(src)?;
        let b = bytes_mut(buf);
        // SAFETY: `b` is exclusively borrowed for the whole blocking call.
        let st = unsafe {
            self.pml
                .recv_blocking(self.ctx, src, tag, RawBufMut::from_slice(b))
        }?;
        check(st)
    }

    fn isend_mode<'s, T: Equivalence>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: i32,
        tag: i32,
        mode: SendMode,
    ) -> Result<Request<'s>, Error> {
        send_tag(tag)?;
        self.dest_ok(dest)?;
        let b = bytes(buf);
        // SAFETY: `b` is borrowed for the scope, which waits for the request
        // before it ends.
        let id = unsafe {
            self.pml
                .isend(self.ctx, dest, tag, RawBuf::from_slice(b), mode)
        }?;
        Ok(scope.register(&self.pml, id))
    }

    /// Non-blocking standard send (`MPI_Isend`).
    pub fn isend<'s, T: Equivalence>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: i32,
        tag: i32,
    ) -> Result<Request<'s>, Error> {
        self.isend_mode(scope, buf, dest, tag, SendMode::Standard)
    }

    /// Non-blocking synchronous send (`MPI_Issend`).
    pub fn issend<'s, T: Equivalence>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s [T],
        dest: i32,
        tag: i32,
    ) -> Result<Request<'s>, Error> {
        self.isend_mode(scope, buf, dest, tag, SendMode::Synchronous)
    }

    /// Non-blocking receive (`MPI_Irecv`).
    pub fn irecv<'s, T: Equivalence>(
        &self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
        src: i32,
        tag: i32,
    ) -> Result<Request<'s>, Error> {
        recv_tag(tag)?;
        self.src_ok(src)?;
        let b = bytes_mut(buf);
        // SAFETY: `b` is borrowed for the scope, which waits for the request
        // before it ends.
        let id = unsafe { self.pml.irecv(self.ctx, src, tag, RawBufMut::from_slice(b)) }?;
        Ok(scope.register(&self.pml, id))
    }

    /// Send and receive at once (`MPI_Sendrecv`), deadlock-free.
    pub fn sendrecv<S: Equivalence, R: Equivalence>(
        &self,
        sbuf: &[S],
        dest: i32,
        stag: i32,
        rbuf: &mut [R],
        src: i32,
        rtag: i32,
    ) -> Result<Status, Error> {
        crate::request::scope(|s| {
            let r = self.irecv(s, rbuf, src, rtag)?;
            let q = self.isend(s, sbuf, dest, stag)?;
            let st = r.wait();
            q.wait()?;
            st
        })
    }

    /// Waits for a matching message without receiving it (`MPI_Probe`).
    pub fn probe(&self, src: i32, tag: i32) -> Result<Status, Error> {
        recv_tag(tag)?;
        self.src_ok(src)?;
        Ok(self.pml.probe(self.ctx, src, tag)?.into())
    }

    /// Checks for a matching message (`MPI_Iprobe`).
    pub fn iprobe(&self, src: i32, tag: i32) -> Result<Option<Status>, Error> {
        recv_tag(tag)?;
        self.src_ok(src)?;
        Ok(self.pml.iprobe(self.ctx, src, tag)?.map(Status::from))
    }

    /// Waits for a matching message and takes it out of matching
    /// (`MPI_Mprobe`); only the returned [`Message`] can receive it.
    pub fn mprobe(&self, src: i32, tag: i32) -> Result<(Message, Status), Error> {
        recv_tag(tag)?;
        self.src_ok(src)?;
        if src == PROC_NULL {
            return Err(Error::new(MpiErrorClass::Rank, "mprobe from MPI_PROC_NULL"));
        }
        let (m, st) = self.pml.mprobe(self.ctx, src, tag)?;
        Ok((Message::new(self.pml.clone(), m, st.count), st.into()))
    }

    /// Non-blocking [`Comm::mprobe`] (`MPI_Improbe`).
    pub fn improbe(&self, src: i32, tag: i32) -> Result<Option<(Message, Status)>, Error> {
        recv_tag(tag)?;
        self.src_ok(src)?;
        if src == PROC_NULL {
            return Err(Error::new(MpiErrorClass::Rank, "mprobe from MPI_PROC_NULL"));
        }
        Ok(self
            .pml
            .improbe(self.ctx, src, tag)?
            .map(|(m, st)| (Message::new(self.pml.clone(), m, st.count), st.into())))
    }

    /// A barrier over point-to-point (dissemination algorithm, on the
    /// reserved internal tag -2), on every handle, also those of
    /// [`Mpi::comm_for_context`]; the other collectives go through coll
    /// (`src/coll.rs`).
    pub fn barrier(&self) -> Result<(), Error> {
        let n = self.size;
        let mut k = 1;
        while k < n {
            let to = (self.rank + k) % n;
            let from = (self.rank - k).rem_euclid(n);
            let mut b = [0u8; 0];
            // SAFETY: both buffers live until the waits return.
            let s = unsafe {
                self.pml.isend(
                    self.ctx,
                    to,
                    BARRIER_TAG,
                    RawBuf::from_slice(&[]),
                    SendMode::Standard,
                )
            }?;
            // SAFETY: `b` (empty) lives until the wait below returns.
            let r = unsafe {
                self.pml
                    .irecv(self.ctx, from, BARRIER_TAG, RawBufMut::from_slice(&mut b))
            }?;
            self.pml.wait(r)?;
            self.pml.wait(s)?;
            k *= 2;
        }
        Ok(())
    }
}

/// Internal tag of [`Comm::barrier`] (negative: never matched by ANY_TAG).
const BARRIER_TAG: i32 = -2;
