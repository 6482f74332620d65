//! Device list, device context, device / port / GID queries.

use std::ffi::{c_int, CStr};
use std::ptr::NonNull;
use std::sync::Arc;

use super::error::{IbvError, Result};
use super::inline;
use super::loader::{Lib, Library};
use super::sys::*;

/// Tag-matching capabilities (`ibv_device_attr_ex::tm_caps`). A device without
/// hardware tag matching reports `max_num_tags == 0`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TmCaps {
    /// Largest rendezvous header (TMH + RVH + user data) the NIC accepts.
    pub max_rndv_hdr_size: u32,
    /// Size of the NIC's tag list; 0 = no tag matching.
    pub max_num_tags: u32,
    /// `IBV_TM_CAP_*` flags (`IBV_TM_CAP_RC` = TM on RC QPs).
    pub flags: u32,
    /// Maximum outstanding list operations.
    pub max_ops: u32,
    /// Maximum SGEs per tagged buffer.
    pub max_sge: u32,
}

impl TmCaps {
    /// True when the device offers tag matching on RC QPs.
    pub fn supported(&self) -> bool {
        self.max_num_tags > 0 && self.flags & IBV_TM_CAP_RC != 0
    }
}

/// The parts of `ibv_device_attr_ex` tmpi uses.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DeviceAttr {
    /// Firmware version string.
    pub fw_ver: String,
    /// Node GUID (as stored by the kernel, network byte order).
    pub node_guid: u64,
    /// Vendor id.
    pub vendor_id: u32,
    /// Vendor part id.
    pub vendor_part_id: u32,
    /// Number of physical ports (numbered from 1).
    pub phys_port_cnt: u8,
    /// Largest registrable region.
    pub max_mr_size: u64,
    /// Maximum QPs.
    pub max_qp: i32,
    /// Maximum work requests per QP queue.
    pub max_qp_wr: i32,
    /// Maximum SGEs per work request.
    pub max_sge: i32,
    /// Maximum CQs.
    pub max_cq: i32,
    /// Maximum CQEs per CQ.
    pub max_cqe: i32,
    /// Maximum MRs.
    pub max_mr: i32,
    /// Maximum PDs.
    pub max_pd: i32,
    /// Maximum outstanding RDMA reads/atomics a QP can be the target of.
    pub max_qp_rd_atom: i32,
    /// Maximum outstanding RDMA reads/atomics a QP can initiate.
    pub max_qp_init_rd_atom: i32,
    /// `atomic_cap` (`IBV_ATOMIC_NONE` / `_HCA` / `_GLOB`).
    pub atomic_cap: u32,
    /// Maximum SRQs.
    pub max_srq: i32,
    /// Maximum work requests per SRQ.
    pub max_srq_wr: i32,
    /// Maximum SGEs per SRQ receive.
    pub max_srq_sge: i32,
    /// Tag-matching capabilities.
    pub tm_caps: TmCaps,
}

/// Link layer of a port.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkLayer {
    /// InfiniBand: address peers by LID.
    InfiniBand,
    /// Ethernet (RoCE): address peers by GID.
    Ethernet,
    /// Unspecified (old kernels report this for IB).
    Unspecified,
}

/// Port state (`ibv_port_state`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PortState {
    /// `IBV_PORT_DOWN`
    Down,
    /// `IBV_PORT_INIT`
    Init,
    /// `IBV_PORT_ARMED`
    Armed,
    /// `IBV_PORT_ACTIVE`
    Active,
    /// `IBV_PORT_ACTIVE_DEFER`
    ActiveDefer,
    /// `IBV_PORT_NOP` or unknown.
    Other(u32),
}

/// The parts of `ibv_port_attr` tmpi uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PortAttr {
    /// Logical port state.
    pub state: PortState,
    /// Largest MTU the port supports (`IBV_MTU_*`, 1 = 256 … 5 = 4096).
    pub max_mtu: u32,
    /// Active MTU (`IBV_MTU_*`).
    pub active_mtu: u32,
    /// GID table length.
    pub gid_tbl_len: i32,
    /// Base LID (IB).
    pub lid: u16,
    /// Subnet-manager LID.
    pub sm_lid: u16,
    /// Link layer.
    pub link_layer: LinkLayer,
    /// Largest message.
    pub max_msg_sz: u32,
}

impl PortAttr {
    /// The active MTU in bytes.
    pub fn active_mtu_bytes(&self) -> u32 {
        mtu_bytes(self.active_mtu)
    }
}

/// Bytes of an `IBV_MTU_*` value (0 for an unknown one).
pub fn mtu_bytes(mtu: u32) -> u32 {
    match mtu {
        1..=5 => 128 << mtu,
        _ => 0,
    }
}

/// A 128-bit GID (raw, network byte order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub struct Gid(pub [u8; 16]);

impl Gid {
    /// True for the all-zero GID (an empty table slot).
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 16]
    }

    /// The IPv4 address if this is an IPv4-mapped GID (`::ffff:a.b.c.d`).
    pub fn ipv4(&self) -> Option<std::net::Ipv4Addr> {
        let g = &self.0;
        (g[..10] == [0; 10] && g[10] == 0xff && g[11] == 0xff)
            .then(|| std::net::Ipv4Addr::new(g[12], g[13], g[14], g[15]))
    }
}

impl std::fmt::Display for Gid {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, c) in self.0.chunks(2).enumerate() {
            if i > 0 {
                f.write_str(":")?;
            }
            write!(f, "{:02x}{:02x}", c[0], c[1])?;
        }
        Ok(())
    }
}

/// GID type of a table entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GidType {
    /// InfiniBand GID.
    Ib,
    /// RoCE v1 (Ethernet, no IP header).
    RoceV1,
    /// RoCE v2 (UDP/IP; routable).
    RoceV2,
    /// Type unknown (old rdma-core without `ibv_query_gid_ex`).
    Unknown,
}

/// One valid entry of a port's GID table.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GidEntry {
    /// Index to use as `sgid_index`.
    pub index: u32,
    /// The GID.
    pub gid: Gid,
    /// Its type.
    pub gid_type: GidType,
}

/// A device seen in `ibv_get_device_list`, with what `tmpi_info` prints.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeviceSummary {
    /// Kernel device name, e.g. `mlx5_0`, `rxe0`.
    pub name: String,
    /// Node GUID (network byte order).
    pub guid: u64,
    /// Device attributes, or the error querying them (e.g. permission denied).
    pub attr: std::result::Result<DeviceAttr, String>,
    /// Per port (1-based): state, MTU, link layer, or the error.
    pub ports: Vec<(u8, std::result::Result<PortAttr, String>)>,
}

impl DeviceSummary {
    /// Tag-matching caps if the device could be queried.
    pub fn tm_caps(&self) -> Option<TmCaps> {
        self.attr.as_ref().ok().map(|a| a.tm_caps)
    }
}

impl std::fmt::Display for DeviceSummary {
    /// One line per device and port, as `tmpi_info` prints them, e.g.
    /// `rxe0: guid 954b72feff114be8, fw 0.0.0, tag matching: no (max_num_tags 0)`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: guid {:016x}", self.name, u64::from_be(self.guid))?;
        match &self.attr {
            Err(e) => return write!(f, ", cannot query: {e}"),
            Ok(a) => {
                let t = &a.tm_caps;
                write!(f, ", fw {}", a.fw_ver)?;
                if t.supported() {
                    write!(
                        f,
                        ", tag matching: yes (max_num_tags {}, max_ops {}, max_sge {}, max_rndv_hdr_size {})",
                        t.max_num_tags, t.max_ops, t.max_sge, t.max_rndv_hdr_size
                    )?;
                } else {
                    write!(f, ", tag matching: no (max_num_tags {})", t.max_num_tags)?;
                }
            }
        }
        for (p, a) in &self.ports {
            match a {
                Ok(a) => write!(
                    f,
                    "\n  port {p}: {:?}, {:?}, active MTU {}, LID {}",
                    a.state,
                    a.link_layer,
                    a.active_mtu_bytes(),
                    a.lid
                )?,
                Err(e) => write!(f, "\n  port {p}: cannot query: {e}")?,
            }
        }
        Ok(())
    }
}

/// Names (and node GUIDs) of the RDMA devices visible to libibverbs. An
/// empty list when the kernel has no RDMA support.
pub fn device_names(lib: &Library) -> Result<Vec<(String, u64)>> {
    with_device_list(lib, |devs| {
        Ok(devs
            .iter()
            .map(|&d| {
                // SAFETY: d comes from the live device list.
                unsafe { (device_name(&lib.0, d), (lib.0.fns.get_device_guid)(d)) }
            })
            .collect())
    })
}

/// Lists every RDMA device with its attributes, TM caps and ports
/// (for `tmpi_info`). Fails only when libibverbs itself is unusable
/// ([`IbvError::LibraryNotFound`]); per-device failures are reported inside
/// each [`DeviceSummary`].
pub fn list_devices_with_caps() -> Result<Vec<DeviceSummary>> {
    let lib = Library::load()?;
    let names = device_names(&lib)?;
    let mut out = Vec::with_capacity(names.len());
    for (name, guid) in names {
        let mut s = DeviceSummary {
            name: name.clone(),
            guid,
            attr: Err(String::new()),
            ports: Vec::new(),
        };
        match Context::open_with(&lib, Some(&name)) {
            Err(e) => s.attr = Err(e.to_string()),
            Ok(ctx) => {
                s.attr = ctx.query_device_ex().map_err(|e| e.to_string());
                if let Ok(a) = &s.attr {
                    for p in 1..=a.phys_port_cnt {
                        s.ports
                            .push((p, ctx.query_port(p).map_err(|e| e.to_string())));
                    }
                }
            }
        }
        out.push(s);
    }
    Ok(out)
}

fn with_device_list<T>(
    lib: &Library,
    f: impl FnOnce(&[*mut ibv_device]) -> Result<T>,
) -> Result<T> {
    let mut n: c_int = 0;
    // SAFETY: n is a valid out-parameter.
    let list = unsafe { (lib.0.fns.get_device_list)(&mut n) };
    if list.is_null() {
        let e = IbvError::errno("ibv_get_device_list");
        if e.os_error() == Some(libc::ENOSYS) {
            tracing::debug!(target: "verbs", "no RDMA support in the kernel (ENOSYS)");
            return f(&[]);
        }
        return Err(e);
    }
    // SAFETY: libibverbs returns an array of n device pointers (NULL-terminated).
    let devs = unsafe { std::slice::from_raw_parts(list, n.max(0) as usize) };
    let r = f(devs);
    // SAFETY: list came from ibv_get_device_list and is freed once.
    unsafe { (lib.0.fns.free_device_list)(list) };
    r
}

/// # Safety
/// `d` must be a live device of `lib`.
unsafe fn device_name(lib: &Lib, d: *mut ibv_device) -> String {
    // SAFETY: caller contract; the name is a NUL-terminated string in the device.
    let p = unsafe { (lib.fns.get_device_name)(d) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: non-NULL, NUL-terminated (IBV_SYSFS_NAME_MAX).
    unsafe { CStr::from_ptr(p) }.to_string_lossy().into_owned()
}

/// An open device (`ibv_context`). Objects created from it hold an `Arc` to
/// it, so it is closed after the last of them.
pub struct Context {
    pub(crate) lib: Library,
    pub(crate) ctx: NonNull<ibv_context>,
    name: String,
}

// SAFETY: libibverbs contexts may be used from any thread (rdma-core's verbs
// are thread-safe per ibv_open_device(3)); the pointer is never aliased mutably
// by Rust code.
unsafe impl Send for Context {}
// SAFETY: as above.
unsafe impl Sync for Context {}

impl std::fmt::Debug for Context {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Context")
            .field("device", &self.name)
            .finish()
    }
}

impl Context {
    /// Opens the device `name` (or the first device if `None`) with the
    /// process-wide libibverbs.
    pub fn open(name: Option<&str>) -> Result<Arc<Context>> {
        Self::open_with(&Library::load()?, name)
    }

    /// Opens a device through an explicitly loaded library.
    pub fn open_with(lib: &Library, name: Option<&str>) -> Result<Arc<Context>> {
        let want = name.map(str::to_string);
        let (ctx, dev_name) = with_device_list(lib, |devs| {
            for &d in devs {
                // SAFETY: d is from the live list.
                let n = unsafe { device_name(&lib.0, d) };
                if want.as_deref().is_none_or(|w| w == n) {
                    // SAFETY: d is live until the list is freed; the context
                    // stays valid after freeing the list (ibv_free_device_list(3)).
                    let c = unsafe { (lib.0.fns.open_device)(d) };
                    return match NonNull::new(c) {
                        Some(c) => Ok((c, n)),
                        None => Err(IbvError::errno("ibv_open_device")),
                    };
                }
            }
            Err(IbvError::NoSuchDevice(
                want.clone().unwrap_or_else(|| "(any)".into()),
            ))
        })?;
        tracing::debug!(target: "verbs", device = %dev_name, "opened RDMA device");
        Ok(Arc::new(Context {
            lib: lib.clone(),
            ctx,
            name: dev_name,
        }))
    }

    /// Kernel name of the device.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn lib(&self) -> &Lib {
        &self.lib.0
    }

    /// `ibv_query_device_ex`: attributes including `tm_caps`.
    pub fn query_device_ex(&self) -> Result<DeviceAttr> {
        let mut a = ibv_device_attr_ex::default();
        // SAFETY: live context, attr is a local of the right type.
        let rc = unsafe {
            inline::query_device_ex(self.lib(), self.ctx.as_ptr(), std::ptr::null(), &mut a)
        };
        if rc != 0 {
            return Err(IbvError::code("ibv_query_device_ex", rc));
        }
        let o = &a.orig_attr;
        let fw = o
            .fw_ver
            .iter()
            .take_while(|&&c| c != 0)
            // `c_char` is i8 on x86-64 and u8 on AArch64: the byte either way.
            .map(|&c| u8::from_ne_bytes(c.to_ne_bytes()))
            .collect::<Vec<u8>>();
        Ok(DeviceAttr {
            fw_ver: String::from_utf8_lossy(&fw).into_owned(),
            node_guid: o.node_guid,
            vendor_id: o.vendor_id,
            vendor_part_id: o.vendor_part_id,
            phys_port_cnt: o.phys_port_cnt,
            max_mr_size: o.max_mr_size,
            max_qp: o.max_qp,
            max_qp_wr: o.max_qp_wr,
            max_sge: o.max_sge,
            max_cq: o.max_cq,
            max_cqe: o.max_cqe,
            max_mr: o.max_mr,
            max_pd: o.max_pd,
            max_qp_rd_atom: o.max_qp_rd_atom,
            max_qp_init_rd_atom: o.max_qp_init_rd_atom,
            atomic_cap: o.atomic_cap,
            max_srq: o.max_srq,
            max_srq_wr: o.max_srq_wr,
            max_srq_sge: o.max_srq_sge,
            tm_caps: TmCaps {
                max_rndv_hdr_size: a.tm_caps.max_rndv_hdr_size,
                max_num_tags: a.tm_caps.max_num_tags,
                flags: a.tm_caps.flags,
                max_ops: a.tm_caps.max_ops,
                max_sge: a.tm_caps.max_sge,
            },
        })
    }

    /// `ibv_query_port` for port `port` (1-based).
    pub fn query_port(&self, port: u8) -> Result<PortAttr> {
        if port == 0 {
            return Err(IbvError::InvalidArgument("port numbers start at 1".into()));
        }
        let mut a = ibv_port_attr::default();
        // SAFETY: live context, a is a local.
        let rc = unsafe { inline::query_port(self.lib(), self.ctx.as_ptr(), port, &mut a) };
        if rc != 0 {
            return Err(IbvError::code("ibv_query_port", rc));
        }
        Ok(PortAttr {
            state: match a.state {
                IBV_PORT_DOWN => PortState::Down,
                IBV_PORT_INIT => PortState::Init,
                IBV_PORT_ARMED => PortState::Armed,
                IBV_PORT_ACTIVE => PortState::Active,
                IBV_PORT_ACTIVE_DEFER => PortState::ActiveDefer,
                s => PortState::Other(s),
            },
            max_mtu: a.max_mtu,
            active_mtu: a.active_mtu,
            gid_tbl_len: a.gid_tbl_len,
            lid: a.lid,
            sm_lid: a.sm_lid,
            max_msg_sz: a.max_msg_sz,
            link_layer: match u32::from(a.link_layer) {
                IBV_LINK_LAYER_INFINIBAND => LinkLayer::InfiniBand,
                IBV_LINK_LAYER_ETHERNET => LinkLayer::Ethernet,
                _ => LinkLayer::Unspecified,
            },
        })
    }

    /// `ibv_query_gid`: one entry of the GID table.
    pub fn query_gid(&self, port: u8, index: u32) -> Result<Gid> {
        let idx = c_int::try_from(index)
            .map_err(|_| IbvError::InvalidArgument(format!("GID index {index} too large")))?;
        let mut g = ibv_gid::default();
        // SAFETY: live context, g is a local.
        let rc = unsafe { (self.lib().fns.query_gid)(self.ctx.as_ptr(), port, idx, &mut g) };
        if rc != 0 {
            return Err(IbvError::code("ibv_query_gid", rc));
        }
        // SAFETY: every bit pattern is a valid [u8; 16].
        Ok(Gid(unsafe { g.raw }))
    }

    /// The valid (non-zero) entries of a port's GID table, with their types
    /// when the library has `ibv_query_gid_ex` (rdma-core ≥ 32).
    pub fn gid_table(&self, port: u8) -> Result<Vec<GidEntry>> {
        let len = self.query_port(port)?.gid_tbl_len.max(0) as u32;
        let mut out = Vec::new();
        for index in 0..len {
            if let Some(f) = self.lib().fns.query_gid_ex {
                let mut e = ibv_gid_entry::default();
                // SAFETY: live context; e is a local of the size passed.
                let rc = unsafe {
                    f(
                        self.ctx.as_ptr(),
                        u32::from(port),
                        index,
                        &mut e,
                        0,
                        std::mem::size_of::<ibv_gid_entry>(),
                    )
                };
                if rc == libc::ENODATA || rc == libc::EINVAL {
                    continue; // empty or unusable slot
                }
                if rc != 0 {
                    return Err(IbvError::code("ibv_query_gid_ex", rc));
                }
                // SAFETY: every bit pattern is a valid [u8; 16].
                let gid = Gid(unsafe { e.gid.raw });
                if gid.is_zero() {
                    continue;
                }
                out.push(GidEntry {
                    index,
                    gid,
                    gid_type: match e.gid_type {
                        IBV_GID_TYPE_IB => GidType::Ib,
                        IBV_GID_TYPE_ROCE_V1 => GidType::RoceV1,
                        IBV_GID_TYPE_ROCE_V2 => GidType::RoceV2,
                        _ => GidType::Unknown,
                    },
                });
            } else {
                let gid = self.query_gid(port, index)?;
                if !gid.is_zero() {
                    out.push(GidEntry {
                        index,
                        gid,
                        gid_type: GidType::Unknown,
                    });
                }
            }
        }
        Ok(out)
    }

    /// The GID index to use for RoCE v2 over IPv4 (what Open MPI and UCX pick
    /// by default), else the first RoCE v2 entry, else the first entry.
    pub fn preferred_gid_index(&self, port: u8) -> Result<Option<GidEntry>> {
        let t = self.gid_table(port)?;
        let v2 = |e: &&GidEntry| e.gid_type == GidType::RoceV2;
        Ok(t.iter()
            .filter(v2)
            .find(|e| e.gid.ipv4().is_some())
            .or_else(|| t.iter().find(v2))
            .or(t.first())
            .copied())
    }
}

impl Drop for Context {
    fn drop(&mut self) {
        // SAFETY: the context is live and every child object (which holds an
        // Arc to it) is already gone.
        let rc = unsafe { (self.lib().fns.close_device)(self.ctx.as_ptr()) };
        if rc != 0 {
            tracing::warn!(target: "verbs", device = %self.name, rc, "ibv_close_device failed");
        }
    }
}
