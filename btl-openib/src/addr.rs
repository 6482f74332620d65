//! What btl-openib publishes in the modex, and its wire layout.
//!
//! Wire-up is eager: every module creates one RC QP per peer rank before the
//! modex fence and publishes the QP numbers as an array indexed by rank (no
//! connection manager round trip; O(ranks) QPs per module, the price of a
//! wire-up that needs only the modex). After the fence, each QP is moved to
//! RTR/RTS towards the peer's QP that carries *our* rank's index.
//!
//! Key: [`MODEX_KEY`] (`btl.openib`). Value, little-endian:
//! ```text
//! b"TOIB" | u8 version (2) | u8 module count
//! per module:
//!   u8 name_len | name bytes | u8 port | u8 link (0 IB, 1 Ethernet)
//!   | u8 mtu (ibv_mtu code) | u16 lid | [u8; 16] gid | u32 psn (24 bits)
//!   | u32 tm_rndv_hdr (max_rndv_hdr_size when the module offloads tag
//!     matching, 0 otherwise: bounds the inline data of RTS sent to it)
//!   | u32 max_msg_sz (the port's largest message: bounds the rendezvous
//!     requests its NIC is asked to read)
//!   | u32 nqp | u32 qpn[nqp]   (qpn[r] = our QP for rank r; 0 = none)
//! ```

use tmpi_verbs::{Gid, LinkLayer, Mtu};

/// Modex key of btl-openib.
pub const MODEX_KEY: &str = "btl.openib";
const MAGIC: &[u8; 4] = b"TOIB";
const VERSION: u8 = 2;

/// One module's published address.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModuleAddr {
    /// Device name.
    pub device: String,
    /// Port number.
    pub port: u8,
    /// Link layer (Ethernet -> address by GID, else by LID).
    pub link: LinkLayer,
    /// Active MTU of the port.
    pub mtu: Mtu,
    /// LID (InfiniBand).
    pub lid: u16,
    /// The chosen GID (RoCE v2 on Ethernet).
    pub gid: Gid,
    /// First PSN of every QP of this module.
    pub psn: u32,
    /// `max_rndv_hdr_size` of the module's TM-SRQ, 0 without tag matching.
    pub tm_rndv_hdr: u32,
    /// The port's `max_msg_sz`.
    pub max_msg_sz: u32,
    /// `qpns[r]`: this module's QP for rank `r` (0 = none).
    pub qpns: Vec<u32>,
}

/// Why a published address could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("malformed btl.openib modex value: {0}")]
pub struct AddrError(pub String);

fn mtu_code(m: Mtu) -> u8 {
    m as u8
}

fn mtu_from(c: u8) -> Result<Mtu, AddrError> {
    Ok(match c {
        1 => Mtu::Mtu256,
        2 => Mtu::Mtu512,
        3 => Mtu::Mtu1024,
        4 => Mtu::Mtu2048,
        5 => Mtu::Mtu4096,
        o => return Err(AddrError(format!("bad MTU code {o}"))),
    })
}

/// Encodes the addresses of all modules of this process.
pub fn encode(mods: &[ModuleAddr]) -> Vec<u8> {
    let mut v = Vec::new();
    v.extend_from_slice(MAGIC);
    v.push(VERSION);
    v.push(mods.len() as u8);
    for m in mods {
        let name = m.device.as_bytes();
        v.push(name.len().min(255) as u8);
        v.extend_from_slice(&name[..name.len().min(255)]);
        v.push(m.port);
        v.push(u8::from(m.link == LinkLayer::Ethernet));
        v.push(mtu_code(m.mtu));
        v.extend_from_slice(&m.lid.to_le_bytes());
        v.extend_from_slice(&m.gid.0);
        v.extend_from_slice(&m.psn.to_le_bytes());
        v.extend_from_slice(&m.tm_rndv_hdr.to_le_bytes());
        v.extend_from_slice(&m.max_msg_sz.to_le_bytes());
        v.extend_from_slice(&(m.qpns.len() as u32).to_le_bytes());
        for q in &m.qpns {
            v.extend_from_slice(&q.to_le_bytes());
        }
    }
    v
}

struct Rd<'a>(&'a [u8]);

impl<'a> Rd<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], AddrError> {
        if self.0.len() < n {
            return Err(AddrError(format!(
                "truncated: need {n} more bytes, have {}",
                self.0.len()
            )));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn u8(&mut self) -> Result<u8, AddrError> {
        Ok(self.take(1)?[0])
    }
    fn u16(&mut self) -> Result<u16, AddrError> {
        let b = self.take(2)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }
    fn u32(&mut self) -> Result<u32, AddrError> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Decodes a peer's value. `max_ranks` bounds the QP array (the job size).
pub fn decode(bytes: &[u8], max_ranks: u32) -> Result<Vec<ModuleAddr>, AddrError> {
    let mut r = Rd(bytes);
    if r.take(4)? != MAGIC {
        return Err(AddrError("bad magic".into()));
    }
    let ver = r.u8()?;
    if ver != VERSION {
        return Err(AddrError(format!("version {ver}, expected {VERSION}")));
    }
    let n = r.u8()?;
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let len = r.u8()? as usize;
        let device = String::from_utf8(r.take(len)?.to_vec())
            .map_err(|_| AddrError("device name is not UTF-8".into()))?;
        let port = r.u8()?;
        let link = match r.u8()? {
            0 => LinkLayer::Infiniband,
            1 => LinkLayer::Ethernet,
            o => return Err(AddrError(format!("bad link layer {o}"))),
        };
        let mtu = mtu_from(r.u8()?)?;
        let lid = r.u16()?;
        let mut gid = [0u8; 16];
        gid.copy_from_slice(r.take(16)?);
        let psn = r.u32()?;
        if psn >= 1 << 24 {
            return Err(AddrError(format!("PSN {psn} exceeds 24 bits")));
        }
        let tm_rndv_hdr = r.u32()?;
        let max_msg_sz = r.u32()?;
        let nqp = r.u32()?;
        if nqp > max_ranks {
            return Err(AddrError(format!("{nqp} QPs for a job of {max_ranks}")));
        }
        let mut qpns = Vec::with_capacity(nqp as usize);
        for _ in 0..nqp {
            qpns.push(r.u32()?);
        }
        out.push(ModuleAddr {
            device,
            port,
            link,
            mtu,
            lid,
            gid: Gid(gid),
            psn,
            tm_rndv_hdr,
            max_msg_sz,
            qpns,
        });
    }
    if !r.0.is_empty() {
        return Err(AddrError(format!("{} trailing bytes", r.0.len())));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> ModuleAddr {
        ModuleAddr {
            device: "mlx5_0".into(),
            port: 1,
            link: LinkLayer::Ethernet,
            mtu: Mtu::Mtu4096,
            lid: 0,
            gid: Gid([7; 16]),
            psn: 0x00ab_cdef,
            tm_rndv_hdr: 64,
            max_msg_sz: 1 << 30,
            qpns: vec![0, 17, 18],
        }
    }

    #[test]
    fn round_trip_and_errors() {
        let v = encode(&[
            sample(),
            ModuleAddr {
                device: "x".into(),
                link: LinkLayer::Infiniband,
                lid: 9,
                ..sample()
            },
        ]);
        let d = decode(&v, 3).unwrap();
        assert_eq!(d[0], sample());
        assert_eq!(d[1].lid, 9);
        assert!(decode(&v, 2).is_err(), "QP array longer than the job");
        for cut in 0..v.len() {
            assert!(decode(&v[..cut], 3).is_err(), "truncated at {cut}");
        }
        let mut bad = v.clone();
        bad[0] = b'X';
        assert!(decode(&bad, 3).is_err());
        let mut extra = v;
        extra.push(0);
        assert!(decode(&extra, 3).is_err());
    }
}
