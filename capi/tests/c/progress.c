/* MPI's progress rule for non-blocking collectives: a rank blocked in a
 * point-to-point call (MPI_Recv, MPI_Probe) must keep its outstanding
 * collectives moving. Each round starts one collective on every rank, then
 * every rank but the last blocks receiving a token from the next rank,
 * which sends it only once its own collective completed: the last rank's
 * collective needs data forwarded by ranks that sit in MPI_Recv (interior
 * nodes of a bcast tree, partners of later allreduce rounds), so without
 * that progress the job hangs. Rounds: ibcast 8 B and 1 MiB, iallreduce,
 * ibarrier, ireduce, iallgather, with MPI_Recv and with MPI_Probe. */
#include "check.h"

#define BIG (1 << 18) /* ints: 1 MiB */

static void token_chain(int rank, int size, int use_probe) {
    int t = 0;
    if (rank < size - 1) {
        if (use_probe) {
            MPI_Status st;
            OK(MPI_Probe(rank + 1, 77, MPI_COMM_WORLD, &st));
            CHECK(st.MPI_SOURCE == rank + 1);
        }
        OK(MPI_Recv(&t, 1, MPI_INT, rank + 1, 77, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(t == rank + 1);
    }
}

static void pass_token(int rank) {
    if (rank > 0) OK(MPI_Send(&rank, 1, MPI_INT, rank - 1, 77, MPI_COMM_WORLD));
}

int main(int argc, char **argv) {
    int rank, size, i, probe;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *big = malloc(sizeof(int) * BIG);
    int *all = malloc(sizeof(int) * size);
    for (probe = 0; probe < 2; probe++) {
        MPI_Request r;
        /* ibcast, 8 bytes and 1 MiB, from rank 0 */
        for (i = 0; i < 2; i++) {
            int n = i ? BIG : 2, k;
            for (k = 0; k < n; k++) big[k] = rank == 0 ? k * 3 + probe : -1;
            OK(MPI_Ibcast(big, n, MPI_INT, 0, MPI_COMM_WORLD, &r));
            token_chain(rank, size, probe);
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            pass_token(rank);
            for (k = 0; k < n; k++) CHECK(big[k] == k * 3 + probe);
        }
        /* iallreduce */
        int x = rank + 1, sum = 0;
        OK(MPI_Iallreduce(&x, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r));
        token_chain(rank, size, probe);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        pass_token(rank);
        CHECK(sum == size * (size + 1) / 2);
        /* ibarrier */
        OK(MPI_Ibarrier(MPI_COMM_WORLD, &r));
        token_chain(rank, size, probe);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        pass_token(rank);
        /* ireduce to rank 0 */
        int mx = -1;
        OK(MPI_Ireduce(&x, &mx, 1, MPI_INT, MPI_MAX, 0, MPI_COMM_WORLD, &r));
        token_chain(rank, size, probe);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        pass_token(rank);
        CHECK(rank != 0 || mx == size);
        /* iallgather */
        OK(MPI_Iallgather(&rank, 1, MPI_INT, all, 1, MPI_INT, MPI_COMM_WORLD, &r));
        token_chain(rank, size, probe);
        OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        pass_token(rank);
        for (i = 0; i < size; i++) CHECK(all[i] == i);
    }
    free(big);
    free(all);
    report_ok("progress");
    MPI_Finalize();
    return 0;
}
