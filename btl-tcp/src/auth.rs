//! Authentication of the connection handshake (see [`crate::wire`]): the
//! MAC over a handshake transcript, keyed with the job secret, and the
//! source of fresh nonces.
//!
//! MAC = HMAC-SHA256(job secret, `"tmpi-btl-tcp-v2"` ‖ kind ‖ sender rank ‖
//! receiver rank ‖ job size ‖ listener nonce ‖ connector nonce). Both
//! nonces are in every MAC, so a message recorded on one connection does
//! not verify on another (the listener's nonce differs), and the kind and
//! direction are bound so that a HELLO cannot be reflected as an ACCEPT.

use std::io::Read;

use hmac::{Hmac, Mac};
use sha2::Sha256;

use crate::wire::{HsKind, MAC_LEN, NONCE_LEN, SECRET_LEN};

type HmacSha256 = Hmac<Sha256>;

/// Domain separation label of every MAC.
const LABEL: &[u8] = b"tmpi-btl-tcp-v2";

/// What a handshake MAC covers.
#[derive(Debug, Clone, Copy)]
pub struct Transcript<'a> {
    /// The message kind.
    pub kind: HsKind,
    /// Rank of the message's sender.
    pub from: u32,
    /// Rank of its receiver.
    pub to: u32,
    /// Job size.
    pub size: u32,
    /// The accepting side's nonce (from its CHALLENGE).
    pub listener_nonce: &'a [u8; NONCE_LEN],
    /// The connecting side's nonce (from its HELLO).
    pub connector_nonce: &'a [u8; NONCE_LEN],
}

impl Transcript<'_> {
    fn keyed(&self, secret: &[u8; SECRET_LEN]) -> HmacSha256 {
        // HMAC takes keys of any length: this cannot fail.
        let mut m = <HmacSha256 as Mac>::new_from_slice(secret).expect("HMAC key of any length");
        m.update(LABEL);
        m.update(&[self.kind as u8]);
        m.update(&self.from.to_le_bytes());
        m.update(&self.to.to_le_bytes());
        m.update(&self.size.to_le_bytes());
        m.update(self.listener_nonce);
        m.update(self.connector_nonce);
        m
    }

    /// The MAC of this transcript.
    pub fn mac(&self, secret: &[u8; SECRET_LEN]) -> [u8; MAC_LEN] {
        self.keyed(secret).finalize().into_bytes().into()
    }

    /// Whether `mac` is this transcript's (compared in constant time).
    pub fn verify(&self, secret: &[u8; SECRET_LEN], mac: &[u8; MAC_LEN]) -> bool {
        self.keyed(secret).verify_slice(mac).is_ok()
    }
}

/// Fresh, unpredictable nonces: HMAC-SHA256 of a counter under a key read
/// once from the kernel's random source (no system call per connection,
/// so a flood of connections costs no file opens).
pub struct NonceSource {
    key: [u8; 32],
    counter: u64,
}

impl std::fmt::Debug for NonceSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NonceSource")
            .field("counter", &self.counter)
            .finish_non_exhaustive()
    }
}

impl NonceSource {
    /// A source keyed from `/dev/urandom`.
    pub fn new() -> std::io::Result<NonceSource> {
        let mut key = [0u8; 32];
        std::fs::File::open("/dev/urandom")?.read_exact(&mut key)?;
        Ok(NonceSource { key, counter: 0 })
    }

    /// The next nonce (never repeats within this process).
    pub fn next_nonce(&mut self) -> [u8; NONCE_LEN] {
        self.counter += 1;
        let mut m = <HmacSha256 as Mac>::new_from_slice(&self.key).expect("HMAC key");
        m.update(b"tmpi-btl-tcp-nonce");
        m.update(&self.counter.to_le_bytes());
        m.finalize().into_bytes().into()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: [u8; SECRET_LEN] = [7; SECRET_LEN];

    fn t<'a>(
        kind: HsKind,
        from: u32,
        nl: &'a [u8; NONCE_LEN],
        nc: &'a [u8; NONCE_LEN],
    ) -> Transcript<'a> {
        Transcript {
            kind,
            from,
            to: 1 - from,
            size: 2,
            listener_nonce: nl,
            connector_nonce: nc,
        }
    }

    #[test]
    fn mac_binds_every_field() {
        let (nl, nc) = ([1u8; NONCE_LEN], [2u8; NONCE_LEN]);
        let good = t(HsKind::Hello, 0, &nl, &nc);
        let mac = good.mac(&S);
        assert!(good.verify(&S, &mac));
        let mut other = S;
        other[0] ^= 1;
        assert!(!good.verify(&other, &mac), "another secret");
        let nl2 = [3u8; NONCE_LEN];
        assert!(
            !t(HsKind::Hello, 0, &nl2, &nc).verify(&S, &mac),
            "replayed on another connection"
        );
        assert!(
            !t(HsKind::Accept, 0, &nl, &nc).verify(&S, &mac),
            "reflected as another kind"
        );
        assert!(
            !t(HsKind::Hello, 1, &nl, &nc).verify(&S, &mac),
            "other rank"
        );
        let sized = Transcript { size: 3, ..good };
        assert!(!sized.verify(&S, &mac), "other job size");
        let mut flipped = mac;
        flipped[31] ^= 0x80;
        assert!(!good.verify(&S, &flipped));
    }

    #[test]
    fn nonces_are_fresh() {
        let mut a = NonceSource::new().unwrap();
        let mut b = NonceSource::new().unwrap();
        let (x, y) = (a.next_nonce(), a.next_nonce());
        assert_ne!(x, y);
        assert_ne!(x, b.next_nonce(), "differently keyed sources differ");
    }
}
