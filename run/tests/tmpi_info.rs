//! Runs the `tmpi_info` binary with controlled environments and checks its
//! output: sources and their precedence end to end, bad input, options.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicUsize, Ordering};

use tmpi_base::mca::{encode_cmdline, CMDLINE_ENV};

struct Env {
    home: PathBuf,
    prefix: PathBuf,
}

impl Env {
    fn new(tag: &str) -> Env {
        static N: AtomicUsize = AtomicUsize::new(0);
        let root = std::env::temp_dir().join(format!(
            "tmpi-info-test-{}-{}-{tag}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&root);
        let e = Env {
            home: root.join("home"),
            prefix: root.join("prefix"),
        };
        std::fs::create_dir_all(&e.home).unwrap();
        std::fs::create_dir_all(&e.prefix).unwrap();
        e
    }

    fn user_file(&self, contents: &str) {
        write(&self.home.join(".tmpi/mca-params.conf"), contents);
    }

    fn system_file(&self, contents: &str) {
        write(&self.prefix.join("etc/tmpi-mca-params.conf"), contents);
    }

    fn run(&self, args: &[&str], vars: &[(&str, &str)]) -> Output {
        Command::new(env!("CARGO_BIN_EXE_tmpi_info"))
            .args(args)
            .env_clear()
            .env("HOME", &self.home)
            .env("TMPI_PREFIX", &self.prefix)
            .envs(vars.iter().copied())
            .output()
            .expect("tmpi_info runs")
    }
}

impl Drop for Env {
    fn drop(&mut self) {
        if let Some(root) = self.home.parent() {
            let _ = std::fs::remove_dir_all(root);
        }
    }
}

fn write(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

fn stdout(o: &Output) -> String {
    String::from_utf8(o.stdout.clone()).unwrap()
}

fn stderr(o: &Output) -> String {
    String::from_utf8(o.stderr.clone()).unwrap()
}

/// The parsable record `mca:...:<name>:<field>:` value for a parameter.
fn field(out: &str, name: &str, field: &str) -> Option<String> {
    let needle = format!(":param:{name}:{field}:");
    out.lines()
        .find_map(|l| l.split_once(&needle).map(|(_, v)| v.to_owned()))
}

#[test]
fn version_and_help() {
    let e = Env::new("version");
    let o = e.run(&["--version"], &[]);
    assert!(o.status.success());
    assert_eq!(
        stdout(&o).trim(),
        format!("tmpi {}", env!("CARGO_PKG_VERSION"))
    );
    let o = e.run(&["--help"], &[]);
    assert!(o.status.success());
    assert!(stdout(&o).contains("--param FRAMEWORK COMPONENT"));
}

#[test]
fn default_listing_names_files_and_components() {
    let e = Env::new("default");
    e.user_file("# nothing\n");
    let o = e.run(&[], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert!(
        out.starts_with(&format!("tmpi {}", env!("CARGO_PKG_VERSION"))),
        "{out}"
    );
    assert!(out.contains("Components:"), "{out}");
    let user = e.home.join(".tmpi/mca-params.conf");
    assert!(
        out.contains(&format!("user parameter file: {}\n", user.display())),
        "{out}"
    );
    let system = e.prefix.join("etc/tmpi-mca-params.conf");
    assert!(
        out.contains(&format!(
            "system parameter file: {} (not present)",
            system.display()
        )),
        "{out}"
    );
    assert!(out.contains("tmpi_info --all"), "{out}");
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
}

/// Each of the four sources shows up as the source of the value, and the
/// higher one wins, in the real binary reading the real process environment.
#[test]
fn all_parsable_shows_value_default_and_source_by_precedence() {
    let e = Env::new("prec");
    let all = ["--all", "--parsable"];

    let o = e.run(&all, &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "value").as_deref(),
        Some("auto")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "default").as_deref(),
        Some("auto")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "source").as_deref(),
        Some("default")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "type").as_deref(),
        Some("tristate")
    );
    assert!(out
        .lines()
        .any(|l| l == format!("version:tmpi:{}", env!("CARGO_PKG_VERSION"))));

    e.system_file("mpi_yield_when_idle = 0\nmca_base_verbose = 5\n");
    let out = stdout(&e.run(&all, &[]));
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "value").as_deref(),
        Some("0")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "source").as_deref(),
        Some("system-file")
    );
    let detail = field(&out, "mpi_yield_when_idle", "source_detail").unwrap();
    assert!(detail.ends_with("etc/tmpi-mca-params.conf:1"), "{detail}");

    e.user_file("mpi_yield_when_idle = 1\n");
    let out = stdout(&e.run(&all, &[]));
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "value").as_deref(),
        Some("1")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "source").as_deref(),
        Some("user-file")
    );
    // The system file still provides what the user file does not set.
    assert_eq!(
        field(&out, "mca_base_verbose", "value").as_deref(),
        Some("5")
    );

    let out = stdout(&e.run(&all, &[("TMPI_MCA_mpi_yield_when_idle", "0")]));
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "value").as_deref(),
        Some("0")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "source").as_deref(),
        Some("env")
    );

    let cmdline = encode_cmdline(&[("mpi_yield_when_idle".into(), "auto".into())]);
    let out = stdout(&e.run(
        &all,
        &[
            ("TMPI_MCA_mpi_yield_when_idle", "0"),
            (CMDLINE_ENV, &cmdline),
        ],
    ));
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "value").as_deref(),
        Some("auto")
    );
    assert_eq!(
        field(&out, "mpi_yield_when_idle", "source").as_deref(),
        Some("cmdline")
    );
}

#[test]
fn param_filter() {
    let e = Env::new("filter");
    let o = e.run(&["--param", "mca", "all", "--parsable"], &[]);
    assert!(o.status.success());
    let out = stdout(&o);
    assert!(field(&out, "mca_base_verbose", "value").is_some(), "{out}");
    assert!(
        field(&out, "mpi_yield_when_idle", "value").is_none(),
        "{out}"
    );
    assert!(!out.contains("component:"), "{out}");
    let out = stdout(&e.run(&["--param", "nosuch", "all"], &[]));
    assert!(out.contains("(none match)"), "{out}");
}

#[test]
fn unknown_env_name_warns_with_suggestion() {
    let e = Env::new("unknown");
    let o = e.run(&["--all"], &[("TMPI_MCA_mpi_yeld_when_idle", "1")]);
    assert!(o.status.success(), "unknown names are warnings");
    let err = stderr(&o);
    assert!(err.contains("warning"), "{err}");
    assert!(err.contains("mpi_yeld_when_idle"), "{err}");
    assert!(err.contains("TMPI_MCA_mpi_yeld_when_idle"), "{err}");
    assert!(err.contains("did you mean mpi_yield_when_idle"), "{err}");
}

#[test]
fn invalid_value_is_an_error() {
    let e = Env::new("invalid");
    let o = e.run(&["--all"], &[("TMPI_MCA_mpi_yield_when_idle", "sometimes")]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    assert!(
        err.contains("mpi_yield_when_idle")
            && err.contains("\"sometimes\"")
            && err.contains("auto|1|0"),
        "{err}"
    );
    assert!(
        !err.contains("unknown"),
        "an invalid value is not also unknown: {err}"
    );
}

#[test]
fn malformed_file_is_an_error_naming_file_and_line() {
    let e = Env::new("malformed");
    e.user_file("mpi_yield_when_idle = 1\n\nthis line is wrong\n");
    let o = e.run(&[], &[]);
    assert_eq!(o.status.code(), Some(1));
    let err = stderr(&o);
    let path = e.home.join(".tmpi/mca-params.conf");
    assert!(err.contains(&format!("{}:3:", path.display())), "{err}");
    assert!(err.contains("this line is wrong"), "{err}");
}

#[test]
fn usage_errors_exit_2() {
    let e = Env::new("usage");
    for args in [&["--bogus"][..], &["--param", "btl"], &["--level", "0"]] {
        let o = e.run(args, &[]);
        assert_eq!(o.status.code(), Some(2), "{args:?}");
        assert!(stderr(&o).contains("usage: tmpi_info"), "{args:?}");
    }
}

/// An invalid setting hidden by a higher source is not an error, but it is
/// not silently ignored either.
#[test]
fn overridden_invalid_value_warns() {
    let e = Env::new("shadow");
    e.user_file("mpi_yield_when_idle = bogus\n");
    let o = e.run(
        &["--all", "--parsable"],
        &[("TMPI_MCA_mpi_yield_when_idle", "1")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(
        field(&stdout(&o), "mpi_yield_when_idle", "value").as_deref(),
        Some("1")
    );
    let err = stderr(&o);
    assert!(
        err.contains("warning") && err.contains("\"bogus\"") && err.contains("overridden by"),
        "{err}"
    );
}

/// Without libibverbs (forced here with a library path that does not exist,
/// so the test means the same on a machine with rdma-core), `tmpi_info` says
/// so in one plain line and still lists the soft NIC; the exit status is 0.
#[test]
fn rdma_without_libibverbs_is_one_plain_line() {
    let e = Env::new("noibv");
    let lib = e.home.join("no-such-libibverbs.so.1");
    let lib = lib.to_str().unwrap();
    let o = e.run(&[], &[("TMPI_VERBS_LIBIBVERBS", lib)]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let section = out
        .split_once("\nRDMA devices:\n")
        .map(|(_, s)| s)
        .unwrap_or_else(|| panic!("no RDMA section in\n{out}"));
    let first = section.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("  libibverbs not found (cannot load {lib}: ")),
        "{out}"
    );
    assert_eq!(out.matches("libibverbs not found").count(), 2, "{out}"); // + openib's verdict
    assert!(section.contains("  tmsoft0 (soft NIC"), "{out}");
    assert!(
        !section.contains("(libibverbs):"),
        "no libibverbs device: {out}"
    );
    let o = e.run(&["--parsable"], &[("TMPI_VERBS_LIBIBVERBS", lib)]);
    let out = stdout(&o);
    let rec = out
        .lines()
        .find(|l| l.starts_with("rdma:libibverbs:"))
        .unwrap_or_else(|| panic!("no rdma:libibverbs record in\n{out}"));
    assert!(
        rec.starts_with(&format!(
            "rdma:libibverbs:available:no:libibverbs not found: cannot load {lib}: "
        )),
        "{rec}"
    );
    assert!(!out.contains(":provider:libibverbs"), "{out}");
}

/// The soft NIC `tmsoft0` is listed with the caps it advertises, which follow
/// its MCA parameters, and its one port.
#[test]
fn rdma_lists_soft_nic_with_its_caps() {
    let e = Env::new("tmsoft");
    let o = e.run(
        &[],
        &[
            ("TMPI_MCA_btl_openib_tmsoft_max_num_tags", "16"),
            ("TMPI_MCA_btl_openib_tmsoft_max_ops", "8"),
        ],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let line = out
        .lines()
        .find(|l| l.starts_with("  tmsoft0 "))
        .unwrap_or_else(|| panic!("no tmsoft0 line in\n{out}"));
    assert!(
        line.starts_with(
            "  tmsoft0 (soft NIC, used only when btl_openib_if_include names it): fw tmpi-soft "
        ),
        "{line}"
    );
    assert!(
        line.ends_with(
            ", tag matching: yes (max_num_tags 16, max_ops 8, max_sge 1, max_rndv_hdr_size 64, flags 0x1 RC)"
        ),
        "{line}"
    );
    assert!(
        out.contains(&format!(
            "{line}\n    atomics: among this device's operations (responder resources 16, initiator depth 16): osc rdma does accumulates and window locks by NIC atomics\n    port 1: Active, Ethernet, active MTU 1024, LID 0\n"
        )),
        "{out}"
    );

    // Tag matching switched off in the soft NIC: caps read as absent.
    let o = e.run(
        &["--parsable"],
        &[("TMPI_MCA_btl_openib_tmsoft_max_num_tags", "0")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    for want in [
        "rdma:device:tmsoft0:provider:soft",
        "rdma:device:tmsoft0:tm:supported:no",
        "rdma:device:tmsoft0:tm:max_num_tags:0",
        "rdma:device:tmsoft0:tm:max_ops:32768",
        "rdma:device:tmsoft0:tm:max_rndv_hdr_size:64",
        "rdma:device:tmsoft0:tm:flags:0",
        "rdma:device:tmsoft0:atomics:cap:hca",
        "rdma:device:tmsoft0:atomics:max_qp_rd_atom:16",
        "rdma:device:tmsoft0:port:1:Active:Ethernet:mtu:1024:lid:0",
    ] {
        assert!(lines.contains(&want), "missing {want:?} in\n{out}");
    }
}

/// The reference `docs/mca-params.md` is `tmpi_info --all --markdown`:
/// regenerated whenever a parameter is added, removed or changed. Settings
/// in the environment and the parameter files never leak into it.
#[test]
fn mca_params_reference_is_up_to_date() {
    let e = Env::new("markdown");
    let o = e.run(&["--all", "--markdown"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let generated = stdout(&o);
    e.user_file("pml_eager_limit = 512\n");
    e.system_file("btl_sm_fifo_size = 64K\n");
    let o = e.run(
        &["--all", "--markdown"],
        &[("TMPI_MCA_btl_tcp_eager_limit", "1K")],
    );
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(stdout(&o), generated, "settings changed the reference");
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/mca-params.md");
    let doc = std::fs::read_to_string(&path).unwrap_or_default();
    if doc != generated {
        let first = doc
            .lines()
            .zip(generated.lines())
            .position(|(a, b)| a != b)
            .unwrap_or(doc.lines().count().min(generated.lines().count()));
        panic!(
            "docs/mca-params.md is out of date with the parameter registry (first \
             difference at line {}: file has {:?}, tmpi_info gives {:?}); regenerate it:\n  \
             cargo run -q -p tmpi-run --bin tmpi_info -- --all --markdown > docs/mca-params.md",
            first + 1,
            doc.lines().nth(first).unwrap_or("(end of file)"),
            generated.lines().nth(first).unwrap_or("(end of output)"),
        );
    }
}

/// Every parameter the code registers under a literal name
/// (`ParamSpec::new("fw", "comp", "name")`, `register_selection("fw", ..)`,
/// `register_verbose("fw", "comp")` in the crates' sources, tests excluded)
/// is listed by `tmpi_info --all`, and so in the reference: a parameter that
/// only its own crate registers at run time (as the pml's were) is missing
/// from both. The pml's, the selection lists and the `mpi_*` ones by name too.
#[test]
fn every_registered_parameter_is_listed() {
    let e = Env::new("listing");
    let o = e.run(&["--all", "--parsable"], &[]);
    assert!(o.status.success(), "{}", stderr(&o));
    let out = stdout(&o);
    let listed = |name: &str| field(&out, name, "default").is_some();
    for name in [
        "pml_eager_limit",
        "pml_stats",
        "pml_tm_thresh",
        "pml_tm_rndv",
        "pml_ob1_unexpected_limit",
        "pml_ob1_verbose",
        "btl",
        "coll",
        "mpi_yield_when_idle",
        "mpi_param_check",
        "mpi_pack_per_fragment",
        "btl_openib_tm_enable",
    ] {
        assert!(listed(name), "tmpi_info --all does not list {name}");
    }
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut names = Vec::new();
    for krate in std::fs::read_dir(&root).unwrap().flatten() {
        let src = krate.path().join("src");
        if krate.file_name() != "fuzz" && src.is_dir() {
            literal_param_names(&src, &mut names);
        }
    }
    assert!(
        names.len() > 30 && names.iter().any(|(n, _)| n == "pml_tm_rndv"),
        "the source scan found too little: {names:?}"
    );
    let missing: Vec<_> = names.iter().filter(|(n, _)| !listed(n)).collect();
    assert!(
        missing.is_empty(),
        "registered in the code but not listed by tmpi_info --all (add the crate's provider \
         to tmpi_info's PROVIDERS, or register the parameter in its provider): {missing:?}"
    );
}

/// The literal parameter names registered in the `.rs` files below `dir`
/// (each file up to its `#[cfg(test)]` module; comment lines skipped), with
/// the file they come from.
fn literal_param_names(dir: &Path, out: &mut Vec<(String, PathBuf)>) {
    for entry in std::fs::read_dir(dir).unwrap().flatten() {
        let path = entry.path();
        if path.is_dir() {
            literal_param_names(&path, out);
            continue;
        }
        if path.extension().is_none_or(|x| x != "rs") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let text = text.split("#[cfg(test)]").next().unwrap_or("");
        let code: String = text
            .lines()
            .filter(|l| !l.trim_start().starts_with("//"))
            .collect::<Vec<_>>()
            .join("\n");
        for (call, arity) in [
            ("ParamSpec::new(", 3),
            ("register_selection(", 1),
            ("register_verbose(", 2),
        ] {
            let mut rest = code.as_str();
            while let Some(at) = rest.find(call) {
                rest = &rest[at + call.len()..];
                if let Some(parts) = string_args(rest, arity) {
                    let parts: Vec<&str> = parts.iter().map(String::as_str).collect();
                    let name = match parts.as_slice() {
                        [fw] => fw.to_string(),
                        [fw, comp] => format!("{fw}_{comp}_verbose"),
                        [fw, "", n] => format!("{fw}_{n}"),
                        [fw, c, n] => format!("{fw}_{c}_{n}"),
                        _ => unreachable!(),
                    };
                    out.push((name, path.clone()));
                }
            }
        }
    }
}

/// The first `n` arguments at the start of `s` when they are all string
/// literals without escapes.
fn string_args(s: &str, n: usize) -> Option<Vec<String>> {
    let mut rest = s;
    let mut args = Vec::new();
    for i in 0..n {
        rest = rest.trim_start();
        if i > 0 {
            rest = rest.strip_prefix(',')?.trim_start();
        }
        rest = rest.strip_prefix('"')?;
        let end = rest.find('"')?;
        let lit = &rest[..end];
        if lit.contains('\\') {
            return None;
        }
        args.push(lit.to_string());
        rest = &rest[end + 1..];
    }
    Some(args)
}
