/* A call that needs the library before MPI_Init: errors are fatal before
 * init, and the message says MPI is not initialized (not that the
 * communicator handle is invalid). */
#include <mpi.h>
#include <stdio.h>

int main(void) {
    int rank = -1, flag = 1;
    MPI_Initialized(&flag); /* allowed before init */
    if (flag)
        return 4;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    printf("UNREACHABLE\n");
    return 0;
}
