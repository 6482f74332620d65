/* Generalized active target (post/start/complete/wait, MPI_Win_test):
 * even ranks expose their window to the odd ranks, which put into it and
 * accumulate; checked after the exposure epoch ends. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    CHECK(size >= 2);

    int *mem;
    MPI_Win win;
    OK(MPI_Win_allocate((MPI_Aint)(size + 1) * sizeof(int), sizeof(int), MPI_INFO_NULL,
                        MPI_COMM_WORLD, &mem, &win));
    for (int i = 0; i <= size; i++) mem[i] = 0;
    MPI_Barrier(MPI_COMM_WORLD);

    MPI_Group world, peers;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    /* Even ranks' peers: the odd ranks; odd ranks': the even ranks. */
    int *pr = malloc(sizeof(int) * size), np = 0;
    for (int r = 0; r < size; r++)
        if (r % 2 != rank % 2) pr[np++] = r;
    MPI_Group_incl(world, np, pr, &peers);

    for (int round = 1; round <= 3; round++) {
        if (rank % 2 == 0) {
            OK(MPI_Win_post(peers, 0, win));
            if (round == 2) {
                int flag = 0;
                while (!flag) OK(MPI_Win_test(win, &flag));
            } else {
                OK(MPI_Win_wait(win));
            }
            for (int i = 0; i < np; i++) CHECK(mem[pr[i]] == round * 100 + pr[i]);
            CHECK(mem[size] == round * np);
        } else {
            OK(MPI_Win_start(peers, 0, win));
            int v = round * 100 + rank, one = round;
            for (int i = 0; i < np; i++) {
                OK(MPI_Put(&v, 1, MPI_INT, pr[i], rank, 1, MPI_INT, win));
                OK(MPI_Accumulate(&one, 1, MPI_INT, pr[i], size, 1, MPI_INT, MPI_SUM, win));
            }
            OK(MPI_Win_complete(win));
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (rank % 2 == 0) mem[size] = 0;
        MPI_Barrier(MPI_COMM_WORLD);
    }

    MPI_Group_free(&peers);
    MPI_Group_free(&world);
    free(pr);
    OK(MPI_Win_free(&win));
    report_ok("rma_pscw");
    MPI_Finalize();
    return 0;
}
