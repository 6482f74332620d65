//! A [`Modex`] over a directory shared by the processes of a job (tests,
//! examples, tools without a PMI server): `put` writes `<rank>.<key>`
//! atomically (write, then rename), `fence` writes `fence.<round>.<rank>`
//! and waits, bounded by [`DirModex::timeout`], until every rank's marker of
//! that round exists.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use tmpi_base::modex::{Modex, ModexError};

/// A modex in a shared directory: `put` writes `<rank>.<key>` atomically
/// (write + rename), `fence` waits for every rank's marker of the same
/// round.
pub struct DirModex {
    /// The shared directory.
    pub dir: PathBuf,
    /// This process's rank.
    pub rank: u32,
    /// Job size.
    pub size: u32,
    round: u32,
    /// Bound of each fence.
    pub timeout: Duration,
}

impl DirModex {
    /// The modex of `rank` in a job of `size` sharing `dir`.
    pub fn new(dir: &Path, rank: u32, size: u32) -> Self {
        DirModex {
            dir: dir.to_owned(),
            rank,
            size,
            round: 0,
            timeout: Duration::from_secs(60),
        }
    }

    fn write(&self, name: &str, v: &[u8]) -> std::io::Result<()> {
        let tmp = self.dir.join(format!(".{name}.tmp"));
        std::fs::write(&tmp, v)?;
        std::fs::rename(tmp, self.dir.join(name))
    }

    /// A barrier that keeps calling `poll` while it waits (the soft NIC
    /// progresses only inside its process's verbs calls).
    pub fn barrier_with(&mut self, mut poll: impl FnMut()) -> Result<(), ModexError> {
        self.round += 1;
        let name = format!("fence.{}.{}", self.round, self.rank);
        self.write(&name, b"")
            .map_err(|e| ModexError::Transport(e.to_string()))?;
        let start = Instant::now();
        for r in 0..self.size {
            let p = self.dir.join(format!("fence.{}.{}", self.round, r));
            while !p.exists() {
                if start.elapsed() > self.timeout {
                    return Err(ModexError::Transport(format!(
                        "fence {} timed out waiting for rank {r}",
                        self.round
                    )));
                }
                poll();
                std::thread::sleep(Duration::from_micros(200));
            }
        }
        Ok(())
    }
}

impl Modex for DirModex {
    fn put(&mut self, key: &str, value: &[u8]) -> Result<(), ModexError> {
        self.write(&format!("{}.{key}", self.rank), value)
            .map_err(|e| ModexError::Transport(e.to_string()))
    }
    fn fence(&mut self) -> Result<(), ModexError> {
        self.barrier_with(|| {})
    }
    fn get(&mut self, rank: u32, key: &str) -> Result<Vec<u8>, ModexError> {
        std::fs::read(self.dir.join(format!("{rank}.{key}"))).map_err(|_| ModexError::NotFound {
            rank,
            key: key.into(),
        })
    }
}
