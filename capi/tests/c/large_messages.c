/* Messages of more than INT_MAX items (MPI-4.0 large counts, 2 ranks, about
 * 2 GiB of memory per rank): MPI_Send_c/Recv_c, Isend_c/Irecv_c,
 * Sendrecv_c and Bcast_c with a count of 2^31 + 64 bytes, every 4 KiB page
 * and the last bytes checked, and the count read back with Get_count_c
 * (MPI_UNDEFINED from the int Get_count). A large-count send matches an
 * int receive of a derived type of the same signature, and the other way
 * round (docs/capi.md "Large counts"). */
#include "check.h"

#include <limits.h>
#include <stdint.h>

static const size_t N = ((size_t)1 << 31) + 64;

/* Byte i of message `m`: a page's first byte, the last 64 bytes and a
 * few bytes past 2^31 carry what the receiver checks. */
static unsigned char at(size_t i, int m) { return (unsigned char)((i >> 12) * 7 + (size_t)m * 13 + (i & 63)); }

static void fill(unsigned char *b, int m) {
    for (size_t i = 0; i < N; i += 4096) b[i] = at(i, m);
    for (size_t i = N - 64; i < N; i++) b[i] = at(i, m);
}

static void expect(const unsigned char *b, int m) {
    size_t bad = 0;
    for (size_t i = 0; i < N; i += 4096) bad += b[i] != at(i, m);
    for (size_t i = N - 64; i < N; i++) bad += b[i] != at(i, m);
    if (bad) fprintf(stderr, "message %d: %zu bytes differ\n", m, bad);
    CHECK(bad == 0);
}

static void count_is_n(const MPI_Status *st) {
    MPI_Count c = -1;
    int small = 0;
    OK(MPI_Get_count_c(st, MPI_BYTE, &c));
    CHECK(c == (MPI_Count)N);
    OK(MPI_Get_count(st, MPI_BYTE, &small));
    CHECK(small == MPI_UNDEFINED);
}

int main(int argc, char **argv) {
    int rank, size;
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    CHECK(size == 2);
    int peer = 1 - rank;
    unsigned char *b = malloc(N);
    CHECK(b != NULL);
    memset(b, 0, N);
    MPI_Status st;
    MPI_Request rq;

    /* 1. Send_c -> Recv_c. */
    if (rank == 0) {
        fill(b, 1);
        OK(MPI_Send_c(b, (MPI_Count)N, MPI_BYTE, peer, 1, MPI_COMM_WORLD));
    } else {
        OK(MPI_Recv_c(b, (MPI_Count)N, MPI_BYTE, peer, 1, MPI_COMM_WORLD, &st));
        count_is_n(&st);
        expect(b, 1);
    }

    /* 2. Isend_c -> Irecv_c, the other way. */
    if (rank == 1) {
        fill(b, 2);
        OK(MPI_Isend_c(b, (MPI_Count)N, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq));
        OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
    } else {
        OK(MPI_Irecv_c(b, (MPI_Count)N, MPI_BYTE, peer, 2, MPI_COMM_WORLD, &rq));
        OK(MPI_Wait(&rq, &st));
        count_is_n(&st);
        expect(b, 2);
    }

    /* 3. Large-count send, int receive of two items of a contiguous type
     * of N / 2 bytes; then an int send of it, a large-count receive. */
    MPI_Datatype half;
    OK(MPI_Type_contiguous((int)(N / 2), MPI_BYTE, &half));
    OK(MPI_Type_commit(&half));
    if (rank == 0) {
        fill(b, 3);
        OK(MPI_Send_c(b, (MPI_Count)N, MPI_BYTE, peer, 3, MPI_COMM_WORLD));
        OK(MPI_Recv_c(b, (MPI_Count)N, MPI_BYTE, peer, 4, MPI_COMM_WORLD, &st));
        count_is_n(&st);
        expect(b, 4);
    } else {
        OK(MPI_Recv(b, 2, half, peer, 3, MPI_COMM_WORLD, &st));
        int items = 0;
        OK(MPI_Get_count(&st, half, &items));
        CHECK(items == 2);
        expect(b, 3);
        fill(b, 4);
        OK(MPI_Send(b, 2, half, peer, 4, MPI_COMM_WORLD));
    }
    OK(MPI_Type_free(&half));

    /* 4. Sendrecv_c: N bytes one way, one int the other. */
    int token = rank == 0 ? -1 : 55;
    if (rank == 0) {
        fill(b, 5);
        OK(MPI_Sendrecv_c(b, (MPI_Count)N, MPI_BYTE, peer, 5, &token, 1, MPI_INT, peer, 5,
                          MPI_COMM_WORLD, &st));
        CHECK(token == 55);
    } else {
        OK(MPI_Sendrecv_c(&token, 1, MPI_INT, peer, 5, b, (MPI_Count)N, MPI_BYTE, peer, 5,
                          MPI_COMM_WORLD, &st));
        count_is_n(&st);
        expect(b, 5);
    }

    /* 5. Bcast_c and Ibcast_c from each rank in turn. */
    for (int root = 0; root < 2; root++) {
        if (rank == root) fill(b, 6 + root);
        else memset(b, 0, N);
        if (root == 0)
            OK(MPI_Bcast_c(b, (MPI_Count)N, MPI_BYTE, root, MPI_COMM_WORLD));
        else {
            OK(MPI_Ibcast_c(b, (MPI_Count)N, MPI_BYTE, root, MPI_COMM_WORLD, &rq));
            OK(MPI_Wait(&rq, MPI_STATUS_IGNORE));
        }
        expect(b, 6 + root);
    }

    /* 6. A receive too short for the message: MPI_ERR_TRUNCATE, the bytes
     * that fit delivered, none past the receive's end (they keep message
     * 7's). */
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    if (rank == 0) {
        fill(b, 8);
        OK(MPI_Send_c(b, (MPI_Count)N, MPI_BYTE, peer, 8, MPI_COMM_WORLD));
    } else {
        int rc = MPI_Recv_c(b, (MPI_Count)N - 64, MPI_BYTE, peer, 8, MPI_COMM_WORLD, &st);
        int cls = -1;
        MPI_Error_class(rc, &cls);
        CHECK(cls == MPI_ERR_TRUNCATE);
        size_t last_page = (N - 65) / 4096 * 4096;
        CHECK(b[0] == at(0, 8) && b[last_page] == at(last_page, 8));
        for (size_t i = N - 64; i < N; i++) CHECK(b[i] == at(i, 7));
    }

    /* The communicator is usable after all of it. */
    int one = 1, sum = 0;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD));
    CHECK(sum == 2);
    free(b);
    report_ok("large_messages");
    OK(MPI_Finalize());
    return 0;
}
