//! Removing the shared-memory files of processes that died without
//! cleaning up (a job killed while it was setting up), for every layer
//! that names its `/dev/shm` files after the creating process:
//! `<prefix><pid>.<anything>`.

use std::path::Path;

/// Unlinks the files `/dev/shm/<prefix><pid>.*` whose creator `pid` no
/// longer exists and returns their names. `prefix` must end where the pid
/// starts (`"tmpi-coll."`). A process of another pid namespace looks dead
/// here: its file is unlinked, which leaves existing mappings intact and
/// makes a late opener fail (callers treat that as "no segment").
pub fn sweep_dead_creators(prefix: &str) -> Vec<String> {
    let Ok(dir) = std::fs::read_dir("/dev/shm") else {
        return Vec::new();
    };
    let mut removed = Vec::new();
    for e in dir.flatten() {
        let name = e.file_name();
        let name = name.to_string_lossy();
        let Some(pid) = name
            .strip_prefix(prefix)
            .and_then(|rest| rest.split('.').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() && std::fs::remove_file(e.path()).is_ok() {
            removed.push(name.into_owned());
        }
    }
    removed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sweep_removes_only_files_of_dead_processes() {
        let prefix = format!("tmpi-base-sweep-test{}.", std::process::id());
        // pid_max is at most 2^22: this pid cannot exist.
        let dead = format!("/dev/shm/{prefix}4999999.0");
        let alive = format!("/dev/shm/{prefix}{}.0", std::process::id());
        std::fs::write(&dead, b"x").unwrap();
        std::fs::write(&alive, b"x").unwrap();
        // The prefix ends in a dot, so the pid is what follows it.
        assert_eq!(sweep_dead_creators(&prefix).len(), 1);
        assert!(!Path::new(&dead).exists());
        assert!(Path::new(&alive).exists());
        std::fs::remove_file(&alive).unwrap();
    }
}
