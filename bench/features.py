"""Issue 33's costs on this machine: soft-capping, ALiBi and sinks over plain attention on a
fused variant, head dims 576/512 on lanes, split and gemm. Wall time of clattn.attention (NumPy
inputs, host arrays: the copies are in every row alike) after warm-up, the least of interleaved
rounds.

    python bench/features.py [--variant lanes] [--n 1024] [--repeat 7]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import clattn


def interleaved_min_ms(calls, repeat: int):
    """The least wall time of each call over `repeat` rounds that run every call once in turn
    (on a shared machine the load then weighs on every row alike)."""
    for call in calls.values():
        call()  # build and warm up
    best = {name: float("inf") for name in calls}
    for _ in range(repeat):
        for name, call in calls.items():
            start = time.perf_counter()
            call()
            best[name] = min(best[name], (time.perf_counter() - start) * 1e3)
    return best


def modifiers(args) -> None:
    rng = np.random.default_rng(0)
    B, H, N, D = 1, 8, args.n, 64
    q, k, v = (rng.uniform(-1, 1, (B, H, N, D)).astype(np.float32) for _ in range(3))
    sinks = rng.uniform(-1, 1, H).astype(np.float32)
    rows = {
        "plain": {},
        "softcap=30": {"softcap": 30.0},
        "alibi": {"alibi_slopes": clattn.alibi_slopes(H)},
        "sinks": {"sinks": sinks},
        "all three": {"softcap": 30.0, "alibi_slopes": clattn.alibi_slopes(H), "sinks": sinks},
    }
    print(f"modifiers: B={B} H={H} N={N} D={D} causal, variant {args.variant} (least of {args.repeat} rounds)")
    calls = {
        name: (lambda extra=extra: clattn.attention(q, k, v, causal=True, variant=args.variant, **extra))
        for name, extra in rows.items()
    }
    best = interleaved_min_ms(calls, args.repeat)
    for name, ms in best.items():
        print(f"  {name:10s} {ms:9.2f} ms  {100 * (ms / best['plain'] - 1):+6.1f} %")


def wide(args) -> None:
    rng = np.random.default_rng(1)
    print("head dims 576/512 (DeepSeek MLA shape, MQA 16:1, causal): lanes, split and gemm "
          f"(least of {args.repeat} interleaved rounds), and the row auto runs")
    for nq, nk in ((1, 4096), (16, 4096), (64, 4096), (256, 1024), (1024, 1024)):
        q = rng.uniform(-1, 1, (1, 16, nq, 576)).astype(np.float32)
        k = rng.uniform(-1, 1, (1, 1, nk, 576)).astype(np.float32)
        v = rng.uniform(-1, 1, (1, 1, nk, 512)).astype(np.float32)
        calls = {
            "lanes": lambda: clattn.attention(q, k, v, causal=True, variant="lanes"),
            "split": lambda: clattn.attention(q, k, v, causal=True, variant="split"),
            "gemm": lambda: clattn.attention(q, k, v, causal=True, path="gemm"),
        }
        best = interleaved_min_ms(calls, args.repeat)
        clattn.attention(q, k, v, causal=True)
        ran = clattn.default_context().last_stats().variant
        print(f"  Nq={nq:4d} Nk={nk}: lanes {best['lanes']:8.2f} ms  split {best['split']:8.2f} ms"
              f"  gemm {best['gemm']:8.2f} ms  auto runs {ran}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--variant", default="lanes")
    parser.add_argument("--n", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--only", choices=["modifiers", "wide"])
    args = parser.parse_args()
    if args.only != "wide":
        modifiers(args)
    if args.only != "modifiers":
        wide(args)
