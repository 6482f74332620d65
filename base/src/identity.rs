//! Process identity: who this process is within the job, in one place.
//!
//! Filled once at start-up from PMI (or the singleton defaults) and read by
//! every component afterwards.

/// Where this process sits in the job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProcessInfo {
    /// Global rank in the job (`MPI_COMM_WORLD` rank).
    pub rank: u32,
    /// Number of processes in the job.
    pub size: u32,
    /// Position among the processes on this node (0-based).
    pub local_rank: u32,
    /// Number of processes on this node.
    pub local_size: u32,
    /// Label of this node; processes with equal `node_id` share a node.
    pub node_id: u32,
    /// Node label of every rank, indexed by rank (`node_of[rank]`).
    pub node_of: Vec<u32>,
    /// Job identifier, unique per job on this machine, restricted to
    /// `[A-Za-z0-9_-]` so it can be part of file and segment names.
    pub job_id: String,
    /// This host's name.
    pub hostname: String,
}

impl ProcessInfo {
    /// The identity of a process started without any launcher: a job of one.
    pub fn singleton(job_id: String, hostname: String) -> Self {
        ProcessInfo {
            rank: 0,
            size: 1,
            local_rank: 0,
            local_size: 1,
            node_id: 0,
            node_of: vec![0],
            job_id,
            hostname,
        }
    }

    /// Whether `peer` runs on the same node as this process.
    pub fn is_local(&self, peer: u32) -> bool {
        self.node_of.get(peer as usize) == Some(&self.node_id)
    }

    /// Ranks that share this node, in rank order (this process included).
    pub fn local_peers(&self) -> Vec<u32> {
        (0..self.size).filter(|&r| self.is_local(r)).collect()
    }
}

/// Restricts `raw` to `[A-Za-z0-9_-]` (other bytes become `_`), for use in
/// file and shared-memory segment names.
pub fn sanitize_job_id(raw: &str) -> String {
    raw.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_peers_follow_node_labels() {
        let p = ProcessInfo {
            rank: 1,
            size: 4,
            local_rank: 0,
            local_size: 2,
            node_id: 1,
            node_of: vec![0, 1, 0, 1],
            job_id: "j".into(),
            hostname: "h".into(),
        };
        assert_eq!(p.local_peers(), vec![1, 3]);
        assert!(p.is_local(3));
        assert!(!p.is_local(2));
        assert!(!p.is_local(9));
    }

    #[test]
    fn sanitize_keeps_safe_characters_only() {
        assert_eq!(sanitize_job_id("kvs_29599_0_8.vm/x"), "kvs_29599_0_8_vm_x");
    }
}
