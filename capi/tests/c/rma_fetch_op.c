/* MPI_Fetch_and_op in a passive-target epoch with every kind of op the
 * one-element path takes (osc sm has a path of its own for it): each rank
 * works on its own slots at the next rank, under lock_all.
 *   MPI_SUM, MPI_MIN on int; MPI_SUM on double; MPI_REPLACE (a swap);
 *   MPI_NO_OP with a NULL origin (a read); MPI_PROC_NULL (nothing, the
 *   result untouched); MPI_BAND on double (MPI_ERR_OP, nothing changed);
 *   a target element past the window (MPI_ERR_RMA_RANGE). */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    /* Per origin r at each target: ints[2r], ints[2r+1], then doubles. */
    int *ints;
    MPI_Win wi, wd;
    OK(MPI_Win_allocate(2 * size * sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &ints,
                        &wi));
    double *dbl;
    OK(MPI_Win_allocate(size * sizeof(double), sizeof(double), MPI_INFO_NULL, MPI_COMM_WORLD, &dbl,
                        &wd));
    OK(MPI_Win_set_errhandler(wi, MPI_ERRORS_RETURN));
    OK(MPI_Win_set_errhandler(wd, MPI_ERRORS_RETURN));
    for (int i = 0; i < 2 * size; i++) ints[i] = 100;
    for (int i = 0; i < size; i++) dbl[i] = 0.5;
    MPI_Barrier(MPI_COMM_WORLD);

    int peer = (rank + 1) % size, a = 2 * rank, b = 2 * rank + 1;
    OK(MPI_Win_lock_all(0, wi));
    OK(MPI_Win_lock_all(0, wd));
    int v, old = -1;
    for (int i = 1; i <= 10; i++) {
        v = i;
        OK(MPI_Fetch_and_op(&v, &old, MPI_INT, peer, a, MPI_SUM, wi));
        OK(MPI_Win_flush(peer, wi));
        CHECK(old == 100 + i * (i - 1) / 2);
    }
    v = 7;
    OK(MPI_Fetch_and_op(&v, &old, MPI_INT, peer, b, MPI_MIN, wi));
    OK(MPI_Win_flush(peer, wi));
    CHECK(old == 100);
    v = 42;
    OK(MPI_Fetch_and_op(&v, &old, MPI_INT, peer, b, MPI_REPLACE, wi));
    OK(MPI_Win_flush(peer, wi));
    CHECK(old == 7);
    old = -1;
    OK(MPI_Fetch_and_op(NULL, &old, MPI_INT, peer, b, MPI_NO_OP, wi));
    OK(MPI_Win_flush(peer, wi));
    CHECK(old == 42);
    old = -5;
    OK(MPI_Fetch_and_op(&v, &old, MPI_INT, MPI_PROC_NULL, b, MPI_SUM, wi));
    OK(MPI_Win_flush(peer, wi));
    CHECK(old == -5);
    int cls = -1;
    MPI_Error_class(MPI_Fetch_and_op(&v, &old, MPI_INT, peer, 2 * size, MPI_SUM, wi), &cls);
    CHECK(cls == MPI_ERR_RMA_RANGE);

    double d = 0.25, dold = -1;
    OK(MPI_Fetch_and_op(&d, &dold, MPI_DOUBLE, peer, rank, MPI_SUM, wd));
    OK(MPI_Win_flush(peer, wd));
    CHECK(dold == 0.5);
    cls = -1;
    MPI_Error_class(MPI_Fetch_and_op(&d, &dold, MPI_DOUBLE, peer, rank, MPI_BAND, wd), &cls);
    CHECK(cls == MPI_ERR_OP);
    OK(MPI_Fetch_and_op(NULL, &dold, MPI_DOUBLE, peer, rank, MPI_NO_OP, wd));
    OK(MPI_Win_flush(peer, wd));
    CHECK(dold == 0.75);
    OK(MPI_Win_unlock_all(wd));
    OK(MPI_Win_unlock_all(wi));

    MPI_Barrier(MPI_COMM_WORLD);
    int from = (rank + size - 1) % size;
    CHECK(ints[2 * from] == 100 + 55 && ints[2 * from + 1] == 42);
    CHECK(dbl[from] == 0.75);
    OK(MPI_Win_free(&wd));
    OK(MPI_Win_free(&wi));
    report_ok("rma_fetch_op");
    MPI_Finalize();
    return 0;
}
