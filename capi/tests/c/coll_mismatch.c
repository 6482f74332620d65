/* Collective calls that differ across ranks on communicators whose
 * collectives go through sm's segment (one node): the ranks left waiting
 * fail instead of waiting forever (docs/coll.md, "Calls that take
 * different paths"). Under MPI_ERRORS_RETURN, on duplicates of world,
 * which keeps working. */
#include "check.h"

static int cls(int rc) {
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    int rank, size, rc, one = 1, sum = 0;
    char buf[64] = {0};
    MPI_Comm c1, c2;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c1));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c2));
    OK(MPI_Comm_set_errhandler(c1, MPI_ERRORS_RETURN));
    OK(MPI_Comm_set_errhandler(c2, MPI_ERRORS_RETURN));

    /* Correct calls first (the segments attach). */
    OK(MPI_Bcast(buf, 8, MPI_BYTE, 0, c1));
    OK(MPI_Barrier(c2));

    /* Lengths that send the ranks to different rings of the segment (a
     * bcast's root with 8 bytes on the stream ring, the others' 32 on the
     * small ring, and the other way round): the ranks that notice follow
     * the root's ring and fail with MPI_ERR_TRUNCATE, so the communicator
     * stays in step (docs/coll.md "Errors"). */
    for (int k = 0; k < 2; k++) {
        rc = MPI_Bcast(buf, (rank == 0) == (k == 0) ? 8 : 32, MPI_BYTE, 0, c1);
        if (rank == 0)
            CHECK(rc == MPI_SUCCESS);
        else
            CHECK(cls(rc) == MPI_ERR_TRUNCATE);
    }
    /* A reduce's root with 10 ints against the others' 1, and the other
     * way round: the root follows the others' ring and fails. */
    int v[10], out[10];
    for (int i = 0; i < 10; i++)
        v[i] = rank + i;
    for (int k = 0; k < 2; k++) {
        rc = MPI_Reduce(v, out, (rank == 0) == (k == 0) ? 10 : 1, MPI_INT, MPI_SUM, 0, c1);
        if (rank == 0)
            CHECK(cls(rc) == MPI_ERR_TRUNCATE);
        else
            CHECK(rc == MPI_SUCCESS);
    }
    /* From 3 ranks a bcast above coll_sm_max runs on the segment in
     * chunks after the root's length: a root with 256 KiB against others
     * with 4 or 40 bytes, and 4 bytes against 256 KiB. */
    if (size >= 3) {
        char *lb = calloc(1, 256 * 1024);
        CHECK(lb != NULL);
        int lens[3][2] = {{256 * 1024, 4}, {256 * 1024, 40}, {4, 256 * 1024}};
        for (int k = 0; k < 3; k++) {
            rc = MPI_Bcast(lb, lens[k][rank == 0 ? 0 : 1], MPI_BYTE, 0, c1);
            if (rank == 0)
                CHECK(rc == MPI_SUCCESS);
            else
                CHECK(cls(rc) == MPI_ERR_TRUNCATE);
        }
        free(lb);
    }
    /* In step afterwards: correct calls on c1 give correct results. */
    OK(MPI_Barrier(c1));
    int val = rank == 0 ? 4242 : -1;
    OK(MPI_Bcast(&val, 1, MPI_INT, 0, c1));
    CHECK(val == 4242);
    OK(MPI_Reduce(v, out, 10, MPI_INT, MPI_SUM, 0, c1));
    if (rank == 0)
        for (int i = 0; i < 10; i++)
            CHECK(out[i] == size * (size - 1) / 2 + size * i);
    sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c1));
    CHECK(sum == size);

    /* Different operations. */
    rc = rank == 0 ? MPI_Barrier(c2) : MPI_Bcast(buf, 8, MPI_BYTE, 0, c2);
    CHECK(cls(rc) == MPI_ERR_OTHER);

    /* Lengths that differ on the message path (gather and scatter do not
     * go through the segment): every rank gets through the call, the ones
     * that notice fail, and the communicator keeps working. */
    MPI_Comm c3;
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &c3));
    OK(MPI_Comm_set_errhandler(c3, MPI_ERRORS_RETURN));
    enum { BIG = 16384 }; /* ints: above the eager limit (rendezvous) */
    int *big = malloc(sizeof(int) * 2 * BIG * size), *all = malloc(sizeof(int) * BIG * size);
    CHECK(big && all);
    for (int i = 0; i < 2 * BIG * size; i++)
        big[i] = rank * 1000 + i % 1000;
    /* From 4 ranks the root's 1-int gather and the others' 64 KiB blocks
     * take different algorithms (binomial against linear): a send nobody
     * receives waits forever (docs/coll.md "Errors"), so the large case
     * runs at 2 and 3 ranks only. */
    int most = size <= 3 ? BIG : 4;
    for (int n = 4; n <= most; n *= 4096) {
        /* The root takes 1 int from each rank, the others send n. */
        int mine = rank == 0 ? 1 : n;
        rc = MPI_Gather(big, mine, MPI_INT, all, 1, MPI_INT, 0, c3);
        if (rank == 0)
            CHECK(cls(rc) == MPI_ERR_TRUNCATE);
        else
            CHECK(rc == MPI_SUCCESS);
        /* The root sends 1 int to each rank and takes n itself: its own
         * arguments disagree (MPI_ERR_COUNT); the ranks it sends to find
         * the short message, and pass an empty one down the tree, so the
         * ranks below them fail too. */
        rc = MPI_Scatter(big, 1, MPI_INT, all, n, MPI_INT, 0, c3);
        CHECK(cls(rc) == (rank == 0 ? MPI_ERR_COUNT : MPI_ERR_TRUNCATE));
        /* Rank 0 sends twice what it receives: its own arguments
         * disagree; it takes part with its blocks cut to its receive
         * size, so the others receive what they expect. */
        rc = MPI_Alltoall(big, rank == 0 ? 2 * n : n, MPI_INT, all, n, MPI_INT, c3);
        if (rank == 0)
            CHECK(cls(rc) == MPI_ERR_COUNT);
        else
            CHECK(rc == MPI_SUCCESS);
        /* Non-blocking, the root's own block disagreeing with its
         * layout: its request fails at completion, the others' succeed. */
        int *counts = malloc(sizeof(int) * size), *displs = malloc(sizeof(int) * size);
        CHECK(counts && displs);
        for (int i = 0; i < size; i++) {
            counts[i] = n;
            displs[i] = i * n;
        }
        MPI_Request rq;
        OK(MPI_Igatherv(big, rank == 0 ? n / 2 : n, MPI_INT, all, counts, displs, MPI_INT, 0, c3, &rq));
        rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
        CHECK(rank == 0 ? cls(rc) == MPI_ERR_COUNT : rc == MPI_SUCCESS);
        OK(MPI_Iscatterv(big, counts, displs, MPI_INT, all, rank == 0 ? n / 2 : n, MPI_INT, 0, c3, &rq));
        rc = MPI_Wait(&rq, MPI_STATUS_IGNORE);
        CHECK(rank == 0 ? cls(rc) == MPI_ERR_COUNT : rc == MPI_SUCCESS);
        if (rank != 0)
            for (int i = 0; i < n; i++)
                CHECK(all[i] == (rank * n + i) % 1000);
        free(counts);
        free(displs);
        /* In step afterwards: correct calls on the same communicator. */
        sum = 0;
        OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c3));
        CHECK(sum == size);
        int r = rank * 10 + n;
        OK(MPI_Gather(&r, 1, MPI_INT, all, 1, MPI_INT, 0, c3));
        if (rank == 0)
            for (int i = 0; i < size; i++)
                CHECK(all[i] == i * 10 + n);
        OK(MPI_Scatter(big, n, MPI_INT, all, n, MPI_INT, 0, c3));
        for (int i = 0; i < n; i++)
            CHECK(all[i] == (rank * n + i) % 1000);
    }
    free(big);
    free(all);
    OK(MPI_Comm_free(&c3));

    /* World is another communicator, untouched. */
    sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);
    report_ok("coll_mismatch");
    OK(MPI_Finalize());
    return 0;
}
