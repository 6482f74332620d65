/* Persistent v, w and neighbourhood collectives take their count,
 * displacement and datatype arrays at init: each test overwrites the
 * arrays (and frees the datatypes in them) right after the init call, as
 * mpi4py does with the temporaries it converts its arguments into, then
 * starts the request twice and checks the data. Ranks 1-4. */
#include "check.h"

static int *ints(int n, int v) {
    int *a = malloc((n ? n : 1) * sizeof(int));
    for (int i = 0; i < n; i++) a[i] = v;
    return a;
}

/* Overwrites n ints with values no call accepts. */
static void poison(int *a, int n) {
    for (int i = 0; i < n; i++) a[i] = -7;
}

static void start_wait(MPI_Request *r) {
    OK(MPI_Start(r));
    OK(MPI_Wait(r, MPI_STATUS_IGNORE));
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    const int root = size - 1;
    MPI_Request r;
    int *sbuf = ints(2 * size, 0), *rbuf = ints(2 * size, 0);

    /* Gatherv: rank i gives i + 1 ints of value i; block i at 2i. */
    int *cnt = ints(size, 0), *dsp = ints(size, 0);
    for (int i = 0; i < size; i++) cnt[i] = i + 1 > 2 ? 2 : i + 1, dsp[i] = 2 * i;
    int mine = rank + 1 > 2 ? 2 : rank + 1;
    OK(MPI_Gatherv_init(sbuf, mine, MPI_INT, rbuf, cnt, dsp, MPI_INT, root, MPI_COMM_WORLD,
                        MPI_INFO_NULL, &r));
    poison(cnt, size), poison(dsp, size);
    for (int it = 0; it < 2; it++) {
        for (int k = 0; k < 2; k++) sbuf[k] = 10 * rank + it;
        for (int k = 0; k < 2 * size; k++) rbuf[k] = -1;
        start_wait(&r);
        if (rank == root)
            for (int i = 0; i < size; i++)
                for (int k = 0; k < 2; k++)
                    CHECK(rbuf[2 * i + k] == (k < (i + 1 > 2 ? 2 : i + 1) ? 10 * i + it : -1));
    }
    OK(MPI_Request_free(&r));

    /* Scatterv: block i (one int at 2i) to rank i. */
    for (int i = 0; i < size; i++) cnt[i] = 1, dsp[i] = 2 * i;
    OK(MPI_Scatterv_init(sbuf, cnt, dsp, MPI_INT, rbuf, 1, MPI_INT, root, MPI_COMM_WORLD,
                         MPI_INFO_NULL, &r));
    poison(cnt, size), poison(dsp, size);
    for (int it = 0; it < 2; it++) {
        for (int i = 0; i < 2 * size; i++) sbuf[i] = 100 * it + i;
        rbuf[0] = -1;
        start_wait(&r);
        CHECK(rbuf[0] == 100 * it + 2 * rank);
    }
    OK(MPI_Request_free(&r));

    /* Allgatherv: one int from each rank, at 2i. */
    for (int i = 0; i < size; i++) cnt[i] = 1, dsp[i] = 2 * i;
    OK(MPI_Allgatherv_init(sbuf, 1, MPI_INT, rbuf, cnt, dsp, MPI_INT, MPI_COMM_WORLD,
                           MPI_INFO_NULL, &r));
    poison(cnt, size), poison(dsp, size);
    for (int it = 0; it < 2; it++) {
        sbuf[0] = rank + 1000 * it;
        start_wait(&r);
        for (int i = 0; i < size; i++) CHECK(rbuf[2 * i] == i + 1000 * it);
    }
    OK(MPI_Request_free(&r));

    /* Alltoallv: block j (one int at 2j) to rank j. */
    int *rcnt = ints(size, 1), *rdsp = ints(size, 0);
    for (int i = 0; i < size; i++) cnt[i] = 1, dsp[i] = 2 * i, rdsp[i] = 2 * i;
    OK(MPI_Alltoallv_init(sbuf, cnt, dsp, MPI_INT, rbuf, rcnt, rdsp, MPI_INT, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &r));
    poison(cnt, size), poison(dsp, size), poison(rcnt, size), poison(rdsp, size);
    for (int it = 0; it < 2; it++) {
        for (int j = 0; j < size; j++) sbuf[2 * j] = 100 * rank + j + 7 * it;
        start_wait(&r);
        for (int i = 0; i < size; i++) CHECK(rbuf[2 * i] == 100 * i + rank + 7 * it);
    }
    OK(MPI_Request_free(&r));

    /* Alltoallw with a derived type per peer, freed after init. */
    MPI_Datatype *st = malloc(size * sizeof(MPI_Datatype)),
                 *rt = malloc(size * sizeof(MPI_Datatype));
    for (int i = 0; i < size; i++) {
        OK(MPI_Type_contiguous(1, MPI_INT, &st[i]));
        OK(MPI_Type_commit(&st[i]));
        OK(MPI_Type_dup(st[i], &rt[i]));
        cnt[i] = rcnt[i] = 1;
        dsp[i] = rdsp[i] = 2 * i * (int)sizeof(int);
    }
    OK(MPI_Alltoallw_init(sbuf, cnt, dsp, st, rbuf, rcnt, rdsp, rt, MPI_COMM_WORLD,
                          MPI_INFO_NULL, &r));
    poison(cnt, size), poison(dsp, size), poison(rcnt, size), poison(rdsp, size);
    for (int i = 0; i < size; i++) {
        OK(MPI_Type_free(&st[i]));
        OK(MPI_Type_free(&rt[i]));
        st[i] = rt[i] = MPI_DATATYPE_NULL;
    }
    for (int it = 0; it < 2; it++) {
        for (int j = 0; j < size; j++) sbuf[2 * j] = 100 * rank + j + 9 * it;
        start_wait(&r);
        for (int i = 0; i < size; i++) CHECK(rbuf[2 * i] == 100 * i + rank + 9 * it);
    }
    OK(MPI_Request_free(&r));

    /* Reduce_scatter: one int to each rank. */
    for (int i = 0; i < size; i++) cnt[i] = 1;
    OK(MPI_Reduce_scatter_init(sbuf, rbuf, cnt, MPI_INT, MPI_SUM, MPI_COMM_WORLD, MPI_INFO_NULL,
                               &r));
    poison(cnt, size);
    for (int it = 0; it < 2; it++) {
        for (int j = 0; j < size; j++) sbuf[j] = j + it;
        start_wait(&r);
        CHECK(rbuf[0] == size * (rank + it));
    }
    OK(MPI_Request_free(&r));

    /* Neighbourhood forms on a periodic ring: block 0 left, block 1 right. */
    int dims[1] = {size}, periods[1] = {1};
    MPI_Comm ring;
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    MPI_Comm_set_errhandler(ring, MPI_ERRORS_RETURN);
    int left = (rank - 1 + size) % size, right = (rank + 1) % size;
    int *c2 = ints(2, 1), *d2 = ints(2, 0), *rc2 = ints(2, 1), *rd2 = ints(2, 0);
    d2[1] = rd2[1] = 1;
    OK(MPI_Neighbor_allgatherv_init(sbuf, 1, MPI_INT, rbuf, rc2, rd2, MPI_INT, ring,
                                    MPI_INFO_NULL, &r));
    poison(rc2, 2), poison(rd2, 2);
    for (int it = 0; it < 2; it++) {
        sbuf[0] = rank + 50 * it;
        start_wait(&r);
        CHECK(rbuf[0] == left + 50 * it && rbuf[1] == right + 50 * it);
    }
    OK(MPI_Request_free(&r));
    rc2[0] = rc2[1] = 1, rd2[0] = 0, rd2[1] = 1;
    OK(MPI_Neighbor_alltoallv_init(sbuf, c2, d2, MPI_INT, rbuf, rc2, rd2, MPI_INT, ring,
                                   MPI_INFO_NULL, &r));
    poison(c2, 2), poison(d2, 2), poison(rc2, 2), poison(rd2, 2);
    for (int it = 0; it < 2; it++) {
        sbuf[0] = 10 * rank + it, sbuf[1] = 10 * rank + 5 + it;
        start_wait(&r);
        CHECK(rbuf[0] == 10 * left + 5 + it && rbuf[1] == 10 * right + it);
    }
    OK(MPI_Request_free(&r));
    MPI_Aint ad[2] = {0, sizeof(int)}, rad[2] = {0, sizeof(int)};
    MPI_Datatype wt[2], rwt[2];
    for (int j = 0; j < 2; j++) {
        OK(MPI_Type_contiguous(1, MPI_INT, &wt[j]));
        OK(MPI_Type_commit(&wt[j]));
        OK(MPI_Type_dup(wt[j], &rwt[j]));
        c2[j] = rc2[j] = 1;
    }
    OK(MPI_Neighbor_alltoallw_init(sbuf, c2, ad, wt, rbuf, rc2, rad, rwt, ring, MPI_INFO_NULL,
                                   &r));
    poison(c2, 2), poison(rc2, 2);
    ad[0] = ad[1] = rad[0] = rad[1] = -1000000;
    for (int j = 0; j < 2; j++) {
        OK(MPI_Type_free(&wt[j]));
        OK(MPI_Type_free(&rwt[j]));
    }
    for (int it = 0; it < 2; it++) {
        sbuf[0] = 10 * rank + 2 * it, sbuf[1] = 10 * rank + 5 + 2 * it;
        start_wait(&r);
        CHECK(rbuf[0] == 10 * left + 5 + 2 * it && rbuf[1] == 10 * right + 2 * it);
    }
    OK(MPI_Request_free(&r));
    OK(MPI_Comm_free(&ring));

    free(c2), free(d2), free(rc2), free(rd2);
    free(st), free(rt), free(cnt), free(dsp), free(rcnt), free(rdsp), free(sbuf), free(rbuf);
    report_ok("pcoll_arrays");
    MPI_Finalize();
    return 0;
}
