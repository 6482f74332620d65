//! Receive in place (`btl_tcp_place_min`) between real processes over real
//! sockets: large fragments are read straight into the handler's memory,
//! fragments the handler declines come whole through `on_fragment`, and a
//! placement withdrawn halfway drops the rest of that fragment only; the
//! stream stays in step and every byte lands where it belongs, for sizes
//! around the place threshold, the receive buffer and the fragment limit.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use tmpi_base::mca::{Registry, Sources};
use tmpi_base::modex::Modex;
use tmpi_btl::testing::{child_context, run_ranks};
use tmpi_btl::{BtlError, BtlModule, BtlRecvHandler, Placement};
use tmpi_btl_tcp::{TcpConfig, TcpModule};

const TAG: u8 = 0x42;
/// The test's header: sequence number, sender, payload length.
const HDR: usize = 12;
const MAX_SEND: usize = 600 * 1024;
const PLACE_MIN: usize = 4096;
const N: u32 = 120;

fn payload(src: u32, dst: u32, seq: u32, len: usize) -> Vec<u8> {
    let mut x = (src * 131 + dst * 7 + seq).wrapping_mul(0x9e37_79b9) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            x as u8
        })
        .collect()
}

/// Payload lengths around the place threshold, the 256 KiB receive buffer
/// and the fragment limit (header included in the limit).
fn msg_len(seq: u32) -> usize {
    const EDGES: [usize; 12] = [
        0,
        1,
        PLACE_MIN - 1,
        PLACE_MIN,
        PLACE_MIN + 1,
        65_536,
        256 * 1024 - 8 - HDR,
        256 * 1024 - 8 - HDR + 1,
        256 * 1024 + 3,
        MAX_SEND - HDR - 1,
        MAX_SEND - HDR,
        300_001,
    ];
    let e = EDGES[seq as usize % EDGES.len()];
    if seq as usize / EDGES.len() % 2 == 1 {
        // Second pass: odd sizes in between.
        (seq as usize * 48_271) % (MAX_SEND - HDR)
    } else {
        e
    }
}

/// What the handler does with a fragment it is offered.
fn policy(seq: u32) -> Policy {
    match seq % 7 {
        3 => Policy::Withdraw,
        5 => Policy::Decline,
        _ => Policy::Place,
    }
}

#[derive(Debug, PartialEq, Eq)]
enum Policy {
    Place,
    Decline,
    Withdraw,
}

struct Receiver {
    me: u32,
    next: Vec<u32>,
    /// Destinations of placed fragments, by (source, seq).
    dst: HashMap<(u32, u32), Vec<u8>>,
    /// Fragments whose placement was withdrawn (never delivered).
    gone: std::collections::HashSet<(u32, u32)>,
    placed: u64,
    whole_large: u64,
    withdrawn: u64,
    errors: Vec<String>,
}

impl Receiver {
    fn parse(b: &[u8]) -> (u32, u32, usize) {
        let w = |i: usize| u32::from_le_bytes(b[i..i + 4].try_into().unwrap());
        (w(0), w(4), w(8) as usize)
    }

    /// The next sequence number expected from `src`, past withdrawn ones.
    fn expect(&mut self, src: u32) -> u32 {
        while self.gone.contains(&(src, self.next[src as usize])) {
            self.next[src as usize] += 1;
        }
        self.next[src as usize]
    }

    fn check(&mut self, src: u32, tag: u8, head: &[u8], body: &[u8]) {
        let (seq, claimed, len) = Self::parse(head);
        let want = self.expect(src);
        if tag != TAG || claimed != src || seq != want || len != body.len() {
            self.errors.push(format!(
                "from {src}: tag {tag} seq {seq} (want {want}) claimed {claimed} len {len}/{}",
                body.len()
            ));
        } else if body != &payload(src, self.me, seq, len)[..] {
            self.errors.push(format!(
                "from {src}: payload of seq {seq} ({len} B) corrupt"
            ));
        }
        self.next[src as usize] = want + 1;
    }
}

impl BtlRecvHandler for Receiver {
    fn on_fragment(&mut self, peer: u32, tag: u8, bytes: &[u8]) {
        if bytes.len() >= HDR + PLACE_MIN {
            self.whole_large += 1;
        }
        let (seq, ..) = Self::parse(bytes);
        if self.gone.contains(&(peer, seq)) {
            self.errors
                .push(format!("withdrawn fragment {seq} from {peer} delivered"));
        }
        self.check(peer, tag, &bytes[..HDR], &bytes[HDR..]);
    }

    fn place(&mut self, peer: u32, tag: u8, start: &[u8], len: usize) -> Option<Placement> {
        assert!(
            start.len() >= HDR.min(len),
            "offered {} bytes of {len}",
            start.len()
        );
        if tag != TAG || len < HDR {
            return None;
        }
        let (seq, _, plen) = Self::parse(start);
        assert_eq!(plen + HDR, len, "offered length");
        let p = policy(seq);
        if p == Policy::Decline {
            return None;
        }
        let first = !self.dst.contains_key(&(peer, seq));
        if p == Policy::Withdraw && !first {
            if self.dst.remove(&(peer, seq)).is_some() {
                self.withdrawn += 1;
                self.gone.insert((peer, seq));
            }
            return None;
        }
        let d = self
            .dst
            .entry((peer, seq))
            .or_insert_with(|| vec![0u8; len - HDR]);
        // SAFETY: `d` is owned by this handler and neither read nor moved
        // until `on_placed` (or until it is withdrawn, when the module asks
        // before every write); the map does not reallocate the Vec's heap
        // buffer when the map itself grows.
        Some(unsafe { Placement::new(HDR, d.as_mut_ptr(), d.len()) })
    }

    fn on_placed(&mut self, peer: u32, tag: u8, head: &[u8], len: usize) {
        let (seq, ..) = Self::parse(head);
        let body = self.dst.remove(&(peer, seq)).unwrap_or_default();
        assert_eq!(body.len() + HDR, len);
        self.placed += 1;
        let head = head.to_vec();
        self.check(peer, tag, &head, &body);
    }
}

#[test]
fn placed_declined_and_withdrawn_fragments() {
    let out = run_ranks(
        "in_place_child",
        3,
        &[
            ("TMPI_MCA_btl_tcp_max_send_size", &MAX_SEND.to_string()),
            ("TMPI_MCA_btl_tcp_place_min", &PLACE_MIN.to_string()),
            ("TMPI_MCA_btl_tcp_sendq_bytes", &(2 * MAX_SEND).to_string()),
        ],
        Duration::from_secs(120),
    );
    out.assert_success();
}

#[test]
fn in_place_child() {
    let Some(ctx) = child_context() else { return };
    let info = ctx.process_info();
    let mut modex = ctx.modex();
    let reg = Registry::new(Sources::from_process());
    let cfg = TcpConfig::from_registry(&reg).expect("config");
    assert_eq!(cfg.place_min, PLACE_MIN);
    let mut m = TcpModule::open(&info, &mut modex, cfg).expect("open");
    modex.fence().unwrap();
    let all: Vec<u32> = (0..ctx.size).collect();
    m.add_procs(&all, &mut modex).unwrap();
    let others: Vec<u32> = all.iter().copied().filter(|&r| r != ctx.rank).collect();
    let mut next_send = vec![0u32; ctx.size as usize];
    let mut rx = Receiver {
        me: ctx.rank,
        next: vec![0; ctx.size as usize],
        dst: HashMap::new(),
        gone: Default::default(),
        placed: 0,
        whole_large: 0,
        withdrawn: 0,
        errors: Vec::new(),
    };
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        for &p in &others {
            while next_send[p as usize] < N {
                let seq = next_send[p as usize];
                let body = payload(ctx.rank, p, seq, msg_len(seq));
                let hdr = [
                    seq.to_le_bytes(),
                    ctx.rank.to_le_bytes(),
                    (body.len() as u32).to_le_bytes(),
                ]
                .concat();
                match m.send(p, TAG, &hdr, &body) {
                    Ok(()) => next_send[p as usize] += 1,
                    Err(BtlError::WouldBlock) => break,
                    Err(e) => panic!("send to {p}: {e}"),
                }
            }
        }
        m.progress(&mut rx);
        assert!(rx.errors.is_empty(), "rank {}: {:?}", ctx.rank, rx.errors);
        let done = others
            .iter()
            .all(|&p| next_send[p as usize] == N && rx.expect(p) == N);
        if done && m.pending_bytes() == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "rank {}: stuck: sent {next_send:?} received {:?} stats {:?}",
            ctx.rank,
            rx.next,
            m.stats()
        );
    }
    let s = m.stats();
    println!(
        "rank {}: placed {} withdrawn {} large delivered whole {} stats {s:?}",
        ctx.rank, rx.placed, rx.withdrawn, rx.whole_large
    );
    assert_eq!(s.placed, rx.placed + rx.withdrawn, "{s:?}");
    assert_eq!(s.place_revoked, rx.withdrawn, "{s:?}");
    assert!(rx.placed > 0 && rx.withdrawn > 0, "{s:?}");
    assert!(rx.dst.is_empty(), "placements left: {:?}", rx.dst.keys());
    assert!(m.failed_peers().is_empty(), "{:?}", m.failed_peers());
    modex.fence().unwrap();
    m.finalize().unwrap();
}
