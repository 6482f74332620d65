//! `--bind-to core`: which logical CPUs each rank gets.
//!
//! A *core* is a set of hardware threads that share one physical core, read
//! from `/sys/devices/system/cpu/cpuN/topology/thread_siblings_list`, and
//! restricted to the CPUs the launcher itself may use (its affinity mask).
//! Cores are ordered by their lowest CPU number; rank `r` of `n` is bound to
//! all allowed hardware threads of core `r` while the ranks fit, and of core
//! `r * ncores / n` when they outnumber the cores (the launcher warns): in
//! blocks, so that neighbouring ranks share a core, as the trees and
//! rank-neighbour exchanges of the collectives pair them (a binomial
//! reduce's first-round receivers then each have a core; docs/coll.md,
//! "Binding when ranks outnumber cores"). Without readable topology every allowed
//! CPU counts as a core of its own.

use std::collections::BTreeMap;
use std::path::Path;

/// Parses a Linux CPU list such as `0-3,8,10-11`. `None` when malformed.
pub fn parse_cpu_list(s: &str) -> Option<Vec<usize>> {
    let mut out = Vec::new();
    let s = s.trim();
    if s.is_empty() {
        return Some(out);
    }
    for part in s.split(',') {
        match part.split_once('-') {
            Some((a, b)) => {
                let a: usize = a.trim().parse().ok()?;
                let b: usize = b.trim().parse().ok()?;
                if b < a || b - a > 1 << 16 {
                    return None;
                }
                out.extend(a..=b);
            }
            None => out.push(part.trim().parse().ok()?),
        }
    }
    Some(out)
}

/// Groups the `allowed` CPUs into cores using the topology under
/// `sysfs_cpu` (normally `/sys/devices/system/cpu`). Each core's CPU list is
/// ascending; cores are ordered by their first CPU.
pub fn cores(allowed: &[usize], sysfs_cpu: &Path) -> Vec<Vec<usize>> {
    let mut by_first: BTreeMap<usize, Vec<usize>> = BTreeMap::new();
    for &cpu in allowed {
        let file = sysfs_cpu.join(format!("cpu{cpu}/topology/thread_siblings_list"));
        let siblings = std::fs::read_to_string(&file)
            .ok()
            .and_then(|s| parse_cpu_list(&s))
            .filter(|v| v.contains(&cpu))
            .unwrap_or_else(|| vec![cpu]);
        let mut core: Vec<usize> = siblings
            .into_iter()
            .filter(|c| allowed.contains(c))
            .collect();
        core.sort_unstable();
        core.dedup();
        by_first.entry(core[0]).or_insert(core);
    }
    by_first.into_values().collect()
}

/// The CPUs of rank `rank` of `nprocs` given the `cores` (must not be
/// empty): core `rank` while the ranks fit, else blocks of neighbouring
/// ranks per core (sizes differing by at most one).
pub fn cpus_for_rank(cores: &[Vec<usize>], rank: u32, nprocs: u32) -> &[usize] {
    let (r, n, c) = (rank as usize, nprocs as usize, cores.len());
    let core = if n <= c { r } else { r * c / n };
    &cores[core.min(c - 1)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists() {
        assert_eq!(
            parse_cpu_list("0-3,8,10-11\n"),
            Some(vec![0, 1, 2, 3, 8, 10, 11])
        );
        assert_eq!(parse_cpu_list("5"), Some(vec![5]));
        assert_eq!(parse_cpu_list(""), Some(vec![]));
        assert_eq!(parse_cpu_list("3-1"), None);
        assert_eq!(parse_cpu_list("a"), None);
    }

    #[test]
    fn ranks_fill_cores_in_blocks_when_they_outnumber_them() {
        let c: Vec<Vec<usize>> = (0..3).map(|i| vec![i]).collect();
        let on = |n: u32| -> Vec<usize> { (0..n).map(|r| cpus_for_rank(&c, r, n)[0]).collect() };
        assert_eq!(on(2), [0, 1]);
        assert_eq!(on(3), [0, 1, 2]);
        assert_eq!(on(4), [0, 0, 1, 2]);
        assert_eq!(on(6), [0, 0, 1, 1, 2, 2]);
        assert_eq!(on(8), [0, 0, 0, 1, 1, 1, 2, 2]);
        // Every core gets ranks, block sizes differ by at most one.
        for n in 4..40u32 {
            let v = on(n);
            let per: Vec<usize> = (0..3)
                .map(|k| v.iter().filter(|&&x| x == k).count())
                .collect();
            assert!(v.windows(2).all(|w| w[0] <= w[1]), "{n}: {v:?}");
            assert!(
                per.iter().max().unwrap() - per.iter().min().unwrap() <= 1,
                "{n}: {per:?}"
            );
        }
    }

    #[test]
    fn cores_from_fake_sysfs() {
        let d = std::env::temp_dir().join(format!("tmpi-binding-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        // 4 CPUs, 2 cores with hyperthreads: {0,2} and {1,3}.
        for (cpu, sib) in [(0, "0,2"), (1, "1,3"), (2, "0,2"), (3, "1,3")] {
            let t = d.join(format!("cpu{cpu}/topology"));
            std::fs::create_dir_all(&t).unwrap();
            std::fs::write(t.join("thread_siblings_list"), sib).unwrap();
        }
        assert_eq!(cores(&[0, 1, 2, 3], &d), vec![vec![0, 2], vec![1, 3]]);
        // Restricted affinity: only CPU 2 of the first core is allowed.
        assert_eq!(cores(&[1, 2, 3], &d), vec![vec![1, 3], vec![2]]);
        // No topology: one core per CPU.
        assert_eq!(cores(&[7, 5], &d.join("none")), vec![vec![5], vec![7]]);
        let c = cores(&[0, 1, 2, 3], &d);
        assert_eq!(cpus_for_rank(&c, 1, 2), &[1, 3]);
        assert_eq!(cpus_for_rank(&c, 1, 4), &[0, 2]);
        assert_eq!(cpus_for_rank(&c, 2, 4), &[1, 3]);
        std::fs::remove_dir_all(&d).unwrap();
    }
}
