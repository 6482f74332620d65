/* NULL and MPI_BOTTOM buffers in the v/w collectives (mpi4py passes NULL
 * for empty buffers and MPI_BOTTOM with absolute-address datatypes):
 * MPI_Alltoallv, MPI_Alltoallw, MPI_Reduce_scatter and
 * MPI_Neighbor_alltoallw, blocking and not, with every count zero, and
 * the w forms moving data described by absolute addresses. Ranks 1-4. */
#include "check.h"

#define MAXP 8

/* A type describing one int at the absolute address of *p. */
static MPI_Datatype at_address(int *p) {
    MPI_Aint a;
    OK(MPI_Get_address(p, &a));
    int one = 1;
    MPI_Datatype in = MPI_INT, t;
    OK(MPI_Type_create_struct(1, &one, &a, &in, &t));
    OK(MPI_Type_commit(&t));
    return t;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size <= MAXP);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int zeros[MAXP] = {0}, ones[MAXP];
    MPI_Aint azeros[MAXP] = {0};
    MPI_Datatype ints[MAXP];
    for (int i = 0; i < MAXP; i++) ones[i] = 1, ints[i] = MPI_INT;
    MPI_Request rq;

    /* Every count zero, both buffers NULL. */
    OK(MPI_Alltoallv(NULL, zeros, zeros, MPI_INT, NULL, zeros, zeros, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Ialltoallv(NULL, zeros, zeros, MPI_INT, NULL, zeros, zeros, MPI_INT, MPI_COMM_WORLD,
                      &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    OK(MPI_Alltoallw(NULL, zeros, zeros, ints, NULL, zeros, zeros, ints, MPI_COMM_WORLD));
    OK(MPI_Ialltoallw(NULL, zeros, zeros, ints, NULL, zeros, zeros, ints, MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    OK(MPI_Reduce_scatter(NULL, NULL, zeros, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    OK(MPI_Ireduce_scatter(NULL, NULL, zeros, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));

    /* Every count zero, one address for both buffers (mpi4py's empty
     * buffers): nothing is aliased. */
    static char empty[1];
    OK(MPI_Alltoallv(empty, zeros, zeros, MPI_INT, empty, zeros, zeros, MPI_INT, MPI_COMM_WORLD));
    OK(MPI_Ialltoallv(empty, zeros, zeros, MPI_INT, empty, zeros, zeros, MPI_INT,
                      MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    OK(MPI_Alltoallw(empty, zeros, zeros, ints, empty, zeros, zeros, ints, MPI_COMM_WORLD));
    OK(MPI_Reduce_scatter(empty, empty, zeros, MPI_INT, MPI_SUM, MPI_COMM_WORLD));

    /* Alltoallw from and to MPI_BOTTOM: block i described by a type at
     * the absolute address of sbuf[i] (rbuf[i]), displacements 0. */
    int sbuf[MAXP], rbuf[MAXP];
    MPI_Datatype st[MAXP], rt[MAXP];
    for (int i = 0; i < size; i++) {
        sbuf[i] = rank * 100 + i;
        rbuf[i] = -1;
        st[i] = at_address(&sbuf[i]);
        rt[i] = at_address(&rbuf[i]);
    }
    OK(MPI_Alltoallw(MPI_BOTTOM, ones, zeros, st, MPI_BOTTOM, ones, zeros, rt, MPI_COMM_WORLD));
    for (int i = 0; i < size; i++) CHECK(rbuf[i] == i * 100 + rank);
    for (int i = 0; i < size; i++) rbuf[i] = -1;
    OK(MPI_Ialltoallw(MPI_BOTTOM, ones, zeros, st, MPI_BOTTOM, ones, zeros, rt, MPI_COMM_WORLD,
                      &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    for (int i = 0; i < size; i++) CHECK(rbuf[i] == i * 100 + rank);

    /* Neighbourhood: a periodic ring, two neighbours. */
    int dims[1] = {size}, periods[1] = {1};
    MPI_Comm ring;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
    OK(MPI_Neighbor_alltoallw(NULL, zeros, azeros, ints, NULL, zeros, azeros, ints, ring));
    OK(MPI_Ineighbor_alltoallw(NULL, zeros, azeros, ints, NULL, zeros, azeros, ints, ring, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    OK(MPI_Neighbor_alltoallv(NULL, zeros, zeros, MPI_INT, NULL, zeros, zeros, MPI_INT, ring));
    int left = ((rank - 1) % size + size) % size, right = (rank + 1) % size;
    for (int j = 0; j < 2; j++) {
        sbuf[j] = rank * 10 + j;
        rbuf[j] = -1;
    }
    MPI_Datatype st2[2] = {at_address(&sbuf[0]), at_address(&sbuf[1])};
    MPI_Datatype rt2[2] = {at_address(&rbuf[0]), at_address(&rbuf[1])};
    OK(MPI_Neighbor_alltoallw(MPI_BOTTOM, ones, azeros, st2, MPI_BOTTOM, ones, azeros, rt2, ring));
    CHECK(rbuf[0] == left * 10 + 1);
    CHECK(rbuf[1] == right * 10 + 0);
    for (int j = 0; j < 2; j++) {
        MPI_Type_free(&st2[j]);
        MPI_Type_free(&rt2[j]);
    }
    /* MPI_BOTTOM with MPI_INT and the absolute addresses as displacements. */
    MPI_Aint sa[2], ra[2];
    for (int j = 0; j < 2; j++) {
        sbuf[j] = rank * 10 + j + 3;
        rbuf[j] = -1;
        OK(MPI_Get_address(&sbuf[j], &sa[j]));
        OK(MPI_Get_address(&rbuf[j], &ra[j]));
    }
    OK(MPI_Neighbor_alltoallw(MPI_BOTTOM, ones, sa, ints, MPI_BOTTOM, ones, ra, ints, ring));
    CHECK(rbuf[0] == left * 10 + 1 + 3);
    CHECK(rbuf[1] == right * 10 + 0 + 3);
    for (int j = 0; j < 2; j++) sbuf[j] += 100, rbuf[j] = -1;
    OK(MPI_Ineighbor_alltoallw(MPI_BOTTOM, ones, sa, ints, MPI_BOTTOM, ones, ra, ints, ring, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(rbuf[0] == left * 10 + 1 + 103);
    CHECK(rbuf[1] == right * 10 + 0 + 103);
    OK(MPI_Comm_free(&ring));

    for (int i = 0; i < size; i++) {
        MPI_Type_free(&st[i]);
        MPI_Type_free(&rt[i]);
    }
    report_ok("null_buffers");
    MPI_Finalize();
    return 0;
}
