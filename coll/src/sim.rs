//! An in-process simulated transport: N ranks as N threads exchanging
//! messages through mailboxes, with real concurrency.
//!
//! Behaviour that matters for the algorithms above it:
//! * messages get a random delivery delay (a configurable share of them, up
//!   to `max_delay`), so messages from different sources arrive in random
//!   order, but delivery stays FIFO per (source, destination, context): a
//!   message is never visible before an earlier one on the same path;
//! * matching follows MPI: an arriving message matches the earliest-posted
//!   matching receive, a new receive first searches the unexpected messages
//!   in arrival order; `MPI_ANY_TAG` ([`TagSpec::AnyUser`]) matches only tags
//!   `>= 0`, so collective traffic (negative tags) is invisible to it;
//! * an idle rank blocks on a condition variable until something arrives or
//!   a delayed message becomes due (8 ranks on 2 cores must not spin).
//!
//! Sends are buffered (complete at once). Used by the crate's tests and
//! benchmarks, and usable by other crates' tests.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::p2p::{Done, Endpoint, P2p, P2pHandle};
use crate::{CollError, Result};
use tmpi_base::error::MpiErrorClass;

/// Configuration of a simulated fabric.
#[derive(Debug, Clone)]
pub struct SimConfig {
    /// Number of ranks.
    pub size: u32,
    /// Percentage (0..=100) of messages that get a random delay.
    pub delay_percent: u32,
    /// Largest delay.
    pub max_delay: Duration,
    /// Seed of the delay generator.
    pub seed: u64,
    /// Node label per rank (`split_type(SHARED)`); default: all on node 0.
    pub node_of: Vec<u32>,
    /// Whether the ranks (threads) offer shared memory to the `sm`
    /// component ([`P2p::shares_memory`]); off by default so that the
    /// simulated runs exercise the message algorithms.
    pub shared_memory: bool,
}

impl SimConfig {
    /// `size` ranks on one node, 30 % of messages delayed by up to 200 µs.
    pub fn new(size: u32) -> Self {
        SimConfig {
            size,
            delay_percent: 30,
            max_delay: Duration::from_micros(200),
            seed: 0x5eed_c011 ^ u64::from(size),
            node_of: vec![0; size as usize],
            shared_memory: false,
        }
    }

    /// Without delays (for benchmarks).
    pub fn no_delay(mut self) -> Self {
        self.delay_percent = 0;
        self
    }
}

/// Which tags a receive accepts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TagSpec {
    /// Exactly this tag.
    Exact(i32),
    /// `MPI_ANY_TAG`: any tag `>= 0`.
    AnyUser,
}

impl TagSpec {
    fn matches(self, tag: i32) -> bool {
        match self {
            TagSpec::Exact(t) => t == tag,
            TagSpec::AnyUser => tag >= 0,
        }
    }
}

struct Msg {
    ctx: u32,
    src: u32,
    tag: i32,
    data: Vec<u8>,
    at: Instant,
    seq: u64,
}

struct Posted {
    id: u64,
    ctx: u32,
    src: Option<u32>,
    tag: TagSpec,
    max_len: usize,
}

/// A completed receive: the data and its envelope.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Received {
    /// Source communicator rank.
    pub source: u32,
    /// Tag.
    pub tag: i32,
    /// Payload.
    pub data: Vec<u8>,
}

#[derive(Default)]
struct Mbox {
    in_flight: Vec<Msg>,
    unexpected: VecDeque<Msg>,
    posted: Vec<Posted>,
    done: HashMap<u64, Result<Received>>,
    last_at: HashMap<(u32, u32), Instant>,
}

struct Mailbox {
    st: Mutex<Mbox>,
    cv: Condvar,
}

/// The shared fabric of a simulated job.
pub struct SimFabric {
    cfg: SimConfig,
    boxes: Vec<Mailbox>,
    rng: Mutex<u64>,
    next_id: AtomicU64,
    seq: AtomicU64,
}

const SEND_BIT: u64 = 1 << 63;

impl SimFabric {
    /// A fabric for `cfg.size` ranks.
    pub fn new(cfg: SimConfig) -> Arc<Self> {
        let boxes = (0..cfg.size)
            .map(|_| Mailbox {
                st: Mutex::new(Mbox::default()),
                cv: Condvar::new(),
            })
            .collect();
        Arc::new(SimFabric {
            rng: Mutex::new(cfg.seed | 1),
            cfg,
            boxes,
            next_id: AtomicU64::new(1),
            seq: AtomicU64::new(0),
        })
    }

    /// The transport handle of world rank `rank`.
    pub fn endpoint(self: &Arc<Self>, rank: u32) -> SimP2p {
        assert!(rank < self.cfg.size, "rank {rank} outside the fabric");
        SimP2p {
            fabric: Arc::clone(self),
            rank,
        }
    }

    fn delay(&self) -> Duration {
        if self.cfg.delay_percent == 0 || self.cfg.max_delay.is_zero() {
            return Duration::ZERO;
        }
        let mut s = lock(&self.rng);
        // splitmix64
        *s = s.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = *s;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^= z >> 31;
        if (z % 100) as u32 >= self.cfg.delay_percent {
            return Duration::ZERO;
        }
        let max = self.cfg.max_delay.as_nanos() as u64;
        Duration::from_nanos((z >> 7) % max.max(1))
    }
}

/// Runs `f(rank, transport)` on `size` threads and returns their results in
/// rank order; panics (failing the test) if any rank panics or the whole job
/// takes longer than `timeout`.
pub fn run<T: Send + 'static>(
    cfg: SimConfig,
    timeout: Duration,
    f: impl Fn(SimP2p) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let fabric = SimFabric::new(cfg);
    let f = Arc::new(f);
    let (tx, rx) = std::sync::mpsc::channel();
    for r in 0..fabric.cfg.size {
        let p = fabric.endpoint(r);
        let f = Arc::clone(&f);
        let tx = tx.clone();
        std::thread::Builder::new()
            .name(format!("sim-rank-{r}"))
            .spawn(move || {
                let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| f(p)));
                let _ = tx.send((r, out));
            })
            .expect("spawn a rank thread");
    }
    drop(tx);
    let deadline = Instant::now() + timeout;
    let mut out: Vec<Option<T>> = (0..fabric.cfg.size).map(|_| None).collect();
    for _ in 0..fabric.cfg.size {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok((r, Ok(v))) => out[r as usize] = Some(v),
            Ok((r, Err(p))) => {
                let msg = p
                    .downcast_ref::<String>()
                    .cloned()
                    .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                    .unwrap_or_default();
                panic!("rank {r} panicked: {msg}");
            }
            Err(_) => {
                let missing: Vec<usize> = (0..out.len()).filter(|&i| out[i].is_none()).collect();
                panic!(
                    "simulated job timed out after {timeout:?}; ranks still running: {missing:?}"
                );
            }
        }
    }
    out.into_iter()
        .map(|v| v.expect("every rank reported"))
        .collect()
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// One rank's handle on a [`SimFabric`].
#[derive(Clone)]
pub struct SimP2p {
    fabric: Arc<SimFabric>,
    rank: u32,
}

impl SimP2p {
    /// Sends with any tag (user tags are `>= 0`).
    pub fn send_raw(&self, ep: &Endpoint, dest: u32, tag: i32, data: Vec<u8>) -> Result<()> {
        let dw = *ep.world.get(dest as usize).ok_or(CollError::Rank {
            rank: i64::from(dest),
            size: ep.size(),
        })?;
        let delay = self.fabric.delay();
        let mb = &self.fabric.boxes[dw as usize];
        let mut st = lock(&mb.st);
        let now = Instant::now();
        let key = (self.rank, ep.context_id);
        let mut at = now + delay;
        if let Some(&last) = st.last_at.get(&key) {
            at = at.max(last);
        }
        st.last_at.insert(key, at);
        st.in_flight.push(Msg {
            ctx: ep.context_id,
            src: ep.rank,
            tag,
            data,
            at,
            seq: self.fabric.seq.fetch_add(1, Ordering::Relaxed),
        });
        drop(st);
        mb.cv.notify_all();
        Ok(())
    }

    /// Posts a receive with optional wildcards (`source = None` is
    /// `MPI_ANY_SOURCE`).
    pub fn irecv_spec(
        &self,
        ctx: u32,
        source: Option<u32>,
        tag: TagSpec,
        max_len: usize,
    ) -> P2pHandle {
        let id = self.fabric.next_id.fetch_add(1, Ordering::Relaxed);
        let mut st = lock(&self.mbox().st);
        Self::arrive(&mut st);
        let p = Posted {
            id,
            ctx,
            src: source,
            tag,
            max_len,
        };
        if let Some(i) = st.unexpected.iter().position(|m| Self::fits(&p, m)) {
            let m = st.unexpected.remove(i).expect("index just found");
            st.done.insert(id, Self::deliver(&p, m));
        } else {
            st.posted.push(p);
        }
        P2pHandle(id)
    }

    /// Completes a receive posted with [`SimP2p::irecv_spec`], with its envelope.
    pub fn test_recv(&self, h: P2pHandle) -> Option<Result<Received>> {
        let mut st = lock(&self.mbox().st);
        Self::arrive(&mut st);
        st.done.remove(&h.0)
    }

    /// Blocks until the receive completes.
    pub fn wait_recv(&self, h: P2pHandle) -> Result<Received> {
        loop {
            if let Some(r) = self.test_recv(h) {
                return r;
            }
            self.idle();
        }
    }

    fn mbox(&self) -> &Mailbox {
        &self.fabric.boxes[self.rank as usize]
    }

    fn fits(p: &Posted, m: &Msg) -> bool {
        p.ctx == m.ctx && (p.src == Some(m.src) || p.src.is_none()) && p.tag.matches(m.tag)
    }

    fn deliver(p: &Posted, m: Msg) -> Result<Received> {
        if m.data.len() > p.max_len {
            return Err(CollError::P2p {
                class: MpiErrorClass::Truncate,
                message: format!(
                    "message of {} bytes from rank {} tag {} into a {}-byte receive",
                    m.data.len(),
                    m.src,
                    m.tag,
                    p.max_len
                ),
            });
        }
        Ok(Received {
            source: m.src,
            tag: m.tag,
            data: m.data,
        })
    }

    /// Moves due messages from the wire to matching: each matches the
    /// earliest-posted fitting receive or becomes unexpected.
    fn arrive(st: &mut Mbox) -> bool {
        if st.in_flight.is_empty() {
            return false;
        }
        let now = Instant::now();
        let mut due: Vec<Msg> = Vec::new();
        let mut i = 0;
        while i < st.in_flight.len() {
            if st.in_flight[i].at <= now {
                due.push(st.in_flight.swap_remove(i));
            } else {
                i += 1;
            }
        }
        if due.is_empty() {
            return false;
        }
        due.sort_by_key(|m| (m.at, m.seq));
        for m in due {
            if let Some(i) = st.posted.iter().position(|p| Self::fits(p, &m)) {
                let p = st.posted.remove(i);
                let r = Self::deliver(&p, m);
                st.done.insert(p.id, r);
            } else {
                st.unexpected.push_back(m);
            }
        }
        true
    }
}

impl P2p for SimP2p {
    fn world_rank(&self) -> u32 {
        self.rank
    }

    fn world_size(&self) -> u32 {
        self.fabric.cfg.size
    }

    fn shares_memory(&self) -> bool {
        self.fabric.cfg.shared_memory
    }

    fn node_of(&self, world_rank: u32) -> u32 {
        self.fabric
            .cfg
            .node_of
            .get(world_rank as usize)
            .copied()
            .unwrap_or(0)
    }

    fn isend(&self, ep: &Endpoint, dest: u32, tag: i32, data: Vec<u8>) -> Result<P2pHandle> {
        self.send_raw(ep, dest, tag, data)?;
        let id = self.fabric.next_id.fetch_add(1, Ordering::Relaxed);
        Ok(P2pHandle(id | SEND_BIT))
    }

    fn irecv(&self, ep: &Endpoint, source: u32, tag: i32, max_len: usize) -> Result<P2pHandle> {
        if source >= ep.size() {
            return Err(CollError::Rank {
                rank: i64::from(source),
                size: ep.size(),
            });
        }
        Ok(self.irecv_spec(ep.context_id, Some(source), TagSpec::Exact(tag), max_len))
    }

    fn test(&self, h: P2pHandle) -> Result<Option<Done>> {
        if h.0 & SEND_BIT != 0 {
            return Ok(Some(Done::Sent));
        }
        match self.test_recv(h) {
            None => Ok(None),
            Some(Ok(r)) => Ok(Some(Done::Received(r.data))),
            Some(Err(e)) => Err(e),
        }
    }

    fn progress(&self) -> bool {
        let mut st = lock(&self.mbox().st);
        Self::arrive(&mut st)
    }

    fn idle(&self) {
        let mb = self.mbox();
        let st = lock(&mb.st);
        let now = Instant::now();
        let mut wait = Duration::from_millis(2);
        if let Some(next) = st.in_flight.iter().map(|m| m.at).min() {
            wait = wait.min(next.saturating_duration_since(now));
        }
        if wait.is_zero() {
            drop(st);
            std::thread::yield_now();
            return;
        }
        let _ = mb.cv.wait_timeout(st, wait);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ep(ctx: u32, rank: u32, n: u32) -> Endpoint {
        Endpoint {
            context_id: ctx,
            rank,
            world: (0..n).collect::<Vec<_>>().into(),
        }
    }

    #[test]
    fn fifo_per_source_and_wildcards_skip_internal_tags() {
        let mut cfg = SimConfig::new(3);
        cfg.delay_percent = 100;
        let res = run(cfg, Duration::from_secs(30), |p| {
            let me = p.world_rank();
            let e = ep(7, me, 3);
            if me != 0 {
                for i in 0..200u32 {
                    p.send_raw(&e, 0, -20, (me * 1000 + i).to_ne_bytes().to_vec())
                        .unwrap();
                }
                p.send_raw(&e, 0, 5, vec![me as u8]).unwrap();
                return Vec::new();
            }
            // ANY_TAG from any source: only the two user messages can match.
            let mut got = Vec::new();
            for _ in 0..2 {
                let h = p.irecv_spec(7, None, TagSpec::AnyUser, 8);
                let r = p.wait_recv(h).unwrap();
                assert_eq!(r.tag, 5);
                got.push(r.data[0] as u32);
            }
            got.sort();
            assert_eq!(got, [1, 2]);
            let mut seen = Vec::new();
            for src in [1u32, 2] {
                for i in 0..200u32 {
                    let h = p.irecv(&e, src, -20, 4).unwrap();
                    let v = loop {
                        if let Some(Done::Received(v)) = p.test(h).unwrap() {
                            break v;
                        }
                        p.idle();
                    };
                    let x = u32::from_ne_bytes(v.try_into().unwrap());
                    assert_eq!(x, src * 1000 + i, "FIFO per source broken");
                    seen.push(x);
                }
            }
            seen
        });
        assert_eq!(res[0].len(), 400);
    }

    #[test]
    fn truncation_is_an_error() {
        let res = run(SimConfig::new(2), Duration::from_secs(10), |p| {
            let e = ep(1, p.world_rank(), 2);
            if p.world_rank() == 1 {
                p.send_raw(&e, 0, -16, vec![0; 10]).unwrap();
                return None;
            }
            let h = p.irecv(&e, 1, -16, 4).unwrap();
            loop {
                match p.test(h) {
                    Ok(Some(_)) => return Some(Ok(())),
                    Ok(None) => p.idle(),
                    Err(e) => return Some(Err(e.class())),
                }
            }
        });
        assert_eq!(res[0], Some(Err(MpiErrorClass::Truncate)));
    }
}
