//! The libibverbs provider: a safe layer over rdma-core's `libibverbs`, loaded
//! at run time.
//!
//! * `sys` — bindgen declarations of rdma-core 44's `verbs.h` and
//!   `tm_types.h` (types and constants; regenerate with `regen.sh`).
//! * `loader` — `dlopen("libibverbs.so.1")`; without it every entry point
//!   returns [`IbvError::LibraryNotFound`] ("libibverbs not found").
//! * `inline` — line-by-line transcriptions of the `static inline` verbs
//!   (`verbs_get_ctx_op` dispatch with its size check).
//! * Safe objects in the style of rust-ibverbs: each holds an `Arc` to its
//!   parent ([`Context`] ← [`ProtectionDomain`] ← [`MemoryRegion`],
//!   [`SharedReceiveQueue`], [`QueuePair`]; [`CompletionQueue`] ← [`Context`]),
//!   destroys itself in `Drop` (logging, never panicking, on failure), and
//!   posting buffers to the NIC is `unsafe` with a `# Safety` contract.
//!
//! The bindings describe x86_64 Linux; on other targets
//! [`Library::load`] returns [`IbvError::UnsupportedPlatform`].

#[allow(
    non_camel_case_types,
    non_snake_case,
    non_upper_case_globals,
    dead_code,
    missing_docs,
    unsafe_op_in_unsafe_fn,
    clippy::all
)]
pub mod sys;

mod cq;
mod device;
mod error;
mod inline;
mod loader;
mod pd;
mod provider;
mod qp;
mod srq;
#[cfg(test)]
mod tests;

pub use cq::{Completion, CompletionQueue, TmInfo, WcOp, WcStatus};
pub use device::{
    device_names, list_devices_with_caps, mtu_bytes, Context, DeviceAttr, DeviceSummary, Gid,
    GidEntry, GidType, LinkLayer, PortAttr, PortState, TmCaps,
};
pub use error::{IbvError, Result};
pub use loader::{Library, DEFAULT_LIBRARY, LIBRARY_ENV};
pub use pd::{Access, MemoryRegion, ProtectionDomain, RawMemoryRegion, Sge};
pub use provider::{IbvContext, IbvCq, IbvMr, IbvPd, IbvProvider, IbvQp, IbvSrq};
pub use qp::{ConnectParams, QpCaps, QpEndpoint, QpState, QueuePair, SendOp, SendRequest};
pub use srq::{RecvRequest, SharedReceiveQueue, TmOp, TmOpKind};
