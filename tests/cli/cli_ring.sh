#!/usr/bin/env bash
# clattn run --devices: the call sharded over several devices of one process (a ring; the test
# runs with POCL_DEVICES="pthread pthread", two PoCL devices), for every mask kind and both
# shardings, against the reference's output (--compare); and the options' refusals.
# Usage: cli_ring.sh PATH/TO/clattn
set -uo pipefail
clattn="$(realpath "$1")"
# fail, expect STATUS TEXT -- COMMAND...
source "$(dirname "${BASH_SOURCE[0]}")/cli_common.sh"

devices=$("$clattn" devices 2> /dev/null | grep -cE '^[0-9]+ +[0-9]+:[0-9]+ ')
[ "$devices" -ge 2 ] && pair=0,1 || pair=0,0 # two contexts on one device otherwise

for kind in "Nq=64 Nk=64 Dqk=32 Dv=32 bshd f32->f32 causal" "window=9,-1" "dilation=3" \
            "global=" "layout=per-head" "layout=shared" "bias=full" "bias=padding" \
            "bhsd f16->f16" "bf16->bf16" "Nq=100 Nk=17"; do
  dump "$kind" || continue
  for sharding in auto contiguous zigzag; do
    "$clattn" "${run[@]}" --devices "$pair" --sharding "$sharding" --out "$work/o.npy" \
      --lse "$work/lse.npy" --compare "$dir/o.npy" > "$work/stdout" 2>&1 ||
      fail "$kind, --devices $pair --sharding $sharding: $(cat "$work/stdout")"
    grep -q "a ring over 2 devices" "$work/stdout" || fail "$kind: $(cat "$work/stdout")"
  done
done

# ---- refusals: exit 2 for options that do not go together, 1 for no such device
dump "window=9,-1"
out="$work/never.npy"
expect 2 "--devices and --distributed do not go together" -- "$clattn" "${run[@]}" --out "$out" --devices 0,0 --distributed ring
expect 2 "--devices and --kv-storage do not go together" -- "$clattn" "${run[@]}" --out "$out" --devices 0,0 --kv-storage q8_0
expect 2 "--sharding goes with --devices or --distributed" -- "$clattn" "${run[@]}" --out "$out" --sharding zigzag
expect 2 "--timeout goes with --distributed" -- "$clattn" "${run[@]}" --out "$out" --devices 0,0 --timeout 5
expect 2 "--sharding" -- "$clattn" "${run[@]}" --out "$out" --devices 0,0 --sharding diagonal
expect 1 "no device matches 'nosuchdevice'" -- "$clattn" "${run[@]}" --out "$out" --devices 0,nosuchdevice
[ -e "$out" ] && fail "a refused run wrote its output"

[ "$failures" -eq 0 ] || { echo "$failures failure(s)"; exit 1; }
echo "cli_ring: all passed"
