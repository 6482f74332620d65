/* Shared-memory windows (MPI_Win_allocate_shared): parts of different
 * sizes (ranks 0 and 2 with none), laid out rank after rank in one segment,
 * each 64-byte aligned (an empty part's query answers NULL); direct stores into one's own part and a
 * neighbour's, seen by loads through MPI_Win_shared_query's pointers after
 * MPI_Win_sync + barrier (the unified model); MPI_PROC_NULL's query; the
 * window's attributes; MPI_Put, MPI_Get and MPI_Accumulate into the shared
 * memory under fence and lock epochs; a window whose parts are all empty;
 * and no segment file left in /dev/shm once the window exists. */
#define _POSIX_C_SOURCE 200809L
#include <dirent.h>
#include <stdint.h>
#include <unistd.h>

#include "check.h"

/* Ints of rank r's part. */
static int part_len(int r) { return (r % 2 == 0) ? 0 : 5 + 8 * r; }

/* Files in /dev/shm named for windows this process created. */
static int own_segments(void) {
    char prefix[64];
    snprintf(prefix, sizeof prefix, "tmpi-osc.%ld.", (long)getpid());
    DIR *d = opendir("/dev/shm");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) n++;
    closedir(d);
    return n;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);

    int n = part_len(rank);
    int *mine = NULL;
    MPI_Win win;
    MPI_Info info;
    OK(MPI_Info_create(&info));
    OK(MPI_Info_set(info, "alloc_shared_noncontig", "true"));
    OK(MPI_Win_allocate_shared((MPI_Aint)n * sizeof(int), sizeof(int), info, MPI_COMM_WORLD, &mine,
                               &win));
    OK(MPI_Info_free(&info));
    CHECK(mine != NULL);
    CHECK((uintptr_t)mine % 64 == 0);
    if (rank == 0) CHECK(own_segments() == 0); /* unlinked once everyone mapped it */

    /* Attributes. */
    int *flavor, *unit, flag;
    MPI_Aint *wsize;
    void *wbase;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_SHARED);
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &wbase, &flag));
    CHECK(flag && wbase == (void *)mine);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag));
    CHECK(flag && *wsize == (MPI_Aint)(n * sizeof(int)));
    OK(MPI_Win_get_attr(win, MPI_WIN_DISP_UNIT, &unit, &flag));
    CHECK(flag && *unit == (int)sizeof(int));

    /* Every part: its size, unit and place (contiguous, in rank order). */
    int **part = malloc(size * sizeof *part);
    char *prev_end = NULL;
    for (int r = 0; r < size; r++) {
        MPI_Aint sz;
        int du;
        OK(MPI_Win_shared_query(win, r, &sz, &du, &part[r]));
        CHECK(sz == (MPI_Aint)(part_len(r) * sizeof(int)));
        CHECK(du == (int)sizeof(int));
        if (sz == 0) {
            CHECK(part[r] == NULL); /* an empty part has no address */
            continue;
        }
        CHECK((uintptr_t)part[r] % 64 == 0);
        if (prev_end) CHECK((char *)part[r] >= prev_end && (char *)part[r] < prev_end + 64);
        prev_end = (char *)part[r] + sz;
    }
    CHECK(n == 0 || part[rank] == mine);
    /* MPI_PROC_NULL: the first part that has memory (rank 1's). */
    MPI_Aint qsz;
    int qdu;
    int *qbase;
    OK(MPI_Win_shared_query(win, MPI_PROC_NULL, &qsz, &qdu, &qbase));
    CHECK(qbase == part[1] && qsz == (MPI_Aint)(part_len(1) * sizeof(int)));

    /* Stores into one's own part and loads of the others', in a passive
     * epoch with MPI_Win_sync around a barrier (the unified model). */
    int last = (size % 2 == 0) ? size - 1 : size - 2; /* the last rank with memory */
    OK(MPI_Win_lock_all(MPI_MODE_NOCHECK, win));
    for (int i = 0; i < n; i++) mine[i] = rank * 1000 + i;
    OK(MPI_Win_sync(win));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_sync(win));
    for (int r = 0; r < size; r++)
        for (int i = 0; i < part_len(r); i++) CHECK(part[r][i] == r * 1000 + i);
    OK(MPI_Win_unlock_all(win));
    MPI_Barrier(MPI_COMM_WORLD);
    /* A store into another rank's part. */
    if (rank == 0) part[last][part_len(last) - 1] = -7;
    OK(MPI_Win_sync(win));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_sync(win));
    CHECK(part[last][part_len(last) - 1] == -7);

    /* Put and Get through the window (pt2pt) into the shared memory. */
    OK(MPI_Win_fence(0, win));
    int v = 500 + rank;
    OK(MPI_Put(&v, 1, MPI_INT, last, 1 + rank, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    for (int r = 0; r < size; r++) CHECK(part[last][1 + r] == 500 + r);
    int got = -1;
    OK(MPI_Get(&got, 1, MPI_INT, last, 0, 1, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(got == last * 1000);

    /* Accumulates from every rank under a shared lock. */
    int one = 1;
    OK(MPI_Win_lock(MPI_LOCK_SHARED, last, 0, win));
    OK(MPI_Accumulate(&one, 1, MPI_INT, last, 0, 1, MPI_INT, MPI_SUM, win));
    OK(MPI_Win_unlock(last, win));
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, last, 0, win));
    OK(MPI_Get(&got, 1, MPI_INT, last, 0, 1, MPI_INT, win));
    OK(MPI_Win_unlock(last, win));
    CHECK(got == last * 1000 + size);
    OK(MPI_Win_sync(win));
    CHECK(part[last][0] == last * 1000 + size);
    OK(MPI_Win_free(&win));
    CHECK(win == MPI_WIN_NULL);
    free(part);

    /* Every part empty: the query still answers, size 0. */
    void *zbase;
    OK(MPI_Win_allocate_shared(0, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &zbase, &win));
    OK(MPI_Win_shared_query(win, MPI_PROC_NULL, &qsz, &qdu, &qbase));
    CHECK(qsz == 0);
    OK(MPI_Win_shared_query(win, 0, &qsz, &qdu, &qbase));
    CHECK(qsz == 0 && qdu == 1 && qbase == NULL);
    OK(MPI_Win_free(&win));

    /* A shared window over a split communicator (MPI_COMM_TYPE_SHARED). */
    MPI_Comm node;
    OK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node));
    double *d;
    OK(MPI_Win_allocate_shared(sizeof(double), sizeof(double), MPI_INFO_NULL, node, &d, &win));
    *d = rank + 0.5;
    OK(MPI_Win_sync(win));
    MPI_Barrier(node);
    OK(MPI_Win_sync(win));
    MPI_Aint dsz;
    double *peer;
    OK(MPI_Win_shared_query(win, (rank + 1) % size, &dsz, &qdu, &peer));
    CHECK(dsz == sizeof(double) && *peer == (rank + 1) % size + 0.5);
    MPI_Barrier(node);
    OK(MPI_Win_free(&win));
    OK(MPI_Comm_free(&node));
    if (rank == 0) CHECK(own_segments() == 0);

    report_ok("rma_shared");
    MPI_Finalize();
    return 0;
}
