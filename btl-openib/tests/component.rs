//! The component disqualifies itself cleanly (typed "unavailable" errors,
//! never a panic) when no usable device or port is selected.

use tmpi_base::identity::ProcessInfo;
use tmpi_base::mca::{Registry, Sources};
use tmpi_btl::{BtlComponent, BtlError};
use tmpi_btl_openib::dirmodex::DirModex;
use tmpi_btl_openib::{init, OpenibComponent, OpenibError};

fn reg(pairs: &[(&str, &str)]) -> Registry {
    Registry::new(
        Sources::default().with_cmdline(pairs.iter().map(|(k, v)| (k.to_string(), v.to_string()))),
    )
}

fn modex(name: &str) -> DirModex {
    let dir = std::env::temp_dir().join(format!("tmpi-openib-comp-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    DirModex::new(&dir, 0, 1)
}

fn me() -> ProcessInfo {
    ProcessInfo::singleton("t".into(), "h".into())
}

#[test]
fn no_such_device_is_unavailable() {
    // Either libibverbs is missing on this machine, or it has no such
    // device: both are a clean "unavailable".
    let r = reg(&[("btl_openib_if_include", "nosuchdev0")]);
    let e = init(&r, &me(), &mut modex("a"))
        .err()
        .expect("must not initialise");
    assert!(matches!(e, OpenibError::Unavailable(_)), "{e}");
    let e = OpenibComponent
        .init(&r, &me(), &mut modex("b"))
        .err()
        .expect("must not initialise");
    assert!(matches!(e, BtlError::Unavailable(_)), "{e}");
}

#[test]
fn excluded_soft_port_is_unavailable() {
    let r = reg(&[("btl_openib_if_include", "tmsoft0:2")]);
    let e = init(&r, &me(), &mut modex("c"))
        .err()
        .expect("tmsoft0 has only port 1");
    assert!(matches!(e, OpenibError::Unavailable(_)), "{e}");
}

#[test]
fn invalid_parameters_are_config_errors() {
    let r = reg(&[
        ("btl_openib_if_include", "tmsoft0"),
        ("btl_openib_if_exclude", "mlx5_0"),
    ]);
    let e = init(&r, &me(), &mut modex("d"))
        .err()
        .expect("exclusive lists");
    assert!(matches!(e, OpenibError::Config(_)), "{e}");
    let r = reg(&[
        ("btl_openib_if_include", "tmsoft0"),
        ("btl_openib_gid_index", "7"),
    ]);
    let e = init(&r, &me(), &mut modex("e"))
        .err()
        .expect("no GID at index 7");
    assert!(matches!(e, OpenibError::Config(_)), "{e}");
}

#[test]
fn singleton_over_soft_nic_opens_one_module() {
    let r = reg(&[("btl_openib_if_include", "tmsoft0")]);
    let (btl, reach) = init(&r, &me(), &mut modex("f")).expect("tmsoft0");
    assert_eq!(reach, vec![false], "no peer, not even ourselves");
    match btl {
        tmpi_btl_openib::Btl::Soft(m) => {
            assert_eq!(m.len(), 1);
            assert!(m[0].tm_caps().is_some(), "auto: the soft NIC has TM caps");
        }
        tmpi_btl_openib::Btl::Ibv(_) => panic!("tmsoft0 must use the soft provider"),
    }
}
