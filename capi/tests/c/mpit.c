/* MPI_T: control variables are the MCA parameters; performance variables
 * are the pml's counters. 2+ ranks. */
#include "check.h"

int main(int argc, char **argv) {
    int provided, rank, size, n, i, idx;
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_T_cvar_get_num(&n));
    CHECK(n > 5);
    OK(MPI_T_cvar_get_index("mpi_param_check", &idx));
    char name[256], desc[1024];
    int nl = sizeof name, dl = sizeof desc, verb, bind, scope;
    MPI_Datatype dt;
    MPI_T_enum en;
    OK(MPI_T_cvar_get_info(idx, name, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope));
    CHECK(strcmp(name, "mpi_param_check") == 0 && dt == MPI_INT && dl > 1);
    MPI_T_cvar_handle h;
    int count, val = -1;
    OK(MPI_T_cvar_handle_alloc(idx, NULL, &h, &count));
    CHECK(count == 1);
    OK(MPI_T_cvar_read(h, &val));
    CHECK(val == 1);
    CHECK(MPI_T_cvar_write(h, &val) == MPI_T_ERR_CVAR_SET_NEVER);
    OK(MPI_T_cvar_handle_free(&h));
    CHECK(MPI_T_cvar_get_index("no_such_parameter", &idx) == MPI_T_ERR_INVALID_NAME);

    OK(MPI_T_pvar_get_num(&n));
    CHECK(n >= 7);
    OK(MPI_T_pvar_get_index("pml_eager_sent", MPI_T_PVAR_CLASS_COUNTER, &idx));
    MPI_T_pvar_session s;
    MPI_T_pvar_handle ph;
    unsigned long long before, after;
    OK(MPI_T_pvar_session_create(&s));
    OK(MPI_T_pvar_handle_alloc(s, idx, NULL, &ph, &count));
    OK(MPI_T_pvar_read(s, ph, &before));
    int x = 1;
    for (i = 0; i < 10; i++) {
        if (rank == 0) OK(MPI_Send(&x, 1, MPI_INT, 1 % size, 0, MPI_COMM_WORLD));
        if (rank == 1 % size) OK(MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    OK(MPI_T_pvar_read(s, ph, &after));
    if (rank == 0) CHECK(after >= before + 10);
    OK(MPI_T_pvar_handle_free(s, &ph));
    OK(MPI_T_pvar_session_free(&s));
    report_ok("mpit");
    OK(MPI_Finalize());
    OK(MPI_T_finalize());
    return 0;
}
