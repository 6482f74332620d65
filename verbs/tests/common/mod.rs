//! Provider-generic helpers of the conformance suite.
#![allow(dead_code)]

use std::time::{Duration, Instant};

use tmpi_verbs::soft::{SoftConfig, SoftProvider, DEVICE_NAME};
use tmpi_verbs::*;

/// Environment variable naming the device under test (default `tmsoft0`).
pub const DEVICE_ENV: &str = "TMPI_VERBS_TEST_DEVICE";

/// How long any wait for completions may take before the test fails.
pub const TIMEOUT: Duration = Duration::from_secs(20);

/// The device under test.
pub fn device_name() -> String {
    std::env::var(DEVICE_ENV).unwrap_or_else(|_| DEVICE_NAME.to_string())
}

/// True when the soft NIC is under test.
pub fn is_soft() -> bool {
    device_name() == DEVICE_NAME
}

/// A soft provider with default caps.
pub fn soft() -> SoftProvider {
    SoftProvider::new(SoftConfig::default()).expect("default soft config")
}

/// A registered, owned buffer. The region is dropped before the memory.
pub struct Buf<P: Provider> {
    pub mr: P::Mr,
    ptr: *mut u8,
    len: usize,
    _mem: Box<[u8]>,
}

// SAFETY: the buffer is owned; tests use it from one thread at a time.
unsafe impl<P: Provider> Send for Buf<P> {}

impl<P: Provider> Buf<P> {
    pub fn new(pd: &P::Pd, len: usize, access: AccessFlags) -> Self {
        let mut mem = vec![0u8; len].into_boxed_slice();
        let ptr = mem.as_mut_ptr();
        // SAFETY: `mem` lives as long as the region (dropped after `mr`).
        let mr = unsafe { pd.reg_mr(ptr, len, access) }.expect("reg_mr");
        Buf {
            mr,
            ptr,
            len,
            _mem: mem,
        }
    }
    pub fn rw(pd: &P::Pd, len: usize) -> Self {
        Self::new(
            pd,
            len,
            AccessFlags::LOCAL_WRITE | AccessFlags::REMOTE_WRITE | AccessFlags::REMOTE_READ,
        )
    }
    /// Current contents (read through the raw pointer: the NIC writes it).
    pub fn read(&self) -> Vec<u8> {
        // SAFETY: ptr/len describe the owned allocation; no posted operation
        // writes it while the test reads (tests read after completions).
        unsafe { std::slice::from_raw_parts(self.ptr, self.len).to_vec() }
    }
    pub fn write(&self, off: usize, data: &[u8]) {
        assert!(off + data.len() <= self.len);
        // SAFETY: in bounds of the owned allocation; not posted to the NIC.
        unsafe { std::ptr::copy_nonoverlapping(data.as_ptr(), self.ptr.add(off), data.len()) }
    }
    pub fn addr(&self) -> u64 {
        self.ptr as u64
    }
    pub fn sge(&self, off: usize, len: usize) -> Sge {
        self.mr.sge(off, len as u32)
    }
}

/// The address a peer needs: (GID, GID index, LID, QP number).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Addr {
    pub gid: Gid,
    pub gid_index: u8,
    pub lid: u16,
    pub ethernet: bool,
    pub qpn: u32,
}

impl Addr {
    pub fn encode(&self) -> String {
        let g: String = self.gid.0.iter().map(|b| format!("{b:02x}")).collect();
        format!(
            "{} {} {} {} {}",
            g, self.gid_index, self.lid, self.ethernet as u8, self.qpn
        )
    }
    pub fn decode(s: &str) -> Addr {
        let f: Vec<&str> = s.split_whitespace().collect();
        let mut gid = [0u8; 16];
        for (i, b) in gid.iter_mut().enumerate() {
            *b = u8::from_str_radix(&f[0][2 * i..2 * i + 2], 16).unwrap();
        }
        Addr {
            gid: Gid(gid),
            gid_index: f[1].parse().unwrap(),
            lid: f[2].parse().unwrap(),
            ethernet: f[3] == "1",
            qpn: f[4].parse().unwrap(),
        }
    }
}

/// The local address of `qp` (RoCE v2 GID preferred on Ethernet).
pub fn local_addr<P: Provider>(ctx: &P::Context, qp: &P::Qp) -> Addr {
    let port = ctx.query_port(1).expect("query_port");
    let table = ctx.query_gid_table().expect("query_gid_table");
    let entry = table
        .iter()
        .filter(|e| e.port == 1)
        .find(|e| e.gid_type == GidType::RoceV2)
        .or_else(|| table.iter().find(|e| e.port == 1))
        .copied();
    let (gid, gid_index) = entry.map(|e| (e.gid, e.index as u8)).unwrap_or_default();
    Addr {
        gid,
        gid_index,
        lid: port.lid,
        ethernet: port.link_layer == LinkLayer::Ethernet,
        qpn: qp.qp_num(),
    }
}

/// RESET -> INIT -> RTR -> RTS towards `remote` (remote read, write and
/// atomic access granted on the QP; one outstanding read/atomic each way).
pub fn connect<P: Provider>(qp: &P::Qp, local: &Addr, remote: &Addr) {
    connect_with::<P>(qp, local, remote, 1);
}

/// [`connect`] with `rd_atomic` as `max_dest_rd_atomic` and `max_rd_atomic`.
pub fn connect_with<P: Provider>(qp: &P::Qp, local: &Addr, remote: &Addr, rd_atomic: u8) {
    qp.modify_to_init(&QpInitTransition {
        port: 1,
        pkey_index: 0,
        access: AccessFlags::LOCAL_WRITE
            | AccessFlags::REMOTE_WRITE
            | AccessFlags::REMOTE_READ
            | AccessFlags::REMOTE_ATOMIC,
    })
    .expect("to INIT");
    let dest = if remote.ethernet {
        Destination::Gid {
            dgid: remote.gid,
            sgid_index: local.gid_index,
            hop_limit: 1,
            traffic_class: 0,
            flow_label: 0,
        }
    } else {
        Destination::Lid(remote.lid)
    };
    qp.modify_to_rtr(&QpRtrTransition {
        dest_qp_num: remote.qpn,
        dest,
        sl: 0,
        port: 1,
        path_mtu: Mtu::Mtu1024,
        rq_psn: 0,
        max_dest_rd_atomic: rd_atomic,
        min_rnr_timer: 12,
    })
    .expect("to RTR");
    qp.modify_to_rts(&QpRtsTransition {
        sq_psn: 0,
        timeout: 14,
        retry_cnt: 7,
        rnr_retry: 7,
        max_rd_atomic: rd_atomic,
    })
    .expect("to RTS");
}

/// Polls `cq` until `n` completions arrived (fails the test after
/// [`TIMEOUT`]). Extra CQs are polled too, to drive other devices.
pub fn wait<P: Provider>(cq: &P::Cq, n: usize, also: &[&P::Cq]) -> Vec<WorkCompletion> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut buf = [WorkCompletion::default(); 16];
    while out.len() < n {
        // Never take more than asked: the rest stays in the CQ for the next wait.
        let want = (n - out.len()).min(buf.len());
        let k = cq.poll(&mut buf[..want]).expect("poll");
        out.extend_from_slice(&buf[..k]);
        for c in also {
            let mut none = [];
            c.poll(&mut none).expect("poll");
        }
        if start.elapsed() > TIMEOUT {
            panic!("timed out waiting for {n} completions, got {out:?}");
        }
        if k == 0 {
            std::thread::yield_now();
        }
    }
    out
}

/// Polls `cq` for `d`, asserting nothing arrives.
pub fn expect_none<P: Provider>(cq: &P::Cq, d: Duration) {
    let start = Instant::now();
    let mut buf = [WorkCompletion::default(); 4];
    while start.elapsed() < d {
        let k = cq.poll(&mut buf).expect("poll");
        assert_eq!(k, 0, "unexpected completion {:?}", &buf[..k]);
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Posts a send.
pub fn send<P: Provider>(qp: &P::Qp, wr_id: u64, sge: Sge) {
    // SAFETY: the test keeps the buffer alive and untouched until the completion.
    unsafe {
        qp.post_send(&SendWr {
            wr_id,
            sg_list: &[sge],
            opcode: SendOpcode::Send,
            flags: SendFlags::SIGNALED,
        })
    }
    .expect("post_send");
}

/// Posts a receive.
pub fn recv<P: Provider>(qp: &P::Qp, wr_id: u64, sge: Sge) {
    // SAFETY: as for `send`.
    unsafe {
        qp.post_recv(&RecvWr {
            wr_id,
            sg_list: &[sge],
        })
    }
    .expect("post_recv");
}

/// Posts a signaled atomic whose old value lands in `result` (8 bytes).
pub fn post_atomic<P: Provider>(
    qp: &P::Qp,
    wr_id: u64,
    result: Sge,
    opcode: SendOpcode,
) -> Result<()> {
    assert!(opcode.is_atomic());
    // SAFETY: the test keeps the result buffer alive and untouched until
    // the completion.
    unsafe {
        qp.post_send(&SendWr {
            wr_id,
            sg_list: &[result],
            opcode,
            flags: SendFlags::SIGNALED,
        })
    }
}

/// The host-order u64 at `off` of `bytes`.
pub fn u64_at(bytes: &[u8], off: usize) -> u64 {
    u64::from_ne_bytes(bytes[off..off + 8].try_into().unwrap())
}

/// A deterministic byte pattern.
pub fn pattern(seed: u8, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed))
        .collect()
}
