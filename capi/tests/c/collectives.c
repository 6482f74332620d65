/* Collectives, communicators and groups. 2-4 ranks. */
#include "check.h"

static void my_max(void *in, void *inout, int *len, MPI_Datatype *dt) {
    int i;
    (void)dt;
    for (i = 0; i < *len; i++) {
        int a = ((int *)in)[i], *b = &((int *)inout)[i];
        if (a > *b) *b = a;
    }
}

int main(int argc, char **argv) {
    int rank, size, i;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_Barrier(MPI_COMM_WORLD));

    int root;
    for (root = 0; root < size; root++) {
        double v[5] = {0};
        if (rank == root) for (i = 0; i < 5; i++) v[i] = root + i * 0.5;
        OK(MPI_Bcast(v, 5, MPI_DOUBLE, root, MPI_COMM_WORLD));
        for (i = 0; i < 5; i++) CHECK(v[i] == root + i * 0.5);
        int x = rank + 1, sum = -1;
        OK(MPI_Reduce(&x, &sum, 1, MPI_INT, MPI_SUM, root, MPI_COMM_WORLD));
        if (rank == root) CHECK(sum == size * (size + 1) / 2);
        int *all = malloc(sizeof(int) * size * 2), mine[2] = {rank, -rank};
        OK(MPI_Gather(mine, 2, MPI_INT, all, 2, MPI_INT, root, MPI_COMM_WORLD));
        if (rank == root) for (i = 0; i < size; i++) CHECK(all[2 * i] == i && all[2 * i + 1] == -i);
        for (i = 0; i < 2 * size; i++) all[i] = i * 7;
        int got[2];
        OK(MPI_Scatter(all, 2, MPI_INT, got, 2, MPI_INT, root, MPI_COMM_WORLD));
        CHECK(got[0] == rank * 14 && got[1] == rank * 14 + 7);
        free(all);
    }
    /* Allreduce with several ops, in place, MAXLOC, user op. */
    {
        long x = rank * 10, r;
        OK(MPI_Allreduce(&x, &r, 1, MPI_LONG, MPI_MAX, MPI_COMM_WORLD));
        CHECK(r == (size - 1) * 10);
        double d[3] = {rank, 1, 2};
        OK(MPI_Allreduce(MPI_IN_PLACE, d, 3, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD));
        CHECK(d[0] == size * (size - 1) / 2.0 && d[1] == size && d[2] == 2 * size);
        struct { int v, i; } in = {(rank * 7) % size, rank}, out;
        OK(MPI_Allreduce(&in, &out, 1, MPI_2INT, MPI_MAXLOC, MPI_COMM_WORLD));
        int best = -1, at = -1;
        for (i = 0; i < size; i++) if ((i * 7) % size > best) { best = (i * 7) % size; at = i; }
        CHECK(out.v == best && out.i == at);
        MPI_Op op;
        OK(MPI_Op_create(my_max, 1, &op));
        int y = 100 - rank, m;
        OK(MPI_Allreduce(&y, &m, 1, MPI_INT, op, MPI_COMM_WORLD));
        CHECK(m == 100);
        int comm_flag;
        OK(MPI_Op_commutative(op, &comm_flag)); CHECK(comm_flag == 1);
        OK(MPI_Op_free(&op)); CHECK(op == MPI_OP_NULL);
    }
    /* Allgather, alltoall, scan, exscan, v-variants. */
    {
        int *ag = malloc(sizeof(int) * size), *a2 = malloc(sizeof(int) * size), *b2 = malloc(sizeof(int) * size);
        OK(MPI_Allgather(&rank, 1, MPI_INT, ag, 1, MPI_INT, MPI_COMM_WORLD));
        for (i = 0; i < size; i++) CHECK(ag[i] == i);
        for (i = 0; i < size; i++) a2[i] = rank * 100 + i;
        OK(MPI_Alltoall(a2, 1, MPI_INT, b2, 1, MPI_INT, MPI_COMM_WORLD));
        for (i = 0; i < size; i++) CHECK(b2[i] == i * 100 + rank);
        int sc, ex = -5;
        int one = rank + 1;
        OK(MPI_Scan(&one, &sc, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        CHECK(sc == (rank + 1) * (rank + 2) / 2);
        OK(MPI_Exscan(&one, &ex, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        if (rank > 0) CHECK(ex == rank * (rank + 1) / 2);
        int *cnts = malloc(sizeof(int) * size), *dsp = malloc(sizeof(int) * size), tot = 0;
        for (i = 0; i < size; i++) { cnts[i] = i + 1; dsp[i] = tot; tot += i + 1; }
        int *mine = malloc(sizeof(int) * (rank + 1)), *allv = malloc(sizeof(int) * tot);
        for (i = 0; i <= rank; i++) mine[i] = rank;
        OK(MPI_Allgatherv(mine, rank + 1, MPI_INT, allv, cnts, dsp, MPI_INT, MPI_COMM_WORLD));
        for (i = 0; i < size; i++) { int k; for (k = 0; k < cnts[i]; k++) CHECK(allv[dsp[i] + k] == i); }
        OK(MPI_Gatherv(mine, rank + 1, MPI_INT, allv, cnts, dsp, MPI_INT, 0, MPI_COMM_WORLD));
        free(ag); free(a2); free(b2); free(cnts); free(dsp); free(mine); free(allv);
    }
    /* Non-blocking collectives. */
    {
        MPI_Request r[3];
        int x = rank, s = 0, b = rank == 0 ? 77 : 0;
        OK(MPI_Iallreduce(&x, &s, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &r[0]));
        OK(MPI_Ibcast(&b, 1, MPI_INT, 0, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Ibarrier(MPI_COMM_WORLD, &r[2]));
        OK(MPI_Waitall(3, r, MPI_STATUSES_IGNORE));
        CHECK(s == size * (size - 1) / 2 && b == 77);
        int *g = malloc(sizeof(int) * size), sc = -1, pre = -1, piece = -1;
        for (i = 0; i < size; i++) g[i] = rank == size - 1 ? 1000 + i : -1;
        MPI_Request q[4];
        int v = rank * 2;
        int *gat = malloc(sizeof(int) * size);
        OK(MPI_Igather(&v, 1, MPI_INT, gat, 1, MPI_INT, 0, MPI_COMM_WORLD, &q[0]));
        OK(MPI_Iscatter(g, 1, MPI_INT, &piece, 1, MPI_INT, size - 1, MPI_COMM_WORLD, &q[1]));
        OK(MPI_Iscan(&v, &sc, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[2]));
        OK(MPI_Iexscan(&v, &pre, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD, &q[3]));
        OK(MPI_Waitall(4, q, MPI_STATUSES_IGNORE));
        if (rank == 0) for (i = 0; i < size; i++) CHECK(gat[i] == 2 * i);
        CHECK(piece == 1000 + rank);
        CHECK(sc == rank * (rank + 1));
        if (rank > 0) CHECK(pre == (rank - 1) * rank);
        /* Reduce_scatter with uneven counts: rank i gets i+1 elements. */
        int tot = size * (size + 1) / 2, *rc = malloc(sizeof(int) * size);
        int *in = malloc(sizeof(int) * tot), out[64];
        for (i = 0; i < size; i++) rc[i] = i + 1;
        for (i = 0; i < tot; i++) in[i] = i + rank;
        OK(MPI_Reduce_scatter(in, out, rc, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
        int off = rank * (rank + 1) / 2;
        for (i = 0; i <= rank; i++) CHECK(out[i] == size * (off + i) + size * (size - 1) / 2);
        /* Alltoallw: ints to everyone, byte displacements. */
        int *sw = malloc(sizeof(int) * size), *rw = malloc(sizeof(int) * size);
        int *wc = malloc(sizeof(int) * size), *wd = malloc(sizeof(int) * size);
        MPI_Datatype *wt = malloc(sizeof(MPI_Datatype) * size);
        for (i = 0; i < size; i++) { sw[i] = rank * 10 + i; wc[i] = 1; wd[i] = i * (int)sizeof(int); wt[i] = MPI_INT; }
        OK(MPI_Alltoallw(sw, wc, wd, wt, rw, wc, wd, wt, MPI_COMM_WORLD));
        for (i = 0; i < size; i++) CHECK(rw[i] == i * 10 + rank);
        free(sw); free(rw); free(wc); free(wd); free(wt);
        free(g); free(gat); free(rc); free(in);
    }
    /* Communicators and groups. */
    {
        MPI_Comm dup, half;
        OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup));
        int res;
        OK(MPI_Comm_compare(MPI_COMM_WORLD, dup, &res)); CHECK(res == MPI_CONGRUENT);
        OK(MPI_Comm_split(MPI_COMM_WORLD, rank % 2, -rank, &half));
        int hr, hs;
        OK(MPI_Comm_rank(half, &hr)); OK(MPI_Comm_size(half, &hs));
        CHECK(hs == (size + 1 - rank % 2) / 2);
        int sum;
        OK(MPI_Allreduce(&rank, &sum, 1, MPI_INT, MPI_SUM, half));
        int expect = 0;
        for (i = rank % 2; i < size; i += 2) expect += i;
        CHECK(sum == expect);
        /* key = -rank reverses the order */
        CHECK(hr == hs - 1 - rank / 2);
        /* point-to-point on a derived communicator does not mix with world */
        int tok = rank, got = -1;
        OK(MPI_Sendrecv(&tok, 1, MPI_INT, (rank + 1) % size, 0, &got, 1, MPI_INT, (rank + size - 1) % size, 0, dup, MPI_STATUS_IGNORE));
        CHECK(got == (rank + size - 1) % size);
        MPI_Group wg, eg, ig;
        OK(MPI_Comm_group(MPI_COMM_WORLD, &wg));
        int zero = 0;
        OK(MPI_Group_excl(wg, 1, &zero, &eg));
        int gs, gr;
        OK(MPI_Group_size(eg, &gs)); CHECK(gs == size - 1);
        OK(MPI_Group_rank(eg, &gr)); CHECK(gr == (rank == 0 ? MPI_UNDEFINED : rank - 1));
        OK(MPI_Group_incl(wg, 1, &zero, &ig));
        int tr, r0 = 0;
        OK(MPI_Group_translate_ranks(ig, 1, &r0, wg, &tr)); CHECK(tr == 0);
        MPI_Comm sub;
        OK(MPI_Comm_create(MPI_COMM_WORLD, eg, &sub));
        if (rank == 0) CHECK(sub == MPI_COMM_NULL);
        else { int ss; OK(MPI_Comm_size(sub, &ss)); CHECK(ss == size - 1); OK(MPI_Comm_free(&sub)); }
        char nm[MPI_MAX_OBJECT_NAME]; int nl;
        OK(MPI_Comm_set_name(dup, "dup-of-world"));
        OK(MPI_Comm_get_name(dup, nm, &nl)); CHECK(strcmp(nm, "dup-of-world") == 0);
        OK(MPI_Comm_get_name(MPI_COMM_WORLD, nm, &nl)); CHECK(strcmp(nm, "MPI_COMM_WORLD") == 0);
        OK(MPI_Group_free(&wg)); OK(MPI_Group_free(&eg)); OK(MPI_Group_free(&ig));
        OK(MPI_Comm_free(&half)); OK(MPI_Comm_free(&dup));
        CHECK(dup == MPI_COMM_NULL);
    }
    report_ok("collectives");
    OK(MPI_Finalize());
    return 0;
}
