/* Collectives on inter-communicators (even world ranks against odd ones):
 * every blocking collective in both directions, checked against values
 * computed here from world ranks; a derived datatype through the staged
 * path; MPI_Comm_split and MPI_Comm_create of an inter-communicator;
 * non-blocking forms outstanding together with point-to-point traffic;
 * reductions in rank order with a non-commutative op; persistent
 * collectives started in different orders by the two groups. */
#include "check.h"

static int odd, lsize, rsize, lrank;

/* World rank of remote rank i. */
static int rworld(int i) { return 2 * i + (1 - odd); }
/* Sum of the remote group's world ranks. */
static int rsum(void) {
    int s = 0;
    for (int i = 0; i < rsize; i++) s += rworld(i);
    return s;
}

/* A non-commutative, associative op: the left operand. */
static void left_op(void *in, void *inout, int *len, MPI_Datatype *dt) {
    (void)dt;
    memcpy(inout, in, *len * sizeof(int));
}

/* The root argument for a rooted call whose root is rank 0 of the group
 * with parity `rootodd`. */
static int root_arg(int rootodd) {
    if (odd == rootodd) return lrank == 0 ? MPI_ROOT : MPI_PROC_NULL;
    return 0;
}

static void rooted(MPI_Comm ic, int rootodd) {
    int world;
    MPI_Comm_rank(MPI_COMM_WORLD, &world);
    int root = root_arg(rootodd);
    int *buf = calloc(4 * (rsize + lsize) + 16, sizeof(int));
    /* bcast: 5 ints from the root to every remote process. */
    for (int k = 0; k < 5; k++) buf[k] = root == MPI_ROOT ? 1000 + k : -1;
    OK(MPI_Bcast(buf, 5, MPI_INT, root, ic));
    if (root >= 0)
        for (int k = 0; k < 5; k++) CHECK(buf[k] == 1000 + k);
    if (root == MPI_PROC_NULL) CHECK(buf[0] == -1);
    /* gather: two ints per remote process at the root. */
    int mine[2] = {world, world * 3};
    memset(buf, 0xff, 2 * rsize * sizeof(int));
    OK(MPI_Gather(mine, 2, MPI_INT, buf, 2, MPI_INT, root, ic));
    if (root == MPI_ROOT)
        for (int i = 0; i < rsize; i++) CHECK(buf[2 * i] == rworld(i) && buf[2 * i + 1] == 3 * rworld(i));
    /* scatter: block i (two ints) to remote process i. */
    if (root == MPI_ROOT)
        for (int i = 0; i < rsize; i++) buf[2 * i] = 7 * i, buf[2 * i + 1] = rworld(i);
    int got[2] = {-1, -1};
    OK(MPI_Scatter(buf, 2, MPI_INT, got, 2, MPI_INT, root, ic));
    if (root >= 0) CHECK(got[0] == 7 * lrank && got[1] == world);
    /* reduce: the remote group's sum of world ranks at the root. */
    int r = -1, v[2] = {world, 1};
    int res[2] = {-1, -1};
    OK(MPI_Reduce(v, res, 2, MPI_INT, MPI_SUM, root, ic));
    if (root == MPI_ROOT) CHECK(res[0] == rsum() && res[1] == rsize);
    (void)r;
    /* gatherv: remote process i sends i + 1 ints, placed at 8i. */
    int *counts = malloc(rsize * sizeof(int)), *displs = malloc(rsize * sizeof(int));
    for (int i = 0; i < rsize; i++) counts[i] = i + 1, displs[i] = 8 * i;
    int *big = calloc(8 * rsize + 8, sizeof(int));
    int send[8];
    for (int k = 0; k < 8; k++) send[k] = world * 10 + k;
    OK(MPI_Gatherv(send, lrank + 1, MPI_INT, big, counts, displs, MPI_INT, root, ic));
    if (root == MPI_ROOT)
        for (int i = 0; i < rsize; i++)
            for (int k = 0; k < 8; k++) CHECK(big[8 * i + k] == (k <= i ? rworld(i) * 10 + k : 0));
    free(big);
    free(counts);
    free(displs);
    free(buf);
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size < 2) {
        report_ok("intercoll");
        MPI_Finalize();
        return 0;
    }
    odd = rank % 2;
    MPI_Comm local, ic;
    OK(MPI_Comm_split(MPI_COMM_WORLD, odd, rank, &local));
    OK(MPI_Intercomm_create(local, 0, MPI_COMM_WORLD, odd ? 0 : 1, 7, &ic));
    OK(MPI_Comm_size(ic, &lsize));
    OK(MPI_Comm_rank(ic, &lrank));
    OK(MPI_Comm_remote_size(ic, &rsize));

    OK(MPI_Barrier(ic));
    rooted(ic, 0);
    rooted(ic, 1);

    /* allgather: every remote process's world rank, in remote rank order. */
    int *all = malloc(rsize * sizeof(int));
    OK(MPI_Allgather(&rank, 1, MPI_INT, all, 1, MPI_INT, ic));
    for (int i = 0; i < rsize; i++) CHECK(all[i] == rworld(i));
    /* allreduce: the remote group's sum, MAX on a second element. */
    int v[2] = {rank, rank}, s[2];
    OK(MPI_Allreduce(v, s, 1, MPI_INT, MPI_SUM, ic));
    CHECK(s[0] == rsum());
    OK(MPI_Allreduce(v, s, 2, MPI_INT, MPI_MAX, ic));
    CHECK(s[0] == rworld(rsize - 1) && s[1] == s[0]);
    /* alltoall: block i to remote process i. */
    int *out = malloc(rsize * sizeof(int)), *in = malloc(rsize * sizeof(int));
    for (int i = 0; i < rsize; i++) out[i] = rank * 100 + i;
    OK(MPI_Alltoall(out, 1, MPI_INT, in, 1, MPI_INT, ic));
    for (int i = 0; i < rsize; i++) CHECK(in[i] == rworld(i) * 100 + lrank);
    /* alltoallv: remote process i gets i + 1 copies of our rank. */
    int *sc = malloc(rsize * sizeof(int)), *sd = malloc(rsize * sizeof(int));
    int *rc = malloc(rsize * sizeof(int)), *rd = malloc(rsize * sizeof(int));
    int tot = 0;
    for (int i = 0; i < rsize; i++) sc[i] = i + 1, sd[i] = tot, tot += i + 1;
    int *vs = malloc(tot * sizeof(int));
    for (int k = 0; k < tot; k++) vs[k] = rank;
    for (int i = 0; i < rsize; i++) rc[i] = lrank + 1, rd[i] = i * (lrank + 1);
    int *vr = calloc(rsize * (lrank + 1), sizeof(int));
    OK(MPI_Alltoallv(vs, sc, sd, MPI_INT, vr, rc, rd, MPI_INT, ic));
    for (int i = 0; i < rsize; i++)
        for (int k = 0; k <= lrank; k++) CHECK(vr[i * (lrank + 1) + k] == rworld(i));
    /* reduce_scatter_block: both groups reduce lsize * rsize items; each
     * process gets rsize of the remote group's sums (local count rsize on
     * one side, lsize on the other: the same total). */
    int rcount = rsize;
    int *rsb = malloc(lsize * rcount * sizeof(int)), *rsr = malloc(rcount * sizeof(int));
    for (int k = 0; k < lsize * rcount; k++) rsb[k] = rank + k;
    OK(MPI_Reduce_scatter_block(rsb, rsr, rcount, MPI_INT, MPI_SUM, ic));
    for (int k = 0; k < rcount; k++) CHECK(rsr[k] == rsum() + rsize * (lrank * rcount + k));
    /* A derived type: every other int through MPI_Type_vector. */
    MPI_Datatype every2;
    OK(MPI_Type_vector(3, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_commit(&every2));
    int six[6] = {rank, -1, rank + 1, -1, rank + 2, -1};
    /* Its extent is 5 ints: block i starts at int 5i, its gaps stay. */
    int *dv = malloc((5 * rsize + 1) * sizeof(int));
    for (int k = 0; k < 5 * rsize + 1; k++) dv[k] = -7;
    OK(MPI_Allgather(six, 1, every2, dv, 1, every2, ic));
    for (int i = 0; i < rsize; i++)
        for (int k = 0; k < 3; k++) CHECK(dv[5 * i + 2 * k] == rworld(i) + k);
    for (int i = 0; i < rsize; i++) CHECK(dv[5 * i + 1] == -7 && dv[5 * i + 3] == -7);
    OK(MPI_Type_free(&every2));

    /* Persistent collectives on the inter-communicator, started in
     * different orders by the two groups: they match by init order. */
    MPI_Request pr[3];
    int pb = -1, psum = -1;
    OK(MPI_Bcast_init(&pb, 1, MPI_INT, root_arg(0), ic, MPI_INFO_NULL, &pr[0]));
    OK(MPI_Barrier_init(ic, MPI_INFO_NULL, &pr[1]));
    OK(MPI_Allreduce_init(&rank, &psum, 1, MPI_INT, MPI_SUM, ic, MPI_INFO_NULL, &pr[2]));
    for (int it = 0; it < 3; it++) {
        if (!odd && lrank == 0) pb = 70 + it;
        if (odd) {
            OK(MPI_Start(&pr[2]));
            OK(MPI_Start(&pr[1]));
            OK(MPI_Start(&pr[0]));
        } else {
            OK(MPI_Startall(3, pr));
        }
        OK(MPI_Waitall(3, pr, MPI_STATUSES_IGNORE));
        if (odd) CHECK(pb == 70 + it);
        CHECK(psum == rsum());
    }
    for (int k = 0; k < 3; k++) OK(MPI_Request_free(&pr[k]));

    /* Split: parity of the local rank, reversed order by key. Local ranks
     * 0, 2, ... of both groups meet, and 1, 3, ... */
    MPI_Comm sp;
    OK(MPI_Comm_split(ic, lrank % 2, -lrank, &sp));
    int esl = (lsize + 1 - lrank % 2) / 2, esr = (rsize + 1 - lrank % 2) / 2;
    if (esr == 0) {
        /* A colour with processes in one group only: no communicator. */
        CHECK(sp == MPI_COMM_NULL);
    } else {
        int sl, sr, srank, x;
        OK(MPI_Comm_size(sp, &sl));
        OK(MPI_Comm_remote_size(sp, &sr));
        OK(MPI_Comm_rank(sp, &srank));
        CHECK(sl == esl && sr == esr && srank == sl - 1 - lrank / 2);
        OK(MPI_Allreduce(&rank, &x, 1, MPI_INT, MPI_MAX, sp));
        int mx = -1;
        for (int i = lrank % 2; i < rsize; i += 2) mx = rworld(i) > mx ? rworld(i) : mx;
        CHECK(x == mx);
        /* Local rank j and remote rank j talk: remote rank j is the j-th
         * remote member of our parity counted from the highest old rank. */
        if (srank < sr) {
            int from, last = rsize - 1 - ((rsize - 1 - lrank % 2) % 2);
            OK(MPI_Sendrecv(&rank, 1, MPI_INT, srank, 1, &from, 1, MPI_INT, srank, 1, sp,
                            MPI_STATUS_IGNORE));
            CHECK(from == rworld(last - 2 * srank));
        }
        OK(MPI_Comm_free(&sp));
    }
    /* Create: the local groups without their rank 0. */
    MPI_Group g, g0;
    OK(MPI_Comm_group(ic, &g));
    int zero = 0;
    OK(MPI_Group_excl(g, 1, &zero, &g0));
    MPI_Comm cr;
    OK(MPI_Comm_create(ic, g0, &cr));
    if (lrank == 0 || lsize < 2 || rsize < 2) {
        CHECK(cr == MPI_COMM_NULL);
    } else {
        int cs, crs, x;
        OK(MPI_Comm_size(cr, &cs));
        OK(MPI_Comm_remote_size(cr, &crs));
        CHECK(cs == lsize - 1 && crs == rsize - 1);
        OK(MPI_Allreduce(&rank, &x, 1, MPI_INT, MPI_SUM, cr));
        CHECK(x == rsum() - rworld(0));
        OK(MPI_Comm_free(&cr));
    }
    OK(MPI_Group_free(&g0));
    OK(MPI_Group_free(&g));

    /* In place has no meaning here; non-blocking forms are not implemented. */
    OK(MPI_Comm_set_errhandler(ic, MPI_ERRORS_RETURN));
    int cls;
    MPI_Error_class(MPI_Allreduce(MPI_IN_PLACE, s, 1, MPI_INT, MPI_SUM, ic), &cls);
    CHECK(cls == MPI_ERR_BUFFER);

    /* Reductions with a non-commutative op (the left operand: the result is
     * the remote group's rank 0 only if the vectors combine in rank order),
     * blocking and not. */
    MPI_Op left;
    OK(MPI_Op_create(left_op, 0, &left));
    int lv[2] = {rank, -rank}, lr[2] = {-9, -9};
    OK(MPI_Allreduce(lv, lr, 2, MPI_INT, left, ic));
    CHECK(lr[0] == rworld(0) && lr[1] == -rworld(0));
    MPI_Request nr[4];
    int ia[2] = {-9, -9}, ir[2] = {-9, -9}, isum = -1;
    OK(MPI_Iallreduce(lv, ia, 2, MPI_INT, left, ic, &nr[0]));
    int rroot = root_arg(1);
    OK(MPI_Ireduce(lv, ir, 2, MPI_INT, left, rroot, ic, &nr[1]));
    OK(MPI_Iallreduce(&rank, &isum, 1, MPI_INT, MPI_SUM, ic, &nr[2]));
    /* ireduce_scatter_block as the blocking one above. */
    int *irsr = malloc(rcount * sizeof(int));
    OK(MPI_Ireduce_scatter_block(rsb, irsr, rcount, MPI_INT, MPI_SUM, ic, &nr[3]));
    OK(MPI_Waitall(4, nr, MPI_STATUSES_IGNORE));
    CHECK(ia[0] == rworld(0) && ia[1] == -rworld(0) && isum == rsum());
    if (rroot == MPI_ROOT) CHECK(ir[0] == rworld(0) && ir[1] == -rworld(0));
    else CHECK(ir[0] == -9);
    for (int k = 0; k < rcount; k++) CHECK(irsr[k] == rsum() + rsize * (lrank * rcount + k));
    /* ireduce_scatter with uneven counts: local rank i gets i + 1 items of
     * a vector both groups size alike (the larger group's triangle). */
    int big = lsize > rsize ? lsize : rsize, tri = big * (big + 1) / 2;
    int *cnt = malloc(lsize * sizeof(int)), *vin = malloc(tri * sizeof(int));
    int given = 0;
    for (int i = 0; i < lsize; i++) cnt[i] = i + 1, given += i + 1;
    cnt[lsize - 1] += tri - given; /* the last one takes the rest */
    for (int k = 0; k < tri; k++) vin[k] = rank * k;
    int at = 0;
    for (int i = 0; i < lrank; i++) at += cnt[i];
    int *vout = malloc(cnt[lrank] * sizeof(int));
    OK(MPI_Ireduce_scatter(vin, vout, cnt, MPI_INT, MPI_SUM, ic, &nr[0]));
    OK(MPI_Wait(&nr[0], MPI_STATUS_IGNORE));
    for (int k = 0; k < cnt[lrank]; k++) CHECK(vout[k] == rsum() * (at + k));
    OK(MPI_Reduce_scatter(vin, vout, cnt, MPI_INT, MPI_SUM, ic));
    for (int k = 0; k < cnt[lrank]; k++) CHECK(vout[k] == rsum() * (at + k));
    free(cnt); free(vin); free(vout); free(irsr);
    OK(MPI_Op_free(&left));

    /* Non-blocking forms, several outstanding at once with point-to-point
     * traffic on the same inter-communicator between them. */
    MPI_Request rqs[5];
    int *nb_all = malloc(rsize * sizeof(int)), *nb_in = malloc(rsize * sizeof(int));
    int bc[3] = {-1, -1, -1}, pp = -1;
    for (int i = 0; i < rsize; i++) out[i] = rank * 1000 + i;
    OK(MPI_Ibarrier(ic, &rqs[0]));
    OK(MPI_Iallgather(&rank, 1, MPI_INT, nb_all, 1, MPI_INT, ic, &rqs[1]));
    if (odd && lrank == 0) bc[0] = 5, bc[1] = 6, bc[2] = 7;
    OK(MPI_Ibcast(bc, 3, MPI_INT, odd ? (lrank == 0 ? MPI_ROOT : MPI_PROC_NULL) : 0, ic, &rqs[2]));
    OK(MPI_Ialltoall(out, 1, MPI_INT, nb_in, 1, MPI_INT, ic, &rqs[3]));
    int peer = lrank % rsize;
    /* Every local rank sends one message to remote rank lrank % rsize;
     * remote rank j receives from every local rank i with i % lsize' == j. */
    OK(MPI_Isend(&rank, 1, MPI_INT, peer, 44, ic, &rqs[4]));
    int expect = 0;
    for (int i = 0; i < rsize; i++)
        if (i % lsize == lrank) expect++;
    for (int k = 0; k < expect; k++) {
        MPI_Status st;
        OK(MPI_Recv(&pp, 1, MPI_INT, MPI_ANY_SOURCE, 44, ic, &st));
        CHECK(pp == rworld(st.MPI_SOURCE) && st.MPI_SOURCE % lsize == lrank);
    }
    OK(MPI_Waitall(5, rqs, MPI_STATUSES_IGNORE));
    for (int i = 0; i < rsize; i++) CHECK(nb_all[i] == rworld(i) && nb_in[i] == rworld(i) * 1000 + lrank);
    if (!odd) CHECK(bc[0] == 5 && bc[1] == 6 && bc[2] == 7);
    else CHECK(lrank == 0 || bc[0] == -1);
    free(nb_all);
    free(nb_in);
    OK(MPI_Barrier(ic));

    free(all); free(out); free(in); free(sc); free(sd); free(rc); free(rd); free(vs); free(vr);
    free(rsb); free(rsr); free(dv);
    OK(MPI_Comm_free(&ic));
    OK(MPI_Comm_free(&local));
    report_ok("intercoll");
    MPI_Finalize();
    return 0;
}
