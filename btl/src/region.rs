//! Remote memory regions: what a process tells a peer so that the peer can
//! copy from its memory with [`crate::BtlModule::get`].

use crate::BtlError;

/// Bytes of [`RemoteRegion::to_bytes`].
pub const REMOTE_REGION_BYTES: usize = 24;

/// A registered memory region of one process, as seen by its peers.
///
/// `addr`/`len` are the owner's virtual address range; `key` is
/// BTL-specific (sm: the owner's pid, so a get can check it reads from the
/// process it believes; self: a registration id; openib: the rkey).
/// Wire form: `addr`, `len`, `key` as little-endian `u64`s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RemoteRegion {
    /// Start address in the owner's address space.
    pub addr: u64,
    /// Length in bytes.
    pub len: u64,
    /// BTL-specific access key.
    pub key: u64,
}

impl RemoteRegion {
    /// The 24-byte wire form.
    pub fn to_bytes(&self) -> [u8; REMOTE_REGION_BYTES] {
        let mut b = [0u8; REMOTE_REGION_BYTES];
        b[..8].copy_from_slice(&self.addr.to_le_bytes());
        b[8..16].copy_from_slice(&self.len.to_le_bytes());
        b[16..].copy_from_slice(&self.key.to_le_bytes());
        b
    }

    /// Parses the wire form; rejects a wrong length or a range that wraps
    /// the address space.
    pub fn from_bytes(b: &[u8]) -> Result<RemoteRegion, BtlError> {
        if b.len() != REMOTE_REGION_BYTES {
            return Err(BtlError::BadRegion(format!(
                "descriptor of {} bytes, expected {REMOTE_REGION_BYTES}",
                b.len()
            )));
        }
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        let r = RemoteRegion {
            addr: word(0),
            len: word(8),
            key: word(16),
        };
        if r.addr.checked_add(r.len).is_none() {
            return Err(BtlError::BadRegion("address range wraps".into()));
        }
        Ok(r)
    }

    /// Checks that `len` bytes at `offset` lie inside the region and returns
    /// the absolute start address.
    pub fn check_access(&self, offset: u64, len: usize) -> Result<u64, BtlError> {
        let oob = || BtlError::OutOfBounds {
            offset,
            len,
            region_len: self.len,
        };
        let end = offset.checked_add(len as u64).ok_or_else(oob)?;
        if end > self.len {
            return Err(oob());
        }
        self.addr.checked_add(offset).ok_or_else(oob)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_round_trip_and_rejects() {
        let r = RemoteRegion {
            addr: 0x7fff_0000_1000,
            len: 1 << 20,
            key: 4242,
        };
        assert_eq!(RemoteRegion::from_bytes(&r.to_bytes()).unwrap(), r);
        assert!(matches!(
            RemoteRegion::from_bytes(&[0u8; 23]),
            Err(BtlError::BadRegion(_))
        ));
        let wrap = RemoteRegion {
            addr: u64::MAX - 4,
            len: 10,
            key: 0,
        };
        assert!(RemoteRegion::from_bytes(&wrap.to_bytes()).is_err());
    }

    #[test]
    fn bounds() {
        let r = RemoteRegion {
            addr: 1000,
            len: 100,
            key: 0,
        };
        assert_eq!(r.check_access(0, 100).unwrap(), 1000);
        assert_eq!(r.check_access(99, 1).unwrap(), 1099);
        assert_eq!(r.check_access(100, 0).unwrap(), 1100);
        assert!(matches!(
            r.check_access(99, 2),
            Err(BtlError::OutOfBounds { .. })
        ));
        assert!(r.check_access(u64::MAX, 1).is_err());
    }
}
