/*
 * clattn run's score modifiers and sinks (docs/semantics.md section 8): --softcap C,
 * --alibi (the standard slopes of Hq heads), --alibi-slopes S.npy (<f4 [Hq] or [B,Hq]) and
 * --sinks S.npy (<f4 [Hq]), into the call's desc. The arrays stay in run_state until the end.
 */
#include "args.h"
#include "common.h"
#include "run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A float32 .npy of [Hq] (or [B,Hq] when per_batch may be set): *out points into it. */
static int load_per_head(const cli_args *args, const char *option, npy_array *a, int allow_batch,
                         const clattn_attention_desc *d, int *per_batch) {
    if (run_load(args, option, a)) return 1;
    int heads = a->ndim == 1 && a->shape[0] == d->heads_q;
    int batch = allow_batch && a->ndim == 2 && a->shape[0] == d->batch && a->shape[1] == d->heads_q;
    if (a->dtype != NPY_F32 || (!heads && !batch)) {
        char want[64] = "", got[128];
        if (allow_batch)
            snprintf(want, sizeof want, " or [%zu, %zu] ([B, Hq])", d->batch, d->heads_q);
        run_format_shape(a->shape, a->ndim, got, sizeof got);
        cli_error(args->command, "--%s %s: expected <f4 [%zu] ([Hq])%s, got %s %s", option,
                  args_get(args, option), d->heads_q, want, npy_dtype_name(a->dtype), got);
        return 1;
    }
    if (per_batch) *per_batch = batch;
    return 0;
}

int run_setup_modifiers(const cli_args *args, run_state *s) {
    clattn_attention_desc *d = &s->desc;
    if (args_has(args, "softcap")) {
        if (parse_float(args, "softcap", &d->softcap) != 0) return EXIT_USAGE;
        if (!(d->softcap > 0.0f)) {
            cli_error(args->command, "--softcap: must be > 0, got '%s'", args_get(args, "softcap"));
            return EXIT_USAGE;
        }
    }
    if (args_has(args, "alibi") && args_has(args, "alibi-slopes")) {
        cli_error(args->command, "--alibi (the standard slopes) and --alibi-slopes exclude each "
                                 "other");
        return EXIT_USAGE;
    }
    if (args_has(args, "alibi") && d->heads_q > 0) { /* Hq = 0: the desc's check says so */
        s->alibi_standard = malloc(d->heads_q * sizeof *s->alibi_standard);
        if (!s->alibi_standard) {
            cli_error(args->command, "--alibi: out of host memory for %zu slopes", d->heads_q);
            return 1;
        }
        clattn_pattern_alibi_slopes(d->heads_q, s->alibi_standard); /* cannot fail: Hq >= 1 */
        d->alibi_slopes = s->alibi_standard;
    }
    if (args_has(args, "alibi-slopes")) {
        if (load_per_head(args, "alibi-slopes", &s->alibi, 1, d, &d->alibi_per_batch)) return 1;
        d->alibi_slopes = s->alibi.data;
    }
    if (args_has(args, "sinks")) {
        if (load_per_head(args, "sinks", &s->sinks, 0, d, NULL)) return 1;
        d->sinks = s->sinks.data;
    }
    return 0;
}
