/* Buffered sends reusing an attached buffer sized for one message: each
 * MPI_Bsend must find the space its predecessor gave back once received
 * (the library progresses before refusing), and a buffer that stays full
 * (nobody receives) gives MPI_ERR_BUFFER, not a hang. 2 ranks.
 *
 * Round r + 1's MPI_Bsend comes right after round r's: the completion of
 * round r (its FIN, once rank 1 received it) can only be progressed by the
 * second call itself. */
#include "check.h"

#define N (1 << 20)
#define ROUNDS 8

int main(int argc, char **argv) {
    int rank, size, i, r;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size == 2);
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    char *msg = malloc(N);
    CHECK(msg != NULL);
    int bsize = N + MPI_BSEND_OVERHEAD;
    char *bbuf = malloc(bsize);
    CHECK(bbuf != NULL);

    /* Rounds of rendezvous-sized buffered sends: the space of round r is
     * charged until its transfer completed at the sender. */
    if (rank == 0) {
        OK(MPI_Buffer_attach(bbuf, bsize));
        for (r = 0; r < ROUNDS; r++) {
            memset(msg, 'a' + r, N);
            int rc = MPI_Bsend(msg, N, MPI_CHAR, 1, r, MPI_COMM_WORLD);
            if (rc != MPI_SUCCESS) {
                int cls;
                MPI_Error_class(rc, &cls);
                fprintf(stderr, "rank 0: MPI_Bsend of round %d failed with class %d\n", r,
                        cls);
            }
            CHECK(rc == MPI_SUCCESS);
        }
    } else {
        for (r = 0; r < ROUNDS; r++) {
            OK(MPI_Recv(msg, N, MPI_CHAR, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
            for (i = 0; i < N; i += 4093) CHECK(msg[i] == 'a' + r);
        }
    }
    OK(MPI_Barrier(MPI_COMM_WORLD));

    /* Nobody receives the first message yet: the second cannot fit. */
    if (rank == 0) {
        memset(msg, 'z', N);
        OK(MPI_Bsend(msg, N, MPI_CHAR, 1, 100, MPI_COMM_WORLD));
        int rc = MPI_Bsend(msg, N, MPI_CHAR, 1, 101, MPI_COMM_WORLD);
        int cls = MPI_SUCCESS;
        if (rc != MPI_SUCCESS) MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_BUFFER);
        OK(MPI_Send(NULL, 0, MPI_CHAR, 1, 102, MPI_COMM_WORLD));
    } else {
        OK(MPI_Recv(NULL, 0, MPI_CHAR, 0, 102, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Recv(msg, N, MPI_CHAR, 0, 100, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < N; i += 4093) CHECK(msg[i] == 'z');
    }
    if (rank == 0) {
        void *b;
        int bs;
        OK(MPI_Buffer_detach(&b, &bs));
        CHECK(b == bbuf && bs == bsize);
    }
    free(msg);
    free(bbuf);
    report_ok("bsend_reuse");
    OK(MPI_Finalize());
    return 0;
}
