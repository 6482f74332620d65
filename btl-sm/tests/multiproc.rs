//! Multi-process tests of the sm BTL: real processes (this test binary
//! re-executed), real `/dev/shm` segments, the file modex of
//! `tmpi_btl::testing`. Every job has a timeout.

use std::collections::VecDeque;
use std::os::unix::fs::PermissionsExt;
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_btl::testing::{child_context, run_ranks, ChildContext, FileModex};
use tmpi_btl::{BtlComponent, BtlError, BtlFlags, BtlModule, BtlRecvHandler, RemoteRegion};
use tmpi_btl_sm::{SingleCopy, SmComponent, SmConfig, SmModule};

const TIMEOUT: Duration = Duration::from_secs(120);
const HDR: usize = 20;

fn fnv(b: &[u8]) -> u64 {
    b.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &x| {
        (h ^ x as u64).wrapping_mul(0x100_0000_01b3)
    })
}

fn pattern(src: u32, dst: u32, seq: u32, len: usize) -> Vec<u8> {
    (0..len)
        .map(|k| {
            ((k as u32).wrapping_mul(31) ^ seq.wrapping_mul(7) ^ (src * 131) ^ (dst * 17)) as u8
        })
        .collect()
}

fn header(src: u32, seq: u32, payload: &[u8]) -> [u8; HDR] {
    let mut h = [0u8; HDR];
    h[..4].copy_from_slice(&src.to_le_bytes());
    h[4..8].copy_from_slice(&seq.to_le_bytes());
    h[8..12].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[12..].copy_from_slice(&fnv(payload).to_le_bytes());
    h
}

/// Checks every arriving fragment: right source, next sequence number of
/// that source (order, exactly once), length and checksum, exact bytes.
struct Checker {
    me: u32,
    next: Vec<u32>,
    received: u64,
    /// Fragments with tag 200 (control), kept raw.
    control: VecDeque<(u32, Vec<u8>)>,
    slow: Option<(u64, Duration)>,
}

impl Checker {
    fn new(me: u32, size: u32) -> Checker {
        Checker {
            me,
            next: vec![0; size as usize],
            received: 0,
            control: VecDeque::new(),
            slow: None,
        }
    }
}

impl BtlRecvHandler for Checker {
    fn on_fragment(&mut self, peer: u32, tag: u8, b: &[u8]) {
        if tag == 200 {
            self.control.push_back((peer, b.to_vec()));
            return;
        }
        assert!(b.len() >= HDR, "short fragment");
        let src = u32::from_le_bytes(b[..4].try_into().unwrap());
        let seq = u32::from_le_bytes(b[4..8].try_into().unwrap());
        let len = u32::from_le_bytes(b[8..12].try_into().unwrap()) as usize;
        let sum = u64::from_le_bytes(b[12..20].try_into().unwrap());
        assert_eq!(src, peer, "fragment attributed to the wrong peer");
        assert_eq!(tag, (seq % 200) as u8, "tag");
        assert_eq!(
            seq, self.next[src as usize],
            "out of order / duplicate / lost from {src}"
        );
        let payload = &b[HDR..];
        assert_eq!(payload.len(), len, "length");
        assert_eq!(fnv(payload), sum, "checksum");
        assert_eq!(payload, &pattern(src, self.me, seq, len)[..], "bytes");
        self.next[src as usize] += 1;
        self.received += 1;
        if let Some((every, pause)) = self.slow {
            if self.received.is_multiple_of(every) {
                std::thread::sleep(pause);
            }
        }
    }
}

fn open(ctx: &ChildContext, cfg: SmConfig) -> (SmModule, FileModex) {
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let m = SmModule::open(&info, &mut modex, cfg)
        .expect("open sm")
        .expect("a module with local peers");
    (m, modex)
}

/// Open + fence + add_procs; checks mode 0600 before and unlink after all
/// peers attached.
fn wire(ctx: &ChildContext, cfg: SmConfig) -> (SmModule, FileModex) {
    let (mut m, mut modex) = open(ctx, cfg);
    let path = m.segment_path().to_path_buf();
    assert_eq!(
        path,
        std::path::PathBuf::from(format!("/dev/shm/tmpi-sm.{}.{}", ctx.job_id, ctx.rank))
    );
    let mode = std::fs::metadata(&path).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "segment mode");
    modex.fence().unwrap();
    let all: Vec<u32> = (0..ctx.size).collect();
    let reach = m.add_procs(&all, &mut modex).unwrap();
    let others: Vec<u32> = all.iter().copied().filter(|&r| r != ctx.rank).collect();
    assert_eq!(
        reach, others,
        "sm reaches every other local rank, not itself"
    );
    // Every peer attached during its add_procs, before this fence.
    modex.fence().unwrap();
    assert!(m.poll_unlink(), "all peers attached");
    assert!(!path.exists(), "segment unlinked once all peers attached");
    (m, modex)
}

fn send_retry(m: &mut SmModule, rx: &mut Checker, peer: u32, tag: u8, h: &[u8], p: &[u8]) -> u64 {
    let mut blocked = 0;
    let t0 = Instant::now();
    loop {
        match m.send(peer, tag, h, p) {
            Ok(()) => return blocked,
            Err(BtlError::WouldBlock) => {
                blocked += 1;
                m.progress(rx);
                assert!(
                    t0.elapsed() < Duration::from_secs(60),
                    "send never unblocked"
                );
            }
            Err(e) => panic!("send: {e}"),
        }
    }
}

fn wait_for(
    m: &mut SmModule,
    rx: &mut Checker,
    what: &str,
    mut done: impl FnMut(&Checker) -> bool,
) {
    let t0 = Instant::now();
    while !done(rx) {
        if m.progress(rx) == 0 {
            std::thread::yield_now();
        }
        assert!(
            t0.elapsed() < Duration::from_secs(60),
            "timed out waiting for {what}"
        );
    }
}

fn no_segments_left(job: &str) {
    let prefix = format!("tmpi-sm.{job}.");
    let left: Vec<_> = std::fs::read_dir("/dev/shm")
        .unwrap()
        .filter_map(|e| e.ok())
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(&prefix))
        .collect();
    assert!(left.is_empty(), "segments left behind: {left:?}");
}

const SIZES: [usize; 10] = [0, 8, 100, 236, 1000, 4000, 4200, 9000, 20000, 32768 - HDR];

/// Every rank sends `per_peer` fragments of mixed sizes (fast box, eager,
/// max) to every other rank, interleaved, and checks what it receives.
fn all_to_all(ctx: &ChildContext, cfg: SmConfig, per_peer: u32) {
    all_to_all_with(ctx, cfg, per_peer, false)
}

/// `all_to_all`; with `direct`, every fragment is first offered to the
/// peer's direct handle (`BtlModule::direct_send`, the pml's blocking-send
/// path) and goes through `send` only when the handle refuses: the
/// checker then proves that handle writes never overtake FIFO fragments.
fn all_to_all_with(ctx: &ChildContext, cfg: SmConfig, per_peer: u32, direct: bool) {
    let (mut m, mut modex) = wire(ctx, cfg);
    let mut rx = Checker::new(ctx.rank, ctx.size);
    let mut blocked = 0;
    let handles: Vec<_> = (0..ctx.size).map(|p| m.direct_send(p)).collect();
    assert!(handles[ctx.rank as usize].is_none(), "no handle to oneself");
    let mut direct_sent = 0u64;
    for seq in 0..per_peer {
        for peer in (0..ctx.size).filter(|&p| p != ctx.rank) {
            let p = pattern(
                ctx.rank,
                peer,
                seq,
                SIZES[(seq as usize + peer as usize) % SIZES.len()],
            );
            let h = header(ctx.rank, seq, &p);
            let tag = (seq % 200) as u8;
            if direct {
                let tx = handles[peer as usize].as_ref().expect("a handle per peer");
                // SAFETY: this test is single-threaded: the handle's writes,
                // the module's sends and its progress never overlap, and the
                // module is finalized only after the last use.
                if unsafe { tx.try_send(tag, &h, &p) } {
                    direct_sent += 1;
                    continue;
                }
            }
            blocked += send_retry(&mut m, &mut rx, peer, tag, &h, &p);
        }
        m.progress(&mut rx);
    }
    if direct {
        assert!(direct_sent > 0, "the direct handles took some fragments");
        eprintln!(
            "rank {}: {direct_sent} fragments through direct handles",
            ctx.rank
        );
    }
    let expect = per_peer as u64 * (ctx.size as u64 - 1);
    wait_for(&mut m, &mut rx, "all fragments", |rx| rx.received == expect);
    let st = m.stats();
    eprintln!("rank {}: {st:?}, would_block {blocked}", ctx.rank);
    assert!(
        st.fbox_sends > 0 && st.fifo_sends > 0,
        "both paths used: {st:?}"
    );
    assert!(st.max_outstanding as usize <= m.pool_size());
    // our fragments all come back (nothing lost in peers' FIFOs)
    let pool = m.pool_size();
    let t0 = Instant::now();
    while m.free_fragments() != pool {
        m.progress(&mut rx);
        assert!(
            t0.elapsed() < Duration::from_secs(30),
            "fragments not returned"
        );
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
    for tx in handles.iter().flatten() {
        // SAFETY: single-threaded (above); a finalized module's handles
        // refuse without touching the unmapped segments.
        assert!(
            !unsafe { tx.try_send(1, b"late", &[]) },
            "handle refuses after finalize"
        );
    }
    assert_eq!(rx.received, expect);
    for (src, &n) in rx.next.iter().enumerate() {
        assert_eq!(n, if src as u32 == ctx.rank { 0 } else { per_peer });
    }
}

#[test]
fn ordering_exactly_once_checksums_4_ranks() {
    let out = run_ranks("ordering_child", 4, &[], TIMEOUT);
    out.assert_success();
    no_segments_left(&out.job_id);
}

#[test]
fn ordering_child() {
    let Some(ctx) = child_context() else { return };
    all_to_all(&ctx, SmConfig::default(), 1000);
}

#[test]
fn direct_handles_keep_order_3_ranks() {
    let out = run_ranks("direct_child", 3, &[], TIMEOUT);
    out.assert_success();
    no_segments_left(&out.job_id);
}

#[test]
fn direct_child() {
    let Some(ctx) = child_context() else { return };
    // Small fast boxes: the handles often find them full or the FIFO in
    // use, so both paths interleave to every peer.
    let cfg = SmConfig {
        fbox_size: 1024,
        fbox_max: 256,
        ..SmConfig::default()
    };
    all_to_all_with(&ctx, cfg, 800, true);
}

#[test]
fn two_and_three_ranks() {
    for n in [2, 3] {
        let out = run_ranks("small_pool_child", n, &[], TIMEOUT);
        out.assert_success();
        no_segments_left(&out.job_id);
    }
}

#[test]
fn small_pool_child() {
    let Some(ctx) = child_context() else { return };
    // Tiny pool and fast boxes: constant back-pressure on every path.
    let cfg = SmConfig {
        fifo_size: 80 * 1024,
        fbox_size: 1024,
        fbox_max: 256,
        ..SmConfig::default()
    };
    all_to_all(&ctx, cfg, 800);
}

#[test]
fn flow_control_fast_sender_slow_receiver() {
    let out = run_ranks("flow_child", 2, &[], TIMEOUT);
    out.assert_success();
    no_segments_left(&out.job_id);
}

#[test]
fn flow_child() {
    let Some(ctx) = child_context() else { return };
    let cfg = SmConfig {
        fifo_size: 128 * 1024,
        ..SmConfig::default()
    };
    let (mut m, mut modex) = wire(&ctx, cfg);
    let bytes = m.segment_bytes();
    let mut rx = Checker::new(ctx.rank, ctx.size);
    const N: u32 = 3000;
    if ctx.rank == 0 {
        let mut blocked = 0;
        for seq in 0..N {
            let p = pattern(0, 1, seq, SIZES[seq as usize % SIZES.len()]);
            let h = header(0, seq, &p);
            blocked += send_retry(&mut m, &mut rx, 1, (seq % 200) as u8, &h, &p);
            assert!(m.pool_size() - m.free_fragments() <= m.pool_size());
        }
        let st = m.stats();
        eprintln!(
            "sender: {st:?}, pool {} fragments, segment {bytes} B",
            m.pool_size()
        );
        assert!(blocked > 0, "a slow receiver must push back on the sender");
        assert!(st.max_outstanding as usize <= m.pool_size());
        assert_eq!(m.segment_bytes(), bytes, "memory is the fixed segment");
        wait_for(&mut m, &mut rx, "ack", |rx| !rx.control.is_empty());
        let (_, ack) = rx.control.pop_front().unwrap();
        assert_eq!(ack, N.to_le_bytes());
    } else {
        rx.slow = Some((50, Duration::from_millis(2)));
        wait_for(&mut m, &mut rx, "all fragments", |rx| {
            rx.received == N as u64
        });
        send_retry(&mut m, &mut rx, 0, 200, &N.to_le_bytes(), &[]);
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
}

#[test]
fn cma_get_large_region_and_bounds() {
    let out = run_ranks("cma_child", 2, &[], TIMEOUT);
    out.assert_success();
    no_segments_left(&out.job_id);
}

#[test]
fn cma_child() {
    let Some(ctx) = child_context() else { return };
    let (mut m, mut modex) = wire(&ctx, SmConfig::default());
    assert!(
        m.single_copy_enabled() && m.flags().contains(BtlFlags::GET),
        "CMA probe failed on this machine: single copy unavailable"
    );
    let mut rx = Checker::new(ctx.rank, ctx.size);
    const LEN: usize = 16 << 20;
    if ctx.rank == 0 {
        let buf: Vec<u8> = (0..LEN)
            .map(|i| (i as u32).wrapping_mul(2654435761) as u8 ^ (i >> 16) as u8)
            .collect();
        // SAFETY: `buf` lives until after the peer's "done" below.
        let region = unsafe { m.register_region(buf.as_ptr(), buf.len()) }.unwrap();
        let mut msg = region.to_bytes().to_vec();
        msg.extend_from_slice(&fnv(&buf).to_le_bytes());
        send_retry(&mut m, &mut rx, 1, 200, &msg, &[]);
        wait_for(&mut m, &mut rx, "done", |rx| !rx.control.is_empty());
        assert_eq!(rx.control.pop_front().unwrap().1, b"done");
        m.deregister_region(&region);
        drop(buf);
    } else {
        wait_for(&mut m, &mut rx, "region", |rx| !rx.control.is_empty());
        let (_, msg) = rx.control.pop_front().unwrap();
        let region = RemoteRegion::from_bytes(&msg[..24]).unwrap();
        let sum = u64::from_le_bytes(msg[24..32].try_into().unwrap());
        assert_eq!(region.len as usize, LEN);
        let mut dst = vec![0u8; LEN];
        // whole region in one call, then in 1 MiB pieces at offsets
        m.get(0, &region, 0, &mut dst).unwrap();
        assert_eq!(fnv(&dst), sum, "single-copy checksum");
        let mut piece = vec![0u8; 1 << 20];
        for k in 0..16u64 {
            m.get(0, &region, k << 20, &mut piece).unwrap();
            assert_eq!(
                &piece[..],
                &dst[(k as usize) << 20..((k as usize) + 1) << 20]
            );
        }
        // bounds: one byte past the end, offsets overflowing
        assert!(matches!(
            m.get(0, &region, LEN as u64 - 10, &mut piece[..11]),
            Err(BtlError::OutOfBounds { .. })
        ));
        assert!(matches!(
            m.get(0, &region, u64::MAX, &mut piece[..1]),
            Err(BtlError::OutOfBounds { .. })
        ));
        m.get(0, &region, LEN as u64 - 10, &mut piece[..10])
            .unwrap();
        // a region of another process, a peer that is not reachable
        let forged = RemoteRegion {
            key: region.key + 1,
            ..region
        };
        assert!(matches!(
            m.get(0, &forged, 0, &mut piece[..1]),
            Err(BtlError::BadRegion(_))
        ));
        assert!(matches!(
            m.get(1, &region, 0, &mut piece[..1]),
            Err(BtlError::Unreachable(1))
        ));
        assert!(matches!(
            m.get(7, &region, 0, &mut piece[..1]),
            Err(BtlError::Unreachable(7))
        ));
        send_retry(&mut m, &mut rx, 0, 200, b"done", &[]);
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
}

#[test]
fn single_copy_none_copies_through_segment() {
    let out = run_ranks(
        "none_child",
        2,
        &[("TMPI_MCA_btl_sm_single_copy", "none")],
        TIMEOUT,
    );
    out.assert_success();
    no_segments_left(&out.job_id);
}

#[test]
fn none_child() {
    let Some(ctx) = child_context() else { return };
    // Through the component and the MCA registry (environment source).
    let reg = Registry::new(Sources::from_process());
    let cfg = SmConfig::from_registry(&reg).unwrap();
    assert_eq!(cfg.single_copy, SingleCopy::None);
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let mut mods = SmComponent.init(&reg, &info, &mut modex).unwrap();
    assert_eq!(mods.len(), 1);
    let mut m = mods.pop().unwrap();
    modex.fence().unwrap();
    assert_eq!(
        m.add_procs(&[0, 1], &mut modex).unwrap(),
        vec![1 - ctx.rank]
    );
    assert!(!m.flags().contains(BtlFlags::GET));
    let buf = [1u8; 64];
    // SAFETY: not registered (refused); `buf` outlives the call anyway.
    assert!(matches!(
        unsafe { m.register_region(buf.as_ptr(), buf.len()) },
        Err(BtlError::Unsupported(_))
    ));
    let region = RemoteRegion {
        addr: buf.as_ptr() as u64,
        len: 64,
        key: 0,
    };
    let mut d = [0u8; 8];
    assert!(matches!(
        m.get(1 - ctx.rank, &region, 0, &mut d),
        Err(BtlError::Unsupported(_))
    ));
    // The pml's copy path: a 4 MiB message in max_send_size pieces.
    const LEN: usize = 4 << 20;
    let chunk = m.max_send_size() - 16;
    let mut rx = Vec::<u8>::new();
    if ctx.rank == 0 {
        let data: Vec<u8> = (0..LEN).map(|i| (i * 13 / 7) as u8).collect();
        let sum = fnv(&data);
        for (i, c) in data.chunks(chunk).enumerate() {
            let mut h = [0u8; 16];
            h[..8].copy_from_slice(&(i as u64).to_le_bytes());
            h[8..].copy_from_slice(&sum.to_le_bytes());
            let t0 = Instant::now();
            loop {
                match m.send(1, 5, &h, c) {
                    Ok(()) => break,
                    Err(BtlError::WouldBlock) => {
                        m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
                    }
                    Err(e) => panic!("{e}"),
                }
                assert!(t0.elapsed() < Duration::from_secs(60));
            }
        }
        let mut done = false;
        let t0 = Instant::now();
        while !done {
            m.progress(&mut |_: u32, t: u8, b: &[u8]| {
                assert_eq!((t, b), (6, &b"ok"[..]));
                done = true;
            });
            assert!(t0.elapsed() < Duration::from_secs(60));
        }
    } else {
        let mut next = 0u64;
        let mut sum = 0;
        let t0 = Instant::now();
        while rx.len() < LEN {
            m.progress(&mut |_: u32, t: u8, b: &[u8]| {
                assert_eq!(t, 5);
                assert_eq!(
                    u64::from_le_bytes(b[..8].try_into().unwrap()),
                    next,
                    "piece order"
                );
                sum = u64::from_le_bytes(b[8..16].try_into().unwrap());
                next += 1;
                rx.extend_from_slice(&b[16..]);
            });
            assert!(t0.elapsed() < Duration::from_secs(60));
        }
        assert_eq!(rx.len(), LEN);
        assert_eq!(fnv(&rx), sum, "copy-path checksum");
        while m.send(0, 6, b"ok", &[]).is_err() {
            m.progress(&mut |_: u32, _: u8, _: &[u8]| {});
        }
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
}

/// A segment whose peers never attach is still removed at finalize / drop.
#[test]
fn unattached_segment_removed_on_drop_and_errors_typed() {
    let dir = std::env::temp_dir().join(format!("tmpi-sm-lonely-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let job = format!("lonely{}", std::process::id());
    let info = ProcessInfo {
        rank: 0,
        size: 3,
        local_rank: 0,
        local_size: 2,
        node_id: 0,
        node_of: vec![0, 0, 1],
        job_id: job.clone(),
        hostname: "h".into(),
    };
    let mut modex = FileModex::new(&dir, 0, 3, Duration::from_millis(10));
    let mut m = SmModule::open(&info, &mut modex, SmConfig::default())
        .unwrap()
        .unwrap();
    let path = m.segment_path().to_path_buf();
    assert!(path.exists());
    // same name again: O_EXCL refuses
    let mut modex2 = FileModex::new(&dir, 0, 3, Duration::from_millis(10));
    assert!(matches!(
        SmModule::open(&info, &mut modex2, SmConfig::default()),
        Err(BtlError::Io { .. })
    ));
    // rank 2 is on another node: not reachable; rank 1 never published
    assert!(matches!(
        m.send(2, 0, b"x", &[]),
        Err(BtlError::Unreachable(2))
    ));
    assert!(matches!(
        m.add_procs(&[1], &mut modex),
        Err(BtlError::Modex(_))
    ));
    assert_eq!(m.add_procs(&[0, 2], &mut modex).unwrap(), Vec::<u32>::new());
    assert!(matches!(
        m.send(1, 0, &[0; 40000], &[]),
        Err(BtlError::Unreachable(1))
    ));
    drop(m);
    assert!(!path.exists(), "drop removes an unattached segment");
    // alone on the node: no module
    let single = ProcessInfo::singleton(job, "h".into());
    assert!(SmModule::open(&single, &mut modex, SmConfig::default())
        .unwrap()
        .is_none());
    let bad = SmConfig {
        fbox_size: 1000,
        ..SmConfig::default()
    };
    assert!(matches!(
        SmModule::open(&info, &mut modex, bad),
        Err(BtlError::Config(_))
    ));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn stalled_receiver_does_not_starve_other_peers() {
    let out = run_ranks("share_child", 3, &[], TIMEOUT);
    out.assert_success();
    no_segments_left(&out.job_id);
}

#[test]
fn share_child() {
    let Some(ctx) = child_context() else { return };
    let (mut m, mut modex) = wire(&ctx, SmConfig::default());
    let mut rx = Checker::new(ctx.rank, ctx.size);
    let flag = ctx.dir.join("stall_done");
    match ctx.rank {
        0 => {
            // Rank 1 does not progress: fill its share of max fragments.
            let mut sent = 0u32;
            loop {
                let p = pattern(0, 1, sent, 20000);
                match m.send(1, (sent % 200) as u8, &header(0, sent, &p), &p) {
                    Ok(()) => sent += 1,
                    Err(BtlError::WouldBlock) => break,
                    Err(e) => panic!("{e}"),
                }
                assert!(sent < 1000, "no flow control towards a stalled peer");
            }
            assert!(sent >= 1 && (sent as usize) < m.pool_size());
            // Rank 2 is still reachable at once, with the same class.
            let p = pattern(0, 2, 0, 20000);
            m.send(2, 0, &header(0, 0, &p), &p)
                .expect("a stalled peer must not starve the others");
            // atomically visible with its content
            let tmp = ctx.dir.join("stall_done.tmp");
            std::fs::write(&tmp, sent.to_le_bytes()).unwrap();
            std::fs::rename(&tmp, &flag).unwrap();
        }
        1 => {
            let t0 = Instant::now();
            while !flag.exists() {
                assert!(t0.elapsed() < Duration::from_secs(60));
                std::thread::sleep(Duration::from_millis(5));
            }
            let sent = u32::from_le_bytes(std::fs::read(&flag).unwrap()[..4].try_into().unwrap());
            wait_for(&mut m, &mut rx, "stalled fragments", |rx| {
                rx.received == sent as u64
            });
        }
        _ => wait_for(&mut m, &mut rx, "one fragment", |rx| rx.received == 1),
    }
    modex.fence().unwrap();
    m.finalize().unwrap();
}
