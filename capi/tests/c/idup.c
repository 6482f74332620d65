/* MPI_Comm_idup is non-blocking: ranks that called it go on while another
 * rank has not called it yet (MPICH's comm/comm_idup: rank 0 first receives
 * an Ssend from every other rank, which those send after their idup; before,
 * idup ran a blocking dup and every rank waited forever). Also: two idups
 * pending at once on different communicators, a blocking dup while an idup
 * is pending (they must get different context ids), attributes copied. */
#include "check.h"

static int copies;

static int copy_fn(MPI_Comm c, int k, void *extra, void *in, void *out, int *flag) {
    (void)c;
    (void)k;
    (void)extra;
    copies++;
    *(void **)out = in;
    *flag = 1;
    return MPI_SUCCESS;
}

/* Sum of ranks over `c` must be the sum over `ref` (same group). */
static void same_group(MPI_Comm c, MPI_Comm ref) {
    int r, s, a, b;
    MPI_Comm_rank(ref, &r);
    OK(MPI_Allreduce(&r, &a, 1, MPI_INT, MPI_SUM, c));
    OK(MPI_Allreduce(&r, &b, 1, MPI_INT, MPI_SUM, ref));
    CHECK(a == b);
    int rc, sc;
    MPI_Comm_rank(c, &rc);
    MPI_Comm_size(c, &sc);
    MPI_Comm_size(ref, &s);
    CHECK(rc == r && sc == s);
}

int main(int argc, char **argv) {
    MPI_Init(&argc, &argv);
    int rank, size, buf[2] = {0, 0};
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    /* Staggered: rank 0 joins the idup only after every other rank's Ssend. */
    MPI_Comm dup1 = MPI_COMM_NULL;
    MPI_Request rq;
    if (rank == 0) {
        for (int i = 1; i < size; i++)
            OK(MPI_Recv(buf, 2, MPI_INT, i, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup1, &rq));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup1, &rq));
        OK(MPI_Ssend(buf, 2, MPI_INT, 0, 0, MPI_COMM_WORLD));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    }
    CHECK(dup1 != MPI_COMM_NULL);
    int cmp;
    OK(MPI_Comm_compare(dup1, MPI_COMM_WORLD, &cmp));
    CHECK(cmp == MPI_CONGRUENT);
    same_group(dup1, MPI_COMM_WORLD);

    /* Two pending at once (world and a split), a blocking dup meanwhile,
     * an attribute with a copy callback on the split. */
    MPI_Comm half, dup2 = MPI_COMM_NULL, dup3 = MPI_COMM_NULL, blocking;
    OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, rank, &half));
    int key;
    OK(MPI_Comm_create_keyval(copy_fn, MPI_COMM_NULL_DELETE_FN, &key, NULL));
    static int value = 42;
    OK(MPI_Comm_set_attr(half, key, &value));
    MPI_Request two[2];
    OK(MPI_Comm_idup(MPI_COMM_WORLD, &dup2, &two[0]));
    /* MPI-4.0's form with info hints (accepted, ignored). */
    OK(MPI_Comm_idup_with_info(half, MPI_INFO_NULL, &dup3, &two[1]));
    OK(MPI_Comm_dup(dup1, &blocking));
    OK(MPI_Waitall(2, two, MPI_STATUSES_IGNORE));
    same_group(dup2, MPI_COMM_WORLD);
    same_group(dup3, half);
    same_group(blocking, MPI_COMM_WORLD);
    int *got, flag = 0;
    OK(MPI_Comm_get_attr(dup3, key, &got, &flag));
    CHECK(flag && got == &value && *got == 42);
    CHECK(copies == 1);

    /* Traffic on each must not cross: same tag, same peer, four comms. */
    if (size > 1) {
        MPI_Comm cs[4] = {MPI_COMM_WORLD, dup1, dup2, blocking};
        int peer = rank ^ 1;
        if (peer < size) {
            int out[4], in[4];
            MPI_Request r[8];
            for (int i = 0; i < 4; i++) {
                out[i] = 100 * i + rank;
                OK(MPI_Irecv(&in[i], 1, MPI_INT, peer, 5, cs[3 - i], &r[i]));
            }
            for (int i = 0; i < 4; i++)
                OK(MPI_Isend(&out[3 - i], 1, MPI_INT, peer, 5, cs[i], &r[4 + i]));
            OK(MPI_Waitall(8, r, MPI_STATUSES_IGNORE));
            for (int i = 0; i < 4; i++) CHECK(in[i] == 100 * i + peer);
        }
    }

    /* Overlapping idups started in different orders (MPICH's
     * comm_idup_overlap): rank i and i + 1 share `primary` of i and
     * `secondary` of i + 1; each rank idups its primary, then its
     * secondary. With blocking dups this deadlocks; the agreements must
     * all finish. */
    if (size > 1) {
        MPI_Comm primary[2], secondary[2], tmp;
        for (int i = 0; i < size; i++) {
            if (rank == i) OK(MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &primary[0]));
            else if (rank == (i + 1) % size) OK(MPI_Comm_split(MPI_COMM_WORLD, 0, 0, &secondary[0]));
            else {
                OK(MPI_Comm_split(MPI_COMM_WORLD, 1, 0, &tmp));
                OK(MPI_Comm_free(&tmp));
            }
        }
        MPI_Request r2[2];
        OK(MPI_Comm_idup(primary[0], &primary[1], &r2[0]));
        OK(MPI_Comm_idup(secondary[0], &secondary[1], &r2[1]));
        OK(MPI_Waitall(2, r2, MPI_STATUSES_IGNORE));
        /* check the pairs' communicators in the order of i on every rank */
        for (int i = 0; i < size; i++) {
            if (i == rank) same_group(primary[1], primary[0]);
            if ((i + 1) % size == rank) same_group(secondary[1], secondary[0]);
        }
        for (int i = 0; i < 2; i++) {
            OK(MPI_Comm_free(&primary[i]));
            OK(MPI_Comm_free(&secondary[i]));
        }
    }

    OK(MPI_Comm_free(&dup1));
    OK(MPI_Comm_free(&dup2));
    OK(MPI_Comm_free(&dup3));
    OK(MPI_Comm_free(&blocking));
    OK(MPI_Comm_free(&half));
    OK(MPI_Comm_free_keyval(&key));
    report_ok("idup");
    MPI_Finalize();
    return 0;
}
