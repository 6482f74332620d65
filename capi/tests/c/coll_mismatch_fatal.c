/* MPI_ERRORS_ARE_FATAL (the default) and bcast counts that put the root
 * and the others on different rings of sm's segment: the job ends with a
 * message naming the call and the error, instead of waiting forever.
 * Expected to fail. */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank;
    char buf[64] = {0};
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Bcast(buf, rank == 0 ? 8 : 32, MPI_BYTE, 0, MPI_COMM_WORLD);
    MPI_Barrier(MPI_COMM_WORLD);
    printf("coll_mismatch_fatal: UNREACHABLE\n");
    MPI_Finalize();
    return 0;
}
