"""vs_torch.py --generate: tokens per second of a Hugging Face model generating with clattn's
attention and its DeviceCache, against the same model with sdpa and transformers' default cache
(DynamicCache), in one run, prefill and decode apart.

The model is a random-weight Llama (default: hidden 1024, 8 layers, GQA 16:4 heads of 64,
intermediate 2816, vocabulary 32000; float32), one sequence (B = 1). For each context length C
in --contexts, round after round, each side:
  prefill: one forward over a prompt of C tokens into a fresh cache (logits of the last token
      only: logits_to_keep=1), timed; prefill tokens/s = C / time;
  decode: --new-tokens greedy steps (one forward each over the cache), each timed; decode
      tokens/s = 1 / median step time.
A warm-up (a 128-token prompt and 2 steps a side) comes first, untimed. Sides: "clattn"
(attn_implementation="clattn", a DeviceCache on clattn's default device) and
"sdpa" (torch.nn.functional.scaled_dot_product_attention, a DynamicCache). Both run in this
process with torch.set_num_threads(THREADS) for the projections and the MLP; clattn's attention
runs on its OpenCL device (by default PoCL, on the same cores). A round's figure is its own;
reported are the median and the range over the rounds, the ratio clattn / sdpa of the medians,
and for clattn the host-to-device bytes of a decode step (Context.transfers(): the new token's
rows, whatever C). The greedy tokens of both sides are compared and the first step where they
differ, if any, is reported (float32: they should not).

    python bench/vs_torch.py --generate                       # C = 512, 2048, 8192 (minutes)
    python bench/vs_torch.py --generate --contexts 512 --new-tokens 8 --rounds 1   # quick
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import statistics
import sys
import time

DEFAULTS = {
    "contexts": "512,2048,8192",
    "hidden": 1024,
    "layers": 8,
    "heads": "16:4",
    "intermediate": 2816,
    "vocab": 32000,
    "new_tokens": 32,
    "rounds": 3,
}


def parse_args(argv):
    p = argparse.ArgumentParser(prog="vs_torch.py --generate", description=__doc__.split("\n\n")[0])
    p.add_argument("--generate", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--contexts", default=DEFAULTS["contexts"], help="prompt lengths C")
    p.add_argument("--new-tokens", type=int, default=DEFAULTS["new_tokens"], help="decode steps")
    p.add_argument("--rounds", type=int, default=DEFAULTS["rounds"], help="alternations (>= 1)")
    p.add_argument("--hidden", type=int, default=DEFAULTS["hidden"])
    p.add_argument("--layers", type=int, default=DEFAULTS["layers"])
    p.add_argument("--heads", default=DEFAULTS["heads"], help="Hq:Hkv")
    p.add_argument("--intermediate", type=int, default=DEFAULTS["intermediate"])
    p.add_argument("--vocab", type=int, default=DEFAULTS["vocab"])
    p.add_argument("--dtype", default="float32", choices=("float32", "bfloat16"))
    p.add_argument("--threads", type=int, default=os.cpu_count(), help="torch threads")
    p.add_argument("--device", default=None, help="clattn device spec (default: clattn's)")
    p.add_argument("--csv", help="write the table as CSV")
    p.add_argument("--json", help="write the results and the setup as JSON")
    args = p.parse_args(argv)
    if args.rounds < 1 or args.new_tokens < 1:
        p.error("--rounds and --new-tokens must be at least 1")
    return args


def build_model(args, torch, transformers):
    hq, hkv = (int(x) for x in args.heads.split(":"))
    config = transformers.LlamaConfig(
        vocab_size=args.vocab,
        hidden_size=args.hidden,
        intermediate_size=args.intermediate,
        num_hidden_layers=args.layers,
        num_attention_heads=hq,
        num_key_value_heads=hkv,
        max_position_embeddings=max(int(c) for c in args.contexts.split(",")) + args.new_tokens + 1,
    )
    torch.manual_seed(0)
    return transformers.LlamaForCausalLM(config).to(getattr(torch, args.dtype)).eval()


def run_side(model, side, prompt, args, torch, transformers, ct, clattn):
    """One prefill and the decode steps; returns (prefill s, [step s], tokens, bytes a step)."""
    model.set_attn_implementation("clattn" if side == "clattn" else "sdpa")
    context = prompt.shape[1]
    if side == "clattn":
        cache = ct.DeviceCache(model.config, max_cache_len=context + args.new_tokens + 1)
    else:
        cache = transformers.DynamicCache(config=model.config)
    steps, tokens, step_bytes = [], [], []
    with torch.inference_mode():
        t0 = time.perf_counter()
        out = model(input_ids=prompt, cache=cache, use_cache=True, logits_to_keep=1)
        prefill = time.perf_counter() - t0
        token = out.logits[:, -1:].argmax(-1)
        for _ in range(args.new_tokens):
            tokens.append(int(token))
            before = clattn.default_context().transfers()
            t0 = time.perf_counter()
            out = model(input_ids=token, cache=out.cache, use_cache=True, logits_to_keep=1)
            steps.append(time.perf_counter() - t0)
            moved = clattn.default_context().transfers() - before
            step_bytes.append(moved.host_to_device_bytes + moved.mapped_bytes)
            token = out.logits[:, -1:].argmax(-1)
    return prefill, steps, tokens, step_bytes


def measure(model, context, args, torch, transformers, ct, clattn):
    generator = torch.Generator().manual_seed(context)
    prompt = torch.randint(0, args.vocab, (1, context), generator=generator)
    rounds = {"clattn": [], "sdpa": []}
    for _ in range(args.rounds):
        for side in rounds:
            rounds[side].append(run_side(model, side, prompt, args, torch, transformers, ct, clattn))
    record = {"context": context, "new_tokens": args.new_tokens, "rounds": args.rounds}
    for side, runs in rounds.items():
        prefill_rates = [context / r[0] for r in runs]
        decode_rates = [1 / statistics.median(r[1]) for r in runs]
        record[f"{side}_prefill_tok_s"] = statistics.median(prefill_rates)
        record[f"{side}_prefill_range"] = [min(prefill_rates), max(prefill_rates)]
        record[f"{side}_decode_tok_s"] = statistics.median(decode_rates)
        record[f"{side}_decode_range"] = [min(decode_rates), max(decode_rates)]
    record["prefill_ratio"] = record["clattn_prefill_tok_s"] / record["sdpa_prefill_tok_s"]
    record["decode_ratio"] = record["clattn_decode_tok_s"] / record["sdpa_decode_tok_s"]
    record["clattn_step_bytes"] = statistics.median(rounds["clattn"][0][3])
    ours, theirs = rounds["clattn"][0][2], rounds["sdpa"][0][2]
    record["first_token_difference"] = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    return record


def _rate(record, key, digits):
    low, high = record[f"{key}_range"]
    return f"{record[key + '_tok_s']:.{digits}f} ({low:.{digits}f}-{high:.{digits}f})"


def _first_difference(record):
    step = record["first_token_difference"]
    return "none" if step is None else str(step)


COLUMNS = [
    ("C", lambda r: str(r["context"])),
    ("prefill clattn tok/s", lambda r: _rate(r, "clattn_prefill", 0)),
    ("prefill sdpa tok/s", lambda r: _rate(r, "sdpa_prefill", 0)),
    ("prefill ratio", lambda r: f"{r['prefill_ratio']:.2f}x"),
    ("decode clattn tok/s", lambda r: _rate(r, "clattn_decode", 2)),
    ("decode sdpa tok/s", lambda r: _rate(r, "sdpa_decode", 2)),
    ("decode ratio", lambda r: f"{r['decode_ratio']:.2f}x"),
    ("clattn bytes to device a step", lambda r: f"{r['clattn_step_bytes']:.0f}"),
    ("tokens differ from step", lambda r: _first_difference(r)),
]


def print_row(record, first):
    if first:
        print("| " + " | ".join(title for title, _ in COLUMNS) + " |")
        print("|" + "|".join("---" for _ in COLUMNS) + "|")
    print("| " + " | ".join(f(record) for _, f in COLUMNS) + " |", flush=True)


def main(argv):
    args = parse_args(argv)
    try:
        import torch
        import transformers
    except ImportError as error:
        sys.exit(f"vs_torch --generate: needs torch and transformers ({error})")
    if args.device:
        os.environ["CLATTN_DEVICE"] = args.device
    import clattn
    import clattn.transformers as ct

    ct.register()
    torch.set_num_threads(args.threads)
    model = build_model(args, torch, transformers)
    warm_up = torch.randint(0, args.vocab, (1, 128), generator=torch.Generator().manual_seed(1))
    for side in ("clattn", "sdpa"):  # kernels built (or loaded from the cache), threads started
        run_side(model, side, warm_up, argparse.Namespace(new_tokens=2), torch, transformers, ct, clattn)
    device = clattn.default_context().device
    setup = {
        "date": datetime.datetime.now().isoformat(timespec="seconds"),
        "mode": "generate",
        "model": f"Llama hidden {args.hidden}, {args.layers} layers, heads {args.heads}, "
        f"intermediate {args.intermediate}, vocab {args.vocab}, {args.dtype}, B = 1",
        "clattn_device": f"{device.name} ({device.platform_name})",
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "python": platform.python_version(),
    }
    print(f"# {setup['date']}  {setup['model']}")
    print(f"# clattn {clattn.__version__} on {setup['clattn_device']}; torch {setup['torch']} "
          f"({setup['torch_threads']} threads), transformers {setup['transformers']}")
    print(f"# {args.new_tokens} decode steps after each prompt; median over {args.rounds} rounds "
          "(range in brackets); ratio = clattn / sdpa")
    records = []
    for context in (int(c) for c in args.contexts.split(",")):
        record = measure(model, context, args, torch, transformers, ct, clattn)
        print_row(record, not records)
        records.append(record)
    if args.csv:
        import csv

        with open(args.csv, "w", newline="") as f:
            writer = csv.DictWriter(f, fieldnames=list(records[0]))
            writer.writeheader()
            writer.writerows(records)
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"setup": setup, "results": records}, f, indent=1)


if __name__ == "__main__":
    main(sys.argv[1:])
