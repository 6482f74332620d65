//! The per-job session: job id, session directory and the files a job may
//! leave on disk.
//!
//! Every job started by `tmpirun` gets
//! * a **job id** `tmpi-<pid>-<16 hex digits>` (only `[A-Za-z0-9_-]`), also
//!   used as the PMI kvsname and exported to the ranks as `TMPI_JOB_ID`;
//! * a **session directory** `<tmp>/tmpi-session-<job id>` where `<tmp>` is
//!   `$TMPDIR` if set to an absolute path, else `/tmp`. It is created
//!   exclusively (an existing path of that name is never reused) with mode
//!   0700, and exported as `TMPI_SESSION_DIR`.
//!
//! [`Session::cleanup`] (also run by `Drop`) removes the directory with
//! everything in it, and every shared-memory segment of the job that a
//! crashed rank may have left: the `/dev/shm/tmpi-*` files with the job id
//! in their name (btl-sm's `tmpi-sm.<job id>.<rank>`, coll sm's
//! `tmpi-coll.<pid>.<job id>.<n>`, see [`is_job_segment`]). Cleanup is
//! idempotent and never follows symbolic links out of the directory.
//!
//! If `tmpirun` itself is killed with SIGKILL, its clean-up guard (see
//! [`crate::launcher::guard`]) does the same once the last process of the
//! job is gone. Should that guard be killed too, [`sweep_stale`] removes the
//! leftovers of such jobs at the next `tmpirun`. To never touch a live
//! job of another container sharing `/tmp` and `/dev/shm`, each session
//! directory holds a file [`OWNER_FILE`] naming the pid namespace of its
//! `tmpirun`; only sessions of the caller's user and pid namespace whose
//! `tmpirun` pid is gone are swept, together with their segments.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::io;
use std::os::unix::fs::{DirBuilderExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Prefix of every job id.
pub const JOB_ID_PREFIX: &str = "tmpi-";
/// Prefix of session directory names (followed by the job id).
pub const SESSION_DIR_PREFIX: &str = "tmpi-session-";
/// Directory holding POSIX shared-memory segments.
pub const SHM_DIR: &str = "/dev/shm";
/// Prefix of btl-sm segment names: `tmpi-sm.<job id>.<rank>` (coll sm's
/// are `tmpi-coll.<pid>.<job id>.<n>`; [`is_job_segment`] knows both).
pub const SHM_PREFIX: &str = "tmpi-sm.";
/// File in the session directory naming the pid namespace of `tmpirun`.
pub const OWNER_FILE: &str = ".tmpirun-owner";

/// The pid namespace of this process (`pid:[4026531836]`), or `unknown`.
fn pid_namespace() -> String {
    std::fs::read_link("/proc/self/ns/pid")
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or_else(|_| "unknown".into())
}

/// Errors while setting up a session.
#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The session directory could not be created.
    #[error("cannot create session directory {path}: {source}")]
    CreateDir {
        /// The directory.
        path: PathBuf,
        /// The OS error.
        #[source]
        source: io::Error,
    },
    /// A job id could not be made unique after many attempts.
    #[error("cannot find an unused session directory name in {0}")]
    NoUniqueName(PathBuf),
}

/// A new job id: `tmpi-<pid>-<16 hex digits>`. The random part comes from
/// the OS-seeded hasher of the standard library, so two jobs of the same
/// process differ too.
pub fn new_job_id() -> String {
    let mut h = RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or(0),
    );
    format!("{JOB_ID_PREFIX}{}-{:016x}", std::process::id(), h.finish())
}

/// The base directory for session directories: `$TMPDIR` when it is set to
/// an absolute path, otherwise `/tmp`.
pub fn tmp_base() -> PathBuf {
    match std::env::var_os("TMPDIR") {
        Some(d) if Path::new(&d).is_absolute() => PathBuf::from(d),
        _ => PathBuf::from("/tmp"),
    }
}

/// One job's on-disk state; removed by [`Session::cleanup`] or on drop.
#[derive(Debug)]
pub struct Session {
    job_id: String,
    dir: PathBuf,
    shm_dir: PathBuf,
    cleaned: bool,
}

impl Session {
    /// Creates a session with a fresh job id below [`tmp_base`].
    pub fn create() -> Result<Session, SessionError> {
        Self::create_in(&tmp_base(), Path::new(SHM_DIR))
    }

    /// Creates a session whose directory is below `base` and whose leftover
    /// segments are looked for in `shm_dir` (tests use private dirs).
    pub fn create_in(base: &Path, shm_dir: &Path) -> Result<Session, SessionError> {
        for _ in 0..16 {
            let job_id = new_job_id();
            let dir = base.join(format!("{SESSION_DIR_PREFIX}{job_id}"));
            match std::fs::DirBuilder::new().mode(0o700).create(&dir) {
                Ok(()) => {
                    // The umask may have removed bits; make it exactly 0700.
                    if let Err(source) =
                        std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700))
                            .and_then(|_| std::fs::write(dir.join(OWNER_FILE), pid_namespace()))
                    {
                        let _ = std::fs::remove_file(dir.join(OWNER_FILE));
                        let _ = std::fs::remove_dir(&dir);
                        return Err(SessionError::CreateDir { path: dir, source });
                    }
                    tracing::debug!(target: "tmpirun", "session directory {}", dir.display());
                    return Ok(Session {
                        job_id,
                        dir,
                        shm_dir: shm_dir.to_path_buf(),
                        cleaned: false,
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
                Err(source) => return Err(SessionError::CreateDir { path: dir, source }),
            }
        }
        Err(SessionError::NoUniqueName(base.to_path_buf()))
    }

    /// The job id (also the PMI kvsname).
    pub fn job_id(&self) -> &str {
        &self.job_id
    }

    /// The session directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Removes the session directory (recursively) and the job's leftover
    /// shared-memory segments. Idempotent; failures are logged, not fatal,
    /// and the number of shared-memory segments removed is returned.
    pub fn cleanup(&mut self) -> usize {
        if self.cleaned {
            return 0;
        }
        self.cleaned = true;
        match std::fs::remove_dir_all(&self.dir) {
            Ok(()) => {}
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => tracing::warn!(
                target: "tmpirun",
                "cannot remove session directory {}: {e}",
                self.dir.display()
            ),
        }
        remove_job_segments(&self.shm_dir, &self.job_id)
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.cleanup();
    }
}

/// Whether the `/dev/shm` entry `name` belongs to job `job_id`: a `tmpi-`
/// name with the job id as one of its dot-separated parts (btl-sm's
/// `tmpi-sm.<job id>.<rank>`, coll sm's `tmpi-coll.<pid>.<job id>.<n>`).
/// Job ids hold no dot, so the match is exact.
pub fn is_job_segment(name: &str, job_id: &str) -> bool {
    !job_id.is_empty()
        && !job_id.contains('.')
        && name.starts_with(JOB_ID_PREFIX)
        && name.split('.').skip(1).any(|part| part == job_id)
}

/// Removes the shared-memory files of job `job_id` in `shm_dir` (see
/// [`is_job_segment`]) and returns how many were removed.
pub fn remove_job_segments(shm_dir: &Path, job_id: &str) -> usize {
    let Ok(entries) = std::fs::read_dir(shm_dir) else {
        return 0;
    };
    let mut n = 0;
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        if !is_job_segment(name, job_id) {
            continue;
        }
        match std::fs::remove_file(e.path()) {
            Ok(()) => {
                tracing::info!(target: "tmpirun", "removed leftover segment {}", e.path().display());
                n += 1;
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => {}
            Err(err) => tracing::warn!(
                target: "tmpirun",
                "cannot remove leftover segment {}: {err}",
                e.path().display()
            ),
        }
    }
    n
}

/// The pid embedded in a job id `tmpi-<pid>-<hex>`, if it has that shape.
pub fn job_id_pid(job_id: &str) -> Option<u32> {
    let rest = job_id.strip_prefix(JOB_ID_PREFIX)?;
    let (pid, hex) = rest.split_once('-')?;
    if hex.len() != 16 || !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    pid.parse().ok()
}

fn pid_alive(pid: u32) -> bool {
    // /proc/<pid> exists while the process (or its zombie) exists.
    Path::new("/proc").join(pid.to_string()).exists()
}

/// Removes the session directories below `base` of jobs whose `tmpirun`
/// no longer runs, and their segments in `shm_dir`: only directories owned
/// by the calling user whose [`OWNER_FILE`] names the caller's pid namespace
/// (so the pid check means something). Jobs whose pid is alive (possibly
/// reused by another process) are left alone. Returns how many entries were
/// removed.
pub fn sweep_stale(base: &Path, shm_dir: &Path) -> usize {
    // The caller's uid is the owner of its own /proc entry.
    let Ok(me) = std::fs::metadata("/proc/self") else {
        return 0;
    };
    let uid = me.uid();
    let ns = pid_namespace();
    let mut n = 0;
    let Ok(entries) = std::fs::read_dir(base) else {
        return 0;
    };
    for e in entries.flatten() {
        let name = e.file_name();
        let Some(job) = name
            .to_str()
            .and_then(|s| s.strip_prefix(SESSION_DIR_PREFIX))
        else {
            continue;
        };
        let Some(pid) = job_id_pid(job) else { continue };
        let Ok(md) = std::fs::symlink_metadata(e.path()) else {
            continue;
        };
        if !md.is_dir() || md.uid() != uid || pid_alive(pid) {
            continue;
        }
        match std::fs::read_to_string(e.path().join(OWNER_FILE)) {
            Ok(owner) if owner == ns => {}
            _ => continue,
        }
        if std::fs::remove_dir_all(e.path()).is_ok() {
            tracing::info!(target: "tmpirun", "removed stale session {}", e.path().display());
            n += 1 + remove_job_segments(shm_dir, job);
        }
    }
    n
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> PathBuf {
        let d = std::env::temp_dir().join(format!(
            "tmpirun-session-unit-{}-{name}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        d
    }

    #[test]
    fn job_ids_are_unique_and_well_formed() {
        let a = new_job_id();
        let b = new_job_id();
        assert_ne!(a, b);
        for id in [&a, &b] {
            assert!(id
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'_'));
            assert_eq!(job_id_pid(id), Some(std::process::id()));
        }
        assert_eq!(job_id_pid("tmpi-12-zz"), None);
        assert_eq!(job_id_pid("other-1-0123456789abcdef"), None);
    }

    #[test]
    fn session_dir_is_private_and_removed_with_segments() {
        let base = scratch("base");
        let shm = scratch("shm");
        let mut s = Session::create_in(&base, &shm).unwrap();
        let md = std::fs::metadata(s.dir()).unwrap();
        assert!(md.is_dir());
        assert_eq!(md.permissions().mode() & 0o777, 0o700);
        std::fs::create_dir(s.dir().join("sub")).unwrap();
        std::fs::write(s.dir().join("sub/f"), b"x").unwrap();
        let seg0 = shm.join(format!("tmpi-sm.{}.0", s.job_id()));
        let seg1 = shm.join(format!("tmpi-sm.{}.1", s.job_id()));
        let coll = shm.join(format!("tmpi-coll.77.{}.0", s.job_id()));
        let other = shm.join("tmpi-sm.tmpi-1-0000000000000000.0");
        let other_coll = shm.join(format!("tmpi-coll.77.{}x.0", s.job_id()));
        let old_coll = shm.join("tmpi-coll.77.0");
        for p in [&seg0, &seg1, &coll, &other, &other_coll, &old_coll] {
            std::fs::write(p, b"").unwrap();
        }
        assert_eq!(s.cleanup(), 3);
        assert!(!s.dir().exists());
        assert!(!seg0.exists() && !seg1.exists() && !coll.exists());
        assert!(other_coll.exists() && old_coll.exists());
        assert!(other.exists(), "another job's segment must stay");
        assert_eq!(s.cleanup(), 0, "idempotent");
        std::fs::remove_dir_all(&base).unwrap();
        std::fs::remove_dir_all(&shm).unwrap();
    }

    #[test]
    fn drop_cleans_up() {
        let base = scratch("drop");
        let s = Session::create_in(&base, &base).unwrap();
        let dir = s.dir().to_path_buf();
        assert!(dir.exists());
        drop(s);
        assert!(!dir.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }

    #[test]
    fn sweep_removes_only_dead_jobs() {
        let base = scratch("sweep");
        let shm = scratch("sweepshm");
        // A pid far above pid_max cannot be alive.
        let dead = "tmpi-999999999-0123456789abcdef";
        let foreign = "tmpi-999999998-0123456789abcdef";
        let unowned = "tmpi-999999997-0123456789abcdef";
        let alive = format!("tmpi-{}-0123456789abcdef", std::process::id());
        for j in [dead, foreign, unowned, alive.as_str()] {
            let d = base.join(format!("{SESSION_DIR_PREFIX}{j}"));
            std::fs::create_dir(&d).unwrap();
            if j == foreign {
                std::fs::write(d.join(OWNER_FILE), "pid:[1]").unwrap();
            } else if j != unowned {
                std::fs::write(d.join(OWNER_FILE), pid_namespace()).unwrap();
            }
            std::fs::write(shm.join(format!("{SHM_PREFIX}{j}.0")), b"").unwrap();
        }
        assert_eq!(sweep_stale(&base, &shm), 2);
        assert!(!base.join(format!("{SESSION_DIR_PREFIX}{dead}")).exists());
        assert!(!shm.join(format!("{SHM_PREFIX}{dead}.0")).exists());
        for j in [foreign, unowned, alive.as_str()] {
            assert!(
                base.join(format!("{SESSION_DIR_PREFIX}{j}")).exists(),
                "{j}"
            );
            assert!(shm.join(format!("{SHM_PREFIX}{j}.0")).exists(), "{j}");
        }
        std::fs::remove_dir_all(&base).unwrap();
        std::fs::remove_dir_all(&shm).unwrap();
    }
}
