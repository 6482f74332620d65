/* Inter-communicators between the even and the odd world ranks: sizes and
 * groups, point-to-point traffic (eager and rendezvous, wildcards, probe),
 * a dup that keeps its traffic apart, a non-blocking dup, both merge
 * orders, and calls defined on intra-communicators only refused instead of
 * run on the local group. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        report_ok("intercomm");
        MPI_Finalize();
        return 0;
    }
    int odd = rank % 2, nodd = size / 2, neven = size - nodd;
    MPI_Comm local, ic, dup, merged;
    OK(MPI_Comm_split(MPI_COMM_WORLD, odd, rank, &local));
    /* Leaders: world 0 for the even group, world 1 for the odd one. */
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, odd ? 0 : 1, 12, &ic));
    int flag, lsize, lrank, rsize;
    OK(MPI_Comm_test_inter(ic, &flag));
    CHECK(flag);
    OK(MPI_Comm_test_inter(local, &flag));
    CHECK(!flag);
    OK(MPI_Comm_size(ic, &lsize));
    OK(MPI_Comm_rank(ic, &lrank));
    OK(MPI_Comm_remote_size(ic, &rsize));
    CHECK(lsize == (odd ? nodd : neven) && rsize == (odd ? neven : nodd) && lrank == rank / 2);
    /* The remote group: rank i of it is world rank 2i + (1 - odd). */
    MPI_Group rg, wg;
    OK(MPI_Comm_remote_group(ic, &rg));
    OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
    for (int i = 0; i < rsize; i++) {
        int w;
        OK(MPI_Group_translate_ranks(rg, 1, &i, wg, &w));
        CHECK(w == 2 * i + (1 - odd));
    }
    OK(MPI_Group_free(&rg));
    OK(MPI_Group_free(&wg));

    /* Local rank i talks to remote rank i (both exist for i < nodd). */
    if (lrank < nodd) {
        int out = rank, in = -1;
        MPI_Status st;
        OK(MPI_Sendrecv(&out, 1, MPI_INT, lrank, 3, &in, 1, MPI_INT, lrank, 3, ic, &st));
        CHECK(in == 2 * lrank + (1 - odd) && st.MPI_SOURCE == lrank && st.MPI_TAG == 3);
        /* 1 MiB: the rendezvous path, answered to the right process. */
        int n = 1 << 18;
        int *big = malloc(n * sizeof(int)), *got = malloc(n * sizeof(int));
        for (int k = 0; k < n; k++) big[k] = rank * 7 + k;
        OK(MPI_Sendrecv(big, n, MPI_INT, lrank, 4, got, n, MPI_INT, lrank, 4, ic,
                        MPI_STATUS_IGNORE));
        int from = 2 * lrank + (1 - odd);
        for (int k = 0; k < n; k += 4097) CHECK(got[k] == from * 7 + k);
        free(big);
        free(got);
        /* Wildcards and probe: the source is a rank of the remote group. */
        MPI_Request rq;
        OK(MPI_Isend(&out, 1, MPI_INT, lrank, 5, ic, &rq));
        OK(MPI_Probe(MPI_ANY_SOURCE, 5, ic, &st));
        CHECK(st.MPI_SOURCE == lrank);
        OK(MPI_Recv(&in, 1, MPI_INT, MPI_ANY_SOURCE, MPI_ANY_TAG, ic, &st));
        CHECK(in == from && st.MPI_SOURCE == lrank && st.MPI_TAG == 5);
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    }

    /* A dup has traffic of its own: the same tag on both arrives apart. */
    OK(MPI_Comm_dup(ic, &dup));
    OK(MPI_Comm_test_inter(dup, &flag));
    CHECK(flag);
    if (lrank < nodd) {
        int a = 100 + rank, b = 200 + rank, x = -1, y = -1;
        MPI_Request rq[2];
        OK(MPI_Isend(&a, 1, MPI_INT, lrank, 9, ic, &rq[0]));
        OK(MPI_Isend(&b, 1, MPI_INT, lrank, 9, dup, &rq[1]));
        OK(MPI_Recv(&y, 1, MPI_INT, lrank, 9, dup, MPI_STATUS_IGNORE));
        OK(MPI_Recv(&x, 1, MPI_INT, lrank, 9, ic, MPI_STATUS_IGNORE));
        OK(MPI_Waitall(2, rq, MPI_STATUSES_IGNORE));
        int from = 2 * lrank + (1 - odd);
        CHECK(x == 100 + from && y == 200 + from);
    }

    /* MPI_Comm_idup does not wait for the other processes: local rank 0
     * receives synchronous sends that the others make after starting
     * their idup, and only then starts its own (MPICH's comm_idup). */
    MPI_Comm nd;
    MPI_Request dr;
    if (lrank == 0) {
        for (int i = 1; i < rsize; i++) {
            int x;
            OK(MPI_Recv(&x, 1, MPI_INT, i, 21, ic, MPI_STATUS_IGNORE));
            CHECK(x == 2 * i + (1 - odd));
        }
        OK(MPI_Comm_idup(ic, &nd, &dr));
        OK(MPI_Wait(&dr, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Comm_idup(ic, &nd, &dr));
        OK(MPI_Ssend(&rank, 1, MPI_INT, 0, 21, ic));
        OK(MPI_Wait(&dr, MPI_STATUS_IGNORE));
    }
    int ndl, ndr, ndsum, rs = 0;
    OK(MPI_Comm_test_inter(nd, &flag));
    OK(MPI_Comm_size(nd, &ndl));
    OK(MPI_Comm_remote_size(nd, &ndr));
    CHECK(flag && ndl == lsize && ndr == rsize);
    OK(MPI_Allreduce(&rank, &ndsum, 1, MPI_INT, MPI_SUM, nd));
    for (int i = 0; i < rsize; i++) rs += 2 * i + (1 - odd);
    CHECK(ndsum == rs);
    if (lrank < nodd) {
        int x = -1;
        OK(MPI_Sendrecv(&rank, 1, MPI_INT, lrank, 22, &x, 1, MPI_INT, lrank, 22, nd,
                        MPI_STATUS_IGNORE));
        CHECK(x == 2 * lrank + (1 - odd));
    }
    OK(MPI_Comm_free(&nd));

    /* Merge, odd ranks high: the even group first. */
    int mrank, msize, sum;
    OK(MPI_Intercomm_merge(ic, odd, &merged));
    OK(MPI_Comm_size(merged, &msize));
    OK(MPI_Comm_rank(merged, &mrank));
    CHECK(msize == size && mrank == (odd ? neven + lrank : lrank));
    OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, merged));
    CHECK(sum == size * (size - 1) / 2);
    OK(MPI_Comm_free(&merged));
    /* The other order: even ranks high. */
    OK(MPI_Intercomm_merge(dup, !odd, &merged));
    OK(MPI_Comm_rank(merged, &mrank));
    CHECK(mrank == (odd ? lrank : nodd + lrank));
    OK(MPI_Comm_free(&merged));

    /* Calls MPI defines on intra-communicators only are refused with
     * MPI_ERR_COMM, not run on the local group (the collectives that are
     * defined on inter-communicators: intercoll.c). */
    OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN));
    int cls, one = 1, out1;
    MPI_Error_class(MPI_Scan(&one, &out1, 1, MPI_INT, MPI_SUM, ic), &cls);
    CHECK(cls == MPI_ERR_COMM);
    MPI_Comm cart;
    int dims[1] = {1}, periods[1] = {0};
    MPI_Error_class(MPI_Cart_create(ic, 1, dims, periods, 0, &cart), &cls);
    CHECK(cls == MPI_ERR_COMM);

    OK(MPI_Comm_free(&dup));
    OK(MPI_Comm_free(&ic));
    OK(MPI_Comm_free(&local));
    report_ok("intercomm");
    MPI_Finalize();
    return 0;
}
