//! Per-peer BTL selection (the bml's job in Open MPI): for each peer, the
//! reachable module with the highest exclusivity.

/// For each world rank `0..size`, the index (into `modules`) of the module
/// that should carry its traffic, or `None` if no module reaches it.
///
/// `modules[i]` is `(exclusivity, reachable peers)` of module `i`. Ties go
/// to the module listed first (the pml lists them in component preference
/// order). Peers `>= size` in a reachable list are ignored.
pub fn best_per_peer(size: u32, modules: &[(u32, &[u32])]) -> Vec<Option<usize>> {
    let mut best: Vec<Option<(usize, u32)>> = vec![None; size as usize];
    for (i, (excl, peers)) in modules.iter().enumerate() {
        for &p in peers.iter() {
            if let Some(slot) = best.get_mut(p as usize) {
                match slot {
                    Some((_, e)) if *e >= *excl => {}
                    _ => *slot = Some((i, *excl)),
                }
            }
        }
    }
    best.into_iter().map(|b| b.map(|(i, _)| i)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{EXCLUSIVITY_DEFAULT, EXCLUSIVITY_HIGH};

    #[test]
    fn highest_exclusivity_wins_per_peer() {
        let selfp = [1u32];
        let sm = [0u32, 1, 2];
        let net = [0u32, 2, 3, 9];
        let sel = best_per_peer(
            4,
            &[
                (EXCLUSIVITY_DEFAULT, &net),
                (EXCLUSIVITY_HIGH - 1, &sm),
                (EXCLUSIVITY_HIGH, &selfp),
            ],
        );
        assert_eq!(sel, vec![Some(1), Some(2), Some(1), Some(0)]);
        let none = best_per_peer(2, &[]);
        assert_eq!(none, vec![None, None]);
        // ties: first listed wins
        let a = [0u32];
        assert_eq!(best_per_peer(1, &[(5, &a), (5, &a)]), vec![Some(0)]);
    }
}
