//! Wire formats of the tcp BTL (no I/O): the connection handshake, the
//! fragment frame header, and the modex address value. Every length and
//! field read from the wire is validated here before anyone uses it.
//!
//! # Handshake ([`HS_LEN`] bytes per message, challenge/response)
//! ```text
//! 0   magic "TMPITCP" + version 2                       8 bytes
//! 8   kind (1 CHALLENGE, 2 HELLO, 3 ACCEPT, 4 REJECT,   1 byte, then 3 zero bytes
//!           5 DUPLICATE)
//! 12  rank of the sender                                u32 LE
//! 16  job size                                          u32 LE
//! 20  nonce (CHALLENGE: the listener's, HELLO: the      32 bytes
//!     connector's, answers: zero)
//! 52  MAC (CHALLENGE: zero)                             32 bytes
//! ```
//! 1. The accepting side sends CHALLENGE with a fresh nonce as soon as it
//!    accepts; the connection holds only a bounded pending slot until step 2.
//! 2. The connecting side checks that the CHALLENGE comes from the rank it
//!    meant to reach and answers HELLO with its own fresh nonce and a MAC
//!    (HMAC-SHA256 keyed with the job secret, see [`crate::auth`]) over
//!    both nonces, both ranks, the job size and the kind. A recorded HELLO
//!    does not verify on another connection (another listener nonce).
//! 3. The accepting side verifies the MAC and answers, MAC'd the same way
//!    (so the connecting side authenticates it too): ACCEPT (the
//!    connection carries frames from now on), REJECT (a simultaneous
//!    connect lost, see `module`) or DUPLICATE (it already has a
//!    connection with a process claiming the connecting rank: the job
//!    fails), then closes on REJECT and DUPLICATE.
//!
//! # Frames ([`FRAME_HDR_LEN`]-byte header, then `len` bytes)
//! ```text
//! 0   len      u32 LE   bytes after this header (<= WIRE_MAX_FRAME)
//! 4   kind     u8       0 DATA, 1 BYE (len 0: orderly close follows)
//! 5   tag      u8       the upper layer's BTL tag (DATA only)
//! 6   reserved u16      zero
//! ```

use std::net::Ipv4Addr;

/// Handshake magic: "TMPITCP" and protocol version 2.
pub const MAGIC: [u8; 8] = *b"TMPITCP\x02";
/// Bytes of the job secret.
pub const SECRET_LEN: usize = 32;
/// Bytes of a handshake nonce.
pub const NONCE_LEN: usize = 32;
/// Bytes of a handshake MAC (HMAC-SHA256).
pub const MAC_LEN: usize = 32;
/// Bytes of a handshake message.
pub const HS_LEN: usize = 20 + NONCE_LEN + MAC_LEN;
/// Bytes of a frame header.
pub const FRAME_HDR_LEN: usize = 8;
/// Largest frame body any tcp BTL accepts (bounds `btl_tcp_max_send_size`).
pub const WIRE_MAX_FRAME: usize = 64 << 20;
/// Most addresses a process publishes.
pub const MAX_ADDRS: usize = 16;

/// A handshake message kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HsKind {
    /// The accepting side's fresh nonce, first message on a connection.
    Challenge = 1,
    /// The connecting side's answer to the challenge.
    Hello = 2,
    /// The accepting side takes the connection.
    Accept = 3,
    /// The accepting side refuses it (a simultaneous connect lost).
    Reject = 4,
    /// The accepting side already has a connection from a process that
    /// claims the connecting side's rank.
    Duplicate = 5,
}

impl HsKind {
    fn from_byte(b: u8) -> Option<HsKind> {
        Some(match b {
            1 => HsKind::Challenge,
            2 => HsKind::Hello,
            3 => HsKind::Accept,
            4 => HsKind::Reject,
            5 => HsKind::Duplicate,
            _ => return None,
        })
    }
}

impl std::fmt::Display for HsKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            HsKind::Challenge => "CHALLENGE",
            HsKind::Hello => "HELLO",
            HsKind::Accept => "ACCEPT",
            HsKind::Reject => "REJECT",
            HsKind::Duplicate => "DUPLICATE",
        })
    }
}

/// A decoded handshake message (structure checked, MAC not: see
/// [`crate::auth`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Handshake {
    /// Message kind.
    pub kind: HsKind,
    /// Sender's world rank (as claimed).
    pub rank: u32,
    /// Sender's job size (as claimed).
    pub size: u32,
    /// The sender's nonce (zero in answers).
    pub nonce: [u8; NONCE_LEN],
    /// The MAC (zero in a CHALLENGE).
    pub mac: [u8; MAC_LEN],
}

/// Why a handshake or frame was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Not a tmpi tcp connection (or another protocol version).
    #[error("bad magic (not a tmpi tcp BTL peer, or another version)")]
    BadMagic,
    /// Unknown message kind or non-zero reserved bytes.
    #[error("malformed {what}: {detail}")]
    Malformed {
        /// Which message.
        what: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// A frame longer than [`WIRE_MAX_FRAME`].
    #[error("frame of {0} bytes exceeds the limit of {WIRE_MAX_FRAME}")]
    FrameTooLarge(u64),
}

impl Handshake {
    /// The wire form.
    pub fn encode(&self) -> [u8; HS_LEN] {
        let mut b = [0u8; HS_LEN];
        b[..8].copy_from_slice(&MAGIC);
        b[8] = self.kind as u8;
        b[12..16].copy_from_slice(&self.rank.to_le_bytes());
        b[16..20].copy_from_slice(&self.size.to_le_bytes());
        b[20..20 + NONCE_LEN].copy_from_slice(&self.nonce);
        b[20 + NONCE_LEN..].copy_from_slice(&self.mac);
        b
    }

    /// Parses a handshake message: magic, kind and reserved bytes. Rank,
    /// size and MAC are the caller's to check.
    pub fn decode(b: &[u8; HS_LEN]) -> Result<Handshake, WireError> {
        if b[..8] != MAGIC {
            return Err(WireError::BadMagic);
        }
        let kind = HsKind::from_byte(b[8]).ok_or_else(|| WireError::Malformed {
            what: "handshake",
            detail: format!("unknown kind {}", b[8]),
        })?;
        if b[9..12] != [0, 0, 0] {
            return Err(WireError::Malformed {
                what: "handshake",
                detail: "reserved bytes are not zero".into(),
            });
        }
        let mut nonce = [0u8; NONCE_LEN];
        nonce.copy_from_slice(&b[20..20 + NONCE_LEN]);
        let mut mac = [0u8; MAC_LEN];
        mac.copy_from_slice(&b[20 + NONCE_LEN..]);
        Ok(Handshake {
            kind,
            rank: u32::from_le_bytes([b[12], b[13], b[14], b[15]]),
            size: u32::from_le_bytes([b[16], b[17], b[18], b[19]]),
            nonce,
            mac,
        })
    }
}

/// Compares two secrets in time independent of where they differ.
pub fn ct_eq(a: &[u8; SECRET_LEN], b: &[u8; SECRET_LEN]) -> bool {
    let mut diff = 0u8;
    for i in 0..SECRET_LEN {
        diff |= std::hint::black_box(a[i] ^ b[i]);
    }
    std::hint::black_box(diff) == 0
}

/// Frame kinds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FrameKind {
    /// A fragment for the upper layer.
    Data,
    /// The sender finalized: an orderly close follows.
    Bye,
}

/// A decoded frame header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHdr {
    /// Bytes of the body.
    pub len: usize,
    /// Kind.
    pub kind: FrameKind,
    /// Upper-layer tag.
    pub tag: u8,
}

impl FrameHdr {
    /// The wire form. `len` must be at most [`WIRE_MAX_FRAME`] (the
    /// module checks sizes before building frames).
    pub fn encode(&self) -> [u8; FRAME_HDR_LEN] {
        let mut b = [0u8; FRAME_HDR_LEN];
        debug_assert!(self.len <= WIRE_MAX_FRAME);
        b[..4].copy_from_slice(&(self.len as u32).to_le_bytes());
        b[4] = match self.kind {
            FrameKind::Data => 0,
            FrameKind::Bye => 1,
        };
        b[5] = self.tag;
        b
    }

    /// Parses and validates a frame header.
    pub fn decode(b: &[u8; FRAME_HDR_LEN]) -> Result<FrameHdr, WireError> {
        let len = u32::from_le_bytes([b[0], b[1], b[2], b[3]]) as usize;
        if len > WIRE_MAX_FRAME {
            return Err(WireError::FrameTooLarge(len as u64));
        }
        let kind = match b[4] {
            0 => FrameKind::Data,
            1 => FrameKind::Bye,
            k => {
                return Err(WireError::Malformed {
                    what: "frame",
                    detail: format!("unknown kind {k}"),
                })
            }
        };
        if b[6] != 0 || b[7] != 0 {
            return Err(WireError::Malformed {
                what: "frame",
                detail: "reserved bytes are not zero".into(),
            });
        }
        if kind == FrameKind::Bye && (len != 0 || b[5] != 0) {
            return Err(WireError::Malformed {
                what: "frame",
                detail: "BYE with a body or tag".into(),
            });
        }
        Ok(FrameHdr {
            len,
            kind,
            tag: b[5],
        })
    }
}

/// What a process publishes in the modex: its listening port and the IPv4
/// addresses of its selected interfaces. Text form `v1 <port> <ip>,<ip>...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    /// Listening port.
    pub port: u16,
    /// Addresses (with the prefix length of their interface).
    pub addrs: Vec<(Ipv4Addr, u8)>,
}

impl Endpoint {
    /// The modex value.
    pub fn encode(&self) -> String {
        let a: Vec<String> = self
            .addrs
            .iter()
            .map(|(ip, p)| format!("{ip}/{p}"))
            .collect();
        format!("v1 {} {}", self.port, a.join(","))
    }

    /// Parses a peer's modex value (bounded, every field validated).
    pub fn decode(v: &[u8]) -> Result<Endpoint, String> {
        if v.len() > 64 + MAX_ADDRS * 20 {
            return Err(format!("{} bytes is too long", v.len()));
        }
        let s = std::str::from_utf8(v).map_err(|_| "not UTF-8".to_string())?;
        let mut it = s.split(' ');
        if it.next() != Some("v1") {
            return Err(format!("unknown format {s:?}"));
        }
        let port: u16 = it
            .next()
            .and_then(|p| p.parse().ok())
            .filter(|&p| p != 0)
            .ok_or_else(|| format!("bad port in {s:?}"))?;
        let list = it.next().unwrap_or("");
        if it.next().is_some() {
            return Err(format!("trailing fields in {s:?}"));
        }
        let mut addrs = Vec::new();
        for a in list.split(',').filter(|a| !a.is_empty()) {
            let (ip, pfx) = a
                .split_once('/')
                .ok_or_else(|| format!("bad address {a:?}"))?;
            let ip: Ipv4Addr = ip.parse().map_err(|_| format!("bad address {a:?}"))?;
            let pfx: u8 = pfx
                .parse()
                .ok()
                .filter(|&p| p <= 32)
                .ok_or_else(|| format!("bad prefix in {a:?}"))?;
            addrs.push((ip, pfx));
        }
        if addrs.is_empty() || addrs.len() > MAX_ADDRS {
            return Err(format!(
                "{} addresses (1..={MAX_ADDRS} allowed)",
                addrs.len()
            ));
        }
        Ok(Endpoint { port, addrs })
    }
}

/// Hex form of a secret (for the modex).
pub fn secret_to_hex(s: &[u8; SECRET_LEN]) -> String {
    s.iter().map(|b| format!("{b:02x}")).collect()
}

/// Parses the hex form of a secret.
pub fn secret_from_hex(v: &[u8]) -> Option<[u8; SECRET_LEN]> {
    if v.len() != 2 * SECRET_LEN {
        return None;
    }
    let mut s = [0u8; SECRET_LEN];
    for (i, c) in v.chunks(2).enumerate() {
        let hex = std::str::from_utf8(c).ok()?;
        s[i] = u8::from_str_radix(hex, 16).ok()?;
    }
    Some(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: [u8; SECRET_LEN] = [7u8; SECRET_LEN];

    #[test]
    fn handshake_round_trip_and_rejects() {
        let h = Handshake {
            kind: HsKind::Hello,
            rank: 3,
            size: 4,
            nonce: [9; NONCE_LEN],
            mac: S,
        };
        let b = h.encode();
        assert_eq!(Handshake::decode(&b).unwrap(), h);
        let mut bad = b;
        bad[0] = b'X';
        assert_eq!(Handshake::decode(&bad), Err(WireError::BadMagic));
        let mut bad = b;
        bad[7] = 1; // version 1
        assert_eq!(Handshake::decode(&bad), Err(WireError::BadMagic));
        for k in [0u8, 6, 255] {
            let mut bad = b;
            bad[8] = k;
            assert!(matches!(
                Handshake::decode(&bad),
                Err(WireError::Malformed { .. })
            ));
        }
        let mut bad = b;
        bad[10] = 1;
        assert!(matches!(
            Handshake::decode(&bad),
            Err(WireError::Malformed { .. })
        ));
        assert_eq!(HsKind::Duplicate.to_string(), "DUPLICATE");
    }

    #[test]
    fn frame_header_validation() {
        let h = FrameHdr {
            len: 1234,
            kind: FrameKind::Data,
            tag: 0x41,
        };
        assert_eq!(FrameHdr::decode(&h.encode()).unwrap(), h);
        let mut b = h.encode();
        b[..4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(
            FrameHdr::decode(&b),
            Err(WireError::FrameTooLarge(u32::MAX as u64))
        );
        let mut b = h.encode();
        b[4] = 7;
        assert!(FrameHdr::decode(&b).is_err());
        let mut b = h.encode();
        b[7] = 1;
        assert!(FrameHdr::decode(&b).is_err());
        let bye = FrameHdr {
            len: 0,
            kind: FrameKind::Bye,
            tag: 0,
        };
        assert_eq!(FrameHdr::decode(&bye.encode()).unwrap(), bye);
        let mut b = bye.encode();
        b[0] = 1;
        assert!(FrameHdr::decode(&b).is_err());
    }

    #[test]
    fn endpoint_round_trip_and_rejects() {
        let e = Endpoint {
            port: 4242,
            addrs: vec![
                ("127.0.0.1".parse().unwrap(), 8),
                ("10.77.0.1".parse().unwrap(), 24),
            ],
        };
        assert_eq!(Endpoint::decode(e.encode().as_bytes()).unwrap(), e);
        for bad in [
            &b"v2 1 127.0.0.1/8"[..],
            b"v1 0 127.0.0.1/8",
            b"v1 70000 127.0.0.1/8",
            b"v1 5 ",
            b"v1 5 127.0.0.1",
            b"v1 5 127.0.0.1/33",
            b"v1 5 300.0.0.1/8",
            b"v1 5 127.0.0.1/8 x",
            b"\xff\xfe",
        ] {
            assert!(Endpoint::decode(bad).is_err(), "{bad:?}");
        }
        assert!(Endpoint::decode(&[b'v'; 2000]).is_err());
    }

    #[test]
    fn secret_hex() {
        let s: [u8; SECRET_LEN] = std::array::from_fn(|i| (i * 37) as u8);
        assert_eq!(secret_from_hex(secret_to_hex(&s).as_bytes()), Some(s));
        assert_eq!(secret_from_hex(b"zz"), None);
        assert_eq!(secret_from_hex(&[b'g'; 64]), None);
        assert!(ct_eq(&s, &s));
        assert!(!ct_eq(&s, &S));
    }
}
