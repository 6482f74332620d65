//! Test support for BTLs and the layers above them: a file-backed
//! [`Modex`] and a launcher that runs one test function of the current test
//! binary as `n` real processes.
//!
//! Not for production use: the modex polls files in a directory.
//!
//! Pattern:
//! ```no_run
//! use std::time::Duration;
//! use tmpi_btl::testing::{child_context, run_ranks};
//!
//! #[test]
//! fn two_ranks() {
//!     let out = run_ranks("two_ranks_child", 2, &[], Duration::from_secs(60));
//!     out.assert_success();
//! }
//!
//! #[test]
//! fn two_ranks_child() {
//!     let Some(ctx) = child_context() else { return }; // no-op when run directly
//!     let info = ctx.process_info();
//!     let mut modex = ctx.modex();
//!     // ... open the BTL, fence, talk to the peers ...
//! }
//! ```

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use tmpi_base::identity::ProcessInfo;
use tmpi_base::modex::{Modex, ModexError};

const ENV_RANK: &str = "TMPI_BTL_TEST_RANK";
const ENV_SIZE: &str = "TMPI_BTL_TEST_SIZE";
const ENV_DIR: &str = "TMPI_BTL_TEST_DIR";
const ENV_JOB: &str = "TMPI_BTL_TEST_JOB";

/// A [`Modex`] over files in a directory shared by the processes of a job.
#[derive(Debug)]
pub struct FileModex {
    dir: PathBuf,
    rank: u32,
    size: u32,
    epoch: u32,
    timeout: Duration,
}

impl FileModex {
    /// The modex of `rank` in a job of `size` using `dir` (must exist).
    /// A fence that takes longer than `timeout` fails.
    pub fn new(dir: &Path, rank: u32, size: u32, timeout: Duration) -> FileModex {
        FileModex {
            dir: dir.to_path_buf(),
            rank,
            size,
            epoch: 0,
            timeout,
        }
    }

    fn key_path(&self, rank: u32, key: &str) -> Result<PathBuf, ModexError> {
        if key.is_empty()
            || key.len() > 64
            || !key
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-')
        {
            return Err(ModexError::InvalidKey {
                key: key.into(),
                reason: "must be 1-64 characters of [A-Za-z0-9._-]".into(),
            });
        }
        Ok(self.dir.join(format!("kv.{rank}.{key}")))
    }
}

fn transport(e: impl std::fmt::Display) -> ModexError {
    ModexError::Transport(e.to_string())
}

impl Modex for FileModex {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        let path = self.key_path(self.rank, key)?;
        let tmp = self.dir.join(format!("tmp.{}.{key}", self.rank));
        std::fs::write(&tmp, value).map_err(transport)?;
        std::fs::rename(&tmp, &path).map_err(transport)
    }

    fn fence(&mut self) -> Result<(), ModexError> {
        self.epoch += 1;
        let mine = self.dir.join(format!("fence.{}.{}", self.epoch, self.rank));
        std::fs::write(&mine, b"").map_err(transport)?;
        let deadline = Instant::now() + self.timeout;
        for r in 0..self.size {
            let p = self.dir.join(format!("fence.{}.{r}", self.epoch));
            while !p.exists() {
                if Instant::now() > deadline {
                    return Err(ModexError::Transport(format!(
                        "fence {} timed out waiting for rank {r}",
                        self.epoch
                    )));
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
        Ok(())
    }

    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, ModexError> {
        let path = self.key_path(rank, key)?;
        match std::fs::read(&path) {
            Ok(v) => Ok(v),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Err(ModexError::NotFound {
                rank,
                key: key.into(),
            }),
            Err(e) => Err(transport(e)),
        }
    }
}

/// What a child process learns from [`run_ranks`].
#[derive(Debug, Clone)]
pub struct ChildContext {
    /// This child's rank.
    pub rank: u32,
    /// Number of children.
    pub size: u32,
    /// The job's shared directory.
    pub dir: PathBuf,
    /// Job id (unique per [`run_ranks`] call, sanitized).
    pub job_id: String,
}

impl ChildContext {
    /// Identity of this child: all ranks on one node.
    pub fn process_info(&self) -> ProcessInfo {
        ProcessInfo {
            rank: self.rank,
            size: self.size,
            local_rank: self.rank,
            local_size: self.size,
            node_id: 0,
            node_of: vec![0; self.size as usize],
            job_id: self.job_id.clone(),
            hostname: "localhost".into(),
        }
    }

    /// The job's [`FileModex`] (fence timeout 60 s).
    pub fn modex(&self) -> FileModex {
        FileModex::new(&self.dir, self.rank, self.size, Duration::from_secs(60))
    }
}

/// `Some` in a child started by [`run_ranks`], `None` otherwise (the child
/// test function then returns at once).
pub fn child_context() -> Option<ChildContext> {
    let rank = std::env::var(ENV_RANK).ok()?.parse().ok()?;
    let size = std::env::var(ENV_SIZE).ok()?.parse().ok()?;
    let dir = PathBuf::from(std::env::var_os(ENV_DIR)?);
    let job_id = std::env::var(ENV_JOB).ok()?;
    Some(ChildContext {
        rank,
        size,
        dir,
        job_id,
    })
}

/// Result of one [`run_ranks`] call.
#[derive(Debug)]
pub struct JobOutcome {
    /// Job id the children used.
    pub job_id: String,
    /// Exit code per rank (`None`: killed by a signal or by the timeout).
    pub codes: Vec<Option<i32>>,
    /// Captured stdout+stderr per rank.
    pub output: Vec<String>,
    /// Whether the timeout fired.
    pub timed_out: bool,
}

impl JobOutcome {
    /// Panics with every rank's output unless all ranks exited with 0.
    pub fn assert_success(&self) {
        if self.timed_out || self.codes.iter().any(|c| *c != Some(0)) {
            let mut msg = format!(
                "job {} failed (timed out: {}), codes {:?}\n",
                self.job_id, self.timed_out, self.codes
            );
            for (r, o) in self.output.iter().enumerate() {
                msg.push_str(&format!("---- rank {r} ----\n{o}\n"));
            }
            panic!("{msg}");
        }
    }
}

static JOBS: AtomicU32 = AtomicU32::new(0);

/// Runs the test function `test_name` of the current test binary as `n`
/// processes (ranks `0..n`) with `env` added, and waits at most `timeout`
/// (then kills them). Each child sees a [`ChildContext`].
pub fn run_ranks(test_name: &str, n: u32, env: &[(&str, &str)], timeout: Duration) -> JobOutcome {
    let exe = std::env::current_exe().expect("current test executable");
    let job_id = format!(
        "t{}x{}",
        std::process::id(),
        JOBS.fetch_add(1, Ordering::Relaxed)
    );
    let dir = std::env::temp_dir().join(format!("tmpi-btl-test-{job_id}"));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("job directory");
    let mut children: Vec<Child> = (0..n)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.args([test_name, "--exact", "--nocapture", "--test-threads=1"])
                .env(ENV_RANK, r.to_string())
                .env(ENV_SIZE, n.to_string())
                .env(ENV_DIR, &dir)
                .env(ENV_JOB, &job_id)
                .stdin(Stdio::null())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped());
            for (k, v) in env {
                c.env(k, v);
            }
            c.spawn().expect("spawn child rank")
        })
        .collect();
    // Drain pipes in threads so a chatty child cannot block on a full pipe.
    let readers: Vec<_> = children
        .iter_mut()
        .map(|c| {
            let mut out = c.stdout.take().expect("stdout");
            let mut err = c.stderr.take().expect("stderr");
            std::thread::spawn(move || {
                use std::io::Read;
                let mut s = String::new();
                let t = std::thread::spawn(move || {
                    let mut e = String::new();
                    let _ = err.read_to_string(&mut e);
                    e
                });
                let _ = out.read_to_string(&mut s);
                s.push_str(&t.join().unwrap_or_default());
                s
            })
        })
        .collect();
    let deadline = Instant::now() + timeout;
    let mut codes: Vec<Option<Option<i32>>> = vec![None; n as usize];
    let mut timed_out = false;
    while codes.iter().any(|c| c.is_none()) {
        for (i, c) in children.iter_mut().enumerate() {
            if codes[i].is_none() {
                if let Ok(Some(st)) = c.try_wait() {
                    codes[i] = Some(st.code());
                }
            }
        }
        if Instant::now() > deadline {
            timed_out = true;
            for (i, c) in children.iter_mut().enumerate() {
                if codes[i].is_none() {
                    let _ = c.kill();
                    let _ = c.wait();
                    codes[i] = Some(None);
                }
            }
            break;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let output = readers
        .into_iter()
        .map(|h| h.join().unwrap_or_default())
        .collect();
    let _ = std::fs::remove_dir_all(&dir);
    JobOutcome {
        job_id,
        codes: codes.into_iter().map(|c| c.flatten()).collect(),
        output,
        timed_out,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_modex_put_fence_get_across_processes() {
        let out = run_ranks(
            "testing::tests::file_modex_child",
            3,
            &[],
            Duration::from_secs(60),
        );
        out.assert_success();
    }

    #[test]
    fn file_modex_child() {
        let Some(ctx) = child_context() else { return };
        let mut m = ctx.modex();
        m.put("addr", format!("rank{}", ctx.rank).as_bytes())
            .unwrap();
        m.fence().unwrap();
        for r in 0..ctx.size {
            assert_eq!(m.get(r, "addr").unwrap(), format!("rank{r}").as_bytes());
        }
        assert!(matches!(
            m.get(0, "missing"),
            Err(ModexError::NotFound { .. })
        ));
        assert!(matches!(
            m.put("bad key", b""),
            Err(ModexError::InvalidKey { .. })
        ));
        m.fence().unwrap();
    }

    #[test]
    fn fence_times_out_without_peers() {
        let dir = std::env::temp_dir().join(format!("tmpi-btl-fence-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut m = FileModex::new(&dir, 0, 2, Duration::from_millis(50));
        assert!(matches!(m.fence(), Err(ModexError::Transport(_))));
        let _ = std::fs::remove_dir_all(&dir);
    }
}
