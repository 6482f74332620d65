//! What btl-openib creates its TM-SRQ with, on a soft NIC held to mlx5's
//! rules (docs/verbs.md, "Conformance of the soft NIC to mlx5"): `max_ops`
//! sized for the list rather than the device maximum (mlx5's command QP
//! takes 4 send-queue blocks per operation), the caps the SRQ was created
//! with handed up instead of the device's, and at least 33 untagged
//! buffers. One process, no peers: only the setup is under test.

use tmpi_btl_openib::{tm_list_ops, Module, OpenibConfig, TM_MIN_UNTAGGED};
use tmpi_verbs::soft::{SoftConfig, SoftProvider};
use tmpi_verbs::{Context, Provider};

fn open(dev: SoftConfig, cfg: OpenibConfig) -> Module<SoftProvider> {
    let p = SoftProvider::new(dev).expect("soft provider");
    Module::open(&p, "tmsoft0", 1, &cfg, 0, 1).expect("module over tmsoft0")
}

fn tm_on() -> OpenibConfig {
    OpenibConfig {
        tm_enable: tmpi_base::mca::Tristate::On,
        ..OpenibConfig::default()
    }
}

#[test]
fn list_ops_follow_the_list_and_the_command_qp_rule() {
    // UCX's 2 * tags + 2 when the device allows it.
    assert_eq!(tm_list_ops(1024, 32768, 32768), 2050);
    // No more than the device reports.
    assert_eq!(tm_list_ops(1024, 64, 32768), 64);
    // No more than a quarter of the send queue (4 blocks per operation).
    assert_eq!(tm_list_ops(4096, 65536, 16384), 4096);
    // A send queue that is not a power of two: its largest power of two.
    assert_eq!(tm_list_ops(4096, 65536, 10000), 2048);
    assert_eq!(tm_list_ops(0, 8, 8), 2);
}

#[test]
fn tm_srq_is_created_on_a_device_reporting_max_ops_as_its_send_queue() {
    let dev = SoftConfig::default();
    let p = SoftProvider::new(dev).unwrap();
    let attr = p.open("tmsoft0").unwrap().query_device_ex().unwrap();
    // The soft NIC reports max_ops as its whole send queue, like mlx5.
    assert_eq!(attr.tm_caps.max_ops, attr.max_qp_wr);
    let m = open(dev, tm_on());
    let caps = m.tm_caps().expect("tag matching offloaded");
    assert_eq!(caps.max_num_tags, 1024);
    assert_eq!(caps.max_ops, 2 * 1024 + 2);
}

#[test]
fn caps_handed_up_are_the_created_ones() {
    let cfg = OpenibConfig {
        tm_max_tags: 16,
        ..tm_on()
    };
    let m = open(SoftConfig::default(), cfg);
    let caps = m.tm_caps().expect("tag matching offloaded");
    assert_eq!(caps.max_num_tags, 16, "the device's list size leaked up");
    assert_eq!(caps.max_ops, 34, "the device's max_ops leaked up");
}

#[test]
fn a_small_untagged_pool_is_raised_to_the_tm_minimum() {
    let cfg = OpenibConfig {
        srq_size: 8,
        srq_max: 16,
        ..tm_on()
    };
    let m = open(SoftConfig::default(), cfg);
    assert!(m.tm_caps().is_some(), "TM-SRQ refused for a small pool");
    assert!(m.stats().recv_posted >= TM_MIN_UNTAGGED, "{:?}", m.stats());
}
