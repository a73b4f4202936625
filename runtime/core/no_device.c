/*
 * Why a platform that loaded offers no device: the likely cause, by what is known of its
 * driver, for the message of device discovery (clattn_device_discovery_summary). PoCL refuses
 * every device when it cannot create its kernel cache folder (HOME or XDG_CACHE_HOME
 * unwritable) or when POCL_DEVICES names no device type it has; rusticl offers devices only
 * for the drivers RUSTICL_ENABLE names. A guess names what to check; it is never a verdict.
 */
#include "core.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* The folder PoCL 3 keeps its kernel cache in: $POCL_CACHE_DIR when that exists, else
 * $XDG_CACHE_HOME/pocl/kcache (when set and not empty), else $HOME/.cache/pocl/kcache, else
 * /tmp/pocl/kcache. */
static void pocl_cache_folder(char *out, size_t size) {
    const char *dir = getenv("POCL_CACHE_DIR"), *xdg = getenv("XDG_CACHE_HOME");
    const char *home = getenv("HOME");
    struct stat st;
    if (dir && *dir && stat(dir, &st) == 0)
        snprintf(out, size, "%s", dir);
    else if (xdg && *xdg)
        snprintf(out, size, "%s/pocl/kcache", xdg);
    else if (home)
        snprintf(out, size, "%s/.cache/pocl/kcache", home);
    else
        snprintf(out, size, "/tmp/pocl/kcache");
}

/* Whether a folder can be made at `path`, or inside it when it exists: the nearest existing
 * ancestor must be a folder in which a new folder can be made. The probe makes one and removes
 * it again (access() would do for most folders, but /proc's look writable to root and refuse). */
static int folder_can_exist(const char *path) {
    char at[1024], probe[1100];
    struct stat st;
    snprintf(at, sizeof at, "%s", path);
    snprintf(probe, sizeof probe, "%s/", path); /* the probe's place when the folder exists */
    while (stat(at, &st) != 0) {
        snprintf(probe, sizeof probe, "%s.", at); /* beside the topmost missing folder */
        char *slash = strrchr(at, '/');
        if (!slash || strcmp(at, "/") == 0) return 0; /* a relative path, or no root */
        slash[slash == at] = '\0';                    /* "/a" -> "/", "/a/b" -> "/a" */
    }
    if (!S_ISDIR(st.st_mode)) return 0;
    size_t len = strlen(probe);
    snprintf(probe + len, sizeof probe - len, "clattn-probe-%ld", (long)getpid());
    if (mkdir(probe, 0700) != 0) return 0;
    rmdir(probe);
    return 1;
}

static void pocl_cause(char *out, size_t size) {
    char cache[1024];
    const char *devices = getenv("POCL_DEVICES");
    pocl_cache_folder(cache, sizeof cache);
    int cache_ok = folder_can_exist(cache);
    if (!cache_ok)
        snprintf(out, size,
                 "PoCL refuses its devices when it cannot create its kernel cache folder, "
                 "%s (from POCL_CACHE_DIR, XDG_CACHE_HOME or HOME): make it writable or set "
                 "POCL_CACHE_DIR to a writable folder",
                 cache);
    else if (devices && *devices)
        snprintf(out, size,
                 "POCL_DEVICES=%s: PoCL offers only the device types it names that it has "
                 "(pthread, basic, ...)",
                 devices);
    else
        snprintf(out, size,
                 "PoCL refused its devices; its cache folder %s and POCL_DEVICES are the usual "
                 "causes (POCL_DEBUG=all says why)",
                 cache);
}

void platform_no_device_cause(const char *platform_name, char *out, size_t size) {
    const char *rusticl = getenv("RUSTICL_ENABLE");
    if (strstr(platform_name, "Portable Computing Language"))
        pocl_cause(out, size);
    else if (strcmp(platform_name, "rusticl") == 0 && !(rusticl && *rusticl))
        snprintf(out, size,
                 "rusticl offers devices only for the drivers RUSTICL_ENABLE names "
                 "(RUSTICL_ENABLE=llvmpipe for the CPU)");
    else if (strcmp(platform_name, "rusticl") == 0)
        snprintf(out, size, "RUSTICL_ENABLE=%s names no driver rusticl can open here", rusticl);
    else if (strcmp(platform_name, "Clover") == 0)
        snprintf(out, size, "Mesa's Clover offers only the AMD GPUs its radeonsi driver opens");
    else
        snprintf(out, size,
                 "its driver found no device it supports (a GPU driver without its GPU, or "
                 "without its kernel module)");
}
