//! Command-line parsing of `tmpirun`.

use std::ffi::{OsStr, OsString};
use std::time::Duration;

use super::{AppContext, BindTo, EnvSpec, LaunchConfig, StdinTarget, DEFAULT_KILL_GRACE};

/// Largest accepted `-n`.
pub const MAX_RANKS: u32 = 65_536;

/// Variables the launcher sets itself; `-x` may not override them.
pub const RESERVED_ENV: &[&str] = &[
    "PMI_FD",
    "PMI_RANK",
    "PMI_SIZE",
    "TMPI_JOB_ID",
    "TMPI_SESSION_DIR",
    "TMPI_APPNUM",
    tmpi_base::mca::CMDLINE_ENV,
    tmpi_base::mca::OVERSUBSCRIBED_ENV,
];

/// What the command line asks for.
// Made once per tmpirun process: the size of the Run variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, PartialEq)]
pub enum Invocation {
    /// Run a job.
    Run(LaunchConfig),
    /// `--help`.
    Help,
    /// `--version`.
    Version,
}

/// A bad command line (`tmpirun` exits with status 2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArgError {
    /// An option that `tmpirun` does not know.
    #[error("unknown option {0:?}")]
    UnknownOption(String),
    /// An option without its value.
    #[error("option {0} needs a value")]
    MissingValue(String),
    /// An option value that cannot be used.
    #[error("invalid value {value:?} for {option}: {why}")]
    BadValue {
        /// The option.
        option: String,
        /// The value given.
        value: String,
        /// What is wrong with it.
        why: String,
    },
    /// No `-n`.
    #[error("the number of ranks is missing (use -n N)")]
    MissingRanks,
    /// No program after the options.
    #[error("no program to run")]
    MissingProgram,
    /// An argument that is not valid UTF-8 where text is required.
    #[error("option {0} needs a UTF-8 value")]
    NotUtf8(String),
    /// A multi-host option: tmpirun starts ranks on this machine only.
    #[error(
        "{0}: tmpirun starts ranks on this machine only and hands multi-host jobs to \
             Open MPI's mpirun, but found none (mpirun.openmpi on PATH, or \
             $TMPIRUN_OMPI_MPIRUN). Start the program with a cluster launcher, whose runtime \
             tmpi ranks talk to: Open MPI's \
             mpirun (PMIx), e.g. `mpirun.openmpi --host a,b -n 4 ./prog` or \
             `mpirun.openmpi --hostfile hosts -N 2 ./prog`; MPICH's Hydra, e.g. \
             `mpiexec.hydra -hosts a,b -n 4 ./prog` or `mpiexec.hydra -f hosts -ppn 2 ./prog`; \
             or Slurm, `srun --mpi=pmi2 -N 2 -n 4 ./prog` (see docs/multinode.md)"
    )]
    MultiHost(String),
    /// `:` with nothing before or after it.
    #[error("empty program part around ':' (MPMD: tmpirun -n 1 ./a : -n 2 ./b)")]
    EmptyPart,
}

/// Usage text for `--help`.
pub const USAGE: &str = "\
usage: tmpirun -n N [options] [--] program [args...] [: -n M [options] program2 [args...]]...

Starts N ranks of program on this machine with a built-in PMI-1/PMI-2 server.
With `:`, several programs form one job (MPMD): ranks are numbered in order,
and each part's ranks see its index as MPI_APPNUM (0, 1, ...). -n, --mca, -x
and -wdir given in a part apply to that part; --mca of the first part applies
to every part, later parts' settings win.

options:
  -n, -np N              number of ranks (1..=65536)
  --mca NAME VALUE       set MCA parameter NAME for the ranks (repeatable)
  -x VAR[=VALUE]         export VAR to the ranks (with VALUE, or its current value)
  --tag-output           prefix each output line with [1,RANK]<stdout>: or <stderr>:
  --timeout SECS         end the job after SECS seconds (exit status 124);
                         default from MPIEXEC_TIMEOUT if set, else none
  --bind-to core|none    bind rank r to core r (ranks outnumbering the cores: in
                         blocks, neighbouring ranks on one core; default none)
  --kill-grace SECS      time between SIGTERM and SIGKILL when ending a job (default 2)
  --stdin RANK|none      rank that receives tmpirun's standard input (default 0)
  -wdir, --wdir DIR      working directory of the ranks (default tmpirun's)
  --report-bindings      print each rank's CPU binding on stderr
  --output-filename DIR  write rank R's output to DIR/1/rank.R/stdout and stderr
                         instead of tmpirun's
  -v, --verbose          log what tmpirun does on stderr
  --oversubscribe, --allow-run-as-root
                         accepted for Open MPI compatibility (always allowed)
  --host, -H, --hostfile, -machinefile, -N, --npernode, --map-by
                         several hosts: tmpirun hands the job to Open MPI's
                         mpirun ($TMPIRUN_OMPI_MPIRUN, else mpirun.openmpi on
                         PATH; `none`: never), whose runtime serves the ranks
                         PMIx; without one the options are refused with a
                         message naming the launchers to use
  -h, --help             show this help
  -V, --version          show the version

The job ends when a rank exits non-zero, is killed by a signal, calls abort,
or exits 0 after initializing PMI without finalizing it; the other ranks get
SIGTERM, then SIGKILL after the grace period, and tmpirun exits with the
failing rank's status (128+signal for a signal). SIGINT, SIGTERM and SIGHUP
are forwarded to the ranks and end the job; SIGUSR1/SIGUSR2, SIGTSTP and
SIGCONT are forwarded.
";

fn text(opt: &str, v: OsString) -> Result<String, ArgError> {
    v.into_string()
        .map_err(|_| ArgError::NotUtf8(opt.to_string()))
}

fn seconds(opt: &str, v: &str) -> Result<Duration, ArgError> {
    let bad = |why: &str| ArgError::BadValue {
        option: opt.to_string(),
        value: v.to_string(),
        why: why.to_string(),
    };
    let f: f64 = v
        .trim()
        .parse()
        .map_err(|_| bad("not a number of seconds"))?;
    if !f.is_finite() || !(0.0..=1e9).contains(&f) {
        return Err(bad("must be between 0 and 1e9 seconds"));
    }
    Ok(Duration::from_secs_f64(f))
}

/// Parses the arguments after the program name.
pub fn parse_args<I>(args: I) -> Result<Invocation, ArgError>
where
    I: IntoIterator<Item = OsString>,
{
    parse_args_with_env(args, std::env::var("MPIEXEC_TIMEOUT").ok())
}

/// [`parse_args`] with the value of `MPIEXEC_TIMEOUT` given explicitly.
pub fn parse_args_with_env<I>(args: I, env_timeout: Option<String>) -> Result<Invocation, ArgError>
where
    I: IntoIterator<Item = OsString>,
{
    let mut it = args.into_iter();
    let mut parts: Vec<AppContext> = Vec::new();
    let mut report_bindings = false;
    let mut output_dir: Option<std::path::PathBuf> = None;
    let mut tag_output = false;
    let mut timeout = None;
    let mut bind = BindTo::None;
    let mut kill_grace = DEFAULT_KILL_GRACE;
    let mut stdin = StdinTarget::Rank(0);
    let mut verbose = false;
    loop {
        let mut nprocs: Option<u32> = None;
        let mut mca = Vec::new();
        let mut env = Vec::new();
        let mut wdir: Option<std::path::PathBuf> = None;
        let mut program: Option<OsString> = None;

        while let Some(arg) = it.next() {
            let Some(s) = arg.to_str() else {
                program = Some(arg);
                break;
            };
            if s == "--" {
                program = Some(it.next().ok_or(ArgError::MissingProgram)?);
                break;
            }
            if s == ":" {
                return Err(ArgError::EmptyPart);
            }
            if !s.starts_with('-') || s == "-" {
                program = Some(arg);
                break;
            }
            // `--opt=value` for long options.
            let (name, inline): (String, Option<OsString>) = match s.split_once('=') {
                Some((n, v)) if n.starts_with("--") => (n.to_string(), Some(OsString::from(v))),
                _ => (s.to_string(), None),
            };
            let mut inline = inline;
            let mut value = |it: &mut dyn Iterator<Item = OsString>| -> Result<OsString, ArgError> {
                match inline.take() {
                    Some(v) => Ok(v),
                    None => it
                        .next()
                        .ok_or_else(|| ArgError::MissingValue(name.clone())),
                }
            };
            match name.as_str() {
                "-h" | "--help" | "-help" => return Ok(Invocation::Help),
                "-V" | "--version" | "-version" => return Ok(Invocation::Version),
                "-n" | "-np" | "--n" | "--np" | "-c" => {
                    let v = text(&name, value(&mut it)?)?;
                    let n: u32 = v.trim().parse().map_err(|_| ArgError::BadValue {
                        option: name.clone(),
                        value: v.clone(),
                        why: "not a positive integer".into(),
                    })?;
                    if n == 0 || n > MAX_RANKS {
                        return Err(ArgError::BadValue {
                            option: name.clone(),
                            value: v,
                            why: format!("must be between 1 and {MAX_RANKS}"),
                        });
                    }
                    nprocs = Some(n);
                }
                "--mca" | "-mca" => {
                    let k = text(&name, value(&mut it)?)?;
                    let v = text(
                        &name,
                        it.next()
                            .ok_or_else(|| ArgError::MissingValue(format!("{name} {k}")))?,
                    )?;
                    if !tmpi_base::mca::is_param_name(&k) {
                        return Err(ArgError::BadValue {
                            option: name.clone(),
                            value: k,
                            why: "a parameter name has only letters, digits and '_'".into(),
                        });
                    }
                    mca.push((k, v));
                }
                "-x" => {
                    let v = value(&mut it)?;
                    env.push(parse_env_spec(&v)?);
                }
                "--tag-output" | "-tag-output" => tag_output = true,
                "--timeout" | "-timeout" => {
                    let v = text(&name, value(&mut it)?)?;
                    let d = seconds(&name, &v)?;
                    if d.is_zero() {
                        return Err(ArgError::BadValue {
                            option: name.clone(),
                            value: v,
                            why: "must be more than 0 seconds".into(),
                        });
                    }
                    timeout = Some(d);
                }
                "--kill-grace" => {
                    let v = text(&name, value(&mut it)?)?;
                    kill_grace = seconds(&name, &v)?;
                }
                "--bind-to" | "-bind-to" => {
                    let v = text(&name, value(&mut it)?)?;
                    bind = match v.as_str() {
                        "core" => BindTo::Core,
                        "none" => BindTo::None,
                        _ => {
                            return Err(ArgError::BadValue {
                                option: name.clone(),
                                value: v,
                                why: "expected core or none".into(),
                            })
                        }
                    };
                }
                "--stdin" | "-stdin" => {
                    let v = text(&name, value(&mut it)?)?;
                    stdin = if v == "none" {
                        StdinTarget::None
                    } else {
                        StdinTarget::Rank(v.parse().map_err(|_| ArgError::BadValue {
                            option: name.clone(),
                            value: v.clone(),
                            why: "expected a rank or none".into(),
                        })?)
                    };
                }
                "-v" | "--verbose" => verbose = true,
                "-wdir" | "--wdir" | "-wd" | "--wd" => {
                    wdir = Some(std::path::PathBuf::from(value(&mut it)?));
                }
                "--report-bindings" | "-report-bindings" => report_bindings = true,
                "--output-filename" | "-output-filename" => {
                    let v = value(&mut it)?;
                    if v.is_empty() {
                        return Err(ArgError::BadValue {
                            option: name.clone(),
                            value: String::new(),
                            why: "needs a directory".into(),
                        });
                    }
                    output_dir = Some(std::path::PathBuf::from(v));
                }
                m if super::handoff::is_multi_host(m) => {
                    return Err(ArgError::MultiHost(m.to_string()))
                }
                // Open MPI compatibility: tmpirun always allows both.
                "--oversubscribe" | "-oversubscribe" | "--allow-run-as-root" => {}
                _ => return Err(ArgError::UnknownOption(s.to_string())),
            }
            if inline.is_some() {
                // `--flag=value` for an option without a value.
                return Err(ArgError::BadValue {
                    option: name.clone(),
                    value: s.to_string(),
                    why: "this option takes no value".into(),
                });
            }
        }

        let program = program.ok_or(ArgError::MissingProgram)?;
        let nprocs = nprocs.ok_or(ArgError::MissingRanks)?;
        let mut args = Vec::new();
        let mut more = false;
        for a in it.by_ref() {
            if a == ":" {
                more = true;
                break;
            }
            args.push(a);
        }
        parts.push(AppContext {
            nprocs,
            program,
            args,
            mca,
            env,
            wdir,
        });
        if !more {
            break;
        }
    }
    let nprocs = parts
        .iter()
        .try_fold(0u32, |t, p| t.checked_add(p.nprocs))
        .filter(|&n| n <= MAX_RANKS)
        .ok_or_else(|| ArgError::BadValue {
            option: "-n".into(),
            value: parts
                .iter()
                .map(|p| p.nprocs.to_string())
                .collect::<Vec<_>>()
                .join("+"),
            why: format!("the job must have at most {MAX_RANKS} ranks"),
        })?;
    let mut rest = parts.split_off(1);
    let first = parts.pop().expect("one part at least");
    // The first part's --mca settings apply to every part; a part's own
    // come later and win.
    for p in &mut rest {
        let mut m = first.mca.clone();
        m.append(&mut p.mca);
        p.mca = m;
    }
    if let StdinTarget::Rank(r) = stdin {
        if r >= nprocs {
            return Err(ArgError::BadValue {
                option: "--stdin".into(),
                value: r.to_string(),
                why: format!("the job has ranks 0..{}", nprocs - 1),
            });
        }
    }
    if timeout.is_none() {
        if let Some(v) = env_timeout.filter(|v| !v.trim().is_empty()) {
            let d = seconds("MPIEXEC_TIMEOUT", &v)?;
            if !d.is_zero() {
                timeout = Some(d);
            }
        }
    }
    Ok(Invocation::Run(LaunchConfig {
        nprocs,
        program: first.program,
        args: first.args,
        mca: first.mca,
        env: first.env,
        wdir: first.wdir,
        report_bindings,
        output_dir,
        apps: rest,
        tag_output,
        timeout,
        bind,
        kill_grace,
        stdin,
        verbose,
        adopt_orphans: true,
        cleanup_guard: true,
    }))
}

/// Parses `VAR` or `VAR=VALUE` of `-x`.
pub fn parse_env_spec(v: &OsStr) -> Result<EnvSpec, ArgError> {
    use std::os::unix::ffi::OsStrExt;
    let bytes = v.as_bytes();
    let (name, value) = match bytes.iter().position(|&b| b == b'=') {
        Some(i) => (
            &bytes[..i],
            Some(OsString::from(OsStr::from_bytes(&bytes[i + 1..]))),
        ),
        None => (bytes, None),
    };
    let name_ok = !name.is_empty()
        && !name[0].is_ascii_digit()
        && name.iter().all(|&b| b.is_ascii_alphanumeric() || b == b'_');
    let name_str = String::from_utf8_lossy(name).into_owned();
    if !name_ok {
        return Err(ArgError::BadValue {
            option: "-x".into(),
            value: v.to_string_lossy().into_owned(),
            why: "a variable name has letters, digits and '_' and does not start with a digit"
                .into(),
        });
    }
    if RESERVED_ENV.contains(&name_str.as_str()) {
        return Err(ArgError::BadValue {
            option: "-x".into(),
            value: v.to_string_lossy().into_owned(),
            why: format!("{name_str} is set by tmpirun itself"),
        });
    }
    Ok(EnvSpec {
        name: name_str,
        value,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str]) -> Result<Invocation, ArgError> {
        parse_args_with_env(args.iter().map(OsString::from), None)
    }

    fn cfg(args: &[&str]) -> LaunchConfig {
        match p(args).unwrap() {
            Invocation::Run(c) => c,
            other => panic!("not a run: {other:?}"),
        }
    }

    #[test]
    fn full_command_line() {
        let c = cfg(&[
            "-np",
            "3",
            "--mca",
            "btl",
            "self,sm",
            "-x",
            "A=1=2",
            "-x",
            "HOME",
            "--tag-output",
            "--timeout",
            "2.5",
            "--bind-to",
            "core",
            "--stdin",
            "none",
            "--oversubscribe",
            "--allow-run-as-root",
            "prog",
            "-n",
            "x",
        ]);
        assert_eq!(c.nprocs, 3);
        assert_eq!(c.mca, vec![("btl".to_string(), "self,sm".to_string())]);
        assert_eq!(c.env[0].name, "A");
        assert_eq!(c.env[0].value.as_deref(), Some(OsStr::new("1=2")));
        assert_eq!(c.env[1].value, None);
        assert!(c.tag_output);
        assert_eq!(c.timeout, Some(Duration::from_millis(2500)));
        assert_eq!(c.bind, BindTo::Core);
        assert_eq!(c.stdin, StdinTarget::None);
        assert_eq!(c.program, "prog");
        assert_eq!(c.args, vec![OsString::from("-n"), OsString::from("x")]);
    }

    #[test]
    fn double_dash_and_inline_values() {
        let c = cfg(&["--np=2", "--timeout=1", "--", "-weird"]);
        assert_eq!(c.nprocs, 2);
        assert_eq!(c.program, "-weird");
        assert_eq!(c.timeout, Some(Duration::from_secs(1)));
    }

    #[test]
    fn env_timeout_is_default_only() {
        let a = |t: &str| parse_args_with_env(["-n", "1", "p"].map(OsString::from), Some(t.into()));
        match a("7").unwrap() {
            Invocation::Run(c) => assert_eq!(c.timeout, Some(Duration::from_secs(7))),
            _ => unreachable!(),
        }
        assert!(a("x").is_err());
        let c = parse_args_with_env(
            ["-n", "1", "--timeout", "3", "p"].map(OsString::from),
            Some("7".into()),
        )
        .unwrap();
        match c {
            Invocation::Run(c) => assert_eq!(c.timeout, Some(Duration::from_secs(3))),
            _ => unreachable!(),
        }
    }

    #[test]
    fn errors() {
        assert_eq!(p(&["prog"]), Err(ArgError::MissingRanks));
        assert_eq!(p(&["-n", "2"]), Err(ArgError::MissingProgram));
        assert_eq!(p(&["-n"]), Err(ArgError::MissingValue("-n".into())));
        assert!(matches!(
            p(&["-n", "0", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "x", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["--bogus", "p"]),
            Err(ArgError::UnknownOption(_))
        ));
        assert!(matches!(
            p(&["-n", "1", "--mca", "a b", "1", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "1", "--mca", "x"]),
            Err(ArgError::MissingValue(_))
        ));
        assert!(matches!(
            p(&["-n", "1", "-x", "1A", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "1", "-x", "PMI_RANK=3", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "1", "--timeout", "0", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "1", "--timeout", "-1", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "1", "--bind-to", "socket", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["-n", "2", "--stdin", "2", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert!(matches!(
            p(&["--tag-output=1", "-n", "1", "p"]),
            Err(ArgError::BadValue { .. })
        ));
        assert_eq!(p(&["--help", "-n"]), Ok(Invocation::Help));
    }
}
