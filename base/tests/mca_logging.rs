//! Logging: per-component levels from `*_verbose` parameters, rank tags.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tmpi_base::log::{subscriber, verbosity_targets, verbosity_to_level};
use tmpi_base::mca::{McaError, Registry, Sources};
use tracing_subscriber::filter::LevelFilter;

#[derive(Clone, Default)]
struct Buf(Arc<Mutex<Vec<u8>>>);

impl Write for Buf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl Buf {
    fn lines(&self) -> Vec<String> {
        String::from_utf8(self.0.lock().unwrap().clone())
            .unwrap()
            .lines()
            .map(str::to_owned)
            .collect()
    }
}

macro_rules! all_levels {
    ($t:literal) => {{
        tracing::error!(target: $t, "e");
        tracing::warn!(target: $t, "w");
        tracing::info!(target: $t, "i");
        tracing::debug!(target: $t, "d");
        tracing::trace!(target: $t, "t");
    }};
}

/// Tracing targets are static: one expansion per target.
fn emit_everything() {
    all_levels!("btl_sm");
    all_levels!("btl_openib");
    all_levels!("pml_ob1");
    all_levels!("coll_tuned");
}

#[test]
fn component_levels_and_rank_prefix() {
    let reg = Registry::new(Sources::default().with_env([
        ("TMPI_MCA_btl_base_verbose", "40"),
        ("TMPI_MCA_btl_sm_verbose", "100"),
        ("TMPI_MCA_pml_ob1_verbose", "60"),
    ]));
    let buf = Buf::default();
    let w = buf.clone();
    let sub = subscriber(3, &reg, move || w.clone()).unwrap();
    tracing::subscriber::with_default(sub, || {
        emit_everything();
        tracing::info!(target: "btl_sm", peer = 2, "fifo full");
    });
    let lines = buf.lines();
    assert!(
        lines.iter().all(|l| l.starts_with("[rank 3] ")),
        "{lines:#?}"
    );
    let shown = |target: &str| -> Vec<String> {
        lines
            .iter()
            .filter_map(|l| l.strip_prefix(&format!("[rank 3] {target}: ")))
            .filter(|rest| !rest.contains("fifo full"))
            .map(|rest| rest.split(' ').next().unwrap().to_owned())
            .collect()
    };
    // btl_sm: its own setting (100) wins over btl_base_verbose.
    assert_eq!(shown("btl_sm"), ["ERROR", "WARN", "INFO", "DEBUG", "TRACE"]);
    // btl_openib: the framework setting (40 = info).
    assert_eq!(shown("btl_openib"), ["ERROR", "WARN", "INFO"]);
    // pml_ob1: 60 = debug.
    assert_eq!(shown("pml_ob1"), ["ERROR", "WARN", "INFO", "DEBUG"]);
    // coll_tuned: nothing set, default.
    assert_eq!(shown("coll_tuned"), ["ERROR", "WARN"]);
    assert!(
        lines.contains(&"[rank 3] btl_sm: INFO fifo full peer=2".to_owned()),
        "{lines:#?}"
    );
    // The verbose parameters are now registered: listed, not unknown.
    assert!(reg.get("btl_sm_verbose").is_some());
    assert!(reg.get("btl_base_verbose").is_some());
    assert!(reg.unknown().is_empty(), "{:?}", reg.unknown());
}

#[test]
fn verbosity_mapping() {
    assert_eq!(verbosity_to_level(0), LevelFilter::WARN);
    assert_eq!(verbosity_to_level(1), LevelFilter::INFO);
    assert_eq!(verbosity_to_level(59), LevelFilter::INFO);
    assert_eq!(verbosity_to_level(60), LevelFilter::DEBUG);
    assert_eq!(verbosity_to_level(80), LevelFilter::TRACE);
    assert_eq!(verbosity_to_level(100), LevelFilter::TRACE);
    let reg = Registry::new(Sources::default().with_env([
        ("TMPI_MCA_mca_base_verbose", "10"),
        ("TMPI_MCA_btl_sm_verbose", "0"),
        ("TMPI_MCA_weird_verbose", "5"),
    ]));
    assert_eq!(
        verbosity_targets(&reg).unwrap(),
        [
            ("btl_sm".to_owned(), LevelFilter::WARN),
            ("mca".to_owned(), LevelFilter::INFO)
        ]
    );
    // `weird_verbose` is not <framework>_<component>_verbose: left unknown.
    assert_eq!(reg.unknown().len(), 1);
}

#[test]
fn bad_verbosity_is_an_error() {
    for bad in ["loud", "101", "-1"] {
        let reg = Registry::new(Sources::default().with_env([("TMPI_MCA_btl_sm_verbose", bad)]));
        match subscriber(0, &reg, std::io::sink) {
            Err(tmpi_base::error::Error::Mca(McaError::InvalidValue { name, value, .. })) => {
                assert_eq!(name, "btl_sm_verbose");
                assert_eq!(value, bad);
            }
            Err(e) => panic!("{bad}: wrong error {e}"),
            Ok(_) => panic!("{bad}: accepted"),
        }
    }
}
