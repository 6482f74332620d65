//! MCA parameters: precedence of the sources, value parsing, bad input,
//! unknown names, selection lists, parameter files and the --mca codec.

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};

use tmpi_base::mca::{
    decode_cmdline, encode_cmdline, ConfigFile, Level, McaError, ParamSpec, Registry,
    SelectionList, Source, Sources, Tristate, CMDLINE_ENV,
};

fn pairs(p: &[(&str, &str)]) -> Vec<(String, String)> {
    p.iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect()
}

fn file(path: &str, contents: &str) -> ConfigFile {
    ConfigFile::parse(path, contents).expect("test file parses")
}

/// A fresh empty directory under the system temp dir.
fn scratch_dir(tag: &str) -> PathBuf {
    static N: AtomicUsize = AtomicUsize::new(0);
    let d = std::env::temp_dir().join(format!(
        "tmpi-mca-test-{}-{}-{tag}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn write(path: &Path, contents: &str) {
    std::fs::create_dir_all(path.parent().unwrap()).unwrap();
    std::fs::write(path, contents).unwrap();
}

fn int(reg: &Registry, name: &str) -> (i64, Source) {
    let p = reg
        .register_int(ParamSpec::new("test", "prec", name), -1)
        .unwrap();
    (p.value(), p.source().clone())
}

/// Every combination of the four sources: the highest one that sets the
/// parameter wins, and the value knows where it came from.
#[test]
fn precedence_of_the_four_sources() {
    let sources = Sources::default()
        .with_cmdline(pairs(&[("test_prec_a", "4")]))
        .with_env([
            ("TMPI_MCA_test_prec_a", "3"),
            ("TMPI_MCA_test_prec_b", "3"),
            ("UNRELATED", "x"),
        ])
        .with_user_file(file(
            "/home/u/.tmpi/mca-params.conf",
            "test_prec_a = 2\ntest_prec_b = 2\ntest_prec_c = 2\n",
        ))
        .with_system_file(file(
            "/opt/tmpi/etc/tmpi-mca-params.conf",
            "# system\ntest_prec_a = 1\ntest_prec_b = 1\ntest_prec_c = 1\ntest_prec_d = 1\n",
        ));
    let reg = Registry::new(sources);
    assert_eq!(int(&reg, "a"), (4, Source::CommandLine));
    assert_eq!(
        int(&reg, "b"),
        (
            3,
            Source::Environment {
                var: "TMPI_MCA_test_prec_b".into()
            }
        )
    );
    assert_eq!(
        int(&reg, "c"),
        (
            2,
            Source::UserFile {
                path: "/home/u/.tmpi/mca-params.conf".into(),
                line: 3
            }
        )
    );
    assert_eq!(
        int(&reg, "d"),
        (
            1,
            Source::SystemFile {
                path: "/opt/tmpi/etc/tmpi-mca-params.conf".into(),
                line: 5
            }
        )
    );
    assert_eq!(int(&reg, "e"), (-1, Source::Default));
    let info = reg.get("test_prec_b").unwrap();
    assert_eq!(info.default.to_string(), "-1");
    assert_eq!(info.value.to_string(), "3");
}

/// The same precedence, reading real files below $HOME and the prefix, and
/// the command line arriving through its environment variable.
#[test]
fn precedence_through_env_and_files_on_disk() {
    let home = scratch_dir("home");
    let prefix = scratch_dir("prefix");
    write(
        &home.join(".tmpi/mca-params.conf"),
        "test_disk_a = 20\ntest_disk_b = 20\n",
    );
    write(
        &prefix.join("etc/tmpi-mca-params.conf"),
        "test_disk_a = 10\ntest_disk_b = 10\ntest_disk_c = 10\n",
    );
    let cmdline = encode_cmdline(&pairs(&[("test_disk_a", "40")]));
    let env = [
        (CMDLINE_ENV.to_owned(), cmdline),
        ("TMPI_MCA_test_disk_a".to_owned(), "30".to_owned()),
    ];
    let reg = Registry::new(Sources::from_env_and_files(
        env,
        Some(home.as_path()),
        Some(prefix.as_path()),
    ));
    assert!(reg.source_errors().is_empty(), "{:?}", reg.source_errors());
    let get = |n: &str| {
        let p = reg
            .register_int(ParamSpec::new("test", "disk", n), 0)
            .unwrap();
        (p.value(), p.source().kind())
    };
    assert_eq!(get("a"), (40, "cmdline"));
    assert_eq!(get("b"), (20, "user-file"));
    assert_eq!(get("c"), (10, "system-file"));
    assert_eq!(get("d"), (0, "default"));

    // Missing files are not an error; a missing HOME is not either.
    let reg = Registry::new(Sources::from_env_and_files(
        Vec::<(String, String)>::new(),
        Some(&home.join("nowhere")),
        None,
    ));
    assert!(reg.source_errors().is_empty());
    let _ = std::fs::remove_dir_all(home);
    let _ = std::fs::remove_dir_all(prefix);
}

#[test]
fn later_cmdline_pair_wins() {
    let reg = Registry::new(
        Sources::default().with_cmdline(pairs(&[("test_dup_x", "1"), ("test_dup_x", "2")])),
    );
    assert_eq!(
        reg.register_int(ParamSpec::new("test", "dup", "x"), 0)
            .unwrap()
            .value(),
        2
    );
}

#[test]
fn size_suffixes() {
    let cases = [
        ("4096", 4096u64),
        ("64K", 64 << 10),
        ("64k", 64 << 10),
        ("64KiB", 64 << 10),
        ("8M", 8 << 20),
        ("2G", 2 << 30),
        ("1T", 1 << 40),
        (" 16 K ", 16 << 10),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let name = format!("s{i}");
        let reg = Registry::new(
            Sources::default().with_env([(format!("TMPI_MCA_test_size_{name}"), *text)]),
        );
        let p = reg
            .register_size(ParamSpec::new("test", "size", &name), 1)
            .unwrap();
        assert_eq!(p.value(), *want, "{text:?}");
    }
    for bad in ["", "K", "12Q", "1.5M", "-4K", "20000000T", "4 MBs"] {
        let reg = Registry::new(Sources::default().with_env([("TMPI_MCA_test_size_bad", bad)]));
        let err = reg
            .register_size(ParamSpec::new("test", "size", "bad"), 1)
            .unwrap_err();
        assert!(
            matches!(&err, McaError::InvalidValue { value, .. } if value == bad),
            "{bad:?}: {err}"
        );
    }
}

/// An invalid value is an error naming the parameter, the value, its source
/// and what was expected; it is not replaced by a lower source or default.
#[test]
fn bad_values_are_typed_errors() {
    let reg = Registry::new(
        Sources::default()
            .with_env([
                ("TMPI_MCA_btl_sm_fifo_size", "lots"),
                ("TMPI_MCA_btl_sm_use_cma", "perhaps"),
                ("TMPI_MCA_btl_sm_priority", "500"),
                ("TMPI_MCA_btl_sm_mode", "fast"),
                ("TMPI_MCA_btl_openib_tm_enable", "sometimes"),
                ("TMPI_MCA_btl_sm_count", "12x"),
            ])
            .with_user_file(file("/u.conf", "btl_sm_fifo_size = 4K\n")),
    );
    let err = reg
        .register_size(ParamSpec::new("btl", "sm", "fifo_size"), 4096)
        .unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("btl_sm_fifo_size"), "{msg}");
    assert!(msg.contains("\"lots\""), "{msg}");
    assert!(msg.contains("TMPI_MCA_btl_sm_fifo_size"), "{msg}");
    assert!(msg.contains("suffix K, M, G"), "{msg}");
    match err {
        McaError::InvalidValue {
            name,
            value,
            origin,
            ..
        } => {
            assert_eq!(name, "btl_sm_fifo_size");
            assert_eq!(value, "lots");
            assert_eq!(origin.kind(), "env");
        }
        other => panic!("wrong error {other:?}"),
    }
    let msg = reg
        .register_bool(ParamSpec::new("btl", "sm", "use_cma"), true)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("perhaps") && msg.contains("boolean"), "{msg}");
    let msg = reg
        .register_int_range(ParamSpec::new("btl", "sm", "priority"), 50, 0..=100)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("500") && msg.contains("0..=100"), "{msg}");
    let msg = reg
        .register_enum(ParamSpec::new("btl", "sm", "mode"), &["cma", "copy"], "cma")
        .unwrap_err()
        .to_string();
    assert!(msg.contains("fast") && msg.contains("cma|copy"), "{msg}");
    let msg = reg
        .register_tristate(ParamSpec::new("btl", "openib", "tm_enable"), Tristate::Auto)
        .unwrap_err()
        .to_string();
    assert!(
        msg.contains("sometimes") && msg.contains("auto|1|0"),
        "{msg}"
    );
    let msg = reg
        .register_int(ParamSpec::new("btl", "sm", "count"), 1)
        .unwrap_err()
        .to_string();
    assert!(msg.contains("12x") && msg.contains("integer"), "{msg}");
    // The failed registrations did not leave half-registered entries, and
    // their names are not reported again as unknown.
    assert!(reg.get("btl_sm_fifo_size").is_none());
    assert!(reg.unknown().is_empty(), "{:?}", reg.unknown());
}

#[test]
fn typed_values_and_metadata() {
    let reg = Registry::new(Sources::default().with_env([
        ("TMPI_MCA_t_c_flag", "yes"),
        ("TMPI_MCA_t_c_name", " spaced "),
        ("TMPI_MCA_t_c_mode", "COPY"),
        ("TMPI_MCA_t_c_items", "a, b,c"),
        ("TMPI_MCA_t_c_tm", "0"),
        ("TMPI_MCA_t", "^x,y"),
    ]));
    let flag = reg
        .register_bool(
            ParamSpec::new("t", "c", "flag")
                .help("a flag")
                .level(Level::TunerDetail),
            false,
        )
        .unwrap();
    assert!(flag.value());
    assert_eq!(flag.info().help, "a flag");
    assert_eq!(flag.info().level, Level::TunerDetail);
    assert_eq!(flag.name(), "t_c_flag");
    let name = reg
        .register_string(ParamSpec::new("t", "c", "name"), "")
        .unwrap();
    assert_eq!(name.value(), " spaced ", "strings are verbatim");
    let mode = reg
        .register_enum(ParamSpec::new("t", "c", "mode"), &["cma", "copy"], "cma")
        .unwrap();
    assert_eq!(mode.value(), "copy", "enum stores the registered spelling");
    let items = reg
        .register_list(ParamSpec::new("t", "c", "items"), &[])
        .unwrap();
    assert_eq!(items.value(), ["a", "b", "c"]);
    let tm = reg
        .register_tristate(ParamSpec::new("t", "c", "tm"), Tristate::Auto)
        .unwrap();
    assert_eq!(tm.value(), Tristate::Off);
    assert!(!tm.resolve(true));
    let sel = reg.register_selection("t", "components of t").unwrap();
    assert_eq!(
        sel.value(),
        SelectionList::Exclude(vec!["x".into(), "y".into()])
    );
    assert!(!sel.get().allows("x") && sel.get().allows("z"));
    let names: Vec<String> = reg.params().into_iter().map(|p| p.name).collect();
    assert_eq!(
        names,
        [
            "t",
            "t_c_flag",
            "t_c_items",
            "t_c_mode",
            "t_c_name",
            "t_c_tm"
        ]
    );
}

#[test]
fn registration_rules() {
    let reg = Registry::new(Sources::default());
    let a = reg
        .register_size(ParamSpec::new("btl", "sm", "fifo_size"), 4096)
        .unwrap();
    // Same definition again (a component opened twice): same entry.
    let b = reg
        .register_size(ParamSpec::new("btl", "sm", "fifo_size"), 4096)
        .unwrap();
    assert_eq!(a.value(), b.value());
    assert!(matches!(
        reg.register_size(ParamSpec::new("btl", "sm", "fifo_size"), 8192),
        Err(McaError::Conflict { .. })
    ));
    assert!(matches!(
        reg.register_int(ParamSpec::new("btl", "sm", "fifo_size"), 4096),
        Err(McaError::Conflict { .. })
    ));
    assert!(matches!(
        reg.register_int(ParamSpec::new("BTL", "sm", "x"), 0),
        Err(McaError::InvalidName { .. })
    ));
    assert!(matches!(
        reg.register_int(ParamSpec::new("btl", "sm", "bad name"), 0),
        Err(McaError::InvalidName { .. })
    ));
    assert!(matches!(
        reg.register_int_range(ParamSpec::new("btl", "sm", "r"), 7, 0..=5),
        Err(McaError::InvalidDefault { .. })
    ));
    assert!(matches!(
        reg.register_enum(ParamSpec::new("btl", "sm", "e"), &["a", "b"], "c"),
        Err(McaError::InvalidDefault { .. })
    ));
}

/// Unknown names from every source are reported with the nearest
/// registered names; known names are not.
#[test]
fn unknown_names_suggest_nearest() {
    let reg = Registry::new(
        Sources::default()
            .with_env([
                ("TMPI_MCA_btl_sm_fifo_sise", "1"),
                ("TMPI_MCA_BTL_SM_FIFO_SIZE", "1"),
                ("TMPI_MCA_btl_sm_fifo_size", "1"),
                ("TMPI_MCA_completely_unrelated", "1"),
            ])
            .with_cmdline(pairs(&[("pml_eagr_limit", "1")]))
            .with_user_file(file("/u.conf", "btl_sm_prority = 3\n")),
    );
    reg.register_size(ParamSpec::new("btl", "sm", "fifo_size"), 4096)
        .unwrap();
    reg.register_int(ParamSpec::new("btl", "sm", "priority"), 1)
        .unwrap();
    reg.register_size(ParamSpec::new("pml", "", "eager_limit"), 4096)
        .unwrap();
    let unknown = reg.unknown();
    let got: Vec<(&str, &str, Vec<&str>)> = unknown
        .iter()
        .map(|u| {
            (
                u.name.as_str(),
                u.source.kind(),
                u.suggestions.iter().map(String::as_str).collect(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("BTL_SM_FIFO_SIZE", "env", vec!["btl_sm_fifo_size"]),
            ("btl_sm_fifo_sise", "env", vec!["btl_sm_fifo_size"]),
            ("btl_sm_prority", "user-file", vec!["btl_sm_priority"]),
            ("completely_unrelated", "env", vec![]),
            ("pml_eagr_limit", "cmdline", vec!["pml_eager_limit"]),
        ]
    );
    let msg = unknown[1].to_string();
    assert!(
        msg.contains("btl_sm_fifo_sise")
            && msg.contains("TMPI_MCA_btl_sm_fifo_sise")
            && msg.contains("did you mean btl_sm_fifo_size"),
        "{msg}"
    );
}

#[test]
fn selection_lists() {
    let inc = SelectionList::parse("self, sm,openib").unwrap();
    assert_eq!(
        inc,
        SelectionList::Include(vec!["self".into(), "sm".into(), "openib".into()])
    );
    assert!(inc.allows("sm") && !inc.allows("tcp"));
    assert_eq!(
        inc.filter(&["tcp", "openib", "sm", "self"]),
        ["self", "sm", "openib"]
    );
    assert_eq!(inc.rank_of("openib"), Some(2));
    let exc = SelectionList::parse("^tcp,openib").unwrap();
    assert!(!exc.allows("tcp") && !exc.allows("openib") && exc.allows("sm"));
    assert_eq!(exc.filter(&["tcp", "sm", "self"]), ["sm", "self"]);
    assert_eq!(exc.to_string(), "^tcp,openib");
    assert_eq!(inc.to_string(), "self,sm,openib");
    let all = SelectionList::parse("  ").unwrap();
    assert_eq!(all, SelectionList::All);
    assert!(all.allows("anything"));
    assert_eq!(
        SelectionList::parse("sm,slef")
            .unwrap()
            .unknown_names(&["self", "sm"]),
        ["slef"]
    );
    for bad in [
        "self,^tcp",
        "^tcp,^openib",
        "^",
        "self,,sm",
        "sm,sm",
        "s m",
        "^tcp,",
    ] {
        assert!(
            SelectionList::parse(bad).is_err(),
            "{bad:?} must be rejected"
        );
    }
    let err = SelectionList::parse("self,^tcp").unwrap_err().to_string();
    assert!(err.contains("cannot mix"), "{err}");
    // As a parameter value, a bad list is a parameter error.
    let reg = Registry::new(Sources::default().with_cmdline(pairs(&[("btl", "self,^tcp")])));
    let err = reg.register_selection("btl", "").unwrap_err();
    assert!(
        matches!(err, McaError::InvalidValue { ref name, .. } if name == "btl"),
        "{err}"
    );
}

#[test]
fn parameter_files() {
    let f = ConfigFile::parse(
        "/x.conf",
        "# comment\n\n   # indented comment\nbtl_sm_fifo_size=64K\n  pml_eager_limit =  8K  \n\
         s = \" quoted # kept \"\nempty =\nbtl_sm_fifo_size = 128K\n",
    )
    .unwrap();
    assert_eq!(f.get("btl_sm_fifo_size").unwrap().value, "128K");
    assert_eq!(f.get("btl_sm_fifo_size").unwrap().line, 8);
    assert_eq!(f.get("pml_eager_limit").unwrap().value, "8K");
    assert_eq!(f.get("s").unwrap().value, " quoted # kept ");
    assert_eq!(f.get("empty").unwrap().value, "");
    for (text, line) in [
        ("a = 1\nnot a parameter line\n", 2),
        ("a = 1\nb = 2\n = 3\n", 3),
        ("bad-name = 1\n", 1),
    ] {
        match ConfigFile::parse("/etc/x.conf", text) {
            Err(e @ McaError::MalformedFile { .. }) => {
                let msg = e.to_string();
                assert!(msg.starts_with(&format!("/etc/x.conf:{line}:")), "{msg}");
                if let McaError::MalformedFile { line: l, .. } = e {
                    assert_eq!(l, line);
                }
            }
            other => panic!("{text:?}: expected MalformedFile, got {other:?}"),
        }
    }
    // A malformed file on disk is recorded as a source error naming file and line.
    let home = scratch_dir("badhome");
    write(&home.join(".tmpi/mca-params.conf"), "ok = 1\noops\n");
    let sources =
        Sources::from_env_and_files(Vec::<(String, String)>::new(), Some(home.as_path()), None);
    let errs = sources.errors();
    assert_eq!(errs.len(), 1);
    let msg = errs[0].to_string();
    assert!(
        msg.contains("mca-params.conf:2:") && msg.contains("oops"),
        "{msg}"
    );
    let _ = std::fs::remove_dir_all(home);
}

#[test]
fn cmdline_codec_roundtrip() {
    let p = pairs(&[
        ("btl", "self,sm"),
        ("x", "a=b;c%d\ne f"),
        ("y", ""),
        ("z", "ünïcödé"),
    ]);
    let enc = encode_cmdline(&p);
    assert!(!enc.contains('\n'));
    assert_eq!(decode_cmdline(&enc).unwrap(), p);
    assert_eq!(encode_cmdline(&[]), "");
    assert_eq!(decode_cmdline("").unwrap(), vec![]);
    for bad in [
        "novalue", "a=1;b", "a=%zz", "a=%4", "a=%+1", "=1", "a b=1", "a=%FF",
    ] {
        assert!(
            matches!(decode_cmdline(bad), Err(McaError::Cmdline { .. })),
            "{bad:?}"
        );
    }
    // A corrupt variable is a source error, not silently dropped.
    let s = Sources::default().with_env([(CMDLINE_ENV, "garbage")]);
    assert_eq!(s.errors().len(), 1);
}

#[test]
fn oversubscription_resolves_auto() {
    let on = Registry::new(Sources::default().with_env([("TMPI_LAUNCH_OVERSUBSCRIBED", "1")]));
    let off = Registry::new(Sources::default());
    assert!(tmpi_base::mca::yield_when_idle(&on).unwrap());
    assert!(!tmpi_base::mca::yield_when_idle(&off).unwrap());
    let forced = Registry::new(Sources::default().with_env([
        ("TMPI_LAUNCH_OVERSUBSCRIBED", "1"),
        ("TMPI_MCA_mpi_yield_when_idle", "0"),
    ]));
    assert!(!tmpi_base::mca::yield_when_idle(&forced).unwrap());
    let bad = Sources::default().with_env([("TMPI_LAUNCH_OVERSUBSCRIBED", "many")]);
    assert_eq!(bad.errors().len(), 1);
}

/// Components open on several threads: registrations of the same name
/// agree, and none is lost.
#[test]
fn concurrent_registration() {
    let reg = std::sync::Arc::new(Registry::new(
        Sources::default().with_env([("TMPI_MCA_btl_sm_fifo_size", "1M")]),
    ));
    let handles: Vec<_> = (0..8)
        .map(|t| {
            let reg = reg.clone();
            std::thread::spawn(move || {
                let shared = reg
                    .register_size(ParamSpec::new("btl", "sm", "fifo_size"), 4096)
                    .unwrap()
                    .value();
                for i in 0..50 {
                    reg.register_int(ParamSpec::new("t", &format!("c{t}"), &format!("p{i}")), i)
                        .unwrap();
                }
                shared
            })
        })
        .collect();
    for h in handles {
        assert_eq!(h.join().unwrap(), 1 << 20);
    }
    assert_eq!(reg.params().len(), 1 + 8 * 50);
}

#[test]
fn name_syntax() {
    assert!(tmpi_base::mca::is_param_name("btl_sm_fifo_size"));
    assert!(tmpi_base::mca::is_param_name("BTL"));
    for bad in ["", "a b", "a-b", "a=b", "ä"] {
        assert!(!tmpi_base::mca::is_param_name(bad), "{bad:?}");
    }
}

/// All 16 combinations of the four sources: the value always comes from the
/// highest source present, whatever the lower ones say.
#[test]
fn precedence_exhaustive() {
    // (source kind, value it sets), lowest first.
    let levels = ["system-file", "user-file", "env", "cmdline"];
    for mask in 0u32..16 {
        let set = |i: usize| mask & (1 << i) != 0;
        let mut sources = Sources::default();
        if set(0) {
            sources = sources.with_system_file(file("/s.conf", "test_x_p = 10\n"));
        }
        if set(1) {
            sources = sources.with_user_file(file("/u.conf", "test_x_p = 20\n"));
        }
        if set(2) {
            sources = sources.with_env([("TMPI_MCA_test_x_p", "30")]);
        }
        if set(3) {
            sources = sources.with_cmdline(pairs(&[("test_x_p", "40")]));
        }
        let reg = Registry::new(sources);
        let p = reg
            .register_int(ParamSpec::new("test", "x", "p"), 0)
            .unwrap();
        match (0..4).rev().find(|&i| set(i)) {
            Some(top) => {
                assert_eq!(p.value(), 10 * (top as i64 + 1), "mask {mask:04b}");
                assert_eq!(p.source().kind(), levels[top], "mask {mask:04b}");
            }
            None => {
                assert_eq!(p.value(), 0);
                assert_eq!(p.source(), &Source::Default);
            }
        }
    }
}

#[test]
fn priority_helper() {
    let reg = Registry::new(Sources::default().with_env([("TMPI_MCA_btl_tcp_priority", "7")]));
    assert_eq!(reg.register_priority("btl", "tcp", 20).unwrap().value(), 7);
    assert_eq!(reg.register_priority("btl", "sm", 50).unwrap().value(), 50);
    let reg = Registry::new(Sources::default().with_env([("TMPI_MCA_btl_tcp_priority", "101")]));
    assert!(reg.register_priority("btl", "tcp", 20).is_err());
}
