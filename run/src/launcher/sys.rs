//! The operating-system calls of the launcher: signal self-pipe, process
//! groups, child set-up before `exec`, CPU affinity and `poll`. Every
//! `unsafe` block of the launcher lives here.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;
use std::sync::atomic::{AtomicI32, Ordering};
use std::time::Duration;

/// Write end of the self-pipe, for the signal handler (-1 when none).
static SIGNAL_PIPE_WR: AtomicI32 = AtomicI32::new(-1);

extern "C" fn on_signal(sig: libc::c_int) {
    let fd = SIGNAL_PIPE_WR.load(Ordering::Relaxed);
    if fd >= 0 {
        let b = sig as u8;
        // SAFETY: write(2) and errno access are async-signal-safe; `b` lives
        // for the call. A full pipe (EAGAIN) loses only a duplicate wake-up:
        // the reader re-examines all state on any byte.
        unsafe {
            let errno = *libc::__errno_location();
            libc::write(fd, (&b as *const u8).cast(), 1);
            *libc::__errno_location() = errno;
        }
    }
}

/// A non-blocking, close-on-exec pipe that receives one byte per caught
/// signal (the signal number) and byte 0 for a wake-up from another thread.
#[derive(Debug)]
pub struct WakePipe {
    rd: OwnedFd,
    wr: OwnedFd,
    installed: Vec<(libc::c_int, libc::sigaction)>,
}

impl WakePipe {
    /// Creates the pipe and routes `signals` to it. Only one `WakePipe` with
    /// signals may exist at a time in a process; the previous dispositions
    /// are restored on drop.
    pub fn new(signals: &[libc::c_int]) -> io::Result<WakePipe> {
        let mut fds = [0 as libc::c_int; 2];
        // SAFETY: `fds` is a valid array of two ints for pipe2 to fill.
        let r = unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC | libc::O_NONBLOCK) };
        if r != 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: pipe2 succeeded, both descriptors are new and ours.
        let (rd, wr) = unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
        let mut me = WakePipe {
            rd,
            wr,
            installed: Vec::new(),
        };
        if !signals.is_empty() {
            if SIGNAL_PIPE_WR
                .compare_exchange(-1, me.wr.as_raw_fd(), Ordering::SeqCst, Ordering::SeqCst)
                .is_err()
            {
                return Err(io::Error::new(
                    io::ErrorKind::AlreadyExists,
                    "signal forwarding is already set up in this process",
                ));
            }
            for &sig in signals {
                // SAFETY: zeroed sigaction is a valid "no flags, empty mask"
                // value; we fill the handler and call sigaction with valid
                // pointers. The handler only does async-signal-safe work.
                unsafe {
                    let mut sa: libc::sigaction = std::mem::zeroed();
                    sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
                    sa.sa_flags = libc::SA_RESTART
                        | if sig == libc::SIGCHLD {
                            libc::SA_NOCLDSTOP
                        } else {
                            0
                        };
                    libc::sigemptyset(&mut sa.sa_mask);
                    let mut old: libc::sigaction = std::mem::zeroed();
                    if libc::sigaction(sig, &sa, &mut old) != 0 {
                        let e = io::Error::last_os_error();
                        drop(me);
                        return Err(e);
                    }
                    me.installed.push((sig, old));
                }
            }
        }
        Ok(me)
    }

    /// The descriptor to poll for readability.
    pub fn read_fd(&self) -> RawFd {
        self.rd.as_raw_fd()
    }

    /// A duplicate of the write end, for a thread that wakes the poller with
    /// [`wake`].
    pub fn waker(&self) -> io::Result<OwnedFd> {
        self.wr.try_clone()
    }

    /// Reads all pending bytes: signal numbers (0 = plain wake-up).
    pub fn drain(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut buf = [0u8; 64];
        loop {
            // SAFETY: reading into a valid buffer of the given length from
            // our own descriptor.
            let n = unsafe { libc::read(self.rd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            out.extend_from_slice(&buf[..n as usize]);
        }
        out
    }
}

impl Drop for WakePipe {
    fn drop(&mut self) {
        for (sig, old) in self.installed.drain(..).rev() {
            // SAFETY: restoring a disposition previously returned by sigaction.
            unsafe {
                libc::sigaction(sig, &old, std::ptr::null_mut());
            }
        }
        let _ = SIGNAL_PIPE_WR.compare_exchange(
            self.wr.as_raw_fd(),
            -1,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }
}

/// Writes a wake-up byte (0) to a [`WakePipe::waker`] descriptor.
pub fn wake(fd: &OwnedFd) {
    let b = 0u8;
    // SAFETY: one-byte write from a valid buffer to our own descriptor; a
    // full pipe already guarantees a wake-up.
    unsafe {
        libc::write(fd.as_raw_fd(), (&b as *const u8).cast(), 1);
    }
}

/// Sends `sig` to the process group `pgid`. A group that no longer exists
/// (`ESRCH`) is not an error.
pub fn kill_group(pgid: u32, sig: libc::c_int) -> io::Result<()> {
    let Ok(pgid) = libc::pid_t::try_from(pgid) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    if pgid <= 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill(2) with a negative pid addresses a process group; no
    // memory is involved.
    let r = unsafe { libc::kill(-pgid, sig) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Makes this process a child subreaper (`PR_SET_CHILD_SUBREAPER`):
/// descendants orphaned by a rank (daemons, `setsid` escapes) become its
/// children instead of init's, so the launcher can find and end them.
pub fn set_child_subreaper() -> io::Result<()> {
    // SAFETY: prctl with integer arguments only.
    let r = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) };
    if r == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// Reaps exited children that are not in `keep` (orphans adopted as
/// subreaper) without touching the exit status of the `keep` pids, which
/// their owners reap. Returns how many were reaped.
pub fn reap_orphans(keep: &[u32]) -> usize {
    let mut n = 0;
    loop {
        // SAFETY: waitid fills a zeroed siginfo_t; WNOWAIT leaves the child
        // waitable, so nothing is consumed by this peek.
        let pid = unsafe {
            let mut info: libc::siginfo_t = std::mem::zeroed();
            let r = libc::waitid(
                libc::P_ALL,
                0,
                &mut info,
                libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
            );
            if r != 0 {
                return n;
            }
            info.si_pid()
        };
        if pid <= 0 || keep.contains(&(pid as u32)) {
            // No zombie, or one that belongs to a rank's owner.
            return n;
        }
        // SAFETY: reaping a specific child pid; the status is discarded.
        let r = unsafe {
            let mut st = 0;
            libc::waitpid(pid, &mut st, libc::WNOHANG)
        };
        if r != pid {
            return n;
        }
        n += 1;
    }
}

/// Pids of the live children of this process (from `/proc/*/stat`).
pub fn children_of_self() -> Vec<u32> {
    let me = std::process::id();
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return out;
    };
    for e in entries.flatten() {
        let Some(pid) = e.file_name().to_str().and_then(|s| s.parse::<u32>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(e.path().join("stat")) else {
            continue;
        };
        // Fields after "(comm)": state, ppid, ...
        let Some((_, rest)) = stat.rsplit_once(')') else {
            continue;
        };
        let mut f = rest.split_whitespace();
        let state = f.next().unwrap_or("");
        let ppid: u32 = f.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        if ppid == me && state != "Z" && state != "X" {
            out.push(pid);
        }
    }
    out
}

/// Sends `sig` to the single process `pid` (`ESRCH` is not an error).
pub fn kill_pid(pid: u32, sig: libc::c_int) -> io::Result<()> {
    let Ok(p) = libc::pid_t::try_from(pid) else {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    };
    if p <= 1 {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: kill(2) on a positive pid; no memory involved.
    let r = unsafe { libc::kill(p, sig) };
    if r == 0 {
        return Ok(());
    }
    let e = io::Error::last_os_error();
    if e.raw_os_error() == Some(libc::ESRCH) {
        Ok(())
    } else {
        Err(e)
    }
}

/// Stops this process with SIGSTOP (until a SIGCONT).
pub fn stop_self() {
    // SAFETY: kill(2) on our own pid; no memory involved.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGSTOP);
    }
}

/// Sets `O_NONBLOCK` on `fd`.
pub fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: fcntl on a descriptor the caller owns; no memory involved.
    unsafe {
        let fl = libc::fcntl(fd, libc::F_GETFL);
        if fl < 0 || libc::fcntl(fd, libc::F_SETFL, fl | libc::O_NONBLOCK) < 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// What `poll` reported for one descriptor.
#[derive(Debug, Clone, Copy, Default)]
pub struct Ready {
    /// Data (or EOF/hang-up/error, which a read will report) is available.
    pub readable: bool,
}

/// Waits until one of `fds` is readable (or hung up) or `timeout` passes
/// (`None` = forever). `EINTR` counts as a wake-up with nothing ready.
pub fn poll_readable(fds: &[RawFd], timeout: Option<Duration>) -> io::Result<Vec<Ready>> {
    let mut pfds: Vec<libc::pollfd> = fds
        .iter()
        .map(|&fd| libc::pollfd {
            fd,
            events: libc::POLLIN,
            revents: 0,
        })
        .collect();
    let ms: libc::c_int = match timeout {
        None => -1,
        // Round up so that a deadline is not polled for in a busy loop.
        Some(d) => d.as_micros().div_ceil(1000).min(libc::c_int::MAX as u128) as libc::c_int,
    };
    // SAFETY: `pfds` is a valid array of `pfds.len()` pollfd structures.
    let r = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, ms) };
    if r < 0 {
        let e = io::Error::last_os_error();
        if e.kind() == io::ErrorKind::Interrupted {
            return Ok(vec![Ready::default(); fds.len()]);
        }
        return Err(e);
    }
    Ok(pfds
        .iter()
        .map(|p| Ready {
            readable: p.revents & (libc::POLLIN | libc::POLLHUP | libc::POLLERR | libc::POLLNVAL)
                != 0,
        })
        .collect())
}

/// A set of logical CPUs for `sched_setaffinity`.
#[derive(Clone, Copy)]
pub struct CpuSet(libc::cpu_set_t);

impl std::fmt::Debug for CpuSet {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_list().entries(self.cpus()).finish()
    }
}

impl CpuSet {
    /// The set of the given CPU numbers (numbers beyond the set's capacity
    /// are ignored).
    pub fn from_cpus(cpus: &[usize]) -> CpuSet {
        // SAFETY: an all-zero cpu_set_t is the empty set; CPU_SET is given
        // in-range CPU numbers only.
        unsafe {
            let mut s: libc::cpu_set_t = std::mem::zeroed();
            for &c in cpus {
                if c < libc::CPU_SETSIZE as usize {
                    libc::CPU_SET(c, &mut s);
                }
            }
            CpuSet(s)
        }
    }

    /// The CPU numbers in the set, ascending.
    pub fn cpus(&self) -> Vec<usize> {
        (0..libc::CPU_SETSIZE as usize)
            // SAFETY: CPU_ISSET reads the set for an in-range CPU number.
            .filter(|&c| unsafe { libc::CPU_ISSET(c, &self.0) })
            .collect()
    }
}

/// The CPUs this process may run on (its affinity mask).
pub fn allowed_cpus() -> io::Result<CpuSet> {
    // SAFETY: sched_getaffinity fills a zeroed cpu_set_t of the size passed.
    unsafe {
        let mut s: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &mut s) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(CpuSet(s))
    }
}

/// The affinity mask of process `pid` (for tests and diagnostics).
pub fn affinity_of(pid: u32) -> io::Result<CpuSet> {
    let pid = libc::pid_t::try_from(pid).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: as in `allowed_cpus`.
    unsafe {
        let mut s: libc::cpu_set_t = std::mem::zeroed();
        if libc::sched_getaffinity(pid, std::mem::size_of::<libc::cpu_set_t>(), &mut s) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(CpuSet(s))
    }
}

/// How the child is set up between `fork` and `exec`.
#[derive(Debug, Clone, Copy)]
pub struct ChildSetup {
    /// Descriptor (same number in the child) that must survive `exec`.
    pub keep_fd: Option<RawFd>,
    /// CPU binding.
    pub cpus: Option<CpuSet>,
    /// Pid of the launcher: the child gives up if its parent already died.
    pub parent_pid: u32,
    /// A second descriptor that must survive `exec` (the clean-up guard's
    /// pipe, see [`super::guard`]).
    pub watch_fd: Option<RawFd>,
}

/// Puts the child in its own process group and installs the `pre_exec`
/// hook: `PR_SET_PDEATHSIG(SIGKILL)` (the child dies when the launching
/// *thread* ends), clearing `FD_CLOEXEC` on `keep_fd` and `watch_fd`, and
/// CPU binding.
pub fn prepare_child(cmd: &mut Command, setup: ChildSetup) {
    cmd.process_group(0);
    let parent = setup.parent_pid as libc::pid_t;
    let hook = move || -> io::Result<()> {
        // SAFETY: only async-signal-safe system calls on plain values run
        // between fork and exec; nothing allocates or takes locks.
        unsafe {
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(io::Error::last_os_error());
            }
            // The parent may have died before the prctl took effect.
            if libc::getppid() != parent {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            for fd in [setup.keep_fd, setup.watch_fd].into_iter().flatten() {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
            if let Some(set) = setup.cpus {
                if libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set.0) != 0 {
                    return Err(io::Error::last_os_error());
                }
            }
        }
        Ok(())
    };
    // SAFETY: the hook above is async-signal-safe (see its comment).
    unsafe {
        cmd.pre_exec(hook);
    }
}

/// Whether standard input is a terminal of which this process is not in
/// the foreground (reading it would stop the launcher with SIGTTIN).
pub fn stdin_is_background_tty() -> bool {
    // SAFETY: isatty/tcgetpgrp/getpgrp take plain values only.
    unsafe {
        if libc::isatty(0) != 1 {
            return false;
        }
        let fg = libc::tcgetpgrp(0);
        fg >= 0 && fg != libc::getpgrp()
    }
}

/// Raises the soft limit of open files to the hard limit (each rank costs
/// the launcher three descriptors). Failure only matters for huge jobs, so
/// it is ignored.
pub fn raise_nofile_limit() {
    // SAFETY: getrlimit/setrlimit with a valid rlimit structure.
    unsafe {
        let mut rl: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut rl) == 0 && rl.rlim_cur < rl.rlim_max {
            rl.rlim_cur = rl.rlim_max;
            libc::setrlimit(libc::RLIMIT_NOFILE, &rl);
        }
    }
}

/// The conventional name of a signal (`SIGKILL`), or `signal N`.
pub fn signal_name(sig: i32) -> String {
    let name = match sig {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGTRAP => "SIGTRAP",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGUSR2 => "SIGUSR2",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGALRM => "SIGALRM",
        libc::SIGTERM => "SIGTERM",
        libc::SIGCHLD => "SIGCHLD",
        libc::SIGCONT => "SIGCONT",
        libc::SIGSTOP => "SIGSTOP",
        libc::SIGTSTP => "SIGTSTP",
        libc::SIGXCPU => "SIGXCPU",
        libc::SIGXFSZ => "SIGXFSZ",
        libc::SIGSYS => "SIGSYS",
        _ => return format!("signal {sig}"),
    };
    name.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuset_round_trip() {
        let s = CpuSet::from_cpus(&[0, 3, 5, 100_000]);
        assert_eq!(s.cpus(), vec![0, 3, 5]);
        assert!(!allowed_cpus().unwrap().cpus().is_empty());
    }

    #[test]
    fn kill_group_rejects_init_and_ignores_missing() {
        assert!(kill_group(1, 0).is_err());
        assert!(kill_group(0, 0).is_err());
        // pid_max is at most 2^22, so this group cannot exist.
        assert!(kill_group(99_999_999, libc::SIGTERM).is_ok());
    }

    #[test]
    fn poll_times_out_and_sees_wakeups() {
        let p = WakePipe::new(&[]).unwrap();
        let r = poll_readable(&[p.read_fd()], Some(Duration::from_millis(10))).unwrap();
        assert!(!r[0].readable);
        let w = p.waker().unwrap();
        wake(&w);
        let r = poll_readable(&[p.read_fd()], Some(Duration::from_secs(5))).unwrap();
        assert!(r[0].readable);
        assert_eq!(p.drain(), vec![0]);
    }

    #[test]
    fn signal_names() {
        assert_eq!(signal_name(9), "SIGKILL");
        assert_eq!(signal_name(15), "SIGTERM");
        assert_eq!(signal_name(64), "signal 64");
    }
}
