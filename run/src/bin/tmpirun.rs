//! `tmpirun`: starts an MPI job of N local ranks with the built-in PMI
//! server. See `tmpirun --help` and [`tmpi_run::launcher`] for the
//! semantics (environment, failure handling, exit status).
//!
//! Exit status: 0 on success; the failing rank's status (128+N for signal
//! N, the abort code for an abort); 124 on `--timeout`; 2 for a bad command
//! line; 1 when the job could not be set up.

use std::process::ExitCode;

use tmpi_run::launcher::{self, Invocation};

/// Logs `tracing` events of the launcher and its PMI server on stderr:
/// warnings and errors always, everything down to DEBUG with `--verbose`.
fn init_logging(verbose: bool) {
    use tracing::level_filters::LevelFilter;
    struct Stderr(LevelFilter);
    impl tracing::Subscriber for Stderr {
        fn enabled(&self, m: &tracing::Metadata<'_>) -> bool {
            *m.level() <= self.0
        }
        fn max_level_hint(&self) -> Option<LevelFilter> {
            Some(self.0)
        }
        fn new_span(&self, _: &tracing::span::Attributes<'_>) -> tracing::span::Id {
            tracing::span::Id::from_u64(1)
        }
        fn record(&self, _: &tracing::span::Id, _: &tracing::span::Record<'_>) {}
        fn record_follows_from(&self, _: &tracing::span::Id, _: &tracing::span::Id) {}
        fn event(&self, e: &tracing::Event<'_>) {
            struct V(String);
            impl tracing::field::Visit for V {
                fn record_debug(&mut self, f: &tracing::field::Field, v: &dyn std::fmt::Debug) {
                    if f.name() == "message" {
                        self.0.push_str(&format!("{v:?}"));
                    } else {
                        self.0.push_str(&format!(" {}={v:?}", f.name()));
                    }
                }
            }
            let mut v = V(String::new());
            e.record(&mut v);
            let m = e.metadata();
            eprintln!("tmpirun: {} {}: {}", m.level(), m.target(), v.0);
        }
        fn enter(&self, _: &tracing::span::Id) {}
        fn exit(&self, _: &tracing::span::Id) {}
    }
    let level = if verbose {
        LevelFilter::DEBUG
    } else {
        LevelFilter::WARN
    };
    let _ = tracing::subscriber::set_global_default(Stderr(level));
}

/// Whether tmpirun runs as root (Open MPI's mpirun then needs
/// `--allow-run-as-root`), from /proc/self/status.
fn runs_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("Uid:"))
                .and_then(|l| l.split_whitespace().nth(1).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

fn main() -> ExitCode {
    let all: Vec<std::ffi::OsString> = std::env::args_os().skip(1).collect();
    if let Some(r) = launcher::guard::main_if_guard(&all) {
        return match r {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("tmpirun: {e}");
                ExitCode::from(2)
            }
        };
    }
    // Several hosts: Open MPI's mpirun takes the job over (exec), if there
    // is one; otherwise parse_args refuses the options, saying what to use.
    if launcher::handoff::wants_hosts(&all) {
        if let Some(rt) = launcher::handoff::find_runtime() {
            let args = match launcher::handoff::open_mpi_args(&all, runs_as_root()) {
                Ok(a) => a,
                Err(e) => {
                    eprintln!("tmpirun: {e}");
                    eprintln!("Try 'tmpirun --help' for more information.");
                    return ExitCode::from(2);
                }
            };
            eprintln!(
                "tmpirun: several hosts: handing the job to {}",
                rt.display()
            );
            use std::os::unix::process::CommandExt;
            let e = std::process::Command::new(&rt).args(&args).exec();
            eprintln!("tmpirun: cannot start {}: {e}", rt.display());
            return ExitCode::from(1);
        }
    }
    let inv = match launcher::parse_args(all) {
        Ok(i) => i,
        Err(e) => {
            eprintln!("tmpirun: {e}");
            eprintln!("Try 'tmpirun --help' for more information.");
            return ExitCode::from(2);
        }
    };
    let cfg = match inv {
        Invocation::Help => {
            print!("{}", launcher::USAGE);
            return ExitCode::SUCCESS;
        }
        Invocation::Version => {
            println!("tmpirun (tmpi) {}", env!("CARGO_PKG_VERSION"));
            return ExitCode::SUCCESS;
        }
        Invocation::Run(cfg) => cfg,
    };
    init_logging(cfg.verbose);
    match launcher::run(&cfg) {
        Ok(outcome) => ExitCode::from(outcome.exit_code),
        Err(e) => {
            eprintln!("tmpirun: {e}");
            ExitCode::from(1)
        }
    }
}
