/* A session beside the world model: MPI_Init first, a session's
 * communicator over mpi://WORLD congruent with MPI_COMM_WORLD, MPI_Finalize
 * while the session is open (its communicator still works), then
 * MPI_Session_finalize. */
#include "check.h"

int main(int argc, char **argv) {
    MPI_Session s;
    MPI_Group g;
    MPI_Comm comm;
    int rank, size, res, flag, sum = 0, sum2 = 0;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    OK(MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &s));
    OK(MPI_Group_from_session_pset(s, "mpi://WORLD", &g));
    OK(MPI_Comm_create_from_group(g, "org.tmpi.test.beside", MPI_INFO_NULL, MPI_ERRORS_RETURN,
                                  &comm));
    OK(MPI_Comm_compare(comm, MPI_COMM_WORLD, &res));
    CHECK(res == MPI_CONGRUENT);
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, comm));
    CHECK(sum == size * (size - 1) / 2);
    report_ok("sessions_world");
    OK(MPI_Finalize());
    OK(MPI_Finalized(&flag));
    CHECK(flag);
    /* The session and its communicator outlive the world model. */
    OK(MPI_Allreduce(&rank, &sum2, 1, MPI_INT, MPI_SUM, comm));
    CHECK(sum2 == sum);
    OK(MPI_Comm_free(&comm));
    OK(MPI_Group_free(&g));
    OK(MPI_Session_finalize(&s));
    return 0;
}
