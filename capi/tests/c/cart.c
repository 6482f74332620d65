/* Cartesian topology helpers. Runs with any number of ranks. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, i;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int d2[2] = {0, 0};
    OK(MPI_Dims_create(12, 2, d2)); CHECK(d2[0] == 4 && d2[1] == 3);
    /* The most balanced, not the greedy 12 x 6 (MPICH's dims5). */
    d2[0] = d2[1] = 0;
    OK(MPI_Dims_create(72, 2, d2)); CHECK(d2[0] == 9 && d2[1] == 8);
    /* Graph_map: identity for ranks below nnodes (MPICH's graphmap1). */
    int gidx[1] = {0}, gedges[1] = {0}, grank;
    OK(MPI_Graph_map(MPI_COMM_WORLD, 1, gidx, gedges, &grank));
    CHECK(grank == (rank == 0 ? 0 : MPI_UNDEFINED));
    int d3[3] = {0, 0, 0};
    OK(MPI_Dims_create(size, 3, d3)); CHECK(d3[0] * d3[1] * d3[2] == size && d3[0] >= d3[1] && d3[1] >= d3[2]);
    int dims[2] = {0, 0}, periods[2] = {1, 0};
    OK(MPI_Dims_create(size, 2, dims));
    MPI_Comm cart;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 2, dims, periods, 0, &cart));
    int st, nd;
    OK(MPI_Topo_test(cart, &st)); CHECK(st == MPI_CART);
    OK(MPI_Topo_test(MPI_COMM_WORLD, &st)); CHECK(st == MPI_UNDEFINED);
    OK(MPI_Cartdim_get(cart, &nd)); CHECK(nd == 2);
    int cr, coords[2], gd[2], gp[2], gc[2];
    OK(MPI_Comm_rank(cart, &cr));
    OK(MPI_Cart_coords(cart, cr, 2, coords));
    CHECK(coords[0] == cr / dims[1] && coords[1] == cr % dims[1]);
    OK(MPI_Cart_get(cart, 2, gd, gp, gc));
    CHECK(gd[0] == dims[0] && gp[0] == 1 && gp[1] == 0 && gc[0] == coords[0] && gc[1] == coords[1]);
    int back;
    OK(MPI_Cart_rank(cart, coords, &back)); CHECK(back == cr);
    int src, dst;
    OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    CHECK(dst == ((coords[0] + 1) % dims[0]) * dims[1] + coords[1]);
    CHECK(src == ((coords[0] - 1 + dims[0]) % dims[0]) * dims[1] + coords[1]);
    OK(MPI_Cart_shift(cart, 1, 1, &src, &dst));
    CHECK(dst == (coords[1] + 1 < dims[1] ? cr + 1 : MPI_PROC_NULL));
    CHECK(src == (coords[1] > 0 ? cr - 1 : MPI_PROC_NULL));
    /* Halo exchange along dimension 0 (periodic). */
    int tok = cr, got = -1;
    OK(MPI_Cart_shift(cart, 0, 1, &src, &dst));
    OK(MPI_Sendrecv(&tok, 1, MPI_INT, dst, 0, &got, 1, MPI_INT, src, 0, cart, MPI_STATUS_IGNORE));
    CHECK(got == src);
    /* Rows: keep dimension 1. */
    int remain[2] = {0, 1};
    MPI_Comm row;
    OK(MPI_Cart_sub(cart, remain, &row));
    int rs, rr;
    OK(MPI_Comm_size(row, &rs)); OK(MPI_Comm_rank(row, &rr));
    CHECK(rs == dims[1] && rr == coords[1]);
    int sum = 0;
    OK(MPI_Allreduce(&cr, &sum, 1, MPI_INT, MPI_SUM, row));
    int expect = 0;
    for (i = 0; i < dims[1]; i++) expect += coords[0] * dims[1] + i;
    CHECK(sum == expect);
    OK(MPI_Comm_free(&row));
    OK(MPI_Comm_free(&cart));
    report_ok("cart");
    OK(MPI_Finalize());
    return 0;
}
