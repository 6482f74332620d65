/* Persistent requests: Send_init/Recv_init restarted, Startall, Request_free. */
#include "check.h"

int main(int argc, char **argv) {
    int rank, size, it, i;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;
    int out[1000], in[1000];
    MPI_Request r[2];
    OK(MPI_Recv_init(in, 1000, MPI_INT, prev, 3, MPI_COMM_WORLD, &r[0]));
    OK(MPI_Send_init(out, 1000, MPI_INT, next, 3, MPI_COMM_WORLD, &r[1]));
    for (it = 0; it < 50; it++) {
        for (i = 0; i < 1000; i++) out[i] = rank * 100000 + it * 1000 + i;
        OK(MPI_Startall(2, r));
        MPI_Status st[2];
        OK(MPI_Waitall(2, r, st));
        CHECK(r[0] != MPI_REQUEST_NULL && r[1] != MPI_REQUEST_NULL); /* stay allocated */
        CHECK(st[0].MPI_SOURCE == prev);
        for (i = 0; i < 1000; i++) CHECK(in[i] == prev * 100000 + it * 1000 + i);
    }
    /* Single Start/Wait, Ssend_init. */
    MPI_Request s, rr;
    OK(MPI_Ssend_init(out, 10, MPI_INT, next, 4, MPI_COMM_WORLD, &s));
    OK(MPI_Recv_init(in, 10, MPI_INT, prev, 4, MPI_COMM_WORLD, &rr));
    for (it = 0; it < 5; it++) {
        out[0] = it;
        OK(MPI_Start(&rr));
        OK(MPI_Start(&s));
        OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&rr, MPI_STATUS_IGNORE));
        CHECK(in[0] == it);
    }
    /* Wait on an inactive persistent request returns at once, empty status. */
    MPI_Status st;
    OK(MPI_Wait(&s, &st));
    CHECK(st.MPI_SOURCE == MPI_ANY_SOURCE && st.MPI_TAG == MPI_ANY_TAG);
    OK(MPI_Request_free(&s));
    OK(MPI_Request_free(&rr));
    OK(MPI_Request_free(&r[0]));
    OK(MPI_Request_free(&r[1]));
    CHECK(s == MPI_REQUEST_NULL && r[0] == MPI_REQUEST_NULL);

    /* A derived datatype freed right after the init calls (MPI allows it:
     * the requests keep using it; MPICH's multi_psend_derived failed at
     * MPI_Start with an invalid datatype handle). */
    MPI_Datatype every_other;
    OK(MPI_Type_vector(5, 1, 2, MPI_INT, &every_other));
    OK(MPI_Type_commit(&every_other));
    OK(MPI_Send_init(out, 1, every_other, next, 5, MPI_COMM_WORLD, &s));
    OK(MPI_Recv_init(in, 1, every_other, prev, 5, MPI_COMM_WORLD, &rr));
    OK(MPI_Type_free(&every_other));
    for (it = 0; it < 3; it++) {
        for (i = 0; i < 10; i++) {
            out[i] = rank * 1000 + it * 10 + i;
            in[i] = -1;
        }
        OK(MPI_Start(&rr));
        OK(MPI_Start(&s));
        OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
        OK(MPI_Wait(&rr, MPI_STATUS_IGNORE));
        for (i = 0; i < 10; i++) CHECK(in[i] == (i % 2 ? -1 : prev * 1000 + it * 10 + i));
    }
    OK(MPI_Request_free(&s));
    OK(MPI_Request_free(&rr));
    report_ok("persistent");
    OK(MPI_Finalize());
    return 0;
}
