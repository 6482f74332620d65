/* MPI_ERRORS_ABORT (MPI-4.0) on a communicator: a bad rank ends the job.
 * Expected to fail. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, x = 1;
    MPI_Comm dup;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_dup(MPI_COMM_WORLD, &dup);
    MPI_Comm_set_errhandler(dup, MPI_ERRORS_ABORT);
    if (rank == size - 1) MPI_Send(&x, 1, MPI_INT, size + 5, 0, dup);
    MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 0, dup, MPI_STATUS_IGNORE);
    printf("errors_abort: UNREACHABLE\n");
    MPI_Finalize();
    return 0;
}
