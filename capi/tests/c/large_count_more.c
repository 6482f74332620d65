/* The rest of MPI-4.0's large-count forms (MPI_X_c) that tmpi runs through
 * its int calls: persistent point-to-point, matched receives,
 * sendrecv-replace and the non-blocking sendrecvs, the v- and
 * w-collectives (arrays of MPI_Count counts and MPI_Aint displacements,
 * root-only arrays NULL elsewhere), the datatype constructors, packing with
 * an MPI_Count position, buffered-mode buffers and one-sided calls: the
 * same results as the int calls, and MPI_ERR_COUNT for an entry beyond
 * INT_MAX (large_count.c covers the first set). */
#include "check.h"

/* A large-count user op, associative and not commutative: a op b = a
 * (inout = in), so a reduction in rank order gives rank 0's value. */
static long long seen_len = -1;
static void keep_left(void *in, void *inout, MPI_Count *len, MPI_Datatype *dt) {
    seen_len = *len;
    for (MPI_Count i = 0; i < *len; i++) ((int *)inout)[i] = ((int *)in)[i];
    (void)dt;
}

static int cls(int rc) {
    int c = -1;
    MPI_Error_class(rc, &c);
    return c;
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Count *counts = malloc(size * sizeof(MPI_Count));
    MPI_Aint *displs = malloc(size * sizeof(MPI_Aint));
    int *all = malloc(4 * size * sizeof(int)), *back = malloc(4 * size * sizeof(int));

    /* Persistent send and receive, two rounds. */
    int pv = 0, ps = rank;
    MPI_Request r[2];
    OK(MPI_Send_init_c(&ps, (MPI_Count)1, MPI_INT, next, 5, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Recv_init_c(&pv, (MPI_Count)1, MPI_INT, prev, 5, MPI_COMM_WORLD, &r[1]));
    for (int it = 0; it < 2; it++) {
        ps = rank + 100 * it;
        OK(MPI_Startall(2, r));
        OK(MPI_Waitall(2, r, MPI_STATUSES_IGNORE));
        CHECK(pv == prev + 100 * it);
    }
    OK(MPI_Request_free(&r[0]));
    OK(MPI_Request_free(&r[1]));

    /* Matched probe and receive. */
    MPI_Request sq;
    OK(MPI_Isend(&rank, 1, MPI_INT, next, 6, MPI_COMM_WORLD, &sq));
    MPI_Message msg;
    MPI_Status st;
    OK(MPI_Mprobe(prev, 6, MPI_COMM_WORLD, &msg, &st));
    pv = -1;
    OK(MPI_Mrecv_c(&pv, (MPI_Count)1, MPI_INT, &msg, &st));
    CHECK(pv == prev);
    OK(MPI_Wait(&sq, MPI_STATUS_IGNORE));

    /* Sendrecv_replace and the non-blocking sendrecvs. */
    int v = rank;
    OK(MPI_Sendrecv_replace_c(&v, (MPI_Count)1, MPI_INT, next, 7, prev, 7, MPI_COMM_WORLD, &st));
    CHECK(v == prev);
    int a = rank, b = -1;
    MPI_Request q;
    OK(MPI_Isendrecv_c(&a, (MPI_Count)1, MPI_INT, next, 8, &b, (MPI_Count)1, MPI_INT, prev, 8,
                       MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(b == prev);
    v = rank;
    OK(MPI_Isendrecv_replace_c(&v, (MPI_Count)1, MPI_INT, next, 9, prev, 9, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(v == prev);

    /* Gatherv_c to root 0: rank i gives i+1 ints, placed at offset 4*i. */
    int mine[4];
    for (int i = 0; i < 4; i++) mine[i] = rank * 10 + i;
    for (int i = 0; i < size; i++) {
        counts[i] = i % 4 + 1;
        displs[i] = 4 * i;
    }
    for (int i = 0; i < 4 * size; i++) all[i] = -1;
    OK(MPI_Gatherv_c(mine, counts[rank], MPI_INT, all, rank == 0 ? counts : NULL,
                     rank == 0 ? displs : NULL, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int i = 0; i < size; i++)
            for (int j = 0; j < 4; j++)
                CHECK(all[4 * i + j] == (j < i % 4 + 1 ? i * 10 + j : -1));
    /* Scatterv_c back: rank i gets its i%4+1 ints. */
    int got[4] = {-1, -1, -1, -1};
    OK(MPI_Scatterv_c(all, rank == 0 ? counts : NULL, rank == 0 ? displs : NULL, MPI_INT, got,
                      counts[rank], MPI_INT, 0, MPI_COMM_WORLD));
    for (int j = 0; j < 4; j++) CHECK(got[j] == (j < rank % 4 + 1 ? rank * 10 + j : -1));
    /* Allgatherv_c (non-blocking) with the same layout everywhere. */
    for (int i = 0; i < 4 * size; i++) back[i] = -1;
    OK(MPI_Iallgatherv_c(mine, counts[rank], MPI_INT, back, counts, displs, MPI_INT,
                         MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    for (int i = 0; i < size; i++)
        for (int j = 0; j < 4; j++)
            CHECK(back[4 * i + j] == (j < i % 4 + 1 ? i * 10 + j : -1));
    /* Alltoallw_c: one int to every rank, byte displacements. */
    MPI_Datatype *types = malloc(size * sizeof(MPI_Datatype));
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        displs[i] = (MPI_Aint)(i * sizeof(int));
        types[i] = MPI_INT;
        all[i] = rank * 100 + i;
        back[i] = -1;
    }
    OK(MPI_Alltoallw_c(all, counts, displs, types, back, counts, displs, types, MPI_COMM_WORLD));
    for (int i = 0; i < size; i++) CHECK(back[i] == i * 100 + rank);
    /* Reduce_scatter_c: one int per rank, summed. */
    for (int i = 0; i < size; i++) all[i] = i + rank;
    int red = -1;
    OK(MPI_Reduce_scatter_c(all, &red, counts, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(red == size * rank + size * (size - 1) / 2);
    /* Iscan_c. */
    int one = 1, pre = 0;
    OK(MPI_Iscan_c(&one, &pre, (MPI_Count)1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q));
    OK(MPI_Wait(&q, MPI_STATUS_IGNORE));
    CHECK(pre == rank + 1);

    /* Persistent Gatherv_init_c (arrays at the root only, copied at
     * init: changed afterwards, the rounds still use the init's). */
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        displs[i] = size - 1 - i;
    }
    MPI_Request pr;
    int gv = rank + 40, *gat = malloc(size * sizeof(int));
    OK(MPI_Gatherv_init_c(&gv, 1, MPI_INT, gat, rank == 0 ? counts : NULL,
                          rank == 0 ? displs : NULL, MPI_INT, 0, MPI_COMM_WORLD, MPI_INFO_NULL, &pr));
    for (int i = 0; i < size; i++) displs[i] = 0;
    for (int it = 0; it < 2; it++) {
        for (int i = 0; i < size; i++) gat[i] = -1;
        OK(MPI_Start(&pr));
        OK(MPI_Wait(&pr, MPI_STATUS_IGNORE));
        if (rank == 0)
            for (int i = 0; i < size; i++) CHECK(gat[size - 1 - i] == i + 40);
    }
    OK(MPI_Request_free(&pr));
    free(gat);
    /* Neighbor_alltoallv_c on a periodic ring: one int to each side. */
    MPI_Comm ring;
    int dims[1] = {size}, periods[1] = {1};
    OK(MPI_Cart_create(MPI_COMM_WORLD, 1, dims, periods, 0, &ring));
    int nsend[2] = {rank * 2, rank * 2 + 1}, nrecv[2] = {-1, -1};
    MPI_Count nc[2] = {1, 1};
    MPI_Aint nd[2] = {0, 1};
    OK(MPI_Neighbor_alltoallv_c(nsend, nc, nd, MPI_INT, nrecv, nc, nd, MPI_INT, ring));
    /* From the lower neighbour its "up" block, from the upper its "down". */
    CHECK(nrecv[0] == prev * 2 + 1 && nrecv[1] == next * 2);
    OK(MPI_Comm_free(&ring));

    /* Op_create_c: the function gets an MPI_Count length. */
    MPI_Op uop;
    OK(MPI_Op_create_c(keep_left, 0, &uop));
    int lin[3] = {1, 2, 3}, lio[3] = {10, 20, 30};
    OK(MPI_Reduce_local(lin, lio, 3, MPI_INT, uop));
    CHECK(seen_len == 3 && lio[0] == 1 && lio[1] == 2 && lio[2] == 3);
    int uin = rank + 1, uout = -1;
    OK(MPI_Allreduce(&uin, &uout, 1, MPI_INT, uop, MPI_COMM_WORLD));
    CHECK(uout == 1);
    int comm_ = -1;
    OK(MPI_Op_commutative(uop, &comm_));
    CHECK(comm_ == 0);
    OK(MPI_Op_free(&uop));

    /* Datatype constructors: the same type maps as the int forms. */
    MPI_Count bl[3] = {1, 2, 3}, dp[3] = {0, 3, 8};
    int bli[3] = {1, 2, 3}, dpi[3] = {0, 3, 8};
    MPI_Datatype t1, t2;
    OK(MPI_Type_indexed_c(3, bl, dp, MPI_INT, &t1));
    OK(MPI_Type_indexed(3, bli, dpi, MPI_INT, &t2));
    MPI_Count s1, s2, l1, l2, e1, e2;
    OK(MPI_Type_size_c(t1, &s1));
    OK(MPI_Type_size_c(t2, &s2));
    OK(MPI_Type_get_extent_c(t1, &l1, &e1));
    OK(MPI_Type_get_extent_c(t2, &l2, &e2));
    CHECK(s1 == s2 && l1 == l2 && e1 == e2 && s1 == 24 && e1 == 44);
    /* Decoded as the int constructor's type: no large counts. */
    MPI_Count eni = -1, ena = -1, enl = -1, end_ = -1;
    int comb = -1, ci[7], cd[1];
    MPI_Aint ca[1];
    OK(MPI_Type_get_envelope_c(t1, &eni, &ena, &enl, &end_, &comb));
    CHECK(comb == MPI_COMBINER_INDEXED && eni == 7 && ena == 0 && enl == 0 && end_ == 1);
    OK(MPI_Type_get_contents_c(t1, 7, 0, 0, 1, ci, ca, NULL, cd));
    CHECK(ci[0] == 3 && ci[1] == 1 && ci[3] == 3 && ci[4] == 0 && ci[6] == 8 && cd[0] == MPI_INT);
    OK(MPI_Type_free(&t2));
    MPI_Count bd[3] = {0, 12, 32};
    OK(MPI_Type_create_hindexed_c(3, bl, bd, MPI_INT, &t2));
    OK(MPI_Type_size_c(t2, &s2));
    OK(MPI_Type_get_extent_c(t2, &l2, &e2));
    CHECK(s2 == 24 && e2 == 44);
    OK(MPI_Type_free(&t2));
    MPI_Datatype sts[2] = {MPI_INT, MPI_DOUBLE};
    MPI_Count sbl[2] = {1, 2}, sdp[2] = {0, 8};
    OK(MPI_Type_create_struct_c(2, sbl, sdp, sts, &t2));
    OK(MPI_Type_size_c(t2, &s2));
    CHECK(s2 == 4 + 16);
    OK(MPI_Type_free(&t2));
    MPI_Count sizes[2] = {4, 5}, subs[2] = {2, 3}, starts[2] = {1, 1};
    OK(MPI_Type_create_subarray_c(2, sizes, subs, starts, MPI_ORDER_C, MPI_INT, &t2));
    OK(MPI_Type_size_c(t2, &s2));
    OK(MPI_Type_get_extent_c(t2, &l2, &e2));
    CHECK(s2 == 6 * 4 && e2 == 20 * 4);
    OK(MPI_Type_free(&t2));
    OK(MPI_Type_create_resized_c(MPI_INT, 0, 16, &t2));
    OK(MPI_Type_get_extent_c(t2, &l2, &e2));
    CHECK(l2 == 0 && e2 == 16);
    OK(MPI_Type_free(&t2));

    /* Pack_c / Unpack_c with an MPI_Count position, through t1. */
    OK(MPI_Type_commit(&t1));
    int src[11], dst[11];
    for (int i = 0; i < 11; i++) {
        src[i] = i + 1;
        dst[i] = 0;
    }
    MPI_Count psize = 0, pos = 0;
    OK(MPI_Pack_size_c(1, t1, MPI_COMM_WORLD, &psize));
    CHECK(psize >= 24);
    char *pbuf = malloc((size_t)psize);
    OK(MPI_Pack_c(src, 1, t1, pbuf, psize, &pos, MPI_COMM_WORLD));
    CHECK(pos == 24);
    MPI_Count upos = 0;
    OK(MPI_Unpack_c(pbuf, pos, &upos, dst, 1, t1, MPI_COMM_WORLD));
    CHECK(upos == 24);
    for (int i = 0; i < 11; i++) {
        int in = i == 0 || i == 3 || i == 4 || i == 8 || i == 9 || i == 10;
        CHECK(dst[i] == (in ? i + 1 : 0));
    }
    free(pbuf);
    OK(MPI_Type_free(&t1));

    /* Buffered mode with an MPI_Count size. */
    MPI_Count bsz = 1 << 16, dsz = 0;
    void *bb = malloc((size_t)bsz), *bd_addr = NULL;
    OK(MPI_Buffer_attach_c(bb, bsz));
    OK(MPI_Bsend(&rank, 1, MPI_INT, next, 10, MPI_COMM_WORLD));
    OK(MPI_Recv(&pv, 1, MPI_INT, prev, 10, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(pv == prev);
    OK(MPI_Buffer_detach_c(&bd_addr, &dsz));
    CHECK(bd_addr == bb && dsz == bsz);
    free(bb);

    /* One-sided: Put_c to the next rank, Get_c from it, in fences. */
    int *wbuf;
    MPI_Win win;
    OK(MPI_Win_allocate_c((MPI_Aint)(2 * sizeof(int)), (MPI_Aint)sizeof(int), MPI_INFO_NULL,
                          MPI_COMM_WORLD, &wbuf, &win));
    wbuf[0] = wbuf[1] = -1;
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put_c(&rank, 1, MPI_INT, next, 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(wbuf[0] == prev);
    int g = -1;
    OK(MPI_Get_c(&g, 1, MPI_INT, next, 0, 1, MPI_INT, win));
    OK(MPI_Accumulate_c(&one, 1, MPI_INT, next, 1, 1, MPI_INT, MPI_REPLACE, win));
    OK(MPI_Win_fence(0, win));
    CHECK(g == rank && wbuf[1] == 1);
    OK(MPI_Win_free(&win));
    /* A shared window through the _c forms: every rank's part visible. */
    int *sbase;
    OK(MPI_Win_allocate_shared_c((MPI_Aint)sizeof(int), (MPI_Aint)sizeof(int), MPI_INFO_NULL,
                                 MPI_COMM_WORLD, &sbase, &win));
    *sbase = rank + 1000;
    OK(MPI_Win_fence(0, win));
    MPI_Aint qsize = 0, qunit = 0;
    int *qbase = NULL;
    OK(MPI_Win_shared_query_c(win, next, &qsize, &qunit, &qbase));
    CHECK(qsize == (MPI_Aint)sizeof(int) && qunit == (MPI_Aint)sizeof(int) && *qbase == next + 1000);
    OK(MPI_Win_fence(0, win));
    OK(MPI_Win_free(&win));

    /* Beyond INT_MAX: MPI_ERR_COUNT, on every rank, nothing sent. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Count huge = (MPI_Count)1 << 31;
    for (int i = 0; i < size; i++) {
        counts[i] = 1;
        displs[i] = 0;
    }
    counts[size - 1] = huge;
    CHECK(cls(MPI_Allgatherv_c(mine, 1, MPI_INT, back, counts, displs, MPI_INT,
                               MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    CHECK(cls(MPI_Send_init_c(mine, huge, MPI_INT, next, 11, MPI_COMM_WORLD, &q)) ==
          MPI_ERR_COUNT);
    MPI_Count hb[2] = {1, huge}, hd[2] = {0, 1};
    CHECK(cls(MPI_Type_indexed_c(2, hb, hd, MPI_INT, &t2)) == MPI_ERR_COUNT);
    pos = huge;
    CHECK(cls(MPI_Pack_c(src, 1, MPI_INT, dst, 4, &pos, MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    CHECK(pos == huge);
    /* Still in step. */
    int sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);

    free(types);
    free(counts);
    free(displs);
    free(all);
    free(back);
    report_ok("large_count_more");
    MPI_Finalize();
    return 0;
}
