/* Generalized requests: waits and tests complete them only after
 * MPI_Grequest_complete, then call the query callback (its status is the
 * one returned) and the free callback once each; MPI_Cancel calls the
 * cancel callback; one completed from another thread while MPI_Wait
 * waits; one among point-to-point requests in MPI_Waitall. */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <time.h>

struct state {
    int queried, freed, cancel_calls, cancel_complete, cancelled;
};

static int query(void *extra, MPI_Status *st) {
    struct state *s = extra;
    s->queried++;
    MPI_Status_set_elements(st, MPI_BYTE, 42);
    MPI_Status_set_cancelled(st, s->cancelled);
    st->MPI_SOURCE = 3;
    st->MPI_TAG = 7;
    return MPI_SUCCESS;
}

static int query_fails(void *extra, MPI_Status *st) {
    (void)st;
    ((struct state *)extra)->queried++;
    return MPI_ERR_ARG;
}

static int free_fn(void *extra) {
    ((struct state *)extra)->freed++;
    return MPI_SUCCESS;
}

static int cancel_fn(void *extra, int complete) {
    struct state *s = extra;
    s->cancel_calls++;
    s->cancel_complete = complete;
    s->cancelled = 1;
    return MPI_SUCCESS;
}

static MPI_Request late;
static void *complete_later(void *arg) {
    (void)arg;
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    OK(MPI_Grequest_complete(late));
    return NULL;
}

int main(int argc, char **argv) {
    int rank, size, flag, count;
    init_multiple(&argc, &argv, &rank, &size);
    struct state s = {0};
    MPI_Request r;
    MPI_Status st;
    OK(MPI_Grequest_start(query, free_fn, cancel_fn, &s, &r));
    OK(MPI_Test(&r, &flag, &st));
    CHECK(!flag && s.queried == 0 && s.freed == 0);
    OK(MPI_Grequest_complete(r));
    OK(MPI_Wait(&r, &st));
    CHECK(r == MPI_REQUEST_NULL);
    CHECK(s.queried == 1 && s.freed == 1);
    CHECK(st.MPI_SOURCE == 3 && st.MPI_TAG == 7);
    OK(MPI_Get_count(&st, MPI_BYTE, &count));
    CHECK(count == 42);
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(!flag);

    /* Cancelled before it completes. */
    struct state c = {0};
    OK(MPI_Grequest_start(query, free_fn, cancel_fn, &c, &r));
    OK(MPI_Cancel(&r));
    CHECK(c.cancel_calls == 1 && c.cancel_complete == 0);
    OK(MPI_Grequest_complete(r));
    OK(MPI_Wait(&r, &st));
    OK(MPI_Test_cancelled(&st, &flag));
    CHECK(flag && c.freed == 1);

    /* Completed by another thread while this one waits. */
    struct state l = {0};
    OK(MPI_Grequest_start(query, free_fn, NULL, &l, &late));
    pthread_t th;
    CHECK(pthread_create(&th, NULL, complete_later, NULL) == 0);
    MPI_Request keep = late;
    OK(MPI_Wait(&keep, &st));
    pthread_join(th, NULL);
    CHECK(l.queried == 1 && l.freed == 1 && st.MPI_TAG == 7);

    /* Among point-to-point requests. */
    struct state m = {0};
    MPI_Request rs[3];
    int out = rank, in = -1, peer = (rank + 1) % size, from = (rank + size - 1) % size;
    OK(MPI_Irecv(&in, 1, MPI_INT, from, 1, MPI_COMM_WORLD, &rs[0]));
    OK(MPI_Grequest_start(query, free_fn, cancel_fn, &m, &rs[1]));
    OK(MPI_Isend(&out, 1, MPI_INT, peer, 1, MPI_COMM_WORLD, &rs[2]));
    OK(MPI_Grequest_complete(rs[1]));
    MPI_Status sts[3];
    OK(MPI_Waitall(3, rs, sts));
    CHECK(in == from && m.queried == 1 && m.freed == 1 && sts[1].MPI_SOURCE == 3);

    /* A query callback's error is the wait's; the free callback still runs. */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    struct state e = {0};
    int cls;
    OK(MPI_Grequest_start(query_fails, free_fn, NULL, &e, &r));
    OK(MPI_Grequest_complete(r));
    MPI_Error_class(MPI_Wait(&r, &st), &cls);
    CHECK(cls == MPI_ERR_ARG && e.queried == 1 && e.freed == 1);
    MPI_Error_class(MPI_Grequest_complete(12345), &cls);
    CHECK(cls == MPI_ERR_REQUEST);
    report_ok("greq");
    MPI_Finalize();
    return 0;
}
