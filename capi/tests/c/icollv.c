/* Non-blocking v-collectives: MPI_Igatherv, MPI_Iscatterv, MPI_Iallgatherv,
 * MPI_Ialltoallv, MPI_Ialltoallw, MPI_Ireduce_scatter all outstanding at
 * once with a point-to-point ring exchange on the same communicator, then
 * completed with one MPI_Waitall. Layouts are uneven (rank i has i % 3 + 1
 * elements, one with none on 4 ranks) and placed in reversed rank order
 * with a gap; the gaps must stay untouched. Also MPI_IN_PLACE forms. */
#include "check.h"

#define GAP -7

int main(int argc, char **argv) {
    int rank, size, i, k;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int *cnt = malloc(sizeof(int) * size), *dsp = malloc(sizeof(int) * size);
    int len = 0;
    for (i = size - 1; i >= 0; i--) {
        cnt[i] = (i == 3) ? 0 : i % 3 + 1;
        dsp[i] = len;
        len += cnt[i] + 1; /* one-element gap */
    }
    int mine = cnt[rank];
    int send[4];
    for (k = 0; k < mine; k++) send[k] = rank * 100 + k;

    int root = size - 1;
    int *gv = malloc(sizeof(int) * len), *agv = malloc(sizeof(int) * len);
    int *sv = malloc(sizeof(int) * len), piece[4] = {GAP, GAP, GAP, GAP};
    for (i = 0; i < len; i++) { gv[i] = GAP; agv[i] = GAP; sv[i] = GAP; }
    if (rank == 0)
        for (i = 0; i < size; i++)
            for (k = 0; k < cnt[i]; k++) sv[dsp[i] + k] = 5000 + i * 10 + k;

    /* alltoallv: rank r sends (r + j) % 2 + 1 ints to j, packed in order;
     * receives in the reversed layout with a gap. */
    int *sc = malloc(sizeof(int) * size), *sd = malloc(sizeof(int) * size);
    int *rc = malloc(sizeof(int) * size), *rd = malloc(sizeof(int) * size);
    int slen = 0, rlen = 0;
    for (i = 0; i < size; i++) { sc[i] = (rank + i) % 2 + 1; sd[i] = slen; slen += sc[i]; }
    for (i = size - 1; i >= 0; i--) { rc[i] = (i + rank) % 2 + 1; rd[i] = rlen; rlen += rc[i] + 1; }
    int *a2s = malloc(sizeof(int) * slen), *a2r = malloc(sizeof(int) * rlen);
    for (i = 0; i < size; i++)
        for (k = 0; k < sc[i]; k++) a2s[sd[i] + k] = rank * 1000 + i * 10 + k;
    for (i = 0; i < rlen; i++) a2r[i] = GAP;
    /* alltoallw: one int to everyone, byte displacements. */
    int *ws = malloc(sizeof(int) * size), *wr = malloc(sizeof(int) * size);
    int *wc = malloc(sizeof(int) * size), *wd = malloc(sizeof(int) * size);
    MPI_Datatype *wt = malloc(sizeof(MPI_Datatype) * size);
    for (i = 0; i < size; i++) {
        ws[i] = rank * 10 + i; wr[i] = GAP; wc[i] = 1;
        wd[i] = i * (int)sizeof(int); wt[i] = MPI_INT;
    }
    /* reduce_scatter: rank i gets i + 1 ints. */
    int tot = size * (size + 1) / 2, *rsc = malloc(sizeof(int) * size);
    int *rsin = malloc(sizeof(int) * tot), rsout[16];
    for (i = 0; i < size; i++) rsc[i] = i + 1;
    for (i = 0; i < tot; i++) rsin[i] = i + rank;

    MPI_Request q[8];
    OK(MPI_Igatherv(send, mine, MPI_INT, gv, cnt, dsp, MPI_INT, root, MPI_COMM_WORLD, &q[0]));
    OK(MPI_Iscatterv(sv, cnt, dsp, MPI_INT, piece, mine, MPI_INT, 0, MPI_COMM_WORLD, &q[1]));
    OK(MPI_Iallgatherv(send, mine, MPI_INT, agv, cnt, dsp, MPI_INT, MPI_COMM_WORLD, &q[2]));
    OK(MPI_Ialltoallv(a2s, sc, sd, MPI_INT, a2r, rc, rd, MPI_INT, MPI_COMM_WORLD, &q[3]));
    OK(MPI_Ialltoallw(ws, wc, wd, wt, wr, wc, wd, wt, MPI_COMM_WORLD, &q[4]));
    OK(MPI_Ireduce_scatter(rsin, rsout, rsc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[5]));
    /* User traffic on the same communicator meanwhile (wildcard receive). */
    int token = rank, got = -1;
    OK(MPI_Irecv(&got, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &q[6]));
    OK(MPI_Isend(&token, 1, MPI_INT, (rank + 1) % size, 3, MPI_COMM_WORLD, &q[7]));
    OK(MPI_Waitall(8, q, MPI_STATUSES_IGNORE));

    CHECK(got == (rank + size - 1) % size);
    if (rank == root) {
        for (i = 0; i < size; i++) {
            for (k = 0; k < cnt[i]; k++) CHECK(gv[dsp[i] + k] == i * 100 + k);
            CHECK(gv[dsp[i] + cnt[i]] == GAP);
        }
    } else {
        for (i = 0; i < len; i++) CHECK(gv[i] == GAP);
    }
    for (k = 0; k < mine; k++) CHECK(piece[k] == 5000 + rank * 10 + k);
    for (k = mine; k < 4; k++) CHECK(piece[k] == GAP);
    for (i = 0; i < size; i++) {
        for (k = 0; k < cnt[i]; k++) CHECK(agv[dsp[i] + k] == i * 100 + k);
        CHECK(agv[dsp[i] + cnt[i]] == GAP);
    }
    for (i = 0; i < size; i++) {
        for (k = 0; k < rc[i]; k++) CHECK(a2r[rd[i] + k] == i * 1000 + rank * 10 + k);
        CHECK(a2r[rd[i] + rc[i]] == GAP);
    }
    for (i = 0; i < size; i++) CHECK(wr[i] == i * 10 + rank);
    int off = rank * (rank + 1) / 2;
    for (i = 0; i <= rank; i++) CHECK(rsout[i] == size * (off + i) + size * (size - 1) / 2);

    /* MPI_IN_PLACE: igatherv at the root, iallgatherv, ialltoallv,
     * ireduce_scatter. */
    for (i = 0; i < len; i++) { gv[i] = GAP; agv[i] = GAP; }
    for (k = 0; k < mine; k++) { agv[dsp[rank] + k] = rank * 7 + k; if (rank == root) gv[dsp[rank] + k] = rank * 7 + k; }
    int *ip = malloc(sizeof(int) * rlen);
    for (i = 0; i < size; i++) {
        rc[i] = 1; rd[i] = 2 * (size - 1 - i); /* reversed, gaps between */
    }
    for (i = 0; i < rlen; i++) ip[i] = GAP;
    for (i = 0; i < size; i++) ip[rd[i]] = rank * 10 + i;
    for (i = 0; i < tot; i++) rsin[i] = i + rank;
    OK(MPI_Igatherv(rank == root ? MPI_IN_PLACE : (void *)send, mine, MPI_INT, gv, cnt, dsp, MPI_INT, root, MPI_COMM_WORLD, &q[0]));
    OK(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, agv, cnt, dsp, MPI_INT, MPI_COMM_WORLD, &q[1]));
    OK(MPI_Ialltoallv(MPI_IN_PLACE, NULL, NULL, MPI_DATATYPE_NULL, ip, rc, rd, MPI_INT, MPI_COMM_WORLD, &q[2]));
    OK(MPI_Ireduce_scatter(MPI_IN_PLACE, rsin, rsc, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[3]));
    OK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
    for (i = 0; i < size; i++) {
        for (k = 0; k < cnt[i]; k++) {
            CHECK(agv[dsp[i] + k] == (i == rank ? rank * 7 + k : i * 7 + k));
            if (rank == root) CHECK(gv[dsp[i] + k] == (i == root ? root * 7 + k : i * 100 + k));
        }
        CHECK(agv[dsp[i] + cnt[i]] == GAP);
    }
    for (i = 0; i < size; i++) {
        CHECK(ip[rd[i]] == i * 10 + rank);
        if (i > 0) CHECK(ip[rd[i] + 1] == GAP);
    }
    for (i = 0; i <= rank; i++) CHECK(rsin[i] == size * (off + i) + size * (size - 1) / 2);

    /* Scatter(v) in place at the root: recvcount and recvtype are ignored
     * there (MPICH's nonblocking.c passes -1 and MPI_DATATYPE_NULL). */
    {
        int *all = malloc(sizeof(int) * 2 * size), *scs = malloc(sizeof(int) * size), *sds = malloc(sizeof(int) * size);
        int two[2] = {GAP, GAP};
        for (i = 0; i < 2 * size; i++) all[i] = 1000 + i;
        for (i = 0; i < size; i++) { scs[i] = 2; sds[i] = 2 * i; }
        for (int form = 0; form < 4; form++) {
            MPI_Request rq = MPI_REQUEST_NULL;
            two[0] = two[1] = GAP;
            int me_root = rank == root;
            void *rb = me_root ? MPI_IN_PLACE : (void *)two;
            int rcnt = me_root ? -1 : 2;
            MPI_Datatype rty = me_root ? MPI_DATATYPE_NULL : MPI_INT;
            if (form == 0) OK(MPI_Scatter(all, 2, MPI_INT, rb, rcnt, rty, root, MPI_COMM_WORLD));
            if (form == 1) OK(MPI_Iscatter(all, 2, MPI_INT, rb, rcnt, rty, root, MPI_COMM_WORLD, &rq));
            if (form == 2) OK(MPI_Scatterv(all, scs, sds, MPI_INT, rb, rcnt, rty, root, MPI_COMM_WORLD));
            if (form == 3) OK(MPI_Iscatterv(all, scs, sds, MPI_INT, rb, rcnt, rty, root, MPI_COMM_WORLD, &rq));
            OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
            if (!me_root) CHECK(two[0] == 1000 + 2 * rank && two[1] == 1001 + 2 * rank);
            for (i = 0; i < 2 * size; i++) CHECK(all[i] == 1000 + i);
        }
        free(all); free(scs); free(sds);
    }

    /* Bad arguments come back as error classes under MPI_ERRORS_RETURN. */
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    int ec;
    MPI_Request bad;
    MPI_Error_class(MPI_Igatherv(send, mine, MPI_INT, gv, cnt, dsp, MPI_INT, size, MPI_COMM_WORLD, &bad), &ec);
    CHECK(ec == MPI_ERR_ROOT);
    free(ip);
    free(cnt); free(dsp); free(gv); free(agv); free(sv); free(sc); free(sd); free(rc); free(rd);
    free(a2s); free(a2r); free(ws); free(wr); free(wc); free(wd); free(wt); free(rsc); free(rsin);
    report_ok("icollv");
    MPI_Finalize();
    return 0;
}
