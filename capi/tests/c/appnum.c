/* MPI_APPNUM: the program's index in an MPMD job (tmpirun a : b). */
#include <mpi.h>
#include <stdio.h>
int main(int argc, char **argv) {
    int rank, size, flag = 0, *app = NULL;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_APPNUM, &app, &flag);
    printf("appnum: rank %d of %d app %d flag %d\n", rank, size, flag ? *app : -1, flag);
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return 0;
}
