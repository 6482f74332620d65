//! Graph and distributed-graph topologies (`MPI_Graph_*`,
//! `MPI_Dist_graph_*`) and the neighbour lists every virtual topology gives
//! the neighbourhood collectives (`crate::neighbor`). Cartesian topologies
//! are created and queried in `crate::comm`.

use std::ffi::c_int;
use std::sync::Arc;

use tmpi_coll::Input;

use crate::coll::comm_of;
use crate::comm::{coords_of, rank_of, register};
use crate::error::{guard, Error, MpiErrorClass as C, Res};
use crate::ffi::{array, count as ccount, put, put_array};
use crate::state::{tables, Topo};

const PROC_NULL: c_int = -2;
/// `MPI_UNWEIGHTED` and `MPI_WEIGHTS_EMPTY` (mpi.h): special addresses.
const UNWEIGHTED: usize = 2;
const WEIGHTS_EMPTY: usize = 3;

/// The topology attached to `comm`.
fn topo_of(comm: c_int) -> Res<Arc<Topo>> {
    tables().comm(comm)?.topo.clone().ok_or_else(|| {
        Error::new(
            C::Topology,
            format!("communicator {comm} has no virtual topology"),
        )
    })
}

/// `(index, edges)` of a graph topology.
fn graph_of(comm: c_int) -> Res<(Vec<c_int>, Vec<c_int>)> {
    match &*topo_of(comm)? {
        Topo::Graph { index, edges } => Ok((index.clone(), edges.clone())),
        _ => Err(Error::new(
            C::Topology,
            format!("communicator {comm} has no graph topology"),
        )),
    }
}

/// Rank `r`'s neighbours in a graph topology.
fn graph_neighbors(index: &[c_int], edges: &[c_int], r: c_int) -> Res<Vec<c_int>> {
    let i = usize::try_from(r)
        .ok()
        .filter(|&i| i < index.len())
        .ok_or_else(|| {
            Error::new(
                C::Rank,
                format!("rank {r} is not a node of a graph of {}", index.len()),
            )
        })?;
    let from = if i == 0 { 0 } else { index[i - 1] as usize };
    Ok(edges[from..index[i] as usize].to_vec())
}

/// This rank's neighbourhood in `comm`'s topology, for the neighbourhood
/// collectives: `indegree` receive blocks and `outdegree` send blocks, and
/// the messages as `(block, peer)` in the order they are posted (receives
/// and sends of one pair of ranks match in that order; `MPI_PROC_NULL`
/// neighbours are left out: their blocks are neither sent nor written).
pub(crate) struct Neighborhood {
    pub indegree: usize,
    pub outdegree: usize,
    pub recvs: Vec<(usize, u32)>,
    pub sends: Vec<(usize, u32)>,
}

impl Neighborhood {
    /// Whether block `i` of the receive side has a peer.
    pub fn receives(&self, i: usize) -> bool {
        self.recvs.iter().any(|&(b, _)| b == i)
    }

    /// Whether block `j` of the send side has a peer.
    pub fn sends_block(&self, j: usize) -> bool {
        self.sends.iter().any(|&(b, _)| b == j)
    }
}

pub(crate) fn neighborhood(comm: c_int) -> Res<Neighborhood> {
    let me = comm_of(comm)?.rank() as c_int;
    let real = |v: Vec<(usize, c_int)>| -> Vec<(usize, u32)> {
        v.into_iter()
            .filter(|&(_, r)| r != PROC_NULL)
            .map(|(b, r)| (b, r as u32))
            .collect()
    };
    match &*topo_of(comm)? {
        Topo::Cart(c) => {
            // Per dimension d: block 2d from (and to) the neighbour at
            // coordinate - 1, block 2d + 1 the one at + 1 (MPI_PROC_NULL
            // off a non-periodic edge). What a rank sends in the negative
            // direction arrives as its positive neighbour's block 2d + 1:
            // with both neighbours one process (a periodic dimension of 1
            // or 2) the sends go -1 then +1 and the receives are posted +1
            // then -1, so the transport's order pairs them that way.
            let at = coords_of(c, me);
            let shifted = |d: usize, delta: c_int| {
                let mut x = at.clone();
                x[d] += delta;
                rank_of(c, &x).unwrap_or(PROC_NULL)
            };
            let (mut recvs, mut sends) = (Vec::new(), Vec::new());
            for d in 0..c.dims.len() {
                let (lo, hi) = (shifted(d, -1), shifted(d, 1));
                recvs.push((2 * d + 1, hi));
                recvs.push((2 * d, lo));
                sends.push((2 * d, lo));
                sends.push((2 * d + 1, hi));
            }
            let n = 2 * c.dims.len();
            Ok(Neighborhood {
                indegree: n,
                outdegree: n,
                recvs: real(recvs),
                sends: real(sends),
            })
        }
        Topo::Graph { index, edges } => {
            let nb = graph_neighbors(index, edges, me)?;
            let list: Vec<(usize, c_int)> = nb.iter().copied().enumerate().collect();
            Ok(Neighborhood {
                indegree: nb.len(),
                outdegree: nb.len(),
                recvs: real(list.clone()),
                sends: real(list),
            })
        }
        Topo::DistGraph {
            sources,
            destinations,
            ..
        } => Ok(Neighborhood {
            indegree: sources.len(),
            outdegree: destinations.len(),
            recvs: real(sources.iter().copied().enumerate().collect()),
            sends: real(destinations.iter().copied().enumerate().collect()),
        }),
    }
}

/// Ranks of a topology must name processes of the communicator.
fn check_ranks(what: &str, ranks: &[c_int], size: u32) -> Res<()> {
    match ranks.iter().find(|&&r| r < 0 || r as u32 >= size) {
        Some(r) => Err(Error::new(
            C::Rank,
            format!("{what}: {r} is not a rank of a communicator of {size}"),
        )),
        None => Ok(()),
    }
}

#[no_mangle]
pub extern "C" fn MPI_Graph_create(
    comm: c_int,
    nnodes: c_int,
    index: *const c_int,
    edges: *const c_int,
    _reorder: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Graph_create", comm, || {
        let base = comm_of(comm)?;
        let n = ccount(nnodes, C::Arg, "nnodes")?;
        if n > base.size() as usize {
            return Err(Error::new(
                C::Arg,
                format!("nnodes {n} exceeds the communicator's size {}", base.size()),
            ));
        }
        let index = array(index, n, "index")?;
        if index.windows(2).any(|w| w[1] < w[0]) || index.first().is_some_and(|&x| x < 0) {
            return Err(Error::new(C::Arg, "index must not decrease"));
        }
        let nedges = ccount(index.last().copied().unwrap_or(0), C::Arg, "index")?;
        let edges = array(edges, nedges, "edges")?;
        check_ranks("edges", &edges, n as u32)?;
        let g = base.group().incl(&(0..n as u32).collect::<Vec<_>>())?;
        match base.create(&g)? {
            None => put(newcomm, 0, "comm_graph"),
            Some(c) => {
                let h = register(comm, c, false)?;
                tables().comm_mut(h)?.topo = Some(Arc::new(Topo::Graph { index, edges }));
                put(newcomm, h, "comm_graph")
            }
        }
    })
}

#[no_mangle]
pub extern "C" fn MPI_Graphdims_get(comm: c_int, nnodes: *mut c_int, nedges: *mut c_int) -> c_int {
    guard("MPI_Graphdims_get", comm, || {
        let (index, edges) = graph_of(comm)?;
        put(nnodes, index.len() as c_int, "nnodes")?;
        put(nedges, edges.len() as c_int, "nedges")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Graph_get(
    comm: c_int,
    maxindex: c_int,
    maxedges: c_int,
    index: *mut c_int,
    edges: *mut c_int,
) -> c_int {
    guard("MPI_Graph_get", comm, || {
        let (i, e) = graph_of(comm)?;
        let (mi, me) = (
            ccount(maxindex, C::Arg, "maxindex")?,
            ccount(maxedges, C::Arg, "maxedges")?,
        );
        put_array(index, &i[..i.len().min(mi)], "index")?;
        put_array(edges, &e[..e.len().min(me)], "edges")
    })
}

#[no_mangle]
pub extern "C" fn MPI_Graph_neighbors_count(comm: c_int, rank: c_int, n: *mut c_int) -> c_int {
    guard("MPI_Graph_neighbors_count", comm, || {
        let (i, e) = graph_of(comm)?;
        put(
            n,
            graph_neighbors(&i, &e, rank)?.len() as c_int,
            "nneighbors",
        )
    })
}

#[no_mangle]
pub extern "C" fn MPI_Graph_neighbors(
    comm: c_int,
    rank: c_int,
    maxneighbors: c_int,
    neighbors: *mut c_int,
) -> c_int {
    guard("MPI_Graph_neighbors", comm, || {
        let (i, e) = graph_of(comm)?;
        let nb = graph_neighbors(&i, &e, rank)?;
        let max = ccount(maxneighbors, C::Arg, "maxneighbors")?;
        put_array(neighbors, &nb[..nb.len().min(max)], "neighbors")
    })
}

/// Edge weights as passed: `None` for `MPI_UNWEIGHTED`, an empty list for
/// `MPI_WEIGHTS_EMPTY` (only with no edges), else `n` weights.
fn weights(p: *const c_int, n: usize, what: &str) -> Res<Option<Vec<c_int>>> {
    match p as usize {
        UNWEIGHTED => Ok(None),
        WEIGHTS_EMPTY if n == 0 => Ok(Some(Vec::new())),
        WEIGHTS_EMPTY => Err(Error::new(
            C::Arg,
            format!("{what}: MPI_WEIGHTS_EMPTY with {n} edges"),
        )),
        _ => {
            if n == 0 {
                return Ok(Some(Vec::new()));
            }
            let w = array(p, n, what)?;
            if w.iter().any(|&x| x < 0) {
                return Err(Error::new(C::Arg, format!("{what}: a weight is negative")));
            }
            Ok(Some(w))
        }
    }
}

/// Duplicates `comm` and attaches a distributed graph to the copy.
fn attach_dist_graph(comm: c_int, topo: Topo, newcomm: *mut c_int) -> Res<()> {
    crate::ffi::out_arg(newcomm, "comm_dist_graph")?;
    let c = comm_of(comm)?.dup()?;
    let h = register(comm, c, false)?;
    tables().comm_mut(h)?.topo = Some(Arc::new(topo));
    put(newcomm, h, "comm_dist_graph")
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Dist_graph_create_adjacent(
    comm: c_int,
    indegree: c_int,
    sources: *const c_int,
    sourceweights: *const c_int,
    outdegree: c_int,
    destinations: *const c_int,
    destweights: *const c_int,
    _info: c_int,
    _reorder: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Dist_graph_create_adjacent", comm, || {
        let size = comm_of(comm)?.size();
        let nin = ccount(indegree, C::Arg, "indegree")?;
        let nout = ccount(outdegree, C::Arg, "outdegree")?;
        let sources = array(sources, nin, "sources")?;
        let destinations = array(destinations, nout, "destinations")?;
        check_ranks("sources", &sources, size)?;
        check_ranks("destinations", &destinations, size)?;
        let topo = Topo::DistGraph {
            sources,
            source_weights: weights(sourceweights, nin, "sourceweights")?,
            destinations,
            dest_weights: weights(destweights, nout, "destweights")?,
        };
        attach_dist_graph(comm, topo, newcomm)
    })
}

/// `MPI_Dist_graph_create`: every rank names some edges (`n` sources, each
/// with `degrees[i]` destinations); each edge goes to its source (an
/// out-edge) and its destination (an in-edge) in one exchange. Both ends
/// order their edges by the rank that named them and then by position in
/// its list, so repeated edges between two ranks pair up in the same order
/// on both sides.
#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Dist_graph_create(
    comm: c_int,
    n: c_int,
    sources: *const c_int,
    degrees: *const c_int,
    destinations: *const c_int,
    weights_in: *const c_int,
    _info: c_int,
    _reorder: c_int,
    newcomm: *mut c_int,
) -> c_int {
    guard("MPI_Dist_graph_create", comm, || {
        let c = comm_of(comm)?;
        let p = c.size() as usize;
        let n = ccount(n, C::Arg, "n")?;
        let srcs = array(sources, n, "sources")?;
        let degs = array(degrees, n, "degrees")?;
        let mut total = 0usize;
        for &d in &degs {
            total += ccount(d, C::Arg, "degrees[i]")?;
        }
        let dsts = array(destinations, total, "destinations")?;
        check_ranks("sources", &srcs, p as u32)?;
        check_ranks("destinations", &dsts, p as u32)?;
        let w = weights(weights_in, total, "weights")?;
        // Records of 3 ints, (is an in-edge of the receiver, peer, weight),
        // to every edge's source and destination.
        let mut per: Vec<Vec<c_int>> = vec![Vec::new(); p];
        let mut k = 0;
        for (i, &s) in srcs.iter().enumerate() {
            for _ in 0..degs[i] {
                let d = dsts[k];
                let wt = w.as_ref().map_or(1, |w| w[k]);
                per[s as usize].extend([0, d, wt]);
                per[d as usize].extend([1, s, wt]);
                k += 1;
            }
        }
        let counts: Vec<u8> = per
            .iter()
            .flat_map(|v| ((v.len() * 4) as u64).to_ne_bytes())
            .collect();
        let mut theirs = vec![0u8; counts.len()];
        c.alltoall(Input::Buf(&counts), &mut theirs)?;
        let rcounts: Vec<usize> = theirs
            .chunks_exact(8)
            .map(|b| u64::from_ne_bytes(b.try_into().unwrap_or_default()) as usize)
            .collect();
        let send: Vec<u8> = per.iter().flatten().flat_map(|x| x.to_ne_bytes()).collect();
        let scounts: Vec<usize> = per.iter().map(|v| v.len() * 4).collect();
        let displs = |cs: &[usize]| -> Vec<usize> {
            cs.iter()
                .scan(0, |acc, &x| {
                    let d = *acc;
                    *acc += x;
                    Some(d)
                })
                .collect()
        };
        let (sd, rd) = (displs(&scounts), displs(&rcounts));
        let mut recv = vec![0u8; rcounts.iter().sum()];
        c.alltoallv(Input::Buf(&send), &scounts, &sd, &mut recv, &rcounts, &rd)?;
        let ints: Vec<c_int> = recv
            .chunks_exact(4)
            .map(|b| c_int::from_ne_bytes(b.try_into().unwrap_or_default()))
            .collect();
        let (mut sources, mut sw, mut destinations, mut dw) = (vec![], vec![], vec![], vec![]);
        // Weighted unless this rank passed MPI_UNWEIGHTED (MPI requires all
        // ranks to pass it or none), so a rank without edges that passed an
        // array (even an empty one, or NULL) has a weighted graph.
        let weighted = w.is_some();
        for r in ints.chunks_exact(3) {
            if r[0] == 1 {
                sources.push(r[1]);
                sw.push(r[2]);
            } else {
                destinations.push(r[1]);
                dw.push(r[2]);
            }
        }
        let topo = Topo::DistGraph {
            sources,
            source_weights: weighted.then_some(sw),
            destinations,
            dest_weights: weighted.then_some(dw),
        };
        attach_dist_graph(comm, topo, newcomm)
    })
}

/// `(sources, source weights, destinations, destination weights)` of a
/// distributed graph.
type DistEdges = (
    Vec<c_int>,
    Option<Vec<c_int>>,
    Vec<c_int>,
    Option<Vec<c_int>>,
);

fn dist_graph_of(comm: c_int) -> Res<DistEdges> {
    match &*topo_of(comm)? {
        Topo::DistGraph {
            sources,
            source_weights,
            destinations,
            dest_weights,
        } => Ok((
            sources.clone(),
            source_weights.clone(),
            destinations.clone(),
            dest_weights.clone(),
        )),
        _ => Err(Error::new(
            C::Topology,
            format!("communicator {comm} has no distributed graph topology"),
        )),
    }
}

#[no_mangle]
pub extern "C" fn MPI_Dist_graph_neighbors_count(
    comm: c_int,
    indegree: *mut c_int,
    outdegree: *mut c_int,
    weighted: *mut c_int,
) -> c_int {
    guard("MPI_Dist_graph_neighbors_count", comm, || {
        let (s, sw, d, dw) = dist_graph_of(comm)?;
        put(indegree, s.len() as c_int, "indegree")?;
        put(outdegree, d.len() as c_int, "outdegree")?;
        put(
            weighted,
            c_int::from(sw.is_some() || dw.is_some()),
            "weighted",
        )
    })
}

#[allow(clippy::too_many_arguments)]
#[no_mangle]
pub extern "C" fn MPI_Dist_graph_neighbors(
    comm: c_int,
    maxindegree: c_int,
    sources: *mut c_int,
    sourceweights: *mut c_int,
    maxoutdegree: c_int,
    destinations: *mut c_int,
    destweights: *mut c_int,
) -> c_int {
    guard("MPI_Dist_graph_neighbors", comm, || {
        let (s, sw, d, dw) = dist_graph_of(comm)?;
        let mi = ccount(maxindegree, C::Arg, "maxindegree")?.min(s.len());
        let mo = ccount(maxoutdegree, C::Arg, "maxoutdegree")?.min(d.len());
        put_array(sources, &s[..mi], "sources")?;
        put_array(destinations, &d[..mo], "destinations")?;
        // Weights only where the caller passed an array for them.
        let real = |p: *mut c_int| !matches!(p as usize, 0 | UNWEIGHTED | WEIGHTS_EMPTY);
        if let (Some(w), true) = (&sw, real(sourceweights)) {
            put_array(sourceweights, &w[..mi.min(w.len())], "sourceweights")?;
        }
        if let (Some(w), true) = (&dw, real(destweights)) {
            put_array(destweights, &w[..mo.min(w.len())], "destweights")?;
        }
        Ok(())
    })
}
