//! The PMI server's protocol logic, free of I/O.
//!
//! The I/O shell ([`super::PmiServer`]) feeds bytes per rank with
//! [`Core::on_data`] and end-of-file with [`Core::on_eof`]; the core appends
//! replies to each connection's outbound buffer, queues [`PmiEvent`]s and
//! marks connections to close. Tests drive it directly with chosen orderings.

use std::collections::HashMap;

use tmpi_base::pmi::wire::{
    self, Message, WireError, KEYLEN_MAX, KVSNAME_MAX, V2_HEADER_LEN, VALLEN_MAX,
};
use tmpi_base::pmi::{
    format_v1_line, format_v2_frame, parse_process_mapping, parse_v1_line, parse_v2_frame,
};

use super::{PmiEvent, ServerConfig};

/// Longest PMI-1 line the server buffers (clients keep to 1024; this leaves
/// room for lenient peers while bounding memory).
pub(crate) const MAX_V1_LINE: usize = 4096;
/// Longest PMI-1 `mcmd=spawn` message the server buffers.
pub(crate) const MAX_MCMD: usize = 64 * 1024;
/// Largest PMI-2 body the server accepts.
pub(crate) const MAX_V2_BODY: usize = 64 * 1024;
/// Outbound bytes allowed to pile up for a client that does not read.
pub(crate) const MAX_OUTBOUND: usize = 1 << 20;

/// Framing a request arrived in; its reply uses the same.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Framing {
    V1,
    V2,
}

/// A reply held back until a condition holds (barrier, node attribute).
#[derive(Debug, Clone)]
struct Held {
    framing: Framing,
    thrid: Option<String>,
}

#[derive(Debug, Default)]
pub(crate) struct Conn {
    /// Received bytes not yet parsed.
    inbuf: Vec<u8>,
    /// Reply bytes not yet written.
    pub(crate) outbuf: Vec<u8>,
    /// Sent at least one well-formed command.
    active: bool,
    initialized: bool,
    finalized: bool,
    aborted: bool,
    /// The I/O shell should close this connection (EOF seen or fatal error).
    pub(crate) closed: bool,
}

impl Conn {
    fn gone(&self) -> bool {
        self.closed || self.finalized || self.aborted
    }
}

/// Protocol state of the whole job.
pub(crate) struct Core {
    size: u32,
    kvsname: String,
    appnum: i32,
    pub(crate) conns: Vec<Conn>,
    /// Values visible to `get` (committed at each completed barrier).
    kvs: HashMap<String, String>,
    /// Puts since the last completed barrier, in arrival order.
    pending: Vec<(String, String)>,
    job_attrs: HashMap<String, String>,
    /// Waiting barrier participants, by rank.
    barrier: Vec<Option<Held>>,
    barrier_count: u32,
    /// Node label per rank (from the process mapping; all 0 if unknown).
    node_of: Vec<u32>,
    node_kvs: HashMap<u32, HashMap<String, String>>,
    /// `info-getnodeattr wait=TRUE` requests not yet satisfied: (rank, key, reply).
    node_waiters: Vec<(u32, String, Held)>,
    pub(crate) events: Vec<PmiEvent>,
}

fn framing_of(buf: &[u8]) -> Option<Framing> {
    for p in [&b"cmd="[..], b"mcmd="] {
        let n = buf.len().min(p.len());
        if buf[..n] == p[..n] {
            return if buf.len() >= p.len() {
                Some(Framing::V1)
            } else {
                None
            };
        }
    }
    if buf.is_empty() {
        None
    } else {
        Some(Framing::V2)
    }
}

impl Core {
    pub(crate) fn new(cfg: &ServerConfig) -> Self {
        let size = cfg.size;
        let mut job_attrs = HashMap::new();
        let mapping = cfg.process_mapping.trim();
        let (node_of, valid) = match parse_process_mapping(mapping, size) {
            Ok(n) => (n, true),
            Err(e) => {
                if !mapping.is_empty() {
                    tracing::warn!(target: "pmi", "server: ignoring process mapping {mapping:?}: {e}");
                }
                (vec![0; size as usize], false)
            }
        };
        // Like Hydra, drop a mapping that does not fit a value (clients then
        // fall back to exchanging host names); never serve one that does not
        // parse.
        if valid && mapping.len() < VALLEN_MAX {
            job_attrs.insert("PMI_process_mapping".to_string(), mapping.to_string());
        }
        job_attrs.insert("universeSize".to_string(), size.to_string());
        for (k, v) in &cfg.job_attrs {
            job_attrs.insert(k.clone(), v.clone());
        }
        Core {
            size,
            kvsname: cfg.kvsname.clone(),
            appnum: cfg.appnum,
            conns: (0..size).map(|_| Conn::default()).collect(),
            kvs: HashMap::new(),
            pending: Vec::new(),
            job_attrs,
            barrier: vec![None; size as usize],
            barrier_count: 0,
            node_of,
            node_kvs: HashMap::new(),
            node_waiters: Vec::new(),
            events: Vec::new(),
        }
    }

    /// Bytes arrived from `rank`.
    pub(crate) fn on_data(&mut self, rank: u32, data: &[u8]) {
        let Some(c) = self.conns.get_mut(rank as usize) else {
            return;
        };
        if c.closed || c.aborted {
            // After abort nothing is served; drop input instead of buffering it.
            return;
        }
        c.inbuf.extend_from_slice(data);
        self.process(rank);
    }

    /// End of file (or a read error) on `rank`'s connection.
    pub(crate) fn on_eof(&mut self, rank: u32) {
        let Some(c) = self.conns.get_mut(rank as usize) else {
            return;
        };
        if c.closed {
            return;
        }
        if !c.inbuf.is_empty() {
            tracing::debug!(target: "pmi", "server: rank {rank} closed with {} unparsed bytes", c.inbuf.len());
        }
        self.close(rank);
    }

    fn close(&mut self, rank: u32) {
        let c = &mut self.conns[rank as usize];
        if c.closed {
            return;
        }
        c.closed = true;
        c.inbuf = Vec::new();
        let (finalized, active) = (c.finalized, c.active);
        tracing::debug!(target: "pmi", "server: rank {rank} disconnected (finalized={finalized}, active={active})");
        self.events.push(PmiEvent::Disconnected {
            rank,
            finalized,
            active,
        });
        self.node_waiters.retain(|(r, _, _)| *r != rank);
        self.barrier_check_broken();
    }

    fn protocol_error(&mut self, rank: u32, detail: String, fatal: bool) {
        tracing::warn!(target: "pmi", "server: protocol error from rank {rank}: {detail}");
        self.events.push(PmiEvent::ProtocolError { rank, detail });
        if fatal {
            self.close(rank);
        }
    }

    fn process(&mut self, rank: u32) {
        loop {
            let c = &self.conns[rank as usize];
            if c.closed || c.aborted {
                return;
            }
            if c.outbuf.len() > MAX_OUTBOUND {
                self.protocol_error(rank, "client does not read its replies".into(), true);
                return;
            }
            let Some(framing) = framing_of(&c.inbuf) else {
                return;
            };
            match framing {
                Framing::V1 => {
                    if c.inbuf.starts_with(b"mcmd=") {
                        if !self.take_mcmd(rank) {
                            return;
                        }
                        continue;
                    }
                    let Some(nl) = c.inbuf.iter().take(MAX_V1_LINE).position(|&b| b == b'\n')
                    else {
                        if c.inbuf.len() >= MAX_V1_LINE {
                            self.protocol_error(
                                rank,
                                format!("PMI-1 line longer than {MAX_V1_LINE} bytes"),
                                true,
                            );
                        }
                        return;
                    };
                    let line: Vec<u8> = self.conns[rank as usize].inbuf.drain(..=nl).collect();
                    match parse_v1_line(&line) {
                        Ok(msg) => self.handle(rank, Framing::V1, msg),
                        Err(e) => {
                            self.protocol_error(rank, format!("bad PMI-1 line: {e}"), false);
                            self.send(
                                rank,
                                Framing::V1,
                                Message::new("error")
                                    .with("rc", 1)
                                    .with("msg", "malformed_command"),
                            );
                        }
                    }
                }
                Framing::V2 => match parse_v2_frame(&c.inbuf, MAX_V2_BODY) {
                    Ok(None) => return,
                    Ok(Some((msg, used))) => {
                        self.conns[rank as usize].inbuf.drain(..used);
                        self.handle(rank, Framing::V2, msg);
                    }
                    Err(e @ (WireError::BadLength { .. } | WireError::FrameTooLong { .. })) => {
                        // Cannot find the next frame: the stream is lost.
                        self.protocol_error(rank, format!("bad PMI-2 frame: {e}"), true);
                        return;
                    }
                    Err(e) => {
                        // The header parsed (only the body is bad): skip the frame.
                        let mut h = [0u8; V2_HEADER_LEN];
                        if let Some(src) = c.inbuf.get(..V2_HEADER_LEN) {
                            h.copy_from_slice(src);
                        }
                        let len = wire::parse_v2_header(&h).unwrap_or(0);
                        let inbuf = &mut self.conns[rank as usize].inbuf;
                        let skip = (V2_HEADER_LEN + len).min(inbuf.len());
                        inbuf.drain(..skip);
                        self.protocol_error(rank, format!("bad PMI-2 frame: {e}"), false);
                        self.send(
                            rank,
                            Framing::V2,
                            Message::new("error-response")
                                .with("rc", 1)
                                .with("errmsg", "malformed command"),
                        );
                    }
                },
            }
        }
    }

    /// Consumes a complete `mcmd=spawn` message if buffered; spawn is not
    /// supported and answered with an error. Returns false when incomplete.
    fn take_mcmd(&mut self, rank: u32) -> bool {
        let buf = &self.conns[rank as usize].inbuf;
        let mut start = 0;
        let mut end = None;
        let (mut so_far, mut total) = (None, None);
        while let Some(nl) = buf[start..].iter().position(|&b| b == b'\n') {
            let line = &buf[start..start + nl];
            start += nl + 1;
            if let Some(v) = line.strip_prefix(b"spawnssofar=") {
                so_far = std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
            } else if let Some(v) = line.strip_prefix(b"totspawns=") {
                total = std::str::from_utf8(v)
                    .ok()
                    .and_then(|v| v.trim().parse::<u64>().ok());
            } else if line == b"endcmd" && (so_far == total || so_far.is_none() || total.is_none())
            {
                end = Some(start);
                break;
            }
        }
        let Some(end) = end else {
            if buf.len() > MAX_MCMD {
                self.protocol_error(
                    rank,
                    format!("mcmd message longer than {MAX_MCMD} bytes"),
                    true,
                );
            }
            return false;
        };
        self.conns[rank as usize].inbuf.drain(..end);
        self.mark_active(rank);
        tracing::info!(target: "pmi", "server: rank {rank} asked to spawn, which is not supported");
        self.send(
            rank,
            Framing::V1,
            Message::new("spawn_result")
                .with("rc", 1)
                .with("msg", "spawn_not_supported"),
        );
        true
    }

    fn mark_active(&mut self, rank: u32) {
        self.conns[rank as usize].active = true;
    }

    fn send(&mut self, rank: u32, framing: Framing, msg: Message) {
        let bytes = match framing {
            Framing::V1 => format_v1_line(&msg),
            Framing::V2 => format_v2_frame(&msg),
        };
        let bytes = match bytes {
            Ok(b) => b,
            Err(e) => {
                // A stored value that this framing cannot carry (a PMI-2 value
                // with a space read through PMI-1).
                tracing::warn!(target: "pmi", "server: cannot encode reply {msg:?} for rank {rank}: {e}");
                let cmd = msg.cmd.clone();
                let err = Message::new(cmd).with("rc", 1);
                let err = match framing {
                    Framing::V1 => err.with("msg", "value_not_representable"),
                    Framing::V2 => err.with("errmsg", "value not representable"),
                };
                match framing {
                    Framing::V1 => format_v1_line(&err),
                    Framing::V2 => format_v2_frame(&err),
                }
                .unwrap_or_default()
            }
        };
        tracing::trace!(target: "pmi", "server -> rank {rank}: {:?}", String::from_utf8_lossy(&bytes));
        if let Some(c) = self.conns.get_mut(rank as usize) {
            if !c.closed {
                c.outbuf.extend_from_slice(&bytes);
            }
        }
    }

    /// A reply `cmd` with `rc` first, `thrid` copied for PMI-2.
    fn reply(framing: Framing, cmd: &str, req: &Message) -> Message {
        let mut m = Message::new(cmd).with("rc", 0);
        if framing == Framing::V2 {
            if let Some(t) = req.get("thrid") {
                m.push("thrid", t);
            }
        }
        m
    }

    fn error_reply(framing: Framing, cmd: &str, req: &Message, rc: i32, why: &str) -> Message {
        let mut m = Message::new(cmd).with("rc", rc);
        match framing {
            Framing::V1 => m.push("msg", why.replace(' ', "_")),
            Framing::V2 => {
                m.push("errmsg", why);
                if let Some(t) = req.get("thrid") {
                    m.push("thrid", t);
                }
            }
        }
        m
    }

    fn check_key(key: Option<&str>) -> Result<&str, &'static str> {
        let key = key.ok_or("missing key")?;
        if key.is_empty() {
            return Err("empty key");
        }
        if key.len() >= KEYLEN_MAX {
            return Err("key too long");
        }
        if key.starts_with("PMI_") {
            return Err("reserved key prefix PMI_");
        }
        Ok(key)
    }

    fn check_value(value: Option<&str>) -> Result<&str, &'static str> {
        let value = value.ok_or("missing value")?;
        if value.len() >= VALLEN_MAX {
            return Err("value too long");
        }
        Ok(value)
    }

    fn handle(&mut self, rank: u32, f: Framing, req: Message) {
        tracing::trace!(target: "pmi", "server <- rank {rank}: {req:?}");
        self.mark_active(rank);
        let resp = |cmd: &str| Self::reply(f, cmd, &req);
        match (f, req.cmd.as_str()) {
            (Framing::V1, "init") => {
                let v = req.get("pmi_version").and_then(|v| v.parse::<u32>().ok());
                let sub = req
                    .get("pmi_subversion")
                    .and_then(|v| v.parse::<u32>().ok());
                let m = match (v, sub) {
                    (Some(1), Some(0..=2)) => Message::new("response_to_init")
                        .with("pmi_version", 1)
                        .with("pmi_subversion", 1)
                        .with("rc", 0),
                    (Some(2), Some(0)) => Message::new("response_to_init")
                        .with("pmi_version", 2)
                        .with("pmi_subversion", 0)
                        .with("rc", 0),
                    _ => {
                        self.protocol_error(
                            rank,
                            format!("unsupported PMI version {req:?}"),
                            false,
                        );
                        Message::new("response_to_init")
                            .with("pmi_version", 1)
                            .with("pmi_subversion", 1)
                            .with("rc", 1)
                    }
                };
                let ok = m.rc() == Ok(0);
                self.send(rank, f, m);
                if ok {
                    self.initialized(rank);
                }
            }
            (Framing::V1, "get_maxes") => {
                let m = resp("maxes")
                    .with("kvsname_max", KVSNAME_MAX)
                    .with("keylen_max", KEYLEN_MAX)
                    .with("vallen_max", VALLEN_MAX);
                self.send(rank, f, m);
            }
            (Framing::V1, "get_appnum") => {
                let m = resp("appnum").with("appnum", self.appnum);
                self.send(rank, f, m);
            }
            (Framing::V1, "get_universe_size") => {
                let m = resp("universe_size").with("size", self.size);
                self.send(rank, f, m);
            }
            (Framing::V1, "get_my_kvsname") => {
                let m = resp("my_kvsname").with("kvsname", &self.kvsname);
                self.send(rank, f, m);
            }
            (Framing::V1, "put") | (Framing::V2, "kvs-put") => {
                let cmd = if f == Framing::V1 {
                    "put_result"
                } else {
                    "kvs-put-response"
                };
                if f == Framing::V1 && req.get("kvsname") != Some(self.kvsname.as_str()) {
                    let m = Self::error_reply(f, cmd, &req, 1, "unknown kvsname");
                    return self.send(rank, f, m);
                }
                let checked = Self::check_key(req.get("key"))
                    .and_then(|k| Ok((k, Self::check_value(req.get("value"))?)));
                let m = match checked {
                    Ok((k, v)) => {
                        self.pending.push((k.to_string(), v.to_string()));
                        let m = resp(cmd);
                        if f == Framing::V1 {
                            m.with("msg", "success")
                        } else {
                            m
                        }
                    }
                    Err(why) => Self::error_reply(f, cmd, &req, 1, why),
                };
                self.send(rank, f, m);
            }
            (Framing::V1, "get") => {
                if req.get("kvsname") != Some(self.kvsname.as_str()) {
                    let m = Self::error_reply(f, "get_result", &req, 1, "unknown kvsname")
                        .with("found", "FALSE");
                    return self.send(rank, f, m);
                }
                let key = req.get("key").unwrap_or("");
                let m = match self.kvs.get(key).or_else(|| self.job_attrs.get(key)) {
                    Some(v) => resp("get_result")
                        .with("msg", "success")
                        .with("found", "TRUE")
                        .with("value", v),
                    None => Message::new("get_result")
                        .with("rc", 1)
                        .with("msg", "key_not_found")
                        .with("found", "FALSE"),
                };
                self.send(rank, f, m);
            }
            (Framing::V2, "kvs-get") => {
                let key = req.get("key").unwrap_or("");
                let m = match self.kvs.get(key) {
                    Some(v) => resp("kvs-get-response")
                        .with("found", "TRUE")
                        .with("value", v),
                    None => resp("kvs-get-response").with("found", "FALSE"),
                };
                self.send(rank, f, m);
            }
            (Framing::V1, "barrier_in") | (Framing::V2, "kvs-fence") => {
                let thrid = if f == Framing::V2 {
                    req.get("thrid").map(str::to_string)
                } else {
                    None
                };
                self.barrier_enter(rank, Held { framing: f, thrid });
            }
            (Framing::V1, "finalize") | (Framing::V2, "finalize") => {
                let m = resp(if f == Framing::V1 {
                    "finalize_ack"
                } else {
                    "finalize-response"
                });
                self.send(rank, f, m);
                let c = &mut self.conns[rank as usize];
                if !c.finalized {
                    c.finalized = true;
                    self.events.push(PmiEvent::Finalized { rank });
                    self.barrier_check_broken();
                }
            }
            (_, "abort") => {
                let code = req
                    .get("exitcode")
                    .and_then(|c| c.trim().parse::<i32>().ok())
                    .unwrap_or(1);
                // The exact text when the client encoded it (tmpi's
                // clients over PMI-1), else what the client sent as it is.
                let message = match req.get(tmpi_base::pmi::ABORT_TEXT_KEY) {
                    Some(enc) => Some(tmpi_base::pmi::decode_abort_text(enc)),
                    None => req
                        .get("message")
                        .or_else(|| req.get("msg"))
                        .map(str::to_string),
                };
                tracing::info!(target: "pmi", "server: rank {rank} aborts the job with code {code}: {}", message.as_deref().unwrap_or("(no message)"));
                self.conns[rank as usize].aborted = true;
                self.events.push(PmiEvent::Abort {
                    rank,
                    code,
                    message,
                });
                self.barrier_check_broken();
            }
            (Framing::V2, "fullinit") => {
                if let Some(r) = req.get("pmirank") {
                    if r.trim() != rank.to_string() {
                        tracing::warn!(target: "pmi", "server: connection of rank {rank} claims pmirank={r}; using {rank}");
                    }
                }
                let m = resp("fullinit-response")
                    .with("pmi-version", 2)
                    .with("pmi-subversion", 0)
                    .with("rank", rank)
                    .with("size", self.size)
                    .with("appnum", self.appnum)
                    .with("debugged", "FALSE")
                    .with("pmiverbose", "FALSE");
                self.send(rank, f, m);
                self.initialized(rank);
            }
            (Framing::V2, "job-getid") => {
                let m = resp("job-getid-response").with("jobid", &self.kvsname);
                self.send(rank, f, m);
            }
            (Framing::V2, "info-getjobattr") => {
                let key = req.get("key").unwrap_or("");
                let m = match self.job_attrs.get(key) {
                    Some(v) => resp("info-getjobattr-response")
                        .with("found", "TRUE")
                        .with("value", v),
                    None => resp("info-getjobattr-response").with("found", "FALSE"),
                };
                self.send(rank, f, m);
            }
            (Framing::V2, "info-putnodeattr") => {
                let checked = Self::check_key(req.get("key"))
                    .and_then(|k| Ok((k, Self::check_value(req.get("value"))?)));
                match checked {
                    Ok((k, v)) => {
                        let (k, v) = (k.to_string(), v.to_string());
                        let node = self.node_of[rank as usize];
                        self.node_kvs
                            .entry(node)
                            .or_default()
                            .insert(k.clone(), v.clone());
                        let m = resp("info-putnodeattr-response");
                        self.send(rank, f, m);
                        self.wake_node_waiters(node, &k, &v);
                    }
                    Err(why) => {
                        let m = Self::error_reply(f, "info-putnodeattr-response", &req, 1, why);
                        self.send(rank, f, m);
                    }
                }
            }
            (Framing::V2, "info-getnodeattr") => {
                let key = req.get("key").unwrap_or("").to_string();
                let node = self.node_of[rank as usize];
                match self.node_kvs.get(&node).and_then(|m| m.get(&key)) {
                    Some(v) => {
                        let m = resp("info-getnodeattr-response")
                            .with("found", "TRUE")
                            .with("value", v);
                        self.send(rank, f, m);
                    }
                    None if req.get_bool("wait") == Some(true) => {
                        let thrid = req.get("thrid").map(str::to_string);
                        self.node_waiters
                            .push((rank, key, Held { framing: f, thrid }));
                    }
                    None => {
                        let m = resp("info-getnodeattr-response").with("found", "FALSE");
                        self.send(rank, f, m);
                    }
                }
            }
            (Framing::V1, other) => {
                let other = other.to_string();
                self.protocol_error(rank, format!("unknown PMI-1 command {other:?}"), false);
                let m =
                    Self::error_reply(f, &format!("{other}_result"), &req, 1, "unknown command");
                self.send(rank, f, m);
            }
            (Framing::V2, other) => {
                let other = other.to_string();
                self.protocol_error(rank, format!("unknown PMI-2 command {other:?}"), false);
                let m =
                    Self::error_reply(f, &format!("{other}-response"), &req, 1, "unknown command");
                self.send(rank, f, m);
            }
        }
    }

    fn initialized(&mut self, rank: u32) {
        let c = &mut self.conns[rank as usize];
        if !c.initialized {
            c.initialized = true;
            self.events.push(PmiEvent::Initialized { rank });
        }
    }

    fn wake_node_waiters(&mut self, node: u32, key: &str, value: &str) {
        let mut woken = Vec::new();
        let node_of = &self.node_of;
        self.node_waiters.retain(|(r, k, h)| {
            if k == key && node_of[*r as usize] == node {
                woken.push((*r, h.clone()));
                false
            } else {
                true
            }
        });
        for (r, h) in woken {
            let mut m = Message::new("info-getnodeattr-response").with("rc", 0);
            if let Some(t) = &h.thrid {
                m.push("thrid", t);
            }
            m.push("found", "TRUE");
            m.push("value", value);
            self.send(r, h.framing, m);
        }
    }

    fn barrier_reply(held: &Held, rc: i32) -> Message {
        let mut m = match held.framing {
            Framing::V1 => Message::new("barrier_out"),
            Framing::V2 => Message::new("kvs-fence-response"),
        };
        m.push("rc", rc);
        if let Some(t) = &held.thrid {
            m.push("thrid", t);
        }
        if rc != 0 {
            match held.framing {
                Framing::V1 => m.push("msg", "a_rank_exited_before_the_barrier"),
                Framing::V2 => m.push("errmsg", "a rank exited before the fence"),
            }
        }
        m
    }

    fn barrier_enter(&mut self, rank: u32, held: Held) {
        if self.barrier[rank as usize].is_some() {
            self.protocol_error(rank, "entered the barrier twice".into(), false);
            let m = Self::barrier_reply(&held, 1);
            return self.send(rank, held.framing, m);
        }
        self.barrier[rank as usize] = Some(held);
        self.barrier_count += 1;
        if self.barrier_count == self.size {
            for (k, v) in self.pending.drain(..) {
                self.kvs.insert(k, v);
            }
            let held: Vec<_> = self.barrier.iter_mut().map(Option::take).collect();
            self.barrier_count = 0;
            tracing::debug!(target: "pmi", "server: barrier complete ({} keys)", self.kvs.len());
            for (r, h) in held.into_iter().enumerate() {
                if let Some(h) = h {
                    let m = Self::barrier_reply(&h, 0);
                    self.send(r as u32, h.framing, m);
                }
            }
        } else {
            self.barrier_check_broken();
        }
    }

    /// Fails the waiting barrier participants when a rank that has not
    /// entered can no longer enter (exited, finalized or aborted): their
    /// reply carries `rc=1` instead of a hang.
    fn barrier_check_broken(&mut self) {
        if self.barrier_count == 0 {
            return;
        }
        let broken = self
            .conns
            .iter()
            .zip(&self.barrier)
            .position(|(c, b)| b.is_none() && c.gone());
        let Some(culprit) = broken else { return };
        if self.conns[culprit].aborted {
            // The launcher already tells the user about the abort; this is
            // only its consequence for the other ranks.
            tracing::info!(target: "pmi", "server: rank {culprit} aborted; failing the barrier of the waiting ranks");
        } else {
            tracing::warn!(target: "pmi", "server: rank {culprit} left; failing the barrier of the waiting ranks");
        }
        let held: Vec<_> = self.barrier.iter_mut().map(Option::take).collect();
        self.barrier_count = 0;
        for (r, h) in held.into_iter().enumerate() {
            if let Some(h) = h {
                let m = Self::barrier_reply(&h, 1);
                self.send(r as u32, h.framing, m);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(size: u32) -> ServerConfig {
        ServerConfig {
            size,
            kvsname: "kvs".into(),
            process_mapping: "(vector,(0,1,2))".into(),
            appnum: 0,
            job_attrs: Vec::new(),
        }
    }

    struct Rng(u64);
    impl Rng {
        fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
        fn below(&mut self, n: usize) -> usize {
            (self.next() % n as u64) as usize
        }
    }

    const SEEDS: &[&[u8]] = &[
        b"cmd=init pmi_version=1 pmi_subversion=1\n",
        b"cmd=put kvsname=kvs key=a value=b\n",
        b"cmd=get kvsname=kvs key=a\n",
        b"cmd=barrier_in\n",
        b"mcmd=spawn\nnprocs=1\ntotspawns=2\nspawnssofar=1\nendcmd\n",
        b"14    cmd=kvs-fence;",
        b"41    cmd=info-getnodeattr;key=k;wait=TRUE;",
        b"38    cmd=info-putnodeattr;key=k;value=v;",
        b"26    cmd=kvs-put;key=a;value=b;",
        b"000013cmd=finalize;",
        b"cmd=abort exitcode=3\n",
    ];

    /// Random and mutated input never panics, buffers stay bounded, and
    /// every connection either keeps being served or is closed.
    #[test]
    fn random_input_never_panics() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        for _round in 0..300 {
            let mut core = Core::new(&cfg(3));
            for _ in 0..60 {
                let rank = rng.below(4) as u32; // includes an invalid rank
                let mut msg: Vec<u8> = SEEDS[rng.below(SEEDS.len())].to_vec();
                match rng.below(4) {
                    0 => {
                        let n = rng.below(64);
                        msg = (0..n).map(|_| rng.next() as u8).collect();
                    }
                    1 if !msg.is_empty() => {
                        let i = rng.below(msg.len());
                        msg[i] = rng.next() as u8;
                    }
                    2 if !msg.is_empty() => {
                        let i = rng.below(msg.len());
                        msg.truncate(i);
                    }
                    _ => {}
                }
                core.on_data(rank, &msg);
                if rng.below(40) == 0 {
                    core.on_eof(rank);
                }
                for c in &mut core.conns {
                    assert!(c.inbuf.len() <= MAX_MCMD + 64, "unbounded input buffer");
                    c.outbuf.clear();
                }
            }
            core.events.clear();
        }
    }

    #[test]
    fn reply_framing_follows_the_request() {
        let mut core = Core::new(&cfg(1));
        core.on_data(0, b"cmd=get_appnum\n");
        assert_eq!(core.conns[0].outbuf, b"cmd=appnum rc=0 appnum=0\n");
        core.conns[0].outbuf.clear();
        core.on_data(0, b"14    cmd=job-getid;");
        assert_eq!(
            core.conns[0].outbuf,
            b"38    cmd=job-getid-response;rc=0;jobid=kvs;"
        );
        core.conns[0].outbuf.clear();
        // Byte-by-byte delivery of two pipelined requests.
        for b in b"cmd=get_appnum\n22    cmd=job-getid;thrid=x;".iter() {
            core.on_data(0, std::slice::from_ref(b));
        }
        let out = String::from_utf8(core.conns[0].outbuf.clone()).unwrap();
        assert!(out.starts_with("cmd=appnum rc=0 appnum=0\n"), "{out}");
        assert!(
            out.ends_with("cmd=job-getid-response;rc=0;thrid=x;jobid=kvs;"),
            "{out}"
        );
    }
}
