//! Admission of inbound connections that have not authenticated yet, and
//! the bounded-rate log of refused ones (no I/O).
//!
//! An unauthenticated connection holds one *pending* slot until it proves
//! the job secret or its deadline (`btl_tcp_handshake_timeout`) passes.
//! Slots are bounded twice: at most `per_addr` for one source address and
//! at most `total` altogether. A new connection beyond either bound evicts
//! the **oldest** pending connection (of that address, or overall) instead
//! of being refused: an outsider holding idle connections only ever
//! displaces its own older ones from its address, and a rank connecting
//! later always gets a slot (its handshake then has to finish before
//! `per_addr` newer connections from the same address arrive; a rank whose
//! attempt was evicted connects again, see `module`).

use std::net::IpAddr;
use std::time::{Duration, Instant};

/// One pending (unauthenticated) inbound connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// The module's connection slot.
    pub slot: usize,
    /// Its source address.
    pub ip: IpAddr,
    /// When it was accepted.
    pub since: Instant,
}

/// The bounds on pending connections.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Pending connections from one source address, at most.
    pub per_addr: usize,
    /// Pending connections altogether, at most.
    pub total: usize,
}

/// The pending connection to evict before admitting one from `ip`, if any.
pub fn eviction(pending: &[Pending], ip: IpAddr, limits: Limits) -> Option<Pending> {
    let oldest = |it: &mut dyn Iterator<Item = &Pending>| it.min_by_key(|p| p.since).copied();
    let same: Vec<&Pending> = pending.iter().filter(|p| p.ip == ip).collect();
    if same.len() >= limits.per_addr.max(1) {
        return oldest(&mut same.into_iter());
    }
    if pending.len() >= limits.total.max(1) {
        return oldest(&mut pending.iter());
    }
    None
}

/// Refused inbound connections, logged at a bounded rate: the first one
/// in full, later ones as a count at most once per `every` (and the rest
/// at finalize, [`RejectLog::flush`]).
#[derive(Debug)]
pub struct RejectLog {
    every: Duration,
    last_line: Option<Instant>,
    unreported: u64,
    last: Option<(String, String)>,
}

impl RejectLog {
    /// A log that prints a count at most once per `every`.
    pub fn new(every: Duration) -> RejectLog {
        RejectLog {
            every,
            last_line: None,
            unreported: 0,
            last: None,
        }
    }

    /// Records a refusal of a connection from `from` for `why`; returns the
    /// line to log now, if one is due.
    pub fn note(&mut self, now: Instant, from: &str, why: &str) -> Option<String> {
        let Some(at) = self.last_line else {
            self.last_line = Some(now);
            return Some(format!(
                "refused a connection from {from}: {why} (further refusals are counted and \
                 reported at most every {} s)",
                self.every.as_secs()
            ));
        };
        self.unreported += 1;
        self.last = Some((from.to_string(), why.to_string()));
        if now.duration_since(at) < self.every {
            return None;
        }
        self.last_line = Some(now);
        self.take_line()
    }

    /// The line for refusals not reported yet (at finalize), if any.
    pub fn flush(&mut self) -> Option<String> {
        self.take_line()
    }

    fn take_line(&mut self) -> Option<String> {
        if self.unreported == 0 {
            return None;
        }
        let n = std::mem::take(&mut self.unreported);
        let (from, why) = self.last.take().unwrap_or_default();
        Some(format!(
            "refused {n} more connection(s) that did not authenticate (the last from {from}: {why})"
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: Limits = Limits {
        per_addr: 2,
        total: 3,
    };

    fn p(slot: usize, ip: &str, t0: Instant, ms: u64) -> Pending {
        Pending {
            slot,
            ip: ip.parse().unwrap(),
            since: t0 + Duration::from_millis(ms),
        }
    }

    #[test]
    fn evicts_the_oldest_of_the_address_then_overall() {
        let t0 = Instant::now();
        let a = "127.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(eviction(&[], a, L), None);
        let one = [p(0, "127.0.0.1", t0, 5)];
        assert_eq!(eviction(&one, a, L), None);
        let two = [p(0, "127.0.0.1", t0, 5), p(1, "127.0.0.1", t0, 1)];
        assert_eq!(eviction(&two, a, L).map(|e| e.slot), Some(1));
        assert_eq!(eviction(&two, b, L), None, "another address has room");
        let three = [
            p(0, "127.0.0.1", t0, 5),
            p(1, "10.0.0.3", t0, 9),
            p(2, "10.0.0.4", t0, 2),
        ];
        assert_eq!(eviction(&three, b, L).map(|e| e.slot), Some(2));
    }

    #[test]
    fn reject_log_is_bounded() {
        let t0 = Instant::now();
        let mut log = RejectLog::new(Duration::from_secs(10));
        let mut lines = Vec::new();
        for i in 0..10_000u64 {
            let now = t0 + Duration::from_millis(i * 3); // 30 s
            lines.extend(log.note(now, "127.0.0.1:1", "bad magic"));
        }
        lines.extend(log.flush());
        assert!(lines[0].contains("refused a connection from 127.0.0.1:1: bad magic"));
        assert!(lines.len() <= 5, "{lines:?}");
        let counted: u64 = lines[1..]
            .iter()
            .map(|l| {
                l["refused ".len()..]
                    .split(' ')
                    .next()
                    .unwrap()
                    .parse::<u64>()
                    .unwrap()
            })
            .sum();
        assert_eq!(counted, 9_999);
        assert_eq!(log.flush(), None);
    }
}
