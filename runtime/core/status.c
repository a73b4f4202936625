/* Version and status names: one table (CLATTN_STATUS_MAP in clattn.h) generates both. */
#include "clattn.h"

#include <string.h>

const char *clattn_version(void) {
    return CLATTN_VERSION_STRING;
}

const char *clattn_status_name(clattn_status status) {
    /* Library codes carry the CLATTN_ prefix; OpenCL codes keep OpenCL's own name. */
#define STATUS_NAME_CASE(name, value, text)                                                        \
    case CLATTN_##name: {                                                                          \
        const char *full = "CLATTN_" #name;                                                        \
        return strncmp(full + 7, "CL_", 3) == 0 ? full + 7 : full;                                 \
    }
    switch (status) { CLATTN_STATUS_MAP(STATUS_NAME_CASE) }
#undef STATUS_NAME_CASE
    return "unknown status";
}

const char *clattn_status_string(clattn_status status) {
#define STATUS_TEXT_CASE(name, value, text)                                                        \
    case CLATTN_##name:                                                                            \
        return text;
    switch (status) { CLATTN_STATUS_MAP(STATUS_TEXT_CASE) }
#undef STATUS_TEXT_CASE
    return "unknown status";
}
