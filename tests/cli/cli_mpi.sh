#!/usr/bin/env bash
# clattn run --distributed under mpirun: ring over 2 and 3 ranks (an uneven split) and Ulysses,
# for every mask kind, against the reference's output (--compare, on rank 0); the collective
# failures (a file only one rank cannot read, Ulysses without enough heads, an output rank 0
# cannot write: every rank prints the same line, naming the rank, and nothing is written); a
# rank that dies or hangs (the test copy of the program, $CLATTN_TEST_MPI_FAIL), after which the
# others end within the time limit; and bench --distributed.
# Usage: cli_mpi.sh PATH/TO/clattn PATH/TO/clattn-testing PATH/TO/mpirun
set -uo pipefail
clattn="$(realpath "$1")"
testing="$(realpath "$2")"
mpirun=("$3" --oversubscribe)
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

# ---- ring over 2 and 3 ranks, every mask kind; Ulysses where the kv heads split
for kind in "Nq=64 Nk=64 Dqk=32 Dv=32 bshd f32->f32 causal" "Nq=17 Nk=100" "window=9,0" \
            "dilation=3" "global=" "layout=per-head" "layout=shared" "bias=full" \
            "bias=broadcast" "bias=padding" "bhsd f16->f16" "bf16->bf16"; do
  dump "$kind" || continue
  for np in 2 3; do
    "${mpirun[@]}" -np "$np" "$clattn" "${run[@]}" --distributed ring --out "$work/o.npy" \
      --lse "$work/lse.npy" --compare "$dir/o.npy" > "$work/stdout" 2>&1 ||
      fail "$kind, ring over $np ranks: $(cat "$work/stdout")"
    grep -q "ring over $np ranks" "$work/stdout" || fail "$kind, $np ranks: $(cat "$work/stdout")"
    cmp -s <(head -c 64 "$work/lse.npy") <(head -c 64 "$dir/lse.npy") ||
      fail "$kind, $np ranks: the LSE file's header differs from the reference's"
  done
  if grep -q "Hkv=2 \|Hkv=4 " <<< "$("$clattn" check --list | grep -m1 -F -- "$kind")"; then
    "${mpirun[@]}" -np 2 "$clattn" "${run[@]}" --distributed ulysses --out "$work/o.npy" \
      --compare "$dir/o.npy" > "$work/stdout" 2>&1 ||
      fail "$kind, ulysses over 2 ranks: $(cat "$work/stdout")"
  fi
done

# ---- collective failures: the same line on every rank, naming the rank; nothing written
dump "window=9,-1"
out="$work/never.npy"
# the output of every rank, its lines starting "clattn run:" (mpirun adds its own banner)
same_line_on_every_rank() {
  local what="$1" text="$2" ranks="$3" lines
  lines=$(grep '^clattn run:' "$work/stderr")
  [ "$(wc -l <<< "$lines")" -eq "$ranks" ] || fail "$what: not one line a rank: $lines"
  [ "$(sort -u <<< "$lines" | wc -l)" -eq 1 ] || fail "$what: the ranks' lines differ: $lines"
  grep -qF -- "$text" <<< "$lines" || fail "$what: no '$text' in: $lines"
  [ -e "$out" ] && fail "$what: the output was written"
}
q_of_rank="if [ \"\$OMPI_COMM_WORLD_RANK\" = 1 ]; then q=$work/nope.npy; else q=${run[2]}; fi"
"${mpirun[@]}" -np 3 sh -c "$q_of_rank; exec \"$clattn\" run ${run[*]:3} --q \"\$q\" --out $out --distributed ring" \
  > /dev/null 2> "$work/stderr" && fail "a missing file on rank 1 succeeded"
same_line_on_every_rank "a missing file on rank 1" "rank 1: $work/nope.npy: cannot open" 3
"${mpirun[@]}" -np 2 "$clattn" "${run[@]}" --out "$out" --distributed ulysses > /dev/null 2> "$work/stderr" &&
  fail "ulysses with one kv head succeeded"
same_line_on_every_rank "ulysses with one kv head" "heads_kv (1) must be a multiple of the ranks (2)" 2
"${mpirun[@]}" -np 2 "$clattn" "${run[@]}" --out "$work/no-such-dir/o.npy" --distributed ring > /dev/null 2> "$work/stderr" &&
  fail "an unwritable output succeeded"
same_line_on_every_rank "an output rank 0 cannot write" "rank 0: --out $work/no-such-dir/o.npy" 2

# ---- a rank that dies or hangs: the job ends within the time limit, nothing written
for how in exit stop; do
  start=$(date +%s)
  CLATTN_TEST_MPI_FAIL="1:0:$how" timeout 120 "${mpirun[@]}" -np 3 "$testing" "${run[@]}" \
    --out "$out" --distributed ring --timeout 5 > /dev/null 2> "$work/stderr"
  status=$?
  took=$(($(date +%s) - start))
  [ "$status" -ne 0 ] || fail "rank 1 $how: the job succeeded"
  [ "$status" -ne 124 ] && [ "$took" -lt 60 ] || fail "rank 1 $how: the job took $took s (status $status)"
  [ -e "$out" ] && fail "rank 1 $how: the output was written"
  [ "$how" = stop ] && { grep -q "a rank died or hangs (CLATTN_ERR_TIMEOUT)" "$work/stderr" ||
    fail "rank 1 hangs: no timeout named: $(grep clattn "$work/stderr")"; }
done

# ---- bench --distributed: one rank against two, a record a pattern
"${mpirun[@]}" -np 2 "$clattn" bench --distributed ring --hq 2 --nq 96 --d 16 --pattern full,causal \
  --warmup 0 --repeat 2 --csv "$work/scaling.csv" > "$work/stdout" 2>&1 ||
  fail "bench --distributed: $(cat "$work/stdout")"
[ "$(grep -c '^ring,96,96,' "$work/scaling.csv")" -eq 2 ] || fail "bench --distributed's CSV: $(cat "$work/scaling.csv")"
grep -q "speedup" "$work/stdout" || fail "bench --distributed's table: $(cat "$work/stdout")"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cli_mpi: all passed"
