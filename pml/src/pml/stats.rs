//! The pml's counters: protocol statistics, the matcher's counters and
//! queue depths, live requests, and the BTL that carried each peer.

use crate::core::Stats;

use super::Pml;

impl Pml {
    /// Protocol counters.
    pub fn stats(&self) -> Stats {
        self.lock().core.stats()
    }

    /// The matcher's counters (the fields of the `pml_stats` line).
    pub fn match_counters(&self) -> tmpi_tm_engine::split::SplitStats {
        self.lock().core.match_counters()
    }

    /// The matcher's queue depths and their high-water marks.
    pub fn queue_stats(&self) -> tmpi_tm_engine::Stats {
        self.lock().core.queue_stats()
    }

    /// Whether world rank `w` called `MPI_Finalize` (its BYE arrived and
    /// was applied; docs/pml.md, finalize).
    pub fn peer_gone(&self, w: u32) -> bool {
        self.lock().core.peer_gone(w)
    }

    /// Requests not yet released (for leak checks in tests).
    pub fn live_requests(&self) -> usize {
        self.lock().core.live_requests()
    }

    /// `pml_peers rank=R self=[..] sm=[..] tcp=[..] openib=[..]`: the BTL
    /// that carried each peer (printed with `pml_stats`, docs/pml.md).
    pub fn peers_line(&self) -> String {
        let g = self.lock();
        let mut by: Vec<(String, Vec<u32>)> = ["self", "sm", "tcp", "openib"]
            .iter()
            .map(|n| (n.to_string(), Vec::new()))
            .collect();
        for p in 0..g.net.size() {
            let name = g.net.peer_btl(p).unwrap_or("none");
            match by.iter_mut().find(|(n, _)| n == name) {
                Some((_, v)) => v.push(p),
                None => by.push((name.to_string(), vec![p])),
            }
        }
        let mut line = format!("pml_peers rank={}", self.me);
        for (n, v) in by {
            let v: Vec<String> = v.iter().map(u32::to_string).collect();
            line.push_str(&format!(" {n}=[{}]", v.join(",")));
        }
        line
    }
}
