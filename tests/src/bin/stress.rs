//! Randomized, seeded traffic generator over the tmpi Rust API that proves
//! nothing is lost, duplicated, corrupted or misordered:
//! `tmpirun -n N stress [--seed S] [--epochs E] [--msgs M] ...`.
//!
//! Every rank derives the same plan from the seed: per epoch a list of
//! messages (communicator, source, destination, tag, length, standard or
//! synchronous mode) over five communicators (world, a dup, the two halves
//! of a parity split, a split with reversed rank order) and a schedule of
//! non-blocking collectives (on a dup used only for them, on the
//! reversed split and on the dup that also carries point-to-point traffic).
//! Each rank posts its sends non-blocking in plan order while it receives
//! in random batches: specific source and tag, ANY_SOURCE, ANY_TAG, both,
//! probe + receive, iprobe, mprobe/improbe + mrecv, with cancels of posted
//! receives (outcome: cancelled or completed, never both) and of receives
//! that can never match. Blocking calls are used only once all of the
//! rank's sends of the epoch are posted (so no cycle of blocked ranks can
//! form); a barrier ends each epoch. See `docs/stress.md` for what exactly
//! is asserted. Rank 0 prints `stress: OK ...`; any deviation prints
//! `stress FAILED` with the seed and exits non-zero.

use std::collections::HashMap;
use std::process::exit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tmpi::{Comm, Request, Scope, Status, ANY_SOURCE, ANY_TAG, TAG_UB};
use tmpi_coll::PmlP2p;
use tmpi_coll::{CollRequest, Datatype, Input, Op};
use tmpi_comm::CommContext;

type R<T = ()> = Result<T, String>;

// ------------------------------------------------------------------ random

/// splitmix64: small, fast, and identical on every rank for one seed.
#[derive(Clone)]
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Rng {
        Rng(seed ^ 0x6a09_e667_f3bc_c908)
    }
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
    /// Uniform in `lo..=hi`.
    fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo + 1)
    }
    fn permille(&mut self, p: u64) -> bool {
        self.below(1000) < p
    }
}

fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn hash(parts: &[u64]) -> u64 {
    parts
        .iter()
        .fold(0x243f_6a88_85a3_08d3, |h, &p| mix(h ^ p).rotate_left(17))
}

/// Deterministic bytes for a message (xorshift, 8 bytes per step).
fn fill(seed: u64, out: &mut [u8]) {
    let mut x = mix(seed) | 1;
    let mut chunks = out.chunks_exact_mut(8);
    for c in &mut chunks {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        c.copy_from_slice(&x.to_le_bytes());
    }
    x ^= x << 13;
    let rest = chunks.into_remainder();
    let n = rest.len();
    rest.copy_from_slice(&x.to_le_bytes()[..n]);
}

/// Checksum of a body (64-bit words, then the tail).
fn checksum(b: &[u8]) -> u64 {
    let mut h = 0xcbf2_9ce4_8422_2325u64 ^ b.len() as u64;
    let mut chunks = b.chunks_exact(8);
    for c in &mut chunks {
        let w = u64::from_le_bytes(c.try_into().expect("8 bytes"));
        h = (h ^ w).wrapping_mul(0x0100_0000_01b3).rotate_left(29);
    }
    for &c in chunks.remainder() {
        h = (h ^ c as u64).wrapping_mul(0x0100_0000_01b3);
    }
    h
}

// ------------------------------------------------------------------ config

#[derive(Clone, Debug)]
struct Cfg {
    seed: u64,
    epochs: u32,
    /// Messages per epoch (over all ranks).
    msgs: u32,
    max_size: usize,
    /// Share (per mille) of messages of 64 KiB..1 MiB.
    rndv_pm: u64,
    /// Share (per mille) of messages of 1 MiB..max_size.
    big_pm: u64,
    /// Seconds without any completion before a rank reports a hang.
    stall_s: u64,
    /// Bytes of one epoch's sends (over all ranks) at most.
    epoch_bytes: usize,
    /// Start no epoch after this many seconds (0: no limit); decided
    /// together (rank 0's clock) so all ranks stop after the same epoch.
    max_seconds: u64,
    /// Whether the seed came from the command line or the environment
    /// (otherwise rank 0 draws one and sends it to everybody).
    seed_given: bool,
    /// A fault injected on purpose (`--inject drop|dup|corrupt`): proves
    /// the checks fail when something is lost, duplicated or corrupted.
    inject: Inject,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inject {
    None,
    /// Rank 1 does not send its fifth message of epoch 0.
    Drop,
    /// Rank 1 sends its fifth message of epoch 0 twice.
    Dup,
    /// Rank 1 flips a bit in the first received message of 48+ bytes.
    Corrupt,
}

fn parse_args() -> R<Cfg> {
    let mut c = Cfg {
        seed: 0,
        epochs: 10,
        msgs: 300,
        max_size: 4 << 20,
        rndv_pm: 40,
        big_pm: 5,
        stall_s: 60,
        epoch_bytes: 96 << 20,
        max_seconds: 0,
        seed_given: false,
        inject: Inject::None,
    };
    let mut seed = None;
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    while i < args.len() {
        let v = args
            .get(i + 1)
            .ok_or(format!("{} needs a value", args[i]))?;
        let num = || {
            v.parse::<u64>()
                .map_err(|_| format!("{}: not a number: {v}", args[i]))
        };
        match args[i].as_str() {
            "--seed" => seed = Some(num()?),
            "--epochs" => c.epochs = num()? as u32,
            "--msgs" => c.msgs = num()? as u32,
            "--max-size" => c.max_size = num()? as usize,
            "--rndv-permille" => c.rndv_pm = num()?,
            "--big-permille" => c.big_pm = num()?,
            "--stall-seconds" => c.stall_s = num()?,
            "--epoch-bytes" => c.epoch_bytes = num()? as usize,
            "--max-seconds" => c.max_seconds = num()?,
            "--inject" => {
                c.inject = match v.as_str() {
                    "drop" => Inject::Drop,
                    "dup" => Inject::Dup,
                    "corrupt" => Inject::Corrupt,
                    x => return Err(format!("--inject {x}: drop, dup or corrupt")),
                }
            }
            a => return Err(format!("unknown argument {a}")),
        }
        i += 2;
    }
    c.seed = seed
        .or_else(|| std::env::var("TMPI_STRESS_SEED").ok()?.parse().ok())
        .unwrap_or(0);
    c.seed_given = seed.is_some() || c.seed != 0;
    Ok(c)
}

// ------------------------------------------------------------------ plan

/// Plan communicators: 0 world, 1 dup(world), 2 even ranks, 3 odd ranks
/// (split by parity), 4 split with key -rank (reversed), 5 dup(world) for
/// collectives only.
const NCOMM: usize = 5;
const COLL_ONLY: usize = 5;

fn members(comm: usize, n: u32) -> Vec<u32> {
    match comm {
        2 => (0..n).filter(|r| r % 2 == 0).collect(),
        3 => (0..n).filter(|r| r % 2 == 1).collect(),
        4 => (0..n).rev().collect(),
        _ => (0..n).collect(),
    }
}

/// Tag that no plan message uses: receives on it can only be cancelled.
const NEVER_TAG: i32 = 999;
/// Tag of the seed broadcast (before any plan traffic).
const SEED_TAG: i32 = 998;
const HDR: usize = 48;
const MAGIC: u32 = 0x5354_5231;

#[derive(Clone, Debug)]
struct Msg {
    comm: usize,
    src: u32,
    dst: u32,
    tag: i32,
    len: usize,
    sync: bool,
    /// Per (src, dst, comm) across the run: the sender's call order.
    pairseq: u32,
    /// Per (src, dst, comm, tag) across the run.
    tagseq: u32,
}

impl Msg {
    fn body_seed(&self, seed: u64) -> u64 {
        hash(&[
            seed,
            self.src as u64,
            self.dst as u64,
            self.comm as u64,
            self.pairseq as u64,
        ])
    }

    /// The payload: for 48 bytes and more a header (pairseq, magic,
    /// src, dst, comm, tag, epoch, tagseq, len, checksum of the body) and
    /// the body; 4..48 bytes: pairseq + filler; below 4: filler only.
    fn payload(&self, seed: u64, epoch: u32) -> Vec<u8> {
        let mut b = vec![0u8; self.len];
        let s = self.body_seed(seed);
        if self.len >= HDR {
            fill(s, &mut b[HDR..]);
            let cs = checksum(&b[HDR..]);
            let f = [
                self.pairseq,
                MAGIC,
                self.src,
                self.dst,
                self.comm as u32,
                self.tag as u32,
                epoch,
                self.tagseq,
                self.len as u32,
                0,
            ];
            for (k, v) in f.iter().enumerate() {
                b[4 * k..4 * k + 4].copy_from_slice(&v.to_le_bytes());
            }
            b[40..48].copy_from_slice(&cs.to_le_bytes());
        } else if self.len >= 4 {
            b[..4].copy_from_slice(&self.pairseq.to_le_bytes());
            fill(s, &mut b[4..]);
        } else {
            fill(s, &mut b);
        }
        b
    }
}

#[derive(Default)]
struct Counters {
    pair: HashMap<(u32, u32, usize), u32>,
    tag: HashMap<(u32, u32, usize, i32), u32>,
}

fn gen_size(rng: &mut Rng, cfg: &Cfg) -> usize {
    let max = cfg.max_size.max(1);
    let r = rng.below(1000);
    let big = cfg.big_pm;
    let rndv = cfg.rndv_pm;
    let len = if r < big {
        rng.range(1 << 20, max.max(1 << 20) as u64) as usize
    } else if r < big + rndv {
        rng.range(64 << 10, 1 << 20) as usize
    } else {
        match rng.below(100) {
            0..=3 => 0,
            4..=5 => rng.range(1, 3) as usize,
            6..=55 => rng.range(4, 256) as usize,
            56..=85 => rng.range(257, 4096) as usize,
            _ => rng.range(4097, 64 << 10) as usize,
        }
    };
    len.min(max)
}

fn gen_epoch(cfg: &Cfg, e: u32, n: u32, ctr: &mut Counters) -> Vec<Msg> {
    let mut rng = Rng::new(hash(&[cfg.seed, e as u64, 1]));
    let count = rng.range(cfg.msgs as u64 / 2, cfg.msgs as u64 * 3 / 2) as usize;
    let big_tag = rng.range(1000, TAG_UB as u64) as i32;
    let mut bytes = 0usize;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let comm = rng.below(NCOMM as u64) as usize;
        let m = members(comm, n);
        if m.is_empty() {
            continue;
        }
        let src = m[rng.below(m.len() as u64) as usize];
        let mut dst = m[rng.below(m.len() as u64) as usize];
        // Self-sends are a small share where the communicator allows.
        while dst == src && m.len() > 1 && rng.permille(850) {
            dst = m[rng.below(m.len() as u64) as usize];
        }
        let tag = if rng.permille(50) {
            big_tag
        } else {
            rng.below(6) as i32
        };
        let mut len = gen_size(&mut rng, cfg);
        if bytes + len > cfg.epoch_bytes {
            len = len.min(256);
        }
        bytes += len;
        let sync = rng.permille(100);
        let p = ctr.pair.entry((src, dst, comm)).or_insert(0);
        let pairseq = *p;
        *p += 1;
        let t = ctr.tag.entry((src, dst, comm, tag)).or_insert(0);
        let tagseq = *t;
        *t += 1;
        out.push(Msg {
            comm,
            src,
            dst,
            tag,
            len,
            sync,
            pairseq,
            tagseq,
        });
    }
    out
}

/// Non-blocking collectives of an epoch, in the order every member starts
/// them (per communicator the same order everywhere).
#[derive(Clone, Debug)]
struct CollOp {
    comm: usize,
    kind: u8, // 0 barrier, 1 allreduce u64 sum, 2 bcast, 3 allgather
    root: u32,
    len: usize,
    /// Started once this many of the rank's sends are posted (fraction
    /// in per mille of its sends).
    at_pm: u64,
    id: u64,
}

fn gen_colls(cfg: &Cfg, e: u32, n: u32) -> Vec<CollOp> {
    let mut rng = Rng::new(hash(&[cfg.seed, e as u64, 2]));
    let k = rng.range(1, 4);
    let mut v: Vec<CollOp> = (0..k)
        .map(|i| {
            let comm = [1usize, 4, COLL_ONLY][rng.below(3) as usize];
            let kind = rng.below(4) as u8;
            CollOp {
                comm,
                kind,
                root: rng.below(n as u64) as u32,
                len: match kind {
                    1 => 8 * rng.range(1, 512) as usize,
                    2 => rng.range(0, 256 << 10) as usize,
                    3 => rng.range(0, 4096) as usize,
                    _ => 0,
                },
                at_pm: rng.below(1000),
                id: hash(&[cfg.seed, e as u64, i]),
            }
        })
        .collect();
    v.sort_by_key(|c| c.at_pm);
    v
}

impl CollOp {
    /// Rank `r`'s (communicator rank) contribution.
    fn input(&self, r: u32) -> Vec<u8> {
        let mut b = vec![0u8; self.len];
        fill(hash(&[self.id, r as u64]), &mut b);
        b
    }

    fn expected(&self, size: u32) -> Vec<u8> {
        match self.kind {
            1 => {
                let mut acc = vec![0u64; self.len / 8];
                for r in 0..size {
                    for (a, c) in acc.iter_mut().zip(self.input(r).chunks_exact(8)) {
                        *a = a.wrapping_add(u64::from_le_bytes(c.try_into().expect("8")));
                    }
                }
                acc.iter().flat_map(|a| a.to_le_bytes()).collect()
            }
            2 => self.input(self.root),
            3 => (0..size).flat_map(|r| self.input(r)).collect(),
            _ => Vec::new(),
        }
    }

    fn start(&self, c: &tmpi_comm::Comm) -> R<CollRequest> {
        let me = c.rank();
        let r = match self.kind {
            0 => c.ibarrier(),
            1 => c.iallreduce(self.input(me), Datatype::U64, &Op::Sum),
            2 => {
                let b = if me == self.root % c.size() {
                    self.input(self.root % c.size())
                } else {
                    vec![0u8; self.len]
                };
                c.ibcast(b, self.root % c.size())
            }
            _ => c.iallgather(self.input(me)),
        };
        r.map_err(|e| format!("starting collective {self:?}: {e}"))
    }
}

// ------------------------------------------------------------------ watchdog

struct Watch {
    t0: Instant,
    last: AtomicU64,
    what: Mutex<String>,
}

impl Watch {
    fn beat(&self) {
        self.last
            .store(self.t0.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn doing(&self, s: String) {
        *self.what.lock().unwrap_or_else(|p| p.into_inner()) = s;
        self.beat();
    }
}

fn start_watchdog(w: Arc<Watch>, stall_s: u64, rank: i32, seed: u64) {
    std::thread::spawn(move || loop {
        std::thread::sleep(Duration::from_millis(500));
        let now = w.t0.elapsed().as_millis() as u64;
        if now.saturating_sub(w.last.load(Ordering::Relaxed)) > stall_s * 1000 {
            let what = w.what.lock().unwrap_or_else(|p| p.into_inner()).clone();
            eprintln!(
                "rank {rank}: stress FAILED (seed {seed}): no progress for {stall_s} s \
                 (lost message or hang) while {what}"
            );
            exit(3);
        }
    });
}

// ------------------------------------------------------------------ receive side

/// What a receive (or probe) asked for: source (world rank) and tag.
#[derive(Clone, Copy, Debug)]
struct Spec {
    src: Option<u32>,
    tag: Option<i32>,
}

#[derive(Clone, Copy, Debug)]
struct Event {
    post: u64,
    spec: Spec,
    src: u32,
    tag: i32,
    pairseq: u32,
}

#[derive(Default)]
struct Stats {
    msgs: u64,
    bytes: u64,
    cancel_ok: u64,
    cancel_late: u64,
    never_cancelled: u64,
    probes: u64,
    mprobes: u64,
    wild: u64,
    sync_sends: u64,
    colls: u64,
    self_msgs: u64,
}

struct Comms {
    /// Facade handles by plan communicator (None where not a member).
    p2p: Vec<Option<Comm>>,
    coll: Vec<Option<tmpi_comm::Comm>>,
    members: Vec<Vec<u32>>,
}

impl Comms {
    fn world_of(&self, comm: usize, r: i32) -> R<u32> {
        self.members[comm]
            .get(r as usize)
            .copied()
            .ok_or(format!("comm {comm}: status source {r} out of range"))
    }
    fn rank_in(&self, comm: usize, world: u32) -> i32 {
        self.members[comm]
            .iter()
            .position(|&w| w == world)
            .expect("member") as i32
    }
}

/// Receive state of one epoch on this rank.
struct Inbox<'p> {
    me: u32,
    epoch: u32,
    seed: u64,
    plan: &'p [Msg],
    /// (comm, src, pairseq) → plan index, for messages to me.
    by_id: HashMap<(usize, u32, u32), usize>,
    got: Vec<bool>,
    /// Per comm: plan indices of messages still expected.
    left: Vec<Vec<usize>>,
    events: Vec<Vec<Event>>,
    post: u64,
    /// `--inject corrupt`: flip a bit of the next message with a body.
    corrupt: bool,
}

impl<'p> Inbox<'p> {
    fn new(me: u32, epoch: u32, seed: u64, plan: &'p [Msg]) -> Self {
        let mut by_id = HashMap::new();
        let mut left = vec![Vec::new(); NCOMM];
        for (i, m) in plan.iter().enumerate() {
            if m.dst == me {
                by_id.insert((m.comm, m.src, m.pairseq), i);
                left[m.comm].push(i);
            }
        }
        Inbox {
            me,
            epoch,
            seed,
            plan,
            by_id,
            got: vec![false; plan.len()],
            left,
            events: vec![Vec::new(); NCOMM],
            post: 0,
            corrupt: false,
        }
    }

    fn remaining(&self) -> usize {
        self.left.iter().map(Vec::len).sum()
    }

    /// Identifies, verifies and books one received message.
    #[allow(clippy::too_many_arguments)]
    fn accept(
        &mut self,
        comm: usize,
        cs: &Comms,
        st: &Status,
        buf: &[u8],
        spec: Spec,
        post: u64,
        stats: &mut Stats,
    ) -> R {
        let src = cs.world_of(comm, st.source())?;
        let n = st.bytes();
        let ctx = || {
            format!(
                "epoch {} comm {comm}: message from {src} tag {} len {n}",
                self.epoch,
                st.tag()
            )
        };
        if n > buf.len() {
            return Err(format!("{}: status longer than the buffer", ctx()));
        }
        let i = if n >= 4 {
            let ps = u32::from_le_bytes(buf[..4].try_into().expect("4"));
            *self.by_id.get(&(comm, src, ps)).ok_or_else(|| {
                format!(
                    "{}: pairseq {ps} is no message of this epoch to me (foreign, stale or corrupt)",
                    ctx()
                )
            })?
        } else {
            // Too short for a header: the earliest unreceived message of
            // that class (indistinguishable ones are interchangeable).
            *self.left[comm]
                .iter()
                .filter(|&&i| {
                    let m = &self.plan[i];
                    m.src == src && m.tag == st.tag() && m.len == n
                })
                .min_by_key(|&&i| self.plan[i].pairseq)
                .ok_or_else(|| format!("{}: no such short message expected", ctx()))?
        };
        let m = &self.plan[i];
        if spec.src.is_some_and(|s| s != src) || spec.tag.is_some_and(|t| t != st.tag()) {
            return Err(format!("{}: does not match the receive's {spec:?}", ctx()));
        }
        if self.got[i] {
            return Err(format!("{}: DUPLICATE of pairseq {}", ctx(), m.pairseq));
        }
        if m.tag != st.tag() || m.len != n || m.comm != comm || m.dst != self.me {
            return Err(format!(
                "{}: envelope differs from the plan's message {m:?}",
                ctx()
            ));
        }
        let mut flipped;
        let mut b = &buf[..n];
        if self.corrupt && n > HDR {
            self.corrupt = false;
            flipped = b.to_vec();
            flipped[n - 1] ^= 1;
            b = &flipped[..];
        }
        if n >= HDR {
            let w = |k: usize| u32::from_le_bytes(b[4 * k..4 * k + 4].try_into().expect("4"));
            let want = [
                m.pairseq,
                MAGIC,
                m.src,
                m.dst,
                m.comm as u32,
                m.tag as u32,
                self.epoch,
                m.tagseq,
                m.len as u32,
                0,
            ];
            for (k, v) in want.iter().enumerate() {
                if w(k) != *v {
                    return Err(format!("{}: header word {k} is {} not {v}", ctx(), w(k)));
                }
            }
            let cs_hdr = u64::from_le_bytes(b[40..48].try_into().expect("8"));
            if checksum(&b[HDR..]) != cs_hdr {
                let want = m.payload(self.seed, self.epoch);
                let bad: Vec<usize> = (0..n).filter(|&k| b[k] != want[k]).collect();
                let zeros = bad.iter().filter(|&&k| b[k] == 0).count();
                return Err(format!(
                    "{}: CHECKSUM mismatch (corrupt body): {} bytes differ, first at {:?}, last at {:?}, {zeros} of them received as 0; sync {}",
                    ctx(),
                    bad.len(),
                    bad.first(),
                    bad.last(),
                    m.sync
                ));
            }
        } else if b != &m.payload(self.seed, self.epoch)[..] {
            // Which message of the same envelope would it have been?
            let same: Vec<String> = (0..self.plan.len())
                .filter(|&j| {
                    let o = &self.plan[j];
                    o.comm == comm && o.src == src && o.dst == self.me && o.tag == m.tag
                })
                .map(|j| {
                    let o = &self.plan[j];
                    let p = o.payload(self.seed, self.epoch);
                    format!(
                        "pairseq {} len {} got {} head {:?}",
                        o.pairseq,
                        o.len,
                        self.got[j],
                        &p[..p.len().min(8)]
                    )
                })
                .collect();
            return Err(format!(
                "{}: short payload {b:?} differs from the plan's {:?} (pairseq {}); messages of this envelope: {same:?}",
                ctx(),
                m.payload(self.seed, self.epoch),
                m.pairseq
            ));
        }
        // Nothing written past the message (the buffer was filled with 0xA5).
        let tail = &buf[n..buf.len().min(n + 64)];
        if tail.iter().any(|&c| c != 0xA5) {
            return Err(format!("{}: bytes written past the message", ctx()));
        }
        self.got[i] = true;
        self.left[comm].retain(|&j| j != i);
        self.events[comm].push(Event {
            post,
            spec,
            src,
            tag: m.tag,
            pairseq: m.pairseq,
        });
        stats.msgs += 1;
        stats.bytes += n as u64;
        if src == self.me {
            stats.self_msgs += 1;
        }
        Ok(())
    }

    /// Non-overtaking (MPI-3.1 §3.5): a receive posted before another, on
    /// the same communicator, cannot take a later message from a source
    /// while an earlier message from that source that it also matches is
    /// taken by the later receive. Checked over every pair at once: per
    /// source, walking receives from the last posted backwards.
    fn check_order(&self) -> R {
        for (comm, evs) in self.events.iter().enumerate() {
            let mut by_src: HashMap<u32, Vec<Event>> = HashMap::new();
            for e in evs {
                by_src.entry(e.src).or_default().push(*e);
            }
            for (src, mut v) in by_src {
                v.sort_by_key(|e| std::cmp::Reverse(e.post));
                let mut min_any = u32::MAX;
                let mut min_tag: HashMap<i32, u32> = HashMap::new();
                for e in &v {
                    let limit = match e.spec.tag {
                        None => min_any,
                        Some(t) => min_tag.get(&t).copied().unwrap_or(u32::MAX),
                    };
                    if limit < e.pairseq {
                        return Err(format!(
                            "epoch {} comm {comm}: OVERTAKING from {src}: receive {:?} (post #{}) \
                             got pairseq {} while the earlier-sent pairseq {limit}, which it \
                             matches, went to a later receive",
                            self.epoch, e.spec, e.post, e.pairseq
                        ));
                    }
                    min_any = min_any.min(e.pairseq);
                    let t = min_tag.entry(e.tag).or_insert(u32::MAX);
                    *t = (*t).min(e.pairseq);
                }
            }
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ send side

struct Outbox<'o, 'e> {
    scope: &'o Scope<'o, 'e>,
    bufs: &'o [Vec<u8>],
    /// Plan indices of my sends, in plan order.
    mine: Vec<usize>,
    next: usize,
    reqs: Vec<Option<Request<'o>>>,
    inject: Inject,
}

impl Outbox<'_, '_> {
    fn more(&self) -> bool {
        self.next < self.mine.len()
    }

    fn post_one(&mut self, plan: &[Msg], cs: &Comms, stats: &mut Stats) -> R {
        let i = self.mine[self.next];
        let m = &plan[i];
        // Self-test of the checker: a lost or duplicated message.
        if self.inject == Inject::Drop && self.next == 4 {
            self.next += 1;
            return Ok(());
        }
        if self.inject == Inject::Dup && self.next == 4 {
            eprintln!("stress: --inject dup: sending {m:?} twice");
            let c = cs.p2p[m.comm].as_ref().expect("member");
            let r = c
                .isend(
                    self.scope,
                    &self.bufs[self.next][..],
                    cs.rank_in(m.comm, m.dst),
                    m.tag,
                )
                .map_err(|e| format!("isend: {e}"))?;
            self.reqs.push(Some(r));
        }
        let c = cs.p2p[m.comm].as_ref().expect("member");
        let dst = cs.rank_in(m.comm, m.dst);
        let buf = &self.bufs[self.next][..];
        let r = if m.sync {
            stats.sync_sends += 1;
            c.issend(self.scope, buf, dst, m.tag)
        } else {
            c.isend(self.scope, buf, dst, m.tag)
        }
        .map_err(|e| format!("isend {m:?}: {e}"))?;
        self.reqs.push(Some(r));
        self.next += 1;
        Ok(())
    }

    fn reap(&mut self) -> R {
        for (_, r) in Request::some(&mut self.reqs, false) {
            r.map_err(|e| format!("send completed with an error: {e}"))?;
        }
        Ok(())
    }
}

// ------------------------------------------------------------------ the run

struct Ctx<'a> {
    cfg: &'a Cfg,
    cs: &'a Comms,
    watch: &'a Watch,
    u: &'a CommContext,
}

/// One epoch.
fn epoch(cx: &Ctx, e: u32, plan: &[Msg], me: u32, n: u32, stats: &mut Stats) -> R {
    let cfg = cx.cfg;
    let cs = cx.cs;
    let mine: Vec<usize> = (0..plan.len()).filter(|&i| plan[i].src == me).collect();
    let bufs: Vec<Vec<u8>> = mine.iter().map(|&i| plan[i].payload(cfg.seed, e)).collect();
    let colls: Vec<CollOp> = gen_colls(cfg, e, n);
    let mut rng = Rng::new(hash(&[cfg.seed, e as u64, 3, me as u64]));
    let mut inbox = Inbox::new(me, e, cfg.seed, plan);
    inbox.corrupt = cfg.inject == Inject::Corrupt && e == 0 && me == 1;
    let mut started: Vec<(CollOp, CollRequest)> = Vec::new();
    let mut next_coll = 0usize;
    tmpi::scope(|outer| -> R {
        // An error ends the process at once: unwinding the scope would
        // wait for sends whose receiver may never match them.
        let mut out = Outbox {
            scope: outer,
            bufs: &bufs,
            mine: mine.clone(),
            next: 0,
            reqs: Vec::new(),
            inject: if e == 0 && me == 1 {
                cfg.inject
            } else {
                Inject::None
            },
        };
        let mut body = || -> R {
            let out = &mut out;
            loop {
                // Collectives due at this point of my sends, in schedule order.
                while next_coll < colls.len()
                    && (!out.more()
                        || (out.next as u64) * 1000 >= colls[next_coll].at_pm * mine.len() as u64)
                {
                    let op = &colls[next_coll];
                    let c = cs.coll[op.comm].as_ref().expect("every rank is a member");
                    started.push((op.clone(), op.start(c)?));
                    next_coll += 1;
                }
                let left = inbox.remaining();
                if left == 0 && !out.more() {
                    break;
                }
                cx.watch.doing(format!(
                    "epoch {e}: {} of {} sends posted, {left} receives left, e.g. {:?}",
                    out.next,
                    mine.len(),
                    inbox
                        .left
                        .iter()
                        .flatten()
                        .take(3)
                        .map(|&i| &plan[i])
                        .collect::<Vec<_>>()
                ));
                let act = rng.below(10);
                if out.more() && (left == 0 || act < 4) {
                    let k = rng.range(1, 8);
                    for _ in 0..k {
                        if out.more() {
                            out.post_one(plan, cs, stats)?;
                        }
                    }
                    out.reap()?;
                } else if left > 0 {
                    recv_batch(cx, &mut inbox, out, &mut rng, plan, stats)?;
                }
                for (_, r) in &started {
                    r.test().map_err(|e| format!("collective test: {e}"))?;
                }
                cx.u.progress();
            }
            cx.watch.doing(format!("epoch {e}: waiting for my sends"));
            let reqs: Vec<Request> = out.reqs.drain(..).flatten().collect();
            Request::wait_all(reqs).map_err(|e| format!("send: {e}"))?;
            Ok(())
        };
        if let Err(e) = body() {
            die(&e);
        }
        Ok(())
    })?;
    cx.watch
        .doing(format!("epoch {e}: waiting for collectives"));
    for (op, r) in started {
        let c = cs.coll[op.comm].as_ref().expect("member");
        let got = r.wait().map_err(|er| format!("collective {op:?}: {er}"))?;
        let want = op.expected(c.size());
        if got != want {
            return Err(format!(
                "epoch {e}: collective {op:?} on comm {}: wrong result ({} bytes, expected {})",
                op.comm,
                got.len(),
                want.len()
            ));
        }
        stats.colls += 1;
    }
    inbox.check_order()?;
    if inbox.got.iter().zip(plan).any(|(&g, m)| m.dst == me && !g) {
        return Err(format!("epoch {e}: a message was never received"));
    }
    cx.watch.doing(format!("epoch {e}: end barrier"));
    cs.p2p[0]
        .as_ref()
        .expect("world")
        .barrier()
        .map_err(|er| format!("barrier: {er}"))?;
    cx.watch.beat();
    Ok(())
}

/// Kinds of receive batches.
const SPECIFIC: u64 = 0;
const ANY_SRC: u64 = 1;
const ANY_TG: u64 = 2;
// 3: ANY_SOURCE and ANY_TAG.
const PROBE: u64 = 4;
const MPROBE: u64 = 5;

fn to_spec(cs: &Comms, comm: usize, src: i32, tag: i32) -> Spec {
    Spec {
        src: (src != ANY_SOURCE).then(|| cs.members[comm][src as usize]),
        tag: (tag != ANY_TAG).then_some(tag),
    }
}

/// Posts one batch of receives of one kind on one communicator and
/// completes it (posting sends meanwhile while any are left).
fn recv_batch(
    cx: &Ctx,
    inbox: &mut Inbox,
    out: &mut Outbox,
    rng: &mut Rng,
    plan: &[Msg],
    stats: &mut Stats,
) -> R {
    let cs = cx.cs;
    let comms: Vec<usize> = (0..NCOMM).filter(|&c| !inbox.left[c].is_empty()).collect();
    let comm = comms[rng.below(comms.len() as u64) as usize];
    let c = cs.p2p[comm].as_ref().expect("member").clone();
    let kind = rng.below(6);
    if kind == PROBE || kind == MPROBE {
        return probe_batch(cx, inbox, out, rng, plan, stats, comm, &c, kind == MPROBE);
    }
    // Receives of one kind, each satisfiable whatever matching order the
    // messages take: classes are disjoint within the batch.
    let left = inbox.left[comm].clone();
    let class_of = |i: usize| -> (i32, i32) {
        let m = &plan[i];
        let s = cs.rank_in(comm, m.src);
        match kind {
            SPECIFIC => (s, m.tag),
            ANY_SRC => (ANY_SOURCE, m.tag),
            ANY_TG => (s, ANY_TAG),
            _ => (ANY_SOURCE, ANY_TAG),
        }
    };
    let mut classes: HashMap<(i32, i32), (usize, usize)> = HashMap::new(); // count, max len
    for &i in &left {
        let e = classes.entry(class_of(i)).or_insert((0, 0));
        e.0 += 1;
        e.1 = e.1.max(plan[i].len);
    }
    let mut keys: Vec<(i32, i32)> = classes.keys().copied().collect();
    keys.sort_unstable();
    let want = rng.range(1, 24) as usize;
    let mut specs: Vec<((i32, i32), usize)> = Vec::new();
    let mut mem = 0usize;
    for _ in 0..want {
        let k = keys[rng.below(keys.len() as u64) as usize];
        let e = classes.get_mut(&k).expect("class");
        if e.0 == 0 || (mem > 0 && mem + e.1 > 64 << 20) {
            continue;
        }
        e.0 -= 1;
        mem += e.1 + 64;
        specs.push((k, e.1 + rng.below(3) as usize * 16));
    }
    if specs.is_empty() {
        return Ok(());
    }
    // A receive that can never match, cancelled (must report cancelled).
    let never = rng.permille(100);
    let mut bufs: Vec<Vec<u8>> = specs.iter().map(|s| vec![0xA5u8; s.1 + 64]).collect();
    let mut never_buf = vec![0xA5u8; 16];
    let posts: Vec<u64> = specs
        .iter()
        .map(|_| {
            inbox.post += 1;
            inbox.post
        })
        .collect();
    let cancel: Vec<bool> = specs.iter().map(|_| rng.permille(60)).collect();
    let block_ok = rng.permille(500);
    let results: Vec<(usize, Result<Status, tmpi::Error>, bool)> = tmpi::scope(|s| {
        // Errors end the process here (see `die`): unwinding the scope
        // would wait for receives.
        {
            let mut reqs: Vec<Option<Request>> = Vec::new();
            for (b, ((src, tag), _)) in bufs.iter_mut().zip(&specs) {
                let r = c
                    .irecv(s, b, *src, *tag)
                    .unwrap_or_else(|e| die(&format!("irecv: {e}")));
                reqs.push(Some(r));
            }
            let mut cancel_said = vec![false; reqs.len()];
            for (i, r) in reqs.iter().enumerate() {
                if cancel[i] {
                    cancel_said[i] = r
                        .as_ref()
                        .expect("posted")
                        .cancel()
                        .unwrap_or_else(|e| die(&format!("cancel: {e}")));
                }
            }
            if never {
                let src = rng.below(c.size() as u64) as i32;
                let r = c
                    .irecv(s, &mut never_buf, src, NEVER_TAG)
                    .unwrap_or_else(|e| die(&format!("irecv: {e}")));
                for _ in 0..rng.below(3) {
                    cx.u.progress();
                }
                let said = r.cancel().unwrap_or_else(|e| die(&format!("cancel: {e}")));
                let st = r
                    .wait()
                    .unwrap_or_else(|e| die(&format!("wait cancelled: {e}")));
                if !said || !st.cancelled() {
                    die(&format!(
                        "a receive that cannot match was not cancelled (cancel said {said}, status {st:?})"
                    ));
                }
                stats.never_cancelled += 1;
            }
            let mut res = Vec::new();
            let mut pending = reqs.len();
            while pending > 0 {
                let mut done = Request::some(&mut reqs, false);
                if done.is_empty() {
                    if out.more() {
                        out.post_one(plan, cs, stats).unwrap_or_else(|e| die(&e));
                    } else {
                        cx.u.progress();
                        if block_ok {
                            cx.watch
                                .doing(format!("waitsome on receives {specs:?} on comm {comm}"));
                            done = Request::some(&mut reqs, true);
                        }
                    }
                }
                for (i, r) in done {
                    if i == usize::MAX {
                        die(&format!("waitsome: {:?}", r.err()));
                    }
                    res.push((i, r, cancel_said[i]));
                    pending -= 1;
                    cx.watch.beat();
                }
            }
            res
        }
    });
    if never_buf.iter().any(|&b| b != 0xA5) {
        return Err("a cancelled receive wrote into its buffer".into());
    }
    // Book in posting order (not completion order): a message too short
    // for a sequence number is identified as the earliest unreceived one
    // of its class, which is what the earliest-posted receive must get.
    let mut results = results;
    results.sort_by_key(|r| r.0);
    for (i, r, said) in results {
        let ((src, tag), _) = specs[i];
        match r {
            Ok(st) if st.cancelled() => {
                if !said {
                    return Err(format!(
                        "cancel said false but the status says cancelled: {st:?}"
                    ));
                }
                if bufs[i].iter().take(4096).any(|&b| b != 0xA5) {
                    return Err("a cancelled receive wrote into its buffer".into());
                }
                stats.cancel_ok += 1;
            }
            Ok(st) => {
                if said {
                    return Err(format!(
                        "cancel said true but the receive completed with data: {st:?}"
                    ));
                }
                if cancel[i] {
                    stats.cancel_late += 1;
                }
                if src == ANY_SOURCE || tag == ANY_TAG {
                    stats.wild += 1;
                }
                let spec = to_spec(cs, comm, src, tag);
                inbox.accept(comm, cs, &st, &bufs[i], spec, posts[i], stats)?;
            }
            Err(er) => return Err(format!("receive ({src},{tag}) on comm {comm}: {er}")),
        }
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
fn probe_batch(
    cx: &Ctx,
    inbox: &mut Inbox,
    out: &mut Outbox,
    rng: &mut Rng,
    plan: &[Msg],
    stats: &mut Stats,
    comm: usize,
    c: &Comm,
    matched: bool,
) -> R {
    let cs = cx.cs;
    for _ in 0..rng.range(1, 8) {
        let left = &inbox.left[comm];
        if left.is_empty() {
            break;
        }
        let m = &plan[left[rng.below(left.len() as u64) as usize]];
        let s = cs.rank_in(comm, m.src);
        let (src, tag) = match rng.below(4) {
            0 => (ANY_SOURCE, ANY_TAG),
            1 => (s, ANY_TAG),
            2 => (ANY_SOURCE, m.tag),
            _ => (s, m.tag),
        };
        inbox.post += 1;
        let post = inbox.post;
        let spec = to_spec(cs, comm, src, tag);
        // Non-blocking probes while my sends are not all posted; then,
        // at random, the blocking forms.
        let blocking = rng.permille(500);
        let e = |x: tmpi::Error| format!("probe ({src},{tag}) on comm {comm}: {x}");
        if matched {
            let (msg, st) = loop {
                if !out.more() && blocking {
                    cx.watch
                        .doing(format!("blocking mprobe({src},{tag}) on comm {comm}"));
                    break c.mprobe(src, tag).map_err(e)?;
                }
                if let Some(x) = c.improbe(src, tag).map_err(e)? {
                    break x;
                }
                if out.more() {
                    out.post_one(plan, cs, stats)?;
                }
                cx.u.progress();
            };
            if msg.bytes() != st.bytes() {
                return Err(format!(
                    "mprobe: message {} bytes, status {st:?}",
                    msg.bytes()
                ));
            }
            let mut buf = vec![0xA5u8; st.bytes() + 64];
            let r = if rng.permille(500) {
                msg.recv(&mut buf[..st.bytes()])
            } else {
                tmpi::scope(|sc| msg.irecv(sc, &mut buf[..st.bytes()])?.wait())
            }
            .map_err(|x| format!("mrecv: {x}"))?;
            if r.source() != st.source() || r.tag() != st.tag() || r.bytes() != st.bytes() {
                return Err(format!("mrecv status {r:?} differs from mprobe's {st:?}"));
            }
            stats.mprobes += 1;
            inbox.accept(comm, cs, &r, &buf, spec, post, stats)?;
        } else {
            let st = loop {
                if !out.more() && blocking {
                    cx.watch
                        .doing(format!("blocking probe({src},{tag}) on comm {comm}"));
                    break c.probe(src, tag).map_err(e)?;
                }
                if let Some(x) = c.iprobe(src, tag).map_err(e)? {
                    break x;
                }
                if out.more() {
                    out.post_one(plan, cs, stats)?;
                }
                cx.u.progress();
            };
            // A second probe sees the same message.
            let again = c
                .iprobe(st.source(), st.tag())
                .map_err(e)?
                .ok_or("probed message vanished")?;
            if again != st {
                return Err(format!("iprobe {again:?} after probe {st:?}"));
            }
            let mut buf = vec![0xA5u8; st.bytes() + 64];
            let r = c
                .recv(&mut buf[..st.bytes()], st.source(), st.tag())
                .map_err(|x| format!("recv after probe {st:?}: {x}"))?;
            if r.source() != st.source() || r.tag() != st.tag() || r.bytes() != st.bytes() {
                return Err(format!("recv status {r:?} differs from probe's {st:?}"));
            }
            stats.probes += 1;
            inbox.accept(comm, cs, &r, &buf, spec, post, stats)?;
        }
        cx.watch.beat();
    }
    Ok(())
}

fn run(mpi: &tmpi::Mpi, cfg: &Cfg, watch: &Arc<Watch>) -> R<String> {
    let world = mpi.world();
    let me = world.rank() as u32;
    let n = world.size() as u32;
    let p2p = PmlP2p::new(mpi.pml().clone());
    let u = CommContext::init(Arc::new(p2p), tmpi_base::mca::registry())
        .map_err(|e| format!("coll init: {e}"))?;
    let ce = |e: tmpi_coll::CollError| format!("communicator creation: {e}");
    // Every rank creates the communicators in the same order.
    let dup = u.world.dup().map_err(ce)?;
    let parity = u.world.split(Some(me % 2), me as i32).map_err(ce)?;
    let rev = u.world.split(Some(0), -(me as i32)).map_err(ce)?;
    let cdup = u.world.dup().map_err(ce)?;
    let mut coll: Vec<Option<tmpi_comm::Comm>> = vec![None; NCOMM + 1];
    coll[0] = Some(u.world.clone());
    coll[1] = Some(dup);
    coll[2 + (me % 2) as usize] = parity;
    coll[4] = rev;
    coll[COLL_ONLY] = Some(cdup);
    let mut p2pc: Vec<Option<Comm>> = vec![None; NCOMM + 1];
    let mut mem = Vec::new();
    for (k, c) in coll.iter().enumerate() {
        let m = members(k, n);
        if let Some(c) = c {
            let f = mpi
                .comm_for_context(c.context_id())
                .map_err(|e| format!("facade comm {k}: {e}"))?;
            let mine = m.iter().position(|&w| w == me);
            if mine != Some(f.rank() as usize) || f.size() as usize != m.len() {
                return Err(format!(
                    "comm {k}: rank {} size {} but the plan expects position {mine:?} of {m:?}",
                    f.rank(),
                    f.size()
                ));
            }
            p2pc[k] = Some(f);
        } else if m.contains(&me) {
            return Err(format!("comm {k}: not created though a member"));
        }
        mem.push(m);
    }
    let cs = Comms {
        p2p: p2pc,
        coll,
        members: mem,
    };
    let cx = Ctx {
        cfg,
        cs: &cs,
        watch: watch.as_ref(),
        u: &u.ctx,
    };
    let mut stats = Stats::default();
    let mut ctr = Counters::default();
    let mut planned = 0u64;
    // Per destination: messages and bytes I sent; per source: what I got.
    let mut sent = vec![[0u64; 2]; n as usize];
    let mut got = vec![[0u64; 2]; n as usize];
    let t0 = Instant::now();
    let mut epochs_run = 0;
    for e in 0..cfg.epochs {
        if cfg.max_seconds > 0 {
            // Rank 0's clock decides for everybody.
            let over = u64::from(me == 0 && t0.elapsed().as_secs() >= cfg.max_seconds);
            let mut any = [0u8; 8];
            cs.coll[COLL_ONLY]
                .as_ref()
                .expect("dup")
                .allreduce(
                    Input::Buf(&over.to_le_bytes()),
                    &mut any,
                    Datatype::U64,
                    &Op::Max,
                )
                .map_err(|e| format!("allreduce: {e}"))?;
            if u64::from_le_bytes(any) != 0 {
                break;
            }
        }
        epochs_run += 1;
        let plan = gen_epoch(cfg, e, n, &mut ctr);
        planned += plan.len() as u64;
        for m in &plan {
            if m.src == me {
                sent[m.dst as usize][0] += 1;
                sent[m.dst as usize][1] += m.len as u64;
            }
        }
        epoch(&cx, e, &plan, me, n, &mut stats)?;
        for m in plan.iter().filter(|m| m.dst == me) {
            got[m.src as usize][0] += 1;
            got[m.src as usize][1] += m.len as u64;
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    watch.doing("end-of-run count exchange".into());
    // End-of-run exchange: every rank tells every peer how many messages
    // and bytes it sent it; each compares with what it received.
    let w = &cs.coll[COLL_ONLY].as_ref().expect("dup");
    let sbuf: Vec<u8> = sent
        .iter()
        .flatten()
        .flat_map(|v| v.to_le_bytes())
        .collect();
    let mut rbuf = vec![0u8; sbuf.len()];
    w.alltoall(Input::Buf(&sbuf), &mut rbuf)
        .map_err(|e| format!("alltoall: {e}"))?;
    let mut recv_total = 0u64;
    for (src, ch) in rbuf.chunks_exact(16).enumerate() {
        let cnt = u64::from_le_bytes(ch[..8].try_into().expect("8"));
        let byt = u64::from_le_bytes(ch[8..].try_into().expect("8"));
        if [cnt, byt] != got[src] {
            return Err(format!(
                "rank {src} says it sent me {cnt} messages / {byt} bytes; I received {} / {}",
                got[src][0], got[src][1]
            ));
        }
        recv_total += cnt;
    }
    if recv_total != stats.msgs {
        return Err(format!(
            "received {} messages, peers sent me {recv_total}",
            stats.msgs
        ));
    }
    // Nothing left over on any communicator (a duplicate would be here).
    cs.p2p[0]
        .as_ref()
        .expect("world")
        .barrier()
        .map_err(|e| e.to_string())?;
    let until = Instant::now() + Duration::from_millis(100);
    while Instant::now() < until {
        for (k, c) in cs.p2p.iter().enumerate() {
            if let Some(c) = c {
                if let Some(st) = c.iprobe(ANY_SOURCE, ANY_TAG).map_err(|e| e.to_string())? {
                    return Err(format!(
                        "comm {k}: a message left over after the run: {st:?}"
                    ));
                }
            }
        }
        std::thread::yield_now();
    }
    // Totals over all ranks.
    let mine = [
        stats.msgs,
        stats.bytes,
        stats.cancel_ok,
        stats.cancel_late,
        stats.never_cancelled,
        stats.probes,
        stats.mprobes,
        stats.wild,
        stats.sync_sends,
        stats.colls,
        stats.self_msgs,
        mpi.stats().dropped,
    ];
    let sb: Vec<u8> = mine.iter().flat_map(|v| v.to_le_bytes()).collect();
    let mut tot = vec![0u8; sb.len()];
    w.allreduce(Input::Buf(&sb), &mut tot, Datatype::U64, &Op::Sum)
        .map_err(|e| format!("allreduce: {e}"))?;
    let t: Vec<u64> = tot
        .chunks_exact(8)
        .map(|c| u64::from_le_bytes(c.try_into().expect("8")))
        .collect();
    if t[11] != 0 {
        return Err(format!(
            "the pml dropped {} fragments as malformed or unknown",
            t[11]
        ));
    }
    if t[0] != planned {
        return Err(format!(
            "{} messages received in all, {planned} planned",
            t[0]
        ));
    }
    drop(cs);
    drop(u);
    Ok(format!(
        "seed {} ranks {n} epochs {} messages {} bytes {} time {secs:.2} s ({:.0} msg/s); \
         wildcard receives {}, probes {}, mprobes {}, ssends {}, self {}, cancels: {} cancelled / \
         {} completed first / {} never-matching cancelled; collectives {}; rank 0 pml {:?}",
        cfg.seed,
        epochs_run,
        t[0],
        t[1],
        t[0] as f64 / secs.max(1e-9),
        t[7],
        t[5],
        t[6],
        t[8],
        t[10],
        t[2],
        t[3],
        t[4],
        t[9],
        mpi.stats()
    ))
}

static WHO: std::sync::OnceLock<(i32, u64)> = std::sync::OnceLock::new();

/// Reports a failure and exits without finalize (the launcher ends the
/// job): no unwinding through scopes that would wait for requests.
fn die(e: &str) -> ! {
    let (rank, seed) = WHO.get().copied().unwrap_or((-1, 0));
    eprintln!(
        "rank {rank}: stress FAILED (seed {seed}; rerun with --seed {seed} and the same options): {e}"
    );
    exit(1);
}

fn main() {
    let mut cfg = match parse_args() {
        Ok(c) => c,
        Err(e) => {
            eprintln!("stress: {e}");
            exit(2);
        }
    };
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(e) => {
            eprintln!("stress: MPI init failed: {e}");
            exit(4);
        }
    };
    let world = mpi.world();
    let rank = world.rank();
    if !cfg.seed_given {
        // Rank 0 draws the seed and tells everybody (before any traffic).
        let mut s = [0u64];
        if rank == 0 {
            s[0] = hash(&[
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1),
                std::process::id() as u64,
            ]) & 0xffff_ffff;
            for r in 1..world.size() {
                if let Err(e) = world.send(&s, r, SEED_TAG) {
                    eprintln!("stress: sending the seed: {e}");
                    exit(1);
                }
            }
        } else if let Err(e) = world.recv(&mut s, 0, SEED_TAG) {
            eprintln!("stress: receiving the seed: {e}");
            exit(1);
        }
        cfg.seed = s[0];
    }
    if rank == 0 {
        println!("stress: seed {} (rerun with --seed {})", cfg.seed, cfg.seed);
    }
    let _ = WHO.set((rank, cfg.seed));
    let watch = Arc::new(Watch {
        t0: Instant::now(),
        last: AtomicU64::new(0),
        what: Mutex::new("starting".into()),
    });
    start_watchdog(watch.clone(), cfg.stall_s, rank, cfg.seed);
    match run(&mpi, &cfg, &watch) {
        Ok(summary) => {
            if rank == 0 {
                println!("stress: OK {summary}");
            }
            drop(mpi);
        }
        Err(e) => die(&e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inbox_with(events: &[(u64, Option<i32>, u32, i32, u32)]) -> Inbox<'static> {
        let mut ib = Inbox::new(0, 0, 1, &[]);
        ib.events[1] = events
            .iter()
            .map(|&(post, spec_tag, src, tag, pairseq)| Event {
                post,
                spec: Spec {
                    src: None,
                    tag: spec_tag,
                },
                src,
                tag,
                pairseq,
            })
            .collect();
        ib
    }

    #[test]
    fn order_check_accepts_what_mpi_allows() {
        // ANY_TAG receives in send order.
        inbox_with(&[(1, None, 2, 5, 0), (2, None, 2, 7, 1), (3, None, 2, 5, 2)])
            .check_order()
            .unwrap();
        // Tag-specific receives may take a later message of another tag
        // first; several sources interleave freely.
        inbox_with(&[
            (1, Some(7), 2, 7, 1),
            (2, Some(5), 2, 5, 0),
            (3, None, 3, 5, 0),
            (4, Some(5), 2, 5, 2),
        ])
        .check_order()
        .unwrap();
    }

    #[test]
    fn order_check_catches_overtaking() {
        // An ANY_TAG receive got pairseq 1 while 0 went to a later one.
        let e = inbox_with(&[(1, None, 2, 7, 1), (2, None, 2, 5, 0)])
            .check_order()
            .unwrap_err();
        assert!(e.contains("OVERTAKING"), "{e}");
        // Same tag, tag-specific receives, out of order.
        let e = inbox_with(&[(1, Some(5), 2, 5, 3), (2, Some(5), 2, 5, 1)])
            .check_order()
            .unwrap_err();
        assert!(e.contains("OVERTAKING"), "{e}");
    }

    #[test]
    fn payload_layout_and_checksum() {
        for len in [0usize, 1, 3, 4, 47, 48, 49, 1000] {
            let m = Msg {
                comm: 1,
                src: 2,
                dst: 0,
                tag: 5,
                len,
                sync: false,
                pairseq: 9,
                tagseq: 3,
            };
            let p = m.payload(77, 4);
            assert_eq!(p.len(), len);
            assert_eq!(p, m.payload(77, 4), "deterministic");
            if len >= 4 {
                assert_eq!(u32::from_le_bytes(p[..4].try_into().unwrap()), 9);
            }
            if len >= HDR {
                let cs = u64::from_le_bytes(p[40..48].try_into().unwrap());
                assert_eq!(checksum(&p[HDR..]), cs);
                let mut q = p.clone();
                if len > HDR {
                    q[len - 1] ^= 1;
                    assert_ne!(checksum(&q[HDR..]), cs, "a flipped bit changes the sum");
                }
            }
        }
    }
}
