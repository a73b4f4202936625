#!/usr/bin/env python3
"""clattn's fused attention against PyTorch's scaled_dot_product_attention, on the same device.

torch runs on the CPU, or with --torch-device cuda on a GPU (then each timed call waits for the
GPU); clattn on its --device. --no-torch times clattn alone (no torch needed).

Two modes. The default (prefill) one: for each shape (B=1, Nq = Nk = N, Dqk = Dv = D, float32
or the --dtypes given, Q, K, V and O laid out as [B][N][H][D]) the script alternates, round
after round, a `clattn bench` process (its fused path on an OpenCL device, by default PoCL's CPU
device) with timed calls of torch.nn.functional.scaled_dot_product_attention on the same
[B][N][H][D] tensors (viewed as [B][H][N][D], as SDPA takes them) in this process, with
torch.set_num_threads(THREADS). Each side warms up, then repeats; a round's figure is the median
of its repeats. It reports per shape the minimum and median time of each side over all rounds,
the speed ratio (torch time / clattn time: above 1 means clattn is faster; the median of the
rounds' ratios, so a drift of the machine's speed between rounds cancels) and GFLOP/s of useful
work, 4 * pairs * D, where pairs counts the allowed (b, h, i, j) pairs (B*Hq*N*N for full,
B*Hq*N*(N+1)/2 for causal).

clattn's times are `clattn bench`'s wall time around each call (inputs already on the device,
the call's packing of K and V included); torch's are the wall time around each SDPA call.

--decode (issue 12, decoding with a KV cache): one new token (Nq = 1) over a full cache of Nk
keys, for each Nk in --nk and storage type in --dtypes (GQA Hq:Hkv = 32:8, D = 128, B = 1 by
default). The clattn side is `clattn bench --preset decode --nq 1 --steps 0 --dtype T`: a
clattn_kv_cache_attention call over a KV cache filled to Nk rows (its "attend" record); the torch
side is SDPA(q, k, v, enable_gqa=True) with q [B][Hq][1][D] and contiguous k, v [B][Hkv][Nk][D]
of the same dtype (the layout of a Hugging Face KV cache). Same rounds, times and ratios; the rate
is K/V GB/s, the K and V bytes a call reads over its time. A q8_0 or q4_0 cache (float32 Q and
O) has no torch counterpart: its row shows clattn's times and "-" for torch.

--layer (issue 23): a whole multi-head attention layer, Y = (SDPA(X W_q^T, X_kv W_k^T, X_kv
W_v^T)) W_o^T, no biases, X and Y float32. The clattn side is `clattn bench --preset layer`
(clattn_mha_forward on device buffers, every head kept; the process also measures the device's
float32 FMA peak after the record, and reports the GEMMs' FLOP/s as a share of it, and which
GEMM row ran); the torch side is F.linear + SDPA + F.linear on the same shapes in this process.
Four shapes: d_model 1024, 16 heads, D 64, N 1024, causal; d_model 4096, 32/8 heads (GQA), D 128,
N 2048, causal; a cross-attention (d_model 1024, 16 heads, N 1024 queries over Nk 1500 rows of
X_kv, full); and bfloat16 weights (the first shape: clattn reads them as stored with float32 X
and Y; torch, which has no mixed-type F.linear, runs the whole layer in bfloat16). GFLOP/s count
the layer's useful work: the GEMMs' 2*M*N*K and the attention's 4*pairs*D.

--sparse (issue 24): sparse patterns at H=4, D=64, N = 4096 and 16384 by default, each with full
attention as its baseline: clattn's fused path on [B][H][N][D] tensors (`clattn bench --layout
bhsd --pattern P`) against torch.nn.attention.flex_attention compiled with torch.compile, given a
block mask of the same allowed set (window, dilated window, Longformer with its first G positions
global, and BigBird with the very layout `clattn pattern bigbird` writes; full is flex without a
mask). After the table it prints each side's speedup over its own full attention and its fraction
of the ideal speedup (speedup * density). The first flex call of each pattern compiles (tens of
seconds), untimed. --patterns takes clattn bench's syntax.

--generate (issue 32): a Hugging Face Llama generating, clattn's attention with its DeviceCache
against sdpa with transformers' cache, prefill and decode tokens/s at contexts 512 to 8192: see
bench/generate.py (it needs the clattn Python package and transformers besides torch).

Install nothing here: PyTorch comes from pip into a virtual environment, e.g.

    python3 -m venv ~/venv-torch
    ~/venv-torch/bin/pip install torch numpy
    # if that pulls the large CUDA build, the CPU build is enough:
    # ~/venv-torch/bin/pip install torch --index-url https://download.pytorch.org/whl/cpu

then, after ./scripts/build.sh:

    ~/venv-torch/bin/python bench/vs_torch.py                      # every shape (minutes)
    ~/venv-torch/bin/python bench/vs_torch.py --sizes 1024,4096    # the quicker part
    ~/venv-torch/bin/python bench/vs_torch.py --csv out.csv --json out.json
    ~/venv-torch/bin/python bench/vs_torch.py --decode             # Nk = 4096, 32768; 5 dtypes
    ~/venv-torch/bin/python bench/vs_torch.py --decode --nk 4096 --dtypes f32,bf16
    ~/venv-torch/bin/python bench/vs_torch.py --layer                # the layer's 4 shapes
    ~/venv-torch/bin/python bench/vs_torch.py --layer --shapes 0,3   # some of them
    ~/venv-torch/bin/python bench/vs_torch.py --sparse               # N = 4096, 16384
    ~/venv-torch/bin/python bench/vs_torch.py --sparse --sizes 2048 --patterns full,window:64,64

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

# Prefill (the default mode).
DEFAULT_SIZES = "1024,4096,16384"
DEFAULT_DIMS = "64,128"
DEFAULT_PATTERNS = "full,causal"
DEFAULT_HEADS = "8:8,32:8"  # MHA and GQA (Hq:Hkv)
DEFAULT_DTYPES = "f32"
DEFAULT_MAX_REPEAT = 20

# --decode: the shape of issue 12.
DECODE_NK = "4096,32768"
DECODE_DTYPES = "f32,f16,bf16,q8_0,q4_0"
DECODE_DIMS = "128"
DECODE_HEADS = "32:8"
DECODE_MAX_REPEAT = 100
CLATTN_MAX_REPEAT = 256  # clattn bench --preset decode times at most this many calls

TORCH_DTYPES = {"f32": "float32", "f16": "float16", "bf16": "bfloat16"}  # q8_0, q4_0: none

# --layer: the shapes of issue 23 (every head kept, B = 1).
LAYER_SHAPES = [
    {"d_model": 1024, "hq": 16, "hkv": 16, "d": 64, "n": 1024, "nk": 0, "pattern": "causal",
     "wtype": "f32"},
    {"d_model": 4096, "hq": 32, "hkv": 8, "d": 128, "n": 2048, "nk": 0, "pattern": "causal",
     "wtype": "f32"},
    {"d_model": 1024, "hq": 16, "hkv": 16, "d": 64, "n": 1024, "nk": 1500, "pattern": "full",
     "wtype": "f32"},
    {"d_model": 1024, "hq": 16, "hkv": 16, "d": 64, "n": 1024, "nk": 0, "pattern": "causal",
     "wtype": "bf16"},
]
LAYER_MAX_REPEAT = 64  # clattn bench --preset layer times at most this many calls

# --sparse: the patterns of issue 24 at H=4, D=64 (full is every fraction's baseline).
SPARSE_SIZES = "4096,16384"
SPARSE_PATTERNS = ("full,window:128,128,dilated:128,128,2,longformer:128,4,"
                   "bigbird:64,3,2,3")
SPARSE_HEADS = "4:4"
SPARSE_DIMS = "64"


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--clattn", default=os.path.join(here, "..", "build", "clattn"),
                   help="the clattn executable (default: ./build/clattn)")
    p.add_argument("--generate", action="store_true",
                   help="a whole model generating (bench/generate.py: its own options)")
    p.add_argument("--decode", action="store_true",
                   help="decoding: one query (Nq = 1) over a full KV cache of --nk keys")
    p.add_argument("--layer", action="store_true",
                   help="the whole attention layer (projections, attention, output)")
    p.add_argument("--sparse", action="store_true",
                   help="sparse patterns: clattn against torch's compiled flex_attention")
    p.add_argument("--shapes", help="--layer: which of its shapes, by index (default: all)")
    p.add_argument("--gemm", help="--layer: clattn's GEMM row (clattn bench --gemm; default auto)")
    p.add_argument("--sizes",
                   help=f"prefill: sequence lengths N, Nq = Nk (default {DEFAULT_SIZES})")
    p.add_argument("--patterns", help=f"prefill: full and/or causal (default {DEFAULT_PATTERNS}); "
                   f"sparse: clattn bench patterns (default {SPARSE_PATTERNS})")
    p.add_argument("--nk", help=f"decode: cache lengths Nk (default {DECODE_NK})")
    p.add_argument("--dtypes", help=f"prefill: f32, f16, bf16 (default {DEFAULT_DTYPES}); decode: "
                   f"f32, f16, bf16, q8_0, q4_0 (default {DECODE_DTYPES}; the quantised ones are "
                   "clattn only)")
    p.add_argument("--dims", help=f"head dims D, Dqk = Dv (default {DEFAULT_DIMS}; "
                   f"decode: {DECODE_DIMS})")
    p.add_argument("--heads",
                   help=f"Hq:Hkv pairs (default {DEFAULT_HEADS}; decode: {DECODE_HEADS})")
    p.add_argument("--batch", type=int, default=1, help="batch size B")
    p.add_argument("--rounds", type=int, default=3, help="alternations per shape (>= 1)")
    p.add_argument("--min-time", type=float, default=0.5,
                   help="seconds of timed calls each side aims at per round (sets the repeats)")
    p.add_argument("--max-repeat", type=int,
                   help=f"most timed calls per round (default {DEFAULT_MAX_REPEAT}; "
                   f"decode: {DECODE_MAX_REPEAT}, at most {CLATTN_MAX_REPEAT})")
    p.add_argument("--min-repeat", type=int, default=1,
                   help="fewest timed calls per round (a GPU runs far faster than the repeats "
                   "--min-time assumes)")
    p.add_argument("--threads", type=int, default=os.cpu_count(),
                   help="torch threads (PoCL's CPU device uses every core; default: all)")
    p.add_argument("--device", default=None, help="clattn --device SPEC (default: clattn's)")
    p.add_argument("--torch-device", default="cpu",
                   help="torch's device: cpu (default) or cuda (then each timed call is "
                   "followed by torch.cuda.synchronize())")
    p.add_argument("--no-torch", action="store_true",
                   help="time clattn only (e.g. --sparse without flex_attention's compiles)")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--json", help="write the results and the setup as JSON")
    args = p.parse_args()
    if args.layer + args.decode + args.sparse > 1:
        p.error("--layer, --decode and --sparse are separate modes")
    if not args.layer and (args.shapes is not None or args.gemm is not None):
        p.error("--shapes and --gemm belong to the --layer mode")
    mode = ("--decode" if args.decode else "--layer" if args.layer else "--sparse" if args.sparse
            else "prefill")
    other = {"--decode": ("sizes", "patterns"), "prefill": ("nk",)}.get(mode, ("nk", "dtypes"))
    for name in other:
        if getattr(args, name) is not None:
            p.error(f"--{name} does not belong to the {mode} mode")
    defaults = {"sizes": SPARSE_SIZES if args.sparse else DEFAULT_SIZES,
                "patterns": SPARSE_PATTERNS if args.sparse else DEFAULT_PATTERNS,
                "nk": DECODE_NK, "dtypes": DECODE_DTYPES if args.decode else DEFAULT_DTYPES,
                "dims": DECODE_DIMS if args.decode else SPARSE_DIMS if args.sparse
                else DEFAULT_DIMS,
                "heads": DECODE_HEADS if args.decode else SPARSE_HEADS if args.sparse
                else DEFAULT_HEADS,
                "max_repeat": DECODE_MAX_REPEAT if args.decode else DEFAULT_MAX_REPEAT}
    for name, value in defaults.items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.layer:
        args.max_repeat = min(args.max_repeat, LAYER_MAX_REPEAT)
    if args.rounds < 1 or args.min_repeat < 1 or args.max_repeat < args.min_repeat:
        p.error("--rounds and --min-repeat must be at least 1, --max-repeat at least --min-repeat")
    if args.decode and args.max_repeat > CLATTN_MAX_REPEAT:
        p.error(f"--max-repeat: clattn's decode preset times at most {CLATTN_MAX_REPEAT} calls")
    return args


def int_list(text):
    return [int(x) for x in text.split(",") if x]


def head_pairs(args):
    return [tuple(int(x) for x in pair.split(":")) for pair in args.heads.split(",")]


def repeats_for(seconds, args):
    """Timed calls per round: about --min-time seconds for calls of `seconds` each."""
    return max(args.min_repeat, min(args.max_repeat, int(args.min_time / seconds + 0.999)))


def fmt(value, spec):
    return "-" if value is None else spec.format(value)


# ---------------------------------------------------------------- prefill: Nq = Nk = N


class Prefill:
    """Full and causal attention over N queries and N keys, float32."""

    name = "prefill"
    own_torch_repeat = False  # both sides time `repeat` calls a round

    @staticmethod
    def shapes(args):
        for n in int_list(args.sizes):
            for d in int_list(args.dims):
                for hq, hkv in head_pairs(args):
                    for pattern in args.patterns.split(","):
                        if pattern not in ("full", "causal"):
                            sys.exit(f"vs_torch: pattern '{pattern}': expected full or causal")
                        for dtype in args.dtypes.split(","):
                            if dtype not in TORCH_DTYPES:
                                sys.exit(f"vs_torch: dtype '{dtype}': expected f32, f16 or bf16")
                            yield {"b": args.batch, "hq": hq, "hkv": hkv, "n": n, "d": d,
                                   "pattern": pattern, "dtype": dtype}

    @staticmethod
    def pairs(s):
        n = s["n"]
        per_head = n * n if s["pattern"] == "full" else n * (n + 1) // 2
        return s["b"] * s["hq"] * per_head

    @staticmethod
    def flops(s):
        return 4 * Prefill.pairs(s) * s["d"]

    @staticmethod
    def repeats(s, args):
        return repeats_for(Prefill.flops(s) / 200e9, args)  # at an assumed 200 GFLOP/s

    @staticmethod
    def clattn_args(s, repeat, tmp):
        """`clattn bench` arguments for one round, and the CSV file it writes."""
        out = os.path.join(tmp, "bench.csv")
        return ["bench", "--path", "fused", "--b", str(s["b"]), "--hq", str(s["hq"]),
                "--hkv", str(s["hkv"]), "--nq", str(s["n"]), "--d", str(s["d"]),
                "--pattern", s["pattern"], "--dtype", s["dtype"], "--warmup", "1",
                "--repeat", str(repeat), "--csv", out], out

    @staticmethod
    def clattn_record(s, rows):
        """Checks clattn's CSV rows; returns the row timed and what the results keep of it."""
        row = rows[0]
        if int(row["pairs"]) != Prefill.pairs(s):
            sys.exit(f"vs_torch: clattn counted {row['pairs']} pairs, expected {Prefill.pairs(s)}")
        return row, {"clattn_kernel": row["kernel"]}

    @staticmethod
    def torch_call(torch, s, device):
        """SDPA on [B][N][H][D] tensors (clattn's layout) viewed as [B][H][N][D], no copies."""
        g = torch.Generator().manual_seed(42)
        dtype = getattr(torch, TORCH_DTYPES[s["dtype"]])

        def make(h):
            x = torch.rand(s["b"], s["n"], h, s["d"], generator=g, dtype=torch.float32) * 2 - 1
            return x.to(device=device, dtype=dtype).transpose(1, 2)

        q, k, v = make(s["hq"]), make(s["hkv"]), make(s["hkv"])
        extra = {"enable_gqa": True} if s["hq"] != s["hkv"] else {}
        causal = s["pattern"] == "causal"
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(q, k, v, is_causal=causal, **extra)

    @staticmethod
    def fields(s):
        return {"pairs": Prefill.pairs(s)}

    @staticmethod
    def rates(r):
        flops = Prefill.flops(r)
        torch_ms = r["torch_ms_median"]
        return {"clattn_gflops": flops / r["clattn_ms_median"] / 1e6,
                "torch_gflops": torch_ms and flops / torch_ms / 1e6}

    columns = [("N", lambda r: str(r["n"])), ("D", lambda r: str(r["d"])),
               ("Hq:Hkv", lambda r: f"{r['hq']}:{r['hkv']}"), ("pattern", lambda r: r["pattern"]),
               ("dtype", lambda r: r["dtype"]), ("kernel", lambda r: r["clattn_kernel"])]
    rate_columns = [("clattn GFLOP/s", lambda r: fmt(r["clattn_gflops"], "{:.0f}")),
                    ("torch GFLOP/s", lambda r: fmt(r["torch_gflops"], "{:.0f}"))]
    ms_format = "{:.2f}"

    @staticmethod
    def describe(setup, r):
        """The header's shape line, and further lines."""
        return f"B={setup['batch']}", []


# ---------------------------------------------------------------- decode: Nq = 1 over a cache


def values_bytes(dtype, n):
    """Bytes of n values stored as dtype (blocks of 32 values: q8_0 in 34 bytes, q4_0 in 18)."""
    block_bytes = {"q8_0": 34, "q4_0": 18}
    if dtype in block_bytes:
        return n // 32 * block_bytes[dtype]
    return n * (4 if dtype == "f32" else 2)


class Decode:
    """One new token (Nq = 1) over a KV cache of Nk keys, in each storage type."""

    name = "decode"
    own_torch_repeat = True  # torch's calls can be 50x slower: its repeats come from its own time

    @staticmethod
    def shapes(args):
        for nk in int_list(args.nk):
            for d in int_list(args.dims):
                for hq, hkv in head_pairs(args):
                    for dtype in args.dtypes.split(","):
                        if dtype not in ("f32", "f16", "bf16", "q8_0", "q4_0"):
                            sys.exit(f"vs_torch: dtype '{dtype}': expected f32, f16, bf16, q8_0 "
                                     "or q4_0")
                        yield {"b": args.batch, "hq": hq, "hkv": hkv, "nq": 1, "nk": nk, "d": d,
                               "dtype": dtype}

    @staticmethod
    def kv_bytes(s):
        return 2 * values_bytes(s["dtype"], s["b"] * s["nk"] * s["hkv"] * s["d"])

    @staticmethod
    def repeats(s, args):
        return repeats_for(Decode.kv_bytes(s) / 20e9, args)  # at an assumed 20 GB/s

    @staticmethod
    def clattn_args(s, repeat, tmp):
        return ["bench", "--preset", "decode", "--b", str(s["b"]), "--nq", "1",
                "--nk", str(s["nk"]), "--hq", str(s["hq"]), "--hkv", str(s["hkv"]),
                "--d", str(s["d"]), "--dtype", s["dtype"], "--steps", "0", "--warmup", "1",
                "--repeat", str(repeat), "--out", tmp], os.path.join(tmp, "decode.csv")

    @staticmethod
    def clattn_record(s, rows):
        row = next((x for x in rows if x["mode"] == "attend"), None)
        if row is None:
            sys.exit("vs_torch: clattn's decode.csv holds no attend record")
        if int(float(row["kv_bytes"])) != Decode.kv_bytes(s):
            sys.exit(f"vs_torch: clattn read {row['kv_bytes']} K/V bytes, "
                     f"expected {Decode.kv_bytes(s)}")
        return row, {"clattn_kernel": row["kernel"], "clattn_copy_gbs": float(row["copy_gbs"])}

    @staticmethod
    def torch_call(torch, s, device):
        """SDPA with q [B][Hq][1][D] and contiguous k, v [B][Hkv][Nk][D]; None for q8_0 and q4_0."""
        if s["dtype"] not in TORCH_DTYPES:
            return None
        dtype = getattr(torch, TORCH_DTYPES[s["dtype"]])
        g = torch.Generator().manual_seed(42)

        def make(h, n):
            x = torch.rand(s["b"], h, n, s["d"], generator=g, dtype=torch.float32) * 2 - 1
            return x.to(device=device, dtype=dtype)

        q, k, v = make(s["hq"], 1), make(s["hkv"], s["nk"]), make(s["hkv"], s["nk"])
        sdpa = torch.nn.functional.scaled_dot_product_attention
        return lambda: sdpa(q, k, v, enable_gqa=True)

    @staticmethod
    def fields(s):
        return {"kv_bytes": Decode.kv_bytes(s)}

    @staticmethod
    def rates(r):
        def gbs(ms):
            return None if ms is None else r["kv_bytes"] / ms / 1e6

        return {"clattn_kv_gbs": gbs(r["clattn_ms_median"]),
                "torch_kv_gbs": gbs(r["torch_ms_median"])}

    columns = [("Nk", lambda r: str(r["nk"])), ("D", lambda r: str(r["d"])),
               ("Hq:Hkv", lambda r: f"{r['hq']}:{r['hkv']}"), ("dtype", lambda r: r["dtype"])]
    rate_columns = [("clattn K/V GB/s", lambda r: fmt(r["clattn_kv_gbs"], "{:.1f}")),
                    ("torch K/V GB/s", lambda r: fmt(r["torch_kv_gbs"], "{:.1f}"))]
    ms_format = "{:.3f}"

    @staticmethod
    def describe(setup, r):
        return f"decode: Nq=1 over a full KV cache, B={setup['batch']}", [
            "K/V GB/s: the K and V bytes a call reads / its median time; clattn's device copies "
            f"{r['clattn_copy_gbs']:.1f} GB/s (read + written)",
            "q8_0, q4_0: clattn only (its K/V cache quantised, float32 Q and O); torch has "
            "neither"]


# ---------------------------------------------------------------- layer: the whole layer


class Layer:
    """The attention layer: projections, attention, output projection."""

    name = "layer"
    own_torch_repeat = True

    @staticmethod
    def shapes(args):
        chosen = int_list(args.shapes) if args.shapes else range(len(LAYER_SHAPES))
        for i in chosen:
            if not 0 <= i < len(LAYER_SHAPES):
                sys.exit(f"vs_torch: --shapes: {i} is not a shape (0 to {len(LAYER_SHAPES) - 1})")
            yield dict(LAYER_SHAPES[i], b=args.batch, shape=i, gemm=args.gemm or "auto")

    @staticmethod
    def pairs(s):
        n, nk = s["n"], s["nk"] or s["n"]
        per_head = n * nk if s["pattern"] == "full" else n * (n + 1) // 2
        return s["b"] * s["hq"] * per_head

    @staticmethod
    def flops(s):
        m, mk, d = s["b"] * s["n"], s["b"] * (s["nk"] or s["n"]), s["d"]
        gemms = 2 * m * s["d_model"] * s["hq"] * d * 2 + 2 * mk * s["d_model"] * 2 * s["hkv"] * d
        return gemms + 4 * Layer.pairs(s) * d

    @staticmethod
    def repeats(s, args):
        return repeats_for(Layer.flops(s) / 50e9, args)  # at an assumed 50 GFLOP/s

    @staticmethod
    def clattn_args(s, repeat, tmp):
        cmd = ["bench", "--preset", "layer", "--b", str(s["b"]), "--hq", str(s["hq"]),
               "--hkv", str(s["hkv"]), "--d", str(s["d"]), "--nq", str(s["n"]),
               "--pattern", s["pattern"], "--kept", str(s["hq"]), "--dtype", s["wtype"],
               "--gemm", s["gemm"], "--warmup", "1", "--repeat", str(repeat), "--out", tmp]
        if s["nk"]:
            cmd += ["--nk", str(s["nk"])]
        return cmd, os.path.join(tmp, "layer.csv")

    @staticmethod
    def clattn_record(s, rows):
        row = rows[0]
        if int(row["d_model"]) != s["d_model"] or int(row["nk"]) != (s["nk"] or s["n"]):
            sys.exit(f"vs_torch: clattn measured another layer: {row}")
        return row, {"clattn_kernel": row["kernel"], "clattn_gemm": row["gemm"],
                     "clattn_fma_peak_gflops": float(row["fma_peak_gflops"]),
                     "clattn_gemm_percent_of_peak": float(row["gemm_percent_of_peak"]),
                     "clattn_projection_ms": float(row["projection_ms"]),
                     "clattn_attention_ms": float(row["attention_ms"]),
                     "clattn_output_ms": float(row["output_ms"])}

    @staticmethod
    def torch_call(torch, s, device):
        """F.linear, SDPA on [B][H][N][D] views, F.linear; bf16 weights: all in bfloat16."""
        dtype = torch.bfloat16 if s["wtype"] == "bf16" else torch.float32
        g = torch.Generator().manual_seed(42)
        dm, d, hq, hkv = s["d_model"], s["d"], s["hq"], s["hkv"]
        nk = s["nk"] or s["n"]

        def make(*shape, scale=1.0):
            x = (torch.rand(*shape, generator=g) * 2 - 1) * scale
            return x.to(device=device, dtype=dtype)

        x = make(s["b"], s["n"], dm)
        x_kv = make(s["b"], nk, dm) if s["nk"] else x
        w_q, w_o = make(hq * d, dm, scale=dm ** -0.5), make(dm, hq * d, scale=(hq * d) ** -0.5)
        w_k, w_v = make(hkv * d, dm, scale=dm ** -0.5), make(hkv * d, dm, scale=dm ** -0.5)
        linear = torch.nn.functional.linear
        sdpa = torch.nn.functional.scaled_dot_product_attention
        extra = {"enable_gqa": True} if hq != hkv else {}
        causal = s["pattern"] == "causal"

        def heads(t, h):
            return t.view(t.shape[0], t.shape[1], h, d).transpose(1, 2)

        def layer():
            q = heads(linear(x, w_q), hq)
            k, v = heads(linear(x_kv, w_k), hkv), heads(linear(x_kv, w_v), hkv)
            o = sdpa(q, k, v, is_causal=causal, **extra)
            return linear(o.transpose(1, 2).reshape(s["b"], s["n"], hq * d), w_o)

        return layer

    @staticmethod
    def fields(s):
        return {"pairs": Layer.pairs(s), "flops": Layer.flops(s)}

    @staticmethod
    def rates(r):
        return {"clattn_gflops": r["flops"] / r["clattn_ms_median"] / 1e6,
                "torch_gflops": r["flops"] / r["torch_ms_median"] / 1e6}

    columns = [("d_model", lambda r: str(r["d_model"])),
               ("Hq:Hkv", lambda r: f"{r['hq']}:{r['hkv']}"), ("D", lambda r: str(r["d"])),
               ("N", lambda r: str(r["n"])), ("Nk", lambda r: str(r["nk"] or r["n"])),
               ("pattern", lambda r: r["pattern"]), ("weights", lambda r: r["wtype"])]
    rate_columns = [("clattn GFLOP/s", lambda r: fmt(r["clattn_gflops"], "{:.0f}")),
                    ("torch GFLOP/s", lambda r: fmt(r["torch_gflops"], "{:.0f}")),
                    ("GEMM % of FMA peak", lambda r: f"{r['clattn_gemm_percent_of_peak']:.0f}% "
                     f"of {r['clattn_fma_peak_gflops']:.0f}"),
                    ("clattn GEMM", lambda r: r["clattn_gemm"].split(",")[0])]
    ms_format = "{:.1f}"

    @staticmethod
    def describe(setup, r):
        return f"the attention layer, X and Y float32, B={setup['batch']}, no biases", [
            "GFLOP/s: the layer's GEMMs (2*M*N*K) and attention (4*pairs*D) / median time",
            "GEMM % of FMA peak: clattn's projections and output, against the device's float32 "
            "FMA peak measured in the same clattn process",
            "weights bf16: clattn reads them as stored (X, Y float32); torch runs in bfloat16"]


# ---------------------------------------------------------------- sparse: flex_attention


def flex_mask_mod(torch, pattern, n, args, device):
    """The allowed set of a clattn bench pattern (bench/pattern.c) as a flex_attention mask_mod
    over N queries and keys (Nq = Nk: no offset), and the block size of its block mask."""
    name, _, numbers = pattern.partition(":")
    num = int_list(numbers)
    if name == "window":
        return lambda b, h, q, k: (k >= q - num[0]) & (k <= q + num[1]), 128
    if name == "dilated":
        return lambda b, h, q, k: ((k >= q - num[0]) & (k <= q + num[1]) &
                                   ((q - k) % num[2] == 0)), 128
    if name == "longformer":  # window of W each side; the first G positions are global
        return lambda b, h, q, k: ((q - k).abs() <= num[0]) | (k < num[1]) | (q < num[1]), 128
    if name == "bigbird":  # the very layout clattn's generator makes, from `clattn pattern`
        block = num[0]
        with tempfile.TemporaryDirectory() as tmp:
            path = os.path.join(tmp, "layout.npy")
            cmd = [args.clattn, "pattern", "bigbird", "--nq", str(n), "--nk", str(n), "--block",
                   f"{block},{block}", "--window", str(num[1]), "--global", str(num[2]),
                   "--random", str(num[3]), "--seed", str(num[4] if len(num) > 4 else 0),
                   "--out", path]
            run = subprocess.run(cmd, capture_output=True, text=True)
            if run.returncode != 0:
                sys.exit(f"vs_torch: {' '.join(cmd)} failed:\n{run.stderr}")
            import numpy
            layout = torch.from_numpy(numpy.load(path).astype("bool")).to(device)
        return lambda b, h, q, k: layout[q // block, k // block], block
    sys.exit(f"vs_torch: --sparse: pattern '{pattern}' has no flex_attention mask here")


class Sparse:
    """Sparse patterns against full attention: clattn's fused path, [B][H][N][D] (bhsd), and
    torch.nn.attention.flex_attention compiled with torch.compile, with a block mask of the same
    allowed set (full: flex without a mask). Each side's fraction of its ideal speedup is its
    full time / its pattern time * density, from the same rounds."""

    name = "sparse"
    own_torch_repeat = True

    @staticmethod
    def shapes(args):
        for n in int_list(args.sizes):
            for d in int_list(args.dims):
                for hq, hkv in head_pairs(args):
                    for pattern in split_patterns(args.patterns):
                        yield {"b": args.batch, "hq": hq, "hkv": hkv, "n": n, "d": d,
                               "pattern": pattern, "args": args}

    @staticmethod
    def repeats(s, args):
        share = 1.0 if s["pattern"] == "full" else 0.03  # about a sparse pattern's density
        return repeats_for(4 * s["b"] * s["hq"] * s["n"] ** 2 * s["d"] * share / 200e9, args)

    @staticmethod
    def clattn_args(s, repeat, tmp):
        out = os.path.join(tmp, "bench.csv")
        return ["bench", "--path", "fused", "--layout", "bhsd", "--b", str(s["b"]),
                "--hq", str(s["hq"]), "--hkv", str(s["hkv"]), "--nq", str(s["n"]),
                "--d", str(s["d"]), "--pattern", s["pattern"], "--dtype", "f32",
                "--warmup", "1", "--repeat", str(repeat), "--csv", out], out

    @staticmethod
    def clattn_record(s, rows):
        row = rows[0]
        pairs = int(row["pairs"])
        return row, {"pairs": pairs, "density": pairs / (s["b"] * s["hq"] * s["n"] ** 2),
                     "clattn_kernel": row["kernel"]}

    @staticmethod
    def torch_call(torch, s, device):
        """Compiled flex_attention on contiguous [B][H][N][D] tensors (the first call compiles)."""
        from torch.nn.attention.flex_attention import create_block_mask, flex_attention
        g = torch.Generator().manual_seed(42)

        def make(h):
            return (torch.rand(s["b"], h, s["n"], s["d"], generator=g) * 2 - 1).to(device)

        q, k, v = make(s["hq"]), make(s["hkv"]), make(s["hkv"])
        torch._dynamo.reset()  # a compile of its own: past 8 masks dynamo would run flex eagerly
        flex = torch.compile(flex_attention)
        extra = {"enable_gqa": True} if s["hq"] != s["hkv"] else {}
        if s["pattern"] == "full":
            return lambda: flex(q, k, v, **extra)
        mask_mod, block = flex_mask_mod(torch, s["pattern"], s["n"], s["args"], device)
        mask = create_block_mask(mask_mod, None, None, s["n"], s["n"], device=device,
                                 BLOCK_SIZE=block)
        return lambda: flex(q, k, v, block_mask=mask, **extra)

    @staticmethod
    def fields(s):
        return {}

    @staticmethod
    def rates(r):
        return {}

    columns = [("N", lambda r: str(r["n"])), ("pattern", lambda r: r["pattern"]),
               ("density", lambda r: f"{r['density']:.4f}")]
    rate_columns = []
    ms_format = "{:.2f}"

    @staticmethod
    def describe(setup, r):
        return f"float32, B={setup['batch']}, [B][H][N][D]; torch: compiled flex_attention", [
            "speed ratio = flex_attention time / clattn time; fractions of the ideal speedup "
            "follow the table"]


def split_patterns(text):
    """clattn bench's pattern list: a name, then its numbers, comma-separated."""
    patterns = []
    for word in text.split(","):
        if word and (word[0].isdigit() or word[0] == "-") and patterns:
            patterns[-1] += "," + word
        else:
            patterns.append(word)
    return patterns


def add_fractions(records):
    """Each record's speedup over the full record of its shape and its fraction of the ideal
    (1 / density), for clattn and for torch."""
    for r in records:
        full = next((f for f in records if f["pattern"] == "full" and
                     all(f[key] == r[key] for key in ("b", "hq", "hkv", "n", "d"))), None)
        for side in ("clattn", "torch"):
            ms = f"{side}_ms_median"
            speedup = full[ms] / r[ms] if full and full[ms] and r[ms] else None
            r[f"{side}_speedup"] = speedup
            r[f"{side}_fraction_of_ideal"] = speedup and speedup * r["density"]


def print_fractions(records):
    print("\n| N | pattern | density | ideal speedup | clattn speedup | clattn fraction | "
          "flex speedup | flex fraction |")
    print("| --- | --- | --- | --- | --- | --- | --- | --- |")
    for r in records:
        print(f"| {r['n']} | {r['pattern']} | {r['density']:.4f} | {1 / r['density']:.1f}x | "
              f"{fmt(r['clattn_speedup'], '{:.1f}x')} | "
              f"{fmt(r['clattn_fraction_of_ideal'], '{:.2f}')} | "
              f"{fmt(r['torch_speedup'], '{:.1f}x')} | "
              f"{fmt(r['torch_fraction_of_ideal'], '{:.2f}')} |")


# ---------------------------------------------------------------- one shape


def device_name(stdout):
    """The device from clattn bench's "device N: NAME (PLATFORM...)" line."""
    line = next((x for x in stdout.splitlines() if x.startswith("device ")), "device ?: ?")
    return line.split(": ", 1)[1].split("; copy bandwidth")[0]


def clattn_round(mode, s, repeat, args, env):
    """One `clattn bench` process: warm-up, then `repeat` calls.
    Returns (min ms, median ms, device, fields the results keep)."""
    with tempfile.TemporaryDirectory() as tmp:
        tail, out = mode.clattn_args(s, repeat, tmp)
        cmd = [args.clattn] + tail + (["--device", args.device] if args.device else [])
        run = subprocess.run(cmd, env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"vs_torch: {' '.join(cmd)} failed:\n{run.stdout}{run.stderr}")
        with open(out, newline="") as f:
            row, kept = mode.clattn_record(s, list(csv.DictReader(f)))
        return float(row["ms_min"]), float(row["ms_median"]), device_name(run.stdout), kept


def torch_round(torch, call, repeat):
    """Warm-up, then `repeat` timed calls, each waited for on a GPU. Returns (min, median) ms."""
    sync = torch.cuda.synchronize if torch.cuda.is_initialized() else lambda: None
    times = []
    with torch.inference_mode():
        call()
        sync()
        for _ in range(repeat):
            t0 = time.perf_counter()
            call()
            sync()
            times.append((time.perf_counter() - t0) * 1e3)
    return min(times), statistics.median(times)


def measure(torch, mode, s, args, env):
    """Alternates the two sides for --rounds rounds; torch's figures are None where it has no
    counterpart (q8_0, q4_0)."""
    repeat = mode.repeats(s, args)
    call = None if args.no_torch else mode.torch_call(torch, s, args.torch_device)
    torch_repeat = repeat
    if call is not None and mode.own_torch_repeat:  # from one call after a warm-up
        torch_repeat = repeats_for(torch_round(torch, call, 1)[0] / 1e3, args)
    c_min, c_med, t_min, t_med, ratios = [], [], [], [], []
    for _ in range(args.rounds):
        lo, med, device, kept = clattn_round(mode, s, repeat, args, env)
        c_min.append(lo), c_med.append(med)
        if call is not None:
            lo, med = torch_round(torch, call, torch_repeat)
            t_min.append(lo), t_med.append(med)
            ratios.append(t_med[-1] / c_med[-1])

    def summary(f, values):
        return f(values) if values else None

    r = dict(s)
    r.update({"repeat": repeat, "rounds": args.rounds})
    if mode.own_torch_repeat:
        r["torch_repeat"] = torch_repeat if call is not None else None
    r.update(mode.fields(s))
    r.update({
        "clattn_ms_min": min(c_min), "clattn_ms_median": statistics.median(c_med),
        "torch_ms_min": summary(min, t_min), "torch_ms_median": summary(statistics.median, t_med),
        "speed_ratio": summary(statistics.median, ratios),
        "ratio_min": summary(min, ratios), "ratio_max": summary(max, ratios),
    })
    r.update(mode.rates(r))
    r.update(kept)
    return r, device


# ---------------------------------------------------------------- output


def columns(mode):
    ms = mode.ms_format
    return mode.columns + [
        ("clattn min", lambda r: fmt(r["clattn_ms_min"], ms)),
        ("clattn med", lambda r: fmt(r["clattn_ms_median"], ms)),
        ("torch min", lambda r: fmt(r["torch_ms_min"], ms)),
        ("torch med", lambda r: fmt(r["torch_ms_median"], ms)),
        ("speed ratio", lambda r: fmt(r["speed_ratio"], "{:.2f}x")),
        ("ratio range", lambda r: "-" if r["ratio_min"] is None
         else f"{r['ratio_min']:.2f}-{r['ratio_max']:.2f}"),
    ] + mode.rate_columns


def print_header(setup, mode, r):
    print(f"# {setup['date']}  clattn device: {setup['clattn_device']}")
    side = (f"torch {setup['torch']} on {setup['torch_device']} ({setup['torch_threads']} "
            "threads)" if setup["torch_threads"] else "torch: not measured (--no-torch)")
    print(f"# {side}, python {setup['python']}, cpu: {setup['cpu']}")
    shape, notes = mode.describe(setup, r)
    print(f"# {shape}, times in ms (min and median over {setup['rounds']} "
          "rounds); speed ratio = torch time / clattn time (median of the rounds' ratios)")
    for line in notes:
        print(f"# {line}")


def print_row(mode, r, first):
    cols = columns(mode)
    widths = [max(len(title), 8) for title, _ in cols]
    if first:
        print("| " + " | ".join(t.ljust(w) for (t, _), w in zip(cols, widths)) + " |")
        print("| " + " | ".join("-" * w for w in widths) + " |")
    print("| " + " | ".join(f(r).ljust(w) for (_, f), w in zip(cols, widths)) + " |", flush=True)


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
    if "--generate" in sys.argv[1:]:  # a whole model generating (bench/generate.py)
        sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
        import generate

        return generate.main(sys.argv[1:])
    args = parse_args()
    torch = None
    try:
        import torch
    except ImportError:
        if not args.no_torch:
            sys.exit("vs_torch: PyTorch is not installed in this Python; see the top of this file "
                     "(--no-torch times clattn alone)")
    if not os.access(args.clattn, os.X_OK):
        sys.exit(f"vs_torch: {args.clattn} is not an executable; run ./scripts/build.sh first")
    mode = Decode if args.decode else Layer if args.layer else Sparse if args.sparse else Prefill
    if torch:
        torch.set_num_threads(args.threads)
    env = dict(os.environ, OPENBLAS_NUM_THREADS="1")
    setup = {"date": datetime.datetime.now().isoformat(timespec="seconds"), "mode": mode.name,
             "torch": torch.__version__ if torch else "-",
             "torch_threads": torch.get_num_threads() if torch and not args.no_torch else 0,
             "python": platform.python_version(), "cpu": cpu_name(), "batch": args.batch,
             "rounds": args.rounds, "clattn_device": "?", "torch_device": args.torch_device}
    if torch and not args.no_torch and args.torch_device.startswith("cuda"):
        setup["torch_device"] = torch.cuda.get_device_name(args.torch_device)
    records = []
    for s in mode.shapes(args):
        r, setup["clattn_device"] = measure(torch, mode, s, args, env)
        if not records:
            print_header(setup, mode, r)
        r.pop("args", None)
        print_row(mode, r, not records)
        records.append(r)
    if mode is Sparse:
        add_fractions(records)
        print_fractions(records)
    if args.csv:
        write_csv(args.csv, records)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "results": records}, f, indent=1)


if __name__ == "__main__":
    main()
