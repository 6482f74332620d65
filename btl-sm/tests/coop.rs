//! Cooperative single copy (issue 4), with real processes (this test
//! binary re-executed), real segments and CMA: 1-8 MiB checksummed
//! messages read with `get` while the sender helps from `progress`, with
//! the helper off, with a sender that never progresses during the get,
//! with a sender that never waited (the receiver reads plain),
//! with every sender write failing (the receiver re-reads), and with more
//! outstanding registrations than slots.

use std::time::{Duration, Instant};

use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_btl::testing::{child_context, run_ranks, ChildContext};
use tmpi_btl::{BtlError, BtlModule, RemoteRegion};
use tmpi_btl_sm::module::coop_chunking;
use tmpi_btl_sm::segment::COOP_SLOTS;
use tmpi_btl_sm::{SmConfig, SmModule, SmStats};
use tmpi_smsc::CopyAlone;

const TIMEOUT: Duration = Duration::from_secs(120);
/// Control fragments carry this tag.
const CTL: u8 = 200;

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn payload(seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|i| ((i as u32).wrapping_mul(2_654_435_761) >> 13) as u8 ^ seq as u8)
        .collect()
}

/// Module with the configuration of the `TMPI_MCA_btl_sm_*` environment,
/// wired to every other rank.
fn wire(ctx: &ChildContext) -> (SmModule, tmpi_btl::testing::FileModex, SmConfig) {
    let reg = Registry::new(Sources::from_process());
    let cfg = SmConfig::from_registry(&reg).unwrap();
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut m = SmModule::open(&info, &mut modex, cfg).unwrap().unwrap();
    modex.fence().unwrap();
    let all: Vec<u32> = (0..ctx.size).collect();
    m.add_procs(&all, &mut modex).unwrap();
    modex.fence().unwrap();
    assert!(
        m.single_copy_enabled(),
        "CMA probe failed on this machine: single copy unavailable"
    );
    (m, modex, cfg)
}

/// Control fragments received so far.
#[derive(Default)]
struct Ctl(Vec<Vec<u8>>);

impl tmpi_btl::BtlRecvHandler for Ctl {
    fn on_fragment(&mut self, _peer: u32, tag: u8, b: &[u8]) {
        assert_eq!(tag, CTL);
        self.0.push(b.to_vec());
    }
}

fn send(m: &mut SmModule, rx: &mut Ctl, peer: u32, msg: &[u8]) {
    let t0 = Instant::now();
    loop {
        match m.send(peer, CTL, msg, &[]) {
            Ok(()) => return,
            Err(BtlError::WouldBlock) => {
                m.progress(rx);
                assert!(t0.elapsed() < Duration::from_secs(60), "send blocked");
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

/// Progresses (so the sender helps) until a control fragment arrives.
fn recv(m: &mut SmModule, rx: &mut Ctl) -> Vec<u8> {
    let t0 = Instant::now();
    while rx.0.is_empty() {
        m.progress(rx);
        assert!(t0.elapsed() < Duration::from_secs(60), "nothing arrived");
    }
    rx.0.remove(0)
}

fn region_msg(r: &RemoteRegion, sum: u64) -> Vec<u8> {
    let mut v = r.to_bytes().to_vec();
    v.extend_from_slice(&sum.to_le_bytes());
    v
}

fn parse_region(msg: &[u8]) -> (RemoteRegion, u64) {
    (
        RemoteRegion::from_bytes(&msg[..24]).unwrap(),
        u64::from_le_bytes(msg[24..32].try_into().unwrap()),
    )
}

/// Sizes every mode moves (odd lengths: a last partial chunk).
const SIZES: [usize; 6] = [
    1 << 20,
    (2 << 20) + 123,
    (3 << 20) - 4095,
    4 << 20,
    (5 << 20) + 1,
    8 << 20,
];
/// Extra messages allowed while waiting for the sender to take a chunk.
const MAX_MESSAGES: usize = 200;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Mode {
    /// Default parameters: the sender helps from progress.
    On,
    /// `btl_sm_coop_min=0`: plain single read.
    Off,
    /// The sender does not progress during the get.
    Lazy,
    /// `btl_sm_coop_fail_test=1`: every sender write fails.
    Fail,
    /// The sender never has an idle progress round before the get: the
    /// receiver reads plain without arming the slot.
    Busy,
    /// Default parameters; the receiver asks to copy alone
    /// ([`CopyAlone`]) for every other message.
    Alone,
}

fn mode() -> Mode {
    match std::env::var("COOP_TEST_MODE").as_deref() {
        Ok("off") => Mode::Off,
        Ok("lazy") => Mode::Lazy,
        Ok("fail") => Mode::Fail,
        Ok("busy") => Mode::Busy,
        Ok("alone") => Mode::Alone,
        _ => Mode::On,
    }
}

/// Rank 0 registers and announces messages one at a time; rank 1 reads
/// each whole with `get`, checks its checksum and answers. After the fixed
/// sizes, messages go on (up to [`MAX_MESSAGES`]) until the path under
/// test was taken at least once: a chunk handled by the sender (On, Fail)
/// or re-read by the receiver (Fail).
fn transfer(ctx: &ChildContext) {
    let mode = mode();
    let (mut m, mut modex, cfg) = wire(ctx);
    let mut rx = Ctl::default();
    match mode {
        Mode::Off => assert_eq!(cfg.coop_min, 0),
        Mode::Fail => assert!(cfg.coop_fail_test),
        _ => assert!(cfg.coop_min > 0 && !cfg.coop_fail_test),
    }
    let flag = |seq: usize| ctx.dir.join(format!("got.{seq}"));
    if ctx.rank == 0 {
        let mut seq = 0usize;
        loop {
            let len = SIZES[seq % SIZES.len()];
            let buf = payload(seq as u32, len);
            // SAFETY: `buf` lives until the receiver answered, after which
            // the region is deregistered.
            let r = unsafe { m.register_region(buf.as_ptr(), buf.len()) }.unwrap();
            if mode != Mode::Busy {
                // One idle round: the slot shows its owner waiting, so the
                // receiver arms it (Busy: never shown, plain read).
                m.progress(&mut rx);
            }
            send(&mut m, &mut rx, 1, &region_msg(&r, fnv(&buf)));
            let more = if matches!(mode, Mode::Lazy | Mode::Busy) {
                // No progress (no help) until the receiver is done.
                let t0 = Instant::now();
                while !flag(seq).exists() {
                    std::thread::sleep(Duration::from_millis(1));
                    assert!(t0.elapsed() < Duration::from_secs(60), "no answer");
                }
                std::fs::read(flag(seq)).unwrap()[0] == 1
            } else {
                recv(&mut m, &mut rx)[0] == 1
            };
            m.deregister_region(&r);
            drop(buf);
            seq += 1;
            let st = m.stats();
            let sender_path = match mode {
                Mode::On | Mode::Alone => st.coop_chunks_written > 0,
                Mode::Fail => st.coop_chunks_failed > 0,
                Mode::Off | Mode::Lazy | Mode::Busy => true,
            };
            if seq >= SIZES.len() && sender_path && !more {
                break;
            }
            assert!(seq < MAX_MESSAGES, "path under test never taken: {st:?}");
        }
        send(&mut m, &mut rx, 1, b"end");
        let st = m.stats();
        eprintln!("sender {mode:?}: {seq} messages, {st:?}");
        match mode {
            Mode::Off => assert_eq!((st.coop_regs, st.coop_chunks_written), (0, 0)),
            Mode::Lazy | Mode::Busy => {
                assert_eq!(st.coop_regs, seq as u64);
                assert_eq!(st.coop_chunks_written + st.coop_chunks_failed, 0);
            }
            Mode::On | Mode::Alone => {
                assert_eq!((st.coop_regs, st.coop_chunks_failed), (seq as u64, 0))
            }
            Mode::Fail => assert_eq!((st.coop_regs, st.coop_chunks_written), (seq as u64, 0)),
        }
    } else {
        let mut seq = 0usize;
        let mut chunks = 0u64;
        loop {
            let msg = recv(&mut m, &mut rx);
            if msg == b"end" {
                break;
            }
            let (r, sum) = parse_region(&msg);
            assert_eq!(r.len as usize, SIZES[seq % SIZES.len()]);
            let before: SmStats = m.stats();
            let mut dst = vec![0u8; r.len as usize];
            let alone = mode == Mode::Alone && seq % 2 == 1;
            let guard = alone.then(CopyAlone::new);
            m.get(0, &r, 0, &mut dst).unwrap();
            drop(guard);
            assert_eq!(fnv(&dst), sum, "message {seq}: checksum");
            let st = m.stats();
            let n = coop_chunking(r.len, cfg.coop_chunk as u64).1;
            if mode == Mode::Busy {
                assert_eq!(
                    (st.coop_gets, st.coop_owner_busy),
                    (before.coop_gets, before.coop_owner_busy + 1),
                    "a sender that never waited: one plain read"
                );
            } else if alone {
                assert_eq!(
                    (st.coop_gets, st.coop_declined, st.coop_chunks_read),
                    (
                        before.coop_gets,
                        before.coop_declined + 1,
                        before.coop_chunks_read
                    ),
                    "asked to copy alone: one plain read"
                );
            } else if mode != Mode::Off {
                chunks += n;
                assert_eq!(st.coop_gets, before.coop_gets + 1);
            }
            if mode == Mode::Lazy {
                assert_eq!(
                    st.coop_chunks_read - before.coop_chunks_read,
                    n,
                    "a sender that does not progress: the receiver reads every chunk"
                );
            }
            let more = u8::from(mode == Mode::Fail && st.coop_rereads == 0);
            if matches!(mode, Mode::Lazy | Mode::Busy) {
                let tmp = ctx.dir.join("got.tmp");
                std::fs::write(&tmp, [more]).unwrap();
                std::fs::rename(&tmp, flag(seq)).unwrap();
            } else {
                send(&mut m, &mut rx, 0, &[more]);
            }
            seq += 1;
        }
        let st = m.stats();
        eprintln!("receiver {mode:?}: {seq} messages, {st:?}");
        match mode {
            Mode::Off => assert_eq!((st.coop_gets, st.coop_chunks_read), (0, 0)),
            Mode::Busy => assert_eq!(
                (st.coop_gets, st.coop_chunks_read, st.coop_owner_busy),
                (0, 0, seq as u64)
            ),
            Mode::Alone => {
                assert_eq!(
                    (st.coop_gets, st.coop_declined),
                    ((seq as u64).div_ceil(2), seq as u64 / 2)
                );
                assert_eq!(st.coop_rereads, 0);
            }
            Mode::Fail => {
                assert!(st.coop_rereads > 0);
                assert_eq!(st.coop_chunks_read + st.coop_rereads, chunks);
            }
            _ => {
                assert_eq!(st.coop_gets, seq as u64);
                assert_eq!(st.coop_rereads, 0);
                assert!(st.coop_chunks_read <= chunks);
            }
        }
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
}

fn run(mode: &str, env: &[(&str, &str)]) {
    let mut e = vec![("COOP_TEST_MODE", mode)];
    e.extend_from_slice(env);
    let out = run_ranks("transfer_child", 2, &e, TIMEOUT);
    for o in &out.output {
        for l in o
            .lines()
            .filter(|l| l.starts_with("sender") || l.starts_with("receiver"))
        {
            eprintln!("{l}");
        }
    }
    out.assert_success();
}

#[test]
fn transfer_child() {
    let Some(ctx) = child_context() else { return };
    transfer(&ctx);
}

#[test]
fn coop_on_sender_helps_checksums() {
    run("on", &[]);
}

#[test]
fn a_receiver_that_asks_to_copy_alone_reads_plain_checksums() {
    run("alone", &[]);
}

#[test]
fn coop_off_plain_read_checksums() {
    run("off", &[("TMPI_MCA_btl_sm_coop_min", "0")]);
}

#[test]
fn coop_sender_never_progresses_receiver_copies_alone() {
    run("lazy", &[]);
}

#[test]
fn coop_sender_busy_receiver_reads_plain() {
    run("busy", &[]);
}

#[test]
fn coop_failed_sender_writes_are_reread() {
    run("fail", &[("TMPI_MCA_btl_sm_coop_fail_test", "1")]);
}

#[test]
fn more_registrations_than_slots() {
    run_ranks("exhaust_child", 2, &[], TIMEOUT).assert_success();
}

/// Rank 0 registers `COOP_SLOTS + 6` regions of 300 KiB at once: the
/// last 6 get plain keys; rank 1 reads them all (coop or plain), and
/// re-reads the first whole region (its slot is closed: plain path).
#[test]
fn exhaust_child() {
    let Some(ctx) = child_context() else { return };
    let (mut m, mut modex, cfg) = wire(&ctx);
    let mut rx = Ctl::default();
    const N: usize = COOP_SLOTS + 6;
    const LEN: usize = 300 << 10;
    assert!(LEN >= cfg.coop_min && coop_chunking(LEN as u64, cfg.coop_chunk as u64).1 >= 2);
    if ctx.rank == 0 {
        let bufs: Vec<Vec<u8>> = (0..N).map(|i| payload(i as u32, LEN)).collect();
        let regs: Vec<RemoteRegion> = bufs
            .iter()
            // SAFETY: the buffers outlive the deregistrations below.
            .map(|b| unsafe { m.register_region(b.as_ptr(), b.len()) }.unwrap())
            .collect();
        let st = m.stats();
        assert_eq!((st.coop_regs, st.coop_exhausted), (COOP_SLOTS as u64, 6));
        let mut keys: Vec<u64> = regs.iter().map(|r| r.key).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(
            keys.len(),
            COOP_SLOTS + 1,
            "distinct slot keys + the plain key"
        );
        // An idle round: every slot shows its owner waiting.
        m.progress(&mut rx);
        for (r, b) in regs.iter().zip(&bufs) {
            send(&mut m, &mut rx, 1, &region_msg(r, fnv(b)));
        }
        assert_eq!(recv(&mut m, &mut rx), b"done");
        for r in &regs {
            m.deregister_region(r);
        }
        // every slot is free again: a new registration gets one, with a
        // new key (next generation)
        // SAFETY: deregistered right away, `bufs` still alive.
        let again = unsafe { m.register_region(bufs[0].as_ptr(), LEN) }.unwrap();
        assert_eq!(m.stats().coop_regs, COOP_SLOTS as u64 + 1);
        assert!(!regs.iter().any(|r| r.key == again.key));
        m.deregister_region(&again);
        drop(bufs);
    } else {
        let mut first = None;
        for i in 0..N {
            let (r, sum) = parse_region(&recv(&mut m, &mut rx));
            let mut dst = vec![0u8; LEN];
            m.get(0, &r, 0, &mut dst).unwrap();
            assert_eq!(fnv(&dst), sum, "region {i}");
            first.get_or_insert((r, sum));
        }
        assert_eq!(m.stats().coop_gets, COOP_SLOTS as u64);
        // the same key again: its slot is closed, the plain read still works
        let (r, sum) = first.unwrap();
        let mut dst = vec![0u8; LEN];
        m.get(0, &r, 0, &mut dst).unwrap();
        assert_eq!(fnv(&dst), sum);
        assert_eq!(m.stats().coop_gets, COOP_SLOTS as u64);
        // a key naming a slot out of range is refused
        let bad = RemoteRegion {
            key: (r.key & 0xffff_ffff) | (200 << 32),
            ..r
        };
        assert!(matches!(
            m.get(0, &bad, 0, &mut dst),
            Err(BtlError::BadRegion(_))
        ));
        send(&mut m, &mut rx, 0, b"done");
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
}

#[test]
fn sender_killed_during_cooperative_copy_no_hang() {
    let out = run_ranks("killed_child", 2, &[], TIMEOUT);
    assert!(!out.timed_out, "a dead sender must not hang the get");
    for l in out.output[1].lines().filter(|l| l.starts_with("get")) {
        eprintln!("{l}");
    }
    assert_eq!(out.codes[1], Some(0), "receiver: {}", out.output[1]);
    assert_eq!(out.codes[0], None, "sender killed: {}", out.output[0]);
}

/// Rank 0 offers 64 MiB and helps; once it wrote a chunk, a thread of its
/// own kills it with SIGKILL (most likely in the middle of a chunk it
/// claimed). Rank 1's get must return: complete and correct if it was
/// done, else `Protocol` (peer gone).
#[test]
fn killed_child() {
    let Some(ctx) = child_context() else { return };
    let (mut m, _modex, _) = wire(&ctx);
    let mut rx = Ctl::default();
    const LEN: usize = 64 << 20;
    if ctx.rank == 0 {
        let buf = payload(9, LEN);
        // SAFETY: `buf` lives until this process is killed below.
        let r = unsafe { m.register_region(buf.as_ptr(), buf.len()) }.unwrap();
        m.progress(&mut rx);
        send(&mut m, &mut rx, 1, &region_msg(&r, fnv(&buf)));
        let helped = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let h = helped.clone();
        std::thread::spawn(move || {
            while !h.load(std::sync::atomic::Ordering::Acquire) {
                std::thread::yield_now();
            }
            std::thread::sleep(Duration::from_micros(30));
            // SAFETY: kill(2) on our own pid; no memory passed.
            unsafe { libc::kill(libc::getpid(), libc::SIGKILL) };
        });
        let t0 = Instant::now();
        loop {
            m.progress(&mut rx);
            if m.stats().coop_chunks_written > 0 {
                helped.store(true, std::sync::atomic::Ordering::Release);
            }
            assert!(t0.elapsed() < Duration::from_secs(60), "never helped");
        }
    } else {
        let (r, sum) = parse_region(&recv(&mut m, &mut rx));
        let mut dst = vec![0u8; LEN];
        match m.get(0, &r, 0, &mut dst) {
            Ok(()) => {
                assert_eq!(fnv(&dst), sum);
                eprintln!("get completed before the sender died");
            }
            Err(BtlError::Protocol { peer: 0, reason }) => {
                assert!(reason.contains("gone"), "{reason}");
                eprintln!("get: peer gone");
            }
            Err(e) => panic!("unexpected error {e}"),
        }
        // no fence: the sender is dead
        m.finalize().unwrap();
    }
}
