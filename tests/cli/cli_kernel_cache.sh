#!/usr/bin/env bash
# clattn cache (docs/kernel-cache.md), on a cache folder of its own: info counting entries and the
# entries of other clattn versions; trim removing other versions first, then the least recently
# used; clear keeping tuning.json and foreign files; the $CLATTN_CACHE_MAX_MB bound kept while
# real programs are built; warm in two processes storing what a second warm only loads; warm
# filling PoCL's own cache instead when PoCL keeps one; and the usage errors. PoCL's cache is off
# for the rest (POCL_KERNEL_CACHE=0), which makes clattn's folder keep the programs.
# Usage: cli_kernel_cache.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

shared="${CLATTN_CACHE_DIR:-}" # the suite's shared folder: only ever read here
export CLATTN_CACHE_DIR="$work/cache"
export POCL_KERNEL_CACHE=0 # PoCL's own cache off: clattn's keeps the programs (docs/kernel-cache.md)
no_leak_checks_for_pocl_compiles # (the slow unwinder also took this script past ten minutes)
version=$("$clattn" --version | awk '{print $2}')

# fake_entry NAME VERSION AGE: an entry of 102400 bytes whose key starts "clattn VERSION",
# last used AGE seconds ago (its modification time)
fake_entry() {
  local file="$CLATTN_CACHE_DIR/$1.clbin"
  { printf 'CLATTNPC\x01\x00\x00\x00'; head -c 20 /dev/zero; printf 'clattn %s\n' "$2"; } > "$file"
  truncate -s 102400 "$file"
  touch -d "@$(($(date +%s) - $3))" "$file"
}
field() { "$clattn" cache info --json | sed -n "s/.*\"$1\": \([0-9]*\).*/\1/p"; }
entry_bytes() { cat "$CLATTN_CACHE_DIR"/*.clbin 2> /dev/null | wc -c; }
present() { [ -e "$CLATTN_CACHE_DIR/$1.clbin" ]; }

# ---- info on a folder not made yet
[ "$(field entries)" = 0 ] || fail "a missing folder should hold 0 entries: $("$clattn" cache info)"

# ---- three entries of another version (used recently), three of this one (used 300, 200 and
# 100 s ago), tuning.json and a file of someone else's
mkdir -m 700 "$CLATTN_CACHE_DIR"
fake_entry 00000000000000a1 0.0.1 10
fake_entry 00000000000000a2 0.0.1 20
fake_entry 00000000000000a3 0.0.1 30
fake_entry 00000000000000c1 "$version" 300
fake_entry 00000000000000c2 "$version" 200
fake_entry 00000000000000c3 "$version" 100
echo '{}' > "$CLATTN_CACHE_DIR/tuning.json"
echo notes > "$CLATTN_CACHE_DIR/notes.txt"
[ "$(field entries)" = 6 ] || fail "info: entries $(field entries), expected 6"
[ "$(field other_version_entries)" = 3 ] || fail "info: other versions $(field other_version_entries)"
[ "$(field bytes)" = 614400 ] || fail "info: bytes $(field bytes), expected 614400"
"$clattn" cache info | grep -q "6 compiled programs" || fail "info's text: $("$clattn" cache info)"
"$clattn" cache info | grep -q "^PoCL .* its own cache" || fail "info does not say where PoCL keeps its kernels"
# the limit's source, and a $CLATTN_CACHE_MAX_MB that is not a size named rather than ignored
CLATTN_CACHE_MAX_MB=12 "$clattn" cache info | grep -q '^limit  *12.0 MiB (\$CLATTN_CACHE_MAX_MB)' ||
  fail "info does not show CLATTN_CACHE_MAX_MB=12: $("$clattn" cache info | grep limit)"
CLATTN_CACHE_MAX_MB=12abc "$clattn" cache info |
  grep -q '^limit  *256.0 MiB (the default: CLATTN_CACHE_MAX_MB=12abc is not a size' ||
  fail "info does not name a bad CLATTN_CACHE_MAX_MB: $(CLATTN_CACHE_MAX_MB=12abc "$clattn" cache info)"

# 307200 bytes (0.29296875 MiB): the other version's three go, though they were used last
"$clattn" cache trim --max-mb 0.29296875 > "$work/out" || fail "trim: $(cat "$work/out")"
grep -q "removed 3 of 6" "$work/out" || fail "trim said: $(cat "$work/out")"
for e in a1 a2 a3; do present 00000000000000$e && fail "trim kept the other version's entry $e"; done
for e in c1 c2 c3; do present 00000000000000$e || fail "trim removed this version's entry $e"; done
# 204800 bytes: the least recently used of this version goes
"$clattn" cache trim --max-mb 0.1953125 > /dev/null || fail "second trim"
present 00000000000000c1 && fail "trim kept the least recently used entry"
present 00000000000000c2 && present 00000000000000c3 || fail "trim removed a recently used entry"
"$clattn" cache clear > "$work/out" || fail "clear: $(cat "$work/out")"
[ "$(field entries)" = 0 ] || fail "clear left $(field entries) entries"
[ -f "$CLATTN_CACHE_DIR/tuning.json" ] && [ -f "$CLATTN_CACHE_DIR/notes.txt" ] ||
  fail "clear removed tuning.json or a file that is not an entry"

# ---- the bound while programs are built: 1 MiB, below what two head dimensions need
for dim in 32 64; do
  CLATTN_CACHE_MAX_MB=1 "$clattn" cache warm --dtypes f32 --head-dims "$dim" > "$work/out" 2>&1 ||
    fail "warm D=$dim under a 1 MiB limit: $(cat "$work/out")"
  grep -q "f32 D=$dim" "$work/out" || fail "warm's progress: $(cat "$work/out")"
  [ "$(entry_bytes)" -le 1048576 ] || fail "the cache holds $(entry_bytes) bytes over its 1 MiB limit"
  [ "$(field entries)" -ge 1 ] || fail "the limit left no entry at all after warm D=$dim"
done

# ---- a cache folder named through a symbolic link: judged and used by its real path, so that
# a link swapped after the check cannot send the programs elsewhere
mkdir -m 700 "$work/real-cache" && ln -s real-cache "$work/linked-cache"
CLATTN_CACHE_DIR="$work/linked-cache" CLATTN_VERBOSE=1 "$clattn" cache warm --dtypes f32 \
  --head-dims 32 --jobs 1 > "$work/out" 2>&1 || fail "warm through a link: $(cat "$work/out")"
grep -q "^clattn: cached $(realpath "$work/real-cache")/[0-9a-f]*\.clbin" "$work/out" ||
  fail "the programs were not stored by the folder's real path: $(grep cached "$work/out")"

# ---- warm in two processes, then a second warm only loads (seeded from the suite's folder,
# whose entries for these calls, when present, spare the builds)
"$clattn" cache clear > /dev/null
[ -n "$shared" ] && cp "$shared"/*.clbin "$CLATTN_CACHE_DIR"/ 2> /dev/null
"$clattn" cache warm --dtypes f32 --head-dims 32,64 --jobs 2 > "$work/out" 2>&1 ||
  fail "warm --jobs 2: $(cat "$work/out")"
grep -q "with 2 jobs" "$work/out" || fail "warm did not run two jobs: $(cat "$work/out")"
CLATTN_VERBOSE=1 "$clattn" cache warm --dtypes f32 --head-dims 32,64 --jobs 1 > "$work/out" 2>&1 ||
  fail "second warm: $(cat "$work/out")"
grep -q "cache hit" "$work/out" || fail "the second warm loaded nothing: $(cat "$work/out")"
grep -q "^clattn: built " "$work/out" && fail "the second warm built again: $(grep "^clattn: built " "$work/out")"

# ---- PoCL's own cache, as PoCL runs by default: warm fills it, and clattn's folder stays empty
pocl_dir="$work/pocl-kcache"
mkdir -p "$pocl_dir"
env -u POCL_KERNEL_CACHE POCL_CACHE_DIR="$pocl_dir" CLATTN_CACHE_DIR="$work/pocl-keeps" \
  "$clattn" cache warm --dtypes f32 --head-dims 64 --jobs 2 > "$work/out" 2>&1 ||
  fail "warm with PoCL's cache: $(cat "$work/out")"
[ -n "$(find "$pocl_dir" -name '*.so' | head -n 1)" ] || fail "warm compiled nothing into PoCL's cache"
[ -z "$(find "$work/pocl-keeps" -name '*.clbin')" ] || fail "clattn kept programs that PoCL keeps"

# ---- usage errors and a disabled cache
expect 2 "name an action" -- "$clattn" cache
expect 2 "unknown action 'frob'" -- "$clattn" cache frob
expect 2 "--jobs does not apply to 'cache info'" -- "$clattn" cache info --jobs 2
expect 2 "--dtypes: expected f32, f16 or bf16, got 'f64'" -- "$clattn" cache warm --dtypes f64
expect 2 "--max-mb" -- "$clattn" cache trim --max-mb=-1
expect 2 "--max-mb: expected a size >= 0 and below 1e+12 MiB" -- "$clattn" cache trim --max-mb 1e30
# (1e30 MiB overflowed 64 bits into a limit of 0, and emptied the folder)
quoted="$work/a \"quoted\" \\folder"
CLATTN_CACHE_DIR="$quoted" "$clattn" cache info --json > "$work/info.json" ||
  fail "info --json in $quoted"
python3 -c 'import json, sys; assert json.load(open(sys.argv[1]))["folder"] == sys.argv[2]' \
  "$work/info.json" "$quoted" || fail "info --json: not JSON, or not the folder: $(cat "$work/info.json")"
# 3 dtypes x 8 head dims, f32 given twice: 24 kinds of call (16 were taken, the rest dropped)
"$clattn" cache warm --device no-such-device --jobs 1 --dtypes f32,f16,bf16,f32 \
  --head-dims 32,64,80,96,128,160,192,256 > "$work/out" 2>&1 && fail "warm on no device passed"
grep -q "^tried 24 kinds of call" "$work/out" || fail "warm's items: $(cat "$work/out")"
expect 1 "the cache is off" -- env CLATTN_CACHE_DIR=off "$clattn" cache info
# a folder name past 4095 bytes turns the cache off (cut short, it named another folder, which
# was made and used)
long_dir="$work$(for i in $(seq 21); do printf '/%0200d' 0; done)"
expect 1 "a folder name past 4095 bytes" -- env CLATTN_CACHE_DIR="$long_dir" "$clattn" cache info

finish cli_kernel_cache
