//! Wire headers of the pml protocol: parsed forms (`*Hdr`, the "repr") and
//! one checked decoder ([`Header::parse`]) over a received byte slice (the
//! "view"). No I/O here; the module is self-contained so it can be fuzzed.
//!
//! Every fragment the pml hands to a BTL starts with a 4-byte common prefix:
//! `kind: u8 | flags: u8 | reserved: u16 (zero)`. All integers are
//! little-endian: the pml's BTLs (self, sm) stay inside one host; a network
//! BTL with mixed-endian peers would have to convert (Open MPI does the
//! same with its `HDR_NTOH` macros only when heterogeneous support is on).
//!
//! | kind | name  | layout after the prefix (byte offsets from 0)                    | size |
//! |------|-------|------------------------------------------------------------------|------|
//! | 1    | MATCH | ctx u32 @4, src i32 @8, tag i32 @12, seq u32 @16, then payload    | 20   |
//! | 2    | RNDV  | MATCH fields, len u64 @20, sreq u64 @28, rlen u16 @36, pad, region or inline data| 40+r (+len) |
//! | 3    | ACK   | sreq u64 @8, rreq u64 @16, want u64 @24                            | 32   |
//! | 4    | FRAG  | rreq u64 @8, offset u64 @16, then data                             | 24   |
//! | 5    | FIN   | sreq u64 @8, status i32 @16                                         | 20   |
//! | 6    | CREDIT| pad u32 @4 (zero), bytes u64 @8; flag CREDIT_REQ                    | 16   |
//! | 7    | BYE   | pad u32 @4 (zero)                                                  | 8    |
//!
//! * MATCH is an eager message: match envelope + the whole payload.
//! * RNDV (request to send) carries the envelope, the message length, the
//!   sender's request id and, when flag [`FLAG_REGION`] is set, the BTL's
//!   description of the registered send buffer (`rlen` bytes) for a get;
//!   with flag [`FLAG_INLINE`] (a synchronous send within the eager limit)
//!   the `len` bytes of the message follow instead (`rlen` 0), and the
//!   receiver answers FIN once it matched.
//! * ACK (clear to send) is the receiver's answer when it cannot pull: the
//!   sender then streams `want` bytes as FRAGs addressed to `rreq`.
//! * FIN tells the sender its rendezvous is over (data pulled, or a
//!   synchronous send matched); `status` is an MPI error class (0 = success).
//! * CREDIT returns unexpected-message credit to a sender: `bytes` of the
//!   charges of MATCH (eager) fragments the receiver has consumed (flow
//!   control of `pml_ob1_unexpected_limit`, docs/pml.md). With flag
//!   [`FLAG_CREDIT_REQ`] (and `bytes` 0) it is a waiting sender's request
//!   to return whatever is owed at once.
//! * BYE is the last fragment a finalizing process sends a peer: it sends
//!   nothing after it, and will post no receive. The peer fails what can
//!   then never complete (receives naming the sender, sends waiting for
//!   its clear-to-send) instead of waiting forever (docs/pml.md, finalize).

use thiserror::Error;

/// Kind byte of an eager fragment.
pub const KIND_MATCH: u8 = 1;
/// Kind byte of a rendezvous request.
pub const KIND_RNDV: u8 = 2;
/// Kind byte of a clear-to-send.
pub const KIND_ACK: u8 = 3;
/// Kind byte of a pipelined data fragment.
pub const KIND_FRAG: u8 = 4;
/// Kind byte of a rendezvous completion.
pub const KIND_FIN: u8 = 5;
/// Kind byte of an unexpected-message credit return.
pub const KIND_CREDIT: u8 = 6;
/// Kind byte of a finalizing process's last fragment.
pub const KIND_BYE: u8 = 7;

/// RNDV flag: the sender asked for a synchronous send (MPI_Ssend).
pub const FLAG_SYNC: u8 = 0x01;
/// RNDV flag: a registered region follows; the receiver may pull with get.
pub const FLAG_REGION: u8 = 0x02;
/// RNDV flag: the whole message follows the header (`len` bytes, no
/// region): a small synchronous send, answered with FIN once matched.
pub const FLAG_INLINE: u8 = 0x04;

/// CREDIT flag: a request for credit (the sender waits), not a return.
pub const FLAG_CREDIT_REQ: u8 = 0x01;

/// Size of an encoded [`MatchHdr`].
pub const MATCH_LEN: usize = 20;
/// Size of an encoded [`RndvHdr`] without its region bytes.
pub const RNDV_LEN: usize = 40;
/// Size of an encoded [`AckHdr`].
pub const ACK_LEN: usize = 32;
/// Size of an encoded [`FragHdr`] (data follows).
pub const FRAG_LEN: usize = 24;
/// Size of an encoded [`FinHdr`].
pub const FIN_LEN: usize = 20;
/// Size of an encoded [`CreditHdr`].
pub const CREDIT_LEN: usize = 16;
/// Size of an encoded BYE.
pub const BYE_LEN: usize = 8;
/// Largest region description accepted (BTL registration handles are small).
pub const MAX_REGION_LEN: usize = 256;

/// Why a received fragment was rejected.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum HdrError {
    /// Fewer bytes than the header needs.
    #[error("fragment of {got} bytes is shorter than its {kind} header ({need} bytes)")]
    Short {
        /// Header name.
        kind: &'static str,
        /// Bytes needed.
        need: usize,
        /// Bytes present.
        got: usize,
    },
    /// Unknown kind byte.
    #[error("unknown pml header kind {0}")]
    UnknownKind(u8),
    /// A flag or reserved field has a value this version never sends.
    #[error("invalid pml {kind} header: {what}")]
    Invalid {
        /// Header name.
        kind: &'static str,
        /// What is wrong.
        what: &'static str,
    },
}

/// Match envelope of an eager fragment (and the first part of a RNDV).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct MatchHdr {
    /// Communicator context id.
    pub ctx: u32,
    /// Sender's rank in the communicator.
    pub src: i32,
    /// Message tag (negative tags are reserved for collectives).
    pub tag: i32,
    /// Per (context, sender) sequence number, wrapping.
    pub seq: u32,
}

/// Rendezvous request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RndvHdr<'a> {
    /// Envelope.
    pub m: MatchHdr,
    /// [`FLAG_SYNC`] / [`FLAG_REGION`].
    pub flags: u8,
    /// Full message length in bytes.
    pub len: u64,
    /// Sender's request id (echoed in ACK and FIN).
    pub sreq: u64,
    /// Registered region description (empty unless [`FLAG_REGION`]).
    pub region: &'a [u8],
    /// The message itself with [`FLAG_INLINE`] (empty otherwise): sent as
    /// the fragment's payload after the header, not by `encode`.
    pub data: &'a [u8],
}

/// Clear to send (pipelined protocol).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AckHdr {
    /// Sender's request id.
    pub sreq: u64,
    /// Receiver's request id, to address FRAGs.
    pub rreq: u64,
    /// Bytes the receiver wants (≤ message length; less when truncating).
    pub want: u64,
}

/// One pipelined data fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FragHdr {
    /// Receiver's request id.
    pub rreq: u64,
    /// Offset of the data in the message.
    pub offset: u64,
}

/// End of a rendezvous.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FinHdr {
    /// Sender's request id.
    pub sreq: u64,
    /// MPI error class of the transfer on the receiver side (0 = success).
    pub status: i32,
}

/// Credit returned by a receiver (flow control of unexpected messages).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreditHdr {
    /// Sum of the charges of consumed MATCH (eager) fragments being returned.
    pub bytes: u64,
    /// [`FLAG_CREDIT_REQ`]: a sender asks for its credit (`bytes` is 0).
    pub request: bool,
}

/// A parsed fragment: header plus the bytes that follow it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Header<'a> {
    /// Eager message and its payload.
    Match(MatchHdr, &'a [u8]),
    /// Rendezvous request.
    Rndv(RndvHdr<'a>),
    /// Clear to send.
    Ack(AckHdr),
    /// Data fragment and its data.
    Frag(FragHdr, &'a [u8]),
    /// Rendezvous end.
    Fin(FinHdr),
    /// Credit return.
    Credit(CreditHdr),
    /// The sender is finalizing: nothing follows from it.
    Bye,
}

fn u32_at(b: &[u8], o: usize) -> u32 {
    let mut a = [0u8; 4];
    a.copy_from_slice(&b[o..o + 4]);
    u32::from_le_bytes(a)
}
fn i32_at(b: &[u8], o: usize) -> i32 {
    u32_at(b, o) as i32
}
fn u64_at(b: &[u8], o: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[o..o + 8]);
    u64::from_le_bytes(a)
}
fn u16_at(b: &[u8], o: usize) -> u16 {
    u16::from_le_bytes([b[o], b[o + 1]])
}

/// The flags and padding of a header kind that uses neither: the encoder
/// writes zeros, so anything else is not a header of this version (found by
/// fuzzing: the decoder used to accept any bytes there).
fn unused_zero(kind: &'static str, flags: u8, pad: &[u8]) -> Result<(), HdrError> {
    if flags != 0 {
        return Err(HdrError::Invalid {
            kind,
            what: "flags set",
        });
    }
    if pad.iter().any(|&x| x != 0) {
        return Err(HdrError::Invalid {
            kind,
            what: "padding not zero",
        });
    }
    Ok(())
}

fn need(kind: &'static str, b: &[u8], n: usize) -> Result<(), HdrError> {
    if b.len() < n {
        Err(HdrError::Short {
            kind,
            need: n,
            got: b.len(),
        })
    } else {
        Ok(())
    }
}

/// The common case of [`Header::parse`] on its own: a MATCH fragment
/// (valid exactly when `parse` would return `Header::Match`), its header
/// and payload; `None` for anything else, which `parse` then handles.
#[inline]
pub fn parse_match(b: &[u8]) -> Option<(MatchHdr, &[u8])> {
    let (h, data) = b.split_first_chunk::<MATCH_LEN>()?;
    if h[..4] != [KIND_MATCH, 0, 0, 0] {
        return None;
    }
    Some((match_fixed(h), data))
}

impl<'a> Header<'a> {
    /// Parses a received fragment. Validates lengths, reserved bytes and
    /// flags; never panics on any input.
    pub fn parse(b: &'a [u8]) -> Result<Header<'a>, HdrError> {
        need("common", b, 4)?;
        let kind = b[0];
        let flags = b[1];
        if b[2] != 0 || b[3] != 0 {
            return Err(HdrError::Invalid {
                kind: "common",
                what: "reserved bytes not zero",
            });
        }
        match kind {
            KIND_MATCH => {
                need("MATCH", b, MATCH_LEN)?;
                if flags != 0 {
                    return Err(HdrError::Invalid {
                        kind: "MATCH",
                        what: "flags set",
                    });
                }
                Ok(Header::Match(match_at(b), &b[MATCH_LEN..]))
            }
            KIND_RNDV => rndv(b, flags, None),
            KIND_ACK => {
                need("ACK", b, ACK_LEN)?;
                unused_zero("ACK", flags, &b[4..8])?;
                Ok(Header::Ack(AckHdr {
                    sreq: u64_at(b, 8),
                    rreq: u64_at(b, 16),
                    want: u64_at(b, 24),
                }))
            }
            KIND_FRAG => {
                need("FRAG", b, FRAG_LEN)?;
                unused_zero("FRAG", flags, &b[4..8])?;
                Ok(Header::Frag(
                    FragHdr {
                        rreq: u64_at(b, 8),
                        offset: u64_at(b, 16),
                    },
                    &b[FRAG_LEN..],
                ))
            }
            KIND_FIN => {
                need("FIN", b, FIN_LEN)?;
                unused_zero("FIN", flags, &b[4..8])?;
                Ok(Header::Fin(FinHdr {
                    sreq: u64_at(b, 8),
                    status: i32_at(b, 16),
                }))
            }
            KIND_CREDIT => {
                need("CREDIT", b, CREDIT_LEN)?;
                unused_zero("CREDIT", flags & !FLAG_CREDIT_REQ, &b[4..8])?;
                let bytes = u64_at(b, 8);
                let request = flags & FLAG_CREDIT_REQ != 0;
                if request && bytes != 0 {
                    return Err(HdrError::Invalid {
                        kind: "CREDIT",
                        what: "request carries bytes",
                    });
                }
                if b.len() != CREDIT_LEN {
                    return Err(HdrError::Invalid {
                        kind: "CREDIT",
                        what: "trailing bytes",
                    });
                }
                Ok(Header::Credit(CreditHdr { bytes, request }))
            }
            KIND_BYE => {
                need("BYE", b, BYE_LEN)?;
                unused_zero("BYE", flags, &b[4..8])?;
                if b.len() != BYE_LEN {
                    return Err(HdrError::Invalid {
                        kind: "BYE",
                        what: "trailing bytes",
                    });
                }
                Ok(Header::Bye)
            }
            k => Err(HdrError::UnknownKind(k)),
        }
    }
}

impl<'a> Header<'a> {
    /// Parses the header of a MATCH or RNDV fragment whose `placed` bytes
    /// after the header (a MATCH's payload, a RNDV's inline data) are not
    /// here: a tag-matching NIC left them in the receive's buffer and
    /// handed up `header` alone. Accepts exactly what [`Header::parse`]
    /// accepts of `header` followed by `placed` bytes, as a MATCH or RNDV
    /// whose header is all of `header`; the payload slices of the result
    /// are empty. Never panics.
    pub fn parse_placed(header: &'a [u8], placed: usize) -> Result<Header<'a>, HdrError> {
        need("common", header, 4)?;
        match header[0] {
            KIND_MATCH => match Header::parse(header)? {
                Header::Match(m, rest) if rest.is_empty() => Ok(Header::Match(m, rest)),
                _ => Err(HdrError::Invalid {
                    kind: "MATCH",
                    what: "header longer than a MATCH",
                }),
            },
            KIND_RNDV => {
                if header[2] != 0 || header[3] != 0 {
                    return Err(HdrError::Invalid {
                        kind: "common",
                        what: "reserved bytes not zero",
                    });
                }
                rndv(header, header[1], Some(placed))
            }
            k => Err(HdrError::UnknownKind(k)),
        }
    }
}

/// A RNDV fragment `b` (common prefix checked): its inline data are the
/// bytes after the header, or (`placed`) that many bytes elsewhere, `b`
/// then being the header alone.
fn rndv(b: &[u8], flags: u8, placed: Option<usize>) -> Result<Header<'_>, HdrError> {
    need("RNDV", b, RNDV_LEN)?;
    if flags & !(FLAG_SYNC | FLAG_REGION | FLAG_INLINE) != 0 {
        return Err(HdrError::Invalid {
            kind: "RNDV",
            what: "unknown flags",
        });
    }
    if b[38] != 0 || b[39] != 0 {
        return Err(HdrError::Invalid {
            kind: "RNDV",
            what: "padding not zero",
        });
    }
    let rlen = u16_at(b, 36) as usize;
    if rlen > MAX_REGION_LEN || (rlen > 0) != (flags & FLAG_REGION != 0) {
        return Err(HdrError::Invalid {
            kind: "RNDV",
            what: "region length disagrees with flags",
        });
    }
    need("RNDV", b, RNDV_LEN + rlen)?;
    let len = u64_at(b, 20);
    let data = &b[RNDV_LEN + rlen..];
    let data_len = match placed {
        None => data.len(),
        Some(_) if !data.is_empty() => {
            return Err(HdrError::Invalid {
                kind: "RNDV",
                what: "header longer than a RNDV",
            })
        }
        Some(n) => n,
    };
    if flags & FLAG_INLINE != 0 {
        if rlen != 0 || data_len as u64 != len {
            return Err(HdrError::Invalid {
                kind: "RNDV",
                what: "inline data disagrees with its length",
            });
        }
    } else if data_len != 0 {
        return Err(HdrError::Invalid {
            kind: "RNDV",
            what: "trailing bytes",
        });
    }
    Ok(Header::Rndv(RndvHdr {
        m: match_at(b),
        flags,
        len,
        sreq: u64_at(b, 28),
        region: &b[RNDV_LEN..RNDV_LEN + rlen],
        data,
    }))
}

/// The MATCH fields of a header whose length the caller checked (`need`).
fn match_at(b: &[u8]) -> MatchHdr {
    debug_assert!(b.len() >= MATCH_LEN);
    b.first_chunk().map_or(
        MatchHdr {
            ctx: 0,
            src: 0,
            tag: 0,
            seq: 0,
        },
        match_fixed,
    )
}

/// The MATCH fields of a fixed-size header: four loads, no bounds checks
/// (reading them byte by byte through `u32_at` is a large share of the
/// receive path's cost per small message).
#[inline]
fn match_fixed(h: &[u8; MATCH_LEN]) -> MatchHdr {
    let w = |o: usize| u32::from_le_bytes([h[o], h[o + 1], h[o + 2], h[o + 3]]);
    MatchHdr {
        ctx: w(4),
        src: w(8) as i32,
        tag: w(12) as i32,
        seq: w(16),
    }
}

fn prefix(out: &mut [u8], kind: u8, flags: u8) {
    out[0] = kind;
    out[1] = flags;
    out[2] = 0;
    out[3] = 0;
}

impl MatchHdr {
    /// The envelope the header carries (the sequence number is the pml's
    /// ordering, not matching).
    pub fn envelope(&self) -> tmpi_tm_engine::Envelope {
        tmpi_tm_engine::Envelope::new(self.ctx, self.src as u32, self.tag)
    }

    /// Encodes the eager header.
    pub fn encode(&self) -> [u8; MATCH_LEN] {
        let mut o = [0u8; MATCH_LEN];
        prefix(&mut o, KIND_MATCH, 0);
        self.put(&mut o);
        o
    }
    fn put(&self, o: &mut [u8]) {
        o[4..8].copy_from_slice(&self.ctx.to_le_bytes());
        o[8..12].copy_from_slice(&self.src.to_le_bytes());
        o[12..16].copy_from_slice(&self.tag.to_le_bytes());
        o[16..20].copy_from_slice(&self.seq.to_le_bytes());
    }
}

impl RndvHdr<'_> {
    /// Encodes the rendezvous request (header + region).
    ///
    /// # Panics
    /// Never for regions up to [`MAX_REGION_LEN`]; longer regions are a
    /// programming error of the BTL and are rejected by `debug_assert`, then
    /// truncated to an invalid (flag-less) header that the peer rejects.
    pub fn encode(&self) -> Vec<u8> {
        let mut o = vec![0u8; self.encoded_len()];
        self.encode_into(&mut o);
        o
    }

    /// Bytes [`RndvHdr::encode`] produces.
    pub fn encoded_len(&self) -> usize {
        RNDV_LEN + self.region.len().min(MAX_REGION_LEN)
    }

    /// Encodes into `o`, which must be [`RndvHdr::encoded_len`] bytes of
    /// zeros (a caller's inline buffer: no allocation).
    ///
    /// # Panics
    /// If `o` has another length.
    pub fn encode_into(&self, o: &mut [u8]) {
        let rlen = self.region.len().min(MAX_REGION_LEN);
        debug_assert_eq!(rlen, self.region.len());
        assert_eq!(o.len(), RNDV_LEN + rlen, "RNDV header buffer");
        prefix(o, KIND_RNDV, self.flags);
        self.m.put(o);
        o[20..28].copy_from_slice(&self.len.to_le_bytes());
        o[28..36].copy_from_slice(&self.sreq.to_le_bytes());
        o[36..38].copy_from_slice(&(rlen as u16).to_le_bytes());
        o[RNDV_LEN..].copy_from_slice(&self.region[..rlen]);
    }
}

impl AckHdr {
    /// Encodes the clear-to-send.
    pub fn encode(&self) -> [u8; ACK_LEN] {
        let mut o = [0u8; ACK_LEN];
        prefix(&mut o, KIND_ACK, 0);
        o[8..16].copy_from_slice(&self.sreq.to_le_bytes());
        o[16..24].copy_from_slice(&self.rreq.to_le_bytes());
        o[24..32].copy_from_slice(&self.want.to_le_bytes());
        o
    }
}

impl FragHdr {
    /// Encodes the fragment header (data is appended by the caller).
    pub fn encode(&self) -> [u8; FRAG_LEN] {
        let mut o = [0u8; FRAG_LEN];
        prefix(&mut o, KIND_FRAG, 0);
        o[8..16].copy_from_slice(&self.rreq.to_le_bytes());
        o[16..24].copy_from_slice(&self.offset.to_le_bytes());
        o
    }
}

impl FinHdr {
    /// Encodes the FIN.
    pub fn encode(&self) -> [u8; FIN_LEN] {
        let mut o = [0u8; FIN_LEN];
        prefix(&mut o, KIND_FIN, 0);
        o[8..16].copy_from_slice(&self.sreq.to_le_bytes());
        o[16..20].copy_from_slice(&self.status.to_le_bytes());
        o
    }
}

impl CreditHdr {
    /// Encodes the credit return.
    pub fn encode(&self) -> [u8; CREDIT_LEN] {
        let mut o = [0u8; CREDIT_LEN];
        let flags = if self.request { FLAG_CREDIT_REQ } else { 0 };
        prefix(&mut o, KIND_CREDIT, flags);
        o[8..16].copy_from_slice(&self.bytes.to_le_bytes());
        o
    }
}

/// Encodes a BYE.
pub fn encode_bye() -> [u8; BYE_LEN] {
    let mut o = [0u8; BYE_LEN];
    prefix(&mut o, KIND_BYE, 0);
    o
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bye_round_trips_and_rejects_extra_bytes() {
        assert_eq!(Header::parse(&encode_bye()).unwrap(), Header::Bye);
        let mut long = encode_bye().to_vec();
        long.push(0);
        assert!(Header::parse(&long).is_err());
        let mut flagged = encode_bye();
        flagged[1] = 1;
        assert!(Header::parse(&flagged).is_err());
    }

    #[test]
    fn round_trips() {
        let m = MatchHdr {
            ctx: 7,
            src: 3,
            tag: -5,
            seq: u32::MAX,
        };
        let mut e = m.encode().to_vec();
        e.extend_from_slice(b"abc");
        assert_eq!(Header::parse(&e).unwrap(), Header::Match(m, b"abc"));

        let r = RndvHdr {
            m,
            flags: FLAG_SYNC | FLAG_REGION,
            len: 1 << 40,
            sreq: 99,
            region: &[1, 2, 3],
            data: &[],
        };
        assert_eq!(Header::parse(&r.encode()).unwrap(), Header::Rndv(r.clone()));
        let a = AckHdr {
            sreq: 1,
            rreq: 2,
            want: 3,
        };
        assert_eq!(Header::parse(&a.encode()).unwrap(), Header::Ack(a));
        let f = FragHdr {
            rreq: 5,
            offset: 1 << 33,
        };
        let mut e = f.encode().to_vec();
        e.push(9);
        assert_eq!(Header::parse(&e).unwrap(), Header::Frag(f, &[9]));
        let fin = FinHdr {
            sreq: 77,
            status: 14,
        };
        assert_eq!(Header::parse(&fin.encode()).unwrap(), Header::Fin(fin));
        let c = CreditHdr {
            bytes: 1 << 35,
            request: false,
        };
        assert_eq!(Header::parse(&c.encode()).unwrap(), Header::Credit(c));
        let q = CreditHdr {
            bytes: 0,
            request: true,
        };
        assert_eq!(Header::parse(&q.encode()).unwrap(), Header::Credit(q));
        // A request with bytes, or trailing bytes, is not a CREDIT.
        let mut bad = q.encode();
        bad[8] = 1;
        assert!(matches!(Header::parse(&bad), Err(HdrError::Invalid { .. })));
        let mut long = c.encode().to_vec();
        long.push(0);
        assert!(matches!(
            Header::parse(&long),
            Err(HdrError::Invalid { .. })
        ));
    }

    #[test]
    fn rejects_bad_input() {
        assert!(matches!(Header::parse(&[]), Err(HdrError::Short { .. })));
        assert_eq!(Header::parse(&[9, 0, 0, 0]), Err(HdrError::UnknownKind(9)));
        assert!(matches!(
            Header::parse(&[KIND_MATCH, 0, 0, 0, 1]),
            Err(HdrError::Short { .. })
        ));
        let mut e = MatchHdr {
            ctx: 0,
            src: 0,
            tag: 0,
            seq: 0,
        }
        .encode();
        e[2] = 1;
        assert!(matches!(Header::parse(&e), Err(HdrError::Invalid { .. })));
        // Region flag without region bytes.
        let mut r = RndvHdr {
            m: MatchHdr {
                ctx: 0,
                src: 0,
                tag: 0,
                seq: 0,
            },
            flags: 0,
            len: 1,
            sreq: 1,
            region: &[],
            data: &[],
        }
        .encode();
        r[1] = FLAG_REGION;
        assert!(matches!(Header::parse(&r), Err(HdrError::Invalid { .. })));
        r[1] = 0x80;
        assert!(matches!(Header::parse(&r), Err(HdrError::Invalid { .. })));
        // Padding of RNDV, flags and padding of ACK/FRAG/FIN must be zero.
        let mut p = r.clone();
        p[1] = 0;
        assert!(Header::parse(&p).is_ok());
        p[38] = 1;
        assert!(matches!(Header::parse(&p), Err(HdrError::Invalid { .. })));
        for mut h in [
            AckHdr {
                sreq: 1,
                rreq: 2,
                want: 3,
            }
            .encode()
            .to_vec(),
            FragHdr { rreq: 1, offset: 2 }.encode().to_vec(),
            FinHdr { sreq: 1, status: 0 }.encode().to_vec(),
            CreditHdr {
                bytes: 7,
                request: false,
            }
            .encode()
            .to_vec(),
        ] {
            assert!(Header::parse(&h).is_ok());
            h[5] = 1;
            assert!(matches!(Header::parse(&h), Err(HdrError::Invalid { .. })));
            h[5] = 0;
            h[1] = FLAG_SYNC;
            assert!(matches!(Header::parse(&h), Err(HdrError::Invalid { .. })));
        }
        // Trailing bytes after a RNDV are rejected.
        r[1] = 0;
        r.push(0);
        assert!(matches!(Header::parse(&r), Err(HdrError::Invalid { .. })));
    }

    #[test]
    fn never_panics_on_prefixes_and_noise() {
        let r = RndvHdr {
            m: MatchHdr {
                ctx: 1,
                src: 2,
                tag: 3,
                seq: 4,
            },
            flags: FLAG_REGION,
            len: 10,
            sreq: 11,
            region: &[0xaa; 16],
            data: &[],
        }
        .encode();
        for n in 0..r.len() {
            let _ = Header::parse(&r[..n]);
        }
        // A cheap deterministic noise generator (xorshift).
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let len = (x % 64) as usize;
            let mut buf: Vec<u8> = (0..len).map(|i| (x >> (i % 8 * 8)) as u8).collect();
            if !buf.is_empty() {
                buf[0] = (x % 7) as u8;
            }
            let _ = Header::parse(&buf);
        }
    }

    /// `parse_placed(header, n)` agrees with `parse(header ++ n bytes)` on
    /// MATCH and RNDV fragments, with the payload left out; it refuses a
    /// header with bytes after it, a wrong inline length, other kinds.
    #[test]
    fn parse_placed_agrees_with_parse_of_the_whole_fragment() {
        let m = MatchHdr {
            ctx: 7,
            src: 3,
            tag: -5,
            seq: 9,
        };
        let payload = [0x11u8; 33];
        for n in [0usize, 1, 19, 33] {
            let whole = [&m.encode()[..], &payload[..n]].concat();
            assert_eq!(Header::parse(&whole), Ok(Header::Match(m, &payload[..n])));
            assert_eq!(
                Header::parse_placed(&m.encode(), n),
                Ok(Header::Match(m, &[]))
            );
        }
        let inline = RndvHdr {
            m,
            flags: FLAG_SYNC | FLAG_INLINE,
            len: 5,
            sreq: 4,
            region: &[],
            data: &[],
        };
        let h = inline.encode();
        assert!(Header::parse(&[&h[..], &payload[..5]].concat()).is_ok());
        assert_eq!(
            Header::parse_placed(&h, 5),
            Ok(Header::Rndv(inline.clone()))
        );
        for wrong in [0usize, 4, 6] {
            assert!(matches!(
                Header::parse_placed(&h, wrong),
                Err(HdrError::Invalid { .. })
            ));
        }
        let region = RndvHdr {
            m,
            flags: FLAG_REGION,
            len: 1 << 20,
            sreq: 4,
            region: &[1, 2, 3],
            data: &[],
        };
        let h = region.encode();
        assert_eq!(
            Header::parse_placed(&h, 0),
            Ok(Header::Rndv(region.clone()))
        );
        assert!(matches!(
            Header::parse_placed(&h, 1),
            Err(HdrError::Invalid { .. })
        ));
        // The header handed up must be the header alone.
        let mut long = m.encode().to_vec();
        long.push(1);
        assert!(Header::parse_placed(&long, 0).is_err());
        let mut long = h.clone();
        long.push(1);
        assert!(Header::parse_placed(&long, 0).is_err());
        // Other kinds and short input are refused, never a panic.
        let fin = FinHdr { sreq: 1, status: 0 }.encode();
        assert_eq!(
            Header::parse_placed(&fin, 0),
            Err(HdrError::UnknownKind(KIND_FIN))
        );
        for k in 0..h.len() {
            assert!(Header::parse_placed(&h[..k], 0).is_err());
        }
        let mut bad = h.clone();
        bad[2] = 1;
        assert!(Header::parse_placed(&bad, 0).is_err());
    }

    /// The fuzz target's `parse_placed` property (fuzz/fuzz_targets/
    /// pml_hdr.rs) over deterministic noise and real headers: accepted
    /// exactly when `parse` accepts the header followed by `n` bytes, with
    /// the same header.
    #[test]
    fn parse_placed_agrees_with_parse_on_noise() {
        fn check(data: &[u8]) {
            let Some((&n, header)) = data.split_first() else {
                return;
            };
            let n = usize::from(n);
            let placed = Header::parse_placed(header, n);
            let whole = [header, &vec![0u8; n][..]].concat();
            let full = match Header::parse(&whole) {
                Ok(Header::Match(m, p)) if p.len() == n => Some(Header::Match(m, &[][..])),
                Ok(Header::Rndv(r)) if r.data.len() == n => {
                    let hl = RNDV_LEN + r.region.len();
                    (hl == header.len()).then(|| {
                        Header::Rndv(RndvHdr {
                            region: &header[RNDV_LEN..hl],
                            data: &[],
                            ..r
                        })
                    })
                }
                _ => None,
            };
            assert_eq!(placed.ok(), full, "{data:?}");
        }
        let m = MatchHdr {
            ctx: 1,
            src: 2,
            tag: 3,
            seq: 4,
        };
        let reals = [
            m.encode().to_vec(),
            RndvHdr {
                m,
                flags: FLAG_REGION,
                len: 9,
                sreq: 5,
                region: &[7; 24],
                data: &[],
            }
            .encode(),
            RndvHdr {
                m,
                flags: FLAG_SYNC | FLAG_INLINE,
                len: 6,
                sreq: 5,
                region: &[],
                data: &[],
            }
            .encode(),
        ];
        let mut accepted = 0;
        for h in &reals {
            for n in 0..8u8 {
                check(&[&[n][..], h].concat());
                accepted += usize::from(Header::parse_placed(h, n.into()).is_ok());
            }
        }
        // MATCH at every n, the region RNDV at 0, the inline one at 6.
        assert_eq!(accepted, 8 + 1 + 1);
        let mut x: u64 = 0x2545_f491_4f6c_dd1d;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let pick = &reals[(x % 3) as usize];
            let mut buf = pick.clone();
            // Flip one byte, cut or extend, then a payload count.
            let at = (x >> 8) as usize % buf.len();
            if x & 1 == 0 {
                buf[at] ^= (x >> 16) as u8 | 1;
            }
            match (x >> 24) % 4 {
                0 => buf.truncate(at),
                1 => buf.push((x >> 32) as u8),
                _ => {}
            }
            let n = if x & 2 == 0 { 6 } else { (x >> 40) as u8 % 8 };
            check(&[&[n][..], &buf[..]].concat());
        }
    }
}
