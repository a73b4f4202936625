#!/usr/bin/env bash
# SIGINT and SIGTERM sent to the clattn program at many moments: while it computes, while it
# stages its outputs (a temporary beside one has appeared), while it renames them. Each time
# it exits with 130 or 143 (or 0 when it had finished), the outputs are all old or all new
# (`run`'s O and LSE, `bench`'s CSV and JSON), and no temporary is left; `run` and `tune` end
# within 3 s of a signal while they compute. Then what SIGKILL
# leaves: the next run that writes the same output removes the temporaries of processes that
# are gone, never a live process's, nor a file that is not a temporary; the program cache's
# likewise. Usage: cli_signals.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
work="$(mktemp -d)"
trap '[ "$BASHPID" = "$$" ] && rm -rf "$work"' EXIT # not in a subshell that a signal ends
# fail, finish, npy_header
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"
cd "$work" || exit 1

# const_npy FILE SHAPE FILL: a <f4 array of SHAPE holding the 4 bytes FILL in every element
const_npy() {
  local count=1 d
  for d in $(tr -c '0-9' ' ' <<< "$2"); do count=$((count * d)); done
  printf "$3" > unit
  while [ "$(stat -c %s unit)" -lt $((count * 4)) ]; do cat unit unit > unit2 && mv unit2 unit; done
  { npy_header '<f4' "$2"; head -c $((count * 4)) unit; } > "$1"
  rm -f unit
}

# start COMMAND...: runs it in the background with SIGINT handled as in a terminal (a shell
# without job control would start it with SIGINT ignored); its pid in $pid, stdout in out,
# stderr in err.
# Returns once the program handles SIGINT and SIGTERM: a signal before would meet the
# subshell or the program's start-up, which nothing of this is about.
start() {
  : > out && : > err
  (trap - INT; exec "$@" > out 2> err) &
  pid=$!
  handling "${1##*/}" $(((1 << (2 - 1)) | (1 << (15 - 1))))
}

# handling NAME MASK: returns once process $pid runs the program NAME (not the shell that
# starts it) and catches the signals of MASK (SigCgt: bit n-1 for signal n), or has ended. A
# program that still does not catch them after 10 s fails, and is not waited for again.
catches=1
handling() {
  local key value deadline=$((SECONDS + 10))
  while [ -e "/proc/$pid" ]; do
    while read -r key value; do
      [ "$key" = Name: ] && [ "$value" != "$1" ] && break
      [ "$key" = SigCgt: ] && [ $((16#$value & $2)) -eq "$2" -o "$catches" -eq 0 ] && return 0
    done 2> /dev/null < "/proc/$pid/status"
    if [ "$SECONDS" -ge "$deadline" ] && [ "$catches" -eq 1 ]; then
      fail "$1 does not catch the signals of mask $2 after 10 s"
      catches=0
    fi
  done
}

# wait_for_temporary NAME...: returns once one of the files NAME.tmp.* exists, or $pid ended
wait_for_temporary() {
  local state name
  while read -r _ _ state _ 2> /dev/null < "/proc/$pid/stat" && [ "$state" != Z ]; do
    for name in "$@"; do compgen -G "$name.tmp.*" > /dev/null && return 0; done
  done
}

# finished SIGNAL: waits for $pid; checks its status is 0 or 128 + the signal, with the
# line on stderr that names the signal; sets $interrupted to 1 when the signal ended it
finished() {
  local sig="$1" status number
  wait "$pid"
  status=$?
  number=$(kill -l "$sig")
  interrupted=$((status == 128 + number))
  if [ "$interrupted" -eq 1 ]; then
    grep -qE "^clattn: (interrupted \(SIGINT\)|terminated \(SIGTERM\))$" err ||
      fail "SIG$sig: exit $status without the line that names the signal: $(cat err)"
  elif [ "$status" -ne 0 ]; then
    fail "SIG$sig: exit $status, neither 0 nor $((128 + number)): $(cat err)"
  fi
}

# no_temporaries NAME...: nothing named NAME?* is left beside the outputs
no_temporaries() {
  local name left
  for name in "$@"; do
    left=$(compgen -G "$name?*")
    [ -z "$left" ] || fail "temporaries left: $left"
    rm -f $left
  done
}

# ---- clattn run: O [1, 2048, 8, 64] (4 MiB) and LSE; the old ones from other inputs
const_npy q.npy "(1, 2048, 8, 64)" '\x00\x00\x00\x00'
const_npy v.npy "(1, 2048, 8, 64)" '\x00\x00\x80\x3f'
const_npy k-old.npy "(1, 1024, 8, 64)" '\x00\x00\x00\x00'
const_npy v-old.npy "(1, 1024, 8, 64)" '\x00\x00\x00\x40'
run=("$clattn" run --q q.npy --k q.npy --v v.npy --out o.npy --lse l.npy)
"$clattn" run --q q.npy --k k-old.npy --v v-old.npy --out old-o.npy --lse old-l.npy > /dev/null ||
  fail "the old outputs"
"$clattn" run --q q.npy --k q.npy --v v.npy --out new-o.npy --lse new-l.npy > /dev/null ||
  fail "the new outputs"
cmp -s old-o.npy new-o.npy || cmp -s old-l.npy new-l.npy && fail "old and new outputs are alike"

interrupted_by=()
outcomes=() # "interrupted old", "interrupted new" (the signal came during the commit), "finished"
for ((trial = 0; trial < 36; trial++)); do
  sig=$([ $((trial % 2)) -eq 0 ] && echo INT || echo TERM)
  cp old-o.npy o.npy && cp old-l.npy l.npy
  start "${run[@]}"
  if [ $((trial % 3)) -eq 0 ]; then # as soon as an output is being staged
    wait_for_temporary o.npy l.npy
  else # anywhere from the start to the end, in steps of 20 ms
    sleep "0.$(printf %03d $((trial * 7 % 18 * 20)))"
  fi
  kill -s "$sig" "$pid" 2> /dev/null
  finished "$sig"
  [ "$interrupted" -eq 1 ] && interrupted_by+=("$sig")
  if cmp -s o.npy old-o.npy && cmp -s l.npy old-l.npy; then
    [ "$interrupted" -eq 1 ] || fail "trial $trial: a run that finished left the old outputs"
    outcomes+=("interrupted-old")
  elif cmp -s o.npy new-o.npy && cmp -s l.npy new-l.npy; then
    outcomes+=("$([ "$interrupted" -eq 1 ] && echo interrupted-new || echo finished)")
  else
    fail "trial $trial (SIG$sig): O and LSE are not both old or both new" \
      "(O $(cmp -s o.npy new-o.npy && echo new || echo old), LSE $(cmp -s l.npy new-l.npy && echo new || echo old))"
  fi
  no_temporaries o.npy l.npy
done
for sig in INT TERM; do
  [[ " ${interrupted_by[*]} " == *" $sig "* ]] || fail "no trial was interrupted by SIG$sig"
done
echo "clattn run, 36 trials:" $(printf '%s\n' "${outcomes[@]}" | sort | uniq -c | tr '\n' ' ')

# ---- a signal during a long computation ends it at once (not when the kernel is done)
const_npy q-long.npy "(1, 16384, 8, 64)" '\x00\x00\x00\x00'
start "$clattn" run --q q-long.npy --k q-long.npy --v q-long.npy --out o-long.npy
sleep 1
signalled=$(date +%s%N)
kill -s INT "$pid" 2> /dev/null # (unless it has finished)
finished INT
elapsed_ms=$((($(date +%s%N) - signalled) / 1000000))
[ "$interrupted" -eq 1 ] || fail "a 16384-query run was not interrupted after 1 s"
[ "$elapsed_ms" -lt 3000 ] || fail "SIGINT took $elapsed_ms ms to end a computation"
[ -e o-long.npy ] && fail "an interrupted computation wrote its output"
no_temporaries o-long.npy

# ---- SIGINT ignored when the program starts (nohup, a background job) stays ignored
cp old-o.npy o.npy && cp old-l.npy l.npy
: > err
"${run[@]}" > /dev/null 2> err &
pid=$!
handling clattn $((1 << (15 - 1))) # SIGTERM handled: the program has installed its handlers
kill -s INT "$pid" 2> /dev/null # (unless it has finished)
wait "$pid" || fail "a run with SIGINT ignored from the start exited $?: $(cat err)"
cmp -s o.npy new-o.npy && cmp -s l.npy new-l.npy || fail "a run with SIGINT ignored: not written"

# ---- clattn bench: --csv and --json both old or both new
bench=("$clattn" bench --nq 512 --hq 8 --d 64 --warmup 1 --repeat 3 --path fused --csv b.csv
  --json b.json)
"${bench[@]}" > /dev/null || fail "clattn bench"
echo old > b.csv && echo old > b.json
for ((trial = 0; trial < 8; trial++)); do
  sig=$([ $((trial % 2)) -eq 0 ] && echo INT || echo TERM)
  start "${bench[@]}"
  if [ $((trial % 2)) -eq 0 ]; then wait_for_temporary b.csv b.json; else sleep "0.$((trial * 5))"; fi
  kill -s "$sig" "$pid" 2> /dev/null
  finished "$sig"
  csv_old=$(cmp -s b.csv <(echo old) && echo 1 || echo 0)
  json_old=$(cmp -s b.json <(echo old) && echo 1 || echo 0)
  [ "$csv_old" = "$json_old" ] || fail "bench trial $trial (SIG$sig): CSV and JSON differ in age"
  [ "$csv_old" = 0 ] && { echo old > b.csv && echo old > b.json; }
  no_temporaries b.csv b.json
done

# ---- clattn tune, stopped while it searches: nothing written into its cache folder. Its
# shapes are long and timed 64 times a candidate, so that the search outlasts the second it
# is given (at N 256 a warm kernel cache let it end within the second, and save its winner).
mkdir -m 700 tune-cache
CLATTN_CACHE_DIR="$work/tune-cache" start "$clattn" tune --variant lanes --time 60 --n 1024 \
  --repeat 64
deadline=$((SECONDS + 120))
until grep -q '^tuning lanes' out || [ ! -e "/proc/$pid" ] || [ "$SECONDS" -ge "$deadline" ]; do
  sleep 0.1
done
sleep 1
signalled=$(date +%s%N)
kill -s TERM "$pid"
finished TERM
elapsed_ms=$((($(date +%s%N) - signalled) / 1000000))
grep -q '^tuning lanes' out || fail "clattn tune had not begun its search: $(cat out err)"
grep -q 'candidates run' out && fail "clattn tune's search ended within 1 s: make it longer"
[ "$interrupted" -eq 1 ] || fail "clattn tune was not terminated 1 s into its search"
[ "$elapsed_ms" -lt 3000 ] || fail "SIGTERM took $elapsed_ms ms to end clattn tune"
compgen -G "tune-cache/tuning.json*" && fail "an interrupted clattn tune wrote tuning.json"

# ---- SIGKILL while staging: the next run removes what a process that is gone left
cp old-o.npy o.npy && cp old-l.npy l.npy
start "${run[@]}"
wait_for_temporary o.npy
kill -s KILL "$pid" 2> /dev/null # (unless it has finished)
{ wait "$pid"; } 2> /dev/null # (bash would say "Killed")
sh -c 'exit 0' &
dead=$!
wait "$dead"
kill -0 "$dead" 2> /dev/null && fail "process $dead still exists"
sleep 60 &
live=$!
for name in o.npy.tmp.$dead.0 o.npy.run-$dead o.npy.run-$dead.tmp.$dead.7 l.npy.tmp.$dead.3 \
  o.npy.tmp.$live.0 o.npy.tmp.$dead.x o.npy.run-$dead.tmp.$live.1 o.npy.bak.$dead; do
  echo stale > "$name"
done
"${run[@]}" > /dev/null || fail "the run after SIGKILL"
left=$(compgen -G "[ol].npy?*" | sort | tr '\n' ' ')
[ "$left" = "o.npy.bak.$dead o.npy.run-$dead.tmp.$live.1 o.npy.tmp.$dead.x o.npy.tmp.$live.0 " ] ||
  fail "after SIGKILL, the next run left: $left (expected only a live process's and other files)"
cmp -s o.npy new-o.npy && cmp -s l.npy new-l.npy || fail "the run after SIGKILL: outputs not new"

# ---- the program cache: temporaries of processes that are gone are removed at the next use
mkdir -m 700 cache
for name in 0123456789abcdef.clbin.tmp.$dead.0 tuning.json.tmp.$dead.2 \
  fedcba9876543210.clbin.tmp.$live.0 notes.tmp.$dead.0 0123456789abcdef.clbin.tmp.$dead.y; do
  echo stale > "cache/$name"
done
CLATTN_CACHE_DIR="$work/cache" "$clattn" devices --variants > /dev/null || fail "clattn devices"
left=$(ls cache | sort | tr '\n' ' ')
[ "$left" = "0123456789abcdef.clbin.tmp.$dead.y fedcba9876543210.clbin.tmp.$live.0 notes.tmp.$dead.0 " ] ||
  fail "the cache folder after its next use holds: $left"
kill "$live"

finish cli_signals
