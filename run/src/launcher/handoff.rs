//! Multi-host jobs: tmpirun hands them to Open MPI's `mpirun`.
//!
//! tmpirun starts ranks on its own machine only (it has no remote launcher
//! of its own). A command line with `--host`, `-H`, `--hostfile`,
//! `-machinefile`, `-N`/`--npernode` or `--map-by` is translated into an
//! Open MPI `mpirun` command line and that program replaces tmpirun
//! (`exec`): its runtime starts the ranks on the hosts and serves them
//! PMIx, which tmpi's ranks speak. The runtime is `$TMPIRUN_OMPI_MPIRUN`
//! if set (`none`: no hand-off), else `mpirun.openmpi` on `PATH` (Debian's
//! name of Open MPI's mpirun); without one, tmpirun refuses the options
//! with a message naming the launchers to use ([`ArgError::MultiHost`]).
//! Hydra is not used: its options differ too much to map faithfully
//! (`-ppn` vs `-N`, `-f` hostfile syntax, no `--map-by`).
//!
//! Mapping: `-n`, `-x`, `--tag-output`, `--timeout` (rounded up to whole
//! seconds), `--bind-to`, `--stdin`, `-wdir`, `--report-bindings`,
//! `--output-filename` and MPMD `:` keep their meaning; `--mca NAME VALUE`
//! becomes `-x TMPI_MCA_NAME=VALUE` (Open MPI's own `--mca` would set Open
//! MPI's parameters); the multi-host options map to `--host`, `--hostfile`,
//! `--npernode` and `--map-by`; `--oversubscribe` is always passed (tmpirun
//! always allows oversubscription) and `--allow-run-as-root` when running
//! as root; `--kill-grace` and `-v` have no counterpart and are dropped.

use std::ffi::{OsStr, OsString};
use std::path::PathBuf;

use super::args::ArgError;

/// Names Open MPI's mpirun for hand-offs (a path or a name on `PATH`).
pub const RUNTIME_ENV: &str = "TMPIRUN_OMPI_MPIRUN";

/// Whether `opt` is one of the options that place ranks on other hosts.
pub fn is_multi_host(opt: &str) -> bool {
    multi_host_target(opt).is_some()
}

/// The Open MPI option a multi-host option maps to.
fn multi_host_target(opt: &str) -> Option<&'static str> {
    Some(match opt {
        "--host" | "-host" | "-H" | "-hosts" => "--host",
        "--hostfile" | "-hostfile" | "--machinefile" | "-machinefile" | "--default-hostfile"
        | "-f" => "--hostfile",
        "-N" | "--npernode" | "-npernode" | "--ppn" | "-ppn" => "--npernode",
        "--map-by" | "-map-by" => "--map-by",
        _ => return None,
    })
}

/// Whether the arguments (tmpirun's, without the program name) ask for
/// several hosts: a multi-host option among the options of some MPMD part.
pub fn wants_hosts(args: &[OsString]) -> bool {
    let mut it = args.iter();
    let mut in_options = true;
    while let Some(a) = it.next() {
        let Some(s) = a.to_str() else {
            in_options = false;
            continue;
        };
        if !in_options {
            if s == ":" {
                in_options = true;
            }
            continue;
        }
        let name = s.split_once('=').map_or(s, |(n, _)| n);
        if is_multi_host(name) {
            return true;
        }
        match takes_values(name) {
            Some(n) if !s.contains('=') => {
                for _ in 0..n {
                    it.next();
                }
            }
            Some(_) => {}
            None if s == "--" => {
                it.next();
                in_options = false;
            }
            None if s.starts_with('-') && s != "-" => {}
            None => in_options = false,
        }
    }
    false
}

/// Number of values an option of tmpirun takes (`None`: not a known
/// option with values).
fn takes_values(opt: &str) -> Option<usize> {
    match opt {
        "--mca" | "-mca" => Some(2),
        "-n" | "-np" | "--n" | "--np" | "-c" | "-x" | "--timeout" | "-timeout" | "--kill-grace"
        | "--bind-to" | "-bind-to" | "--stdin" | "-stdin" | "-wdir" | "--wdir" | "-wd" | "--wd"
        | "--output-filename" | "-output-filename" => Some(1),
        o if multi_host_target(o).is_some() => Some(1),
        _ => None,
    }
}

/// Open MPI's mpirun to hand multi-host jobs to: `$TMPIRUN_OMPI_MPIRUN`,
/// else `mpirun.openmpi` found on `PATH`.
/// `TMPIRUN_OMPI_MPIRUN=none` disables hand-offs.
pub fn find_runtime() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os(RUNTIME_ENV).filter(|p| !p.is_empty()) {
        return (p != "none").then(|| PathBuf::from(p));
    }
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join("mpirun.openmpi"))
        .find(|p| p.is_file())
}

fn bad(option: &str, value: &OsStr, why: &str) -> ArgError {
    ArgError::BadValue {
        option: option.to_string(),
        value: value.to_string_lossy().into_owned(),
        why: why.to_string(),
    }
}

/// Translates tmpirun's arguments into Open MPI mpirun's (see the module
/// documentation). `root`: add `--allow-run-as-root`.
pub fn open_mpi_args(args: &[OsString], root: bool) -> Result<Vec<OsString>, ArgError> {
    let mut out: Vec<OsString> = vec!["--oversubscribe".into()];
    if root {
        out.push("--allow-run-as-root".into());
    }
    let mut it = args.iter().cloned();
    'parts: loop {
        let mut program = false;
        while let Some(arg) = it.next() {
            let Some(s) = arg.to_str().map(str::to_string) else {
                out.push(arg);
                program = true;
                break;
            };
            if s == "--" {
                out.push(it.next().ok_or(ArgError::MissingProgram)?);
                program = true;
                break;
            }
            if s == ":" {
                return Err(ArgError::EmptyPart);
            }
            if !s.starts_with('-') || s == "-" {
                out.push(arg);
                program = true;
                break;
            }
            let (name, mut inline) = match s.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(OsString::from(v))),
                _ => (s.clone(), None),
            };
            let mut value = |it: &mut dyn Iterator<Item = OsString>| {
                inline
                    .take()
                    .or_else(|| it.next())
                    .ok_or_else(|| ArgError::MissingValue(name.clone()))
            };
            match name.as_str() {
                "-n" | "-np" | "--n" | "--np" | "-c" => {
                    out.push("-n".into());
                    out.push(value(&mut it)?);
                }
                "--mca" | "-mca" => {
                    let k = value(&mut it)?;
                    let v = it
                        .next()
                        .ok_or_else(|| ArgError::MissingValue(format!("{name} {k:?}")))?;
                    let k = k
                        .into_string()
                        .map_err(|_| ArgError::NotUtf8(name.clone()))?;
                    if !tmpi_base::mca::is_param_name(&k) {
                        return Err(bad(&name, k.as_ref(), "not a parameter name"));
                    }
                    let mut e = OsString::from(format!("{}{k}=", tmpi_base::mca::ENV_PREFIX));
                    e.push(v);
                    out.push("-x".into());
                    out.push(e);
                }
                "-x" => {
                    let v = value(&mut it)?;
                    super::args::parse_env_spec(&v)?;
                    out.push("-x".into());
                    out.push(v);
                }
                "--timeout" | "-timeout" => {
                    let v = value(&mut it)?;
                    let secs: f64 = v
                        .to_str()
                        .and_then(|t| t.trim().parse().ok())
                        .filter(|f: &f64| f.is_finite() && *f > 0.0 && *f <= 1e9)
                        .ok_or_else(|| bad(&name, &v, "not a number of seconds"))?;
                    out.push("--timeout".into());
                    out.push(format!("{}", secs.ceil() as u64).into());
                }
                "--bind-to" | "-bind-to" => {
                    out.push("--bind-to".into());
                    out.push(value(&mut it)?);
                }
                "--stdin" | "-stdin" => {
                    out.push("--stdin".into());
                    out.push(value(&mut it)?);
                }
                "-wdir" | "--wdir" | "-wd" | "--wd" => {
                    out.push("-wdir".into());
                    out.push(value(&mut it)?);
                }
                "--output-filename" | "-output-filename" => {
                    out.push("--output-filename".into());
                    out.push(value(&mut it)?);
                }
                "--kill-grace" => {
                    value(&mut it)?;
                }
                "--tag-output" | "-tag-output" => out.push("--tag-output".into()),
                "--report-bindings" | "-report-bindings" => out.push("--report-bindings".into()),
                "-v"
                | "--verbose"
                | "--oversubscribe"
                | "-oversubscribe"
                | "--allow-run-as-root" => {}
                o => match multi_host_target(o) {
                    Some(target) => {
                        out.push(target.into());
                        out.push(value(&mut it)?);
                    }
                    None => return Err(ArgError::UnknownOption(s)),
                },
            }
        }
        if !program {
            return Err(ArgError::MissingProgram);
        }
        for a in it.by_ref() {
            let colon = a == ":";
            out.push(a);
            if colon {
                continue 'parts;
            }
        }
        return Ok(out);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn os(v: &[&str]) -> Vec<OsString> {
        v.iter().map(OsString::from).collect()
    }

    #[test]
    fn multi_host_options_are_found_among_options_only() {
        assert!(wants_hosts(&os(&["--host", "a,b", "-n", "2", "p"])));
        assert!(wants_hosts(&os(&["-n", "2", "--map-by=node", "p"])));
        assert!(wants_hosts(&os(&[
            "-n", "1", "p", ":", "-H", "b", "-n", "1", "q"
        ])));
        // The program's own arguments and option values do not count.
        assert!(!wants_hosts(&os(&["-n", "2", "p", "--host", "x"])));
        assert!(!wants_hosts(&os(&["-n", "2", "-x", "-H", "p"])));
        assert!(!wants_hosts(&os(&["-n", "2", "--", "-H", "x"])));
    }

    #[test]
    fn translation_to_open_mpi() {
        let got = open_mpi_args(
            &os(&[
                "--host",
                "a,b",
                "-n",
                "4",
                "--mca",
                "btl",
                "self,tcp",
                "-x",
                "A=1",
                "--timeout",
                "2.5",
                "--kill-grace",
                "1",
                "-v",
                "p",
                "x",
                ":",
                "-N",
                "1",
                "q",
            ]),
            true,
        )
        .unwrap();
        assert_eq!(
            got,
            os(&[
                "--oversubscribe",
                "--allow-run-as-root",
                "--host",
                "a,b",
                "-n",
                "4",
                "-x",
                "TMPI_MCA_btl=self,tcp",
                "-x",
                "A=1",
                "--timeout",
                "3",
                "p",
                "x",
                ":",
                "--npernode",
                "1",
                "q",
            ])
        );
        assert!(matches!(
            open_mpi_args(&os(&["--host", "a", "--bogus", "p"]), false),
            Err(ArgError::UnknownOption(_))
        ));
        assert!(matches!(
            open_mpi_args(&os(&["--host", "a"]), false),
            Err(ArgError::MissingValue(_) | ArgError::MissingProgram)
        ));
    }
}
