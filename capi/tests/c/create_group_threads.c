#define _DEFAULT_SOURCE
/* MPI_Comm_create_group on two threads of each process, where one thread's
 * agreement starts on some ranks long before its members elsewhere come to
 * it (MPICH's threads/comm/comm_create_group_threads2, timed so that it
 * deadlocked every time before the fix):
 *   - the last rank's thread 1 starts create_group(world, tag 1) at once;
 *     its thread 0 starts create_group(world, tag 0) 200 ms late;
 *   - the other ranks' thread 0 starts create_group(world, tag 0) at once;
 *     their thread 1 first makes create_group(all but the last, tag 1)
 *     (100 ms late), then create_group(world, tag 1).
 * Before, the last rank's tag-1 agreement took the process's offer of free
 * context ids and held it through a round that waited for the others,
 * whose tag-1 agreements (over the smaller group) waited behind their
 * tag-0 one, which waited for the last rank's offer: a cycle. */
#include <unistd.h>
#include "check.h"

#define ITERS 3
static int rank, size;
static MPI_Group world_group, sub_group;

static void use(MPI_Comm c, int expect_size) {
    int n, one = 1, sum = 0, cmp;
    OK(MPI_Comm_size(c, &n));
    CHECK(n == expect_size);
    OK(MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, c));
    CHECK(sum == expect_size);
    if (expect_size == size) {
        OK(MPI_Comm_compare(c, MPI_COMM_WORLD, &cmp));
        CHECK(cmp == MPI_CONGRUENT);
    }
}

static void *work(void *arg) {
    int t = *(int *)arg;
    int last = rank == size - 1;
    for (int i = 0; i < ITERS; i++) {
        MPI_Comm c;
        if (i == 0 && last && t == 0) usleep(200000);
        if (t == 1 && !last) {
            if (i == 0) usleep(100000);
            OK(MPI_Comm_create_group(MPI_COMM_WORLD, sub_group, 1, &c));
            use(c, size - 1);
            OK(MPI_Comm_free(&c));
        }
        OK(MPI_Comm_create_group(MPI_COMM_WORLD, world_group, t, &c));
        use(c, size);
        OK(MPI_Comm_free(&c));
    }
    return NULL;
}

int main(int argc, char **argv) {
    init_multiple(&argc, &argv, &rank, &size);
    OK(MPI_Comm_group(MPI_COMM_WORLD, &world_group));
    int range[1][3] = {{0, size - 2, 1}};
    OK(MPI_Group_range_incl(world_group, 1, range, &sub_group));
    run_threads(2, work);
    OK(MPI_Group_free(&sub_group));
    OK(MPI_Group_free(&world_group));
    report_ok("create_group_threads");
    MPI_Finalize();
    return 0;
}
