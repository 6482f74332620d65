/* Dynamic windows (MPI_Win_create_dynamic, MPI_Win_attach, MPI_Win_detach):
 * the window's attributes; two regions attached per rank, their absolute
 * addresses (MPI_Get_address) exchanged; puts, gets and accumulates by
 * absolute address under fence, lock, lock_all and PSCW; an operation on
 * memory the target did not attach (beyond a region, straddling its end,
 * after a detach) fails its epoch's completion with MPI_ERR_RMA_RANGE and
 * leaves the target's memory untouched; detaching a region that is not
 * attached is MPI_ERR_RMA_RANGE; attach and shared_query on windows of the
 * other flavors are MPI_ERR_RMA_FLAVOR. */
#include "check.h"

static int cls(int code) {
    int c;
    MPI_Error_class(code, &c);
    return c;
}

int main(int argc, char **argv) {
    int rank, size;
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    int next = (rank + 1) % size, prev = (rank + size - 1) % size;

    MPI_Win win;
    OK(MPI_Win_create_dynamic(MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    int *flavor, flag;
    MPI_Aint *wsize;
    void *wbase;
    OK(MPI_Win_get_attr(win, MPI_WIN_CREATE_FLAVOR, &flavor, &flag));
    CHECK(flag && *flavor == MPI_WIN_FLAVOR_DYNAMIC);
    OK(MPI_Win_get_attr(win, MPI_WIN_BASE, &wbase, &flag));
    CHECK(flag && wbase == MPI_BOTTOM);
    OK(MPI_Win_get_attr(win, MPI_WIN_SIZE, &wsize, &flag));
    CHECK(flag && *wsize == 0);

    /* Region a: 8 ints attached of 16 (the rest must stay untouched);
     * region b: 16 ints. */
    int *a = malloc(16 * sizeof(int)), *b = malloc(16 * sizeof(int));
    for (int i = 0; i < 16; i++) a[i] = b[i] = -1;
    OK(MPI_Win_attach(win, a, 8 * sizeof(int)));
    OK(MPI_Win_attach(win, b, 16 * sizeof(int)));
    MPI_Aint mine[2], *addr = malloc(2 * size * sizeof(MPI_Aint));
    OK(MPI_Get_address(a, &mine[0]));
    OK(MPI_Get_address(b, &mine[1]));
    OK(MPI_Allgather(mine, 2, MPI_AINT, addr, 2, MPI_AINT, MPI_COMM_WORLD));
    MPI_Aint na = addr[2 * next], nb = addr[2 * next + 1];

    /* Fence: a put into each region of the next rank. */
    int v[4] = {100 + rank, 200 + rank, 300 + rank, 400 + rank};
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(v, 1, MPI_INT, next, na + 1 * sizeof(int), 1, MPI_INT, win));
    OK(MPI_Put(v, 4, MPI_INT, next, nb + 2 * sizeof(int), 4, MPI_INT, win));
    OK(MPI_Win_fence(0, win));
    CHECK(a[1] == 100 + prev);
    for (int i = 0; i < 4; i++) CHECK(b[2 + i] == 100 * (i + 1) + prev);

    /* Lock: get them back from the next rank. */
    int g[4] = {0};
    OK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win));
    OK(MPI_Get(g, 4, MPI_INT, next, nb + 2 * sizeof(int), 4, MPI_INT, win));
    OK(MPI_Win_unlock(next, win));
    for (int i = 0; i < 4; i++) CHECK(g[i] == 100 * (i + 1) + rank);

    /* Lock_all: every rank adds 1 to rank 0's a[0]; fetch-and-op too. */
    if (rank == 0) a[0] = 0;
    MPI_Barrier(MPI_COMM_WORLD);
    int one = 1, old = -1;
    OK(MPI_Win_lock_all(0, win));
    OK(MPI_Accumulate(&one, 1, MPI_INT, 0, addr[0], 1, MPI_INT, MPI_SUM, win));
    OK(MPI_Fetch_and_op(&one, &old, MPI_INT, 0, addr[0] + 2 * sizeof(int), MPI_SUM, win));
    OK(MPI_Win_unlock_all(win));
    MPI_Barrier(MPI_COMM_WORLD);
    if (rank == 0) CHECK(a[0] == size);

    /* PSCW towards the next rank. */
    MPI_Group world, to, from;
    MPI_Comm_group(MPI_COMM_WORLD, &world);
    MPI_Group_incl(world, 1, &next, &to);
    MPI_Group_incl(world, 1, &prev, &from);
    OK(MPI_Win_post(from, 0, win));
    OK(MPI_Win_start(to, 0, win));
    int w = 700 + rank;
    OK(MPI_Put(&w, 1, MPI_INT, next, nb + 10 * sizeof(int), 1, MPI_INT, win));
    OK(MPI_Win_complete(win));
    OK(MPI_Win_wait(win));
    CHECK(b[10] == 700 + prev);

    /* Memory the target did not attach: the origin cannot know; the target
     * refuses and the epoch's completion reports it. */
    int bad[4] = {-5, -5, -5, -5};
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win));
    OK(MPI_Put(bad, 1, MPI_INT, next, na + 8 * sizeof(int), 1, MPI_INT, win)); /* past a */
    CHECK(cls(MPI_Win_unlock(next, win)) == MPI_ERR_RMA_RANGE);
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win));
    OK(MPI_Put(bad, 4, MPI_INT, next, na + 6 * sizeof(int), 4, MPI_INT, win)); /* straddles */
    CHECK(cls(MPI_Win_flush(next, win)) == MPI_ERR_RMA_RANGE);
    OK(MPI_Accumulate(bad, 1, MPI_INT, next, na + 12 * sizeof(int), 1, MPI_INT, MPI_SUM, win));
    CHECK(cls(MPI_Win_unlock(next, win)) == MPI_ERR_RMA_RANGE);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win));
    int gbad = 42;
    OK(MPI_Get(&gbad, 1, MPI_INT, next, na + 9 * sizeof(int), 1, MPI_INT, win));
    CHECK(cls(MPI_Win_unlock(next, win)) == MPI_ERR_RMA_RANGE);
    CHECK(gbad == 42);
    /* Under a fence too; every rank gets out of it. */
    OK(MPI_Win_fence(0, win));
    OK(MPI_Put(bad, 1, MPI_INT, next, na + 15 * sizeof(int), 1, MPI_INT, win));
    CHECK(cls(MPI_Win_fence(0, win)) == MPI_ERR_RMA_RANGE);
    OK(MPI_Win_fence(0, win));
    MPI_Barrier(MPI_COMM_WORLD);
    for (int i = 6; i < 8; i++) CHECK(a[i] == -1);  /* the straddling put wrote nothing */
    for (int i = 8; i < 16; i++) CHECK(a[i] == -1); /* memory beyond a untouched */
    /* The window still works. */
    OK(MPI_Win_lock(MPI_LOCK_EXCLUSIVE, next, 0, win));
    OK(MPI_Put(v, 1, MPI_INT, next, na + 7 * sizeof(int), 1, MPI_INT, win));
    OK(MPI_Win_unlock(next, win));
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(a[7] == 100 + prev);

    /* Detach b: operations on it fail from then on. */
    OK(MPI_Win_detach(win, b));
    CHECK(cls(MPI_Win_detach(win, b)) == MPI_ERR_RMA_RANGE);
    CHECK(cls(MPI_Win_detach(win, &w)) == MPI_ERR_RMA_RANGE);
    MPI_Barrier(MPI_COMM_WORLD);
    OK(MPI_Win_lock(MPI_LOCK_SHARED, next, 0, win));
    OK(MPI_Put(bad, 1, MPI_INT, next, nb, 1, MPI_INT, win));
    CHECK(cls(MPI_Win_unlock(next, win)) == MPI_ERR_RMA_RANGE);
    MPI_Barrier(MPI_COMM_WORLD);
    CHECK(b[0] == -1);
    OK(MPI_Win_detach(win, a));
    OK(MPI_Win_free(&win));

    /* Flavor checks. */
    int mem[2];
    OK(MPI_Win_create(mem, sizeof mem, 1, MPI_INFO_NULL, MPI_COMM_WORLD, &win));
    OK(MPI_Win_set_errhandler(win, MPI_ERRORS_RETURN));
    CHECK(cls(MPI_Win_attach(win, a, 4)) == MPI_ERR_RMA_FLAVOR);
    CHECK(cls(MPI_Win_detach(win, a)) == MPI_ERR_RMA_FLAVOR);
    MPI_Aint qs;
    int qd;
    void *qb;
    CHECK(cls(MPI_Win_shared_query(win, 0, &qs, &qd, &qb)) == MPI_ERR_RMA_FLAVOR);
    OK(MPI_Win_free(&win));

    MPI_Group_free(&to);
    MPI_Group_free(&from);
    MPI_Group_free(&world);
    free(a);
    free(b);
    free(addr);
    report_ok("rma_dynamic");
    MPI_Finalize();
    return 0;
}
