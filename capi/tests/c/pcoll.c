/* Persistent collectives (MPI-4.0 6.13): each init'd request started
 * several times with new data in its buffers, checked against values
 * computed here; MPI_Startall over several; starts in different orders
 * on different ranks, matched by init order; a datatype freed after init;
 * an inactive request's wait returns at once; MPI_Request_free. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int bval[3], sum_in, sum_out, *a2a_out = malloc(size * sizeof(int)),
        *a2a_in = malloc(size * sizeof(int)), *gath = malloc(2 * size * sizeof(int));
    MPI_Request bc, ar, a2a, ga, bar;
    OK(MPI_Bcast_init(bval, 3, MPI_INT, size - 1, MPI_COMM_WORLD, MPI_INFO_NULL, &bc));
    OK(MPI_Allreduce_init(&sum_in, &sum_out, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL, &ar));
    OK(MPI_Alltoall_init(a2a_out, 1, MPI_INT, a2a_in, 1, MPI_INT, MPI_COMM_WORLD, MPI_INFO_NULL, &a2a));
    /* A contiguous pair type, freed right after init: the request holds it. */
    MPI_Datatype pair;
    OK(MPI_Type_contiguous(2, MPI_INT, &pair));
    OK(MPI_Type_commit(&pair));
    int mine[2];
    OK(MPI_Gather_init(mine, 1, pair, gath, 1, pair, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &ga));
    OK(MPI_Type_free(&pair));
    OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &bar));

    /* Inactive: a wait returns at once with an empty status. */
    MPI_Status st;
    OK(MPI_Wait(&ar, &st));
    CHECK(ar != MPI_REQUEST_NULL);

    for (int it = 0; it < 5; it++) {
        if (rank == size - 1)
            for (int k = 0; k < 3; k++) bval[k] = 100 * it + k;
        else
            bval[0] = bval[1] = bval[2] = -1;
        OK(MPI_Start(&bc));
        OK(MPI_Wait(&bc, MPI_STATUS_IGNORE));
        CHECK(bc != MPI_REQUEST_NULL);
        for (int k = 0; k < 3; k++) CHECK(bval[k] == 100 * it + k);

        sum_in = rank + it;
        for (int i = 0; i < size; i++) a2a_out[i] = 1000 * it + 10 * rank + i;
        mine[0] = rank * it;
        mine[1] = -rank;
        MPI_Request all[4] = {ar, a2a, ga, bar};
        OK(MPI_Startall(4, all));
        OK(MPI_Waitall(4, all, MPI_STATUSES_IGNORE));
        CHECK(all[0] == ar && all[1] == a2a && all[2] == ga && all[3] == bar);
        CHECK(sum_out == size * (size - 1) / 2 + size * it);
        for (int i = 0; i < size; i++) CHECK(a2a_in[i] == 1000 * it + 10 * i + rank);
        if (rank == 0)
            for (int i = 0; i < size; i++) CHECK(gath[2 * i] == i * it && gath[2 * i + 1] == -i);
    }
    /* Starts match by the order of the inits, not of the starts (MPICH's
     * p_order): rank 0 starts the bcast first, the others the barrier. */
    int a = -1;
    MPI_Request ord[2];
    OK(MPI_Bcast_init(&a, 1, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &ord[0]));
    OK(MPI_Barrier_init(MPI_COMM_WORLD, MPI_INFO_NULL, &ord[1]));
    for (int it = 0; it < 3; it++) {
        if (rank == 0) {
            a = 42 + it;
            OK(MPI_Start(&ord[0]));
            OK(MPI_Start(&ord[1]));
        } else {
            OK(MPI_Start(&ord[1]));
            OK(MPI_Start(&ord[0]));
        }
        OK(MPI_Waitall(2, ord, MPI_STATUSES_IGNORE));
        CHECK(a == 42 + it);
    }
    OK(MPI_Request_free(&ord[0]));
    OK(MPI_Request_free(&ord[1]));

    /* Starting an active request is an error. */
    OK(MPI_Start(&bar));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    int cls;
    MPI_Error_class(MPI_Start(&bar), &cls);
    CHECK(cls == MPI_ERR_REQUEST);
    OK(MPI_Wait(&bar, MPI_STATUS_IGNORE));

    OK(MPI_Request_free(&bc));
    OK(MPI_Request_free(&ar));
    OK(MPI_Request_free(&a2a));
    OK(MPI_Request_free(&ga));
    OK(MPI_Request_free(&bar));
    CHECK(bc == MPI_REQUEST_NULL && bar == MPI_REQUEST_NULL);
    free(a2a_out);
    free(a2a_in);
    free(gath);
    report_ok("pcoll");
    MPI_Finalize();
    return 0;
}
