//! Randomized, seeded one-sided (RMA) traffic over the tmpi Rust API,
//! checked against a model of every window:
//! `tmpirun -n N stress-rma [--seed S] [--epochs E] [--ops K] ...`.
//!
//! Every rank derives the same plan from the seed: a few windows (over a
//! `Vec`, `MPI_Win_create`, from `MPI_Win_allocate_shared` and from
//! `MPI_Win_allocate`), each
//! rank's part of random length (empty ones included), and per epoch a
//! random subset of them, each under a random synchronisation (fence;
//! lock/unlock per target, shared or exclusive, with flush/flush_local
//! inside; lock_all/unlock_all with flushes; post/start/complete/wait with
//! groups derived from the plan) and a random list of operations whose
//! outcome MPI defines: puts to regions no other operation touches, gets
//! of regions nobody writes in the epoch (compared with the model's state
//! before it), accumulates with one commutative op per region, SUM
//! get_accumulate/fetch_and_op on counters (the fetched values must chain
//! as one serial order), compare_and_swap races (exactly one winner),
//! zero-length operations and operations past the target's window (which
//! must fail with `MPI_ERR_RMA_RANGE` and change nothing). After each
//! epoch every rank reads its own windows back and compares them with the
//! model; at the end the windows are freed and their memory compared
//! again. See `docs/stress.md`. Rank 0 prints `stress-rma: OK ...`; any
//! deviation prints `stress-rma FAILED` with the seed and exits non-zero.

use std::process::exit;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tmpi::{Comm, Lock, MpiErrorClass, Op, Ticket, Window};

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
    fn percent(&mut self, p: u64) -> bool {
        self.below(100) < p
    }
    fn pick<T: Copy>(&mut self, v: &[T]) -> T {
        v[self.below(v.len() as u64) as usize]
    }
    fn shuffle<T>(&mut self, v: &mut [T]) {
        for i in (1..v.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            v.swap(i, j);
        }
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

/// `len` deterministic words of `seed`.
fn words(seed: u64, len: usize) -> Vec<u64> {
    (0..len as u64)
        .map(|i| mix(seed ^ i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

// ------------------------------------------------------------------ config

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Inject {
    None,
    /// The injecting rank flips a bit of the first word of its first
    /// non-empty put of epoch 0: the target's check must catch it.
    Corrupt,
    /// The injecting rank stops in epoch 0 with its epochs open: the
    /// others hang, and the watchdog must name the epoch.
    Stall,
}

#[derive(Clone, Debug)]
struct Cfg {
    seed: u64,
    seed_given: bool,
    epochs: u32,
    /// Operations per window and epoch over all ranks (about).
    ops: u64,
    windows: usize,
    /// Largest part of a window on one rank, in 8-byte elements.
    max_elems: u64,
    stall_s: u64,
    inject: Inject,
}

fn parse_args() -> R<Cfg> {
    let mut c = Cfg {
        seed: 0,
        seed_given: false,
        epochs: 20,
        ops: 48,
        windows: 3,
        max_elems: 128 << 10,
        stall_s: 60,
        inject: Inject::None,
    };
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut seed = None;
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
            "--ops" => c.ops = num()?.max(1),
            "--windows" => c.windows = (num()? as usize).clamp(1, 8),
            "--max-elems" => c.max_elems = num()?.max(1),
            "--stall-seconds" => c.stall_s = num()?,
            "--inject" => {
                c.inject = match v.as_str() {
                    "corrupt" => Inject::Corrupt,
                    "stall" => Inject::Stall,
                    x => return Err(format!("--inject {x}: corrupt or stall")),
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

/// How a window's memory came to be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kind {
    /// `Comm::window` over a `Vec` (`MPI_Win_create`).
    Vec,
    /// `Comm::shared_window` (`MPI_Win_allocate_shared`).
    Shared,
    /// `Comm::allocate_window` (`MPI_Win_allocate`).
    Allocated,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sync {
    Fence,
    /// lock/unlock per target (each origin picks shared or exclusive).
    Lock,
    LockAll,
    Pscw,
}

/// The accumulate ops whose result is independent of the order of the
/// operations (REPLACE only with one operation on the region).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Acc {
    Sum,
    Max,
    Min,
    Bxor,
    Replace,
}

impl Acc {
    fn op(self) -> Option<Op> {
        match self {
            Acc::Sum => Some(Op::Sum),
            Acc::Max => Some(Op::Max),
            Acc::Min => Some(Op::Min),
            Acc::Bxor => Some(Op::Bxor),
            Acc::Replace => None,
        }
    }
    fn apply(self, old: u64, v: u64) -> u64 {
        match self {
            Acc::Sum => old.wrapping_add(v),
            Acc::Max => old.max(v),
            Acc::Min => old.min(v),
            Acc::Bxor => old ^ v,
            Acc::Replace => v,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum OpKind {
    Put,
    /// Inside a passive-target epoch: a put, a flush of its target and a
    /// get of the same region, which must read the put's data.
    PutFlushGet,
    Get,
    Acc(Acc),
    /// SUM get_accumulate (fetch_and_op when one element).
    Fetch,
    Cas {
        compare: u64,
        value: u64,
    },
    /// A put (0), get (1) or accumulate (2) past the target's window:
    /// must fail with `MPI_ERR_RMA_RANGE`.
    OutOfRange(u8),
}

/// A synchronisation an origin runs after an operation inside a
/// passive-target epoch (`None` target: all).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum After {
    Nothing,
    Flush(Option<i32>),
    FlushLocal(Option<i32>),
}

#[derive(Clone, Debug)]
struct RmaOp {
    origin: u32,
    target: u32,
    kind: OpKind,
    off: usize,
    len: usize,
    /// Seed of the data (puts, accumulates, fetches).
    seed: u64,
    /// First slot of its fetched values in the epoch's result vector.
    slot: usize,
    after: After,
    /// One of an accumulate burst (no flush after it).
    burst: bool,
}

impl RmaOp {
    fn data(&self) -> Vec<u64> {
        let w = words(self.seed, self.len);
        match self.kind {
            // Small increments: the counters' chains stay readable.
            OpKind::Fetch => w.iter().map(|x| 1 + x % 1000).collect(),
            OpKind::Acc(Acc::Sum) => w.iter().map(|x| x % (1 << 20)).collect(),
            _ => w,
        }
    }
    fn describe(&self) -> String {
        format!(
            "{:?} by origin {} to target {} offset {} len {}",
            self.kind, self.origin, self.target, self.off, self.len
        )
    }
}

/// Counters (fetch) and compare-and-swap races: their results are
/// checked once every origin's fetched values are known.
#[derive(Clone, Debug)]
struct Zone {
    target: u32,
    off: usize,
    width: usize,
    ops: Vec<usize>,
    cas: bool,
}

#[derive(Clone, Debug)]
struct WinEpoch {
    win: usize,
    sync: Sync,
    ops: Vec<RmaOp>,
    /// Lock: per origin, the targets in locking order.
    locks: Vec<Vec<(u32, Lock)>>,
    /// PSCW: per rank, its access group (targets) and exposure group
    /// (origins).
    access: Vec<Vec<i32>>,
    exposure: Vec<Vec<i32>>,
    zones: Vec<Zone>,
}

#[derive(Default)]
struct Tally {
    puts: u64,
    put_flush_gets: u64,
    gets: u64,
    accs: u64,
    bursts: u64,
    fetches: u64,
    cas: u64,
    out_of_range: u64,
    empty: u64,
    bytes: u64,
    syncs: [u64; 4],
    flushes: u64,
}

/// Accumulates of one burst: more than the 4096 operations pt2pt keeps in
/// flight per window and origin.
const BURST: usize = 4500;

/// Length of an operation's region, at most `room` (>= 1).
fn gen_len(rng: &mut Rng, room: u64) -> u64 {
    let l = match rng.below(100) {
        0..=59 => rng.range(1, 16),
        60..=89 => rng.range(17, 512),
        _ => rng.range(513, 1 << 17),
    };
    l.min(room).max(1)
}

/// A sub-range of `lo..hi` (`lo < hi`), empty one time in ten.
fn sub(rng: &mut Rng, lo: usize, hi: usize) -> (usize, usize) {
    if rng.percent(10) {
        return (rng.range(lo as u64, hi as u64) as usize, 0);
    }
    let a = rng.range(lo as u64, hi as u64 - 1) as usize;
    let b = rng.range(a as u64 + 1, hi as u64) as usize;
    (a, b - a)
}

#[allow(clippy::too_many_arguments)]
fn gen_window_epoch(
    cfg: &Cfg,
    rng: &mut Rng,
    win: usize,
    lens: &[usize],
    model: &[Vec<u64>],
    n: u32,
    slots: &mut usize,
    tally: &mut Tally,
) -> WinEpoch {
    let sync = match rng.below(100) {
        0..=29 => Sync::Fence,
        30..=54 => Sync::Lock,
        55..=74 => Sync::LockAll,
        _ => Sync::Pscw,
    };
    let mut ops: Vec<RmaOp> = Vec::new();
    let mut zones = Vec::new();
    let push = |ops: &mut Vec<RmaOp>,
                origin: u32,
                target: u32,
                kind: OpKind,
                off: usize,
                len: usize,
                seed: u64| {
        ops.push(RmaOp {
            origin,
            target,
            kind,
            off,
            len,
            seed,
            slot: 0,
            after: After::Nothing,
            burst: false,
        });
        ops.len() - 1
    };
    let per_target = (cfg.ops / u64::from(n)).max(2);
    for t in 0..n {
        let l = lens[t as usize] as u64;
        // Segments (about two operations each) with gaps between them;
        // each at most twice its share of what is left, so that a plan
        // of many operations finds room for them (the long ones come
        // with few segments or long parts).
        let nseg = rng.range(1, per_target);
        let mut cur = 0u64;
        for s in 0..nseg {
            if cur >= l {
                break;
            }
            let share = ((l - cur) / (nseg - s)).max(1);
            cur += rng.below(share / 4 + 1);
            if cur >= l {
                break;
            }
            let seg = gen_len(rng, (2 * share).min(l - cur));
            let (lo, hi) = (cur as usize, (cur + seg) as usize);
            let org = |rng: &mut Rng| rng.below(u64::from(n)) as u32;
            match rng.below(100) {
                // Puts: one region, or two halves by two origins.
                0..=29 => {
                    if matches!(sync, Sync::Lock | Sync::LockAll) && rng.percent(25) {
                        let o = org(rng);
                        push(&mut ops, o, t, OpKind::PutFlushGet, lo, hi - lo, rng.next());
                    } else if seg >= 2 && rng.percent(40) {
                        let mid = rng.range(lo as u64 + 1, hi as u64 - 1) as usize;
                        push(&mut ops, org(rng), t, OpKind::Put, lo, mid - lo, rng.next());
                        push(
                            &mut ops,
                            org(rng),
                            t,
                            OpKind::Put,
                            mid,
                            hi - mid,
                            rng.next(),
                        );
                    } else {
                        push(&mut ops, org(rng), t, OpKind::Put, lo, hi - lo, rng.next());
                    }
                }
                // Gets of a region nobody writes in this epoch.
                30..=49 => {
                    for _ in 0..rng.range(1, 3) {
                        let (o, len) = sub(rng, lo, hi);
                        push(&mut ops, org(rng), t, OpKind::Get, o, len, 0);
                    }
                }
                // Accumulates with one op per region.
                50..=74 => {
                    let acc = rng.pick(&[
                        Acc::Sum,
                        Acc::Sum,
                        Acc::Max,
                        Acc::Min,
                        Acc::Bxor,
                        Acc::Replace,
                    ]);
                    if acc != Acc::Replace && rng.below(1000) < 5 {
                        // A burst: one origin issues more accumulates
                        // (of 1-4 elements) than pt2pt keeps in flight
                        // per window, so its flow control runs.
                        let o = org(rng);
                        for _ in 0..BURST {
                            let a = rng.range(lo as u64, hi as u64 - 1);
                            let len = rng.range(1, (hi as u64 - a).min(4));
                            let i = push(
                                &mut ops,
                                o,
                                t,
                                OpKind::Acc(acc),
                                a as usize,
                                len as usize,
                                rng.next(),
                            );
                            ops[i].burst = true;
                        }
                        tally.bursts += 1;
                    } else {
                        let k = if acc == Acc::Replace {
                            1
                        } else {
                            rng.range(1, 4)
                        };
                        for _ in 0..k {
                            let (o, len) = sub(rng, lo, hi);
                            push(&mut ops, org(rng), t, OpKind::Acc(acc), o, len, rng.next());
                        }
                    }
                }
                // A counter: SUM get_accumulate / fetch_and_op from
                // several origins over the whole (1..4 element) counter.
                75..=89 => {
                    let width = (seg as usize).min(rng.range(1, 4) as usize);
                    let mut ids = Vec::new();
                    for _ in 0..rng.range(1, 2 * u64::from(n)) {
                        ids.push(push(
                            &mut ops,
                            org(rng),
                            t,
                            OpKind::Fetch,
                            lo,
                            width,
                            rng.next(),
                        ));
                    }
                    zones.push(Zone {
                        target: t,
                        off: lo,
                        width,
                        ops: ids,
                        cas: false,
                    });
                }
                // A compare-and-swap race on one element.
                _ => {
                    let compare = model[t as usize][lo];
                    let mut ids = Vec::new();
                    for i in 0..rng.range(1, u64::from(n) + 1) {
                        let mut value =
                            (hash(&[cfg.seed, win as u64, lo as u64, rng.next()]) << 8) | i;
                        if value == compare {
                            value ^= 1 << 63;
                        }
                        ids.push(push(
                            &mut ops,
                            org(rng),
                            t,
                            OpKind::Cas { compare, value },
                            lo,
                            1,
                            0,
                        ));
                    }
                    zones.push(Zone {
                        target: t,
                        off: lo,
                        width: 1,
                        ops: ids,
                        cas: true,
                    });
                }
            }
            cur += seg;
        }
    }
    // Zero-length operations anywhere in (or just at the end of) a window.
    for _ in 0..rng.below(3) {
        let t = rng.below(u64::from(n)) as u32;
        let off = rng.below(lens[t as usize] as u64 + 1) as usize;
        let kind = rng.pick(&[OpKind::Put, OpKind::Get, OpKind::Acc(Acc::Sum)]);
        let o = rng.below(u64::from(n)) as u32;
        push(&mut ops, o, t, kind, off, 0, rng.next());
    }
    // Now and then an operation past the end of the target's window.
    if rng.percent(35) {
        let t = rng.below(u64::from(n)) as u32;
        let len = rng.range(1, 8) as usize;
        let off = (lens[t as usize] + 1).saturating_sub(len) + rng.below(4) as usize;
        let which = rng.below(3) as u8;
        let o = rng.below(u64::from(n)) as u32;
        push(
            &mut ops,
            o,
            t,
            OpKind::OutOfRange(which),
            off,
            len,
            rng.next(),
        );
    }
    // Issue order: the plan interleaves targets and kinds; zones keep
    // their operations by index, so remap them.
    let mut order: Vec<usize> = (0..ops.len()).collect();
    rng.shuffle(&mut order);
    let mut pos = vec![0; ops.len()];
    for (new, &old) in order.iter().enumerate() {
        pos[old] = new;
    }
    let mut ops: Vec<RmaOp> = order.iter().map(|&i| ops[i].clone()).collect();
    for z in &mut zones {
        for i in &mut z.ops {
            *i = pos[*i];
        }
    }
    for op in &mut ops {
        if matches!(op.kind, OpKind::Fetch | OpKind::Cas { .. }) {
            op.slot = *slots;
            *slots += op.len;
        }
        if matches!(sync, Sync::Lock | Sync::LockAll) && !op.burst && rng.percent(15) {
            let t = Some(op.target as i32);
            op.after = match (sync, rng.below(4)) {
                (Sync::Lock, 0 | 1) | (Sync::LockAll, 0) => After::Flush(t),
                (Sync::Lock, _) | (Sync::LockAll, 1) => After::FlushLocal(t),
                (_, 2) => After::Flush(None),
                _ => After::FlushLocal(None),
            };
            tally.flushes += 1;
        }
        match op.kind {
            _ if op.len == 0 => tally.empty += 1,
            OpKind::Put => tally.puts += 1,
            OpKind::PutFlushGet => tally.put_flush_gets += 1,
            OpKind::Get => tally.gets += 1,
            OpKind::Acc(_) => tally.accs += 1,
            OpKind::Fetch => tally.fetches += 1,
            OpKind::Cas { .. } => tally.cas += 1,
            OpKind::OutOfRange(_) => tally.out_of_range += 1,
        }
        if !matches!(op.kind, OpKind::OutOfRange(_)) {
            tally.bytes += 8 * op.len as u64;
        }
    }
    // Lock: every origin locks the targets it has operations for (and
    // some it has none for), in a random order, shared or exclusive.
    let mut locks = vec![Vec::new(); n as usize];
    let mut access = vec![Vec::new(); n as usize];
    let mut exposure = vec![Vec::new(); n as usize];
    for o in 0..n {
        let mut ts: Vec<u32> = (0..n)
            .filter(|&t| ops.iter().any(|x| x.origin == o && x.target == t) || rng.percent(15))
            .collect();
        rng.shuffle(&mut ts);
        for &t in &ts {
            access[o as usize].push(t as i32);
            exposure[t as usize].push(o as i32);
        }
        locks[o as usize] = ts
            .into_iter()
            .map(|t| {
                (
                    t,
                    if rng.percent(50) {
                        Lock::Exclusive
                    } else {
                        Lock::Shared
                    },
                )
            })
            .collect();
    }
    tally.syncs[sync as usize] += 1;
    WinEpoch {
        win,
        sync,
        ops,
        locks,
        access,
        exposure,
        zones,
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
                "rank {rank}: stress-rma FAILED (seed {seed}): no progress for {stall_s} s \
                 (hang) while {what}"
            );
            exit(3);
        }
    });
}

// ------------------------------------------------------------------ run

struct Ctx<'a> {
    cfg: &'a Cfg,
    me: u32,
    n: u32,
    world: Comm,
    watch: &'a Watch,
    kinds: Vec<Kind>,
    wins: Vec<Window<u64>>,
    /// Every rank's part of every window, as the plan says it must be.
    model: Vec<Vec<Vec<u64>>>,
    /// Whether the corrupting injection was done.
    injected: bool,
}

fn fmt_err(x: tmpi::Error) -> String {
    format!("{x} (class {:?})", x.class())
}

/// Where an epoch is, for failure messages.
fn at(e: u32, we: &WinEpoch, kind: Kind) -> String {
    format!("epoch {e} window {} ({kind:?}, {:?})", we.win, we.sync)
}

impl Ctx<'_> {
    fn inject_rank(&self) -> u32 {
        1 % self.n
    }

    /// Issues one of my operations; a ticket for those with a result.
    fn issue(&mut self, e: u32, we: &WinEpoch, i: usize) -> R<Option<Ticket>> {
        let op = &we.ops[i];
        let corrupt = op.kind == OpKind::Put
            && op.len > 0
            && self.cfg.inject == Inject::Corrupt
            && e == 0
            && !self.injected
            && self.me == self.inject_rank();
        if corrupt {
            self.injected = true;
        }
        let win = &self.wins[we.win];
        let t = op.target as i32;
        let whr = || format!("{}: {}", at(e, we, self.kinds[we.win]), op.describe());
        let r = match op.kind {
            OpKind::Put => {
                let mut d = op.data();
                if corrupt {
                    d[0] ^= 1 << 17;
                }
                win.put(&d, t, op.off).map(|()| None)
            }
            OpKind::Get => win.get(t, op.off, op.len).map(Some),
            OpKind::PutFlushGet => win
                .put(&op.data(), t, op.off)
                .and_then(|()| win.flush(Some(t)))
                .and_then(|()| win.get(t, op.off, op.len))
                .map(Some),
            OpKind::Acc(a) => win
                .accumulate(&op.data(), t, op.off, a.op().as_ref())
                .map(|()| None),
            OpKind::Fetch if op.len == 1 => win
                .fetch_and_op(op.data()[0], t, op.off, Some(&Op::Sum))
                .map(Some),
            OpKind::Fetch => win
                .get_accumulate(&op.data(), t, op.off, Some(&Op::Sum))
                .map(Some),
            OpKind::Cas { compare, value } => {
                win.compare_and_swap(value, compare, t, op.off).map(Some)
            }
            OpKind::OutOfRange(w) => {
                let r = match w {
                    0 => win.put(&op.data(), t, op.off),
                    1 => win.get(t, op.off, op.len).map(|_| ()),
                    _ => win.accumulate(&op.data(), t, op.off, Some(&Op::Sum)),
                };
                return match r {
                    Err(x) if x.class() == MpiErrorClass::RmaRange => Ok(None),
                    Err(x) => Err(format!("{}: failed with {} instead of MPI_ERR_RMA_RANGE", whr(), fmt_err(x))),
                    Ok(()) => Err(format!(
                        "{}: succeeded though the target's part has {} elements (MPI_ERR_RMA_RANGE expected)",
                        whr(),
                        self.model[we.win][op.target as usize].len()
                    )),
                };
            }
        };
        r.map_err(|x| format!("{}: {}", whr(), fmt_err(x)))
    }

    /// Takes the results of `pending` tickets that the synchronisation
    /// just run completed (`target` None: all), and checks gets against
    /// the model before the epoch; fetched values go to `fetched`.
    fn take(
        &self,
        e: u32,
        we: &WinEpoch,
        pending: &mut Vec<(usize, Ticket)>,
        target: Option<u32>,
        fetched: &mut [u64],
    ) -> R {
        let win = &self.wins[we.win];
        let mut keep = Vec::new();
        for (i, t) in pending.drain(..) {
            let op = &we.ops[i];
            if target.is_some_and(|x| x != op.target) {
                keep.push((i, t));
                continue;
            }
            let got = win.take(t).map_err(|x| {
                format!(
                    "{}: result of {} not available after its completing synchronisation: {}",
                    at(e, we, self.kinds[we.win]),
                    op.describe(),
                    fmt_err(x)
                )
            })?;
            if got.len() != op.len {
                return Err(format!(
                    "{}: {} returned {} elements",
                    at(e, we, self.kinds[we.win]),
                    op.describe(),
                    got.len()
                ));
            }
            match op.kind {
                OpKind::Get => {
                    let want = &self.model[we.win][op.target as usize][op.off..op.off + op.len];
                    if let Some(j) = (0..op.len).find(|&j| got[j] != want[j]) {
                        return Err(format!(
                            "GET MISMATCH {}: {}: element {} (offset {}) expected {:#x} got {:#x}",
                            at(e, we, self.kinds[we.win]),
                            op.describe(),
                            j,
                            op.off + j,
                            want[j],
                            got[j]
                        ));
                    }
                }
                OpKind::PutFlushGet => {
                    let want = op.data();
                    if let Some(j) = (0..op.len).find(|&j| got[j] != want[j]) {
                        return Err(format!(
                            "READ-AFTER-FLUSH MISMATCH {}: {}: element {} (offset {}) expected {:#x} \
                             (the put's data) got {:#x}",
                            at(e, we, self.kinds[we.win]),
                            op.describe(),
                            j,
                            op.off + j,
                            want[j],
                            got[j]
                        ));
                    }
                }
                _ => fetched[op.slot..op.slot + op.len].copy_from_slice(&got),
            }
        }
        *pending = keep;
        Ok(())
    }

    /// My operations of `we` in plan order with the flushes after them;
    /// `only` restricts them to one target (lock per target).
    fn run_ops(
        &mut self,
        e: u32,
        we: &WinEpoch,
        only: Option<u32>,
        pending: &mut Vec<(usize, Ticket)>,
        fetched: &mut [u64],
    ) -> R {
        for i in 0..we.ops.len() {
            let op = &we.ops[i];
            if op.origin != self.me || only.is_some_and(|t| t != op.target) {
                continue;
            }
            if let Some(t) = self.issue(e, we, i)? {
                pending.push((i, t));
            }
            let win = &self.wins[we.win];
            let r = match op.after {
                After::Nothing => continue,
                After::Flush(t) => win.flush(t),
                After::FlushLocal(t) => win.flush_local(t),
            };
            r.map_err(|x| {
                format!(
                    "{}: {:?}: {}",
                    at(e, we, self.kinds[we.win]),
                    op.after,
                    fmt_err(x)
                )
            })?;
            let t = match op.after {
                After::Flush(t) | After::FlushLocal(t) => t.map(|t| t as u32),
                After::Nothing => None,
            };
            self.take(e, we, pending, t, fetched)?;
        }
        Ok(())
    }

    fn epoch(&mut self, e: u32, plan: &[WinEpoch], slots: usize) -> R {
        let mut fetched = vec![0u64; slots];
        let mut pending: Vec<Vec<(usize, Ticket)>> = vec![Vec::new(); plan.len()];
        let me = self.me;
        let err = |we: &WinEpoch, k: Kind, what: &str, x: tmpi::Error| {
            format!("{}: {what}: {}", at(e, we, k), fmt_err(x))
        };
        // Open the active-target epochs (every rank in plan order).
        for we in plan {
            let k = self.kinds[we.win];
            self.watch.doing(format!("{}: opening", at(e, we, k)));
            let win = &self.wins[we.win];
            match we.sync {
                Sync::Fence => win.fence().map_err(|x| err(we, k, "fence", x))?,
                Sync::Pscw => {
                    win.post(&we.exposure[me as usize])
                        .map_err(|x| err(we, k, "post", x))?;
                    win.start(&we.access[me as usize])
                        .map_err(|x| err(we, k, "start", x))?;
                }
                _ => {}
            }
        }
        if self.cfg.inject == Inject::Stall && e == 0 && me == self.inject_rank() {
            loop {
                std::thread::sleep(Duration::from_secs(1));
            }
        }
        for (w, we) in plan.iter().enumerate() {
            let k = self.kinds[we.win];
            self.watch.doing(format!("{}: operations", at(e, we, k)));
            match we.sync {
                Sync::Fence | Sync::Pscw => {
                    self.run_ops(e, we, None, &mut pending[w], &mut fetched)?
                }
                Sync::LockAll => {
                    self.wins[we.win]
                        .lock_all()
                        .map_err(|x| err(we, k, "lock_all", x))?;
                    self.run_ops(e, we, None, &mut pending[w], &mut fetched)?;
                    self.wins[we.win]
                        .unlock_all()
                        .map_err(|x| err(we, k, "unlock_all", x))?;
                    self.take(e, we, &mut pending[w], None, &mut fetched)?;
                }
                Sync::Lock => {
                    for &(t, kind) in &we.locks[me as usize] {
                        self.watch
                            .doing(format!("{}: lock({kind:?}, {t})", at(e, we, k)));
                        self.wins[we.win]
                            .lock(kind, t as i32)
                            .map_err(|x| err(we, k, &format!("lock({kind:?}, {t})"), x))?;
                        self.run_ops(e, we, Some(t), &mut pending[w], &mut fetched)?;
                        self.wins[we.win]
                            .unlock(t as i32)
                            .map_err(|x| err(we, k, &format!("unlock({t})"), x))?;
                        self.take(e, we, &mut pending[w], Some(t), &mut fetched)?;
                    }
                }
            }
        }
        // Close the active-target epochs.
        for (w, we) in plan.iter().enumerate() {
            let k = self.kinds[we.win];
            self.watch.doing(format!("{}: closing", at(e, we, k)));
            let win = &self.wins[we.win];
            match we.sync {
                Sync::Fence => win.fence().map_err(|x| err(we, k, "fence", x))?,
                Sync::Pscw => {
                    win.complete().map_err(|x| err(we, k, "complete", x))?;
                    if e.is_multiple_of(3) {
                        while !win.test().map_err(|x| err(we, k, "test", x))? {
                            std::thread::yield_now();
                        }
                    } else {
                        win.wait().map_err(|x| err(we, k, "wait", x))?;
                    }
                }
                _ => {}
            }
            self.take(e, we, &mut pending[w], None, &mut fetched)?;
        }
        // Everybody's fetched values (each slot is one origin's), which
        // also proves every rank closed its epochs.
        self.watch
            .doing(format!("epoch {e}: exchanging fetched values"));
        let mut all = vec![0u64; slots];
        self.world
            .allreduce(&fetched, &mut all, &Op::Sum)
            .map_err(|x| format!("epoch {e}: allreduce of fetched values: {}", fmt_err(x)))?;
        for we in plan {
            let head = at(e, we, self.kinds[we.win]);
            check_zones(&head, &mut self.model[we.win], we, &all)?;
            self.apply(we);
        }
        // Every rank reads its own parts back.
        for we in plan {
            let k = self.kinds[we.win];
            self.watch
                .doing(format!("{}: checking my part", at(e, we, k)));
            let len = self.model[we.win][me as usize].len();
            if len == 0 {
                continue;
            }
            let win = &self.wins[we.win];
            win.lock(Lock::Shared, me as i32)
                .map_err(|x| err(we, k, "lock of my own part", x))?;
            let t = win
                .get(me as i32, 0, len)
                .map_err(|x| err(we, k, "get of my own part", x))?;
            win.unlock(me as i32)
                .map_err(|x| err(we, k, "unlock of my own part", x))?;
            let got = win.take(t).map_err(|x| err(we, k, "take", x))?;
            self.compare(&format!("after {}", at(e, we, k)), we.win, &got, Some(we))?;
        }
        self.watch.doing(format!("epoch {e}: barrier"));
        self.world
            .barrier()
            .map_err(|x| format!("epoch {e}: barrier: {}", fmt_err(x)))?;
        Ok(())
    }

    /// The epoch's writes on the model (CAS winners were set by
    /// `check_zones`).
    fn apply(&mut self, we: &WinEpoch) {
        for op in &we.ops {
            let m = &mut self.model[we.win][op.target as usize];
            match op.kind {
                OpKind::Put | OpKind::PutFlushGet => {
                    m[op.off..op.off + op.len].copy_from_slice(&op.data())
                }
                OpKind::Acc(a) => {
                    for (x, v) in m[op.off..op.off + op.len].iter_mut().zip(op.data()) {
                        *x = a.apply(*x, v);
                    }
                }
                OpKind::Fetch => {
                    for (x, v) in m[op.off..op.off + op.len].iter_mut().zip(op.data()) {
                        *x = x.wrapping_add(v);
                    }
                }
                OpKind::Get | OpKind::Cas { .. } | OpKind::OutOfRange(_) => {}
            }
        }
    }

    /// My part of window `w` against the model; names the operation of
    /// `we` that wrote a wrong element.
    fn compare(&self, when: &str, w: usize, got: &[u64], we: Option<&WinEpoch>) -> R {
        let want = &self.model[w][self.me as usize];
        if got.len() != want.len() {
            return Err(format!(
                "MISMATCH {when}: my part of window {w} has {} elements, expected {}",
                got.len(),
                want.len()
            ));
        }
        let Some(j) = (0..want.len()).find(|&j| got[j] != want[j]) else {
            return Ok(());
        };
        let by = we
            .and_then(|we| {
                we.ops.iter().find(|op| {
                    op.target == self.me
                        && op.off <= j
                        && j < op.off + op.len
                        && !matches!(op.kind, OpKind::Get | OpKind::OutOfRange(_))
                })
            })
            .map_or("no operation of the epoch wrote it".to_string(), |op| {
                format!("written by {}", op.describe())
            });
        let bad = (0..want.len()).filter(|&j| got[j] != want[j]).count();
        Err(format!(
            "MISMATCH {when}: target {} offset {j}: expected {:#x} got {:#x} ({by}; {bad} element(s) differ)",
            self.me, want[j], got[j]
        ))
    }
}

/// After an epoch, with every origin's fetched values (`all`): counters
/// must chain as one serial order (the same for all their
/// elements: each get_accumulate is applied whole), and a
/// compare-and-swap race has exactly one winner.
fn check_zones(head: &str, model: &mut [Vec<u64>], we: &WinEpoch, all: &[u64]) -> R {
    for z in &we.zones {
        let before = &model[z.target as usize];
        let head = format!("{head}: target {} offset {}", z.target, z.off);
        let got = |i: usize| &all[we.ops[i].slot..we.ops[i].slot + we.ops[i].len];
        if z.cas {
            let OpKind::Cas { compare, .. } = we.ops[z.ops[0]].kind else {
                unreachable!("a CAS zone holds CAS operations")
            };
            let winners: Vec<usize> = z
                .ops
                .iter()
                .copied()
                .filter(|&i| got(i)[0] == compare)
                .collect();
            if winners.len() != 1 {
                return Err(format!(
                    "CAS {head}: {} winners of {} (compare {compare:#x}); fetched {:?}",
                    winners.len(),
                    z.ops.len(),
                    z.ops
                        .iter()
                        .map(|&i| (we.ops[i].origin, got(i)[0]))
                        .collect::<Vec<_>>()
                ));
            }
            let OpKind::Cas { value: wv, .. } = we.ops[winners[0]].kind else {
                unreachable!("a CAS zone holds CAS operations")
            };
            for &i in &z.ops {
                if i != winners[0] && got(i)[0] != wv {
                    return Err(format!(
                        "CAS {head}: loser origin {} fetched {:#x}, expected the winner's (origin {}) {wv:#x}",
                        we.ops[i].origin,
                        got(i)[0],
                        we.ops[winners[0]].origin
                    ));
                }
            }
            continue;
        }
        // Serial order by the first element's fetched value (the
        // increments are >= 1, so the values are distinct).
        let base = before[z.off];
        let mut order = z.ops.clone();
        order.sort_by_key(|&i| got(i)[0].wrapping_sub(base));
        for j in 0..z.width {
            let mut expect = before[z.off + j];
            for &i in &order {
                if got(i)[j] != expect {
                    return Err(format!(
                        "COUNTER {head} element {j}: origin {} fetched {:#x}, expected {expect:#x} \
                         (serial order {:?}; fetched {:?})",
                        we.ops[i].origin,
                        got(i)[j],
                        order.iter().map(|&i| we.ops[i].origin).collect::<Vec<_>>(),
                        order.iter().map(|&i| got(i).to_vec()).collect::<Vec<_>>()
                    ));
                }
                expect = expect.wrapping_add(we.ops[i].data()[j]);
            }
        }
    }
    // Remember the CAS winners' values for `apply`.
    for z in we.zones.iter().filter(|z| z.cas) {
        let slot = |i: usize| all[we.ops[i].slot];
        let OpKind::Cas { compare, .. } = we.ops[z.ops[0]].kind else {
            continue;
        };
        let win = z.ops.iter().find(|&&i| slot(i) == compare).copied();
        if let Some(i) = win {
            if let OpKind::Cas { value, .. } = we.ops[i].kind {
                model[z.target as usize][z.off] = value;
            }
        }
    }
    Ok(())
}

fn run(mpi: &tmpi::Mpi, cfg: &Cfg, watch: &Watch) -> R<String> {
    let world = mpi.world();
    let me = world.rank() as u32;
    let n = world.size() as u32;
    let ce = |x: tmpi::Error| format!("communicator: {}", fmt_err(x));
    // Window 2 and up sit on a dup of world (a window duplicates its
    // communicator again: two context agreements per window).
    let dup = world.dup().map_err(ce)?;
    let mut rng = Rng::new(hash(&[cfg.seed, 1]));
    let mut kinds = Vec::new();
    let mut wins = Vec::new();
    let mut model = Vec::new();
    for w in 0..cfg.windows {
        let kind = match w {
            0 => Kind::Vec,
            1 => Kind::Shared,
            2 => Kind::Allocated,
            _ => rng.pick(&[Kind::Vec, Kind::Shared, Kind::Allocated]),
        };
        let lens: Vec<usize> = (0..n)
            .map(|_| match rng.below(100) {
                0..=7 => 0,
                8..=79 => rng.range(1, 2048) as usize,
                _ => rng.range(2048, cfg.max_elems.max(2048)) as usize,
            })
            .collect();
        let parts: Vec<Vec<u64>> = (0..n)
            .map(|r| match kind {
                Kind::Vec => words(
                    hash(&[cfg.seed, 2, w as u64, u64::from(r)]),
                    lens[r as usize],
                ),
                Kind::Shared | Kind::Allocated => vec![0; lens[r as usize]],
            })
            .collect();
        let comm = if w >= 2 { &dup } else { &world };
        watch.doing(format!(
            "creating window {w} ({kind:?}, {} elements here)",
            lens[me as usize]
        ));
        let win = match kind {
            Kind::Vec => comm.window(parts[me as usize].clone()),
            Kind::Shared => comm.shared_window::<u64>(lens[me as usize]),
            Kind::Allocated => comm.allocate_window::<u64>(lens[me as usize]),
        }
        .unwrap_or_else(|x| die(&format!("creating window {w} ({kind:?}): {}", fmt_err(x))));
        if win.len() != lens[me as usize] {
            die(&format!(
                "window {w}: {} elements, {} asked",
                win.len(),
                lens[me as usize]
            ));
        }
        kinds.push(kind);
        wins.push(win);
        model.push(parts);
    }
    let mut cx = Ctx {
        cfg,
        me,
        n,
        world: world.clone(),
        watch,
        kinds,
        wins,
        model,
        injected: false,
    };
    let mut tally = Tally::default();
    let t0 = Instant::now();
    for ep in 0..cfg.epochs {
        let mut rng = Rng::new(hash(&[cfg.seed, 3, u64::from(ep)]));
        let mut active: Vec<usize> = (0..cfg.windows).filter(|_| rng.percent(60)).collect();
        if active.is_empty() {
            active.push(rng.below(cfg.windows as u64) as usize);
        }
        rng.shuffle(&mut active);
        let mut slots = 0;
        let plan: Vec<WinEpoch> = active
            .iter()
            .map(|&w| {
                let lens: Vec<usize> = cx.model[w].iter().map(Vec::len).collect();
                gen_window_epoch(
                    cfg,
                    &mut rng,
                    w,
                    &lens,
                    &cx.model[w],
                    n,
                    &mut slots,
                    &mut tally,
                )
            })
            .collect();
        // A failure ends the process here: dropping the windows would
        // free them, a collective the other ranks never join.
        cx.epoch(ep, &plan, slots).unwrap_or_else(|x| die(&x));
    }
    let secs = t0.elapsed().as_secs_f64();
    // Free the windows and compare what comes back.
    for (w, win) in std::mem::take(&mut cx.wins).into_iter().enumerate() {
        watch.doing(format!("freeing window {w}"));
        let mem = win
            .into_vec()
            .unwrap_or_else(|x| die(&format!("freeing window {w}: {}", fmt_err(x))));
        cx.compare(&format!("the end (window {w} freed)"), w, &mem, None)
            .unwrap_or_else(|x| die(&x));
    }
    watch.doing("final barrier".into());
    world.barrier().map_err(fmt_err)?;
    let t = &tally;
    Ok(format!(
        "seed {} ranks {n} epochs {} windows {} ({}) operations {} bytes {} time {secs:.2} s; \
         puts {}, put-flush-gets {}, gets {}, accumulates {} ({} bursts), fetch-ops {}, compare-and-swaps {}, zero-length {}, \
         out-of-range {}; epochs under fence {}, lock {}, lock_all {}, pscw {}; flushes {}",
        cfg.seed,
        cfg.epochs,
        cfg.windows,
        cx.kinds
            .iter()
            .map(|k| format!("{k:?}"))
            .collect::<Vec<_>>()
            .join(","),
        t.puts + t.put_flush_gets + t.gets + t.accs + t.fetches + t.cas + t.empty + t.out_of_range,
        t.bytes,
        t.puts,
        t.put_flush_gets,
        t.gets,
        t.accs,
        t.bursts,
        t.fetches,
        t.cas,
        t.empty,
        t.out_of_range,
        t.syncs[0],
        t.syncs[1],
        t.syncs[2],
        t.syncs[3],
        t.flushes,
    ))
}

static WHO: std::sync::OnceLock<(i32, u64)> = std::sync::OnceLock::new();

/// Reports a failure and exits without finalize (the launcher ends the
/// job): windows with open epochs cannot be freed.
fn die(msg: &str) -> ! {
    let (rank, seed) = WHO.get().copied().unwrap_or((-1, 0));
    eprintln!(
        "rank {rank}: stress-rma FAILED (seed {seed}; rerun with --seed {seed} and the same options): {msg}"
    );
    exit(1);
}

fn main() {
    let mut cfg = match parse_args() {
        Ok(c) => c,
        Err(x) => {
            eprintln!("stress-rma: {x}");
            exit(2);
        }
    };
    let mpi = match tmpi::init() {
        Ok(m) => m,
        Err(x) => {
            eprintln!("stress-rma: MPI init failed: {x}");
            exit(4);
        }
    };
    let world = mpi.world();
    let rank = world.rank();
    if !cfg.seed_given {
        // Rank 0 draws the seed and tells everybody.
        let mut s = [0u64];
        if rank == 0 {
            s[0] = hash(&[
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_nanos() as u64)
                    .unwrap_or(1),
                u64::from(std::process::id()),
            ]) & 0xffff_ffff;
        }
        if let Err(x) = world.bcast(&mut s, 0) {
            eprintln!("stress-rma: broadcasting the seed: {x}");
            exit(1);
        }
        cfg.seed = s[0];
    }
    if rank == 0 {
        println!(
            "stress-rma: seed {} (rerun with --seed {})",
            cfg.seed, cfg.seed
        );
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
                println!("stress-rma: OK {summary}");
            }
            drop(mpi);
        }
        Err(x) => die(&x),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg() -> Cfg {
        Cfg {
            seed: 11,
            seed_given: true,
            epochs: 1,
            ops: 48,
            windows: 1,
            max_elems: 4096,
            stall_s: 1,
            inject: Inject::None,
        }
    }

    /// Two operations conflict when they touch a common element, one of
    /// them writes, and they are not both accumulates of one op (or
    /// fetches) — the plan must never hold such a pair.
    #[test]
    fn plans_have_no_conflicting_operations() {
        for seed in 0..200 {
            let c = Cfg { seed, ..cfg() };
            let mut rng = Rng::new(seed);
            let n = 1 + (seed % 4) as u32;
            let lens: Vec<usize> = (0..n)
                .map(|r| (seed as usize * 37 + r as usize * 101) % 3000)
                .collect();
            let model: Vec<Vec<u64>> = lens.iter().map(|&l| vec![0; l]).collect();
            let mut slots = 0;
            let we = gen_window_epoch(
                &c,
                &mut rng,
                0,
                &lens,
                &model,
                n,
                &mut slots,
                &mut Tally::default(),
            );
            let write = |k: OpKind| !matches!(k, OpKind::Get);
            let class = |k: OpKind| match k {
                OpKind::Acc(a) if a != Acc::Replace => Some(format!("{a:?}")),
                OpKind::Fetch => Some("fetch".into()),
                OpKind::Cas { .. } => Some("cas".into()),
                _ => None,
            };
            for (i, a) in we.ops.iter().enumerate() {
                if matches!(a.kind, OpKind::OutOfRange(_)) {
                    assert!(a.off + a.len > lens[a.target as usize], "{a:?} is in range");
                    continue;
                }
                assert!(
                    a.off + a.len <= lens[a.target as usize],
                    "{a:?} out of range"
                );
                for b in &we.ops[i + 1..] {
                    if a.target != b.target
                        || matches!(b.kind, OpKind::OutOfRange(_))
                        || a.len == 0
                        || b.len == 0
                        || a.off + a.len <= b.off
                        || b.off + b.len <= a.off
                        || !(write(a.kind) || write(b.kind))
                    {
                        continue;
                    }
                    assert!(
                        class(a.kind).is_some() && class(a.kind) == class(b.kind),
                        "seed {seed}: {a:?} and {b:?} conflict"
                    );
                }
            }
            // PSCW groups cover every operation's pair.
            for op in &we.ops {
                assert!(we.access[op.origin as usize].contains(&(op.target as i32)));
                assert!(we.exposure[op.target as usize].contains(&(op.origin as i32)));
            }
        }
    }

    fn op(origin: u32, kind: OpKind, len: usize, seed: u64, slot: usize) -> RmaOp {
        RmaOp {
            origin,
            target: 0,
            kind,
            off: 1,
            len,
            seed,
            slot,
            after: After::Nothing,
            burst: false,
        }
    }

    fn zone_epoch(ops: Vec<RmaOp>, cas: bool, width: usize) -> WinEpoch {
        let n = ops.len();
        WinEpoch {
            win: 0,
            sync: Sync::LockAll,
            ops,
            locks: vec![],
            access: vec![],
            exposure: vec![],
            zones: vec![Zone {
                target: 0,
                off: 1,
                width,
                ops: (0..n).collect(),
                cas,
            }],
        }
    }

    /// The counter check accepts every serial order and nothing else.
    #[test]
    fn counters_must_chain_in_one_order() {
        let we = zone_epoch(
            vec![op(0, OpKind::Fetch, 2, 1, 0), op(1, OpKind::Fetch, 2, 2, 2)],
            false,
            2,
        );
        let (a, b) = (we.ops[0].data(), we.ops[1].data());
        let start = [10u64, 20];
        let model = || vec![vec![0, start[0], start[1], 0]];
        // Origin 1 first, then origin 0.
        let fetched = [start[0] + b[0], start[1] + b[1], start[0], start[1]];
        let mut m = model();
        check_zones("t", &mut m, &we, &fetched).unwrap();
        // Both fetched the old value: an update was lost.
        let lost = [start[0], start[1], start[0], start[1]];
        let x = check_zones("t", &mut model(), &we, &lost).unwrap_err();
        assert!(
            x.starts_with("COUNTER t: target 0 offset 1 element 0"),
            "{x}"
        );
        // Element 0 in one order, element 1 in the other: not atomic.
        let torn = [start[0], start[1] + b[1], start[0] + a[0], start[1]];
        let x = check_zones("t", &mut model(), &we, &torn).unwrap_err();
        assert!(x.contains("element 1"), "{x}");
    }

    #[test]
    fn compare_and_swap_has_one_winner() {
        let cas = |o, value| op(o, OpKind::Cas { compare: 7, value }, 1, 0, o as usize);
        let we = zone_epoch(vec![cas(0, 100), cas(1, 200), cas(2, 300)], true, 1);
        let mut m = vec![vec![0, 7]];
        check_zones("t", &mut m, &we, &[200, 7, 200]).unwrap();
        assert_eq!(m[0][1], 200, "the winner's value");
        let x = check_zones("t", &mut [vec![0, 7]], &we, &[7, 7, 200]).unwrap_err();
        assert!(x.contains("2 winners of 3"), "{x}");
        let x = check_zones("t", &mut [vec![0, 7]], &we, &[300, 7, 200]).unwrap_err();
        assert!(x.contains("loser origin 0 fetched 0x12c"), "{x}");
    }

    #[test]
    fn one_seed_one_plan() {
        let mk = || {
            let mut rng = Rng::new(5);
            let lens = [100, 0, 3000];
            let model: Vec<Vec<u64>> = lens.iter().map(|&l| vec![7; l]).collect();
            let mut slots = 0;
            let we = gen_window_epoch(
                &cfg(),
                &mut rng,
                0,
                &lens,
                &model,
                3,
                &mut slots,
                &mut Tally::default(),
            );
            format!("{:?}", we.ops)
        };
        assert_eq!(mk(), mk());
    }
}
