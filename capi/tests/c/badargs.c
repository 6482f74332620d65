/* Bad-argument property test (issue 10) under MPI_ERRORS_RETURN.
 *
 * A seeded PRNG generates thousands of calls of MPI_Send, Recv, Isend,
 * Irecv, Bcast, Reduce, Allreduce, Comm_split and Type_contiguous /
 * Type_vector / Type_commit / Type_free / Type_size, Wait / Test. Every argument is drawn
 * from a valid or an invalid set; each call has at least one invalid
 * argument. The classes an invalid argument may raise are computed here from
 * the MPI standard's rules (independently of the library): bad communicator
 * MPI_ERR_COMM, bad rank MPI_ERR_RANK, bad root MPI_ERR_ROOT, bad tag
 * MPI_ERR_TAG, negative count MPI_ERR_COUNT, bad or uncommitted datatype
 * MPI_ERR_TYPE, bad op MPI_ERR_OP, NULL buffer with a non-zero count
 * MPI_ERR_BUFFER, NULL output handle / negative color MPI_ERR_ARG,
 * invalid or completed-and-freed request MPI_ERR_REQUEST. With
 * several invalid arguments the standard fixes no order, so any of their
 * classes is accepted. A call must return (no crash, no hang), must not
 * return MPI_SUCCESS, and its class must be one of the accepted ones.
 *
 * All ranks use the same seed, so collectives are called with the same
 * arguments everywhere, and only invalid values that are invalid on every
 * rank are used (a root-only invalid receive buffer is never generated): no
 * rank can enter a collective that another rank rejected.
 *
 * argv[1] = seed (default 1), argv[2] = number of calls (default 6000).
 * Afterwards a valid Allreduce and ring exchange check the library still
 * works. */
#include "check.h"
#include <limits.h>
#include <stdint.h>

static uint64_t rng = 1;
static uint32_t rnd(void) {
    /* xorshift64* */
    rng ^= rng >> 12;
    rng ^= rng << 25;
    rng ^= rng >> 27;
    return (uint32_t)((rng * 2685821657736338717ull) >> 32);
}
static int pick(int n) { return (int)(rnd() % (uint32_t)n); }

#define CL(c) (1ull << (c))

typedef struct {
    int v;
    uint64_t bad; /* 0: valid; else the classes it may raise */
} Arg;

static int rank, size, tag_ub;
static MPI_Comm dup_comm, freed_comm;
static MPI_Datatype contig, uncommitted, freed_type;
static MPI_Op user_op, freed_op;
static MPI_Request freed_req;

/* want_bad: draw from the invalid set. */
static Arg gen_comm(int want_bad) {
    if (!want_bad) {
        Arg a = {pick(2) ? MPI_COMM_WORLD : dup_comm, 0};
        return a;
    }
    int vals[3] = {MPI_COMM_NULL, 12345, freed_comm};
    Arg a = {vals[pick(3)], CL(MPI_ERR_COMM)};
    return a;
}

enum { DEST, SOURCE, ROOT };
static Arg gen_rank(int kind, int want_bad) {
    if (!want_bad) {
        int r = pick(size + 2);
        Arg a = {r < size ? r : MPI_PROC_NULL, 0};
        if (r == size + 1 && kind == SOURCE) a.v = MPI_ANY_SOURCE;
        if (kind == ROOT) a.v = pick(size);
        return a;
    }
    int vals[5] = {size, size + 17, -5, INT_MIN, MPI_ANY_SOURCE};
    int n = kind == DEST ? 5 : 4;
    if (kind == ROOT) {
        vals[2] = -1; /* MPI_ANY_SOURCE's value: no root */
        vals[3] = MPI_PROC_NULL; /* a root only on intercommunicators */
    }
    Arg a = {vals[pick(n)], kind == ROOT ? CL(MPI_ERR_ROOT) : CL(MPI_ERR_RANK)};
    return a;
}

static Arg gen_tag(int recv, int want_bad) {
    if (!want_bad) {
        int vals[4] = {0, 7, tag_ub, MPI_ANY_TAG};
        Arg a = {vals[pick(recv ? 4 : 3)], 0};
        return a;
    }
    int vals[4] = {-7, INT_MIN, MPI_ANY_TAG, tag_ub + 1};
    int n = tag_ub < INT_MAX ? 4 : 2;
    if (!recv) n = tag_ub < INT_MAX ? 4 : 3;
    Arg a = {vals[pick(n)], CL(MPI_ERR_TAG)};
    if (recv && a.v == MPI_ANY_TAG) a.v = -7;
    return a;
}

static Arg gen_count(int want_bad) {
    if (!want_bad) {
        Arg a = {pick(5), 0};
        return a;
    }
    int vals[3] = {-1, -1000, INT_MIN};
    Arg a = {vals[pick(3)], CL(MPI_ERR_COUNT)};
    return a;
}

/* reduction: only predefined types are valid; 2: a type constructor,
 * commit or size, where an uncommitted type is a valid argument. */
static Arg gen_type(int reduction, int want_bad) {
    if (!want_bad) {
        int vals[3] = {MPI_INT, MPI_DOUBLE, contig};
        Arg a = {vals[pick(reduction == 1 ? 2 : 3)], 0};
        if (reduction == 2 && pick(4) == 0) a.v = uncommitted;
        return a;
    }
    int vals[4] = {MPI_DATATYPE_NULL, 9999, freed_type, uncommitted};
    Arg a = {vals[pick(reduction == 2 ? 3 : 4)], CL(MPI_ERR_TYPE)};
    return a;
}

static Arg gen_op(int want_bad) {
    if (!want_bad) {
        int vals[3] = {MPI_SUM, MPI_MAX, user_op};
        Arg a = {vals[pick(3)], 0};
        return a;
    }
    int vals[3] = {MPI_OP_NULL, 4242, freed_op};
    Arg a = {vals[pick(3)], CL(MPI_ERR_OP)};
    return a;
}

/* A buffer argument: 1 = the real buffer, 0 = NULL (bad when count != 0). */
static Arg gen_buf(int want_bad) {
    Arg a = {want_bad ? 0 : 1, 0};
    return a;
}
static void *bufp(Arg b, void *real) { return b.v ? real : NULL; }
static uint64_t buf_bad(Arg b, Arg count) {
    return (!b.v && count.v != 0) ? CL(MPI_ERR_BUFFER) : 0;
}

/* Which arguments are invalid: each with probability 1/3, at least one. */
static void choose_bad(int n, int *bad) {
    int any = 0;
    for (int i = 0; i < n; i++) any |= (bad[i] = pick(3) == 0);
    if (!any) bad[pick(n)] = 1;
}

static void user_fn(void *in, void *inout, int *len, MPI_Datatype *t) {
    (void)in; (void)inout; (void)len; (void)t;
}

enum { F_SEND, F_RECV, F_ISEND, F_IRECV, F_BCAST, F_REDUCE, F_ALLREDUCE, F_SPLIT,
       F_CONTIG, F_VECTOR, F_COMMIT, F_FREE, F_SIZE, F_WAIT, F_TEST, NF };
static const char *fname[NF] = {"MPI_Send", "MPI_Recv", "MPI_Isend", "MPI_Irecv",
    "MPI_Bcast", "MPI_Reduce", "MPI_Allreduce", "MPI_Comm_split",
    "MPI_Type_contiguous", "MPI_Type_vector", "MPI_Type_commit", "MPI_Type_free",
    "MPI_Type_size", "MPI_Wait", "MPI_Test"};
static long calls[NF];
static long by_class[64];

static void judge(int f, long it, int rc, uint64_t accept, const char *desc) {
    int cls = -1;
    calls[f]++;
    if (rc == MPI_SUCCESS) {
        fprintf(stderr, "rank %d: call %ld %s(%s) succeeded with invalid arguments (accepted classes 0x%llx)\n",
                rank, it, fname[f], desc, (unsigned long long)accept);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 4);
    }
    if (MPI_Error_class(rc, &cls) != MPI_SUCCESS || cls < 0 || cls >= 64 || !(accept & CL(cls))) {
        char s[MPI_MAX_ERROR_STRING];
        int l = 0;
        s[0] = 0;
        MPI_Error_string(rc, s, &l);
        fprintf(stderr, "rank %d: call %ld %s(%s): class %d (%s), accepted classes 0x%llx\n",
                rank, it, fname[f], desc, cls, s, (unsigned long long)accept);
        fflush(stderr);
        MPI_Abort(MPI_COMM_WORLD, 5);
    }
    by_class[cls]++;
}

int main(int argc, char **argv) {
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN));
    unsigned long long seed = argc > 1 ? strtoull(argv[1], NULL, 10) : 1;
    long n = argc > 2 ? atol(argv[2]) : 6000;
    rng = seed * 0x9E3779B97F4A7C15ull + 1;
    /* Big enough for 4 elements of any valid type (contig: 32 bytes). */
    static double sbuf[64], rbuf[64];
    int *ub, flag;
    OK(MPI_Comm_get_attr(MPI_COMM_WORLD, MPI_TAG_UB, &ub, &flag));
    CHECK(flag);
    tag_ub = *ub;

    OK(MPI_Comm_dup(MPI_COMM_WORLD, &dup_comm));
    OK(MPI_Comm_dup(MPI_COMM_WORLD, &freed_comm));
    MPI_Comm tmpc = freed_comm;
    OK(MPI_Comm_free(&tmpc));
    OK(MPI_Type_contiguous(4, MPI_DOUBLE, &contig));
    OK(MPI_Type_commit(&contig));
    OK(MPI_Type_vector(2, 1, 2, MPI_INT, &uncommitted));
    OK(MPI_Type_contiguous(2, MPI_INT, &freed_type));
    OK(MPI_Type_commit(&freed_type));
    MPI_Datatype tmpt = freed_type;
    OK(MPI_Type_free(&tmpt));
    OK(MPI_Op_create(user_fn, 1, &user_op));
    OK(MPI_Op_create(user_fn, 1, &freed_op));
    MPI_Op tmpo = freed_op;
    OK(MPI_Op_free(&tmpo));
    /* A request completed by MPI_Wait (which frees it): its old handle
     * value is invalid from then on. */
    MPI_Request tmpr;
    OK(MPI_Irecv(sbuf, 1, MPI_INT, MPI_PROC_NULL, 0, MPI_COMM_WORLD, &tmpr));
    freed_req = tmpr;
    OK(MPI_Wait(&tmpr, MPI_STATUS_IGNORE));
    CHECK(tmpr == MPI_REQUEST_NULL && freed_req != MPI_REQUEST_NULL);

    char d[256];
    for (long it = 0; it < n; it++) {
        int f = pick(NF);
        int bad[8] = {0};
        uint64_t acc = 0;
        int rc = MPI_SUCCESS;
        MPI_Request req = MPI_REQUEST_NULL;
        switch (f) {
        case F_SEND: case F_ISEND: case F_RECV: case F_IRECV: {
            int recv = f == F_RECV || f == F_IRECV;
            choose_bad(6, bad);
            Arg b = gen_buf(bad[0]), c = gen_count(bad[1]), t = gen_type(0, bad[2]);
            Arg r = gen_rank(recv ? SOURCE : DEST, bad[3]), g = gen_tag(recv, bad[4]);
            Arg cm = gen_comm(bad[5]);
            acc = buf_bad(b, c) | c.bad | t.bad | r.bad | g.bad | cm.bad;
            if (!acc) { it--; continue; } /* only a NULL buffer with count 0 was "bad" */
            snprintf(d, sizeof d, "buf=%s count=%d type=%d rank=%d tag=%d comm=%d",
                     b.v ? "buf" : "NULL", c.v, t.v, r.v, g.v, cm.v);
            void *p = bufp(b, recv ? (void *)rbuf : (void *)sbuf);
            if (f == F_SEND) rc = MPI_Send(p, c.v, t.v, r.v, g.v, cm.v);
            if (f == F_ISEND) rc = MPI_Isend(p, c.v, t.v, r.v, g.v, cm.v, &req);
            if (f == F_RECV) rc = MPI_Recv(p, c.v, t.v, r.v, g.v, cm.v, MPI_STATUS_IGNORE);
            if (f == F_IRECV) rc = MPI_Irecv(p, c.v, t.v, r.v, g.v, cm.v, &req);
            break;
        }
        case F_BCAST: {
            choose_bad(5, bad);
            Arg b = gen_buf(bad[0]), c = gen_count(bad[1]), t = gen_type(0, bad[2]);
            Arg r = gen_rank(ROOT, bad[3]), cm = gen_comm(bad[4]);
            acc = buf_bad(b, c) | c.bad | t.bad | r.bad | cm.bad;
            if (!acc) { it--; continue; }
            snprintf(d, sizeof d, "buf=%s count=%d type=%d root=%d comm=%d",
                     b.v ? "buf" : "NULL", c.v, t.v, r.v, cm.v);
            rc = MPI_Bcast(bufp(b, rbuf), c.v, t.v, r.v, cm.v);
            break;
        }
        case F_REDUCE: case F_ALLREDUCE: {
            choose_bad(f == F_REDUCE ? 6 : 7, bad);
            /* bad[0]: NULL send buffer; bad[6] (Allreduce): NULL receive
             * buffer (significant on every rank, unlike Reduce's). */
            Arg b = gen_buf(bad[0]), c = gen_count(bad[1]), t = gen_type(1, bad[2]);
            Arg o = gen_op(bad[3]), r = gen_rank(ROOT, bad[4]), cm = gen_comm(bad[5]);
            Arg rb = gen_buf(bad[6]);
            acc = buf_bad(b, c) | c.bad | t.bad | o.bad | cm.bad;
            if (f == F_REDUCE) acc |= r.bad;
            else acc |= buf_bad(rb, c);
            if (!acc) { it--; continue; }
            snprintf(d, sizeof d, "sbuf=%s rbuf=%s count=%d type=%d op=%d root=%d comm=%d",
                     b.v ? "buf" : "NULL", rb.v ? "buf" : "NULL", c.v, t.v, o.v,
                     f == F_REDUCE ? r.v : -99, cm.v);
            if (f == F_REDUCE)
                rc = MPI_Reduce(bufp(b, sbuf), rbuf, c.v, t.v, o.v, r.v, cm.v);
            else
                rc = MPI_Allreduce(bufp(b, sbuf), bufp(rb, rbuf), c.v, t.v, o.v, cm.v);
            break;
        }
        case F_SPLIT: {
            choose_bad(3, bad);
            Arg cm = gen_comm(bad[0]);
            int color = bad[1] ? (pick(2) ? -3 : INT_MIN) : (pick(4) ? pick(3) : MPI_UNDEFINED);
            int key = (int)rnd();
            MPI_Comm out = MPI_COMM_NULL;
            acc = cm.bad | (bad[1] ? CL(MPI_ERR_ARG) : 0) | (bad[2] ? CL(MPI_ERR_ARG) : 0);
            snprintf(d, sizeof d, "comm=%d color=%d key=%d newcomm=%s", cm.v, color, key,
                     bad[2] ? "NULL" : "ptr");
            rc = MPI_Comm_split(cm.v, color, key, bad[2] ? NULL : &out);
            break;
        }
        case F_CONTIG: case F_VECTOR: {
            int vec = f == F_VECTOR;
            choose_bad(4, bad);
            Arg c = gen_count(bad[0]), t = gen_type(2, bad[1]);
            /* A negative block length: MPI_ERR_COUNT or MPI_ERR_ARG. */
            int bl = bad[2] && vec ? -1 - pick(5) : 1 + pick(3);
            MPI_Datatype out = MPI_DATATYPE_NULL;
            acc = c.bad | t.bad | (bad[2] && vec ? CL(MPI_ERR_COUNT) | CL(MPI_ERR_ARG) : 0) |
                  (bad[3] ? CL(MPI_ERR_ARG) : 0);
            if (!acc) { it--; continue; }
            snprintf(d, sizeof d, "count=%d blocklength=%d type=%d newtype=%s", c.v, bl, t.v,
                     bad[3] ? "NULL" : "ptr");
            if (vec)
                rc = MPI_Type_vector(c.v, bl, 3, t.v, bad[3] ? NULL : &out);
            else
                rc = MPI_Type_contiguous(c.v, t.v, bad[3] ? NULL : &out);
            break;
        }
        case F_COMMIT: case F_SIZE: {
            choose_bad(2, bad);
            Arg t = gen_type(2, bad[0]);
            MPI_Datatype tv = t.v;
            int sz;
            /* NULL pointer to the handle / result: MPI_ERR_ARG (or
             * MPI_ERR_TYPE: the handle cannot be read). */
            acc = t.bad | (bad[1] ? CL(MPI_ERR_ARG) | CL(MPI_ERR_TYPE) : 0);
            snprintf(d, sizeof d, "type=%d ptr=%s", t.v, bad[1] ? "NULL" : "ptr");
            if (f == F_COMMIT)
                rc = MPI_Type_commit(bad[1] ? NULL : &tv);
            else
                rc = MPI_Type_size(tv, bad[1] ? NULL : &sz);
            break;
        }
        case F_WAIT: case F_TEST: {
            /* Always invalid: a never-allocated or freed request, NULL. */
            int vals[3] = {31337, freed_req, -5};
            int k = pick(4);
            MPI_Request rq = k < 3 ? vals[k] : MPI_REQUEST_NULL;
            int fl = 0;
            acc = CL(MPI_ERR_REQUEST) | (k == 3 ? CL(MPI_ERR_ARG) : 0);
            snprintf(d, sizeof d, "&request=%s request=%d", k < 3 ? "ptr" : "NULL", rq);
            if (f == F_WAIT)
                rc = MPI_Wait(k < 3 ? &rq : NULL, MPI_STATUS_IGNORE);
            else
                rc = MPI_Test(k < 3 ? &rq : NULL, &fl, MPI_STATUS_IGNORE);
            break;
        }
        case F_FREE: {
            /* Always invalid: an invalid handle, a predefined type, NULL. */
            int vals[5] = {MPI_DATATYPE_NULL, 9999, freed_type, MPI_INT, MPI_DOUBLE};
            int k = pick(6);
            MPI_Datatype tv = k < 5 ? vals[k] : MPI_INT;
            acc = CL(MPI_ERR_TYPE) | CL(MPI_ERR_ARG);
            snprintf(d, sizeof d, "&type=%s type=%d", k < 5 ? "ptr" : "NULL", tv);
            rc = MPI_Type_free(k < 5 ? &tv : NULL);
            break;
        }
        }
        judge(f, it, rc, acc, d);
        if (req != MPI_REQUEST_NULL) {
            fprintf(stderr, "rank %d: call %ld %s(%s) failed but returned a request\n", rank,
                    it, fname[f], d);
            MPI_Abort(MPI_COMM_WORLD, 6);
        }
    }

    /* The library still works: a valid Allreduce and a ring exchange. */
    int one = rank, sum = -1;
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, dup_comm));
    CHECK(sum == size * (size - 1) / 2);
    int got = -1;
    OK(MPI_Sendrecv(&rank, 1, MPI_INT, (rank + 1) % size, 3, &got, 1, MPI_INT,
                    (rank + size - 1) % size, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    CHECK(got == (rank + size - 1) % size);
    OK(MPI_Type_free(&contig));
    OK(MPI_Type_free(&uncommitted));
    OK(MPI_Op_free(&user_op));
    OK(MPI_Comm_free(&dup_comm));
    if (rank == 0) {
        long total = 0;
        for (int f = 0; f < NF; f++) total += calls[f];
        printf("badargs: seed %llu: %ld calls:", seed, total);
        for (int f = 0; f < NF; f++) printf(" %s %ld", fname[f], calls[f]);
        printf("\nbadargs: classes:");
        for (int c = 0; c < 64; c++)
            if (by_class[c]) printf(" %d:%ld", c, by_class[c]);
        printf("\n");
        fflush(stdout);
    }
    report_ok("badargs");
    OK(MPI_Finalize());
    return 0;
}
