//! Shared helpers of the integration tests: simulated jobs and reference data.
#![allow(dead_code)]

use std::sync::Arc;
use std::time::Duration;

use tmpi_base::mca::{Registry, Sources};
use tmpi_coll::sim::{self, SimConfig, SimP2p};
use tmpi_coll::{Datatype, Op, UserOp};
use tmpi_comm::{Comm, CommContext};

/// Runs `f(world, transport)` on `n` simulated ranks with MCA parameters `params`.
pub fn job<T: Send + 'static>(
    n: u32,
    params: &[(&str, &str)],
    f: impl Fn(Comm, SimP2p) -> T + Send + Sync + 'static,
) -> Vec<T> {
    job_cfg(SimConfig::new(n), params, f)
}

/// [`job`] with an explicit fabric configuration.
pub fn job_cfg<T: Send + 'static>(
    cfg: SimConfig,
    params: &[(&str, &str)],
    f: impl Fn(Comm, SimP2p) -> T + Send + Sync + 'static,
) -> Vec<T> {
    let pairs: Vec<(String, String)> = params
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let reg = Arc::new(Registry::new(Sources::default().with_cmdline(pairs)));
    sim::run(cfg, Duration::from_secs(120), move |p| {
        let u = CommContext::init(Arc::new(p.clone()), &reg).expect("init");
        f(u.world, p)
    })
}

/// Deterministic i32 input of `rank` with `n` elements and a seed.
pub fn ints(rank: u32, n: usize, seed: u32) -> Vec<i32> {
    (0..n)
        .map(|i| {
            (rank.wrapping_add(1).wrapping_mul(1_000_003)
                ^ (i as u32).wrapping_mul(7919)
                ^ seed.wrapping_mul(31)) as i32
        })
        .collect()
}

/// Bytes of i32 values.
pub fn bytes(v: &[i32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_ne_bytes()).collect()
}

/// i32 values of bytes.
pub fn from_bytes(b: &[u8]) -> Vec<i32> {
    b.chunks_exact(4)
        .map(|c| i32::from_ne_bytes(c.try_into().unwrap()))
        .collect()
}

/// A non-commutative associative op on I32 vectors: groups of 4 are 2x2
/// matrices, combined by (wrapping) matrix product `in * inout`.
pub fn matmul() -> Op {
    Op::User(UserOp::new("matmul", false, |a, b, n, t| {
        assert_eq!(t, Datatype::I32);
        let x = from_bytes(a);
        let mut y = from_bytes(b);
        assert_eq!(x.len(), n);
        for (m, o) in x.chunks_exact(4).zip(y.chunks_exact_mut(4)) {
            let r = [
                m[0].wrapping_mul(o[0])
                    .wrapping_add(m[1].wrapping_mul(o[2])),
                m[0].wrapping_mul(o[1])
                    .wrapping_add(m[1].wrapping_mul(o[3])),
                m[2].wrapping_mul(o[0])
                    .wrapping_add(m[3].wrapping_mul(o[2])),
                m[2].wrapping_mul(o[1])
                    .wrapping_add(m[3].wrapping_mul(o[3])),
            ];
            o.copy_from_slice(&r);
        }
        b.copy_from_slice(&bytes(&y));
    }))
}

/// Left-to-right fold `x0 op x1 op ...` of byte vectors (the reference).
pub fn fold(op: &Op, dtype: Datatype, inputs: &[Vec<u8>]) -> Vec<u8> {
    let mut acc = inputs.last().unwrap().clone();
    for x in inputs[..inputs.len() - 1].iter().rev() {
        op.apply(dtype, x, &mut acc).unwrap();
    }
    acc
}
