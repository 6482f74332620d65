//! The tcp module: listening socket, lazy connections, handshake,
//! non-blocking I/O driven by [`BtlModule::progress`].
//!
//! # Wire-up
//! `open` binds one listening socket per address of the selected interfaces
//! (`btl_tcp_if_include` / `btl_tcp_if_exclude`; never the wildcard
//! address), all on one ephemeral port, and publishes `v1 <port> <ip>/<prefix>,...` (the selected interfaces) under
//! [`MODEX_ADDR_KEY`]; rank 0 also publishes the job secret under
//! [`MODEX_SECRET_KEY`] (see the crate documentation). `add_procs` reads
//! them after the fence and picks one address per peer: a loopback address
//! for a peer on the same node (when loopback is selected here), otherwise
//! a non-loopback address, preferring one in a subnet of a local selected
//! interface. A peer with no usable address is not reachable. The module
//! never reaches its own process (btl self does).
//!
//! # Connections
//! Made lazily by the first `send` to a peer; fragments queue until the
//! handshake ([`crate::wire`], challenge/response authenticated with the
//! job secret, [`crate::auth`]) completes. The accepting side sends a
//! CHALLENGE at once; the connection holds one pending slot
//! ([`crate::admission`]: bounded per source address and in total, oldest
//! evicted first) until its HELLO proves the secret, at most
//! `btl_tcp_handshake_timeout`. Refused connections are logged at a
//! bounded rate (one line, then a count at most every
//! [`REJECT_LOG_EVERY`], the rest at finalize). A connecting side whose
//! attempt is closed before the answer (evicted, timed out) connects again
//! with back-off until `btl_tcp_connect_timeout`. An authenticated HELLO
//! from a rank that already has an established connection it started (a
//! second claim of the rank pair), and an authenticated peer breaking the
//! protocol, fail that peer at once with an error naming the rank; the
//! connecting side is told (DUPLICATE) and fails too. **Simultaneous connects** (both sides connecting at once)
//! are resolved deterministically: the connection started by the lower
//! rank wins. The higher rank, on receiving the lower rank's HELLO, accepts
//! it and drops its own attempt; the lower rank answers the higher rank's
//! HELLO with REJECT, whereupon the higher rank waits for the incoming
//! connection (bounded by `btl_tcp_connect_timeout`).
//!
//! # Data
//! Frames are `8-byte header ++ body` ([`crate::wire::FrameHdr`]). A send
//! to a connected peer with nothing queued is written at once with one
//! `sendmsg` (header, upper-layer header, payload); whatever the socket
//! does not take is copied into the peer's queue, drained by `progress`.
//! At most `btl_tcp_sendq_bytes` are queued per peer: beyond that `send`
//! says [`BtlError::WouldBlock`]. Reads go into a per-connection buffer
//! (grown to the largest frame seen, at most `WIRE_MAX_FRAME`) and frames
//! are handed to the handler in place. Progress is bounded: at most
//! [`FRAMES_PER_PROGRESS`] fragments per call; connections with unread
//! data are remembered (epoll is edge-triggered) and read on the next call.
//! `btl_tcp_sndbuf`/`btl_tcp_rcvbuf` set `SO_SNDBUF`/`SO_RCVBUF` of every
//! connection (0, the default as in Open MPI: the kernel sizes and grows
//! them; an explicit size stops that growth and is capped by
//! `net.core.wmem_max`/`rmem_max`, 208 KiB on many systems, so it is no
//! default).
//!
//! # Receive in place
//! A data frame of which at least `btl_tcp_place_min` bytes are still to
//! come once its start is here is offered to the handler
//! ([`BtlRecvHandler::place`]: the pml answers for the fragments of a
//! pipelined rendezvous whose receive buffer is contiguous). With a
//! placement, the bytes already read are copied there and the rest is read
//! with one `readv` per call straight into it, the second vector taking the
//! start of the next frames (at most [`PLACE_SPILL`], as is the next read
//! when nothing followed: a pipelined message's next fragment is likely
//! placed too); the handler is asked
//! again before every read, and a placement withdrawn (the receive
//! completed or failed meanwhile) makes the module read and drop the rest of
//! that fragment. While this is on, a read into the connection's buffer
//! takes at most [`PLACE_READ_CAP`] bytes, so that only the first read of a
//! large fragment goes through the buffer. Why: every byte of a pipelined
//! message used to be copied twice on the receiving side (kernel to the
//! connection's buffer, then the pml into the receive buffer), which made
//! tcp ping-pong 1.2-1.8x Open MPI's time at 256 KiB-4 MiB; Open MPI's tcp
//! reads its PUT fragments straight into the receive buffer the same way.
//! The default fragment (`btl_tcp_max_send_size`, 512 KiB + 64) is larger
//! than Open MPI's 128 KiB send fragment for the same reason (one copied
//! first read per fragment, fewer calls); larger ones did no better on
//! loopback, as a fragment the socket does not take whole is copied into the
//! peer's queue. `docs/journal/tcp-large-messages.md` has the measurements.
//!
//! # Failure
//! EOF without a preceding BYE frame, a reset, a write error, a malformed
//! frame or a failed connect marks the peer failed: one ERROR line on
//! target `btl_tcp` names the rank, its address and the reason (and
//! whether a fragment was cut in the middle); queued fragments are
//! dropped; every later `send` to it returns [`BtlError::Protocol`];
//! [`TcpModule::failed_peers`] lists it. Nothing waits on a dead peer.
//! `finalize` sends BYE to connected peers so that their EOF is orderly.
//!
//! # Fault injection (testing)
//! `btl_tcp_inject_reset=N` (on the rank `btl_tcp_inject_reset_rank`, or
//! every rank with -1): once `N` fragments were accepted for a peer (those
//! queued while connecting included) and its connection is established,
//! the connection is aborted with a reset (`SO_LINGER` {on, 0}, close;
//! no FIN). This end marks the peer failed first ("connection reset by
//! this process (fault injection ...)"), the other end then sees
//! `ECONNRESET` ("read: Connection reset by peer"): both report the other
//! through `take_failed_peers`, both processes stay alive.

use std::collections::VecDeque;
use std::io::{self, Read};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::time::{Duration, Instant};

use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token};
use tmpi_base::identity::ProcessInfo;
use tmpi_base::modex::{Modex, ModexError};
use tmpi_btl::{BtlError, BtlFlags, BtlModule, BtlRecvHandler, EXCLUSIVITY_LOW, PLACE_HEAD_MAX};

use crate::admission::{self, Pending, RejectLog};
use crate::auth::{NonceSource, Transcript};
use crate::config::TcpConfig;
use crate::ifaddr::{self, Iface};
use crate::sys;
use crate::wire::{
    self, Endpoint, FrameHdr, FrameKind, Handshake, HsKind, FRAME_HDR_LEN, HS_LEN, MAX_ADDRS,
    NONCE_LEN, SECRET_LEN,
};

mod handshake;
mod listen;

/// Modex key of a process's listening address.
pub const MODEX_ADDR_KEY: &str = "btl.tcp.addr";
/// Modex key of the job secret (published by rank 0).
pub const MODEX_SECRET_KEY: &str = "btl.tcp.secret";
/// Most fragments delivered per progress call.
pub const FRAMES_PER_PROGRESS: usize = 64;
/// Refused connections are reported as a count at most this often.
pub const REJECT_LOG_EVERY: Duration = Duration::from_secs(10);
/// Initial receive buffer per connection.
const READ_CHUNK: usize = 256 * 1024;
/// Most bytes one read puts into a connection's buffer while receiving in
/// place is on (`btl_tcp_place_min` > 0): about what loopback delivers at
/// once (64 KiB segments), and an eager fragment whole; the rest of a
/// large fragment is then read into its placement.
pub const PLACE_READ_CAP: usize = 64 * 1024 + 64;
/// Most bytes the read that ends a placed fragment takes beyond it: the
/// next frame's header and a little more, as the next fragment of a
/// pipelined message is likely to be placed too.
pub const PLACE_SPILL: usize = 4096;
/// Tokens of the listening sockets: `LISTENER_BASE + i` (connections use
/// `slot + 1`).
const LISTENER_BASE: usize = usize::MAX - MAX_ADDRS;

/// Traffic with one peer.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct PeerStats {
    /// Fragments accepted by `send` for this peer.
    pub frags_sent: u64,
    /// Their bytes (upper-layer header + payload).
    pub bytes_sent: u64,
    /// Fragments delivered from this peer.
    pub frags_recv: u64,
    /// Their bytes.
    pub bytes_recv: u64,
}

/// Counters of one module.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct TcpStats {
    /// Outgoing connections established.
    pub connects: u64,
    /// Incoming connections accepted.
    pub accepts: u64,
    /// Incoming connections refused (no proof of the job secret, bad
    /// magic, timeout, evicted for newer ones).
    pub rejected: u64,
    /// Outgoing attempts made again after the peer closed them before
    /// answering (evicted or timed out there).
    pub retries: u64,
    /// Simultaneous connects resolved.
    pub simultaneous: u64,
    /// Sends refused with `WouldBlock`.
    pub would_block: u64,
    /// Peers marked failed.
    pub peer_failures: u64,
    /// Queued fragments dropped because their peer failed.
    pub dropped: u64,
    /// Connections aborted by fault injection (`btl_tcp_inject_reset`).
    pub injected_resets: u64,
    /// Fragments whose payload was read straight into the receiver's
    /// buffer (receive in place, `btl_tcp_place_min`).
    pub placed: u64,
    /// Placed fragments whose placement the handler withdrew before they
    /// arrived whole (the rest was read and dropped).
    pub place_revoked: u64,
}

impl std::fmt::Display for TcpStats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} connects, {} accepts, {} refused, {} retries, {} simultaneous, {} sends refused \
             for back-pressure, {} peer failures, {} queued fragments dropped, {} injected resets, \
             {} fragments received in place ({} withdrawn)",
            self.connects,
            self.accepts,
            self.rejected,
            self.retries,
            self.simultaneous,
            self.would_block,
            self.peer_failures,
            self.dropped,
            self.injected_resets,
            self.placed,
            self.place_revoked
        )
    }
}

#[derive(Debug)]
enum PeerState {
    Idle,
    Connecting {
        conn: usize,
        since: Instant,
    },
    /// An attempt was closed before its answer: connect again at `at`.
    Retry {
        at: Instant,
        since: Instant,
    },
    AwaitingIncoming {
        since: Instant,
    },
    Connected {
        conn: usize,
    },
    /// The peer said BYE.
    Closed,
    Failed(String),
}

struct Peer {
    addr: SocketAddr,
    state: PeerState,
    queue: VecDeque<Vec<u8>>,
    head_off: usize,
    queued: usize,
    stats: PeerStats,
    /// Connection attempts made (for the back-off).
    attempts: u32,
    /// Sends refused after the peer failed (reported once, at finalize).
    refused_sends: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Outgoing, TCP connect in progress.
    Connecting,
    /// Outgoing, waiting for the listener's CHALLENGE.
    AwaitChallenge,
    /// Outgoing, HELLO sent, waiting for the answer.
    SentHello,
    /// Incoming, CHALLENGE sent, waiting for HELLO (holds a pending slot).
    AwaitHello,
    /// Carrying frames.
    Established,
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
    peer: Option<u32>,
    remote: SocketAddr,
    /// Accepted here (not started by this process).
    inbound: bool,
    hs: [u8; HS_LEN],
    hs_len: usize,
    /// The accepting side's nonce.
    nonce_l: [u8; NONCE_LEN],
    /// The connecting side's nonce.
    nonce_c: [u8; NONCE_LEN],
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    /// A fragment whose payload is being read into the handler's memory
    /// (`rbuf` is empty meanwhile).
    placing: Option<Placing>,
    /// A placed fragment just ended with no byte after it read: the next
    /// read takes at most [`PLACE_SPILL`] (a pipelined message's next
    /// fragment is likely placed too).
    after_placed: bool,
    since: Instant,
}

/// A fragment being received in place.
struct Placing {
    tag: u8,
    /// Its length (frame body).
    len: usize,
    /// Its header as the handler took it (`Placement::head` bytes).
    head: [u8; PLACE_HEAD_MAX],
    head_len: usize,
    /// Bytes of it received so far (header included).
    at: usize,
    /// The handler withdrew the placement: the rest is read and dropped.
    discard: bool,
}

enum ReadOutcome {
    /// The socket is empty for now.
    Drained,
    /// Budget used up; read again next time.
    More,
    /// The connection is gone (already cleaned up).
    Closed,
}

/// The tcp BTL module.
pub struct TcpModule {
    cfg: TcpConfig,
    me: u32,
    size: u32,
    node_id: u32,
    node_of: Vec<u32>,
    hostname: String,
    secret: Option<[u8; SECRET_LEN]>,
    ifaces: Vec<Iface>,
    poll: Poll,
    events: Events,
    listeners: Vec<TcpListener>,
    listen_addrs: Vec<SocketAddr>,
    port: u16,
    nonces: NonceSource,
    reject_log: RejectLog,
    /// Earliest `PeerState::Retry` deadline, if any peer is waiting.
    retry_due: Option<Instant>,
    conns: Vec<Option<Conn>>,
    free_slots: Vec<usize>,
    peers: Vec<Option<Peer>>,
    readable: Vec<usize>,
    ticks: u64,
    stats: TcpStats,
    /// Peers failed since the last `take_failed_peers` (for the pml).
    newly_failed: Vec<(u32, String)>,
    /// `btl_tcp_inject_reset` when it applies to this rank.
    inject_reset: Option<u64>,
    finalized: bool,
    /// `finalize` runs: a connection failing now is a peer that closed
    /// first, not an error.
    closing: bool,
}

impl std::fmt::Debug for TcpModule {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TcpModule")
            .field("me", &self.me)
            .field("port", &self.port)
            .field("stats", &self.stats)
            .finish()
    }
}

fn random_secret() -> Result<[u8; SECRET_LEN], BtlError> {
    let mut s = [0u8; SECRET_LEN];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut s))
        .map_err(|e| BtlError::io("reading /dev/urandom for the job secret", e))?;
    Ok(s)
}

fn would_block(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::WouldBlock
}

impl TcpModule {
    /// Opens the listening socket and publishes its address (and, on rank
    /// 0, the job secret). Errors: no selected interface
    /// ([`BtlError::Unavailable`]), bad configuration, socket or modex
    /// failures.
    pub fn open(
        info: &ProcessInfo,
        modex: &mut dyn Modex,
        cfg: TcpConfig,
    ) -> Result<TcpModule, BtlError> {
        cfg.validate().map_err(BtlError::Config)?;
        let all = ifaddr::list().map_err(|e| BtlError::io("getifaddrs", e))?;
        let mut ifaces =
            ifaddr::select(all, &cfg.if_include, &cfg.if_exclude).map_err(BtlError::Config)?;
        ifaces.truncate(MAX_ADDRS);
        if ifaces.is_empty() {
            return Err(BtlError::Unavailable(
                "no IPv4 interface is up and selected by btl_tcp_if_include/btl_tcp_if_exclude"
                    .into(),
            ));
        }
        let (std_ls, port) = listen::bind_all(&ifaces)?;
        let poll = Poll::new().map_err(|e| BtlError::io("epoll_create", e))?;
        let mut listeners = Vec::with_capacity(std_ls.len());
        let mut listen_addrs = Vec::with_capacity(std_ls.len());
        for (i, l) in std_ls.into_iter().enumerate() {
            listen_addrs.push(l.local_addr().map_err(|e| BtlError::io("local_addr", e))?);
            let mut l = TcpListener::from_std(l);
            poll.registry()
                .register(&mut l, Token(LISTENER_BASE + i), Interest::READABLE)
                .map_err(|e| BtlError::io("epoll_ctl listener", e))?;
            listeners.push(l);
        }
        let nonces =
            NonceSource::new().map_err(|e| BtlError::io("reading /dev/urandom for nonces", e))?;
        let secret = match std::env::var(crate::SECRET_ENV) {
            Ok(v) => Some(wire::secret_from_hex(v.trim().as_bytes()).ok_or_else(|| {
                BtlError::Config(format!("{} must be 64 hex digits", crate::SECRET_ENV))
            })?),
            Err(_) if info.rank == 0 => {
                let s = random_secret()?;
                modex.put(MODEX_SECRET_KEY, wire::secret_to_hex(&s).as_bytes())?;
                Some(s)
            }
            Err(_) => None,
        };
        let ep = Endpoint {
            port,
            addrs: ifaces.iter().map(|i| (i.addr, i.prefix)).collect(),
        };
        modex.put(MODEX_ADDR_KEY, ep.encode().as_bytes())?;
        tracing::debug!(target: "btl_tcp", rank = info.rank, port, addrs = %ep.encode(), "listening");
        let inject_reset = (cfg.inject_reset > 0
            && (cfg.inject_reset_rank < 0 || cfg.inject_reset_rank == i64::from(info.rank)))
        .then_some(cfg.inject_reset);
        if let Some(n) = inject_reset {
            tracing::warn!(target: "btl_tcp", rank = info.rank,
                "fault injection: btl_tcp_inject_reset={n}: every connection of this process is reset after {n} fragments sent on it");
        }
        Ok(TcpModule {
            cfg,
            me: info.rank,
            size: info.size,
            node_id: info.node_id,
            node_of: info.node_of.clone(),
            hostname: info.hostname.clone(),
            secret,
            ifaces,
            poll,
            events: Events::with_capacity(128),
            listeners,
            listen_addrs,
            port,
            nonces,
            reject_log: RejectLog::new(REJECT_LOG_EVERY),
            retry_due: None,
            conns: Vec::new(),
            free_slots: Vec::new(),
            peers: (0..info.size).map(|_| None).collect(),
            readable: Vec::new(),
            ticks: 0,
            stats: TcpStats::default(),
            newly_failed: Vec::new(),
            inject_reset,
            finalized: false,
            closing: false,
        })
    }

    /// The listening port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The addresses the module listens on (one per selected interface
    /// address, all on [`TcpModule::port`]).
    pub fn listen_addrs(&self) -> &[SocketAddr] {
        &self.listen_addrs
    }

    /// Module counters.
    pub fn stats(&self) -> TcpStats {
        self.stats
    }

    /// Traffic with `peer` (`None`: not added).
    pub fn peer_stats(&self, peer: u32) -> Option<PeerStats> {
        self.peer(peer).map(|p| p.stats)
    }

    /// Peers marked failed, with the reason.
    pub fn failed_peers(&self) -> Vec<(u32, String)> {
        self.peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| match &p.as_ref()?.state {
                PeerState::Failed(why) => Some((r as u32, why.clone())),
                _ => None,
            })
            .collect()
    }

    /// Bytes queued (not yet taken by a socket) towards all peers.
    pub fn pending_bytes(&self) -> usize {
        self.peers.iter().flatten().map(|p| p.queued).sum()
    }

    /// Whether a connection to `peer` is established.
    pub fn is_connected(&self, peer: u32) -> bool {
        matches!(
            self.peer(peer).map(|p| &p.state),
            Some(PeerState::Connected { .. })
        )
    }

    /// The address used for `peer`.
    pub fn peer_addr(&self, peer: u32) -> Option<SocketAddr> {
        self.peer(peer).map(|p| p.addr)
    }

    fn peer(&self, peer: u32) -> Option<&Peer> {
        self.peers.get(peer as usize)?.as_ref()
    }

    fn is_local(&self, peer: u32) -> bool {
        self.node_of.get(peer as usize) == Some(&self.node_id)
    }

    fn choose_addr(&self, peer: u32, ep: &Endpoint) -> Option<SocketAddr> {
        let lo_here = self.ifaces.iter().any(|i| i.loopback);
        let pick = |ip: Ipv4Addr| Some(SocketAddr::V4(SocketAddrV4::new(ip, ep.port)));
        if self.is_local(peer) && lo_here {
            if let Some((ip, _)) = ep.addrs.iter().find(|(ip, _)| ip.is_loopback()) {
                return pick(*ip);
            }
        }
        let remote: Vec<Ipv4Addr> = ep
            .addrs
            .iter()
            .map(|(ip, _)| *ip)
            .filter(|ip| !ip.is_loopback())
            .collect();
        let same_subnet = remote.iter().find(|ip| {
            self.ifaces
                .iter()
                .any(|i| !i.loopback && ifaddr::same_subnet(**ip, i.addr, i.prefix))
        });
        match same_subnet.or(remote.first()) {
            Some(ip) => pick(*ip),
            None => None,
        }
    }

    // ---- connections ------------------------------------------------

    fn insert_conn(&mut self, mut c: Conn, interest: Interest) -> io::Result<usize> {
        let slot = match self.free_slots.pop() {
            Some(s) => s,
            None => {
                self.conns.push(None);
                self.conns.len() - 1
            }
        };
        self.poll
            .registry()
            .register(&mut c.stream, Token(slot + 1), interest)?;
        self.conns[slot] = Some(c);
        Ok(slot)
    }

    fn close_conn(&mut self, slot: usize) {
        if let Some(mut c) = self.conns.get_mut(slot).and_then(Option::take) {
            let _ = self.poll.registry().deregister(&mut c.stream);
            let _ = c.stream.shutdown(std::net::Shutdown::Both);
            self.free_slots.push(slot);
        }
        self.readable.retain(|&s| s != slot);
    }

    /// Takes a connection out of the module (deregistered) with
    /// `SO_LINGER` {on, 0}, so that dropping it aborts the connection with
    /// a reset (no `shutdown`, which would send FIN first).
    fn detach_for_abort(&mut self, slot: usize) -> Option<Conn> {
        let mut c = self.conns.get_mut(slot).and_then(Option::take)?;
        let _ = self.poll.registry().deregister(&mut c.stream);
        if let Err(e) = sys::set_linger_zero(&c.stream) {
            tracing::warn!(target: "btl_tcp", "SO_LINGER 0 before an injected reset: {e}");
        }
        self.free_slots.push(slot);
        self.readable.retain(|&s| s != slot);
        Some(c)
    }

    /// Fault injection (`btl_tcp_inject_reset=N`): once `N` fragments were
    /// sent to `peer` and its connection is established, the connection is
    /// aborted with a reset and the peer marked failed (this process stays
    /// alive, so does the peer). Returns whether it did.
    fn maybe_inject_reset(&mut self, peer: u32) -> bool {
        let Some(n) = self.inject_reset else {
            return false;
        };
        let Some(p) = self.peers.get(peer as usize).and_then(Option::as_ref) else {
            return false;
        };
        let PeerState::Connected { conn } = p.state else {
            return false;
        };
        let sent = p.stats.frags_sent;
        if sent < n {
            return false;
        }
        let doomed = self.detach_for_abort(conn);
        self.stats.injected_resets += 1;
        // Logged before the reset goes out, so the line is there even if
        // the peer's reaction ends the job at once.
        self.fail_peer(
            peer,
            format!(
                "connection reset by this process (fault injection btl_tcp_inject_reset={n}, \
                 after {sent} fragments sent to it)"
            ),
        );
        drop(doomed); // close(2) with linger 0: RST
        true
    }

    /// Marks `peer` failed (once), logs why, drops its queue and closes its
    /// connections.
    fn fail_peer(&mut self, peer: u32, why: String) {
        let Some(p) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) else {
            return;
        };
        if matches!(p.state, PeerState::Failed(_)) {
            return;
        }
        let conn = match p.state {
            PeerState::Connecting { conn, .. } | PeerState::Connected { conn } => Some(conn),
            _ => None,
        };
        let dropped = p.queue.len() as u64;
        if self.closing {
            // Finalizing, after the pml's fence: only the farewell frame is
            // left, and a peer that closed first (its socket held bytes it
            // no longer read: reset) is no failure.
            tracing::debug!(target: "btl_tcp", peer, addr = %p.addr, dropped,
                "finalize: connection to rank {peer} ({}) already closed: {why}", p.addr);
        } else {
            tracing::error!(target: "btl_tcp", peer, addr = %p.addr, dropped,
                "connection to rank {peer} ({}) failed: {why}; transfers with it fail", p.addr);
        }
        self.newly_failed.push((peer, why.clone()));
        p.state = PeerState::Failed(why);
        p.queue.clear();
        p.queued = 0;
        p.head_off = 0;
        self.stats.peer_failures += 1;
        self.stats.dropped += dropped;
        if let Some(c) = conn {
            self.close_conn(c);
        }
    }

    /// Reads and delivers frames from an established connection.
    fn read_conn(
        &mut self,
        slot: usize,
        handler: &mut dyn BtlRecvHandler,
        budget: &mut usize,
    ) -> ReadOutcome {
        let Some(mut c) = self.conns.get_mut(slot).and_then(Option::take) else {
            return ReadOutcome::Closed;
        };
        let Some(peer) = c.peer else {
            self.conns[slot] = Some(c);
            return ReadOutcome::Closed;
        };
        let place_min = self.cfg.place_min;
        let result = loop {
            if c.placing.is_some() {
                if *budget == 0 {
                    break Ok(ReadOutcome::More);
                }
                match self.read_placed(&mut c, peer, handler, budget) {
                    Ok(true) => continue,
                    Ok(false) => break Ok(ReadOutcome::Drained),
                    Err(why) => break Err(why),
                }
            }
            // Deliver the complete frames in the buffer.
            let mut error = None;
            while *budget > 0 && c.rend - c.rstart >= FRAME_HDR_LEN {
                let mut hb = [0u8; FRAME_HDR_LEN];
                hb.copy_from_slice(&c.rbuf[c.rstart..c.rstart + FRAME_HDR_LEN]);
                let h = match FrameHdr::decode(&hb) {
                    Ok(h) => h,
                    Err(e) => {
                        error = Some(format!("protocol error: {e}"));
                        break;
                    }
                };
                let total = FRAME_HDR_LEN + h.len;
                if c.rend - c.rstart < total {
                    if place_min > 0
                        && h.kind == FrameKind::Data
                        && total - (c.rend - c.rstart) >= place_min
                        && Self::start_placing(&mut c, peer, h, handler)
                    {
                        self.stats.placed += 1;
                        break;
                    }
                    if c.rbuf.len() - c.rstart < total {
                        c.rbuf.copy_within(c.rstart..c.rend, 0);
                        c.rend -= c.rstart;
                        c.rstart = 0;
                        if c.rbuf.len() < total {
                            c.rbuf.resize(total, 0);
                        }
                    }
                    break;
                }
                let body = &c.rbuf[c.rstart + FRAME_HDR_LEN..c.rstart + total];
                match h.kind {
                    FrameKind::Data => {
                        handler.on_fragment(peer, h.tag, body);
                        *budget -= 1;
                        if let Some(p) = self.peers[peer as usize].as_mut() {
                            p.stats.frags_recv += 1;
                            p.stats.bytes_recv += h.len as u64;
                        }
                    }
                    FrameKind::Bye => {
                        tracing::debug!(target: "btl_tcp", peer, "peer finalized (BYE)");
                        if let Some(p) = self.peers[peer as usize].as_mut() {
                            p.state = PeerState::Closed;
                            p.queue.clear();
                            p.queued = 0;
                        }
                    }
                }
                c.rstart += total;
            }
            if let Some(why) = error {
                break Err(why);
            }
            if c.placing.is_some() {
                continue;
            }
            if c.rstart == c.rend {
                c.rstart = 0;
                c.rend = 0;
            }
            if *budget == 0 {
                break Ok(ReadOutcome::More);
            }
            if c.rend == c.rbuf.len() {
                c.rbuf.copy_within(c.rstart..c.rend, 0);
                c.rend -= c.rstart;
                c.rstart = 0;
                if c.rend == c.rbuf.len() {
                    let n = c.rbuf.len().max(FRAME_HDR_LEN) * 2;
                    c.rbuf.resize(n, 0);
                }
            }
            // Receiving in place: a read takes at most `PLACE_READ_CAP` into
            // the buffer, so that the bulk of a large fragment goes to its
            // placement rather than through here.
            let cap = if place_min > 0 {
                let most = if c.after_placed {
                    PLACE_SPILL
                } else {
                    PLACE_READ_CAP
                };
                c.after_placed = false;
                (c.rend + most).min(c.rbuf.len())
            } else {
                c.rbuf.len()
            };
            match c.stream.read(&mut c.rbuf[c.rend..cap]) {
                Ok(0) => {
                    let closed = matches!(
                        self.peers[peer as usize].as_ref().map(|p| &p.state),
                        Some(PeerState::Closed)
                    );
                    if closed {
                        break Ok(ReadOutcome::Closed);
                    }
                    let partial = c.rend - c.rstart;
                    break Err(if partial > 0 {
                        format!("connection closed by the peer in the middle of a fragment ({partial} bytes of it received)")
                    } else {
                        "connection closed by the peer (EOF without BYE)".to_string()
                    });
                }
                Ok(n) => c.rend += n,
                Err(e) if would_block(&e) => break Ok(ReadOutcome::Drained),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => break Err(format!("read: {e}")),
            }
        };
        self.conns[slot] = Some(c);
        match result {
            Ok(ReadOutcome::Closed) => {
                self.close_conn(slot);
                ReadOutcome::Closed
            }
            Ok(o) => o,
            Err(why) => {
                self.fail_peer(peer, why);
                self.close_conn(slot);
                ReadOutcome::Closed
            }
        }
    }

    /// Receive in place: the frame `h` at `c.rstart` is incomplete and
    /// large; offers its start to the handler and, when it gives a
    /// placement, copies the payload bytes already here into it and
    /// switches the connection to reading the rest there (`c.rbuf` left
    /// empty: the frame was the last bytes in it). Returns whether it did.
    fn start_placing(
        c: &mut Conn,
        peer: u32,
        h: FrameHdr,
        handler: &mut dyn BtlRecvHandler,
    ) -> bool {
        let body = &c.rbuf[c.rstart + FRAME_HDR_LEN..c.rend];
        if body.len() < h.len.min(PLACE_HEAD_MAX) {
            return false; // the header is not here yet: ask after the next read
        }
        let Some(p) = handler.place(peer, h.tag, body, h.len) else {
            return false;
        };
        let head = p.head();
        if head > PLACE_HEAD_MAX || head > body.len() || head + p.len() != h.len {
            tracing::debug!(target: "btl_tcp", peer, head, placed = p.len(), len = h.len,
                "placement does not match the fragment; delivered whole");
            return false;
        }
        sys::copy_into_placement(&p, 0, &body[head..]);
        let mut pl = Placing {
            tag: h.tag,
            len: h.len,
            head: [0; PLACE_HEAD_MAX],
            head_len: head,
            at: body.len(),
            discard: false,
        };
        pl.head[..head].copy_from_slice(&body[..head]);
        c.placing = Some(pl);
        c.rstart = 0;
        c.rend = 0;
        true
    }

    /// One read of the fragment being received in place (`c.placing`),
    /// into the placement (asked again first) followed by `c.rbuf` for the
    /// next frames, or into `c.rbuf` only to drop it when the handler
    /// withdrew the placement. Delivers the fragment (`on_placed`) when it
    /// is whole. `Ok(true)`: read something, go on; `Ok(false)`: the
    /// socket is empty; `Err`: the connection failed (why).
    fn read_placed(
        &mut self,
        c: &mut Conn,
        peer: u32,
        handler: &mut dyn BtlRecvHandler,
        budget: &mut usize,
    ) -> Result<bool, String> {
        let Some(pl) = c.placing.as_mut() else {
            return Ok(true);
        };
        let rest = pl.len - pl.at;
        let target = if pl.discard {
            None
        } else {
            match handler.place(peer, pl.tag, &pl.head[..pl.head_len], pl.len) {
                Some(p) if p.head() == pl.head_len && p.len() == pl.len - pl.head_len => Some(p),
                _ => {
                    tracing::debug!(target: "btl_tcp", peer, len = pl.len, at = pl.at,
                        "placement withdrawn; the rest of the fragment is dropped");
                    pl.discard = true;
                    self.stats.place_revoked += 1;
                    None
                }
            }
        };
        if c.rbuf.is_empty() {
            c.rbuf.resize(READ_CHUNK, 0);
        }
        let r = match target {
            Some(ref p) => {
                let spill = PLACE_SPILL.min(c.rbuf.len());
                sys::read_into_placement(&c.stream, p, pl.at - pl.head_len, &mut c.rbuf[..spill])
            }
            None => {
                let k = rest.min(c.rbuf.len());
                c.stream.read(&mut c.rbuf[..k])
            }
        };
        match r {
            Ok(0) => Err(format!(
                "connection closed by the peer in the middle of a fragment ({} bytes of it \
                 received)",
                FRAME_HDR_LEN + pl.at
            )),
            Ok(n) => {
                pl.at += n.min(rest);
                if target.is_some() && n > rest {
                    c.rstart = 0;
                    c.rend = n - rest;
                }
                if pl.at == pl.len {
                    c.after_placed = c.rend == 0;
                    let pl = c.placing.take().expect("placing");
                    if !pl.discard {
                        handler.on_placed(peer, pl.tag, &pl.head[..pl.head_len], pl.len);
                        *budget -= 1;
                        if let Some(p) = self.peers[peer as usize].as_mut() {
                            p.stats.frags_recv += 1;
                            p.stats.bytes_recv += pl.len as u64;
                        }
                    }
                }
                Ok(true)
            }
            Err(e) if would_block(&e) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(format!("read: {e}")),
        }
    }

    /// Writes as much of `peer`'s queue as the socket takes.
    fn flush(&mut self, peer: u32) {
        let Some(p) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) else {
            return;
        };
        let PeerState::Connected { conn } = p.state else {
            return;
        };
        let Some(c) = self.conns.get(conn).and_then(Option::as_ref) else {
            return;
        };
        let mut err = None;
        while let Some(front) = p.queue.front() {
            match sys::send_vectored(&c.stream, &[&front[p.head_off..]]) {
                Ok(n) => {
                    p.head_off += n;
                    if p.head_off == front.len() {
                        p.queued -= front.len();
                        p.head_off = 0;
                        p.queue.pop_front();
                    }
                }
                Err(e) if would_block(&e) => break,
                Err(e) => {
                    err = Some(e);
                    break;
                }
            }
        }
        if let Some(e) = err {
            self.fail_peer(peer, format!("write: {e}"));
        }
    }

    fn check_timeouts(&mut self) {
        let now = Instant::now();
        let auth_limit = self.cfg.handshake_timeout;
        let stale: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let c = c.as_ref()?;
                (c.phase == Phase::AwaitHello && now.duration_since(c.since) > auth_limit)
                    .then_some(i)
            })
            .collect();
        let why = format!(
            "did not authenticate within btl_tcp_handshake_timeout ({} s)",
            auth_limit.as_secs()
        );
        for slot in stale {
            self.refuse(slot, &why);
        }
        let limit = self.cfg.connect_timeout;
        let late: Vec<u32> = self
            .peers
            .iter()
            .enumerate()
            .filter_map(|(r, p)| match p.as_ref()?.state {
                PeerState::Connecting { since, .. }
                | PeerState::AwaitingIncoming { since }
                | PeerState::Retry { since, .. }
                    if now.duration_since(since) > limit =>
                {
                    Some(r as u32)
                }
                _ => None,
            })
            .collect();
        for r in late {
            self.fail_peer(
                r,
                format!(
                    "no connection within btl_tcp_connect_timeout ({} s)",
                    limit.as_secs()
                ),
            );
        }
    }

    /// At finalize: the refusals not reported yet, and per failed peer the
    /// sends refused after its failure (one line each, instead of one per
    /// fragment).
    fn report_leftovers(&mut self) {
        if let Some(line) = self.reject_log.flush() {
            tracing::warn!(target: "btl_tcp", "{line}");
        }
        for (r, p) in self.peers.iter().enumerate() {
            let Some(p) = p else { continue };
            if let (PeerState::Failed(why), n @ 1..) = (&p.state, p.refused_sends) {
                tracing::warn!(target: "btl_tcp", peer = r,
                    "{n} later send(s) to rank {r} were refused: its connection had failed ({why})");
            }
        }
    }

    /// Prints the per-peer counters, one `write` per line so that lines of
    /// several ranks sharing a terminal or pipe do not interleave.
    fn report_stats(&self) {
        use std::io::Write;
        let mut lines = Vec::new();
        for (r, p) in self.peers.iter().enumerate() {
            let Some(p) = p else { continue };
            let s = p.stats;
            if s.frags_sent + s.frags_recv == 0 {
                continue;
            }
            lines.push(format!(
                "[rank {} host {}] btl_tcp peer {r} ({}): sent {} frags {} bytes, received {} frags {} bytes\n",
                self.me, self.hostname, p.addr, s.frags_sent, s.bytes_sent, s.frags_recv, s.bytes_recv
            ));
        }
        lines.push(format!(
            "[rank {} host {}] btl_tcp stats: {}\n",
            self.me, self.hostname, self.stats
        ));
        let mut err = std::io::stderr().lock();
        for l in lines {
            let _ = err.write_all(l.as_bytes());
        }
    }
}

impl BtlModule for TcpModule {
    fn name(&self) -> &str {
        "tcp"
    }

    fn add_procs(&mut self, peers: &[u32], modex: &mut dyn Modex) -> Result<Vec<u32>, BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        if self.secret.is_none() {
            match modex.get(0, MODEX_SECRET_KEY) {
                Ok(v) => {
                    self.secret = Some(wire::secret_from_hex(&v).ok_or_else(|| {
                        BtlError::Modex(ModexError::Malformed {
                            rank: 0,
                            key: MODEX_SECRET_KEY.into(),
                            reason: "not 64 hex digits".into(),
                        })
                    })?)
                }
                Err(ModexError::NotFound { .. }) => {
                    tracing::warn!(target: "btl_tcp",
                        "rank 0 published no tcp job secret (tcp disabled there?): tcp reaches no peer");
                    return Ok(Vec::new());
                }
                Err(e) => return Err(e.into()),
            }
            self.recheck_held_hellos();
        }
        let mut out = Vec::with_capacity(peers.len());
        for &r in peers {
            if r == self.me || r >= self.size {
                continue;
            }
            if self.peers[r as usize].is_some() {
                out.push(r);
                continue;
            }
            let ep = match modex.get(r, MODEX_ADDR_KEY) {
                Ok(v) => match Endpoint::decode(&v) {
                    Ok(ep) => ep,
                    Err(e) => {
                        tracing::warn!(target: "btl_tcp", peer = r, "malformed tcp address: {e}");
                        continue;
                    }
                },
                Err(ModexError::NotFound { .. }) => {
                    tracing::debug!(target: "btl_tcp", peer = r, "no tcp address published");
                    continue;
                }
                Err(e) => return Err(e.into()),
            };
            let Some(addr) = self.choose_addr(r, &ep) else {
                tracing::debug!(target: "btl_tcp", peer = r, ep = %ep.encode(), "no usable address");
                continue;
            };
            tracing::debug!(target: "btl_tcp", peer = r, %addr, local = self.is_local(r), "peer added");
            self.peers[r as usize] = Some(Peer {
                addr,
                state: PeerState::Idle,
                queue: VecDeque::new(),
                head_off: 0,
                queued: 0,
                stats: PeerStats::default(),
                attempts: 0,
                refused_sends: 0,
            });
            out.push(r);
        }
        Ok(out)
    }

    fn exclusivity(&self) -> u32 {
        EXCLUSIVITY_LOW
    }
    fn take_failed_peers(&mut self) -> Vec<(u32, String)> {
        std::mem::take(&mut self.newly_failed)
    }
    fn latency(&self) -> u32 {
        100
    }
    fn bandwidth(&self) -> u32 {
        10_000
    }
    fn eager_limit(&self) -> usize {
        self.cfg.eager_limit
    }
    fn max_send_size(&self) -> usize {
        self.cfg.max_send_size
    }
    fn flags(&self) -> BtlFlags {
        BtlFlags::SEND
    }

    fn send(&mut self, peer: u32, tag: u8, header: &[u8], payload: &[u8]) -> Result<(), BtlError> {
        if self.finalized {
            return Err(BtlError::Finalized);
        }
        let len = header.len() + payload.len();
        if len > self.cfg.max_send_size {
            return Err(BtlError::TooLarge {
                len,
                max: self.cfg.max_send_size,
            });
        }
        let limit = self.cfg.sendq_bytes;
        let p = self
            .peers
            .get_mut(peer as usize)
            .and_then(Option::as_mut)
            .ok_or(BtlError::Unreachable(peer))?;
        match &p.state {
            PeerState::Failed(why) => {
                p.refused_sends += 1;
                return Err(BtlError::Protocol {
                    peer,
                    reason: format!("connection failed: {why}"),
                });
            }
            PeerState::Closed => {
                return Err(BtlError::Protocol {
                    peer,
                    reason: "the peer finalized".into(),
                })
            }
            _ => {}
        }
        let total = FRAME_HDR_LEN + len;
        if !p.queue.is_empty() && p.queued + total > limit {
            self.stats.would_block += 1;
            return Err(BtlError::WouldBlock);
        }
        let fh = FrameHdr {
            len,
            kind: FrameKind::Data,
            tag,
        }
        .encode();
        let mut written = 0;
        if let (PeerState::Connected { conn }, true) = (&p.state, p.queue.is_empty()) {
            if let Some(c) = self.conns.get(*conn).and_then(Option::as_ref) {
                match sys::send_vectored(&c.stream, &[&fh, header, payload]) {
                    Ok(n) => written = n,
                    Err(e) if would_block(&e) => {}
                    Err(e) => {
                        let why = format!("write: {e}");
                        self.fail_peer(peer, why.clone());
                        return Err(BtlError::Protocol { peer, reason: why });
                    }
                }
            }
        }
        p.stats.frags_sent += 1;
        p.stats.bytes_sent += len as u64;
        if written < total {
            let mut rest = Vec::with_capacity(total - written);
            let mut skip = written;
            for part in [&fh[..], header, payload] {
                if skip >= part.len() {
                    skip -= part.len();
                } else {
                    rest.extend_from_slice(&part[skip..]);
                    skip = 0;
                }
            }
            p.queued += rest.len();
            p.queue.push_back(rest);
        }
        if matches!(p.state, PeerState::Idle) {
            self.start_connect(peer, Instant::now())?;
        }
        // The fragment was accepted (as a write before a real reset would
        // be); what the reset discards is lost with the connection.
        self.maybe_inject_reset(peer);
        Ok(())
    }

    fn progress(&mut self, handler: &mut dyn BtlRecvHandler) -> usize {
        if self.finalized {
            return 0;
        }
        if let Err(e) = self.poll.poll(&mut self.events, Some(Duration::ZERO)) {
            if e.kind() != io::ErrorKind::Interrupted {
                tracing::error!(target: "btl_tcp", "epoll_wait: {e}");
            }
        }
        let ready: Vec<(usize, bool)> = self
            .events
            .iter()
            .map(|ev| (ev.token().0, ev.is_writable()))
            .collect();
        for (tok, _writable) in ready {
            if tok >= LISTENER_BASE {
                self.accept_all(tok - LISTENER_BASE);
                continue;
            }
            let slot = tok - 1;
            let Some(phase) = self
                .conns
                .get(slot)
                .and_then(Option::as_ref)
                .map(|c| c.phase)
            else {
                continue;
            };
            match phase {
                Phase::Connecting => self.on_connect_event(slot),
                Phase::AwaitChallenge => self.on_challenge_readable(slot),
                Phase::SentHello => self.on_answer_readable(slot),
                Phase::AwaitHello => self.on_hello_readable(slot),
                Phase::Established => {
                    if !self.readable.contains(&slot) {
                        self.readable.push(slot);
                    }
                }
            }
        }
        let mut budget = FRAMES_PER_PROGRESS;
        let mut i = 0;
        let mut delivered = 0;
        while i < self.readable.len() && budget > 0 {
            let slot = self.readable[i];
            let before = budget;
            let outcome = self.read_conn(slot, handler, &mut budget);
            delivered += before - budget;
            match outcome {
                ReadOutcome::More => i += 1,
                ReadOutcome::Drained => {
                    if let Some(pos) = self.readable.iter().position(|&s| s == slot) {
                        self.readable.remove(pos);
                    }
                }
                ReadOutcome::Closed => {} // close_conn removed it
            }
        }
        for r in 0..self.peers.len() {
            if self.peers[r].as_ref().is_some_and(|p| !p.queue.is_empty()) {
                self.flush(r as u32);
            }
        }
        if self.inject_reset.is_some() {
            // Fragments counted while the connection was being set up.
            for r in 0..self.peers.len() {
                self.maybe_inject_reset(r as u32);
            }
        }
        self.run_retries();
        self.ticks += 1;
        if self.ticks.is_multiple_of(256) {
            self.check_timeouts();
        }
        delivered
    }

    fn sends_pending(&self) -> bool {
        // Failed peers' queues are emptied: what is queued still goes.
        self.pending_bytes() > 0
    }

    fn finalize(&mut self) -> Result<(), BtlError> {
        if self.finalized {
            return Ok(());
        }
        self.closing = true;
        let bye = FrameHdr {
            len: 0,
            kind: FrameKind::Bye,
            tag: 0,
        }
        .encode();
        for r in 0..self.peers.len() {
            if let Some(p) = self.peers[r].as_mut() {
                if matches!(p.state, PeerState::Connected { .. }) {
                    p.queue.push_back(bye.to_vec());
                    p.queued += bye.len();
                } else if !p.queue.is_empty() {
                    tracing::warn!(target: "btl_tcp", peer = r,
                        "finalize drops {} fragments never sent (no connection)", p.queue.len());
                }
            }
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        loop {
            let mut pending = false;
            for r in 0..self.peers.len() {
                let connected_with_data = self.peers[r].as_ref().is_some_and(|p| {
                    matches!(p.state, PeerState::Connected { .. }) && !p.queue.is_empty()
                });
                if connected_with_data {
                    self.flush(r as u32);
                    pending |= self.peers[r].as_ref().is_some_and(|p| !p.queue.is_empty());
                }
            }
            if !pending || Instant::now() > deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1));
        }
        if self.cfg.stats {
            self.report_stats();
        }
        for slot in 0..self.conns.len() {
            self.close_conn(slot);
        }
        for mut l in std::mem::take(&mut self.listeners) {
            let _ = self.poll.registry().deregister(&mut l);
        }
        self.report_leftovers();
        self.finalized = true;
        tracing::debug!(target: "btl_tcp", rank = self.me, stats = %self.stats, "finalized");
        Ok(())
    }
}
