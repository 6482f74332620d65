/* Point-to-point: every send mode, non-blocking forms, test/wait families,
 * probe and matched probe, wildcards, truncation, cancel. 2+ ranks. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, i;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size >= 2);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    /* Ring with blocking send/recv in all modes (ordered to avoid deadlock). */
    int modes;
    for (modes = 0; modes < 4; modes++) {
        int out[64], in[64];
        for (i = 0; i < 64; i++) out[i] = rank * 1000 + i + modes;
        MPI_Status st;
        char bbuf[4096 + MPI_BSEND_OVERHEAD];
        if (modes == 3) OK(MPI_Buffer_attach(bbuf, sizeof bbuf));
        if (rank % 2 == 0) {
            switch (modes) {
            case 0: OK(MPI_Send(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            case 1: OK(MPI_Ssend(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            case 2: OK(MPI_Send(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            case 3: OK(MPI_Bsend(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            }
            OK(MPI_Recv(in, 64, MPI_INT, prev, 10 + modes, MPI_COMM_WORLD, &st));
        } else {
            OK(MPI_Recv(in, 64, MPI_INT, prev, 10 + modes, MPI_COMM_WORLD, &st));
            switch (modes) {
            case 0: OK(MPI_Send(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            case 1: OK(MPI_Ssend(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            case 2: OK(MPI_Send(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            case 3: OK(MPI_Bsend(out, 64, MPI_INT, next, 10 + modes, MPI_COMM_WORLD)); break;
            }
        }
        if (modes == 3) {
            void *b; int bs;
            OK(MPI_Buffer_detach(&b, &bs));
            CHECK(b == (void *)bbuf && bs == (int)sizeof bbuf);
        }
        int cnt;
        OK(MPI_Get_count(&st, MPI_INT, &cnt));
        CHECK(cnt == 64 && st.MPI_SOURCE == prev && st.MPI_TAG == 10 + modes);
        for (i = 0; i < 64; i++) CHECK(in[i] == prev * 1000 + i + modes);
    }

    /* Non-blocking exchange with everyone, large and small, Waitall. */
    {
        int n = 100000;
        double *sb = malloc(sizeof(double) * n * size), *rb = malloc(sizeof(double) * n * size);
        MPI_Request *rq = malloc(sizeof(MPI_Request) * 2 * size);
        MPI_Status *sts = malloc(sizeof(MPI_Status) * 2 * size);
        for (i = 0; i < n * size; i++) { sb[i] = rank + i * 0.5; rb[i] = -1; }
        int p;
        for (p = 0; p < size; p++) {
            OK(MPI_Irecv(rb + p * n, n, MPI_DOUBLE, p, 7, MPI_COMM_WORLD, &rq[p]));
            OK(MPI_Isend(sb + p * n, n, MPI_DOUBLE, p, 7, MPI_COMM_WORLD, &rq[size + p]));
        }
        OK(MPI_Waitall(2 * size, rq, sts));
        for (p = 0; p < 2 * size; p++) CHECK(rq[p] == MPI_REQUEST_NULL);
        for (p = 0; p < size; p++) {
            CHECK(sts[p].MPI_SOURCE == p && sts[p].MPI_TAG == 7);
            for (i = 0; i < n; i++) CHECK(rb[p * n + i] == p + (rank * n + i) * 0.5);
        }
        free(sb); free(rb); free(rq); free(sts);
    }

    /* Probe, Get_count, ANY_SOURCE / ANY_TAG, Sendrecv. */
    {
        int v = rank * 3, got = -1;
        MPI_Status st;
        OK(MPI_Sendrecv(&v, 1, MPI_INT, next, 99, &got, 1, MPI_INT, prev, 99, MPI_COMM_WORLD, &st));
        CHECK(got == prev * 3 && st.MPI_SOURCE == prev);
        char msg[37];
        memset(msg, 'a' + rank % 26, sizeof msg);
        OK(MPI_Send(msg, 37, MPI_CHAR, next, 5, MPI_COMM_WORLD));
        OK(MPI_Probe(MPI_ANY_SOURCE, MPI_ANY_TAG, MPI_COMM_WORLD, &st));
        int cnt;
        OK(MPI_Get_count(&st, MPI_CHAR, &cnt));
        CHECK(cnt == 37 && st.MPI_SOURCE == prev && st.MPI_TAG == 5);
        OK(MPI_Get_count(&st, MPI_INT, &cnt));
        CHECK(cnt == MPI_UNDEFINED);
        char in[37];
        OK(MPI_Recv(in, 37, MPI_CHAR, st.MPI_SOURCE, st.MPI_TAG, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        CHECK(in[0] == 'a' + prev % 26 && in[36] == 'a' + prev % 26);
    }

    /* Matched probe. */
    {
        long v = 1234567890123L + rank, got = 0;
        MPI_Message m;
        MPI_Status st;
        int flag = 0;
        OK(MPI_Send(&v, 1, MPI_LONG, next, 21, MPI_COMM_WORLD));
        while (!flag) OK(MPI_Improbe(prev, 21, MPI_COMM_WORLD, &flag, &m, &st));
        CHECK(m != MPI_MESSAGE_NULL);
        OK(MPI_Mrecv(&got, 1, MPI_LONG, &m, &st));
        CHECK(m == MPI_MESSAGE_NULL && got == 1234567890123L + prev);
    }

    /* Testany / Waitsome / Test with PROC_NULL and inactive slots. */
    {
        int a = rank, b = -1;
        MPI_Request r[3];
        r[0] = MPI_REQUEST_NULL;
        OK(MPI_Irecv(&b, 1, MPI_INT, prev, 31, MPI_COMM_WORLD, &r[1]));
        OK(MPI_Isend(&a, 1, MPI_INT, next, 31, MPI_COMM_WORLD, &r[2]));
        int done = 0, out, idx[3];
        MPI_Status sts[3];
        while (done < 2) {
            OK(MPI_Waitsome(3, r, &out, idx, sts));
            CHECK(out >= 1);
            done += out;
        }
        OK(MPI_Waitsome(3, r, &out, idx, sts));
        CHECK(out == MPI_UNDEFINED);
        CHECK(b == prev);
        int flag, index;
        OK(MPI_Testany(3, r, &index, &flag, MPI_STATUS_IGNORE));
        CHECK(flag == 1 && index == MPI_UNDEFINED);
        MPI_Status st;
        OK(MPI_Recv(&b, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &st));
        CHECK(st.MPI_SOURCE == MPI_PROC_NULL);
    }

    /* Cancel an unmatched receive. */
    {
        int x;
        MPI_Request r;
        MPI_Status st;
        int flag;
        OK(MPI_Irecv(&x, 1, MPI_INT, next, 777, MPI_COMM_WORLD, &r));
        OK(MPI_Cancel(&r));
        OK(MPI_Wait(&r, &st));
        OK(MPI_Test_cancelled(&st, &flag));
        CHECK(flag == 1);
    }

    /* Truncation under MPI_ERRORS_RETURN. */
    {
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
        int big[8] = {1, 2, 3, 4, 5, 6, 7, 8}, small[4];
        MPI_Status st;
        OK(MPI_Send(big, 8, MPI_INT, next, 40, MPI_COMM_WORLD));
        int rc = MPI_Recv(small, 4, MPI_INT, prev, 40, MPI_COMM_WORLD, &st);
        int cls;
        OK(MPI_Error_class(rc, &cls));
        CHECK(cls == MPI_ERR_TRUNCATE);
        CHECK(small[0] == 1 && small[3] == 4);

        /* A window of small messages, one of them truncated, with a null
         * handle among the requests: MPI_Waitall returns
         * MPI_ERR_IN_STATUS, every status says what happened and every
         * handle is MPI_REQUEST_NULL afterwards. */
        int w, vals[16], got[16];
        MPI_Request rq[2 * 16 + 1];
        MPI_Status sts[2 * 16 + 1];
        for (w = 0; w < 16; w++) { vals[w] = rank * 100 + w; got[w] = -1; }
        int pair[2] = {7, 8};
        for (w = 0; w < 16; w++)
            OK(MPI_Irecv(&got[w], 1, MPI_INT, prev, 41, MPI_COMM_WORLD, &rq[w]));
        for (w = 0; w < 16; w++) {
            /* message 5 carries two ints into a one-int receive */
            OK(MPI_Isend(w == 5 ? pair : &vals[w], w == 5 ? 2 : 1, MPI_INT, next, 41,
                         MPI_COMM_WORLD, &rq[16 + w]));
        }
        rq[32] = MPI_REQUEST_NULL;
        rc = MPI_Waitall(33, rq, sts);
        OK(MPI_Error_class(rc, &cls));
        CHECK(cls == MPI_ERR_IN_STATUS);
        for (w = 0; w < 33; w++) CHECK(rq[w] == MPI_REQUEST_NULL);
        for (w = 0; w < 16; w++) {
            CHECK(sts[w].MPI_SOURCE == prev && sts[w].MPI_TAG == 41);
            if (w == 5) {
                CHECK(sts[w].MPI_ERROR == MPI_ERR_TRUNCATE && got[w] == 7);
            } else {
                CHECK(sts[w].MPI_ERROR == MPI_SUCCESS && got[w] == prev * 100 + w);
            }
            CHECK(sts[16 + w].MPI_ERROR == MPI_SUCCESS);
        }
        CHECK(sts[32].MPI_SOURCE == MPI_ANY_SOURCE && sts[32].MPI_TAG == MPI_ANY_TAG);
        OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL));
    }

    /* MPI_Request_get_status reports completion without freeing: a loop
     * on it ends, and the wait after it returns the same status (MPICH's
     * rqstatus); also for a persistent request and MPI_REQUEST_NULL. */
    {
        int flag = 0, v[2] = {0, 0};
        MPI_Status gs, ws;
        OK(MPI_Request_get_status(MPI_REQUEST_NULL, &flag, &gs));
        CHECK(flag && gs.MPI_SOURCE == MPI_ANY_SOURCE);
        int peer = rank ^ 1;
        if (peer < size) {
            MPI_Request q;
            for (int pers = 0; pers < 2; pers++) {
                if (rank % 2) {
                    int w[2] = {rank, 77 + pers};
                    OK(MPI_Send(w, 2, MPI_INT, peer, 31, MPI_COMM_WORLD));
                    continue;
                }
                if (pers) {
                    OK(MPI_Recv_init(v, 2, MPI_INT, peer, 31, MPI_COMM_WORLD, &q));
                    OK(MPI_Start(&q));
                } else {
                    OK(MPI_Irecv(v, 2, MPI_INT, peer, 31, MPI_COMM_WORLD, &q));
                }
                flag = 0;
                for (long spins = 0; !flag && spins < 100000000L; spins++)
                    OK(MPI_Request_get_status(q, &flag, &gs));
                CHECK(flag && gs.MPI_SOURCE == peer && gs.MPI_TAG == 31);
                CHECK(v[0] == peer && v[1] == 77 + pers);
                OK(MPI_Request_get_status(q, &flag, MPI_STATUS_IGNORE));
                CHECK(flag);
                OK(MPI_Wait(&q, &ws));
                CHECK(ws.MPI_SOURCE == peer && ws.MPI_TAG == 31);
                if (pers) {
                    CHECK(q != MPI_REQUEST_NULL);
                    OK(MPI_Request_free(&q));
                }
                CHECK(q == MPI_REQUEST_NULL);
            }
        }
    }
    report_ok("pt2pt");
    OK(MPI_Finalize());
    return 0;
}
