//! `tmpi-pmicheck`: checks the PMI wire-up of one job from the inside.
//!
//! Run it as every rank of a job (`tmpirun -n 4 tmpi-pmicheck`,
//! `mpiexec.hydra -n 4 tmpi-pmicheck`, `srun --mpi=pmi2 -n 4 tmpi-pmicheck`).
//! Each rank connects through PMI, prints its identity, publishes a short
//! value and a long binary value (which the modex must split and encode),
//! fences, reads and verifies every peer's values, fences again and
//! finalizes. Exit status 0 when everything matched, 1 on a mismatch or PMI
//! error, 2 on bad usage.
//!
//! Options:
//! * `--abort CODE` with `--abort-rank R` (default 0): after the first fence
//!   rank R calls PMI abort with CODE; the other ranks then wait in a fence
//!   that can never complete, so the launcher must end them.
//!   `--abort-message TEXT` is the abort's message (default
//!   `tmpi-pmicheck --abort`).
//! * `--exit-without-finalize`: every rank exits with status 0 right after
//!   the checks, without PMI finalize (the launcher must see a failure).
//! * `--long-len N`: length of the long value (default 3000 bytes).
//! * `--pid-dir DIR`: write this process's pid to `DIR/rank-R.pid` before
//!   the first fence (lets tests check that no rank survives an abort).
//! * `--quiet`: print only errors.
//!
//! `TMPI_MCA_pmi_base_verbose=100` shows every PMI message on stderr.

use std::process::ExitCode;

use tmpi_base::modex::Modex;
use tmpi_base::pmi::{PmiClient, PmiModex};

#[derive(Debug, Default)]
struct Opts {
    abort: Option<i32>,
    abort_rank: u32,
    abort_message: Option<String>,
    no_finalize: bool,
    long_len: usize,
    quiet: bool,
    pid_dir: Option<std::path::PathBuf>,
}

fn usage(msg: &str) -> ExitCode {
    eprintln!("tmpi-pmicheck: {msg}");
    eprintln!("usage: tmpi-pmicheck [--abort CODE [--abort-rank R] [--abort-message TEXT]] [--exit-without-finalize] [--long-len N] [--pid-dir DIR] [--quiet]");
    ExitCode::from(2)
}

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        long_len: 3000,
        ..Opts::default()
    };
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut value = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--abort" => {
                let v = value("--abort")?;
                o.abort = Some(
                    v.parse()
                        .map_err(|_| format!("--abort {v:?}: not an integer"))?,
                );
            }
            "--abort-message" => o.abort_message = Some(value("--abort-message")?),
            "--abort-rank" => {
                let v = value("--abort-rank")?;
                o.abort_rank = v
                    .parse()
                    .map_err(|_| format!("--abort-rank {v:?}: not a rank"))?;
            }
            "--long-len" => {
                let v = value("--long-len")?;
                o.long_len = v
                    .parse()
                    .map_err(|_| format!("--long-len {v:?}: not a length"))?;
            }
            "--pid-dir" => o.pid_dir = Some(value("--pid-dir")?.into()),
            "--exit-without-finalize" => o.no_finalize = true,
            "--quiet" => o.quiet = true,
            "-h" | "--help" => return Err("help".into()),
            other => return Err(format!("unknown argument {other:?}")),
        }
    }
    Ok(o)
}

/// Deterministic bytes for `rank`, covering every byte value (NUL, space,
/// `;`, `=`, newline...).
fn long_value(rank: u32, len: usize) -> Vec<u8> {
    let mut x: u32 = 0x9e37_79b9 ^ rank.wrapping_mul(0x85eb_ca6b);
    (0..len)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            if i < 256 {
                i as u8
            } else {
                x as u8
            }
        })
        .collect()
}

fn short_value(rank: u32) -> Vec<u8> {
    format!("hello from rank {rank}; a=b").into_bytes()
}

fn run(o: &Opts) -> Result<(), String> {
    let mut client = PmiClient::connect_from_env().map_err(|e| format!("connect: {e}"))?;
    // PMI traffic is logged at TRACE with TMPI_MCA_pmi_base_verbose=100.
    if let Err(e) = tmpi_base::log::init_logging(client.rank()) {
        eprintln!("tmpi-pmicheck: logging not set up: {e}");
    }
    let info = client
        .process_info()
        .map_err(|e| format!("process_info: {e}"))?;
    let rank = info.rank;
    if !o.quiet {
        println!(
            "rank {rank}/{}: pid={} version={:?} node={} local={}/{} host={} job={} appnum={}",
            info.size,
            std::process::id(),
            client.version(),
            info.node_id,
            info.local_rank,
            info.local_size,
            info.hostname,
            info.job_id,
            client.appnum()
        );
    }
    let size = info.size;
    if let Some(dir) = &o.pid_dir {
        let path = dir.join(format!("rank-{rank}.pid"));
        std::fs::write(&path, std::process::id().to_string())
            .map_err(|e| format!("writing {}: {e}", path.display()))?;
    }
    let mut modex = PmiModex::new(client);
    modex
        .put("check.short", &short_value(rank))
        .map_err(|e| format!("put: {e}"))?;
    modex
        .put("check.long", &long_value(rank, o.long_len))
        .map_err(|e| format!("put long: {e}"))?;
    modex.fence().map_err(|e| format!("fence: {e}"))?;
    if let Some(code) = o.abort {
        if rank == o.abort_rank {
            let msg = o
                .abort_message
                .as_deref()
                .unwrap_or("tmpi-pmicheck --abort");
            modex.client().abort(code, msg);
        }
        // Wait in a fence the aborting rank never enters: the launcher must
        // end this process. A server that fails the fence instead is fine too.
        let r = modex.fence();
        return Err(format!(
            "rank {rank}: still running after rank {} aborted (fence: {r:?})",
            o.abort_rank
        ));
    }
    for peer in 0..size {
        let short = modex
            .get(peer, "check.short")
            .map_err(|e| format!("get short of {peer}: {e}"))?;
        if short != short_value(peer) {
            return Err(format!(
                "rank {peer}'s short value is wrong: {:?}",
                String::from_utf8_lossy(&short)
            ));
        }
        let long = modex
            .get(peer, "check.long")
            .map_err(|e| format!("get long of {peer}: {e}"))?;
        if long != long_value(peer, o.long_len) {
            return Err(format!(
                "rank {peer}'s long value is wrong ({} bytes)",
                long.len()
            ));
        }
    }
    match modex.get(0, "check.never-put") {
        Err(tmpi_base::modex::ModexError::NotFound { .. }) => {}
        other => return Err(format!("a key never put was found: {other:?}")),
    }
    modex.fence().map_err(|e| format!("second fence: {e}"))?;
    if o.no_finalize {
        if !o.quiet {
            println!("rank {rank}: ok, exiting without finalize");
        }
        std::process::exit(0);
    }
    modex
        .client()
        .finalize()
        .map_err(|e| format!("finalize: {e}"))?;
    if !o.quiet {
        println!("rank {rank}: ok ({size} peers verified)");
    }
    Ok(())
}

fn main() -> ExitCode {
    let o = match parse_args() {
        Ok(o) => o,
        Err(e) => return usage(&e),
    };
    match run(&o) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("tmpi-pmicheck: {e}");
            ExitCode::FAILURE
        }
    }
}
