/* Graph and distributed-graph topologies and the neighbourhood
 * collectives on Cartesian, graph and distributed-graph communicators,
 * blocking and not, with results checked against what every rank computes
 * for its neighbours. Ranks 1-4 (periodic rings of 1 and 2 make a rank its
 * own neighbour, or both neighbours one process). */
#include "check.h"

static int mod(int a, int n) { return ((a % n) + n) % n; }

/* 1-D periodic ring: block 0 goes to the left neighbour, block 1 to the
 * right; what a rank sent to the left arrives as its left neighbour's
 * right-hand block (MPI-4), also when left and right are one process. */
static void ring_cart(int rank, int size) {
    int dims[1] = {size}, periods[1] = {1};
    MPI_Comm ring;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int t;
    OK(MPI_Topo_test(ring, &t));
    CHECK(t == MPI_CART);
    int send[2] = {rank * 100 + 0, rank * 100 + 1}, recv[2] = {-1, -1};
    OK(MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring));
    CHECK(recv[0] == mod(rank - 1, size) * 100 + 1);
    CHECK(recv[1] == mod(rank + 1, size) * 100 + 0);
    int all[2] = {-1, -1}, me = rank + 7;
    OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, all, 1, MPI_INT, ring));
    CHECK(all[0] == mod(rank - 1, size) + 7 && all[1] == mod(rank + 1, size) + 7);
    /* Non-blocking, with point-to-point traffic on the same communicator
     * that a wildcard receive must take instead of the collective's. */
    MPI_Request rq[3];
    recv[0] = recv[1] = -1;
    OK(MPI_Ineighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, ring, &rq[0]));
    int token = rank, got = -1;
    OK(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, ring, &rq[1]));
    OK(MPI_Isend(&token, 1, MPI_INT, mod(rank + 1, size), 5, ring, &rq[2]));
    OK(MPI_Waitall(3, rq, MPI_STATUSES_IGNORE));
    CHECK(recv[0] == mod(rank - 1, size) * 100 + 1);
    CHECK(recv[1] == mod(rank + 1, size) * 100 + 0);
    CHECK(got == mod(rank - 1, size));
    OK(MPI_Comm_free(&ring));
}

/* 2-D grid, not periodic: neighbours off the edge are MPI_PROC_NULL and
 * their blocks stay untouched; v and w forms with blocks in reverse. */
static void grid_cart(int rank, int size) {
    int dims[2] = {0, 0}, periods[2] = {0, 0};
    OK(MPI_Dims_create(size, 2, dims));
    MPI_Comm grid;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &grid));
    int nb[4];
    for (int d = 0; d < 2; d++) OK(MPI_Cart_shift(grid, d, 1, &nb[2 * d], &nb[2 * d + 1]));
    int send[4], recv[4];
    for (int j = 0; j < 4; j++) send[j] = rank * 10 + j, recv[j] = -1;
    OK(MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, grid));
    for (int i = 0; i < 4; i++) {
        /* Block 2d from the lower neighbour, which sent its block 2d + 1
         * up; block 2d + 1 from the upper one, which sent its block 2d. */
        int want = nb[i] == MPI_PROC_NULL ? -1 : nb[i] * 10 + (i ^ 1);
        CHECK(recv[i] == want);
    }
    /* v form: two ints per block, blocks stored in reverse order. */
    int vs[8], vr[8], cnt[4] = {2, 2, 2, 2}, dis[4] = {6, 4, 2, 0};
    for (int j = 0; j < 4; j++) vs[6 - 2 * j] = rank * 10 + j, vs[7 - 2 * j] = -rank;
    for (int i = 0; i < 8; i++) vr[i] = -99;
    OK(MPI_Neighbor_alltoallv(vs, cnt, dis, MPI_INT, vr, cnt, dis, MPI_INT, grid));
    for (int i = 0; i < 4; i++) {
        int *b = &vr[6 - 2 * i];
        if (nb[i] == MPI_PROC_NULL)
            CHECK(b[0] == -99 && b[1] == -99);
        else
            CHECK(b[0] == nb[i] * 10 + (i ^ 1) && b[1] == -nb[i]);
    }
    /* w form: doubles received as a strided vector type. */
    double ws[4], wr[8];
    MPI_Datatype every_other;
    OK(MPI_Type_vector(1, 1, 2, MPI_DOUBLE, &every_other));
    OK(MPI_Type_commit(&every_other));
    int wc[4] = {1, 1, 1, 1};
    MPI_Aint sd[4], rd[4];
    MPI_Datatype st[4], rt[4];
    for (int j = 0; j < 4; j++) {
        ws[j] = rank + j / 10.0;
        sd[j] = j * (MPI_Aint)sizeof(double);
        rd[j] = 2 * j * (MPI_Aint)sizeof(double);
        st[j] = MPI_DOUBLE;
        rt[j] = every_other;
    }
    for (int i = 0; i < 8; i++) wr[i] = -1.0;
    OK(MPI_Neighbor_alltoallw(ws, wc, sd, st, wr, wc, rd, rt, grid));
    for (int i = 0; i < 4; i++) {
        double want = nb[i] == MPI_PROC_NULL ? -1.0 : nb[i] + (i ^ 1) / 10.0;
        CHECK(wr[2 * i] == want && wr[2 * i + 1] == -1.0);
    }
    OK(MPI_Type_free(&every_other));
    OK(MPI_Comm_free(&grid));
}

/* MPI_Graph_create: a ring as a graph (both neighbours listed). */
static void graph(int rank, int size) {
    int index[4], edges[8];
    for (int r = 0; r < size; r++) {
        index[r] = 2 * (r + 1);
        edges[2 * r] = mod(r - 1, size);
        edges[2 * r + 1] = mod(r + 1, size);
    }
    MPI_Comm g;
    OK(MPI_Graph_create(MPI_COMM_WORLD, size, index, edges, 0, &g));
    int t, nn, ne, cnt, nbrs[2], gi[4], ge[8];
    OK(MPI_Topo_test(g, &t));
    CHECK(t == MPI_GRAPH);
    OK(MPI_Graphdims_get(g, &nn, &ne));
    CHECK(nn == size && ne == 2 * size);
    OK(MPI_Graph_get(g, 4, 8, gi, ge));
    for (int r = 0; r < size; r++) CHECK(gi[r] == index[r]);
    for (int e = 0; e < 2 * size; e++) CHECK(ge[e] == edges[e]);
    OK(MPI_Graph_neighbors_count(g, rank, &cnt));
    CHECK(cnt == 2);
    OK(MPI_Graph_neighbors(g, rank, 2, nbrs));
    CHECK(nbrs[0] == mod(rank - 1, size) && nbrs[1] == mod(rank + 1, size));
    int me = 1000 + rank, all[2] = {0, 0};
    OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, all, 1, MPI_INT, g));
    CHECK(all[0] == 1000 + nbrs[0] && all[1] == 1000 + nbrs[1]);
    OK(MPI_Comm_free(&g));
}

/* MPI_Dist_graph_create_adjacent: from r - 1 and r - 2, to r + 1 and r + 2
 * (with 1 or 2 ranks: repeated edges, self edges). */
static void dist_adjacent(int rank, int size) {
    int src[2] = {mod(rank - 1, size), mod(rank - 2, size)};
    int dst[2] = {mod(rank + 1, size), mod(rank + 2, size)};
    int sw[2] = {3, 4}, dw[2] = {5, 6};
    MPI_Comm d;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, sw, 2, dst, dw, MPI_INFO_NULL, 0,
                                      &d));
    int t, in, out, weighted, s2[2], w2[2], d2[2], x2[2];
    OK(MPI_Topo_test(d, &t));
    CHECK(t == MPI_DIST_GRAPH);
    OK(MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted));
    CHECK(in == 2 && out == 2 && weighted);
    OK(MPI_Dist_graph_neighbors(d, 2, s2, w2, 2, d2, x2));
    CHECK(s2[0] == src[0] && s2[1] == src[1] && w2[0] == 3 && w2[1] == 4);
    CHECK(d2[0] == dst[0] && d2[1] == dst[1] && x2[0] == 5 && x2[1] == 6);
    /* Block j to destination j; from source i (r - 1 - i) its block i. */
    int send[2] = {rank * 10, rank * 10 + 1}, recv[2] = {-1, -1};
    OK(MPI_Neighbor_alltoall(send, 1, MPI_INT, recv, 1, MPI_INT, d));
    CHECK(recv[0] == src[0] * 10 + 0 && recv[1] == src[1] * 10 + 1);
    /* Ineighbor_allgatherv: source 0's two ints land at 2, source 1's at 0. */
    int mine[2] = {rank, -rank}, got[4] = {-9, -9, -9, -9}, rc[2] = {2, 2}, rd[2] = {2, 0};
    MPI_Request rq;
    OK(MPI_Ineighbor_allgatherv(mine, 2, MPI_INT, got, rc, rd, MPI_INT, d, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(got[2] == src[0] && got[3] == -src[0] && got[0] == src[1] && got[1] == -src[1]);
    OK(MPI_Comm_free(&d));
}

/* MPI_Dist_graph_create: rank 0 names every edge of a ring r -> r + 1,
 * weighted; each rank learns its own in- and out-edges. */
static void dist_general(int rank, int size) {
    int srcs[4], degs[4], dsts[4], wts[4], n = rank == 0 ? size : 0;
    for (int r = 0; r < size; r++) srcs[r] = r, degs[r] = 1, dsts[r] = mod(r + 1, size),
                                    wts[r] = 10 + r;
    MPI_Comm d;
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, n, srcs, degs, dsts, wts, MPI_INFO_NULL, 0, &d));
    int in, out, weighted, s, sw, t, tw;
    OK(MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted));
    CHECK(in == 1 && out == 1 && weighted);
    OK(MPI_Dist_graph_neighbors(d, 1, &s, &sw, 1, &t, &tw));
    CHECK(s == mod(rank - 1, size) && sw == 10 + s);
    CHECK(t == mod(rank + 1, size) && tw == 10 + rank);
    int me = rank * 3, from = -1;
    OK(MPI_Neighbor_allgather(&me, 1, MPI_INT, &from, 1, MPI_INT, d));
    CHECK(from == s * 3);
    OK(MPI_Comm_free(&d));
    /* Unweighted, every rank naming its own out-edge. */
    int one = 1, next = mod(rank + 1, size);
    OK(MPI_Dist_graph_create(MPI_COMM_WORLD, 1, &rank, &one, &next, MPI_UNWEIGHTED,
                             MPI_INFO_NULL, 0, &d));
    OK(MPI_Dist_graph_neighbors_count(d, &in, &out, &weighted));
    CHECK(in == 1 && out == 1 && !weighted);
    OK(MPI_Comm_free(&d));
}

/* The v form with uneven blocks, non-blocking. */
static void uneven(int rank, int size) {
    int src[2] = {mod(rank - 1, size), mod(rank + 1, size)};
    int dst[2] = {mod(rank + 1, size), mod(rank - 1, size)};
    MPI_Comm d;
    OK(MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 2, src, MPI_UNWEIGHTED, 2, dst,
                                      MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d));
    /* To destination 0 (r + 1) one int, to destination 1 (r - 1) three. */
    int s[4] = {rank, rank + 1, rank + 2, rank + 3}, sc[2] = {1, 3}, sd[2] = {0, 1};
    int r[5] = {-1, -1, -1, -1, -1}, rc[2] = {1, 3}, rdp[2] = {4, 0};
    MPI_Request rq;
    OK(MPI_Ineighbor_alltoallv(s, sc, sd, MPI_INT, r, rc, rdp, MPI_INT, d, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    int left = src[0], right = src[1];
    /* From r - 1 (its destination 0): one int at 4; from r + 1 (its
     * destination 1): three ints at 0. */
    CHECK(r[4] == left);
    CHECK(r[0] == right + 1 && r[1] == right + 2 && r[2] == right + 3 && r[3] == -1);
    OK(MPI_Comm_free(&d));
}

static void errors(void) {
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int x = 0, y[2], cls, t;
    int rc = MPI_Neighbor_allgather(&x, 1, MPI_INT, y, 1, MPI_INT, MPI_COMM_WORLD);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_TOPOLOGY);
    OK(MPI_Topo_test(MPI_COMM_WORLD, &t));
    CHECK(t == MPI_UNDEFINED);
    int bad = 99;
    MPI_Comm d;
    rc = MPI_Dist_graph_create_adjacent(MPI_COMM_WORLD, 1, &bad, MPI_UNWEIGHTED, 0, NULL,
                                        MPI_UNWEIGHTED, MPI_INFO_NULL, 0, &d);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= 4);
    ring_cart(rank, size);
    grid_cart(rank, size);
    graph(rank, size);
    dist_adjacent(rank, size);
    dist_general(rank, size);
    uneven(rank, size);
    errors();
    report_ok("neighbor");
    MPI_Finalize();
    return 0;
}
