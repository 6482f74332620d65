/* MPI_Abort from one rank ends the whole job with a non-zero status. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, x;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    if (rank == 0) MPI_Abort(MPI_COMM_WORLD, 7);
    MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    printf("abort: UNREACHABLE\n");
    MPI_Finalize();
    return 0;
}
