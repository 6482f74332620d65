/* MPI-4.0 MPI_Isendrecv and MPI_Isendrecv_replace: one request for a
 * send and a receive, complete once both are, with the receive's status.
 * A ring at every size (1 rank: to itself), small and rendezvous-sized
 * messages, several outstanding at once, a strided datatype for the
 * replace form (and the blocking MPI_Sendrecv_replace), MPI_PROC_NULL, and a freed active request whose data
 * still arrives. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    MPI_Status st;

    /* Small, then 1 MiB (the rendezvous path), with Wait and Test. */
    enum { BIG = 1 << 18 }; /* ints */
    int *out = malloc(sizeof(int) * BIG), *in = malloc(sizeof(int) * BIG);
    CHECK(out && in);
    for (int n = 1; n <= BIG; n *= 512) {
        for (int i = 0; i < n; i++) {
            out[i] = rank * 1000003 + i;
            in[i] = -1;
        }
        MPI_Request rq;
        /* A call that returns one status leaves its error field alone. */
        st.MPI_ERROR = MPI_ERR_DIMS;
        OK(MPI_Isendrecv(out, n, MPI_INT, next, 5, in, n, MPI_INT, prev, 5, MPI_COMM_WORLD, &rq));
        if (n == 1) {
            OK(MPI_Wait(&rq, &st));
        } else {
            int done = 0;
            while (!done)
                OK(MPI_Test(&rq, &done, &st));
        }
        CHECK(rq == MPI_REQUEST_NULL);
        CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 5 && st.MPI_ERROR == MPI_ERR_DIMS);
        int cnt = -1;
        OK(MPI_Get_count(&st, MPI_INT, &cnt));
        CHECK(cnt == n);
        for (int i = 0; i < n; i++)
            CHECK(in[i] == prev * 1000003 + i);
    }

    /* Three at once in both directions, completed by one Waitall. */
    int a = rank, b = -1, c = rank * 2, d = -1, e = 7, f = -1;
    MPI_Request three[3];
    OK(MPI_Isendrecv(&a, 1, MPI_INT, next, 1, &b, 1, MPI_INT, prev, 1, MPI_COMM_WORLD, &three[0]));
    OK(MPI_Isendrecv(&c, 1, MPI_INT, prev, 2, &d, 1, MPI_INT, next, 2, MPI_COMM_WORLD, &three[1]));
    OK(MPI_Isendrecv(&e, 1, MPI_INT, MPI_PROC_NULL, 3, &f, 1, MPI_INT, MPI_PROC_NULL, 3,
                     MPI_COMM_WORLD, &three[2]));
    MPI_Status sts[3];
    OK(MPI_Waitall(3, three, sts));
    CHECK(b == prev && d == next * 2 && f == -1);
    CHECK(sts[0].MPI_SOURCE == prev && sts[1].MPI_SOURCE == next);
    CHECK(sts[2].MPI_SOURCE == MPI_PROC_NULL);

    /* Replace on every other int of 8 (a vector type): the ints between
     * stay untouched. */
    MPI_Datatype every2;
    OK(MPI_Type_vector(4, 1, 2, MPI_INT, &every2));
    OK(MPI_Type_commit(&every2));
    int buf[8];
    for (int i = 0; i < 8; i++)
        buf[i] = rank * 100 + i;
    MPI_Request rq;
    OK(MPI_Isendrecv_replace(buf, 1, every2, next, 9, prev, 9, MPI_COMM_WORLD, &rq));
    OK(MPI_Wait(&rq, &st));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 9);
    for (int i = 0; i < 8; i++)
        CHECK(buf[i] == (i % 2 == 0 ? prev * 100 + i : rank * 100 + i));
    /* The blocking form on the same type. */
    for (int i = 0; i < 8; i++)
        buf[i] = rank * 100 + i;
    st.MPI_ERROR = MPI_ERR_TOPOLOGY;
    OK(MPI_Sendrecv_replace(buf, 1, every2, next, 10, prev, 10, MPI_COMM_WORLD, &st));
    CHECK(st.MPI_SOURCE == prev && st.MPI_TAG == 10 && st.MPI_ERROR == MPI_ERR_TOPOLOGY);
    for (int i = 0; i < 8; i++)
        CHECK(buf[i] == (i % 2 == 0 ? prev * 100 + i : rank * 100 + i));
    OK(MPI_Type_free(&every2));

    /* Freed while active: the exchange still happens (the receive's data
     * is there once a later message from the same sender arrives). */
    int g = rank + 50, h = -1, token = 0;
    OK(MPI_Isendrecv(&g, 1, MPI_INT, next, 11, &h, 1, MPI_INT, prev, 11, MPI_COMM_WORLD, &rq));
    OK(MPI_Request_free(&rq));
    CHECK(rq == MPI_REQUEST_NULL);
    OK(MPI_Sendrecv(&token, 1, MPI_INT, next, 12, &token, 1, MPI_INT, prev, 12, MPI_COMM_WORLD,
                    MPI_STATUS_IGNORE));
    OK(MPI_Barrier(MPI_COMM_WORLD));
    for (int i = 0; i < 1000 && h == -1; i++)
        OK(MPI_Iprobe(MPI_ANY_SOURCE, 999, MPI_COMM_WORLD, &token, MPI_STATUS_IGNORE));
    CHECK(h == prev + 50);

    /* Bad arguments: an error, no request. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    rq = MPI_REQUEST_NULL;
    int rc = MPI_Isendrecv(&a, 1, MPI_INT, size, 1, &b, 1, MPI_INT, prev, 1, MPI_COMM_WORLD, &rq);
    int cls = -1;
    MPI_Error_class(rc, &cls);
    CHECK(cls == MPI_ERR_RANK && rq == MPI_REQUEST_NULL);
    free(out);
    free(in);
    report_ok("isendrecv");
    OK(MPI_Finalize());
    return 0;
}
