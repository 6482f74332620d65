//! The [`Transport`] over the real BTLs: opening the components allowed by
//! the `btl` selection list, wire-up through the modex, and per-peer
//! selection by exclusivity (Open MPI's bml, reduced to one module per
//! peer: no striping on one node).
//!
//! Wire-up: every allowed component's `init` publishes its addresses →
//! one modex fence → `add_procs(all ranks)` on every module → the module
//! with the highest exclusivity per peer (`tmpi_btl::select`). No second
//! fence: btl-sm unlinks its segment once every peer attached (counted in
//! the segment). A rank no module reaches is an init error naming the rank
//! and the selection.
//!
//! All pml fragments use BTL tag [`BTL_TAG_PML`]; the pml's own header
//! says what the fragment is.

use std::collections::HashMap;

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, SelectionList};
use tmpi_base::modex::Modex;
use tmpi_btl::{BtlComponent, BtlError, BtlFlags, BtlModule, RemoteRegion};

use crate::core::Limits;
use crate::hdr::{FRAG_LEN, MATCH_LEN};
use crate::raw::{RawBuf, RawBufMut};
use crate::transport::{Transport, TxError};
use crate::PmlError;

/// The BTL tag of every pml fragment.
pub const BTL_TAG_PML: u8 = 0x41;

/// The BTL components this build knows, in preference order.
fn components() -> Vec<&'static dyn BtlComponent> {
    vec![
        &tmpi_btl_self::SelfComponent,
        &tmpi_btl_sm::SmComponent,
        &tmpi_btl_openib::OpenibComponent,
    ]
}

/// The pml's transport over BTL modules.
pub struct BtlNet {
    size: u32,
    modules: Vec<Box<dyn BtlModule>>,
    /// Module index per peer.
    route: Vec<usize>,
    limits: Vec<Limits>,
    /// Whether a module may use `sendi`.
    sendi: Vec<bool>,
    /// Registrations in use: region bytes → (module index).
    regs: HashMap<[u8; tmpi_btl::REMOTE_REGION_BYTES], usize>,
    dropped: u64,
}

impl std::fmt::Debug for BtlNet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.modules.iter().map(|m| m.name()).collect();
        f.debug_struct("BtlNet")
            .field("modules", &names)
            .field("route", &self.route)
            .finish()
    }
}

fn btl_err(e: BtlError) -> PmlError {
    PmlError::Transport(e.to_string())
}

/// Opens the BTLs and wires them up (see the module documentation).
pub(crate) fn open(
    reg: &Registry,
    info: &ProcessInfo,
    modex: &mut dyn Modex,
    eager_cap: u64,
) -> Result<Box<dyn Transport>, PmlError> {
    let sel: SelectionList = reg
        .register_selection(
            "btl",
            "BTL components to use: a list (self,sm) or an exclusion (^sm)",
        )
        .map_err(tmpi_base::error::Error::from)?
        .value();
    let comps = components();
    for c in &comps {
        c.register_params(reg)
            .map_err(tmpi_base::error::Error::from)?;
    }
    let names: Vec<&str> = comps.iter().map(|c| c.name()).collect();
    for u in sel.unknown_names(&names) {
        tracing::warn!(target: "pml_ob1", "btl selection names unknown component {u:?}");
    }
    let mut modules: Vec<Box<dyn BtlModule>> = Vec::new();
    for c in comps.iter().filter(|c| sel.allows(c.name())) {
        match c.init(reg, info, modex) {
            Ok(mut m) => modules.append(&mut m),
            Err(BtlError::Unavailable(why)) => {
                tracing::debug!(target: "pml_ob1", "btl {} unavailable: {why}", c.name());
            }
            Err(e) => {
                return Err(PmlError::Transport(format!("btl {}: {e}", c.name())));
            }
        }
    }
    modex
        .fence()
        .map_err(|e| PmlError::Transport(format!("modex fence: {e}")))?;
    let all: Vec<u32> = (0..info.size).collect();
    let mut reach = Vec::with_capacity(modules.len());
    for m in modules.iter_mut() {
        reach.push(m.add_procs(&all, modex).map_err(btl_err)?);
    }
    let weights: Vec<(u32, &[u32])> = modules
        .iter()
        .zip(&reach)
        .map(|(m, r)| (m.exclusivity(), r.as_slice()))
        .collect();
    let best = tmpi_btl::select::best_per_peer(info.size, &weights);
    let mut route = Vec::with_capacity(best.len());
    for (peer, b) in best.into_iter().enumerate() {
        match b {
            Some(i) => route.push(i),
            None => {
                return Err(PmlError::Transport(format!(
                    "no BTL reaches rank {peer} from rank {} (btl selection {sel:?}, modules {:?})",
                    info.rank,
                    modules.iter().map(|m| m.name()).collect::<Vec<_>>()
                )))
            }
        }
    }
    let limits = route
        .iter()
        .map(|&i| {
            let m = &modules[i];
            let max = m.max_send_size();
            let mut eager = m.eager_limit().min(max.saturating_sub(MATCH_LEN));
            if eager_cap > 0 {
                eager = eager.min(eager_cap as usize);
            }
            Limits {
                eager,
                max_send: max.saturating_sub(FRAG_LEN).max(1),
                get: m.flags().contains(BtlFlags::GET),
            }
        })
        .collect();
    let sendi = modules
        .iter()
        .map(|m| m.flags().contains(BtlFlags::SENDI))
        .collect();
    for (peer, &i) in route.iter().enumerate() {
        tracing::debug!(target: "pml_ob1", peer, btl = modules[i].name(), "route");
    }
    Ok(Box::new(BtlNet {
        size: info.size,
        modules,
        route,
        limits,
        sendi,
        regs: HashMap::new(),
        dropped: 0,
    }))
}

impl Transport for BtlNet {
    fn size(&self) -> u32 {
        self.size
    }

    fn limits(&self, peer: u32) -> Limits {
        self.limits[peer as usize]
    }

    fn register(&mut self, peer: u32, buf: RawBuf) -> Option<Vec<u8>> {
        let i = *self.route.get(peer as usize)?;
        // SAFETY: the buffer belongs to a send request that stays incomplete
        // (its memory valid and unmodified, isend contract) until FIN/ACK,
        // when the core deregisters it before completing the request.
        let r = unsafe { self.modules[i].register_region(buf.ptr(), buf.len()) };
        match r {
            Ok(r) => {
                let b = r.to_bytes();
                self.regs.insert(b, i);
                Some(b.to_vec())
            }
            Err(e) => {
                tracing::debug!(target: "pml_ob1", peer, "register_region: {e}; pipelined");
                None
            }
        }
    }

    fn deregister(&mut self, _peer: u32, region: &[u8]) {
        let Ok(key) = <[u8; tmpi_btl::REMOTE_REGION_BYTES]>::try_from(region) else {
            return;
        };
        if let (Some(i), Ok(r)) = (self.regs.remove(&key), RemoteRegion::from_bytes(region)) {
            self.modules[i].deregister_region(&r);
        }
    }

    fn send(&mut self, peer: u32, hdr: &[u8], data: &[u8]) -> Result<(), TxError> {
        let Some(&i) = self.route.get(peer as usize) else {
            return Err(TxError::Fatal(format!("no route to rank {peer}")));
        };
        let m = &mut self.modules[i];
        let r = if self.sendi[i] {
            match m.sendi(peer, BTL_TAG_PML, hdr, data) {
                Err(BtlError::WouldBlock) => m.send(peer, BTL_TAG_PML, hdr, data),
                r => r,
            }
        } else {
            m.send(peer, BTL_TAG_PML, hdr, data)
        };
        match r {
            Ok(()) => Ok(()),
            Err(BtlError::WouldBlock) => Err(TxError::Busy),
            Err(e) => Err(TxError::Fatal(e.to_string())),
        }
    }

    fn get(&mut self, peer: u32, region: &[u8], dst: RawBufMut) -> Result<(), TxError> {
        let Some(&i) = self.route.get(peer as usize) else {
            return Err(TxError::Fatal(format!("no route to rank {peer}")));
        };
        let r = RemoteRegion::from_bytes(region).map_err(|e| TxError::Fatal(e.to_string()))?;
        // SAFETY: `dst` is the prefix of a receive buffer whose request is
        // in the pulling phase: valid for writes and not accessed by anyone
        // else until the request completes (irecv contract).
        let dst = unsafe { dst.as_mut_slice() };
        self.modules[i]
            .get(peer, &r, 0, dst)
            .map_err(|e| TxError::Fatal(e.to_string()))
    }

    fn progress(&mut self, deliver: &mut dyn FnMut(u32, &[u8])) -> usize {
        let mut n = 0;
        let dropped = &mut self.dropped;
        for m in self.modules.iter_mut() {
            n += m.progress(&mut |peer: u32, tag: u8, bytes: &[u8]| {
                if tag == BTL_TAG_PML {
                    deliver(peer, bytes);
                } else {
                    *dropped += 1;
                    tracing::error!(target: "pml_ob1", peer, tag, "fragment with a foreign BTL tag dropped");
                }
            });
        }
        n
    }

    fn finalize(&mut self) {
        for m in self.modules.iter_mut() {
            if let Err(e) = m.finalize() {
                tracing::warn!(target: "pml_ob1", btl = m.name(), "finalize: {e}");
            }
        }
    }
}
