/* Partitioned point-to-point (MPI-4.0 chapter 4): rank 0 sends to rank 1
 * over several rounds of one MPI_Psend_init/MPI_Precv_init pair, the
 * partitions marked ready in reverse order, from several threads (one
 * of them marking while the main thread already waits on the send), with
 * MPI_Pready_range and MPI_Pready_list; the receiver polls MPI_Parrived,
 * which stays false while a partition is missing. A receive partitioned
 * differently, a strided datatype, MPI_Startall/Waitall on a self pair,
 * and the error cases (bad arguments, partitions out of range or ready
 * twice, the wrong kind of request, freeing an active one). */
#define _POSIX_C_SOURCE 200809L
#include "check.h"
#include <time.h>

#define P 8     /* partitions */
#define N 1000  /* ints per partition */
#define ROUNDS 6
#define THREADS 4

static int sbuf[P * N], rbuf[P * N];
static MPI_Request sreq = MPI_REQUEST_NULL;

static int value(int round, int i) { return round * 1000003 + i; }

/* Thread t marks partitions t, t + THREADS, ... in reverse order. */
static void *mark_some(void *arg) {
    int t = *(int *)arg;
    for (int p = P - 1 - t; p >= 0; p -= THREADS) OK(MPI_Pready(p, sreq));
    return NULL;
}

/* As mark_some, after a pause: the main thread waits on the send
 * meanwhile. */
static void *mark_later(void *arg) {
    struct timespec ts = {0, 20 * 1000 * 1000};
    nanosleep(&ts, NULL);
    return mark_some(arg);
}

static pthread_t waiter_threads[THREADS];
static int waiter_ids[THREADS];

static void check_round(int round) {
    for (int i = 0; i < P * N; i++) {
        if (rbuf[i] != value(round, i)) {
            fprintf(stderr, "round %d: rbuf[%d] = %d, expected %d\n", round, i, rbuf[i],
                    value(round, i));
            CHECK(0);
        }
    }
}

static void sender(void) {
    OK(MPI_Psend_init(sbuf, P, N, MPI_INT, 1, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &sreq));
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < P * N; i++) sbuf[i] = value(round, i);
        MPI_Barrier(MPI_COMM_WORLD); /* the receiver started and checked Parrived */
        OK(MPI_Start(&sreq));
        switch (round) {
        case 0: /* reverse order, one at a time; the last one after the
                   receiver saw the others not arrive */
            for (int p = P - 1; p >= 1; p--) OK(MPI_Pready(p, sreq));
            MPI_Barrier(MPI_COMM_WORLD);
            MPI_Barrier(MPI_COMM_WORLD);
            OK(MPI_Pready(0, sreq));
            OK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
            break;
        case 1: /* from several threads */
            run_threads(THREADS, mark_some);
            OK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
            break;
        case 2: { /* threads mark while this one waits */
            for (int t = 0; t < THREADS; t++) {
                waiter_ids[t] = t;
                CHECK(pthread_create(&waiter_threads[t], NULL, mark_later, &waiter_ids[t]) == 0);
            }
            OK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
            for (int t = 0; t < THREADS; t++) pthread_join(waiter_threads[t], NULL);
            break;
        }
        case 3: /* ranges, then MPI_Test until done */
            OK(MPI_Pready_range(P / 2, P - 1, sreq));
            OK(MPI_Pready_range(0, 0, sreq));
            OK(MPI_Pready_range(1, P / 2 - 1, sreq));
            for (int flag = 0; !flag;) OK(MPI_Test(&sreq, &flag, MPI_STATUS_IGNORE));
            break;
        case 4: { /* lists */
            int odd[P / 2], even[P / 2];
            for (int k = 0; k < P / 2; k++) {
                odd[k] = P - 1 - 2 * k;
                even[k] = 2 * k;
            }
            OK(MPI_Pready_list(P / 2, odd, sreq));
            OK(MPI_Pready_list(0, NULL, sreq));
            OK(MPI_Pready_list(P / 2, even, sreq));
            OK(MPI_Waitall(1, &sreq, MPI_STATUSES_IGNORE));
            break;
        }
        default: /* all at once */
            OK(MPI_Pready_range(0, P - 1, sreq));
            OK(MPI_Wait(&sreq, MPI_STATUS_IGNORE));
        }
        CHECK(sreq != MPI_REQUEST_NULL); /* persistent: inactive again */
        MPI_Barrier(MPI_COMM_WORLD);
    }
    OK(MPI_Request_free(&sreq));
    CHECK(sreq == MPI_REQUEST_NULL);
}

static void receiver(void) {
    MPI_Request rreq;
    MPI_Status st;
    int flag, count;
    OK(MPI_Precv_init(rbuf, P, N, MPI_INT, 0, 7, MPI_COMM_WORLD, MPI_INFO_NULL, &rreq));
    /* Inactive: every partition counts as arrived. */
    OK(MPI_Parrived(rreq, 0, &flag));
    CHECK(flag);
    for (int round = 0; round < ROUNDS; round++) {
        for (int i = 0; i < P * N; i++) rbuf[i] = -1;
        OK(MPI_Start(&rreq));
        for (int p = 0; p < P; p++) {
            OK(MPI_Parrived(rreq, p, &flag));
            CHECK(!flag);
        }
        MPI_Barrier(MPI_COMM_WORLD);
        if (round == 0) {
            /* The sender marked all but partition 0. */
            MPI_Barrier(MPI_COMM_WORLD);
            for (int k = 0; k < 100; k++) {
                OK(MPI_Parrived(rreq, P - 1, &flag));
                CHECK(!flag);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
        for (int p = P - 1; p >= 0; p--) {
            do OK(MPI_Parrived(rreq, p, &flag));
            while (!flag);
        }
        OK(MPI_Parrived(rreq, 0, &flag));
        CHECK(flag);
        OK(MPI_Wait(&rreq, &st));
        CHECK(rreq != MPI_REQUEST_NULL);
        OK(MPI_Get_count(&st, MPI_INT, &count));
        CHECK(count == P * N);
        CHECK(st.MPI_SOURCE == 0 && st.MPI_TAG == 7);
        check_round(round);
        MPI_Barrier(MPI_COMM_WORLD);
    }
    OK(MPI_Request_free(&rreq));
    CHECK(rreq == MPI_REQUEST_NULL);
}

/* The receive partitioned differently (4 partitions of 2 items of a
 * strided type: every other int) from the send (2 partitions of 4 ints):
 * the same type signature in total. */
static void other_shapes(int rank) {
    int src[8], dst[16], flag;
    MPI_Datatype every_other;
    MPI_Request r;
    MPI_Type_vector(1, 1, 2, MPI_INT, &every_other);
    MPI_Type_create_resized(every_other, 0, 2 * sizeof(int), &every_other);
    MPI_Type_commit(&every_other);
    if (rank == 0) {
        for (int i = 0; i < 8; i++) src[i] = 100 + i;
        OK(MPI_Psend_init(src, 2, 4, MPI_INT, 1, 8, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
        for (int round = 0; round < 2; round++) {
            OK(MPI_Start(&r));
            OK(MPI_Pready(1, r));
            OK(MPI_Pready(0, r));
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
        }
    } else {
        OK(MPI_Precv_init(dst, 4, 2, every_other, 0, 8, MPI_COMM_WORLD, MPI_INFO_NULL, &r));
        for (int round = 0; round < 2; round++) {
            for (int i = 0; i < 16; i++) dst[i] = -1;
            OK(MPI_Start(&r));
            do OK(MPI_Parrived(r, 3, &flag));
            while (!flag);
            OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
            for (int i = 0; i < 16; i++) CHECK(dst[i] == (i % 2 ? -1 : 100 + i / 2));
        }
    }
    OK(MPI_Request_free(&r));
    MPI_Type_free(&every_other);
}

/* A pair on MPI_COMM_SELF: MPI_Startall, MPI_Waitall; then the errors. */
static void self_pair_and_errors(void) {
    int a[6] = {1, 2, 3, 4, 5, 6}, b[6], flag, plain_buf = 0;
    MPI_Request pair[2], s, r, plain;
    OK(MPI_Psend_init(a, 3, 2, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &pair[0]));
    OK(MPI_Precv_init(b, 3, 2, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &pair[1]));
    for (int round = 0; round < 3; round++) {
        memset(b, 0, sizeof b);
        OK(MPI_Startall(2, pair));
        OK(MPI_Pready_list(3, (int[]){2, 0, 1}, pair[0]));
        OK(MPI_Waitall(2, pair, MPI_STATUSES_IGNORE));
        CHECK(memcmp(a, b, sizeof a) == 0);
        CHECK(pair[0] != MPI_REQUEST_NULL && pair[1] != MPI_REQUEST_NULL);
    }
    s = pair[0];
    r = pair[1];

    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_RETURN);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    MPI_Request bad = MPI_REQUEST_NULL;
    /* Init arguments. */
    CHECK(MPI_Psend_init(a, 0, 2, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) == MPI_ERR_ARG);
    CHECK(MPI_Psend_init(a, -1, 2, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) == MPI_ERR_ARG);
    CHECK(MPI_Precv_init(b, 3, -1, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) == MPI_ERR_COUNT);
    CHECK(MPI_Psend_init(a, 1 << 20, (MPI_Count)1 << 20, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL,
                         &bad) == MPI_ERR_COUNT);
    CHECK(MPI_Psend_init(a, 3, 2, MPI_INT, 1, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) == MPI_ERR_RANK);
    CHECK(MPI_Precv_init(b, 3, 2, MPI_INT, MPI_ANY_SOURCE, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) ==
          MPI_ERR_RANK);
    CHECK(MPI_Precv_init(b, 3, 2, MPI_INT, 0, MPI_ANY_TAG, MPI_COMM_SELF, MPI_INFO_NULL, &bad) ==
          MPI_ERR_TAG);
    CHECK(MPI_Psend_init(a, 3, 2, MPI_DATATYPE_NULL, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) ==
          MPI_ERR_TYPE);
    CHECK(MPI_Psend_init(NULL, 3, 2, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, &bad) ==
          MPI_ERR_BUFFER);
    CHECK(MPI_Psend_init(a, 3, 2, MPI_INT, 0, 5, MPI_COMM_SELF, MPI_INFO_NULL, NULL) == MPI_ERR_ARG);
    CHECK(bad == MPI_REQUEST_NULL);
    /* Zero items per partition is a message of nothing. */
    OK(MPI_Psend_init(NULL, 2, 0, MPI_INT, 0, 6, MPI_COMM_SELF, MPI_INFO_NULL, &pair[0]));
    OK(MPI_Precv_init(NULL, 1, 0, MPI_INT, 0, 6, MPI_COMM_SELF, MPI_INFO_NULL, &pair[1]));
    OK(MPI_Startall(2, pair));
    OK(MPI_Pready_range(0, 1, pair[0]));
    OK(MPI_Waitall(2, pair, MPI_STATUSES_IGNORE));
    OK(MPI_Request_free(&pair[0]));
    OK(MPI_Request_free(&pair[1]));

    /* Pready on a request that is no active partitioned send. */
    CHECK(MPI_Pready(0, s) == MPI_ERR_REQUEST); /* inactive */
    CHECK(MPI_Pready(0, r) == MPI_ERR_REQUEST); /* a receive */
    CHECK(MPI_Pready(0, MPI_REQUEST_NULL) == MPI_ERR_REQUEST);
    CHECK(MPI_Pready(0, 123456) == MPI_ERR_REQUEST);
    OK(MPI_Send_init(&plain_buf, 1, MPI_INT, 0, 9, MPI_COMM_SELF, &plain));
    CHECK(MPI_Pready(0, plain) == MPI_ERR_REQUEST);
    CHECK(MPI_Parrived(plain, 0, &flag) == MPI_ERR_REQUEST);
    OK(MPI_Request_free(&plain));
    CHECK(MPI_Parrived(s, 0, &flag) == MPI_ERR_REQUEST); /* a send */

    /* In a round: partitions out of range or marked twice. */
    OK(MPI_Start(&r));
    OK(MPI_Start(&s));
    CHECK(MPI_Start(&s) == MPI_ERR_REQUEST); /* already active */
    CHECK(MPI_Parrived(r, 3, &flag) == MPI_ERR_ARG);
    CHECK(MPI_Parrived(r, -1, &flag) == MPI_ERR_ARG);
    CHECK(MPI_Pready(-1, s) == MPI_ERR_ARG);
    CHECK(MPI_Pready(3, s) == MPI_ERR_ARG);
    CHECK(MPI_Pready_range(2, 1, s) == MPI_ERR_ARG);
    CHECK(MPI_Pready_range(0, 3, s) == MPI_ERR_ARG);
    CHECK(MPI_Pready_list(2, (int[]){1, 1}, s) == MPI_ERR_ARG); /* marks nothing */
    CHECK(MPI_Pready_list(2, (int[]){0, 5}, s) == MPI_ERR_ARG); /* marks nothing */
    CHECK(MPI_Pready_list(-1, (int[]){0}, s) == MPI_ERR_ARG);
    CHECK(MPI_Pready_list(1, NULL, s) == MPI_ERR_ARG);
    OK(MPI_Pready(1, s));
    CHECK(MPI_Pready(1, s) == MPI_ERR_ARG);
    CHECK(MPI_Pready_range(0, 1, s) == MPI_ERR_ARG);
    CHECK(MPI_Request_free(&s) == MPI_ERR_REQUEST); /* active */
    CHECK(s != MPI_REQUEST_NULL);
    OK(MPI_Parrived(r, 0, &flag));
    CHECK(!flag);
    OK(MPI_Pready_list(2, (int[]){2, 0}, s));
    CHECK(MPI_Pready(0, s) == MPI_ERR_ARG); /* all ready: the send is under way */
    OK(MPI_Wait(&s, MPI_STATUS_IGNORE));
    OK(MPI_Wait(&r, MPI_STATUS_IGNORE));
    CHECK(MPI_Pready(0, s) == MPI_ERR_REQUEST); /* inactive again */
    MPI_Request gone = s;
    OK(MPI_Request_free(&s));
    OK(MPI_Request_free(&r));
    CHECK(s == MPI_REQUEST_NULL && r == MPI_REQUEST_NULL);
    CHECK(MPI_Pready(0, gone) == MPI_ERR_REQUEST); /* freed */
    MPI_Comm_set_errhandler(MPI_COMM_SELF, MPI_ERRORS_ARE_FATAL);
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
}

int main(int argc, char **argv) {
    int rank, size;
    init_multiple(&argc, &argv, &rank, &size);
    CHECK(size >= 2);
    if (rank == 0) sender();
    else if (rank == 1) receiver();
    else
        for (int round = 0; round < ROUNDS; round++) {
            MPI_Barrier(MPI_COMM_WORLD);
            if (round == 0) {
                MPI_Barrier(MPI_COMM_WORLD);
                MPI_Barrier(MPI_COMM_WORLD);
            }
            MPI_Barrier(MPI_COMM_WORLD);
        }
    if (rank < 2) other_shapes(rank);
    self_pair_and_errors();
    report_ok("partitioned");
    MPI_Finalize();
    return 0;
}
