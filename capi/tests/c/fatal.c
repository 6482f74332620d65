/* MPI_ERRORS_ARE_FATAL (the default): a bad rank ends the job with a
 * message naming the call and the error class. Expected to fail. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, x = 1;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (rank == size - 1) MPI_Send(&x, 1, MPI_INT, size + 5, 0, MPI_COMM_WORLD);
    /* The other ranks wait in a receive that never completes: the job must
     * still end (the launcher kills them). */
    MPI_Recv(&x, 1, MPI_INT, MPI_ANY_SOURCE, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("fatal: UNREACHABLE\n");
    MPI_Finalize();
    return 0;
}
