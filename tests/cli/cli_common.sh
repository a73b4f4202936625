# Helpers the clattn program's test scripts share (sourced). A script gets $work, a scratch
# folder removed on exit (one that sets $work and its own trap before sourcing this keeps them),
# and $top, the source tree (for the scripts that patch a copy of cl/).
if [ -z "${work:-}" ]; then
  work="$(mktemp -d)"
  trap 'rm -rf "$work"' EXIT
fi
top="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
failures=0
fail() { echo "FAIL: $*"; failures=$((failures + 1)); }

# Under AddressSanitizer (scripts/test.sh): PoCL leaks inside its own passes when it compiles a
# kernel that its disk cache does not hold (a fresh cache folder, POCL_KERNEL_CACHE=0). Naming
# those leaks for tests/lsan-pocl.supp takes the slow unwinder, under which LeakSanitizer's
# tracer crashed at a `clattn tune`'s exit in one run of two: scripts that compile many kernels
# so turn leak detection off (address errors and UBSan still fail them; the cache test checks
# clattn's cache code for leaks, with the suppression). Call it before the commands that compile.
no_leak_checks_for_pocl_compiles() {
  [ -n "${ASAN_OPTIONS:-}" ] && export ASAN_OPTIONS="$ASAN_OPTIONS:detect_leaks=0"
  return 0
}

# finish NAME: a script's last line. Prints "NAME: all passed" or the count of failures and
# exits 0 or 1; never `exit "$failures"`, since an exit status keeps 8 bits and 256 failures
# would read as success.
finish() {
  if [ "$failures" -eq 0 ]; then
    echo "$1: all passed"
    exit 0
  fi
  echo "$1: $failures checks failed"
  exit 1
}

# expect STATUS TEXT -- COMMAND...: the command exits with STATUS and stderr is one line that
# mentions TEXT (docs/semantics.md section 5: every failure prints one clear line).
expect() {
  local want="$1" text="$2"
  shift 3
  "$@" > "$work/stdout" 2> "$work/stderr"
  local got=$?
  [ "$got" -eq "$want" ] || fail "'$*' exited $got, expected $want: $(cat "$work/stderr")"
  grep -qF -- "$text" "$work/stderr" || fail "'$*': stderr lacks '$text': $(cat "$work/stderr")"
  [ "$(wc -l < "$work/stderr")" -eq 1 ] || fail "'$*': not one line on stderr: $(cat "$work/stderr")"
}

# npy_header DESCR SHAPE: a version 1.0 .npy preamble padded to 64 bytes, as NumPy writes it
npy_header() {
  local dict="{'descr': '$1', 'fortran_order': False, 'shape': $2, }"
  local pad=$(( (64 - (10 + ${#dict} + 1) % 64) % 64 ))
  local len=$(( ${#dict} + pad + 1 ))
  printf '\x93NUMPY\x01\x00'
  printf "\\x$(printf %02x $((len & 255)))\\x$(printf %02x $((len >> 8)))"
  printf '%s%*s\n' "$dict" "$pad" ''
}

# npy_i4 FILE SHAPE VALUE...: little-endian int32 values
npy_i4() {
  local file="$1" shape="$2"
  shift 2
  { npy_header '<i4' "$shape"
    for v in "$@"; do
      printf "\\x$(printf %02x $((v & 255)))\\x$(printf %02x $(((v >> 8) & 255)))"
      printf "\\x$(printf %02x $(((v >> 16) & 255)))\\x$(printf %02x $(((v >> 24) & 255)))"
    done; } > "$file"
}

# npy_reshape IN OUT SHAPE: the same data (a <f4 array) under another shape
npy_reshape() {
  local len=$(( $(od -An -tu2 -j8 -N2 "$1") ))
  { npy_header '<f4' "$3"; tail -c +$((11 + len)) "$1"; } > "$2"
}

# npy_take IN OUT SHAPE [SKIP]: a <f4 array of SHAPE from the values of IN (a <f4 array) after
# its first SKIP values; IN must hold enough of them
npy_take() {
  local len=$(( $(od -An -tu2 -j8 -N2 "$1") )) shape="$3" skip="${4:-0}" count=1 d
  for d in $(tr -c '0-9' ' ' <<< "$shape"); do count=$((count * d)); done
  { npy_header '<f4' "$shape"; tail -c +$((11 + len + 4 * skip)) "$1" | head -c $((4 * count)); } > "$2"
}

# make_npy FILE SHAPE FILL: a <f4 .npy of SHAPE (a Python tuple) holding the 4-byte FILL
# (printf escapes) in every element, or zeros when FILL is "zeros".
make_npy() {
  local file="$1" shape="$2" fill="$3" count=1 dim i
  for dim in $(tr -c '0-9' ' ' <<< "$shape"); do count=$((count * dim)); done
  {
    npy_header '<f4' "$shape"
    if [ "$fill" = zeros ]; then
      head -c $((count * 4)) /dev/zero
    else
      for ((i = 0; i < count; i++)); do printf "$fill"; done
    fi
  } > "$file"
}

# dump KIND: the `clattn run` words of the first check case whose line holds KIND, its reference
# output written (without --path reference: each run chooses its own path); sets run (the
# words, an array) and dir (the case's folder, its arrays and reference output). Needs $clattn.
dump() {
  local index line
  index=$("$clattn" check --list | grep -m1 -F -- "$1" | awk '{print $1}')
  [ -n "$index" ] || { fail "no check case with $1"; return 1; }
  line=$("$clattn" check --case "$index" --path reference --dump "$work/cases" | grep -o 'clattn run.*')
  read -r -a run <<< "${line#clattn }"
  "$clattn" "${run[@]}" > /dev/null || { fail "the reference run of $1"; return 1; }
  for i in "${!run[@]}"; do [ "${run[$i]}" = reference ] && unset 'run[i]' 'run[i-1]'; done
  run=("${run[@]}")
  dir="$work/cases/case-$index"
}
