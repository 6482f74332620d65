/* The v and w collectives on non-contiguous datatypes (before: MPI_ERR_TYPE,
 * "the v-collectives of tmpi take contiguous datatypes only"; MPICH's
 * scatterv, alltoallw1, nonblocking2). Items of `vec`: 2 ints 2 apart
 * (extent 3 ints), so each item leaves one int untouched between its two;
 * blocks at displacements with gaps between them. Blocking and not, in place
 * where MPI allows, alltoallw mixing vec and MPI_INT per peer. Every int a
 * type map does not name must keep its sentinel. */
#include "check.h"

#define GAP (-7)
static int rank, size;
static MPI_Datatype vec;

/* Value of item k of the block that rank `from` sends to rank `to`, first
 * (h = 0) or second (h = 1) int. */
static int val(int from, int to, int k, int h) { return 100000 * from + 1000 * to + 10 * k + h; }

/* Block i of a vec buffer: cnt[i] items at displ[i] extents (3 ints each). */
static void put_vec(int *buf, int at_item, int n, int from, int to) {
    for (int k = 0; k < n; k++) {
        buf[3 * (at_item + k)] = val(from, to, k, 0);
        buf[3 * (at_item + k) + 2] = val(from, to, k, 1);
    }
}

static void check_vec(const int *buf, int len_ints, const int *cnt, const int *dsp,
                      int from_is_index, int fixed) {
    /* mark the ints the blocks name, check them, everything else is GAP */
    char *named = calloc(len_ints, 1);
    for (int i = 0; i < size; i++)
        for (int k = 0; k < cnt[i]; k++) {
            int a = 3 * (dsp[i] + k);
            int from = from_is_index ? i : fixed, to = from_is_index ? fixed : i;
            CHECK(buf[a] == val(from, to, k, 0));
            CHECK(buf[a + 2] == val(from, to, k, 1));
            named[a] = named[a + 2] = 1;
        }
    for (int j = 0; j < len_ints; j++)
        if (!named[j]) CHECK(buf[j] == GAP);
    free(named);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &vec));
    OK(MPI_Type_commit(&vec));

    /* Peer i's block: i % 3 + 1 items, blocks 1 item apart, reversed order. */
    int *cnt = malloc(sizeof(int) * size), *dsp = malloc(sizeof(int) * size);
    int items = 0;
    for (int i = size - 1; i >= 0; i--) {
        cnt[i] = i % 3 + 1;
        dsp[i] = items + 1;
        items += cnt[i] + 1;
    }
    int len = 3 * (items + 1);
    int *rbuf = malloc(sizeof(int) * len), *sbuf = malloc(sizeof(int) * len);
    int mine = rank % 3 + 1;
    int own[3 * 3];
    int root = size - 1;

    for (int nb = 0; nb < 2; nb++) {
        MPI_Request rq = MPI_REQUEST_NULL;
        /* gatherv: rank r sends its block to the root */
        for (int j = 0; j < 9; j++) own[j] = GAP;
        put_vec(own, 0, mine, rank, root);
        for (int j = 0; j < len; j++) rbuf[j] = GAP;
        if (nb) OK(MPI_Igatherv(own, mine, vec, rbuf, cnt, dsp, vec, root, MPI_COMM_WORLD, &rq));
        else OK(MPI_Gatherv(own, mine, vec, rbuf, cnt, dsp, vec, root, MPI_COMM_WORLD));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        if (rank == root) check_vec(rbuf, len, cnt, dsp, 1, root);

        /* gatherv in place at the root */
        for (int j = 0; j < len; j++) rbuf[j] = GAP;
        if (rank == root) put_vec(rbuf, dsp[root], cnt[root], root, root);
        void *sb = rank == root ? MPI_IN_PLACE : (void *)own;
        if (nb) OK(MPI_Igatherv(sb, mine, vec, rbuf, cnt, dsp, vec, root, MPI_COMM_WORLD, &rq));
        else OK(MPI_Gatherv(sb, mine, vec, rbuf, cnt, dsp, vec, root, MPI_COMM_WORLD));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        if (rank == root) check_vec(rbuf, len, cnt, dsp, 1, root);

        /* scatterv: the root sends block i to rank i */
        for (int j = 0; j < len; j++) sbuf[j] = GAP;
        for (int i = 0; i < size; i++) put_vec(sbuf, dsp[i], cnt[i], root, i);
        for (int j = 0; j < 9; j++) own[j] = GAP;
        if (nb) OK(MPI_Iscatterv(sbuf, cnt, dsp, vec, own, mine, vec, root, MPI_COMM_WORLD, &rq));
        else OK(MPI_Scatterv(sbuf, cnt, dsp, vec, own, mine, vec, root, MPI_COMM_WORLD));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        for (int k = 0; k < mine; k++) CHECK(own[3 * k] == val(root, rank, k, 0) && own[3 * k + 1] == GAP && own[3 * k + 2] == val(root, rank, k, 1));

        /* allgatherv, then in place */
        for (int j = 0; j < 9; j++) own[j] = GAP;
        put_vec(own, 0, mine, rank, 0);
        for (int inplace = 0; inplace < 2; inplace++) {
            for (int j = 0; j < len; j++) rbuf[j] = GAP;
            if (inplace) put_vec(rbuf, dsp[rank], mine, rank, 0);
            void *s2 = inplace ? MPI_IN_PLACE : (void *)own;
            if (nb) OK(MPI_Iallgatherv(s2, mine, vec, rbuf, cnt, dsp, vec, MPI_COMM_WORLD, &rq));
            else OK(MPI_Allgatherv(s2, mine, vec, rbuf, cnt, dsp, vec, MPI_COMM_WORLD));
            OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            check_vec(rbuf, len, cnt, dsp, 1, 0);
        }

        /* alltoallv: block i of my send buffer goes to rank i; everyone uses
         * the same counts, so block i received from rank i has cnt[i] items */
        for (int inplace = 0; inplace < 2; inplace++) {
            /* counts must match pairwise and fit each block: the smaller of
             * the two ranks' own counts, both ways */
            int *c2 = malloc(sizeof(int) * size);
            for (int i = 0; i < size; i++) c2[i] = cnt[i] < cnt[rank] ? cnt[i] : cnt[rank];
            for (int j = 0; j < len; j++) sbuf[j] = rbuf[j] = GAP;
            for (int i = 0; i < size; i++) put_vec(inplace ? rbuf : sbuf, dsp[i], c2[i], rank, i);
            void *s3 = inplace ? MPI_IN_PLACE : (void *)sbuf;
            if (nb) OK(MPI_Ialltoallv(s3, c2, dsp, vec, rbuf, c2, dsp, vec, MPI_COMM_WORLD, &rq));
            else OK(MPI_Alltoallv(s3, c2, dsp, vec, rbuf, c2, dsp, vec, MPI_COMM_WORLD));
            OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            check_vec(rbuf, len, c2, dsp, 1, rank);
            free(c2);
        }

        /* alltoallw: vec for even peers, MPI_INT (2 ints per item) for odd */
        {
            int *sc = malloc(sizeof(int) * size), *sd = malloc(sizeof(int) * size);
            MPI_Datatype *st = malloc(sizeof(MPI_Datatype) * size);
            int at = 0;
            for (int i = 0; i < size; i++) {
                st[i] = i % 2 ? MPI_INT : vec;
                sc[i] = i % 2 ? 2 : 1;
                sd[i] = at * (int)sizeof(int);
                at += 4;
            }
            int *ws = malloc(sizeof(int) * 4 * size), *wr = malloc(sizeof(int) * 4 * size);
            for (int j = 0; j < 4 * size; j++) ws[j] = wr[j] = GAP;
            for (int i = 0; i < size; i++) {
                ws[4 * i] = val(rank, i, 0, 0);
                ws[4 * i + (i % 2 ? 1 : 2)] = val(rank, i, 0, 1);
            }
            /* what arrives from rank i is typed by my own types[i] */
            if (nb) OK(MPI_Ialltoallw(ws, sc, sd, st, wr, sc, sd, st, MPI_COMM_WORLD, &rq));
            else OK(MPI_Alltoallw(ws, sc, sd, st, wr, sc, sd, st, MPI_COMM_WORLD));
            OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            for (int i = 0; i < size; i++) {
                int second = i % 2 ? 1 : 2;
                CHECK(wr[4 * i] == val(i, rank, 0, 0) && wr[4 * i + second] == val(i, rank, 0, 1));
                for (int j = 1; j < 4; j++)
                    if (j != second) CHECK(wr[4 * i + j] == GAP);
            }
            free(sc); free(sd); free(st); free(ws); free(wr);
        }
    }
    free(cnt); free(dsp); free(rbuf); free(sbuf);
    OK(MPI_Type_free(&vec));
    report_ok("vcoll_types");
    MPI_Finalize();
    return 0;
}
