/* See threads_work.h. */
#include "threads_work.h"

#include "conformance.h"

#include <pthread.h>
#include <stdio.h>
#include <string.h>

typedef struct worker {
    int id;
    size_t failures;
    char first_failure[512];
} worker;

static void *mixed_paths(void *arg) {
    worker *w = arg;
    clattn_context *ctx = NULL;
    clattn_status status = clattn_context_create(&ctx, 0);
    if (status != CLATTN_SUCCESS) {
        w->failures = CALLS;
        snprintf(w->first_failure, sizeof w->first_failure, "context: %s",
                 clattn_status_name(status));
        return NULL;
    }
    for (int call = 0; call < CALLS; call++) {
        attn_case c;
        case_init(&c, 1, 2, 1, 17 + (size_t)call, 33 + (size_t)w->id, 32, 32);
        c.causal = call % 3 == 0;
        c.seed = (uint64_t)(100 * w->id + call);
        clattn_path path = call % 2 ? CLATTN_PATH_GEMM : CLATTN_PATH_FUSED;
        case_result r;
        case_run(ctx, &c, path, CLATTN_VARIANT_AUTO, &r);
        if (r.status == CLATTN_SUCCESS && r.mismatches == 0) continue;
        if (w->failures++ == 0)
            snprintf(w->first_failure, sizeof w->first_failure, "thread %d, call %d, path %d: %s",
                     w->id, call, (int)path, r.message);
    }
    clattn_context_destroy(ctx);
    return NULL;
}

size_t threads_mixed_paths(char *first, size_t size) {
    pthread_t tid[THREADS];
    worker workers[THREADS];
    size_t failures = 0;
    int started[THREADS] = {0};
    first[0] = '\0';
    for (int t = 0; t < THREADS; t++) {
        workers[t] = (worker){t, 0, ""};
        started[t] = pthread_create(&tid[t], NULL, mixed_paths, &workers[t]) == 0;
        if (!started[t]) workers[t] = (worker){t, CALLS, "pthread_create failed"};
    }
    for (int t = 0; t < THREADS; t++) {
        if (started[t]) pthread_join(tid[t], NULL);
        if (workers[t].failures && !first[0]) snprintf(first, size, "%s", workers[t].first_failure);
        failures += workers[t].failures;
    }
    return failures;
}

static void *describe_devices(void *arg) {
    size_t *found = arg, count = 0;
    if (clattn_device_count(&count) != CLATTN_SUCCESS) return NULL;
    for (size_t i = 0; i < count; i++) {
        clattn_device_info info;
        clattn_device_info_init(&info);
        if (clattn_device_get_info(i, &info) == CLATTN_SUCCESS && info.name[0]) (*found)++;
    }
    return NULL;
}

size_t threads_device_queries(size_t *count) {
    pthread_t tid[THREADS];
    size_t found[THREADS] = {0}, wrong = 0;
    int started[THREADS];
    for (int t = 0; t < THREADS; t++)
        started[t] = pthread_create(&tid[t], NULL, describe_devices, &found[t]) == 0;
    for (int t = 0; t < THREADS; t++)
        if (started[t]) pthread_join(tid[t], NULL);
    *count = 0;
    if (clattn_device_count(count) != CLATTN_SUCCESS) return THREADS;
    for (int t = 0; t < THREADS; t++) wrong += found[t] != *count;
    return wrong;
}
