#!/usr/bin/env python3
"""clattn's fused attention against PyTorch's scaled_dot_product_attention, on the same CPU.

For each shape (B=1, Nq = Nk = N, Dqk = Dv = D, float32, Q, K, V and O laid out as
[B][N][H][D]) the script alternates, round after round, a `clattn bench` process (its fused path
on an OpenCL device, by default PoCL's CPU device) with timed calls of
torch.nn.functional.scaled_dot_product_attention on the same [B][N][H][D] tensors (viewed as
[B][H][N][D], as SDPA takes them) in this process, with torch.set_num_threads(THREADS). Each
side warms up, then repeats; a round's figure is the median of its repeats. It reports per
shape the minimum and median time of each side over all rounds, the speed ratio (torch time /
clattn time: above 1 means clattn is faster; the median of the rounds' ratios, so a drift of
the machine's speed between rounds cancels) and GFLOP/s of useful work, 4 * pairs * D, where
pairs counts the allowed (b, h, i, j) pairs (B*Hq*N*N for full, B*Hq*N*(N+1)/2 for causal).

clattn's times are `clattn bench`'s wall time around each call (inputs already on the device,
the call's packing of K and V included); torch's are the wall time around each SDPA call.

Install nothing here: PyTorch comes from pip into a virtual environment, e.g.

    python3 -m venv ~/venv-torch
    ~/venv-torch/bin/pip install torch numpy
    # if that pulls the large CUDA build, the CPU build is enough:
    # ~/venv-torch/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu

then, after ./scripts/build.sh:

    ~/venv-torch/bin/python bench/vs_torch.py                      # every shape (minutes)
    ~/venv-torch/bin/python bench/vs_torch.py --sizes 1024,4096    # the quicker part
    ~/venv-torch/bin/python bench/vs_torch.py --csv out.csv --json out.json

The clattn process runs with OPENBLAS_NUM_THREADS=1: the CLI links OpenBLAS for its host
baseline, whose idle worker threads would otherwise spin beside PoCL's threads; the fused path
never calls OpenBLAS.
"""

import argparse
import csv
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time

DEFAULT_SIZES = "1024,4096,16384"
DEFAULT_DIMS = "64,128"
DEFAULT_PATTERNS = "full,causal"
DEFAULT_HEADS = "8:8,32:8"  # MHA and GQA (Hq:Hkv)


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clattn", default=os.path.join(here, "..", "build", "clattn"),
                   help="the clattn executable (default: ./build/clattn)")
    p.add_argument("--sizes", default=DEFAULT_SIZES, help="sequence lengths N (Nq = Nk)")
    p.add_argument("--dims", default=DEFAULT_DIMS, help="head dims D (Dqk = Dv)")
    p.add_argument("--patterns", default=DEFAULT_PATTERNS, help="full and/or causal")
    p.add_argument("--heads", default=DEFAULT_HEADS, help="Hq:Hkv pairs, e.g. 8:8,32:8")
    p.add_argument("--batch", type=int, default=1, help="batch size B")
    p.add_argument("--rounds", type=int, default=3, help="alternations per shape (>= 1)")
    p.add_argument("--min-time", type=float, default=0.5,
                   help="seconds of timed calls each side aims at per round (sets the repeats)")
    p.add_argument("--max-repeat", type=int, default=20, help="most timed calls per round")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch threads (PoCL's CPU device uses every core; default: all)")
    p.add_argument("--device", default=None, help="clattn --device SPEC (default: clattn's)")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--json", help="write the results and the setup as JSON")
    args = p.parse_args()
    if args.rounds < 1 or args.max_repeat < 1:
        p.error("--rounds and --max-repeat must be at least 1")
    return args


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def shapes(args):
    heads = [tuple(int(x) for x in pair.split(":")) for pair in args.heads.split(",")]
    for n in int_list(args.sizes):
        for d in int_list(args.dims):
            for hq, hkv in heads:
                for pattern in args.patterns.split(","):
                    if pattern not in ("full", "causal"):
                        sys.exit(f"vs_torch: pattern '{pattern}': expected full or causal")
                    yield {"b": args.batch, "hq": hq, "hkv": hkv, "n": n, "d": d,
                           "pattern": pattern}


def allowed_pairs(s):
    n = s["n"]
    per_head = n * n if s["pattern"] == "full" else n * (n + 1) // 2
    return s["b"] * s["hq"] * per_head


def repeats_for(s, args):
    """Timed calls per round: about --min-time seconds at an assumed 200 GFLOP/s."""
    seconds = 4 * allowed_pairs(s) * s["d"] / 200e9
    return max(1, min(args.max_repeat, int(args.min_time / seconds + 0.999)))


# ---------------------------------------------------------------- clattn


def clattn_round(s, repeat, args, env):
    """One `clattn bench` process: warm-up, then `repeat` calls. Returns (min, median) ms."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "bench.csv")
        cmd = [args.clattn, "bench", "--path", "fused", "--b", str(s["b"]), "--hq", str(s["hq"]),
               "--hkv", str(s["hkv"]), "--nq", str(s["n"]), "--d", str(s["d"]),
               "--pattern", s["pattern"], "--dtype", "f32", "--warmup", "1",
               "--repeat", str(repeat), "--csv", out]
        if args.device:
            cmd += ["--device", args.device]
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"vs_torch: {' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
        with open(out, newline="") as f:
            row = next(csv.DictReader(f))
        device = next((line.split(": ", 1)[1] for line in run.stdout.splitlines()
                       if line.startswith("device ")), "?")
        if int(row["pairs"]) != allowed_pairs(s):
            sys.exit(f"vs_torch: clattn counted {row['pairs']} pairs, expected {allowed_pairs(s)}")
        return float(row["ms_min"]), float(row["ms_median"]), device


# ---------------------------------------------------------------- torch


def torch_inputs(torch, s):
    """Q, K, V as [B][N][H][D] tensors (clattn's layout), uniform in [-1, 1)."""
    g = torch.Generator().manual_seed(42)

    def make(h):
        return torch.rand(s["b"], s["n"], h, s["d"], generator=g, dtype=torch.float32) * 2 - 1

    return make(s["hq"]), make(s["hkv"]), make(s["hkv"])


def torch_round(torch, inputs, s, repeat):
    """Warm-up, then `repeat` SDPA calls. Returns (min, median) ms."""
    q, k, v = (x.transpose(1, 2) for x in inputs)  # [B][H][N][D] views, no copies
    extra = {"enable_gqa": True} if s["hq"] != s["hkv"] else {}
    causal = s["pattern"] == "causal"
    sdpa = torch.nn.functional.scaled_dot_product_attention
    times = []
    with torch.inference_mode():
        sdpa(q, k, v, is_causal=causal, **extra)
        for _ in range(repeat):
            t0 = time.perf_counter()
            sdpa(q, k, v, is_causal=causal, **extra)
            times.append((time.perf_counter() - t0) * 1e3)
    return min(times), statistics.median(times)


# ---------------------------------------------------------------- one shape


def measure(torch, s, args, env):
    repeat = repeats_for(s, args)
    inputs = torch_inputs(torch, s)
    c_min, c_med, t_min, t_med, ratios, device = [], [], [], [], [], "?"
    for _ in range(args.rounds):
        lo, med, device = clattn_round(s, repeat, args, env)
        c_min.append(lo), c_med.append(med)
        lo, med = torch_round(torch, inputs, s, repeat)
        t_min.append(lo), t_med.append(med)
        ratios.append(t_med[-1] / c_med[-1])
    flops = 4 * allowed_pairs(s) * s["d"]
    r = dict(s)
    r.update({
        "repeat": repeat, "rounds": args.rounds, "pairs": allowed_pairs(s),
        "clattn_ms_min": min(c_min), "clattn_ms_median": statistics.median(c_med),
        "torch_ms_min": min(t_min), "torch_ms_median": statistics.median(t_med),
        "speed_ratio": statistics.median(ratios),
        "ratio_min": min(ratios), "ratio_max": max(ratios),
    })
    r["clattn_gflops"] = flops / r["clattn_ms_median"] / 1e6
    r["torch_gflops"] = flops / r["torch_ms_median"] / 1e6
    return r, device


# ---------------------------------------------------------------- output

COLUMNS = [("N", "n", "{}"), ("D", "d", "{}"), ("Hq:Hkv", None, None), ("pattern", "pattern", "{}"),
           ("clattn min", "clattn_ms_min", "{:.2f}"), ("clattn med", "clattn_ms_median", "{:.2f}"),
           ("torch min", "torch_ms_min", "{:.2f}"), ("torch med", "torch_ms_median", "{:.2f}"),
           ("speed ratio", "speed_ratio", "{:.2f}x"), ("ratio range", None, None),
           ("clattn GFLOP/s", "clattn_gflops", "{:.0f}"), ("torch GFLOP/s", "torch_gflops", "{:.0f}")]


def cells(r):
    out = []
    for title, key, fmt in COLUMNS:
        if title == "Hq:Hkv":
            out.append(f"{r['hq']}:{r['hkv']}")
        elif title == "ratio range":
            out.append(f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}")
        else:
            out.append(fmt.format(r[key]))
    return out


def print_header(setup):
    print(f"# {setup['date']}  clattn device: {setup['clattn_device']}")
    print(f"# torch {setup['torch']} ({setup['torch_threads']} threads), python "
          f"{setup['python']}, cpu: {setup['cpu']}")
    print(f"# float32, B={setup['batch']}, times in ms (min and median over {setup['rounds']} "
          "rounds); speed ratio = torch time / clattn time (median of the rounds' ratios)")


def print_row(r, first):
    widths = [max(len(title), 8) for title, _, _ in COLUMNS]
    if first:
        print("| " + " | ".join(t.ljust(w) for (t, _, _), w in zip(COLUMNS, widths)) + " |")
        print("| " + " | ".join("-" * w for w in widths) + " |")
    print("| " + " | ".join(c.ljust(w) for c, w in zip(cells(r), widths)) + " |", flush=True)


def write_csv(path, records):
    keys = list(records[0].keys())
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=keys)
        w.writeheader()
        w.writerows(records)


def cpu_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def main():
    args = parse_args()
    try:
        import torch
    except ImportError:
        sys.exit("vs_torch: PyTorch is not installed in this Python; see the top of this file")
    if not os.access(args.clattn, os.X_OK):
        sys.exit(f"vs_torch: {args.clattn} is not an executable; run ./scripts/build.sh first")
    torch.set_num_threads(args.threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    setup = {"date": datetime.datetime.now().isoformat(timespec="seconds"),
             "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
             "python": platform.python_version(), "cpu": cpu_name(), "batch": args.batch,
             "rounds": args.rounds, "clattn_device": "?"}
    records = []
    for s in shapes(args):
        r, setup["clattn_device"] = measure(torch, s, args, env)
        if not records:
            print_header(setup)
        print_row(r, not records)
        records.append(r)
    if args.csv:
        write_csv(args.csv, records)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "results": records}, f, indent=1)


if __name__ == "__main__":
    main()
