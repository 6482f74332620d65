//! Connection set-up of the tcp module: accepting with bounded pending
//! slots, the challenge/response handshake on both sides, simultaneous
//! connects, second claims of a rank pair, and reconnecting after an
//! attempt closed before its answer (see the parent module's docs).

use std::io::{self, Read};
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use mio::net::TcpStream;
use mio::Interest;
use tmpi_btl::BtlError;

use super::{
    admission, would_block, Conn, Handshake, HsKind, PeerState, Pending, Phase, TcpModule,
    Transcript, HS_LEN, NONCE_LEN, READ_CHUNK,
};
use crate::sys;

/// First back-off before connecting again; doubles per attempt.
const RETRY_FIRST: Duration = Duration::from_millis(10);
/// Longest back-off before connecting again.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The accepting side's answer to an authenticated HELLO.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Accept,
    Reject,
    Duplicate,
}

impl Conn {
    fn new(stream: TcpStream, remote: SocketAddr, inbound: bool, phase: Phase) -> Conn {
        Conn {
            stream,
            phase,
            peer: None,
            remote,
            inbound,
            hs: [0; HS_LEN],
            hs_len: 0,
            nonce_l: [0; NONCE_LEN],
            nonce_c: [0; NONCE_LEN],
            rbuf: Vec::new(),
            rstart: 0,
            rend: 0,
            placing: None,
            after_placed: false,
            since: Instant::now(),
        }
    }

    /// Reads handshake bytes; `Ok(true)` when a whole message is in `hs`.
    fn read_handshake(&mut self) -> io::Result<bool> {
        while self.hs_len < HS_LEN {
            match self.stream.read(&mut self.hs[self.hs_len..]) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => self.hs_len += n,
                Err(e) if would_block(&e) => return Ok(false),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// Writes one handshake message; a fresh socket takes it whole, so a
    /// short write means the connection is unusable.
    fn write_handshake(&self, h: &Handshake) -> bool {
        matches!(sys::send_vectored(&self.stream, &[&h.encode()]), Ok(n) if n == HS_LEN)
    }

    fn establish(&mut self, peer: u32) {
        self.phase = Phase::Established;
        self.peer = Some(peer);
        self.rbuf = vec![0; READ_CHUNK];
    }
}

fn secs(d: Duration) -> u64 {
    d.as_secs().max(1)
}

impl TcpModule {
    fn conn_mut(&mut self, slot: usize) -> Option<&mut Conn> {
        self.conns.get_mut(slot).and_then(Option::as_mut)
    }

    fn set_state(&mut self, peer: u32, state: PeerState) {
        if let Some(p) = self.peers.get_mut(peer as usize).and_then(Option::as_mut) {
            p.state = state;
        }
    }

    /// Whether `slot` is `peer`'s current outgoing attempt.
    fn is_current_attempt(&self, peer: u32, slot: usize) -> bool {
        matches!(self.peer(peer).map(|p| &p.state),
            Some(PeerState::Connecting { conn, .. }) if *conn == slot)
    }

    fn answer_transcript(&self, c: &Conn, kind: HsKind, from: u32, to: u32) -> [u8; 32] {
        let secret = self.secret.unwrap_or([0; 32]);
        Transcript {
            kind,
            from,
            to,
            size: self.size,
            listener_nonce: &c.nonce_l,
            connector_nonce: &c.nonce_c,
        }
        .mac(&secret)
    }

    // ---- accepting side ---------------------------------------------

    /// Accepts every connection waiting on listener `li`.
    pub(super) fn accept_all(&mut self, li: usize) {
        loop {
            let Some(l) = self.listeners.get(li) else {
                return;
            };
            match l.accept() {
                Ok((stream, remote)) => self.admit(stream, remote),
                Err(e) if would_block(&e) => return,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // ECONNABORTED, EMFILE...: try again next time.
                    let at = self.listen_addrs.get(li).copied();
                    let why = format!("accept: {e}");
                    self.log_refusal(&at.map(|a| a.to_string()).unwrap_or_default(), &why);
                    return;
                }
            }
        }
    }

    fn pending(&self) -> Vec<Pending> {
        self.conns
            .iter()
            .enumerate()
            .filter_map(|(slot, c)| {
                let c = c.as_ref()?;
                (c.phase == Phase::AwaitHello).then_some(Pending {
                    slot,
                    ip: c.remote.ip(),
                    since: c.since,
                })
            })
            .collect()
    }

    /// Gives an accepted connection a pending slot (evicting the oldest
    /// pending one beyond the limits) and sends it the CHALLENGE.
    fn admit(&mut self, stream: TcpStream, remote: SocketAddr) {
        let limits = admission::Limits {
            per_addr: self.cfg.pending_per_addr,
            total: self.cfg.pending_max,
        };
        if let Some(old) = admission::eviction(&self.pending(), remote.ip(), limits) {
            self.refuse(
                old.slot,
                "closed to make room: too many connections waiting to authenticate",
            );
        }
        let _ = stream.set_nodelay(true);
        self.size_buffers(&stream);
        let mut c = Conn::new(stream, remote, true, Phase::AwaitHello);
        c.nonce_l = self.nonces.next_nonce();
        let challenge = Handshake {
            kind: HsKind::Challenge,
            rank: self.me,
            size: self.size,
            nonce: c.nonce_l,
            mac: [0; 32],
        };
        if !c.write_handshake(&challenge) {
            self.stats.rejected += 1;
            self.log_refusal(
                &remote.to_string(),
                "gone before its challenge could be sent",
            );
            return;
        }
        match self.insert_conn(c, Interest::READABLE) {
            // The HELLO may already be there (edge-triggered).
            Ok(slot) => self.on_hello_readable(slot),
            Err(e) => self.log_refusal(&remote.to_string(), &format!("epoll_ctl: {e}")),
        }
    }

    /// Logs a refused connection at a bounded rate.
    pub(super) fn log_refusal(&mut self, from: &str, why: &str) {
        if let Some(line) = self.reject_log.note(Instant::now(), from, why) {
            tracing::warn!(target: "btl_tcp", "{line}");
        }
    }

    /// Closes an unauthenticated inbound connection and counts it.
    pub(super) fn refuse(&mut self, slot: usize, why: &str) {
        let Some(remote) = self
            .conns
            .get(slot)
            .and_then(Option::as_ref)
            .map(|c| c.remote)
        else {
            return;
        };
        self.stats.rejected += 1;
        self.log_refusal(&remote.to_string(), why);
        self.close_conn(slot);
    }

    /// Reads and checks the HELLO of a pending connection.
    pub(super) fn on_hello_readable(&mut self, slot: usize) {
        let (me, size, secret) = (self.me, self.size, self.secret);
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        match c.read_handshake() {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof && c.hs_len == 0 => {
                // A peer dropping its side of a simultaneous connect.
                tracing::debug!(target: "btl_tcp", remote = %c.remote, "inbound connection closed before any byte");
                self.close_conn(slot);
                return;
            }
            Err(e) => return self.refuse(slot, &format!("closed before its HELLO ({e})")),
        }
        // Without the secret yet (before add_procs) the HELLO waits in
        // `hs`; add_procs looks at it again.
        let Some(secret) = secret else { return };
        let h = match Handshake::decode(&c.hs) {
            Ok(h) => h,
            Err(e) => return self.refuse(slot, &e.to_string()),
        };
        if h.kind != HsKind::Hello {
            return self.refuse(slot, &format!("sent {} instead of HELLO", h.kind));
        }
        let proof = Transcript {
            kind: HsKind::Hello,
            from: h.rank,
            to: me,
            size,
            listener_nonce: &c.nonce_l,
            connector_nonce: &h.nonce,
        };
        if !proof.verify(&secret, &h.mac) {
            return self.refuse(
                slot,
                "no proof of the job secret (another job, a wrong secret or a replayed handshake)",
            );
        }
        c.nonce_c = h.nonce;
        if h.rank >= size || h.rank == me {
            let why = format!(
                "authenticated, but claims an impossible rank (this is rank {me} of {size})"
            );
            return self.refuse(slot, &why);
        }
        self.on_authenticated_hello(slot, h.rank);
    }

    /// Pending connections whose HELLO arrived before the job secret was
    /// known (called once the secret is there).
    pub(super) fn recheck_held_hellos(&mut self) {
        let held: Vec<usize> = self
            .conns
            .iter()
            .enumerate()
            .filter_map(|(i, c)| {
                let c = c.as_ref()?;
                (c.phase == Phase::AwaitHello && c.hs_len == HS_LEN).then_some(i)
            })
            .collect();
        for slot in held {
            self.on_hello_readable(slot);
        }
    }

    fn verdict(&mut self, from: u32) -> Option<Verdict> {
        let me = self.me;
        let state = &self.peer(from)?.state;
        Some(match *state {
            PeerState::Idle | PeerState::AwaitingIncoming { .. } | PeerState::Retry { .. } => {
                Verdict::Accept
            }
            PeerState::Connecting { conn, .. } => {
                self.stats.simultaneous += 1;
                if from < me {
                    // The lower rank's connection wins: drop ours.
                    tracing::debug!(target: "btl_tcp", peer = from, "simultaneous connect: taking the peer's");
                    self.close_conn(conn);
                    Verdict::Accept
                } else {
                    tracing::debug!(target: "btl_tcp", peer = from, "simultaneous connect: keeping ours");
                    Verdict::Reject
                }
            }
            PeerState::Connected { conn } => {
                let ours = self
                    .conns
                    .get(conn)
                    .and_then(Option::as_ref)
                    .is_some_and(|c| !c.inbound);
                // The one legitimate late HELLO: a higher rank's losing
                // attempt of a simultaneous connect, after ours won.
                if ours && from > me {
                    Verdict::Reject
                } else {
                    Verdict::Duplicate
                }
            }
            PeerState::Closed | PeerState::Failed(_) => Verdict::Reject,
        })
    }

    /// Answers an authenticated HELLO from `from`.
    fn on_authenticated_hello(&mut self, slot: usize, from: u32) {
        let Some(verdict) = self.verdict(from) else {
            return self.refuse(slot, &format!("rank {from} is not a peer of this module"));
        };
        let kind = match verdict {
            Verdict::Accept => HsKind::Accept,
            Verdict::Reject => HsKind::Reject,
            Verdict::Duplicate => HsKind::Duplicate,
        };
        let Some(c) = self.conns.get(slot).and_then(Option::as_ref) else {
            return;
        };
        let answer = Handshake {
            kind,
            rank: self.me,
            size: self.size,
            nonce: [0; NONCE_LEN],
            mac: self.answer_transcript(c, kind, self.me, from),
        };
        let wrote = c.write_handshake(&answer);
        let remote = c.remote;
        match verdict {
            Verdict::Reject => self.close_conn(slot),
            Verdict::Duplicate => {
                self.close_conn(slot);
                self.fail_peer(
                    from,
                    format!(
                        "a second connection (from {remote}) proved the job secret and claims to \
                         be rank {from}, which already has an established connection: another \
                         process with the job secret impersonates rank {from}"
                    ),
                );
            }
            Verdict::Accept if !wrote => {
                // Our own attempt may have been dropped for this one:
                // connect again rather than leave the queue waiting.
                self.close_conn(slot);
                if let Some(PeerState::Connecting { since, .. }) = self.peer(from).map(|p| &p.state)
                {
                    let (since, at) = (*since, Instant::now());
                    self.set_state(from, PeerState::Retry { at, since });
                    self.retry_due = Some(at);
                }
            }
            Verdict::Accept => {
                if let Some(c) = self.conn_mut(slot) {
                    c.establish(from);
                }
                self.stats.accepts += 1;
                self.set_state(from, PeerState::Connected { conn: slot });
                tracing::debug!(target: "btl_tcp", peer = from, %remote, "accepted");
                self.readable.push(slot);
            }
        }
    }

    // ---- connecting side --------------------------------------------

    /// Starts a connection attempt to `peer`; `since` is when the first
    /// attempt started (`btl_tcp_connect_timeout` counts from there).
    /// `btl_tcp_sndbuf`/`btl_tcp_rcvbuf` on a new connection (0: the
    /// kernel's own sizing, which grows them as the connection needs).
    fn size_buffers(&self, stream: &TcpStream) {
        if let Err(e) = sys::set_buffer_sizes(stream, self.cfg.sndbuf, self.cfg.rcvbuf) {
            tracing::warn!(target: "btl_tcp", sndbuf = self.cfg.sndbuf, rcvbuf = self.cfg.rcvbuf,
                "setting the socket buffer sizes: {e}");
        }
    }

    pub(super) fn start_connect(&mut self, peer: u32, since: Instant) -> Result<(), BtlError> {
        let addr = self.peer(peer).ok_or(BtlError::Unreachable(peer))?.addr;
        let stream = match TcpStream::connect(addr) {
            Ok(s) => s,
            Err(e) => {
                let why = format!("connect to {addr} failed: {e}");
                self.fail_peer(peer, why.clone());
                return Err(BtlError::Protocol { peer, reason: why });
            }
        };
        let _ = stream.set_nodelay(true);
        self.size_buffers(&stream);
        let mut c = Conn::new(stream, addr, false, Phase::Connecting);
        c.peer = Some(peer);
        let slot = self
            .insert_conn(c, Interest::READABLE | Interest::WRITABLE)
            .map_err(|e| BtlError::io("epoll_ctl connect", e))?;
        tracing::debug!(target: "btl_tcp", peer, %addr, "connecting");
        if let Some(p) = self.peers[peer as usize].as_mut() {
            p.attempts += 1;
            p.state = PeerState::Connecting { conn: slot, since };
        }
        Ok(())
    }

    pub(super) fn on_connect_event(&mut self, slot: usize) {
        let Some(c) = self.conn_mut(slot) else {
            return;
        };
        let (Some(peer), addr) = (c.peer, c.remote) else {
            return;
        };
        match c.stream.take_error() {
            Ok(None) => {}
            Ok(Some(e)) | Err(e) => {
                return self.fail_peer(peer, format!("connect to {addr} failed: {e}"));
            }
        }
        match c.stream.peer_addr() {
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::NotConnected => return, // still connecting
            Err(e) => return self.fail_peer(peer, format!("connect to {addr} failed: {e}")),
        }
        c.phase = Phase::AwaitChallenge;
        // The challenge may already be there.
        self.on_challenge_readable(slot);
    }

    /// Reads the listener's CHALLENGE and answers HELLO with the proof.
    pub(super) fn on_challenge_readable(&mut self, slot: usize) {
        let (me, size) = (self.me, self.size);
        let Some(secret) = self.secret else { return };
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let (Some(peer), addr) = (c.peer, c.remote) else {
            return;
        };
        match c.read_handshake() {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                return self.attempt_lost(slot, peer, &format!("closed before its challenge ({e})"))
            }
        }
        let h = match Handshake::decode(&c.hs) {
            Ok(h) if h.kind == HsKind::Challenge => h,
            Ok(h) => {
                let why = format!("{addr} sent {} instead of a challenge", h.kind);
                return self.fail_peer(peer, why);
            }
            Err(e) => {
                return self.fail_peer(peer, format!("{addr} is not a tcp BTL listener: {e}"));
            }
        };
        if h.rank != peer || h.size != size {
            let why = format!("the process at {addr} is not rank {peer} of this job");
            return self.fail_peer(peer, why);
        }
        // Drawn once the challenge is in, not on every readable poll.
        let nonce_c = self.nonces.next_nonce();
        c.nonce_l = h.nonce;
        c.nonce_c = nonce_c;
        c.hs_len = 0;
        let proof = Transcript {
            kind: HsKind::Hello,
            from: me,
            to: peer,
            size,
            listener_nonce: &c.nonce_l,
            connector_nonce: &c.nonce_c,
        }
        .mac(&secret);
        let hello = Handshake {
            kind: HsKind::Hello,
            rank: me,
            size,
            nonce: nonce_c,
            mac: proof,
        };
        if !c.write_handshake(&hello) {
            return self.attempt_lost(slot, peer, "sending HELLO failed");
        }
        c.phase = Phase::SentHello;
        // The answer may already be there.
        self.on_answer_readable(slot);
    }

    /// An outgoing attempt closed by the listener before its answer
    /// (evicted, timed out there, or the listener restarted it): connect
    /// again after a back-off, within `btl_tcp_connect_timeout`.
    fn attempt_lost(&mut self, slot: usize, peer: u32, why: &str) {
        let current = self.is_current_attempt(peer, slot);
        self.close_conn(slot);
        let Some(p) = self.peers.get(peer as usize).and_then(Option::as_ref) else {
            return;
        };
        let (PeerState::Connecting { since, .. }, true) = (&p.state, current) else {
            return;
        };
        let since = *since;
        let limit = self.cfg.connect_timeout;
        if since.elapsed() >= limit {
            let why = format!(
                "{} closed every connection attempt before answering (the last {why}) for \
                 btl_tcp_connect_timeout ({} s)",
                p.addr,
                secs(limit)
            );
            return self.fail_peer(peer, why);
        }
        let shift = p.attempts.saturating_sub(1).min(7);
        let delay = (RETRY_FIRST * (1u32 << shift)).min(RETRY_MAX);
        let at = Instant::now() + delay;
        tracing::debug!(target: "btl_tcp", peer, attempts = p.attempts, "attempt {why}; connecting again");
        self.stats.retries += 1;
        self.set_state(peer, PeerState::Retry { at, since });
        self.retry_due = Some(self.retry_due.map_or(at, |d| d.min(at)));
    }

    /// Starts the attempts whose back-off has passed.
    pub(super) fn run_retries(&mut self) {
        let Some(due) = self.retry_due else { return };
        let now = Instant::now();
        if now < due {
            return;
        }
        self.retry_due = None;
        for r in 0..self.peers.len() {
            let Some(PeerState::Retry { at, since }) = self.peers[r].as_ref().map(|p| &p.state)
            else {
                continue;
            };
            let (at, since) = (*at, *since);
            if at <= now {
                // A failure is recorded by start_connect itself.
                let _ = self.start_connect(r as u32, since);
            } else {
                self.retry_due = Some(self.retry_due.map_or(at, |d| d.min(at)));
            }
        }
    }

    /// Reads and verifies the listener's answer to our HELLO.
    pub(super) fn on_answer_readable(&mut self, slot: usize) {
        let (me, size) = (self.me, self.size);
        let Some(secret) = self.secret else { return };
        let Some(c) = self.conns.get_mut(slot).and_then(Option::as_mut) else {
            return;
        };
        let (Some(peer), addr) = (c.peer, c.remote) else {
            return;
        };
        match c.read_handshake() {
            Ok(false) => return,
            Ok(true) => {}
            Err(e) => {
                return self.attempt_lost(slot, peer, &format!("closed during the handshake ({e})"))
            }
        }
        let h = match Handshake::decode(&c.hs) {
            Ok(h) => h,
            Err(e) => {
                return self.fail_peer(peer, format!("bad handshake answer from {addr}: {e}"))
            }
        };
        let proof = Transcript {
            kind: h.kind,
            from: peer,
            to: me,
            size,
            listener_nonce: &c.nonce_l,
            connector_nonce: &c.nonce_c,
        };
        if h.rank != peer || h.size != size || !proof.verify(&secret, &h.mac) {
            let why = format!(
                "the process at {addr} did not prove the job secret in its answer (not rank \
                 {peer} of this job)"
            );
            return self.fail_peer(peer, why);
        }
        if !self.is_current_attempt(peer, slot) {
            return self.close_conn(slot);
        }
        match h.kind {
            HsKind::Accept => self.on_accepted(slot, peer),
            HsKind::Reject => {
                self.close_conn(slot);
                self.set_state(
                    peer,
                    PeerState::AwaitingIncoming {
                        since: Instant::now(),
                    },
                );
                tracing::debug!(target: "btl_tcp", peer, "connect lost a simultaneous connect; waiting for the peer's");
            }
            HsKind::Duplicate => self.fail_peer(
                peer,
                format!(
                    "rank {peer} refused the connection: it already has an established \
                     connection from another process that proved the job secret and claims to \
                     be rank {me}"
                ),
            ),
            k @ (HsKind::Challenge | HsKind::Hello) => {
                self.fail_peer(peer, format!("{addr} answered HELLO with {k}"))
            }
        }
    }

    fn on_accepted(&mut self, slot: usize, peer: u32) {
        let Some(c) = self.conn_mut(slot) else {
            return;
        };
        c.establish(peer);
        let addr = c.remote;
        self.stats.connects += 1;
        self.set_state(peer, PeerState::Connected { conn: slot });
        tracing::debug!(target: "btl_tcp", peer, %addr, "connected");
        self.readable.push(slot);
        self.flush(peer);
    }
}
