//! [`Modex`] over PMI: binary values of any length on top of a KVS that
//! stores short text.
//!
//! Layout of a value published by rank `r` under modex key `k`:
//!
//! * Encoding: URL-safe base64 without padding (`A-Z a-z 0-9 - _`), safe on
//!   every PMI server and in both protocols, 4/3 the size of the data
//!   (hex would double it).
//! * PMI key of the first part `k:r`, of the following parts `k:r:1`,
//!   `k:r:2`, ... (`:` cannot occur in modex keys, so names never collide).
//! * The first part's value is `<len>:<parts>:<fnv1a32 hex8>:<encoded
//!   prefix>`, where `len` is the length of the original bytes, `parts` the
//!   number of PMI values (first part included), the checksum covers the
//!   original bytes; the other parts carry the rest of the encoded text in
//!   order. Each part fits [`PmiClient::value_budget`] (`vallen_max − 1`,
//!   and the 1024-byte PMI-1 line limit).
//! * Reading checks the header, every part's presence, the total length, the
//!   base64 and the checksum; any mismatch is [`ModexError::Malformed`].
//!
//! Modex keys: 1 to 40 bytes of `A-Z a-z 0-9 . _ -`.

use base64::Engine as _;

use super::client::{PmiClient, PmiError};
use crate::modex::{Modex, ModexError};

const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::URL_SAFE_NO_PAD;
/// Room reserved in the first part for `<len>:<parts>:<crc>:` (20 + 1 + 10 + 1 + 8 + 1 bytes).
const HEADER_RESERVE: usize = 41;
/// Longest modex key.
pub const MODEX_KEY_MAX: usize = 40;

/// FNV-1a, 32 bits: detects truncated or mixed-up parts (not an adversary).
fn fnv1a32(data: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &b in data {
        h ^= u32::from(b);
        h = h.wrapping_mul(0x0100_0193);
    }
    h
}

fn transport(e: PmiError) -> ModexError {
    ModexError::Transport(e.to_string())
}

/// The PMI-backed [`Modex`]: owns the [`PmiClient`] (borrow it back with
/// [`PmiModex::client`] for finalize/abort, or take it with
/// [`PmiModex::into_inner`]).
#[derive(Debug)]
pub struct PmiModex {
    client: PmiClient,
}

impl PmiModex {
    /// Wraps a connected client.
    pub fn new(client: PmiClient) -> Self {
        PmiModex { client }
    }
    /// The client underneath.
    pub fn client(&mut self) -> &mut PmiClient {
        &mut self.client
    }
    /// Gives the client back.
    pub fn into_inner(self) -> PmiClient {
        self.client
    }

    fn check_key(key: &str) -> Result<(), ModexError> {
        let bad = |reason: &str| {
            Err(ModexError::InvalidKey {
                key: key.to_string(),
                reason: reason.to_string(),
            })
        };
        if key.is_empty() {
            return bad("empty");
        }
        if key.len() > MODEX_KEY_MAX {
            return bad(&format!("longer than {MODEX_KEY_MAX} bytes"));
        }
        if !key
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
        {
            return bad("only A-Z a-z 0-9 . _ - are allowed");
        }
        Ok(())
    }

    fn part_key(key: &str, rank: u32, part: usize) -> String {
        if part == 0 {
            format!("{key}:{rank}")
        } else {
            format!("{key}:{rank}:{part}")
        }
    }
}

impl Modex for PmiModex {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        Self::check_key(key)?;
        let rank = self.client.rank();
        let encoded = B64.encode(value);
        // Budgets: the longest part key has the most digits, so measure with
        // a generous part number; every part then fits.
        let first_budget = self.client.value_budget(&Self::part_key(key, rank, 0));
        let rest_budget = self
            .client
            .value_budget(&Self::part_key(key, rank, 999_999));
        if first_budget <= HEADER_RESERVE || rest_budget < 16 {
            return Err(ModexError::InvalidKey {
                key: key.to_string(),
                reason: format!(
                    "the PMI server's limits leave no room for values (budget {first_budget})"
                ),
            });
        }
        let first_cap = first_budget - HEADER_RESERVE;
        let mut parts: Vec<&str> = Vec::new();
        let (head, mut rest) = encoded.split_at(first_cap.min(encoded.len()));
        parts.push(head);
        while !rest.is_empty() {
            let (p, r) = rest.split_at(rest_budget.min(rest.len()));
            parts.push(p);
            rest = r;
        }
        if parts.len() > 999_999 {
            return Err(ModexError::Transport(format!(
                "value of {} bytes is too large for PMI",
                value.len()
            )));
        }
        let header = format!(
            "{}:{}:{:08x}:{}",
            value.len(),
            parts.len(),
            fnv1a32(value),
            parts[0]
        );
        // Check every key before the first put so a bad key leaves nothing behind.
        for i in 0..parts.len() {
            self.client
                .check_key(&Self::part_key(key, rank, i))
                .map_err(|e| ModexError::InvalidKey {
                    key: key.to_string(),
                    reason: e.to_string(),
                })?;
        }
        // Later parts first: a reader that sees the header sees all parts
        // (all are put before the same fence anyway).
        for (i, p) in parts.iter().enumerate().skip(1) {
            self.client
                .put(&Self::part_key(key, rank, i), p)
                .map_err(transport)?;
        }
        self.client
            .put(&Self::part_key(key, rank, 0), &header)
            .map_err(transport)?;
        tracing::trace!(target: "pmi", "modex put {key}: {} bytes in {} parts", value.len(), parts.len());
        Ok(())
    }

    fn fence(&mut self) -> Result<(), ModexError> {
        self.client.fence().map_err(transport)
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, ModexError> {
        Self::check_key(key)?;
        if rank >= self.client.size() {
            return Err(ModexError::NotFound {
                rank,
                key: key.to_string(),
            });
        }
        let malformed = |reason: String| ModexError::Malformed {
            rank,
            key: key.to_string(),
            reason,
        };
        let header = self
            .client
            .get(Some(rank), &Self::part_key(key, rank, 0))
            .map_err(transport)?
            .ok_or_else(|| ModexError::NotFound {
                rank,
                key: key.to_string(),
            })?;
        let mut fields = header.splitn(4, ':');
        let (Some(len), Some(nparts), Some(crc), Some(first)) =
            (fields.next(), fields.next(), fields.next(), fields.next())
        else {
            return Err(malformed(format!(
                "header {:?} has fewer than 4 fields",
                clip(&header)
            )));
        };
        let len: usize = len
            .parse()
            .map_err(|_| malformed(format!("bad length {len:?}")))?;
        let nparts: usize = nparts
            .parse()
            .map_err(|_| malformed(format!("bad part count {nparts:?}")))?;
        if crc.len() != 8 {
            return Err(malformed(format!("bad checksum {crc:?}")));
        }
        let crc =
            u32::from_str_radix(crc, 16).map_err(|_| malformed(format!("bad checksum {crc:?}")))?;
        // Expected encoded length: base64 without padding.
        let enc_len = len
            .checked_mul(4)
            .map(|n| n.div_ceil(3))
            .ok_or_else(|| malformed("length overflows".into()))?;
        if nparts == 0 || nparts > enc_len.max(1) {
            return Err(malformed(format!("{nparts} parts for {len} bytes")));
        }
        // The parts cannot hold more than `vallen_max` bytes each: a header
        // claiming more is corrupt. Memory grows with the parts actually
        // read, never up front with the claim (found by fuzzing: a forged
        // 10^12-byte length made `String::with_capacity` abort).
        let room = (nparts - 1)
            .saturating_mul(self.client.vallen_max())
            .saturating_add(first.len());
        if room < enc_len {
            return Err(malformed(format!("{nparts} parts cannot hold {len} bytes")));
        }
        let mut encoded = String::with_capacity(enc_len.min(64 * 1024));
        encoded.push_str(first);
        for i in 1..nparts {
            if encoded.len() > enc_len {
                break;
            }
            let p = self
                .client
                .get(Some(rank), &Self::part_key(key, rank, i))
                .map_err(transport)?
                .ok_or_else(|| malformed(format!("part {i} of {nparts} is missing")))?;
            encoded.push_str(&p);
        }
        if encoded.len() != enc_len {
            return Err(malformed(format!(
                "{} encoded bytes, expected {enc_len}",
                encoded.len()
            )));
        }
        let data = B64
            .decode(encoded.as_bytes())
            .map_err(|e| malformed(format!("bad encoding: {e}")))?;
        if data.len() != len {
            return Err(malformed(format!(
                "decoded {} bytes, expected {len}",
                data.len()
            )));
        }
        if fnv1a32(&data) != crc {
            return Err(malformed("checksum mismatch".into()));
        }
        Ok(data)
    }
}

fn clip(s: &str) -> &str {
    let mut end = s.len().min(64);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn singleton_roundtrip_and_splitting() {
        let mut m = PmiModex::new(PmiClient::singleton());
        let long: Vec<u8> = (0..5000u32).map(|i| (i * 7 + 3) as u8).collect();
        m.put("btl.sm.seg", b"hello").unwrap();
        m.put("long", &long).unwrap();
        m.put("empty", b"").unwrap();
        m.fence().unwrap();
        assert_eq!(m.get(0, "btl.sm.seg").unwrap(), b"hello");
        assert_eq!(m.get(0, "long").unwrap(), long);
        assert_eq!(m.get(0, "empty").unwrap(), b"");
        assert!(matches!(
            m.get(0, "nope"),
            Err(ModexError::NotFound { rank: 0, .. })
        ));
        assert!(matches!(
            m.get(1, "long"),
            Err(ModexError::NotFound { rank: 1, .. })
        ));
        // The long value was split into several PMI values.
        assert!(m.client().get(None, "long:0:1").unwrap().is_some());
        for bad in ["", "a b", "a:b", "x;y", &"k".repeat(41)] {
            assert!(
                matches!(m.put(bad, b"v"), Err(ModexError::InvalidKey { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn corrupt_values_are_malformed() {
        let mut m = PmiModex::new(PmiClient::singleton());
        let long: Vec<u8> = (0..3000u32).map(|i| i as u8).collect();
        m.put("v", &long).unwrap();
        let good = m.client().get(None, "v:0").unwrap().unwrap();
        let part1 = m.client().get(None, "v:0:1").unwrap().unwrap();
        let cases: Vec<(&str, String)> = vec![
            ("v:0", "garbage".into()),
            ("v:0", "5:1:00000000:aGVsbG8".into()), // wrong checksum
            ("v:0", "x:1:00000000:".into()),        // bad length
            ("v:0", good.replacen(':', ":9", 1)),   // wrong part count
            ("v:0:1", part1[..part1.len() - 1].into()), // truncated part
            ("v:0:1", format!("{}!", &part1[1..])), // bad alphabet
        ];
        for (k, v) in cases {
            let mut m = PmiModex::new(PmiClient::singleton());
            m.put("v", &long).unwrap();
            m.client().put(k, &v).unwrap();
            assert!(
                matches!(m.get(0, "v"), Err(ModexError::Malformed { .. })),
                "{k}={v}"
            );
        }
        // A forged length is refused before anything is allocated for it.
        let mut m = PmiModex::new(PmiClient::singleton());
        m.client()
            .put("big:0", "999999999999999:2:00000000:aGVs")
            .unwrap();
        m.client().put("big:0:1", "bG8h").unwrap();
        assert!(matches!(m.get(0, "big"), Err(ModexError::Malformed { .. })));
        // A missing part.
        let mut m = PmiModex::new(PmiClient::singleton());
        m.client().put("w:0", &good).unwrap();
        assert!(matches!(m.get(0, "w"), Err(ModexError::Malformed { .. })));
    }
}
