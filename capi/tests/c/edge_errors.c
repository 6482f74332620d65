/* Edge cases mpi4py's suite checks: MPI_Comm_get_attr with
 * MPI_KEYVAL_INVALID and MPI_Errhandler_free(MPI_ERRHANDLER_NULL) are
 * errors; a generalized request whose query callback fails makes
 * MPI_Wait fail with its error and leaves MPI_REQUEST_NULL; a cancel
 * callback may call MPI;
 * MPI_Op_commutative answers for MPI_REPLACE and MPI_NO_OP;
 * MPI_Comm_split_type splits an inter-communicator. Ranks 1-4. */
#include "check.h"

static int query_fails(void *extra, MPI_Status *st) {
    (void)extra, (void)st;
    return MPI_ERR_BUFFER;
}
static int free_ok(void *extra) {
    ++*(int *)extra;
    return MPI_SUCCESS;
}
static int cancel_ok(void *extra, int complete) {
    (void)extra, (void)complete;
    return MPI_SUCCESS;
}
/* A cancel callback that calls MPI (mpi4py's reports an exception through
 * MPI_Error_string) and fails. */
static int cancel_calls_mpi(void *extra, int complete) {
    (void)complete;
    char s[MPI_MAX_ERROR_STRING];
    int len, r;
    if (MPI_Error_string(MPI_ERR_PENDING, s, &len) != MPI_SUCCESS) return MPI_ERR_OTHER;
    if (MPI_Comm_rank(MPI_COMM_WORLD, &r) != MPI_SUCCESS) return MPI_ERR_OTHER;
    ++*(int *)extra;
    return MPI_ERR_PENDING;
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, cls;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);

    void *v;
    int flag = -1;
    int rc = MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_KEYVAL_INVALID, &v, &flag);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_KEYVAL);

    MPI_Errhandler eh = MPI_ERRHANDLER_NULL;
    rc = MPI_Errhandler_free(&eh);
    CHECK(rc != MPI_SUCCESS);

    int freed = 0;
    MPI_Request g;
    OK(MPI_Grequest_start(query_fails, free_ok, cancel_ok, &freed, &g));
    OK(MPI_Grequest_complete(g));
    rc = MPI_Wait(&g, MPI_STATUS_IGNORE);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_BUFFER);
    CHECK(g == MPI_REQUEST_NULL);
    CHECK(freed == 1);

    /* MPI_Cancel runs the cancel callback, which may call MPI; its error is
     * the call's. */
    freed = 0;
    OK(MPI_Grequest_start(NULL, free_ok, cancel_calls_mpi, &freed, &g));
    rc = MPI_Cancel(&g);
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_PENDING && freed == 1);
    OK(MPI_Grequest_complete(g));
    OK(MPI_Wait(&g, MPI_STATUS_IGNORE));
    CHECK(g == MPI_REQUEST_NULL && freed == 2);

    int commute = -1;
    OK(MPI_Op_commutative(MPI_REPLACE, &commute));
    CHECK(commute == 0);
    OK(MPI_Op_commutative(MPI_NO_OP, &commute));
    CHECK(commute == 0);
    OK(MPI_Op_commutative(MPI_SUM, &commute));
    CHECK(commute == 1);

    if (size >= 2) {
        /* Even ranks against odd ranks. */
        MPI_Comm half, inter, shared, none;
        OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
        OK(MPI_Intercomm_create(half, 0, MPI_COMM_WORLD, 1 - rank % 2, 7, &inter));
        MPI_Comm_set_errhandler(inter, MPI_ERRORS_RETURN);
        OK(MPI_Comm_split_type(inter, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &shared));
        /* One node: the same two groups. */
        CHECK(shared != MPI_COMM_NULL);
        int inter_flag, ls, rs, hs;
        OK(MPI_Comm_test_inter(shared, &inter_flag));
        CHECK(inter_flag);
        OK(MPI_Comm_size(shared, &ls));
        OK(MPI_Comm_remote_size(shared, &rs));
        OK(MPI_Comm_size(half, &hs));
        CHECK(ls == hs && ls + rs == size);
        OK(MPI_Barrier(shared));
        OK(MPI_Comm_free(&shared));
        OK(MPI_Comm_split_type(inter, MPI_UNDEFINED, 0, MPI_INFO_NULL, &none));
        CHECK(none == MPI_COMM_NULL);
        OK(MPI_Comm_free(&inter));
        OK(MPI_Comm_free(&half));
    }
    report_ok("edge_errors");
    MPI_Finalize();
    return 0;
}
