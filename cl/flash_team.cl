/*
 * The row reductions of the flash kernel (flash.cl). A work-group of TEAMS x TEAM work-items
 * (local id = team * TEAM + lane) holds the scores of a key tile as micro-tiles: the TEAM lanes
 * of a team share TILE_M query rows, each lane holding TILE_N of a row's keys. The online
 * softmax needs each row's maximum over its team on every key tile (its sums every lane reads
 * from the P tile: flash.cl, accumulate_pv).
 *
 *  - Local memory (every device): each lane writes its rows' values into
 *    scratch [BLOCK_M][TEAM], one barrier, and every lane of the team reads the same TEAM values
 *    in the same order, so all get the same bits.
 *  - Subgroups (SUBGROUPS=1: cl_khr_subgroups, cl_intel_subgroups or OpenCL C 3.0's): when the
 *    device's subgroups are exactly the teams (checked once per work-group by
 *    subgroups_are_teams; otherwise the local-memory path runs), sub_group_reduce_max,
 *    without a barrier.
 *  - SUBGROUPS=2, for tests on devices without subgroups (PoCL, oclgrind): the subgroup path
 *    with the subgroup built-ins it calls emulated over local memory, for subgroups of
 *    EMULATED_SUBGROUP_SIZE consecutive work-items (TEAM unless the test says otherwise).
 *
 * Every work-item of the group calls these functions the same number of times (they may hold
 * a barrier). Built after common.cl and tile_walk.cl, ahead of flash.cl.
 */
#ifndef TILE_M
#define TILE_M 4
#endif
#ifndef TILE_N
#define TILE_N 4
#endif
#ifndef SUBGROUPS
#define SUBGROUPS 0
#endif
#define TEAM       (BLOCK_N / TILE_N) /* lanes that share rows */
#define TEAMS      (BLOCK_M / TILE_M)
#define GROUP_SIZE (TEAMS * TEAM)

#if SUBGROUPS == 1
#if defined(cl_khr_subgroups)
#pragma OPENCL EXTENSION cl_khr_subgroups : enable
#elif defined(cl_intel_subgroups)
#pragma OPENCL EXTENSION cl_intel_subgroups : enable
#elif !defined(__opencl_c_subgroups)
#error "SUBGROUPS=1 needs cl_khr_subgroups, cl_intel_subgroups or OpenCL C 3.0 subgroups"
#endif
#elif SUBGROUPS == 2
#ifndef EMULATED_SUBGROUP_SIZE
#define EMULATED_SUBGROUP_SIZE TEAM
#endif
#define get_sub_group_size()     ((uint)EMULATED_SUBGROUP_SIZE)
#define get_sub_group_id()       ((uint)get_local_id(0) / EMULATED_SUBGROUP_SIZE)
#define get_sub_group_local_id() ((uint)get_local_id(0) % EMULATED_SUBGROUP_SIZE)
/* the caller's scratch is in scope as sg_scratch */
#define sub_group_reduce_max(x) emulated_sub_group_reduce_max((x), sg_scratch)

/* A subgroup's maximum over scratch [GROUP_SIZE], between two barriers. */
ALWAYS_INLINE float emulated_sub_group_reduce_max(float x, __local float *scratch) {
    const uint lid = get_local_id(0), first = lid - lid % EMULATED_SUBGROUP_SIZE;
    scratch[lid] = x;
    barrier(CLK_LOCAL_MEM_FENCE);
    float acc = scratch[first];
    for (uint k = 1; k < EMULATED_SUBGROUP_SIZE; k++)
        acc = fmax(acc, scratch[first + k]);
    barrier(CLK_LOCAL_MEM_FENCE);
    return acc;
}
#endif

/* Whether subgroup s is team s, lane for lane, in every subgroup of the work-group: the same
 * answer in every work-item (through *flag, with two barriers). 0 without SUBGROUPS. */
ALWAYS_INLINE int subgroups_are_teams(__local int *flag) {
#if SUBGROUPS
    const uint lid = get_local_id(0);
    if (lid == 0) *flag = 1;
    barrier(CLK_LOCAL_MEM_FENCE);
    if (get_sub_group_size() != TEAM || get_sub_group_id() != lid / TEAM ||
        get_sub_group_local_id() != lid % TEAM)
        atomic_and(flag, 0);
    barrier(CLK_LOCAL_MEM_FENCE);
    return *flag;
#else
    return 0;
#endif
}

/* x[r] = the maximum of x[r] over the team, through scratch [BLOCK_M][TEAM]; one barrier. The
 * next write to scratch must come after another barrier. */
ALWAYS_INLINE void team_max_local(float *x, __local float *scratch, int team, int lane) {
    for (int r = 0; r < TILE_M; r++) scratch[(team * TILE_M + r) * TEAM + lane] = x[r];
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int r = 0; r < TILE_M; r++) {
        __local const float *row = scratch + (team * TILE_M + r) * TEAM;
        float acc = row[0];
        for (int k = 1; k < TEAM; k++) acc = fmax(acc, row[k]);
        x[r] = acc;
    }
}

/* x[r] = max over the team of x[r], for the work-item's TILE_M rows. */
ALWAYS_INLINE void team_max(float *x, int by_subgroups, __local float *sg_scratch, int team,
                            int lane) {
#if SUBGROUPS
    if (by_subgroups) {
        for (int r = 0; r < TILE_M; r++) x[r] = sub_group_reduce_max(x[r]);
        return;
    }
#endif
    team_max_local(x, sg_scratch, team, lane);
}
