/* MPI-4.0 large-count forms (MPI_X_c): the same results as the int calls
 * for counts that fit an int, the queries over MPI_Count, and
 * MPI_ERR_COUNT (not a hang, not a truncation) for a count beyond INT_MAX
 * in a call that takes int counts only (docs/capi.md "Large counts";
 * large_messages.c sends such counts). */
#include "check.h"

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
    enum { N = 1000 };
    int out[N], in[N];
    for (int i = 0; i < N; i++)
        out[i] = rank * 10000 + i;

    /* Point-to-point: a ring with Isend_c/Recv_c, then Sendrecv_c. */
    MPI_Request rq;
    MPI_Status st;
    MPI_Count cnt = -1;
    OK(MPI_Isend_c(out, (MPI_Count)N, MPI_INT, next, 1, MPI_COMM_WORLD, &rq));
    OK(MPI_Recv_c(in, (MPI_Count)N, MPI_INT, prev, 1, MPI_COMM_WORLD, &st));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    OK(MPI_Get_count_c(&st, MPI_INT, &cnt));
    CHECK(cnt == N);
    OK(MPI_Get_elements_c(&st, MPI_SHORT, &cnt));
    CHECK(cnt == 2 * N);
    for (int i = 0; i < N; i++)
        CHECK(in[i] == prev * 10000 + i);
    OK(MPI_Irecv_c(in, (MPI_Count)N, MPI_INT, prev, 2, MPI_COMM_WORLD, &rq));
    OK(MPI_Send_c(out, (MPI_Count)(N / 2), MPI_INT, next, 2, MPI_COMM_WORLD));
    OK(MPI_Wait(&rq, &st));
    OK(MPI_Get_count_c(&st, MPI_INT, &cnt));
    CHECK(cnt == N / 2);
    OK(MPI_Sendrecv_c(out, 3, MPI_INT, next, 3, in, 3, MPI_INT, prev, 3, MPI_COMM_WORLD, &st));
    CHECK(in[2] == prev * 10000 + 2 && st.MPI_SOURCE == prev);

    /* Collectives. */
    int v = rank == 0 ? 77 : -1;
    OK(MPI_Bcast_c(&v, 1, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(v == 77);
    long long one = 1, sum = 0;
    OK(MPI_Allreduce_c(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);
    sum = 0;
    OK(MPI_Reduce_c(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD));
    CHECK(rank != 0 || sum == size);
    sum = 0;
    OK(MPI_Iallreduce_c(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(sum == size);
    v = rank == 0 ? 78 : -1;
    OK(MPI_Ibcast_c(&v, 1, MPI_INT, 0, MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(v == 78);
    int *all = malloc(sizeof(int) * 2 * size), *back = malloc(sizeof(int) * 2 * size);
    CHECK(all && back);
    int two[2] = {rank, -rank};
    OK(MPI_Allgather_c(two, 2, MPI_INT, all, 2, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        CHECK(all[2 * r] == r && all[2 * r + 1] == -r);
    OK(MPI_Gather_c(two, 2, MPI_INT, back, 2, MPI_INT, 0, MPI_COMM_WORLD));
    if (rank == 0)
        for (int r = 0; r < 2 * size; r++)
            CHECK(back[r] == all[r]);
    int mine[2] = {-1, -1};
    OK(MPI_Scatter_c(all, 2, MPI_INT, mine, 2, MPI_INT, 0, MPI_COMM_WORLD));
    CHECK(mine[0] == rank && mine[1] == -rank);
    for (int r = 0; r < size; r++)
        all[2 * r] = all[2 * r + 1] = rank * 100 + r;
    OK(MPI_Alltoall_c(all, 2, MPI_INT, back, 2, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        CHECK(back[2 * r] == r * 100 + rank && back[2 * r + 1] == r * 100 + rank);
    /* Alltoallv_c: one int to each rank, at displacement 2r. */
    MPI_Count *counts = malloc(sizeof(MPI_Count) * size);
    MPI_Aint *displs = malloc(sizeof(MPI_Aint) * size);
    CHECK(counts && displs);
    for (int r = 0; r < size; r++) {
        counts[r] = 1;
        displs[r] = 2 * r;
        back[2 * r] = -5;
    }
    OK(MPI_Alltoallv_c(all, counts, displs, MPI_INT, back, counts, displs, MPI_INT, MPI_COMM_WORLD));
    for (int r = 0; r < size; r++)
        CHECK(back[2 * r] == r * 100 + rank);

    /* Scan, exscan, reduce_scatter_block, reduce_local, ireduce. */
    long long pre = 0;
    OK(MPI_Scan_c(&one, &pre, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(pre == rank + 1);
    pre = -1;
    OK(MPI_Exscan_c(&one, &pre, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(rank == 0 || pre == rank);
    long long *ones = malloc(sizeof(long long) * size), blk = 0;
    CHECK(ones != NULL);
    for (int r = 0; r < size; r++)
        ones[r] = r;
    OK(MPI_Reduce_scatter_block_c(ones, &blk, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(blk == (long long)rank * size);
    long long acc = 5;
    OK(MPI_Reduce_local_c(&one, &acc, 1, MPI_LONG_LONG, MPI_SUM));
    CHECK(acc == 6);
    sum = 0;
    OK(MPI_Ireduce_c(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, 0, MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    CHECK(rank != 0 || sum == size);
    free(ones);
    /* The non-blocking gather, scatter, allgather, alltoall. */
    MPI_Request four[4];
    int gat[2] = {rank, rank}, *g = malloc(sizeof(int) * 2 * size), sc[2] = {-1, -1};
    int *ag = malloc(sizeof(int) * 2 * size), *at = malloc(sizeof(int) * 2 * size);
    int *src = malloc(sizeof(int) * 2 * size);
    CHECK(g && ag && at && src);
    for (int r = 0; r < 2 * size; r++)
        src[r] = rank * 1000 + r;
    OK(MPI_Igather_c(gat, 2, MPI_INT, g, 2, MPI_INT, 0, MPI_COMM_WORLD, &four[0]));
    OK(MPI_Iscatter_c(src, 2, MPI_INT, sc, 2, MPI_INT, 0, MPI_COMM_WORLD, &four[1]));
    OK(MPI_Iallgather_c(gat, 2, MPI_INT, ag, 2, MPI_INT, MPI_COMM_WORLD, &four[2]));
    OK(MPI_Ialltoall_c(src, 2, MPI_INT, at, 2, MPI_INT, MPI_COMM_WORLD, &four[3]));
    OK(MPI_Waitall(4, four, MPI_STATUSES_IGNORE));
    for (int r = 0; r < size; r++) {
        CHECK(rank != 0 || (g[2 * r] == r && g[2 * r + 1] == r));
        CHECK(ag[2 * r] == r && ag[2 * r + 1] == r);
        CHECK(at[2 * r] == r * 1000 + 2 * rank && at[2 * r + 1] == r * 1000 + 2 * rank + 1);
    }
    CHECK(sc[0] == 2 * rank && sc[1] == 2 * rank + 1);
    free(g);
    free(ag);
    free(at);
    free(src);

    /* Datatypes. */
    MPI_Datatype vec, hvec;
    OK(MPI_Type_vector_c(3, 2, 4, MPI_INT, &vec));
    OK(MPI_Type_create_hvector_c(3, 2, 16, MPI_INT, &hvec));
    MPI_Count vs = 0, hs = 0, vl = -1, ve = 0, hl = -1, he = 0;
    OK(MPI_Type_size_c(vec, &vs));
    OK(MPI_Type_size_c(hvec, &hs));
    OK(MPI_Type_get_extent_c(vec, &vl, &ve));
    OK(MPI_Type_get_extent_c(hvec, &hl, &he));
    CHECK(vs == 24 && hs == 24 && vl == 0 && hl == 0 && ve == 40 && he == 40);
    OK(MPI_Type_free(&vec));
    OK(MPI_Type_free(&hvec));
    MPI_Datatype c3;
    OK(MPI_Type_contiguous_c(3, MPI_INT, &c3));
    OK(MPI_Type_commit(&c3));
    MPI_Count sz = 0, lb = -1, ext = 0;
    OK(MPI_Type_size_c(c3, &sz));
    OK(MPI_Type_get_extent_c(c3, &lb, &ext));
    CHECK(sz == 12 && lb == 0 && ext == 12);
    OK(MPI_Type_get_true_extent_c(c3, &lb, &ext));
    CHECK(lb == 0 && ext == 12);
    OK(MPI_Type_free(&c3));

    /* Beyond INT_MAX where only int counts are taken (every call but
     * point-to-point and bcast, which large_messages.c runs with such
     * counts): MPI_ERR_COUNT on every rank, nothing sent. A negative
     * count beyond int is MPI_ERR_COUNT in the calls that take any count. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    MPI_Count huge = (MPI_Count)1 << 31;
    CHECK(cls(MPI_Allreduce_c(out, in, huge, MPI_INT, MPI_SUM, MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    CHECK(cls(MPI_Gather_c(out, huge, MPI_INT, in, huge, MPI_INT, 0, MPI_COMM_WORLD)) ==
          MPI_ERR_COUNT);
    CHECK(cls(MPI_Send_c(out, -huge - 1, MPI_INT, next, 4, MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    CHECK(cls(MPI_Bcast_c(out, -huge - 1, MPI_INT, 0, MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    counts[0] = huge;
    CHECK(cls(MPI_Alltoallv_c(all, counts, displs, MPI_INT, back, counts, displs, MPI_INT,
                              MPI_COMM_WORLD)) == MPI_ERR_COUNT);
    CHECK(cls(MPI_Type_contiguous_c(huge, MPI_INT, &c3)) == MPI_ERR_COUNT);
    MPI_Request pr;
    CHECK(cls(MPI_Allreduce_init_c(out, in, huge, MPI_INT, MPI_SUM, MPI_COMM_WORLD,
                                   MPI_INFO_NULL, &pr)) == MPI_ERR_COUNT);
    /* The persistent forms with MPI_Count counts that fit. */
    long long pacc = 0, pmine = rank + 1;
    OK(MPI_Allreduce_init_c(&pmine, &pacc, (MPI_Count)1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD,
                            MPI_INFO_NULL, &pr));
    for (int it = 0; it < 2; it++) {
        OK(MPI_Start(&pr));
        OK(MPI_Wait(&pr, MPI_STATUS_IGNORE));
        CHECK(pacc == (long long)size * (size + 1) / 2);
    }
    OK(MPI_Request_free(&pr));
    int *ga = malloc(size * sizeof(int)), gv = 3 * rank;
    OK(MPI_Allgather_init_c(&gv, (MPI_Count)1, MPI_INT, ga, (MPI_Count)1, MPI_INT,
                            MPI_COMM_WORLD, MPI_INFO_NULL, &pr));
    OK(MPI_Start(&pr));
    OK(MPI_Wait(&pr, MPI_STATUS_IGNORE));
    for (int i = 0; i < size; i++) CHECK(ga[i] == 3 * i);
    OK(MPI_Request_free(&pr));
    free(ga);
    /* Still in step. */
    sum = 0;
    OK(MPI_Allreduce_c(&one, &sum, 1, MPI_LONG_LONG, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == size);
    free(all);
    free(back);
    free(counts);
    free(displs);
    report_ok("large_count");
    OK(MPI_Finalize());
    return 0;
}
