//! Generalized requests (`MPI_Grequest_start`, `MPI_Grequest_complete`): a
//! request whose operation the application runs; MPI's waits and tests see
//! it complete once `MPI_Grequest_complete` was called, then call its query
//! callback for the status and its free callback, in that order.

use std::ffi::{c_int, c_void};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::put;
use crate::request::{Req, St};
use crate::state::{tables, COMM_WORLD};

/// One generalized request: the callbacks, their state, and whether
/// `MPI_Grequest_complete` was called (shared with `Tables::greqs`, which
/// finds it while a waiting thread has the request taken out).
#[derive(Debug, Clone)]
pub(crate) struct Greq {
    query: Option<crate::GreqQueryFn>,
    free: Option<crate::GreqFreeFn>,
    cancel: Option<crate::GreqCancelFn>,
    extra: usize,
    done: Arc<AtomicBool>,
}

/// A callback's error code as an error of the call that ran it.
fn callback_error(what: &str, rc: c_int) -> Error {
    Error::callback(
        rc,
        format!("generalized request {what} callback returned {rc}"),
    )
}

impl Greq {
    /// Once completed: the query callback's status, then the free
    /// callback (both run even when the first fails; the first failure is
    /// the error). `None` while the application has not completed it.
    pub(crate) fn complete(&self) -> Res<Option<St>> {
        if !self.done.load(Ordering::Acquire) {
            return Ok(None);
        }
        let mut st = St::empty();
        let mut err = None;
        if let Some(q) = self.query {
            let (rc, s) = crate::ffi::call_greq_query(q, self.extra, st.to_c());
            if rc != 0 {
                err = Some(callback_error("query", rc));
            }
            st = St {
                source: s.source,
                tag: s.tag,
                bytes: crate::request::status_bytes(&s) as usize,
                error: C::from_raw(s.error).unwrap_or(C::Other),
                cancelled: s.count_hi_and_cancelled & 1 != 0,
            };
        }
        if let Some(f) = self.free {
            let rc = crate::ffi::call_greq_free(f, self.extra);
            if rc != 0 && err.is_none() {
                err = Some(callback_error("free", rc));
            }
        }
        tables().greqs.retain(|_, d| !Arc::ptr_eq(d, &self.done));
        match err {
            Some(e) => Err(e),
            None => Ok(Some(st)),
        }
    }

    /// `MPI_Cancel`: the cancel callback, told whether the request is
    /// already complete.
    pub(crate) fn cancel(&self) -> Res<()> {
        if let Some(f) = self.cancel {
            let rc = crate::ffi::call_greq_cancel(f, self.extra, self.done.load(Ordering::Acquire));
            if rc != 0 {
                return Err(callback_error("cancel", rc));
            }
        }
        Ok(())
    }
}

#[no_mangle]
pub extern "C" fn MPI_Grequest_start(
    query: Option<crate::GreqQueryFn>,
    free: Option<crate::GreqFreeFn>,
    cancel: Option<crate::GreqCancelFn>,
    extra: *mut c_void,
    request: *mut c_int,
) -> c_int {
    guard("MPI_Grequest_start", COMM_WORLD, || {
        crate::ffi::out_arg(request, "request")?;
        let done = Arc::new(AtomicBool::new(false));
        let g = Greq {
            query,
            free,
            cancel,
            extra: extra as usize,
            done: Arc::clone(&done),
        };
        let mut t = tables();
        let h = t.add_req(Req::Greq(g));
        t.greqs.insert(h, done);
        drop(t);
        put(request, h, "request")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Grequest_complete(request: c_int) -> c_int {
    guard("MPI_Grequest_complete", COMM_WORLD, || {
        let done = tables().greqs.get(&request).cloned().ok_or_else(|| {
            Error::new(
                C::Request,
                format!("{request} is not a generalized request"),
            )
        })?;
        done.store(true, Ordering::Release);
        Ok(())
    })
}
