#!/usr/bin/env bash
# clattn pattern, end to end: writes layouts, checks the .npy header and the --show picture,
# the exit status of usage errors (2) and of a write that cannot happen (1), and feeds the
# written layouts (2-D and one per head) to `clattn run --path reference` on tiny Q, K, V
# written here with printf.
#
# usage: cli_pattern.sh PATH/TO/clattn
set -u

CLATTN=${1:?usage: cli_pattern.sh PATH/TO/clattn}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/clattn-cli-pattern.XXXXXX") || exit 1
trap 'rm -rf "$WORK"' EXIT
FAILED=0

fail() {
    echo "FAIL: $*" >&2
    FAILED=1
}

# expect_status WANT DESCRIPTION -- COMMAND...: runs the command, keeps its stdout and stderr
# in $WORK/stdout and $WORK/stderr, and checks its exit status.
expect_status() {
    local want=$1 what=$2
    shift 3
    "$@" >"$WORK/stdout" 2>"$WORK/stderr"
    local got=$?
    if [ "$got" -ne "$want" ]; then
        fail "$what: exit $got, expected $want; stderr: $(cat "$WORK/stderr")"
    fi
}

# expect_usage_error DESCRIPTION NEEDLE -- ARGS...: exit 2 and one stderr line containing
# NEEDLE (the option or value at fault).
expect_usage_error() {
    local what=$1 needle=$2
    shift 3
    expect_status 2 "$what" -- "$CLATTN" pattern "$@"
    grep -qF -- "$needle" "$WORK/stderr" || fail "$what: stderr does not name '$needle': $(cat "$WORK/stderr")"
    [ "$(wc -l <"$WORK/stderr")" -eq 1 ] || fail "$what: expected one line on stderr"
}

# header_has FILE TEXT: the .npy header of FILE (its first 128 bytes) contains TEXT.
header_has() {
    head -c 128 "$1" 2>/dev/null | grep -aqF -- "$2"
}

# write_npy FILE SHAPE COUNT: a little-endian float32 .npy (version 1.0) of COUNT values cycling
# through 0.5, -0.25, 1, -0.75, 0.125; SHAPE as NumPy writes it, e.g. "(1, 8, 2, 4)".
write_npy() {
    local file=$1 shape=$2 count=$3
    local dict="{'descr': '<f4', 'fortran_order': False, 'shape': $shape, }"
    local len=$(( (10 + ${#dict} + 1 + 63) / 64 * 64 - 10 ))  # data starts at a multiple of 64
    local values=('\x00\x00\x00\x3f' '\x00\x00\x80\xbe' '\x00\x00\x80\x3f' '\x00\x00\x40\xbf'
                  '\x00\x00\x00\x3e')
    {
        printf '\x93NUMPY\x01\x00'
        printf "\\x$(printf %02x $((len % 256)))\\x$(printf %02x $((len / 256)))"
        printf '%-*s\n' $((len - 1)) "$dict"
        for ((i = 0; i < count; i++)); do printf "${values[i % 5]}"; done
    } >"$file"
}

# ---------------------------------------------------------------- writing a layout

L2="$WORK/sliding.npy"
expect_status 0 "sliding layout" -- "$CLATTN" pattern sliding --nq 8 --nk 12 --block 2,3 \
    --window 3 --out "$L2"
[ -f "$L2" ] || fail "sliding layout: $L2 was not written"
header_has "$L2" "'descr': '|u1'" || fail "sliding layout: dtype is not |u1"
header_has "$L2" "'shape': (4, 4)" || fail "sliding layout: shape is not (4, 4)"
[ "$(wc -c <"$L2")" -eq $((128 + 16)) ] || fail "sliding layout: expected 144 bytes"
grep -qE "^wrote .*sliding.npy: sliding layout \|u1 \[4, 4\] .*: 10 of 16 blocks, density 0\.6250$" \
    "$WORK/stdout" || fail "sliding layout: unexpected summary: $(cat "$WORK/stdout")"

# KIND as the first argument, as --kind, or after the options: the same file.
expect_status 0 "--kind" -- "$CLATTN" pattern --kind sliding --nq 8 --nk 12 --block 2,3 \
    --window=3 --out "$WORK/kind.npy"
cmp -s "$L2" "$WORK/kind.npy" || fail "--kind sliding wrote another layout"
expect_status 0 "kind last" -- "$CLATTN" pattern --nq 8 --nk 12 --block 2,3 --window 3 \
    --out "$WORK/last.npy" sliding
cmp -s "$L2" "$WORK/last.npy" || fail "a trailing KIND wrote another layout"

# ---------------------------------------------------------------- --show

expect_status 0 "--show" -- "$CLATTN" pattern sliding --nq 4 --nk 4 --block 1,1 --window 3 --show
printf '%s\n' '##..' '###.' '.###' '..##' >"$WORK/want"
head -n 4 "$WORK/stdout" | cmp -s - "$WORK/want" || fail "--show sliding: got $(cat "$WORK/stdout")"

# fixed, stride 2, summary 1, causal, 3 query blocks over 5 key blocks (a' = a + 2)
expect_status 0 "--show fixed" -- "$CLATTN" pattern fixed --nq 6 --nk 10 --block 2,2 \
    --stride 2 --summary 1 --causal --show
printf '%s\n' '.##..' '.###.' '.#.##' >"$WORK/want"
head -n 3 "$WORK/stdout" | cmp -s - "$WORK/want" || fail "--show fixed: got $(cat "$WORK/stdout")"

# BigBird with --heads: a 3-D file, and heads drawn with different seeds differ.
L3="$WORK/bigbird.npy"
expect_status 0 "bigbird heads" -- "$CLATTN" pattern bigbird --nq 64 --nk 64 --block 4,4 \
    --window 3 --global 1 --random 3 --seed 5 --heads 2 --out "$L3" --show
header_has "$L3" "'shape': (2, 16, 16)" || fail "bigbird heads: shape is not (2, 16, 16)"
sed -n '2,17p' "$WORK/stdout" >"$WORK/head0"
sed -n '19,34p' "$WORK/stdout" >"$WORK/head1"
[ "$(sed -n 1p "$WORK/stdout")" = "head 0:" ] && [ "$(sed -n 18p "$WORK/stdout")" = "head 1:" ] ||
    fail "bigbird heads: --show does not label the heads"
[ "$(grep -c '^[#.]\{16\}$' "$WORK/head0")" -eq 16 ] || fail "bigbird heads: head 0 is not 16 rows"
cmp -s "$WORK/head0" "$WORK/head1" && fail "bigbird heads: heads 0 and 1 are the same layout"

# ---------------------------------------------------------------- errors

expect_usage_error "even window" "--window" -- sliding --nq 8 --nk 8 --block 2,2 --window 4 \
    --out "$WORK/bad.npy"
expect_usage_error "unknown kind" "diagonal" -- diagonal --nq 8 --nk 8 --block 2,2 \
    --out "$WORK/bad.npy"
expect_usage_error "unknown --kind" "--kind" -- --kind diagonal --nq 8 --nk 8 --block 2,2 \
    --out "$WORK/bad.npy"
expect_usage_error "unknown option" "--bogus" -- sliding --bogus 1 --nq 8 --nk 8 --block 2,2 \
    --out "$WORK/bad.npy"
expect_usage_error "missing --nq" "--nq" -- sliding --nk 8 --block 2,2 --out "$WORK/bad.npy"
expect_usage_error "bad --block" "--block" -- sliding --nq 8 --nk 8 --block 2,0 \
    --out "$WORK/bad.npy"
expect_usage_error "summary > stride" "--summary" -- fixed --nq 8 --nk 8 --block 2,2 \
    --stride 2 --summary 3 --out "$WORK/bad.npy"
expect_usage_error "global block out of range" "--global-blocks" -- longformer --nq 8 --nk 8 \
    --block 2,2 --global-blocks 0,4 --out "$WORK/bad.npy"
expect_usage_error "option of another kind" "--stride" -- sliding --nq 8 --nk 8 --block 2,2 \
    --stride 2 --out "$WORK/bad.npy"
expect_usage_error "no output" "--out" -- sliding --nq 8 --nk 8 --block 2,2
[ -e "$WORK/bad.npy" ] && fail "a usage error left $WORK/bad.npy behind"
expect_status 1 "unwritable --out" -- "$CLATTN" pattern sliding --nq 8 --nk 8 --block 2,2 \
    --out "$WORK/no/such/folder/L.npy"
grep -qF "$WORK/no/such/folder/L.npy" "$WORK/stderr" || fail "unwritable --out: file not named"

# ---------------------------------------------------------------- clattn run reads the layouts

# Q [1, 8, 2, 4], K and V [1, 12, 1, 4] (bshd, GQA); blocks 2,3 give a [4, 4] layout.
write_npy "$WORK/q.npy" "(1, 8, 2, 4)" 64
write_npy "$WORK/k.npy" "(1, 12, 1, 4)" 48
write_npy "$WORK/v.npy" "(1, 12, 1, 4)" 48
RUN=("$CLATTN" run --q "$WORK/q.npy" --k "$WORK/k.npy" --v "$WORK/v.npy" --path reference)

expect_status 0 "run with a 2-D layout" -- "${RUN[@]}" --block-layout "$L2" --block-size 2,3 \
    --out "$WORK/o2.npy"
[ -f "$WORK/o2.npy" ] || fail "run with a 2-D layout: O.npy was not written"
header_has "$WORK/o2.npy" "'shape': (1, 8, 2, 4)" || fail "run: O has the wrong shape"

expect_status 0 "bigbird, 2 heads, causal" -- "$CLATTN" pattern bigbird --nq 8 --nk 12 \
    --block 2,3 --window 1 --global 1 --random 1 --causal --heads 2 --out "$WORK/bb.npy"
expect_status 0 "run with a layout per head" -- "${RUN[@]}" --block-layout "$WORK/bb.npy" \
    --block-size 2,3 --causal --out "$WORK/o3.npy"
[ -f "$WORK/o3.npy" ] || fail "run with a layout per head: O.npy was not written"

# The layout is really read: a block size that does not match its shape is refused.
"${RUN[@]}" --block-layout "$L2" --block-size 4,4 --out "$WORK/o4.npy" >/dev/null 2>&1 &&
    fail "run accepted a [4, 4] layout for blocks 4,4 (expected [2, 3])"

[ "$FAILED" -eq 0 ] && echo "cli_pattern: all checks passed"
exit $((FAILED != 0)) # 0 or 1: an exit status keeps only 8 bits of a count
