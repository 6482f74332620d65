//! Communicators, groups, context ids, attributes, framework selection and
//! error reporting, on the simulated transport.

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use tmpi_base::error::MpiErrorClass;
use tmpi_base::mca::{Registry, Sources};
use tmpi_coll::sim::SimConfig;
use tmpi_coll::{Call, Pos};
use tmpi_coll::{CollKind, Datatype, Input, Op};
use tmpi_comm::{CommContext, Compare, Group, SplitType};

#[test]
fn split_odd_sizes_and_collectives_on_them() {
    // 8 ranks split by rank % 3 (sizes 3, 3, 2) and into 3 + 5, keys reversed.
    job(8, &[], |w, _| {
        let me = w.rank();
        let s = w.split(Some(me % 3), -(me as i32)).unwrap().unwrap();
        let members: Vec<u32> = (0..8).filter(|r| r % 3 == me % 3).rev().collect();
        assert_eq!(s.size() as usize, members.len());
        assert_eq!(
            s.rank() as usize,
            members.iter().position(|&r| r == me).unwrap()
        );
        assert_eq!(s.group().world_ranks().to_vec(), members);
        let t = w.split(Some(u32::from(me < 3)), 0).unwrap().unwrap();
        assert_eq!(t.size(), if me < 3 { 3 } else { 5 });
        for c in [&s, &t] {
            // allreduce of world ranks, bcast from the last rank, alltoall.
            let mut v = bytes(&[me as i32]);
            c.allreduce(Input::InPlace, &mut v, Datatype::I32, &Op::Sum)
                .unwrap();
            let want: i32 = c.group().world_ranks().iter().map(|&x| x as i32).sum();
            assert_eq!(from_bytes(&v), [want]);
            let root = c.size() - 1;
            let mut b = if c.rank() == root {
                bytes(&ints(9, 100, 1))
            } else {
                vec![0; 400]
            };
            c.bcast(&mut b, root).unwrap();
            assert_eq!(b, bytes(&ints(9, 100, 1)));
            let p = c.size();
            let send: Vec<u8> = (0..p)
                .flat_map(|d| bytes(&[(c.rank() * 10 + d) as i32]))
                .collect();
            let mut out = vec![0; send.len()];
            c.alltoall(Input::Buf(&send), &mut out).unwrap();
            assert_eq!(
                from_bytes(&out),
                (0..p)
                    .map(|s| (s * 10 + c.rank()) as i32)
                    .collect::<Vec<_>>()
            );
            let mut sc = vec![0u8; 4];
            c.scan(Input::Buf(&bytes(&[1])), &mut sc, Datatype::I32, &Op::Sum)
                .unwrap();
            assert_eq!(from_bytes(&sc), [c.rank() as i32 + 1]);
        }
        // Undefined colour: no communicator, but the others still get theirs.
        let u = w.split(if me == 4 { None } else { Some(0) }, 0).unwrap();
        assert_eq!(u.is_none(), me == 4);
        if let Some(u) = u {
            assert_eq!(u.size(), 7);
            u.barrier().unwrap();
        }
    });
}

#[test]
fn context_ids_unique_and_reused_after_free() {
    job(5, &[], |w, _| {
        let me = w.rank();
        let a = w.dup().unwrap();
        let b = w.dup().unwrap();
        let ids = [w.context_id(), a.context_id(), b.context_id()];
        assert!(
            ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2],
            "{ids:?}"
        );
        // A split where only some ranks hold a communicator: the next dup
        // must avoid ids live anywhere among the parent's ranks.
        let s = w.split(if me < 2 { Some(0) } else { None }, 0).unwrap();
        let c = w.dup().unwrap();
        if let Some(s) = &s {
            assert_ne!(s.context_id(), c.context_id());
        }
        assert!(!ids.contains(&c.context_id()));
        // Every rank agrees on the id (checked with an allgather).
        let mut all = vec![0u8; 4 * 5];
        w.allgather(Input::Buf(&c.context_id().to_ne_bytes()), &mut all)
            .unwrap();
        assert!(all.chunks(4).all(|x| x == c.context_id().to_ne_bytes()));
        let freed = a.context_id();
        a.free().unwrap();
        let d = w.dup().unwrap();
        assert_eq!(d.context_id(), freed, "a freed id is reused");
        // Many creations and frees do not exhaust the space.
        for _ in 0..50 {
            let x = d.dup().unwrap();
            x.barrier().unwrap();
            x.free().unwrap();
        }
        // The next id is the lowest one live nowhere among the parent's ranks.
        let live_here: Vec<u32> = [
            w.context_id(),
            b.context_id(),
            c.context_id(),
            d.context_id(),
        ]
        .into_iter()
        .chain(s.as_ref().map(|s| s.context_id()))
        .collect();
        let next = w.dup().unwrap().context_id();
        assert!(!live_here.contains(&next) && next > 1);
        let mut lowest = u32::MAX;
        for id in 2..next {
            if !live_here.contains(&id) {
                lowest = lowest.min(id);
            }
        }
        // Any id below `next` that is free here must be live on another rank
        // (the split communicator lives on ranks 0 and 1 only).
        let split_id = s.as_ref().map(|s| s.context_id()).unwrap_or(u32::MAX);
        let mut v = split_id.to_ne_bytes().to_vec();
        w.allreduce(Input::InPlace, &mut v, Datatype::U32, &Op::Min)
            .unwrap();
        if lowest != u32::MAX {
            assert_eq!(lowest, u32::from_ne_bytes(v.try_into().unwrap()));
        }
    });
}

/// A request on a communicator keeps its context id claimed after the last
/// handle is freed: the id goes back to the pool (and is reused) only once
/// the request is gone too. The communicator's part rides in its collective
/// state for that (`CollComm::new`'s owner).
#[test]
fn a_request_keeps_the_context_id_of_a_freed_communicator() {
    job(3, &[], |w, _| {
        let d = w.dup().unwrap();
        let id = d.context_id();
        let mine = (w.rank() + 1).to_ne_bytes().to_vec();
        let req = d.iallreduce(mine, Datatype::U32, &Op::Sum).unwrap();
        d.free().unwrap();
        let e = w.dup().unwrap();
        assert_ne!(
            e.context_id(),
            id,
            "an id still used by a request was reused"
        );
        let out = req.wait().unwrap();
        assert_eq!(u32::from_ne_bytes(out[..4].try_into().unwrap()), 1 + 2 + 3);
        let f = w.dup().unwrap();
        assert_eq!(
            f.context_id(),
            id,
            "the id comes back once the request is gone"
        );
        f.barrier().unwrap();
        e.barrier().unwrap();
    });
}

#[test]
fn dup_create_create_group_compare_and_names() {
    let mut cfg = SimConfig::new(6);
    cfg.node_of = vec![0, 1, 0, 1, 0, 1];
    job_cfg(cfg, &[], |w, _| {
        let me = w.rank();
        assert_eq!(w.name(), "MPI_COMM_WORLD");
        let d = w.dup().unwrap();
        assert_eq!(d.name(), "");
        d.set_name("mine");
        assert_eq!(d.name(), "mine");
        assert_eq!(w.compare(&w), Compare::Ident);
        assert_eq!(w.compare(&d), Compare::Congruent);
        let rev = w.split(Some(0), -(me as i32)).unwrap().unwrap();
        assert_eq!(w.compare(&rev), Compare::Similar);
        let odd = w.split(Some(me % 2), 0).unwrap().unwrap();
        assert_eq!(w.compare(&odd), Compare::Unequal);
        // create with a group in a custom order; non-members get None.
        let g = w.group().incl(&[4, 1, 2]).unwrap();
        let c = w.create(&g).unwrap();
        assert_eq!(c.is_some(), [1, 2, 4].contains(&me));
        if let Some(c) = &c {
            assert_eq!(c.rank(), g.rank_of(me).unwrap());
            let mut v = bytes(&[c.rank() as i32]);
            c.allreduce(Input::InPlace, &mut v, Datatype::I32, &Op::Max)
                .unwrap();
            assert_eq!(from_bytes(&v), [2]);
        }
        // create with the empty group: nobody gets one.
        assert!(w.create(&Group::empty()).unwrap().is_none());
        // create with groups that differ across ranks (same members in
        // another order on rank 5): MPI_ERR_GROUP on every rank, not two
        // communicators that disagree on who is who; the parent still works.
        let order: &[u32] = if me == 5 { &[1, 4, 2] } else { &[4, 1, 2] };
        let bad = w.create(&w.group().incl(order).unwrap());
        assert_eq!(
            bad.map(|c| c.is_some()).map_err(|e| e.class()),
            Err(tmpi_base::error::MpiErrorClass::Group)
        );
        assert!(w.dup().is_ok());
        // MPI-2.2 disjoint groups: each rank passes the group of its own
        // communicator (3 + 2, rank 5 passes the empty group and gets none).
        let mine: &[u32] = match me {
            0 | 3 | 4 => &[4, 0, 3],
            1 | 2 => &[2, 1],
            _ => &[],
        };
        let dg = w.group().incl(mine).unwrap();
        let dc = w.create(&dg).unwrap();
        assert_eq!(dc.is_some(), me != 5);
        if let Some(dc) = &dc {
            assert_eq!(dc.size(), mine.len() as u32);
            assert_eq!(dc.rank(), dg.rank_of(me).unwrap());
            let mut v = bytes(&[me as i32]);
            dc.allreduce(Input::InPlace, &mut v, Datatype::I32, &Op::Sum)
                .unwrap();
            assert_eq!(from_bytes(&v), [if mine.len() == 3 { 7 } else { 3 }]);
        }
        // Groups that overlap (rank 2 in both), and a rank named by a group
        // it did not pass (rank 5 passes the empty group): MPI_ERR_GROUP on
        // every rank.
        for bad_groups in [
            [
                &[0u32, 1, 2][..],
                &[0, 1, 2],
                &[0, 1, 2],
                &[2, 3, 4],
                &[2, 3, 4],
                &[],
            ],
            [&[0u32, 5][..], &[1, 2], &[1, 2], &[], &[], &[]],
        ] {
            let g = w.group().incl(bad_groups[me as usize]).unwrap();
            assert_eq!(
                w.create(&g).map(|c| c.is_some()).map_err(|e| e.class()),
                Err(tmpi_base::error::MpiErrorClass::Group),
                "{bad_groups:?}"
            );
        }
        // create_group: only the members call, two disjoint groups at once with the same tag.
        let g2 = if me < 3 {
            w.group().incl(&[2, 0, 1]).unwrap()
        } else {
            w.group().incl(&[3, 4, 5]).unwrap()
        };
        let cg = w.create_group(&g2, 7).unwrap();
        assert_eq!(cg.size(), 3);
        assert_eq!(cg.rank(), g2.rank_of(me).unwrap());
        let mut v = bytes(&[me as i32]);
        cg.allreduce(Input::InPlace, &mut v, Datatype::I32, &Op::Sum)
            .unwrap();
        assert_eq!(from_bytes(&v), [if me < 3 { 3 } else { 12 }]);
        // A group that is not a subset of the communicator's.
        let sub = odd.group();
        let other = w.group().difference(&sub);
        let e = odd.create(&other).unwrap_err();
        assert_eq!(e.class(), MpiErrorClass::Group);
        // split_type shared: the fabric puts ranks 0,2,4 on node 0 and 1,3,5 on node 1.
        let st = w.split_type(SplitType::Shared, 0).unwrap().unwrap();
        assert_eq!(
            st.group().world_ranks().to_vec(),
            (0..6).filter(|r| r % 2 == me % 2).collect::<Vec<_>>()
        );
        assert!(w.split_type(SplitType::Undefined, 0).unwrap().is_none());
    });
}

#[test]
fn split_type_shared_follows_nodes() {
    let mut cfg = SimConfig::new(5);
    cfg.node_of = vec![0, 1, 0, 2, 1];
    job_cfg(cfg, &[], |w, _| {
        let c = w.split_type(SplitType::Shared, 0).unwrap().unwrap();
        let node = [0, 1, 0, 2, 1][w.rank() as usize];
        let want: Vec<u32> = (0..5)
            .filter(|&r| [0, 1, 0, 2, 1][r as usize] == node)
            .collect();
        assert_eq!(c.group().world_ranks().to_vec(), want);
        c.barrier().unwrap();
    });
}

#[test]
fn attributes_copy_and_delete_callbacks() {
    let log = Arc::new(Mutex::new(Vec::<String>::new()));
    let l2 = Arc::clone(&log);
    job(3, &[], move |w, _| {
        let ctx = w.context().clone();
        let l = Arc::clone(&l2);
        let deleted = Arc::new(AtomicUsize::new(0));
        let dc = Arc::clone(&deleted);
        let k = ctx.create_keyval(
            Some(Arc::new(|_, extra, v| Ok(Some(v * 10 + extra)))),
            Some(Arc::new(move |_, _, v| {
                dc.fetch_add(v, Ordering::SeqCst);
                Ok(())
            })),
            3,
        );
        let nocopy = ctx.create_keyval(None, None, 0);
        let d = w.dup().unwrap();
        d.set_attr(k, 4).unwrap();
        d.set_attr(nocopy, 1).unwrap();
        assert_eq!(d.get_attr(k).unwrap(), Some(4));
        let e = d.dup().unwrap();
        assert_eq!(e.get_attr(k).unwrap(), Some(43), "copy callback result");
        assert_eq!(
            e.get_attr(nocopy).unwrap(),
            None,
            "no copy callback: not copied"
        );
        d.set_attr(k, 5).unwrap(); // deletes 4
        assert_eq!(deleted.load(Ordering::SeqCst), 4);
        d.delete_attr(k).unwrap(); // deletes 5
        assert_eq!(deleted.load(Ordering::SeqCst), 9);
        assert_eq!(d.delete_attr(k).unwrap_err().class(), MpiErrorClass::Keyval);
        e.free().unwrap(); // deletes 43
        assert_eq!(deleted.load(Ordering::SeqCst), 52);
        ctx.free_keyval(k).unwrap();
        assert_eq!(d.set_attr(k, 1).unwrap_err().class(), MpiErrorClass::Keyval);
        assert_eq!(
            ctx.free_keyval(k).unwrap_err().class(),
            MpiErrorClass::Keyval
        );
        assert_eq!(d.get_attr(999).unwrap_err().class(), MpiErrorClass::Keyval);
        // A failing delete callback makes free report the error.
        let bad = ctx.create_keyval(
            None,
            Some(Arc::new(|_, _, _| {
                Err(tmpi_coll::CollError::Arg("no".into()))
            })),
            0,
        );
        let f = w.dup().unwrap();
        f.set_attr(bad, 1).unwrap();
        assert_eq!(f.free().unwrap_err().class(), MpiErrorClass::Arg);
        l.lock().unwrap().push(format!("rank {} ok", w.rank()));
    });
    assert_eq!(log.lock().unwrap().len(), 3);
}

#[test]
fn selection_forcing_underlying_and_missing_provider() {
    // Forced algorithm is what the tuned module reports.
    let out = job(
        4,
        &[
            ("coll_tuned_allreduce_algorithm", "3"),
            ("coll_tuned_bcast_algorithm", "4"),
        ],
        |w, _| {
            let mut c = Call::new(CollKind::Allreduce);
            c.send = vec![0; 8].into();
            c.op = Some(Op::Sum);
            c.dtype = Datatype::I32;
            let pos = Pos {
                rank: w.rank(),
                size: w.size(),
            };
            let mut b = Call::new(CollKind::Bcast);
            b.block = 10;
            let gv = Call::new(CollKind::Gatherv);
            (
                w.table().algorithm(&c, pos),
                w.table().algorithm(&b, pos),
                w.table().providers(CollKind::Gatherv),
                w.table().providers(CollKind::Allreduce),
                w.table().algorithm(&gv, pos),
                w.context().clone(),
            )
        },
    );
    assert_eq!(out[0].0, "ring");
    assert_eq!(out[0].1, "chain");
    assert_eq!(out[0].2, ["basic"], "tuned does not provide gatherv");
    assert_eq!(
        out[0].3,
        ["tuned", "basic"],
        "basic stays as the underlying module"
    );
    assert_eq!(out[0].4, "linear");
    // Decision table without forcing.
    let out = job(4, &[], |w, _| {
        let pos = Pos {
            rank: w.rank(),
            size: w.size(),
        };
        let mut small = Call::new(CollKind::Allreduce);
        small.send = vec![0; 8].into();
        small.op = Some(Op::Sum);
        small.dtype = Datatype::I32;
        let mut big = small.clone();
        big.send = vec![0; 1 << 20].into();
        let mut nc = big.clone();
        nc.op = Some(matmul());
        let st = w.context().clone();
        drop(st);
        (
            w.table().algorithm(&small, pos),
            w.table().algorithm(&big, pos),
            w.table().algorithm(&nc, pos),
        )
    });
    assert_eq!(
        out[0],
        ("recursive_doubling", "rabenseifner", "recursive_doubling")
    );
    // Size-1 communicators go to self.
    let out = job(2, &[], |_, _| 0);
    assert_eq!(out, [0, 0]);
    let reg = Registry::new(Sources::default());
    let fab = tmpi_coll::sim::SimFabric::new(SimConfig::new(1));
    let u = CommContext::init(Arc::new(fab.endpoint(0)), &reg).unwrap();
    assert_eq!(
        u.self_comm.table().providers(CollKind::Barrier),
        ["self", "basic"]
    );
    // Without basic, tuned alone cannot serve gatherv: creation fails naming it.
    let reg = Registry::new(Sources::default().with_cmdline([("coll".into(), "tuned".into())]));
    let fab = tmpi_coll::sim::SimFabric::new(SimConfig::new(2));
    let e = CommContext::init(Arc::new(fab.endpoint(0)), &reg).unwrap_err();
    assert!(
        e.to_string().contains("barrier") || e.to_string().contains("gatherv"),
        "{e}"
    );
    let reg =
        Registry::new(Sources::default().with_cmdline([("coll".into(), "basic,tunde".into())]));
    let e = CommContext::init(Arc::new(fab.endpoint(0)), &reg).unwrap_err();
    assert!(
        e.to_string().contains("tunde") && e.to_string().contains("tuned"),
        "{e}"
    );
    let reg = Registry::new(
        Sources::default().with_cmdline([("coll_tuned_bcast_algorithm".into(), "9".into())]),
    );
    assert!(CommContext::init(Arc::new(fab.endpoint(0)), &reg).is_err());
}

#[test]
fn bad_arguments_get_mpi_error_classes() {
    job(3, &[], |w, _| {
        let me = w.rank();
        assert_eq!(
            w.bcast(&mut [0u8; 4], 3).unwrap_err().class(),
            MpiErrorClass::Root
        );
        let mut o = [0u8; 4];
        assert_eq!(
            w.allreduce(Input::Buf(&[0u8; 4]), &mut o, Datatype::F32, &Op::Band)
                .unwrap_err()
                .class(),
            MpiErrorClass::Op
        );
        assert_eq!(
            w.allreduce(
                Input::Buf(&[0u8; 6]),
                &mut [0u8; 6],
                Datatype::I32,
                &Op::Sum
            )
            .unwrap_err()
            .class(),
            MpiErrorClass::Count
        );
        assert_eq!(
            w.allreduce(Input::Buf(&[0u8; 8]), &mut o, Datatype::I32, &Op::Sum)
                .unwrap_err()
                .class(),
            MpiErrorClass::Count
        );
        if me != 0 {
            assert_eq!(
                w.reduce(Input::InPlace, None, Datatype::I32, &Op::Sum, 0)
                    .unwrap_err()
                    .class(),
                MpiErrorClass::Arg
            );
        }
        // Blocks outside the receive buffer: every rank checks its own layout.
        let mut small = [0u8; 8];
        assert_eq!(
            w.allgatherv(Input::Buf(&[0u8; 4]), &mut small, &[4, 4, 4], &[0, 4, 8])
                .unwrap_err()
                .class(),
            MpiErrorClass::Buffer
        );
        assert_eq!(
            w.group().incl(&[3]).unwrap_err().class(),
            MpiErrorClass::Rank
        );
        // Mismatched lengths across ranks are detected, not a hang or garbage:
        // rank 0 broadcasts 8 bytes, the others expect 4.
        let mut b = vec![0u8; if me == 0 { 8 } else { 4 }];
        let r = w.bcast(&mut b, 0);
        if me == 0 {
            r.unwrap();
        } else {
            assert_eq!(r.unwrap_err().class(), MpiErrorClass::Truncate);
        }
    });
}
