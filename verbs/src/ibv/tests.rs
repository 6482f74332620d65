//! Tests of the libibverbs provider that need no RDMA device (the missing
//! library path, the real library without devices) and, when
//! `TMPI_VERBS_TEST_DEVICE` names a device (the rxe VM of ci/rxe), a round
//! trip through the provider-neutral traits on that device.

use std::process::Command;

use super::*;
use crate::api::{self, VerbsError};

const MISSING: &str = "/nonexistent/tmpi-test/libibverbs.so.1";

#[test]
fn missing_library_is_a_clear_error() {
    let e = Library::open(MISSING).unwrap_err();
    assert!(e.is_library_missing(), "{e:?}");
    let msg = e.to_string();
    assert!(msg.starts_with("libibverbs not found"), "{msg}");
    assert!(msg.contains(MISSING), "{msg}");
    match VerbsError::from(e) {
        VerbsError::ProviderUnavailable { provider, reason } => {
            assert_eq!(provider, "ibv");
            assert!(reason.contains("libibverbs not found"), "{reason}");
        }
        other => panic!("expected ProviderUnavailable, got {other:?}"),
    }
}

/// A library that is not libibverbs (too old, or the wrong file) is refused
/// with the symbol it lacks, not called blindly.
#[test]
fn wrong_library_reports_the_missing_symbol() {
    match Library::open("libc.so.6") {
        Err(IbvError::MissingSymbol { symbol, name, .. }) => {
            assert_eq!(symbol, "ibv_get_device_list");
            assert_eq!(name, "libc.so.6");
        }
        other => panic!("expected MissingSymbol, got {other:?}"),
    }
}

/// The process-wide loader honours `TMPI_VERBS_LIBIBVERBS`; run in a child
/// process so the setting cannot leak into other tests (the load is cached).
#[test]
fn process_wide_load_without_libibverbs() {
    let exe = std::env::current_exe().unwrap();
    let out = Command::new(exe)
        .args([
            "--exact",
            "ibv::tests::child_without_libibverbs",
            "--ignored",
            "--nocapture",
        ])
        .env(LIBRARY_ENV, MISSING)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "child failed:\n{stdout}\n{stderr}");
    assert!(
        stdout.contains("CHILD-OK"),
        "child did not run:\n{stdout}\n{stderr}"
    );
}

#[test]
#[ignore = "spawned by process_wide_load_without_libibverbs"]
fn child_without_libibverbs() {
    assert_eq!(
        std::env::var(LIBRARY_ENV).as_deref(),
        Ok(MISSING),
        "run by its parent test"
    );
    let e = list_devices_with_caps().unwrap_err();
    assert!(e.to_string().contains("libibverbs not found"), "{e}");
    let e = Context::open(None).unwrap_err();
    assert!(e.is_library_missing(), "{e:?}");
    // The failure is remembered, not retried into a different state.
    assert!(Library::load().unwrap_err().is_library_missing());
    match IbvProvider::load() {
        Err(VerbsError::ProviderUnavailable { reason, .. }) => {
            assert!(reason.contains("libibverbs not found"), "{reason}")
        }
        other => panic!("expected ProviderUnavailable, got {other:?}"),
    }
    println!("CHILD-OK");
}

/// With the real library (if this machine has it): the device list works, and
/// without devices opening one is a typed error. Without it: the clear error.
#[test]
fn real_library_if_installed() {
    let lib = match Library::open(DEFAULT_LIBRARY) {
        Ok(lib) => lib,
        Err(e) => {
            assert!(e.is_library_missing(), "{e:?}");
            println!("libibverbs not installed here: {e}");
            return;
        }
    };
    let names = device_names(&lib).expect("ibv_get_device_list");
    println!("devices: {names:?}");
    if names.is_empty() {
        let e = Context::open_with(&lib, None).unwrap_err();
        assert!(matches!(e, IbvError::NoSuchDevice(_)), "{e:?}");
    }
    let e = Context::open_with(&lib, Some("tmpi-no-such-device")).unwrap_err();
    assert!(
        matches!(e, IbvError::NoSuchDevice(ref d) if d == "tmpi-no-such-device"),
        "{e:?}"
    );
}

/// A round trip through the provider-neutral traits on a real device.
/// Runs where `TMPI_VERBS_TEST_DEVICE` is set (ci/rxe/run-verbs-tests.sh).
#[test]
fn provider_traits_on_real_device() {
    use api::{
        CompletionQueue as _, Context as _, MemoryRegion as _, ProtectionDomain as _,
        Provider as _, QueuePair as _, SharedReceiveQueue as _,
    };
    let Ok(dev) = std::env::var("TMPI_VERBS_TEST_DEVICE") else {
        println!("TMPI_VERBS_TEST_DEVICE not set: no real device to test (see ci/rxe)");
        return;
    };
    let p = IbvProvider::load().expect("libibverbs");
    assert!(p.devices().unwrap().iter().any(|d| d.name == dev));
    let ctx = p.open(&dev).unwrap();
    let attr = ctx.query_device_ex().unwrap();
    let port = ctx.query_port(1).unwrap();
    let gids = ctx.query_gid_table().unwrap();
    assert!(!gids.is_empty());
    let dest_for = |qpn: u32| api::QpRtrTransition {
        dest_qp_num: qpn,
        dest: match port.link_layer {
            api::LinkLayer::Ethernet => {
                let g = gids
                    .iter()
                    .find(|g| g.gid_type == api::GidType::RoceV2 && g.gid.0[10..12] == [0xff, 0xff])
                    .or(gids.first())
                    .unwrap();
                api::Destination::Gid {
                    dgid: g.gid,
                    sgid_index: g.index as u8,
                    hop_limit: 64,
                    traffic_class: 0,
                    flow_label: 0,
                }
            }
            _ => api::Destination::Lid(port.lid),
        },
        sl: 0,
        port: 1,
        path_mtu: port.active_mtu,
        rq_psn: 0,
        max_dest_rd_atomic: 1,
        min_rnr_timer: 12,
    };
    let pd = ctx.alloc_pd().unwrap();
    let cq = ctx
        .create_cq_ex(&api::CqInitAttr {
            cqe: 64,
            with_tm_info: false,
        })
        .unwrap();
    assert!(cq.capacity() >= 64);
    let srq = pd
        .create_srq_ex(
            &api::SrqAttr {
                max_wr: 16,
                max_sge: 1,
                tm: None,
            },
            None,
        )
        .unwrap();
    assert!(srq.tm().is_none());
    let mk = |srq| {
        pd.create_qp(&api::QpInitAttr {
            send_cq: &cq,
            recv_cq: &cq,
            srq,
            cap: api::QpCap::default(),
            sq_sig_all: false,
        })
        .unwrap()
    };
    let a = mk(None);
    let b = mk(Some(&srq));
    let access = api::AccessFlags::LOCAL_WRITE
        | api::AccessFlags::REMOTE_READ
        | api::AccessFlags::REMOTE_WRITE;
    for (q, peer) in [(&a, b.qp_num()), (&b, a.qp_num())] {
        q.modify_to_init(&api::QpInitTransition {
            port: 1,
            pkey_index: 0,
            access,
        })
        .unwrap();
        q.modify_to_rtr(&dest_for(peer)).unwrap();
        q.modify_to_rts(&api::QpRtsTransition {
            sq_psn: 0,
            timeout: 14,
            retry_cnt: 7,
            rnr_retry: 7,
            max_rd_atomic: 1,
        })
        .unwrap();
        assert_eq!(q.state(), api::QpState::Rts);
    }
    let mut mem = vec![0u8; 8192];
    let base = mem.as_mut_ptr();
    // SAFETY: `mem` outlives the region (dropped at the end of the test,
    // after every completion was polled).
    let mr = unsafe { pd.reg_mr(base, mem.len(), access) }.unwrap();
    let poll_n = |n: usize| {
        let mut got = Vec::new();
        let t0 = std::time::Instant::now();
        let mut buf = [api::WorkCompletion::default(); 8];
        while got.len() < n {
            let k = cq.poll(&mut buf).unwrap();
            got.extend_from_slice(&buf[..k]);
            assert!(t0.elapsed().as_secs() < 10, "timeout, got {got:?}");
        }
        got
    };
    // Send a tagged-looking message (TMH in front) through the SRQ.
    let tmh = api::wire::Tmh {
        opcode: api::wire::TmhOpcode::Eager,
        app_ctx: 9,
        tag: 0x1234,
    };
    let hdr = tmh.to_bytes();
    // SAFETY: inside `mem`, registered; no NIC access in flight.
    unsafe {
        std::ptr::copy_nonoverlapping(hdr.as_ptr(), base, 16);
        std::ptr::copy_nonoverlapping(b"payload!".as_ptr(), base.add(16), 8);
    }
    // SAFETY: the SGEs lie in `mr`; nothing touches them until polled.
    unsafe {
        srq.post_srq_recv(&api::RecvWr {
            wr_id: 1,
            sg_list: &[mr.sge(4096, 1024)],
        })
        .unwrap();
        a.post_send(&api::SendWr {
            wr_id: 2,
            sg_list: &[mr.sge(0, 24)],
            opcode: api::SendOpcode::Send,
            flags: api::SendFlags::SIGNALED,
        })
        .unwrap();
    }
    let c = poll_n(2);
    let r = c.iter().find(|c| c.wr_id == 1).unwrap();
    assert_eq!(r.kind(), api::Completion::Recv { byte_len: 24 });
    assert_eq!(r.qp_num, b.qp_num());
    assert_eq!(
        c.iter().find(|c| c.wr_id == 2).unwrap().kind(),
        api::Completion::Send
    );
    // SAFETY: the receive completed; nothing in flight on these bytes.
    let got = unsafe { std::slice::from_raw_parts(base.add(4096), 24) };
    assert_eq!(api::wire::Tmh::parse(got).unwrap(), tmh);
    assert_eq!(&got[16..], b"payload!");

    // RDMA read of the peer's bytes, then a read with a bad rkey.
    // SAFETY: as above.
    unsafe {
        a.post_send(&api::SendWr {
            wr_id: 3,
            sg_list: &[mr.sge(6000, 24)],
            opcode: api::SendOpcode::RdmaRead {
                remote_addr: mr.addr() + 4096,
                rkey: mr.rkey(),
            },
            flags: api::SendFlags::SIGNALED,
        })
        .unwrap();
    }
    let c = poll_n(1);
    assert_eq!(c[0].kind(), api::Completion::RdmaRead, "{c:?}");
    // SAFETY: as above.
    assert_eq!(
        unsafe { std::slice::from_raw_parts(base.add(6000), 24) },
        got
    );
    // SAFETY: as above.
    unsafe {
        a.post_send(&api::SendWr {
            wr_id: 4,
            sg_list: &[mr.sge(7000, 8)],
            opcode: api::SendOpcode::RdmaRead {
                remote_addr: mr.addr(),
                rkey: mr.rkey().wrapping_add(0x100),
            },
            flags: api::SendFlags::SIGNALED,
        })
        .unwrap();
    }
    let c = poll_n(1);
    assert_eq!(c[0].wr_id, 4);
    assert_eq!(c[0].status, api::WcStatus::RemAccessErr);

    // Tag matching: where the device has none, a TM-SRQ is refused as
    // unsupported (never silently downgraded to a basic SRQ).
    if !attr.tm_caps.supported() {
        let e = pd
            .create_srq_ex(
                &api::SrqAttr {
                    max_wr: 16,
                    max_sge: 1,
                    tm: Some(api::SrqTmAttr {
                        max_num_tags: 16,
                        max_ops: 4,
                    }),
                },
                Some(&cq),
            )
            .unwrap_err();
        assert!(e.is_unsupported(), "{e:?}");
        // SAFETY: no buffers involved.
        let e = unsafe { srq.post_srq_ops(&mut [api::OpsWr::sync(1, 0)]) }.unwrap_err();
        assert!(e.is_unsupported(), "{e:?}");
    }
    drop(mr);
    drop(mem);
}
