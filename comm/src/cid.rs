//! Context ids: agreed collectively, never colliding among the live
//! communicators of a process, reused after free.
//!
//! Each process keeps a bitmap of the ids its live communicators use
//! ([`CidPool`]). A new communicator's id is agreed over the parent
//! communicator (Open MPI's approach): every member contributes the free
//! bits of a window of [`WINDOW`] ids, an allreduce with bitwise AND gives
//! the ids free everywhere, and the lowest one is taken; if the window has
//! none the next window is tried. All members see the same AND, so they
//! pick the same id. Ranks that do not join the new communicator (colour
//! `MPI_UNDEFINED`, not in the group) take part but claim nothing. Disjoint
//! communicators from one split share an id, which is harmless: their
//! members never talk to each other on it.
//!
//! Ids 0 and 1 are `MPI_COMM_WORLD` and `MPI_COMM_SELF`. The id space is
//! `coll_base_max_context_id` ids (default 65 536 = a 16-bit context field,
//! which is what the 64-bit TMH of the openib path leaves for it; the pml's
//! own match header has 32 bits). Creating a communicator when some
//! member has all ids in use fails with `MPI_ERR_OTHER` (no free context id).
//! The agreement runs in rounds (an agreement is not blocked by another of
//! the same process): in a round a rank offers its free ids only when no
//! other agreement of the process offers them and none with a lower
//! [`AgreementKey`] waits; a round where every rank offered decides, any
//! other runs again. An agreement competes for the offer only after its
//! first round, which offers nothing and ends once every rank has come to
//! the agreement: a round that holds a process's offer never waits for a
//! rank still busy elsewhere (say in another agreement that waits for that
//! very offer). So constructors may run on several threads of one
//! process at once, and non-blocking ones (`MPI_Comm_idup`) overlap.

use tmpi_base::mca::{Level, McaError, ParamSpec, Registry};

use tmpi_coll::{CollError, Result};

/// The agreements of one kind in progress in a process, by key with how
/// many under each, and the one whose round offers the process's free ids
/// (at most one at a time).
#[derive(Debug, Clone, Default)]
struct Offers {
    pending: std::collections::BTreeMap<AgreementKey, u32>,
    owner: Option<AgreementKey>,
}

impl Offers {
    fn pend(&mut self, key: AgreementKey) {
        *self.pending.entry(key).or_default() += 1;
    }

    fn unpend(&mut self, key: AgreementKey) {
        if let Some(n) = self.pending.get_mut(&key) {
            *n -= 1;
            if *n == 0 {
                self.pending.remove(&key);
            }
        }
    }

    fn take(&mut self, key: AgreementKey) -> bool {
        let first = self.pending.keys().next().copied();
        if self.owner.is_none() && first == Some(key) {
            self.owner = Some(key);
            true
        } else {
            false
        }
    }
}

/// Orders a process's agreements in progress: the parent's context id,
/// then 0 for ordinary creations or 1 + the tag of `MPI_Comm_create_group`
/// (whose groups share the parent's context id), then the order of idups.
/// Last: the parent's collective sequence number when an `MPI_Comm_idup`
/// started (several idups of one communicator pending at once are ordered
/// alike on every rank; 0 for blocking constructors).
pub type AgreementKey = (u32, i64, u32);

/// Ids agreed per allreduce.
pub const WINDOW: u32 = 1024;
/// Default size of the id space.
pub const DEFAULT_LIMIT: u32 = 1 << 16;
/// Context id of `MPI_COMM_WORLD`.
pub const WORLD_CID: u32 = 0;
/// Context id of `MPI_COMM_SELF`.
pub const SELF_CID: u32 = 1;

/// Registers `coll_base_max_context_id`.
pub fn register_params(reg: &Registry) -> Result<u32, McaError> {
    let p = reg.register_int_range(
        ParamSpec::new("coll", "base", "max_context_id")
            .help("Number of communicator context ids (the width of the context field of the match header)")
            .level(Level::DevBasic),
        i64::from(DEFAULT_LIMIT),
        i64::from(WINDOW)..=1 << 31,
    )?;
    Ok(p.value() as u32)
}

/// The ids in use by this process's live communicators.
#[derive(Debug, Clone)]
pub struct CidPool {
    used: Vec<u64>,
    /// Offers of the blocking agreements ([`Offers`]).
    blocking: Offers,
    /// Offers of the non-blocking ones (`MPI_Comm_idup`), apart: a blocking
    /// creation in the thread that has an idup pending must not wait for
    /// the idup's round, which ends only when that thread tests it. The
    /// two kinds reserve disjoint ids, so they never agree on one id.
    nonblocking: Offers,
    /// Ids offered by pending `MPI_Comm_idup` agreements ([`CidPool::reserve`]):
    /// free, but offered to no other agreement until they finish.
    reserved: Vec<u64>,
    limit: u32,
}

impl CidPool {
    /// A pool of `limit` ids (rounded up to a whole window) with world and self taken.
    pub fn new(limit: u32) -> Self {
        let limit = limit.div_ceil(WINDOW).max(1) * WINDOW;
        let mut p = CidPool {
            used: vec![0; (limit / 64) as usize],
            blocking: Offers::default(),
            nonblocking: Offers::default(),
            reserved: vec![0; (limit / 64) as usize],
            limit,
        };
        p.used[0] |= 0b11;
        p
    }

    /// Size of the id space.
    pub fn limit(&self) -> u32 {
        self.limit
    }

    /// Whether `id` is in use here.
    pub fn in_use(&self, id: u32) -> bool {
        id < self.limit && self.used[(id / 64) as usize] & (1 << (id % 64)) != 0
    }

    /// Free bits (1 = free and not reserved) of the window starting at `base`.
    pub fn free_window(&self, base: u32) -> Vec<u64> {
        let w = (base / 64) as usize;
        let n = (WINDOW / 64) as usize;
        self.used[w..w + n]
            .iter()
            .zip(&self.reserved[w..w + n])
            .map(|(u, r)| !(u | r))
            .collect()
    }

    /// Reserves the lowest `n` free ids of the window at `base` for a
    /// pending non-blocking agreement and returns them as that window's
    /// bits (all zero when the window has none).
    pub fn reserve(&mut self, base: u32, n: u32) -> Vec<u64> {
        let mut words = self.free_window(base);
        let mut left = n;
        for w in &mut words {
            let mut keep = 0u64;
            while *w != 0 && left > 0 {
                let bit = *w & w.wrapping_neg();
                keep |= bit;
                *w &= !bit;
                left -= 1;
            }
            *w = keep;
        }
        let at = (base / 64) as usize;
        for (r, w) in self.reserved[at..].iter_mut().zip(&words) {
            *r |= w;
        }
        words
    }

    /// Registers an agreement in progress (`nonblocking`: an idup).
    pub fn pend(&mut self, key: AgreementKey, nonblocking: bool) {
        self.offers(nonblocking).pend(key);
    }

    /// Ends what [`CidPool::pend`] registered.
    pub fn unpend(&mut self, key: AgreementKey, nonblocking: bool) {
        self.offers(nonblocking).unpend(key);
    }

    /// Whether the next round of the agreement under `key` may offer this
    /// process's ids: no other round of its kind offers them now, and no
    /// agreement of its kind under a lower key waits for them (MPICH's
    /// rule: the lowest one wins, so the agreements of overlapping
    /// communicators started in different orders on different ranks, or by
    /// different threads, all finish). Takes the offer when it may.
    pub fn take_offer(&mut self, key: AgreementKey, nonblocking: bool) -> bool {
        self.offers(nonblocking).take(key)
    }

    /// Ends the offer [`CidPool::take_offer`] gave.
    pub fn drop_offer(&mut self, nonblocking: bool) {
        self.offers(nonblocking).owner = None;
    }

    fn offers(&mut self, nonblocking: bool) -> &mut Offers {
        if nonblocking {
            &mut self.nonblocking
        } else {
            &mut self.blocking
        }
    }

    /// Ends a reservation made by [`CidPool::reserve`].
    pub fn unreserve(&mut self, base: u32, words: &[u64]) {
        let at = (base / 64) as usize;
        for (r, w) in self.reserved[at..].iter_mut().zip(words) {
            *r &= !w;
        }
    }

    /// The lowest free id of an agreed window.
    pub fn first_free(base: u32, words: &[u64]) -> Option<u32> {
        words
            .iter()
            .enumerate()
            .find(|(_, w)| **w != 0)
            .map(|(i, w)| base + i as u32 * 64 + w.trailing_zeros())
    }

    /// The lowest `n` ids free in `words` (a window from `base`), or `None`
    /// when the window has fewer.
    pub fn first_free_n(base: u32, words: &[u64], n: usize) -> Option<Vec<u32>> {
        let ids: Vec<u32> = words
            .iter()
            .enumerate()
            .flat_map(|(i, &w)| {
                (0..64u32)
                    .filter(move |b| w & (1 << b) != 0)
                    .map(move |b| base + i as u32 * 64 + b)
            })
            .take(n)
            .collect();
        (ids.len() == n).then_some(ids)
    }

    /// Marks `id` used; an id already in use is an internal error.
    pub fn claim(&mut self, id: u32) -> Result<()> {
        if id >= self.limit || self.in_use(id) {
            return Err(CollError::Intern(format!("context id {id} claimed twice")));
        }
        self.used[(id / 64) as usize] |= 1 << (id % 64);
        Ok(())
    }

    /// Frees `id` (world and self are never freed).
    pub fn release(&mut self, id: u32) {
        if id > SELF_CID && id < self.limit {
            self.used[(id / 64) as usize] &= !(1 << (id % 64));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_offered_to_no_other_agreement() {
        let mut p = CidPool::new(WINDOW * 2);
        p.claim(3).unwrap();
        let r = p.reserve(0, 4);
        // ids 2, 4, 5, 6 (0, 1 are world and self, 3 is used)
        assert_eq!(r[0], 0b111_0100);
        assert!(r[1..].iter().all(|&w| w == 0));
        assert_eq!(CidPool::first_free(0, &p.free_window(0)), Some(7));
        let r2 = p.reserve(0, 1);
        assert_eq!(r2[0], 1 << 7);
        p.unreserve(0, &r);
        assert_eq!(CidPool::first_free(0, &p.free_window(0)), Some(2));
        p.unreserve(0, &r2);
        assert_eq!(p.free_window(0)[0], !0b1011);
    }

    #[test]
    fn the_lowest_pending_parent_gets_the_offer_one_at_a_time() {
        let mut p = CidPool::new(WINDOW);
        let (a, b) = ((7, 0, 0), (6, 3, 0));
        p.pend(a, true);
        assert!(p.take_offer(a, true));
        p.pend(b, true);
        // b is lower but a's round holds the offer.
        assert!(!p.take_offer(b, true));
        // A blocking agreement is not held up by the idups' offer.
        p.pend((9, 0, 0), false);
        assert!(p.take_offer((9, 0, 0), false));
        p.drop_offer(false);
        p.unpend((9, 0, 0), false);
        p.drop_offer(true);
        // Now a must wait for b.
        assert!(!p.take_offer(a, true));
        assert!(p.take_offer(b, true));
        p.drop_offer(true);
        p.unpend(b, true);
        assert!(p.take_offer(a, true));
        p.drop_offer(true);
        p.unpend(a, true);
        assert!(!p.take_offer(a, true));
    }

    #[test]
    fn windows_claim_release() {
        let mut p = CidPool::new(3000);
        assert_eq!(p.limit(), 3072);
        let w = p.free_window(0);
        assert_eq!(CidPool::first_free(0, &w), Some(2));
        for id in 2..WINDOW {
            p.claim(id).unwrap();
        }
        assert_eq!(CidPool::first_free(0, &p.free_window(0)), None);
        assert_eq!(
            CidPool::first_free(WINDOW, &p.free_window(WINDOW)),
            Some(WINDOW)
        );
        assert!(p.claim(5).is_err());
        p.release(700);
        assert_eq!(CidPool::first_free(0, &p.free_window(0)), Some(700));
        p.release(0);
        assert!(p.in_use(0));
        // AND of two processes' windows.
        let mut q = CidPool::new(3000);
        q.claim(2).unwrap();
        let a = CidPool::new(3000).free_window(0);
        let b = q.free_window(0);
        let and: Vec<u64> = a.iter().zip(&b).map(|(x, y)| x & y).collect();
        assert_eq!(CidPool::first_free(0, &and), Some(3));
        assert_eq!(CidPool::first_free_n(0, &and, 1), Some(vec![3]));
    }
}
