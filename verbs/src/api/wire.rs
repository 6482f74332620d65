//! Wire headers of hardware tag matching (reference/tag-matching.md §2), in
//! smoltcp style: a zero-copy view over bytes (`TmhPacket`, `RvhPacket`) and
//! a parsed, validated form (`Tmh`, `Rvh`). Everything is big-endian on the
//! wire. Parsing never panics: short or malformed input is a typed
//! [`WireError`].
//!
//! Layouts:
//! - TMH, 16 bytes: `u8 opcode | u8 reserved[3] (zero) | be32 app_ctx | be64 tag`.
//! - RVH, 16 bytes, right after the TMH: `be64 va | be32 rkey | be32 len`.

/// Size of the tag-matching header.
pub const TMH_LEN: usize = 16;
/// Size of the rendezvous header.
pub const RVH_LEN: usize = 16;

/// Why a header could not be parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WireError {
    /// Fewer bytes than the header needs.
    #[error("truncated header: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes required.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// Unknown TMH opcode.
    #[error("unknown TMH opcode {0}")]
    BadOpcode(u8),
    /// The reserved bytes of the TMH are not zero.
    #[error("TMH reserved bytes not zero")]
    Reserved,
}

/// TMH opcode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[repr(u8)]
pub enum TmhOpcode {
    /// Never matched; lands in an untagged buffer, not counted as unexpected.
    NoTag = 0,
    /// Rendezvous request: TMH | RVH | optional sender data.
    Rndv = 1,
    /// End of a rendezvous, sent by the receiver (or its NIC) to the sender.
    Fin = 2,
    /// Eager message: TMH | payload.
    Eager = 3,
}

impl TmhOpcode {
    /// Decodes a wire opcode.
    pub fn from_u8(v: u8) -> Result<Self, WireError> {
        match v {
            0 => Ok(TmhOpcode::NoTag),
            1 => Ok(TmhOpcode::Rndv),
            2 => Ok(TmhOpcode::Fin),
            3 => Ok(TmhOpcode::Eager),
            other => Err(WireError::BadOpcode(other)),
        }
    }

    /// True for the opcodes the NIC tries to match (EAGER, RNDV).
    pub fn is_tagged(self) -> bool {
        matches!(self, TmhOpcode::Eager | TmhOpcode::Rndv)
    }
}

/// Zero-copy view of a TMH at the start of `buffer`.
#[derive(Debug, Clone, Copy)]
pub struct TmhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> TmhPacket<T> {
    /// Wraps `buffer` after checking it holds at least [`TMH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let have = buffer.as_ref().len();
        if have < TMH_LEN {
            return Err(WireError::Truncated {
                need: TMH_LEN,
                have,
            });
        }
        Ok(TmhPacket { buffer })
    }
    /// Raw opcode byte.
    pub fn opcode_raw(&self) -> u8 {
        self.buffer.as_ref()[0]
    }
    /// The three reserved bytes.
    pub fn reserved(&self) -> [u8; 3] {
        let b = self.buffer.as_ref();
        [b[1], b[2], b[3]]
    }
    /// The application context (`app_ctx`, reported as `priv` in tm_info).
    pub fn app_ctx(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[4], b[5], b[6], b[7]])
    }
    /// The 64-bit tag.
    pub fn tag(&self) -> u64 {
        let b = self.buffer.as_ref();
        let mut t = [0u8; 8];
        t.copy_from_slice(&b[8..16]);
        u64::from_be_bytes(t)
    }
    /// Bytes after the TMH.
    pub fn payload(&self) -> &[u8] {
        &self.buffer.as_ref()[TMH_LEN..]
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> TmhPacket<T> {
    /// Writes all fields (reserved bytes zeroed).
    pub fn emit(&mut self, repr: &Tmh) {
        let b = self.buffer.as_mut();
        b[0] = repr.opcode as u8;
        b[1..4].fill(0);
        b[4..8].copy_from_slice(&repr.app_ctx.to_be_bytes());
        b[8..16].copy_from_slice(&repr.tag.to_be_bytes());
    }
}

/// Parsed TMH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Tmh {
    /// Opcode.
    pub opcode: TmhOpcode,
    /// Application context (tm_info `priv`).
    pub app_ctx: u32,
    /// Tag.
    pub tag: u64,
}

impl Tmh {
    /// Parses and validates the TMH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let p = TmhPacket::new_checked(bytes)?;
        if p.reserved() != [0; 3] {
            return Err(WireError::Reserved);
        }
        Ok(Tmh {
            opcode: TmhOpcode::from_u8(p.opcode_raw())?,
            app_ctx: p.app_ctx(),
            tag: p.tag(),
        })
    }
    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; TMH_LEN] {
        let mut b = [0u8; TMH_LEN];
        TmhPacket { buffer: &mut b[..] }.emit(self);
        b
    }
}

/// Zero-copy view of an RVH at the start of `buffer`.
#[derive(Debug, Clone, Copy)]
pub struct RvhPacket<T: AsRef<[u8]>> {
    buffer: T,
}

impl<T: AsRef<[u8]>> RvhPacket<T> {
    /// Wraps `buffer` after checking it holds at least [`RVH_LEN`] bytes.
    pub fn new_checked(buffer: T) -> Result<Self, WireError> {
        let have = buffer.as_ref().len();
        if have < RVH_LEN {
            return Err(WireError::Truncated {
                need: RVH_LEN,
                have,
            });
        }
        Ok(RvhPacket { buffer })
    }
    /// Remote virtual address of the sender's buffer.
    pub fn va(&self) -> u64 {
        let mut t = [0u8; 8];
        t.copy_from_slice(&self.buffer.as_ref()[0..8]);
        u64::from_be_bytes(t)
    }
    /// Remote key of the sender's buffer.
    pub fn rkey(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[8], b[9], b[10], b[11]])
    }
    /// Length to read.
    pub fn len(&self) -> u32 {
        let b = self.buffer.as_ref();
        u32::from_be_bytes([b[12], b[13], b[14], b[15]])
    }
    /// True when the length field is zero.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: AsRef<[u8]> + AsMut<[u8]>> RvhPacket<T> {
    /// Writes all fields.
    pub fn emit(&mut self, repr: &Rvh) {
        let b = self.buffer.as_mut();
        b[0..8].copy_from_slice(&repr.va.to_be_bytes());
        b[8..12].copy_from_slice(&repr.rkey.to_be_bytes());
        b[12..16].copy_from_slice(&repr.len.to_be_bytes());
    }
}

/// Parsed RVH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Rvh {
    /// Sender buffer address.
    pub va: u64,
    /// Sender buffer rkey.
    pub rkey: u32,
    /// Bytes to read.
    pub len: u32,
}

impl Rvh {
    /// Parses the RVH at the start of `bytes`.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let p = RvhPacket::new_checked(bytes)?;
        Ok(Rvh {
            va: p.va(),
            rkey: p.rkey(),
            len: p.len(),
        })
    }
    /// The 16 wire bytes.
    pub fn to_bytes(&self) -> [u8; RVH_LEN] {
        let mut b = [0u8; RVH_LEN];
        RvhPacket { buffer: &mut b[..] }.emit(self);
        b
    }
}

/// A whole tagged message header: the TMH and, for RNDV/FIN, the RVH.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TagHeader {
    /// The TMH.
    pub tmh: Tmh,
    /// The RVH (present for RNDV, and for FIN when the message carries one).
    pub rvh: Option<Rvh>,
}

impl TagHeader {
    /// Parses the headers at the start of a message. An RNDV message must
    /// carry an RVH; a FIN carries one when at least 32 bytes are present.
    pub fn parse(bytes: &[u8]) -> Result<Self, WireError> {
        let tmh = Tmh::parse(bytes)?;
        let rvh = match tmh.opcode {
            TmhOpcode::Rndv => Some(Rvh::parse(&bytes[TMH_LEN..])?),
            TmhOpcode::Fin if bytes.len() >= TMH_LEN + RVH_LEN => {
                Some(Rvh::parse(&bytes[TMH_LEN..])?)
            }
            _ => None,
        };
        Ok(TagHeader { tmh, rvh })
    }
    /// Number of header bytes (16 or 32).
    pub fn header_len(&self) -> usize {
        TMH_LEN + if self.rvh.is_some() { RVH_LEN } else { 0 }
    }
    /// Writes the headers into `out` (which must hold `header_len()` bytes);
    /// returns the number of bytes written.
    pub fn emit(&self, out: &mut [u8]) -> Result<usize, WireError> {
        let need = self.header_len();
        if out.len() < need {
            return Err(WireError::Truncated {
                need,
                have: out.len(),
            });
        }
        out[..TMH_LEN].copy_from_slice(&self.tmh.to_bytes());
        if let Some(r) = &self.rvh {
            out[TMH_LEN..TMH_LEN + RVH_LEN].copy_from_slice(&r.to_bytes());
        }
        Ok(need)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tmh_round_trip_is_big_endian() {
        let t = Tmh {
            opcode: TmhOpcode::Eager,
            app_ctx: 0x0102_0304,
            tag: 0x1122_3344_5566_7788,
        };
        let b = t.to_bytes();
        assert_eq!(b[0], 3);
        assert_eq!(&b[4..8], &[1, 2, 3, 4]);
        assert_eq!(b[8], 0x11);
        assert_eq!(b[15], 0x88);
        assert_eq!(Tmh::parse(&b).unwrap(), t);
    }

    #[test]
    fn tmh_errors_are_typed() {
        assert_eq!(
            Tmh::parse(&[3; 5]),
            Err(WireError::Truncated { need: 16, have: 5 })
        );
        let mut b = [0u8; 16];
        b[0] = 9;
        assert_eq!(Tmh::parse(&b), Err(WireError::BadOpcode(9)));
        b[0] = 3;
        b[2] = 1;
        assert_eq!(Tmh::parse(&b), Err(WireError::Reserved));
    }

    #[test]
    fn rndv_header_needs_rvh() {
        let h = TagHeader {
            tmh: Tmh {
                opcode: TmhOpcode::Rndv,
                app_ctx: 7,
                tag: 9,
            },
            rvh: Some(Rvh {
                va: 0xdead_beef_0000,
                rkey: 0x55,
                len: 4096,
            }),
        };
        let mut out = [0u8; 40];
        assert_eq!(h.emit(&mut out).unwrap(), 32);
        assert_eq!(TagHeader::parse(&out).unwrap(), h);
        assert!(matches!(
            TagHeader::parse(&out[..20]),
            Err(WireError::Truncated { need: 16, have: 4 })
        ));
    }
}
