//! Non-blocking requests, their scope, statuses and matched messages.
//!
//! # Why a scope
//! A request lets the library write into (or read from) a buffer after the
//! call that started it returned. Safe Rust must then guarantee the buffer
//! outlives the operation even if the request is leaked with
//! `mem::forget`, which skips destructors. So requests live in a [`scope`]
//! (the pattern of `std::thread::scope`): buffers must be borrowed for the
//! scope's whole lifetime, which ends only after the scope has waited for
//! every request still in flight. Dropping a request cancels it if it is a
//! receive that has not matched, and waits for it.
//! At the end of a scope, receives still in flight are first cancelled
//! (if they have not matched), sends are waited for.

use rustc_hash::FxHashSet;
use std::cell::RefCell;
use std::marker::PhantomData;
use std::sync::Arc;

use tmpi_pml::{MessageId, Pml, ReqId};

use crate::datatype::Equivalence;
use crate::error::{check, Error};

/// What a completed receive (or a probe) reports (`MPI_Status`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Status {
    source: i32,
    tag: i32,
    bytes: usize,
    cancelled: bool,
}

impl From<tmpi_pml::Status> for Status {
    fn from(s: tmpi_pml::Status) -> Self {
        Status {
            source: s.source,
            tag: s.tag,
            bytes: s.count,
            cancelled: s.cancelled,
        }
    }
}

impl Status {
    /// Rank of the sender in the communicator (`PROC_NULL` for a receive
    /// from it).
    pub fn source(&self) -> i32 {
        self.source
    }
    /// The message's tag.
    pub fn tag(&self) -> i32 {
        self.tag
    }
    /// Bytes received (probes: the message's length).
    pub fn bytes(&self) -> usize {
        self.bytes
    }
    /// Elements of `T` received (`MPI_Get_count`), rounded down.
    pub fn count<T: Equivalence>(&self) -> usize {
        self.bytes / std::mem::size_of::<T>().max(1)
    }
    /// Whether the operation was cancelled.
    pub fn cancelled(&self) -> bool {
        self.cancelled
    }
}

pub(crate) struct ScopeState {
    pml: RefCell<Option<Arc<Pml>>>,
    live: RefCell<FxHashSet<ReqId>>,
}

impl ScopeState {
    fn finish(&self) {
        let pml = self.pml.borrow().clone();
        let Some(pml) = pml else { return };
        let ids: Vec<ReqId> = self.live.borrow_mut().drain().collect();
        for &id in &ids {
            let _ = pml.cancel(id);
        }
        for id in ids {
            let _ = pml.wait(id);
        }
    }
}

/// The region in which requests and their borrowed buffers live; see the
/// module documentation. Created by [`scope`].
pub struct Scope<'scope, 'env: 'scope> {
    state: ScopeState,
    _scope: PhantomData<&'scope mut &'scope ()>,
    _env: PhantomData<&'env mut &'env ()>,
}

/// Runs `f` with a [`Scope`] for non-blocking operations; when `f` returns
/// (or panics), every request still in flight is cancelled if it is an
/// unmatched receive and waited for.
pub fn scope<'env, F, R>(f: F) -> R
where
    F: for<'scope> FnOnce(&'scope Scope<'scope, 'env>) -> R,
{
    struct Guard<'a, 'b>(&'a Scope<'a, 'b>);
    impl Drop for Guard<'_, '_> {
        fn drop(&mut self) {
            self.0.state.finish();
        }
    }
    let s = Scope {
        state: ScopeState {
            pml: RefCell::new(None),
            live: RefCell::new(FxHashSet::default()),
        },
        _scope: PhantomData,
        _env: PhantomData,
    };
    let g = Guard(&s);
    let r = f(g.0);
    drop(g);
    r
}

impl<'scope> Scope<'scope, '_> {
    pub(crate) fn register(&'scope self, pml: &Arc<Pml>, id: ReqId) -> Request<'scope> {
        {
            let mut p = self.state.pml.borrow_mut();
            if p.is_none() {
                *p = Some(pml.clone());
            }
        }
        self.state.live.borrow_mut().insert(id);
        Request {
            id: Some(id),
            pml: pml.clone(),
            scope: &self.state,
        }
    }
}

/// An operation in flight (`MPI_Request`), borrowing its buffer for the
/// scope `'s`. Consumed by [`Request::wait`] / [`Request::test`]; dropping
/// it cancels an unmatched receive and waits for anything else.
#[must_use = "a request must be waited for; dropping it cancels or blocks"]
pub struct Request<'s> {
    id: Option<ReqId>,
    pml: Arc<Pml>,
    scope: &'s ScopeState,
}

impl std::fmt::Debug for Request<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Request").field("id", &self.id).finish()
    }
}

impl<'s> Request<'s> {
    fn forget_id(&mut self) -> Option<ReqId> {
        let id = self.id.take()?;
        self.scope.live.borrow_mut().remove(&id);
        Some(id)
    }

    /// Waits for completion (`MPI_Wait`).
    pub fn wait(mut self) -> Result<Status, Error> {
        let id = self.id.expect("live request");
        let r = self.pml.wait(id);
        self.forget_id();
        check(r?)
    }

    /// Completes the request if it is done (`MPI_Test`); otherwise gives it
    /// back.
    pub fn test(mut self) -> Result<Result<Status, Error>, Request<'s>> {
        let id = self.id.expect("live request");
        match self.pml.test(id) {
            Ok(Some(s)) => {
                self.forget_id();
                Ok(check(s))
            }
            Ok(None) => Err(self),
            Err(e) => {
                self.forget_id();
                Ok(Err(e.into()))
            }
        }
    }

    /// Asks for cancellation (`MPI_Cancel`): `true` if a receive was
    /// cancelled before matching; sends are never cancelled. The request
    /// must still be waited for; its status then says `cancelled()`.
    pub fn cancel(&self) -> Result<bool, Error> {
        let id = self.id.expect("live request");
        Ok(self.pml.cancel(id)?)
    }

    /// Waits for all (`MPI_Waitall`); the first error is returned after all
    /// completed.
    pub fn wait_all(reqs: Vec<Request<'s>>) -> Result<Vec<Status>, Error> {
        let Some(pml) = reqs.first().map(|r| r.pml.clone()) else {
            return Ok(Vec::new());
        };
        let mut reqs = reqs;
        let mut ids: Vec<Option<ReqId>> = reqs.iter().map(|r| r.id).collect();
        // On error the requests stay tracked: their drop (or the scope)
        // still waits for them.
        let st = pml.waitall(&mut ids)?;
        for r in reqs.iter_mut() {
            r.forget_id();
        }
        let mut out = Vec::with_capacity(st.len());
        let mut first_err = None;
        for s in st {
            match check(s) {
                Ok(s) => out.push(s),
                Err(e) => {
                    out.push(*e.status().expect("status"));
                    first_err.get_or_insert(e);
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok(out),
        }
    }

    /// Waits for any one (`MPI_Waitany`): its index and result; the slot
    /// becomes `None`. `None` when every slot is empty.
    pub fn wait_any(reqs: &mut [Option<Request<'s>>]) -> Option<(usize, Result<Status, Error>)> {
        loop {
            if let Some(r) = Self::test_any(reqs) {
                return Some(r);
            }
            let pml = reqs.iter().flatten().next()?.pml.clone();
            pml.progress();
            if pml.yields_when_idle() {
                std::thread::yield_now();
            }
        }
    }

    /// Completes any one that is done (`MPI_Testany`).
    pub fn test_any(reqs: &mut [Option<Request<'s>>]) -> Option<(usize, Result<Status, Error>)> {
        let pml = reqs.iter().flatten().next()?.pml.clone();
        let mut ids: Vec<Option<ReqId>> =
            reqs.iter().map(|r| r.as_ref().and_then(|r| r.id)).collect();
        match pml.testany(&mut ids) {
            Ok(Some((Some(i), s))) => {
                let mut r = reqs[i].take().expect("slot");
                r.forget_id();
                Some((i, check(s)))
            }
            Ok(_) => None,
            Err(e) => Some((usize::MAX, Err(e.into()))),
        }
    }

    /// Completes every request that is done (`MPI_Testsome`), waiting until
    /// at least one is (`MPI_Waitsome`) when `block`.
    pub fn some(
        reqs: &mut [Option<Request<'s>>],
        block: bool,
    ) -> Vec<(usize, Result<Status, Error>)> {
        let Some(pml) = reqs.iter().flatten().next().map(|r| r.pml.clone()) else {
            return Vec::new();
        };
        let mut ids: Vec<Option<ReqId>> =
            reqs.iter().map(|r| r.as_ref().and_then(|r| r.id)).collect();
        let done = if block {
            pml.waitsome(&mut ids)
        } else {
            pml.testsome(&mut ids)
        };
        match done {
            Ok(v) => v
                .into_iter()
                .map(|(i, s)| {
                    let mut r = reqs[i].take().expect("slot");
                    r.forget_id();
                    (i, check(s))
                })
                .collect(),
            Err(e) => vec![(usize::MAX, Err(e.into()))],
        }
    }
}

impl Drop for Request<'_> {
    /// A dropped request is abandoned: a receive that has not matched is
    /// cancelled, anything else is waited for, so the buffer is free when
    /// the drop returns.
    fn drop(&mut self) {
        if let Some(id) = self.id {
            let _ = self.pml.cancel(id);
            let _ = self.pml.wait(id);
            self.forget_id();
        }
    }
}

/// A message taken out of matching by a matched probe (`MPI_Message`);
/// receive it with [`Message::recv`]. Dropping it unreceived receives and
/// discards it, so the sender is never left waiting.
pub struct Message {
    id: Option<MessageId>,
    bytes: usize,
    pml: Arc<Pml>,
}

impl std::fmt::Debug for Message {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Message")
            .field("bytes", &self.bytes)
            .finish()
    }
}

impl Message {
    pub(crate) fn new(pml: Arc<Pml>, id: MessageId, bytes: usize) -> Self {
        Message {
            id: Some(id),
            bytes,
            pml,
        }
    }

    /// Length of the message in bytes.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    /// Receives the message into `buf` (`MPI_Mrecv`).
    pub fn recv<T: Equivalence>(mut self, buf: &mut [T]) -> Result<Status, Error> {
        let id = self.id.take().expect("live message");
        let b = crate::datatype::bytes_mut(buf);
        // SAFETY: `b` is exclusively borrowed until the wait below returns.
        let r = unsafe { self.pml.imrecv(id, tmpi_pml::raw::RawBufMut::from_slice(b)) }?;
        check(self.pml.wait(r)?)
    }

    /// Starts receiving the message into `buf` (`MPI_Imrecv`).
    pub fn irecv<'s, T: Equivalence>(
        mut self,
        scope: &'s Scope<'s, '_>,
        buf: &'s mut [T],
    ) -> Result<Request<'s>, Error> {
        let id = self.id.take().expect("live message");
        let b = crate::datatype::bytes_mut(buf);
        // SAFETY: `b` is borrowed for the scope, which waits for the request
        // before it ends (see the module documentation).
        let r = unsafe { self.pml.imrecv(id, tmpi_pml::raw::RawBufMut::from_slice(b)) }?;
        Ok(scope.register(&self.pml, r))
    }
}

impl Drop for Message {
    fn drop(&mut self) {
        if let Some(id) = self.id.take() {
            let mut sink = vec![0u8; self.bytes];
            // SAFETY: `sink` lives until the wait returns.
            if let Ok(r) = unsafe {
                self.pml
                    .imrecv(id, tmpi_pml::raw::RawBufMut::from_slice(&mut sink))
            } {
                let _ = self.pml.wait(r);
            }
        }
    }
}
