/* MPI_T: control variables are the MCA parameters; performance variables
 * are the pml's counters; categories the frameworks and components. 2+
 * ranks. */
#include "check.h"

int main(int argc, char **argv) {
    int provided, rank, size, n, i, idx;
    OK(MPI_T_init_thread(MPI_THREAD_SINGLE, &provided));
    OK(MPI_Init(&argc, &argv));
    OK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
    OK(MPI_Comm_size(MPI_COMM_WORLD, &size));
    OK(MPI_T_cvar_get_num(&n));
    CHECK(n > 5);
    OK(MPI_T_cvar_get_index("mpi_param_check", &idx));
    char name[256], desc[1024];
    int nl = sizeof name, dl = sizeof desc, verb, bind, scope;
    MPI_Datatype dt;
    MPI_T_enum en;
    OK(MPI_T_cvar_get_info(idx, name, &nl, &verb, &dt, &en, desc, &dl, &bind, &scope));
    CHECK(strcmp(name, "mpi_param_check") == 0 && dt == MPI_INT && dl > 1);
    MPI_T_cvar_handle h;
    int count, val = -1;
    OK(MPI_T_cvar_handle_alloc(idx, NULL, &h, &count));
    CHECK(count == 1);
    OK(MPI_T_cvar_read(h, &val));
    CHECK(val == 1);
    CHECK(MPI_T_cvar_write(h, &val) == MPI_T_ERR_CVAR_SET_NEVER);
    OK(MPI_T_cvar_handle_free(&h));
    CHECK(MPI_T_cvar_get_index("no_such_parameter", &idx) == MPI_T_ERR_INVALID_NAME);

    OK(MPI_T_pvar_get_num(&n));
    CHECK(n >= 7);
    OK(MPI_T_pvar_get_index("pml_eager_sent", MPI_T_PVAR_CLASS_COUNTER, &idx));
    MPI_T_pvar_session s;
    MPI_T_pvar_handle ph;
    unsigned long long before, after;
    OK(MPI_T_pvar_session_create(&s));
    OK(MPI_T_pvar_handle_alloc(s, idx, NULL, &ph, &count));
    OK(MPI_T_pvar_read(s, ph, &before));
    int x = 1;
    for (i = 0; i < 10; i++) {
        if (rank == 0) OK(MPI_Send(&x, 1, MPI_INT, 1 % size, 0, MPI_COMM_WORLD));
        if (rank == 1 % size) OK(MPI_Recv(&x, 1, MPI_INT, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    OK(MPI_T_pvar_read(s, ph, &after));
    if (rank == 0) CHECK(after >= before + 10);
    OK(MPI_T_pvar_handle_free(s, &ph));

    /* The matcher's queue depths (LEVEL), their high-water marks
     * (HIGHWATERMARK) and the offload counters (COUNTER), read in the
     * session. Rank 1 posts 5 receives nothing has been sent for yet, then
     * lets rank 0 send 3 messages it has not posted receives for. */
    const char *names[] = {"pml_posted_depth",     "pml_posted_high_water",
                           "pml_unexpected_depth", "pml_unexpected_high_water",
                           "pml_sw_matches",       "pml_offloaded",
                           "pml_nic_matches",      "pml_syncs",
                           "pml_del_lost",         "pml_fallbacks"};
    const int classes[] = {MPI_T_PVAR_CLASS_LEVEL, MPI_T_PVAR_CLASS_HIGHWATERMARK,
                           MPI_T_PVAR_CLASS_LEVEL, MPI_T_PVAR_CLASS_HIGHWATERMARK,
                           MPI_T_PVAR_CLASS_COUNTER, MPI_T_PVAR_CLASS_COUNTER,
                           MPI_T_PVAR_CLASS_COUNTER, MPI_T_PVAR_CLASS_COUNTER,
                           MPI_T_PVAR_CLASS_COUNTER, MPI_T_PVAR_CLASS_COUNTER};
    enum { NV = 10 };
    MPI_T_pvar_handle hv[NV];
    for (i = 0; i < NV; i++) {
        int class_, bind_, ro, cont, atom;
        MPI_Datatype pdt;
        MPI_T_enum pen;
        nl = sizeof name;
        dl = sizeof desc;
        OK(MPI_T_pvar_get_index(names[i], classes[i], &idx));
        OK(MPI_T_pvar_get_info(idx, name, &nl, &verb, &class_, &pdt, &pen, desc, &dl, &bind_,
                               &ro, &cont, &atom));
        CHECK(strcmp(name, names[i]) == 0 && class_ == classes[i]);
        CHECK(pdt == MPI_UNSIGNED_LONG_LONG && bind_ == MPI_T_BIND_NO_OBJECT && ro && cont);
        OK(MPI_T_pvar_handle_alloc(s, idx, NULL, &hv[i], &count));
        CHECK(count == 1);
    }
    /* A variable is named by name and class together. */
    CHECK(MPI_T_pvar_get_index("pml_posted_depth", MPI_T_PVAR_CLASS_COUNTER, &idx) ==
          MPI_T_ERR_INVALID_NAME);
    unsigned long long v0[NV], v1[NV], v2[NV], v3[NV];
    int go = 0, buf[5], ubuf[3];
    MPI_Request rq[5];
    if (rank == 1) {
        for (i = 0; i < NV; i++) OK(MPI_T_pvar_read(s, hv[i], &v0[i]));
        for (i = 0; i < 5; i++)
            OK(MPI_Irecv(&buf[i], 1, MPI_INT, 0, 100 + i, MPI_COMM_WORLD, &rq[i]));
        for (i = 0; i < NV; i++) OK(MPI_T_pvar_read(s, hv[i], &v1[i]));
        CHECK(v1[0] == v0[0] + 5);   /* posted depth */
        CHECK(v1[1] >= v1[0]);       /* posted high water */
        CHECK(v1[2] == v0[2]);       /* unexpected depth unchanged */
        /* Let rank 0 send the unexpected messages; wait until the last is
         * here (one sender's messages arrive in order). */
        OK(MPI_Send(&go, 1, MPI_INT, 0, 1, MPI_COMM_WORLD));
        int flag = 0;
        while (!flag) OK(MPI_Iprobe(0, 202, MPI_COMM_WORLD, &flag, MPI_STATUS_IGNORE));
        for (i = 0; i < NV; i++) OK(MPI_T_pvar_read(s, hv[i], &v2[i]));
        CHECK(v2[2] == v0[2] + 3);   /* unexpected depth */
        CHECK(v2[3] >= v2[2]);       /* unexpected high water */
        CHECK(v2[0] == v1[0]);       /* the posted receives are still waiting */
        for (i = 0; i < 3; i++)
            OK(MPI_Recv(&ubuf[i], 1, MPI_INT, 0, 200 + i, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < 3; i++) CHECK(ubuf[i] == 200 + i);
        /* Now complete the posted receives. */
        OK(MPI_Send(&go, 1, MPI_INT, 0, 2, MPI_COMM_WORLD));
        OK(MPI_Waitall(5, rq, MPI_STATUSES_IGNORE));
        for (i = 0; i < 5; i++) CHECK(buf[i] == 100 + i);
        for (i = 0; i < NV; i++) OK(MPI_T_pvar_read(s, hv[i], &v3[i]));
        CHECK(v3[0] == v0[0] && v3[2] == v0[2]);  /* queues drained */
        CHECK(v3[1] >= v0[0] + 5 && v3[3] >= v0[2] + 3);  /* the marks stay */
        /* 3 receives posted on unexpected messages + 5 arrivals on queued
         * receives (at least: the go messages match too). */
        CHECK(v3[4] >= v0[4] + 8);
        for (i = 5; i < NV; i++) CHECK(v3[i] >= v0[i]);  /* counters never go down */
        /* Rank 0 waits for this before going on (its next messages would
         * be unexpected here). */
        OK(MPI_Send(&go, 1, MPI_INT, 0, 3, MPI_COMM_WORLD));
    } else if (rank == 0) {
        OK(MPI_Recv(&go, 1, MPI_INT, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < 3; i++) {
            int v = 200 + i;
            OK(MPI_Send(&v, 1, MPI_INT, 1, 200 + i, MPI_COMM_WORLD));
        }
        OK(MPI_Recv(&go, 1, MPI_INT, 1, 2, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
        for (i = 0; i < 5; i++) {
            int v = 100 + i;
            OK(MPI_Send(&v, 1, MPI_INT, 1, 100 + i, MPI_COMM_WORLD));
        }
        OK(MPI_Recv(&go, 1, MPI_INT, 1, 3, MPI_COMM_WORLD, MPI_STATUS_IGNORE));
    }
    for (i = 0; i < NV; i++) OK(MPI_T_pvar_handle_free(s, &hv[i]));
    OK(MPI_T_pvar_session_free(&s));

    /* Categories: the MCA frameworks and their components. Every control
     * variable is in exactly one category, named by its framework or its
     * framework_component prefix; the pml category holds every performance
     * variable; a framework lists its components as sub-categories. */
    int ncat, ncv, npv, stamp;
    OK(MPI_T_category_get_num(&ncat));
    OK(MPI_T_cvar_get_num(&ncv));
    OK(MPI_T_pvar_get_num(&npv));
    CHECK(ncat > 3);
    int *seen = calloc(ncv, sizeof(int)), pml = -1, btl = -1;
    for (int c = 0; c < ncat; c++) {
        char cname[128], desc[256];
        int cl = sizeof cname, dl = sizeof desc, nc, np, ns;
        OK(MPI_T_category_get_info(c, cname, &cl, desc, &dl, &nc, &np, &ns));
        int back;
        OK(MPI_T_category_get_index(cname, &back));
        CHECK(back == c && dl > 1);
        if (strcmp(cname, "pml") == 0) {
            pml = c;
            CHECK(np == npv);
        } else {
            CHECK(np == 0);
        }
        if (strcmp(cname, "btl") == 0) btl = c;
        int *ids = malloc((nc + 1) * sizeof(int));
        OK(MPI_T_category_get_cvars(c, nc, ids));
        for (int k = 0; k < nc; k++) {
            char vname[256];
            int vl = sizeof vname;
            CHECK(ids[k] >= 0 && ids[k] < ncv);
            seen[ids[k]]++;
            OK(MPI_T_cvar_get_info(ids[k], vname, &vl, NULL, NULL, NULL, NULL, NULL, NULL, NULL));
            size_t pl = strlen(cname);
            CHECK(strncmp(vname, cname, pl) == 0 && (vname[pl] == '_' || vname[pl] == '\0'));
        }
        free(ids);
    }
    for (int k = 0; k < ncv; k++) CHECK(seen[k] == 1);
    free(seen);
    CHECK(pml >= 0 && btl >= 0);
    /* btl's sub-categories are its components, e.g. btl_sm. */
    int nsub;
    OK(MPI_T_category_get_info(btl, NULL, NULL, NULL, NULL, NULL, NULL, &nsub));
    int *subs = malloc((nsub + 1) * sizeof(int)), sm = -1;
    OK(MPI_T_category_get_categories(btl, nsub, subs));
    OK(MPI_T_category_get_index("btl_sm", &sm));
    int found = 0;
    for (int k = 0; k < nsub; k++) found |= subs[k] == sm;
    CHECK(nsub > 0 && found);
    free(subs);
    int pidx[2];
    OK(MPI_T_category_get_pvars(pml, 2, pidx));
    CHECK(pidx[0] == 0 && pidx[1] == 1);
    CHECK(MPI_T_category_get_index("no such category", &idx) == MPI_T_ERR_INVALID_NAME);
    CHECK(MPI_T_category_get_info(ncat, NULL, NULL, NULL, NULL, NULL, NULL, NULL) == MPI_T_ERR_INVALID_INDEX);
    OK(MPI_T_category_changed(&stamp));

    report_ok("mpit");
    OK(MPI_Finalize());
    OK(MPI_T_finalize());
    return 0;
}
