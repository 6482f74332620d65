//! The `btl_tcp_*` MCA parameters.

use std::time::Duration;

use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};

use tmpi_btl::BtlError;

use crate::ifaddr::IfSpec;
use crate::wire::WIRE_MAX_FRAME;

/// Default of `btl_tcp_max_send_size`: 512 KiB of payload plus a pml
/// header (at most 64 bytes), so that a power-of-two message is not cut
/// into a full fragment and a few bytes. Larger than Open MPI's 128 KiB
/// send fragment because a fragment received in place costs a copy only
/// for its first read (at most `PLACE_READ_CAP`), and the fewer fragments
/// the fewer calls; not larger, because a fragment the socket does not take
/// whole is copied into the peer's queue (more often the larger it is when
/// the kernel sizes the send buffer).
pub const MAX_SEND_SIZE_DEFAULT: usize = 512 * 1024 + 64;
/// Default of `btl_tcp_place_min`: below, the copy that receiving in
/// place saves costs less than splitting the reads around the fragment.
pub const PLACE_MIN_DEFAULT: usize = 16 * 1024;
/// Smallest non-zero `btl_tcp_place_min`.
pub const PLACE_MIN_LEAST: usize = 1024;

/// Configuration of the tcp BTL.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TcpConfig {
    /// `btl_tcp_eager_limit`: largest eager payload.
    pub eager_limit: usize,
    /// `btl_tcp_max_send_size`: largest fragment (header + payload).
    pub max_send_size: usize,
    /// `btl_tcp_if_include`: interfaces/subnets to use (empty: all).
    pub if_include: Vec<IfSpec>,
    /// `btl_tcp_if_exclude`: interfaces/subnets not to use.
    pub if_exclude: Vec<IfSpec>,
    /// `btl_tcp_sendq_bytes`: bytes queued towards one peer before `send`
    /// says `WouldBlock`.
    pub sendq_bytes: usize,
    /// `btl_tcp_place_min`: a large fragment with at least this many
    /// bytes still to arrive is read straight into the receiver's buffer
    /// when the upper layer offers one (receive in place); 0: never.
    pub place_min: usize,
    /// `btl_tcp_sndbuf`: `SO_SNDBUF` of every connection; 0: the
    /// kernel's automatic sizing.
    pub sndbuf: usize,
    /// `btl_tcp_rcvbuf`: `SO_RCVBUF` of every connection; 0: the
    /// kernel's automatic sizing.
    pub rcvbuf: usize,
    /// `btl_tcp_connect_timeout`: connection set-up deadline.
    pub connect_timeout: Duration,
    /// `btl_tcp_handshake_timeout`: how long an inbound connection may
    /// take to authenticate before it is closed.
    pub handshake_timeout: Duration,
    /// `btl_tcp_pending_per_addr`: unauthenticated inbound connections from
    /// one source address, at most (the oldest is evicted beyond).
    pub pending_per_addr: usize,
    /// `btl_tcp_pending_max`: unauthenticated inbound connections, at most.
    pub pending_max: usize,
    /// `btl_tcp_stats`: print per-peer traffic counters at finalize.
    pub stats: bool,
    /// `btl_tcp_inject_reset` (testing): once this process has sent this
    /// many fragments on a connection, it aborts the connection with a
    /// reset (RST). 0: off.
    pub inject_reset: u64,
    /// `btl_tcp_inject_reset_rank` (testing): the only rank that injects
    /// the reset; -1: every rank.
    pub inject_reset_rank: i64,
}

impl Default for TcpConfig {
    fn default() -> Self {
        TcpConfig {
            eager_limit: 64 * 1024,
            max_send_size: MAX_SEND_SIZE_DEFAULT,
            if_include: Vec::new(),
            if_exclude: Vec::new(),
            sendq_bytes: 4 << 20,
            place_min: PLACE_MIN_DEFAULT,
            sndbuf: 0,
            rcvbuf: 0,
            connect_timeout: Duration::from_secs(30),
            handshake_timeout: Duration::from_secs(5),
            pending_per_addr: 64,
            pending_max: 256,
            stats: false,
            inject_reset: 0,
            inject_reset_rank: -1,
        }
    }
}

impl TcpConfig {
    /// Registers (idempotently) and reads the parameters; a malformed
    /// interface entry or inconsistent values are a configuration error.
    pub fn from_registry(reg: &Registry) -> Result<TcpConfig, BtlError> {
        let (mut cfg, include, exclude) =
            Self::register(reg).map_err(|e| BtlError::Config(e.to_string()))?;
        let parse = |name: &str, v: Vec<String>| -> Result<Vec<IfSpec>, BtlError> {
            v.iter()
                .filter(|s| !s.trim().is_empty())
                .map(|s| {
                    IfSpec::parse(s).map_err(|e| BtlError::Config(format!("btl_tcp_{name}: {e}")))
                })
                .collect()
        };
        cfg.if_include = parse("if_include", include)?;
        cfg.if_exclude = parse("if_exclude", exclude)?;
        cfg.validate().map_err(BtlError::Config)?;
        Ok(cfg)
    }

    /// Registers (idempotently) the parameters and returns their values,
    /// the interface lists unparsed.
    pub fn register(reg: &Registry) -> Result<(TcpConfig, Vec<String>, Vec<String>), McaError> {
        let d = TcpConfig::default();
        let spec = |name: &str, help: &str, level| {
            ParamSpec::new("btl", "tcp", name).help(help).level(level)
        };
        let size = |name: &str, help: &str, def: usize| {
            reg.register_size(spec(name, help, Level::TunerBasic), def as u64)
                .map(|p| p.value() as usize)
        };
        let eager_limit = size(
            "eager_limit",
            "Largest message payload sent eagerly over TCP",
            d.eager_limit,
        )?;
        let max_send_size = size(
            "max_send_size",
            "Largest fragment (header + payload); large messages are pipelined in pieces of this size",
            d.max_send_size,
        )?;
        let sendq_bytes = size(
            "sendq_bytes",
            "Bytes queued towards one peer before sends are refused until progress drains them",
            d.sendq_bytes,
        )?;
        let place_min = size(
            "place_min",
            "A fragment with at least this many bytes still to arrive is read straight into \
             the receive buffer when the pml offers one (receive in place, no copy out of \
             the connection's buffer); 0: never",
            d.place_min,
        )?;
        let sndbuf = size(
            "sndbuf",
            "Socket send buffer size (SO_SNDBUF) of each connection; 0: the kernel sizes it \
             (and grows it as needed)",
            d.sndbuf,
        )?;
        let rcvbuf = size(
            "rcvbuf",
            "Socket receive buffer size (SO_RCVBUF) of each connection; 0: the kernel sizes it \
             (and grows it as needed)",
            d.rcvbuf,
        )?;
        let include = reg
            .register_list(
                spec(
                    "if_include",
                    "Interfaces (eth0) or IPv4 subnets (10.0.0.0/8) to use; exclusive with if_exclude",
                    Level::UserBasic,
                ),
                &[],
            )?
            .value();
        let exclude = reg
            .register_list(
                spec(
                    "if_exclude",
                    "Interfaces or IPv4 subnets not to use; exclusive with if_include",
                    Level::UserBasic,
                ),
                &[],
            )?
            .value();
        let timeout = reg
            .register_int_range(
                spec(
                    "connect_timeout",
                    "Seconds allowed for setting up a connection to a peer",
                    Level::TunerDetail,
                ),
                d.connect_timeout.as_secs() as i64,
                1..=3600,
            )?
            .value();
        let handshake_timeout = reg
            .register_int_range(
                spec(
                    "handshake_timeout",
                    "Seconds an inbound connection may take to prove the job secret before \
                     it is closed (a rank whose attempt was closed connects again)",
                    Level::TunerDetail,
                ),
                d.handshake_timeout.as_secs() as i64,
                1..=600,
            )?
            .value();
        let pending = |name: &str, help: &str, def: usize| {
            reg.register_int_range(spec(name, help, Level::TunerDetail), def as i64, 1..=65536)
                .map(|p| p.value() as usize)
        };
        let pending_per_addr = pending(
            "pending_per_addr",
            "Inbound connections not yet authenticated from one source address, at most; \
             beyond, the oldest of them is closed",
            d.pending_per_addr,
        )?;
        let pending_max = pending(
            "pending_max",
            "Inbound connections not yet authenticated, at most; beyond, the oldest is closed",
            d.pending_max,
        )?;
        let stats = reg
            .register_bool(
                spec(
                    "stats",
                    "Print per-peer traffic counters (which peers tcp carried) at finalize",
                    Level::UserBasic,
                ),
                false,
            )?
            .value();
        let inject_reset = reg
            .register_int_range(
                spec(
                    "inject_reset",
                    "For testing only (fault injection): after this process has sent this many \
                     fragments on a connection, it aborts that connection with a TCP reset \
                     (SO_LINGER 0, close); both ends then fail the transfers with that peer. \
                     0: off",
                    Level::DevDetail,
                ),
                0,
                0..=i64::MAX,
            )?
            .value();
        let inject_reset_rank = reg
            .register_int_range(
                spec(
                    "inject_reset_rank",
                    "For testing only: the rank that applies btl_tcp_inject_reset; -1: every rank",
                    Level::DevDetail,
                ),
                d.inject_reset_rank,
                -1..=i64::from(i32::MAX),
            )?
            .value();
        Ok((
            TcpConfig {
                eager_limit,
                max_send_size,
                if_include: Vec::new(),
                if_exclude: Vec::new(),
                sendq_bytes,
                place_min,
                sndbuf,
                rcvbuf,
                connect_timeout: Duration::from_secs(timeout as u64),
                handshake_timeout: Duration::from_secs(handshake_timeout as u64),
                pending_per_addr,
                pending_max,
                stats,
                inject_reset: inject_reset as u64,
                inject_reset_rank,
            },
            include,
            exclude,
        ))
    }

    /// Checks the values against each other and the wire limits.
    pub fn validate(&self) -> Result<(), String> {
        if self.max_send_size < 64 || self.max_send_size > WIRE_MAX_FRAME {
            return Err(format!(
                "btl_tcp_max_send_size {} must be within 64..={WIRE_MAX_FRAME}",
                self.max_send_size
            ));
        }
        if self.eager_limit == 0 || self.eager_limit > self.max_send_size {
            return Err(format!(
                "btl_tcp_eager_limit {} must be within 1..=btl_tcp_max_send_size ({})",
                self.eager_limit, self.max_send_size
            ));
        }
        if self.sendq_bytes < self.max_send_size {
            return Err(format!(
                "btl_tcp_sendq_bytes {} must be at least btl_tcp_max_send_size ({})",
                self.sendq_bytes, self.max_send_size
            ));
        }
        if self.place_min != 0 && self.place_min < PLACE_MIN_LEAST {
            return Err(format!(
                "btl_tcp_place_min {} must be 0 (off) or at least {PLACE_MIN_LEAST}",
                self.place_min
            ));
        }
        for (name, v) in [("sndbuf", self.sndbuf), ("rcvbuf", self.rcvbuf)] {
            if v > i32::MAX as usize {
                return Err(format!(
                    "btl_tcp_{name} {v} exceeds the largest socket buffer size ({})",
                    i32::MAX
                ));
            }
        }
        if !self.if_include.is_empty() && !self.if_exclude.is_empty() {
            return Err("btl_tcp_if_include and btl_tcp_if_exclude are mutually exclusive".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn place_min_is_off_or_at_least_the_least() {
        let with = |place_min| TcpConfig {
            place_min,
            ..TcpConfig::default()
        };
        assert_eq!(TcpConfig::default().place_min, PLACE_MIN_DEFAULT);
        assert!(with(PLACE_MIN_DEFAULT).validate().is_ok());
        assert!(
            with(0).validate().is_ok(),
            "0 switches receiving in place off"
        );
        assert!(with(PLACE_MIN_LEAST).validate().is_ok());
        let e = with(PLACE_MIN_LEAST - 1).validate().unwrap_err();
        assert!(e.contains("btl_tcp_place_min 1023"), "{e}");
        assert!(with(1).validate().is_err());
    }

    #[test]
    fn socket_buffer_sizes_fit_an_int() {
        let ok = TcpConfig {
            sndbuf: 4 << 20,
            rcvbuf: i32::MAX as usize,
            ..TcpConfig::default()
        };
        assert!(ok.validate().is_ok());
        assert_eq!(
            (TcpConfig::default().sndbuf, TcpConfig::default().rcvbuf),
            (0, 0)
        );
        let e = TcpConfig {
            sndbuf: i32::MAX as usize + 1,
            ..TcpConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("btl_tcp_sndbuf"), "{e}");
        let e = TcpConfig {
            rcvbuf: 1 << 40,
            ..TcpConfig::default()
        }
        .validate()
        .unwrap_err();
        assert!(e.contains("btl_tcp_rcvbuf"), "{e}");
    }
}
