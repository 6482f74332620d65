/* MPI_Session_init before MPI_Init (the runtime started by the session
 * serves MPI_Init), the session finalized before MPI_Finalize (the world
 * model keeps running). */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Session s;
    MPI_Group g;
    MPI_Comm comm;
    int rank, size, flag, sum = 0, sum2 = 0, provided;
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    OK(MPI_Initialized(&flag));
    CHECK(!flag);
    OK(MPI_Init_thread(&argc, &argv, MPI_THREAD_SINGLE, &provided));
    OK(MPI_Initialized(&flag));
    CHECK(flag);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "org.tmpi.test.first", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                  &comm));
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK(sum == size * (size - 1) / 2);
    OK(MPI_Comm_free(&comm));
    OK(MPI_Group_free(&g));
    OK(MPI_Session_finalize(&s));
    OK(MPI_Finalized(&flag));
    CHECK(!flag);
    OK(MPI_Allreduce(&rank, &sum2, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum2 == sum);
    report_ok("sessions_then_init");
    OK(MPI_Finalize());
    return 0;
}
