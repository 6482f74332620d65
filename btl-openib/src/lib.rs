//! tmpi-btl-openib: the byte-transfer layer over RDMA verbs (InfiniBand,
//! RoCE including rxe, and the soft NIC `tmsoft0`), with hardware tag
//! matching offload when the device has it.
//!
//! - [`OpenibComponent`] / [`OpenibBtl`]: the generic `tmpi-btl` interface
//!   (fragments with a one-byte tag, registered regions, blocking get).
//! - [`component`]: the component (disqualifies itself when libibverbs or an
//!   active port is missing), module selection (`btl_openib_if_include` /
//!   `_if_exclude`), modex wire-up.
//! - [`Module`]: one per active port: SRQ (or TM-SRQ) of untagged buffers,
//!   one RC QP per peer, eager / rendezvous / FIN / generic fragments, RDMA
//!   read, progress into [`Event`]s.
//! - the tag capability of the BTL interface (`tmpi_btl::TagOffload`, in
//!   `tag_offload.rs`): tagged sends, the NIC's list (TAG_ADD/DEL/SYNC) with
//!   the tagged-buffer bookkeeping, and the TM completions as
//!   `tmpi_btl::TagEvent`s; the module's own list operations are in `tm`.
//!   What a 64-bit tag means is the pml's (its match header).
//! - [`rcache`]: the bounded registration cache.
//! - [`addr`]: the modex value layout.
//!
//! Logging goes through `tracing` with target `btl_openib`. Design notes and
//! limits: `docs/btl-openib.md`.

pub mod addr;
pub mod btl_impl;
mod buf;
pub mod component;
pub mod config;
pub mod dirmodex;
pub mod error;
pub mod module;
pub mod rcache;
mod tag_offload;
pub mod tm;

pub use btl_impl::{OpenibBtl, OpenibComponent};
pub use buf::{FragKind, RecvFrag};
pub use component::{init, open_modules, probe, register, wire_up, Btl, COMPONENT};
pub use config::OpenibConfig;
pub use error::{OpenibError, Result};
pub use module::{
    tm_list_ops, Event, Module, ModuleStats, Op, TmEvent, FIN_ERROR_LEN, MAX_RECV_ID, MAX_RNDV_LEN,
    TM_MIN_UNTAGGED,
};
pub use rcache::{Reg, RegCache};
pub use tag_offload::{eager_app_ctx, eager_header_len, EAGER_APP_CTX};
pub use tm::TmHandle;
pub use tmpi_verbs::wire::{Rvh, Tmh, TmhOpcode, RVH_LEN, TMH_LEN};
