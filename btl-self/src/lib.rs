//! tmpi-btl-self: the loopback BTL (Open MPI's `btl/self`).
//!
//! It reaches only this process. A fragment sent to oneself is copied into
//! a pooled buffer and delivered at the next [`BtlModule::progress`] (the
//! pml's lock is held during `send`, so calling the handler from inside
//! `send` as Open MPI does would re-enter the pml). Buffers come from a
//! free list and are reused, so the steady state allocates nothing; at most
//! `btl_self_free_list_max` fragments wait for delivery, beyond that `send`
//! returns [`BtlError::WouldBlock`] (bounded memory:
//! `free_list_max × max_send_size`).
//!
//! `get` is a `memcpy` from a region registered in this module; the region
//! must be live in the registration table and the access within its bounds.

use std::collections::{HashMap, VecDeque};

use tmpi_base::component::{Availability, ComponentDescriptor, ComponentRegistry};
use tmpi_base::error::Error;
use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};
use tmpi_base::modex::Modex;
use tmpi_btl::{
    BtlComponent, BtlError, BtlFlags, BtlModule, BtlRecvHandler, RemoteRegion, EXCLUSIVITY_HIGH,
};

/// Configuration of the self BTL (MCA parameters `btl_self_*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SelfConfig {
    /// `btl_self_eager_limit`: largest eager payload.
    pub eager_limit: usize,
    /// `btl_self_max_send_size`: largest fragment.
    pub max_send_size: usize,
    /// `btl_self_free_list_max`: fragments that may wait for delivery.
    pub free_list_max: usize,
    /// `btl_self_exclusivity`.
    pub exclusivity: u32,
}

impl Default for SelfConfig {
    fn default() -> Self {
        SelfConfig {
            eager_limit: 128 * 1024,
            max_send_size: 256 * 1024,
            free_list_max: 64,
            exclusivity: EXCLUSIVITY_HIGH,
        }
    }
}

impl SelfConfig {
    /// Registers the parameters in `reg` and reads their values.
    pub fn from_registry(reg: &Registry) -> Result<SelfConfig, McaError> {
        let d = SelfConfig::default();
        let size = |name: &str, help: &str, def: usize| {
            reg.register_size(
                ParamSpec::new("btl", "self", name)
                    .help(help)
                    .level(Level::TunerBasic),
                def as u64,
            )
            .map(|p| p.value())
        };
        let eager = size(
            "eager_limit",
            "Largest payload sent eagerly to oneself",
            d.eager_limit,
        )?;
        let max = size(
            "max_send_size",
            "Largest fragment (header + payload) of the self BTL",
            d.max_send_size,
        )?;
        let fl = reg.register_int_range(
            ParamSpec::new("btl", "self", "free_list_max")
                .help("Fragments that may wait for delivery to oneself (bounds memory)")
                .level(Level::TunerDetail),
            d.free_list_max as i64,
            1..=1 << 20,
        )?;
        let excl = reg.register_int_range(
            ParamSpec::new("btl", "self", "exclusivity")
                .help("Selection weight of the self BTL (highest reachable wins)")
                .level(Level::DevBasic),
            d.exclusivity as i64,
            0..=u32::MAX as i64,
        )?;
        reg.register_verbose("btl", "self")?;
        let bad = |name: &str, v: u64| McaError::InvalidValue {
            name: format!("btl_self_{name}"),
            value: v.to_string(),
            expected: "a size between 1 and 1G, eager_limit <= max_send_size".into(),
            origin: tmpi_base::mca::Source::Default,
        };
        if max == 0 || max > 1 << 30 {
            return Err(bad("max_send_size", max));
        }
        if eager > max {
            return Err(bad("eager_limit", eager));
        }
        Ok(SelfConfig {
            eager_limit: eager as usize,
            max_send_size: max as usize,
            free_list_max: fl.value() as usize,
            exclusivity: excl.value() as u32,
        })
    }
}

fn register_params(reg: &Registry) -> Result<(), McaError> {
    SelfConfig::from_registry(reg).map(|_| ())
}

fn probe() -> Availability {
    Availability::Available
}

/// The component descriptor for `tmpi_info` and selection.
pub static COMPONENT: ComponentDescriptor = ComponentDescriptor {
    framework: "btl",
    name: "self",
    priority: 100,
    description: "loopback to the calling process",
    register_params,
    probe,
};

/// Provider of this crate (see `tmpi_base::component::Provider`).
pub fn register(reg: &Registry, comps: &mut ComponentRegistry) -> Result<(), Error> {
    comps.add(&COMPONENT)?;
    register_params(reg)?;
    Ok(())
}

/// The self BTL component.
#[derive(Debug, Default, Clone, Copy)]
pub struct SelfComponent;

impl BtlComponent for SelfComponent {
    fn name(&self) -> &'static str {
        "self"
    }
    fn register_params(&self, reg: &Registry) -> Result<(), McaError> {
        register_params(reg)
    }
    fn init(
        &self,
        reg: &Registry,
        info: &ProcessInfo,
        _modex: &mut dyn Modex,
    ) -> Result<Vec<Box<dyn BtlModule>>, BtlError> {
        let cfg = SelfConfig::from_registry(reg).map_err(|e| BtlError::Config(e.to_string()))?;
        Ok(vec![Box::new(SelfModule::new(info.rank, cfg))])
    }
}

/// The loopback module.
#[derive(Debug)]
pub struct SelfModule {
    me: u32,
    cfg: SelfConfig,
    added: bool,
    finalized: bool,
    /// Fragments waiting for delivery: (tag, bytes).
    queue: VecDeque<(u8, Vec<u8>)>,
    /// Recycled buffers (capacity kept).
    free: Vec<Vec<u8>>,
    regions: HashMap<u64, (u64, u64)>,
    next_key: u64,
}

impl SelfModule {
    /// A module for world rank `me`.
    pub fn new(me: u32, cfg: SelfConfig) -> SelfModule {
        SelfModule {
            me,
            cfg,
            added: false,
            finalized: false,
            queue: VecDeque::with_capacity(cfg.free_list_max),
            free: Vec::new(),
            regions: HashMap::new(),
            next_key: 1,
        }
    }

    fn check_peer(&self, peer: u32) -> Result<(), BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        if peer != self.me || !self.added {
            return Err(BtlError::Unreachable(peer));
        }
        Ok(())
    }
}

impl BtlModule for SelfModule {
    fn name(&self) -> &str {
        "self"
    }
    fn add_procs(&mut self, peers: &[u32], _modex: &mut dyn Modex) -> Result<Vec<u32>, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let r: Vec<u32> = peers.iter().copied().filter(|&p| p == self.me).collect();
        if !r.is_empty() {
            self.added = true;
        }
        Ok(r)
    }
    fn exclusivity(&self) -> u32 {
        self.cfg.exclusivity
    }
    fn latency(&self) -> u32 {
        0
    }
    fn bandwidth(&self) -> u32 {
        100_000
    }
    fn eager_limit(&self) -> usize {
        self.cfg.eager_limit
    }
    fn max_send_size(&self) -> usize {
        self.cfg.max_send_size
    }
    fn flags(&self) -> BtlFlags {
        BtlFlags::SEND | BtlFlags::GET
    }

    fn send(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError> {
        self.check_peer(peer)?;
        let len = header.len() + payload.len();
        if len > self.cfg.max_send_size {
            return Err(BtlError::TooLarge {
                len,
                max: self.cfg.max_send_size,
            });
        }
        if self.queue.len() >= self.cfg.free_list_max {
            return Err(BtlError::WouldBlock);
        }
        let mut buf = self.free.pop().unwrap_or_default();
        buf.clear();
        buf.extend_from_slice(header);
        buf.extend_from_slice(payload);
        self.queue.push_back((tag, buf));
        Ok(())
    }

    unsafe fn register_region(
        &mut self,
        ptr: *const u8,
        len: usize,
    ) -> Result<RemoteRegion, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let addr = ptr as usize as u64;
        if addr.checked_add(len as u64).is_none() {
            return Err(BtlError::BadRegion("address range wraps".into()));
        }
        let key = self.next_key;
        self.next_key += 1;
        self.regions.insert(key, (addr, len as u64));
        Ok(RemoteRegion {
            addr,
            len: len as u64,
            key,
        })
    }

    fn deregister_region(&mut self, region: &RemoteRegion) {
        self.regions.remove(&region.key);
    }

    fn get(
        &mut self,
        peer: u32,
        region: &RemoteRegion,
        offset: u64,
        dst: &mut [u8],
    ) -> Result<(), BtlError> {
        self.check_peer(peer)?;
        match self.regions.get(&region.key) {
            Some(&(a, l)) if a == region.addr && l == region.len => {}
            _ => {
                return Err(BtlError::BadRegion(format!(
                    "key {} is not a live registration of this process",
                    region.key
                )))
            }
        }
        let start = region.check_access(offset, dst.len())?;
        if dst.is_empty() {
            return Ok(());
        }
        // SAFETY: `start..start+dst.len()` lies inside a live registration
        // (checked above); `register_region`'s contract keeps that memory
        // allocated and readable until deregistration. `dst` is an exclusive
        // borrow, so the ranges may only overlap if the caller registered
        // memory it also lends mutably, which the contract forbids (the
        // region must not be written while registered); `copy` tolerates
        // overlap anyway.
        unsafe {
            std::ptr::copy(start as usize as *const u8, dst.as_mut_ptr(), dst.len());
        }
        Ok(())
    }

    /// Its queue is filled by `send` only.
    fn input_only_from_sends(&self) -> bool {
        true
    }

    fn progress(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        // Deliver only what was queued before this call, so a handler that
        // (indirectly) sends again cannot make progress loop forever.
        let n = self.queue.len();
        for _ in 0..n {
            let Some((tag, buf)) = self.queue.pop_front() else {
                break;
            };
            handler.on_fragment(self.me, tag, &buf);
            self.free.push(buf);
        }
        if n > 0 {
            tracing::trace!(target: "btl_self", delivered = n, "progress");
        }
        n
    }

    fn finalize(&mut self) -> Result<(), BtlError> {
        self.finalized = true;
        self.queue.clear();
        self.free.clear();
        self.regions.clear();
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tmpi_base::mca::Sources;
    use tmpi_btl::testing::FileModex;

    fn module(cfg: SelfConfig) -> SelfModule {
        let mut m = SelfModule::new(3, cfg);
        let dir = std::env::temp_dir();
        let mut modex = FileModex::new(&dir, 3, 4, std::time::Duration::from_millis(1));
        assert_eq!(m.add_procs(&[0, 3, 2], &mut modex).unwrap(), vec![3]);
        m
    }

    #[test]
    fn loopback_in_order_exactly_once() {
        let mut m = module(SelfConfig::default());
        for i in 0..50u32 {
            m.send(
                3,
                (i % 7) as u8,
                &i.to_le_bytes(),
                &vec![i as u8; i as usize],
            )
            .unwrap();
        }
        let mut got = Vec::new();
        let n = m.progress(&mut |p: u32, t: u8, b: &[u8]| {
            assert_eq!(p, 3);
            got.push((t, b.to_vec()))
        });
        assert_eq!(n, 50);
        for (i, (t, b)) in got.iter().enumerate() {
            assert_eq!(*t, (i % 7) as u8);
            assert_eq!(&b[..4], &(i as u32).to_le_bytes());
            assert_eq!(b.len(), 4 + i);
            assert!(b[4..].iter().all(|&x| x == i as u8));
        }
        assert_eq!(
            m.progress(&mut |_: u32, _: u8, _: &[u8]| panic!("empty")),
            0
        );
    }

    #[test]
    fn flow_control_and_errors() {
        let cfg = SelfConfig {
            free_list_max: 4,
            max_send_size: 100,
            eager_limit: 50,
            ..SelfConfig::default()
        };
        let mut m = module(cfg);
        for _ in 0..4 {
            m.send(3, 0, b"h", b"p").unwrap();
        }
        assert!(matches!(
            m.send(3, 0, b"h", b"p"),
            Err(BtlError::WouldBlock)
        ));
        assert!(matches!(
            m.send(2, 0, b"h", b"p"),
            Err(BtlError::Unreachable(2))
        ));
        assert!(matches!(
            m.send(3, 0, &[0; 60], &[0; 41]),
            Err(BtlError::TooLarge { len: 101, max: 100 })
        ));
        assert_eq!(m.progress(&mut |_: u32, _: u8, _: &[u8]| {}), 4);
        m.send(3, 0, b"h", b"p").unwrap();
        m.finalize().unwrap();
        assert!(matches!(m.send(3, 0, b"h", b"p"), Err(BtlError::Finalized)));
    }

    #[test]
    fn get_is_bounds_checked_memcpy() {
        let mut m = module(SelfConfig::default());
        let src: Vec<u8> = (0..4096u32).map(|i| (i * 7 % 251) as u8).collect();
        // SAFETY: `src` outlives the registration (deregistered below).
        let r = unsafe { m.register_region(src.as_ptr(), src.len()) }.unwrap();
        let wire = RemoteRegion::from_bytes(&r.to_bytes()).unwrap();
        let mut dst = vec![0u8; 1000];
        m.get(3, &wire, 3000, &mut dst[..1000 - 904]).unwrap();
        assert_eq!(&dst[..96], &src[3000..3096]);
        m.get(3, &wire, 0, &mut dst).unwrap();
        assert_eq!(&dst[..], &src[..1000]);
        assert!(matches!(
            m.get(3, &wire, 3097, &mut dst),
            Err(BtlError::OutOfBounds { .. })
        ));
        let forged = RemoteRegion {
            len: 1 << 30,
            ..wire
        };
        assert!(matches!(
            m.get(3, &forged, 0, &mut dst),
            Err(BtlError::BadRegion(_))
        ));
        m.deregister_region(&wire);
        assert!(matches!(
            m.get(3, &wire, 0, &mut dst),
            Err(BtlError::BadRegion(_))
        ));
    }

    #[test]
    fn steady_state_reuses_buffers() {
        let mut m = module(SelfConfig::default());
        for round in 0..10 {
            for _ in 0..8 {
                m.send(3, 1, b"hdr", &[round as u8; 1000]).unwrap();
            }
            m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
            assert!(m.free.len() <= 8, "free list bounded by peak in flight");
        }
        assert_eq!(m.free.len(), 8);
    }

    #[test]
    fn component_from_registry() {
        let reg = Registry::new(Sources::default());
        let info = ProcessInfo::singleton("j".into(), "h".into());
        let dir = std::env::temp_dir();
        let mut modex = FileModex::new(&dir, 0, 1, std::time::Duration::from_millis(1));
        let mods = SelfComponent.init(&reg, &info, &mut modex).unwrap();
        assert_eq!(mods.len(), 1);
        assert_eq!(mods[0].exclusivity(), EXCLUSIVITY_HIGH);
        assert_eq!(mods[0].eager_limit(), 128 * 1024);
        assert!(reg.get("btl_self_eager_limit").is_some());
    }
}
