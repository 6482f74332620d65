//! The clean-up guard: removes a job's files when `tmpirun` cannot.
//!
//! `tmpirun` removes the session directory and the job's shared-memory
//! files itself when the job ends ([`crate::session::Session::cleanup`]),
//! but a SIGKILL of `tmpirun` gives it no chance to. So, right after
//! creating the session, `tmpirun` starts a small second copy of itself,
//! the guard (`tmpirun --tmpi-cleanup-guard <session dir> <job id>`, in its
//! own process group, without the death signal the ranks get), whose
//! standard input is the read end of a pipe. The write end stays open in
//! `tmpirun` and in every rank (and whatever the ranks start and keep it),
//! nowhere else. The guard waits for the end of that pipe, which comes
//! when the last of these processes is gone, and then removes what is left:
//! the session directory and every `/dev/shm` file with the job id in its
//! name. Waiting for the ranks too matters: they die from `tmpirun`'s death
//! (their `PR_SET_PDEATHSIG`) a moment after it, and one in init may still
//! create its segment in that moment.
//!
//! Processes a rank started (in the background, or daemons that left its
//! process group) do not get that death signal and would keep the pipe, and
//! the job's files, forever. So the guard also watches `tmpirun` itself (a
//! pidfd of the pid in the job id): once it is gone, the guard sends
//! SIGKILL to every process of the user whose environment holds this job's
//! `TMPI_JOB_ID` (unique, random), the ranks' descendants that kept it,
//! until none is left, as `tmpirun` would have ended them.
//!
//! When the job ends normally, `tmpirun` cleans up itself and then ends the
//! guard (SIGKILL, and reaps it), so no process of the job outlives
//! `tmpirun`. The guard ignores SIGINT, SIGHUP and SIGTSTP (meant for the
//! job's processes, not for it).
//!
//! If the guard cannot be started (no `/proc/self/exe`), the job runs
//! without it and the next `tmpirun` sweeps the leftovers
//! ([`crate::session::sweep_stale`]).

use std::ffi::OsString;
use std::io::{self, Read};
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::{Child, Command, Stdio};

use crate::session::{job_id_pid, remove_job_segments, SESSION_DIR_PREFIX};

/// The first argument that makes `tmpirun` run as the guard.
pub const GUARD_ARG: &str = "--tmpi-cleanup-guard";

/// A running guard, as `tmpirun` holds it.
#[derive(Debug)]
pub(super) struct Guard {
    child: Child,
    /// The write end of the guard's pipe (close-on-exec here; the ranks
    /// get it open).
    watch: OwnedFd,
}

impl Guard {
    /// Starts the guard of the session `dir` of job `job_id`, running this
    /// very executable (`/proc/self/exe`, so a binary replaced on disk
    /// during the job does not matter).
    pub(super) fn spawn(dir: &Path, job_id: &str) -> io::Result<Guard> {
        let (read, watch) = pipe_cloexec()?;
        let mut cmd = Command::new("/proc/self/exe");
        cmd.arg0("tmpirun")
            .arg(GUARD_ARG)
            .arg(dir)
            .arg(job_id)
            .stdin(Stdio::from(read))
            .stdout(Stdio::null())
            .stderr(Stdio::inherit())
            .process_group(0);
        let child = cmd.spawn()?;
        Ok(Guard { child, watch })
    }

    /// The guard's pid.
    pub(super) fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The descriptor every rank must keep open (see the module docs).
    pub(super) fn watch_fd(&self) -> RawFd {
        self.watch.as_raw_fd()
    }

    /// Ends the guard once `tmpirun` has cleaned up itself.
    pub(super) fn dismiss(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn pipe_cloexec() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: pipe2 writes two descriptors into the array on success; they
    // are owned by nothing else, so wrapping them in OwnedFd is sound.
    unsafe {
        if libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) != 0 {
            return Err(io::Error::last_os_error());
        }
        use std::os::fd::FromRawFd;
        Ok((OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])))
    }
}

/// Errors of the guard's own command line.
#[derive(Debug, thiserror::Error)]
pub enum GuardError {
    /// Not `<session dir> <job id>`, or the two do not belong together.
    #[error("usage: tmpirun {GUARD_ARG} <session directory> <job id> (internal use)")]
    Usage,
}

/// Runs the guard when `args` (without the program name) start with
/// [`GUARD_ARG`]: `Some(result)` once it is done, `None` for any other
/// command line. `tmpirun`'s `main` calls this first.
pub fn main_if_guard(args: &[OsString]) -> Option<Result<(), GuardError>> {
    if args.first().map(|a| a.as_os_str()) != Some(GUARD_ARG.as_ref()) {
        return None;
    }
    Some(run_guard(&args[1..]))
}

fn run_guard(args: &[OsString]) -> Result<(), GuardError> {
    let [dir, job] = args else {
        return Err(GuardError::Usage);
    };
    let dir = Path::new(dir);
    let job = job.to_str().ok_or(GuardError::Usage)?;
    // Only ever a session directory of this very job id.
    let name_ok =
        dir.file_name().and_then(|n| n.to_str()) == Some(&format!("{SESSION_DIR_PREFIX}{job}")[..]);
    if job_id_pid(job).is_none() || !name_ok || !dir.is_absolute() {
        return Err(GuardError::Usage);
    }
    // SAFETY: setting the disposition of three signals to SIG_IGN.
    unsafe {
        libc::signal(libc::SIGINT, libc::SIG_IGN);
        libc::signal(libc::SIGHUP, libc::SIG_IGN);
        libc::signal(libc::SIGTSTP, libc::SIG_IGN);
    }
    let tmpirun = job_id_pid(job).ok_or(GuardError::Usage)?;
    if !wait_for_eof_or_death(tmpirun) {
        kill_job_processes(job);
        wait_for_eof(&mut io::stdin().lock());
    }
    remove_leftovers(dir, job, Path::new(crate::session::SHM_DIR));
    Ok(())
}

/// Waits until standard input (the pipe) ends, `true`, or process `pid`
/// (`tmpirun`) is gone first, `false`.
fn wait_for_eof_or_death(pid: u32) -> bool {
    let pidfd = libc::pid_t::try_from(pid).ok().and_then(|p| {
        // SAFETY: pidfd_open takes a pid and flags; a descriptor it returns
        // is owned by nothing else.
        unsafe {
            let r = libc::syscall(libc::SYS_pidfd_open, p, 0);
            use std::os::fd::FromRawFd;
            (r >= 0).then(|| OwnedFd::from_raw_fd(r as libc::c_int))
        }
    });
    let gone = || {
        // SAFETY: signal 0 only checks whether the process exists.
        let r = unsafe { libc::kill(pid as libc::pid_t, 0) };
        r != 0 && io::Error::last_os_error().raw_os_error() == Some(libc::ESRCH)
    };
    if pidfd.is_none() && gone() {
        return false;
    }
    let mut buf = [0u8; 64];
    loop {
        let mut fds = [
            libc::pollfd {
                fd: 0,
                events: libc::POLLIN,
                revents: 0,
            },
            libc::pollfd {
                fd: pidfd.as_ref().map_or(-1, |f| f.as_raw_fd()),
                events: libc::POLLIN,
                revents: 0,
            },
        ];
        // Without a pidfd, look at the pid every 200 ms.
        let timeout = if pidfd.is_some() { -1 } else { 200 };
        // SAFETY: two valid pollfd entries (a negative fd is ignored).
        let r = unsafe { libc::poll(fds.as_mut_ptr(), 2, timeout) };
        if r < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            // Cannot watch: wait for the pipe alone.
            wait_for_eof(&mut io::stdin().lock());
            return true;
        }
        if fds[0].revents != 0 {
            match io::stdin().lock().read(&mut buf) {
                Ok(0) => return true,
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => return true,
            }
        }
        if fds[1].revents != 0 || (pidfd.is_none() && gone()) {
            return false;
        }
    }
}

/// Sends SIGKILL to every process of this user whose environment holds
/// `TMPI_JOB_ID=<job>`, again until none is found (they may be forking).
fn kill_job_processes(job: &str) {
    let needle = format!("TMPI_JOB_ID={job}");
    let me = std::process::id();
    for _ in 0..100 {
        let mut found = 0;
        let Ok(dir) = std::fs::read_dir("/proc") else {
            return;
        };
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
                continue;
            };
            if pid == me {
                continue;
            }
            let Ok(env) = std::fs::read(e.path().join("environ")) else {
                continue;
            };
            if env.split(|&b| b == 0).any(|kv| kv == needle.as_bytes()) {
                // SAFETY: a signal to one pid.
                unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) };
                found += 1;
            }
        }
        if found == 0 {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

/// Reads `r` to its end (or to an error other than an interruption).
fn wait_for_eof(r: &mut impl Read) {
    let mut buf = [0u8; 64];
    loop {
        match r.read(&mut buf) {
            Ok(0) => return,
            Ok(_) => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// Removes the session directory `dir` (not following a symbolic link put
/// in its place) and the job's files in `shm_dir`; returns how many
/// entries were removed.
fn remove_leftovers(dir: &Path, job: &str, shm_dir: &Path) -> usize {
    let mut n = 0;
    if std::fs::symlink_metadata(dir).is_ok_and(|m| m.is_dir())
        && std::fs::remove_dir_all(dir).is_ok()
    {
        n += 1;
    }
    n + remove_job_segments(shm_dir, job)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn other_command_lines_are_not_the_guard() {
        assert!(main_if_guard(&[]).is_none());
        assert!(main_if_guard(&["-n".into(), "2".into()]).is_none());
    }

    #[test]
    fn a_bad_guard_command_line_removes_nothing() {
        let job = "tmpi-999999999-0123456789abcdef";
        for args in [
            vec![GUARD_ARG.into()],
            vec![GUARD_ARG.into(), "/tmp".into(), job.into()],
            vec![
                GUARD_ARG.into(),
                format!("/tmp/{SESSION_DIR_PREFIX}{job}").into(),
                "tmpi-1-0123456789abcdef".into(),
            ],
            vec![
                GUARD_ARG.into(),
                format!("relative/{SESSION_DIR_PREFIX}{job}").into(),
                job.into(),
            ],
        ] {
            assert!(
                matches!(main_if_guard(&args), Some(Err(GuardError::Usage))),
                "{args:?}"
            );
        }
    }

    #[test]
    fn leftovers_are_removed_after_the_pipe_ends() {
        let base = std::env::temp_dir().join(format!("tmpirun-guard-unit-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&base);
        let job = "tmpi-999999999-0123456789abcdef";
        let dir = base.join(format!("{SESSION_DIR_PREFIX}{job}"));
        let shm = base.join("shm");
        std::fs::create_dir_all(dir.join("sub")).unwrap();
        std::fs::create_dir_all(&shm).unwrap();
        let mine = shm.join(format!("tmpi-sm.{job}.0"));
        let coll = shm.join(format!("tmpi-coll.5.{job}.0"));
        let other = shm.join("tmpi-sm.tmpi-1-0000000000000000.0");
        for f in [&mine, &coll, &other] {
            std::fs::write(f, b"").unwrap();
        }
        let (r, w) = pipe_cloexec().unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let mut f = std::fs::File::from(w);
            f.write_all(b"not yet").unwrap();
        });
        wait_for_eof(&mut std::fs::File::from(r));
        writer.join().unwrap();
        assert_eq!(remove_leftovers(&dir, job, &shm), 3);
        assert!(!dir.exists() && !mine.exists() && !coll.exists());
        assert!(other.exists());
        std::fs::remove_dir_all(&base).unwrap();
    }
}
