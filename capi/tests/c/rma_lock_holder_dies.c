/* A rank that dies holding an exclusive lock on an MPI_Win_allocate window
 * (the sm component's: the lock is a word in shared memory nobody will
 * release) does not hang the job: the others wait for the lock, and the
 * launcher ends the job because a rank exited without MPI_Finalize. */
#include <unistd.h>

#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2);
    int *mem;
    MPI_Win win;
    OK(MPI_Win_allocate(sizeof(int), sizeof(int), MPI_INFO_NULL, MPI_COMM_WORLD, &mem, &win));
    if (rank == 1) OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 1) {
        printf("rank 1 dies holding the lock\n");
        fflush(stdout);
        _exit(3);
    }
    /* Never granted: the job ends here. */
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, 0, 0, win));
    printf("UNREACHABLE: lock granted\n");
    MPI_Finalize();
    return 0;
}
