/* MPI_Comm_free runs the attributes' delete callbacks while the
 * communicator is still valid: a callback may query it (MPI-4.0 7.7.2),
 * and a failing one fails MPI_Comm_free. Ranks 1-3. */
#include "check.h"

static int seen_size = -1, seen_rank = -1, calls = 0;

static int query_on_delete(MPI_Comm comm, int keyval, void *val, void *extra) {
    (void)keyval, (void)val, (void)extra;
    calls++;
    if (MPI_Comm_size(comm, &seen_size) != MPI_SUCCESS) return MPI_ERR_OTHER;
    if (MPI_Comm_rank(comm, &seen_rank) != MPI_SUCCESS) return MPI_ERR_OTHER;
    return MPI_SUCCESS;
}

static int fail_on_delete(MPI_Comm comm, int keyval, void *val, void *extra) {
    (void)comm, (void)keyval, (void)val, (void)extra;
    return MPI_ERR_OTHER;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int kq, kf;
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, query_on_delete, &kq, NULL));
    OK(MPI_Comm_create_keyval(MPI_COMM_NULL_COPY_FN, fail_on_delete, &kf, NULL));

    MPI_Comm dup;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    OK(MPI_Comm_set_attr(dup, kq, &kq));
    OK(MPI_Comm_free(&dup));
    CHECK(dup == MPI_COMM_NULL);
    CHECK(calls == 1 && seen_size == size && seen_rank == rank);

    /* A failing callback fails the call; the communicator stays usable. */
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_RETURN);
    OK(MPI_Comm_set_attr(dup, kf, &kf));
    CHECK(MPI_Comm_free(&dup) != MPI_SUCCESS);
    CHECK(dup != MPI_COMM_NULL);
    int s;
    OK(MPI_Comm_size(dup, &s));
    CHECK(s == size);
    OK(MPI_Barrier(dup));
    CHECK(MPI_Comm_delete_attr(dup, kf) != MPI_SUCCESS);

    OK(MPI_Comm_free_keyval(&kq));
    OK(MPI_Comm_free_keyval(&kf));
    report_ok("comm_free_attr");
    MPI_Finalize();
    return 0;
}
