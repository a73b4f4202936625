#!/usr/bin/env python3
"""A Hugging Face model generating with clattn's attention and its KV cache on every OpenCL
device in turn, checked token for token against the same model with PyTorch's sdpa.

    pip install ./python torch transformers
    python examples/generate_every_device.py                       # a small random-weight Llama
    python examples/generate_every_device.py --model PATH --prompt "Once upon a time"

With --model (a local folder or a name transformers can load; HF_HUB_OFFLINE=1 keeps it
offline), the prompt goes through the model's tokenizer and the text is printed. Without it the
model is a random-weight Llama (GQA, 4 layers) and the prompt a left-padded batch of random
token ids: nothing to read, but everything to check. For each device the script prints the
greedy tokens' agreement with sdpa (which runs first, on the CPU), the decode speed and the
bytes a decode step sends to the device (the new token's rows: the past stays there). It exits
non-zero when a device's tokens differ from sdpa's (float32: they should not).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a model is loaded from disk, never a hub

import sys
import time

import torch
import transformers

import clattn
import clattn.transformers as ct


def parse_args() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", help="a model folder or name (default: a small random-weight Llama)")
    p.add_argument("--prompt", action="append", help="a prompt (repeatable; with --model)")
    p.add_argument("--new-tokens", type=int, default=16, help="tokens to generate (>= 2)")
    return p.parse_args()


def random_model() -> tuple:
    config = transformers.LlamaConfig(
        vocab_size=512, hidden_size=128, intermediate_size=256, num_hidden_layers=4,
        num_attention_heads=8, num_key_value_heads=2, max_position_embeddings=256,
        initializer_range=0.1,
    )  # fmt: skip
    torch.manual_seed(0)
    model = transformers.LlamaForCausalLM(config).eval()
    lengths = (12, 5)
    ids = torch.zeros(len(lengths), max(lengths), dtype=torch.long)
    mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):  # left-padded with token 0
        ids[b, -n:] = torch.randint(1, config.vocab_size, (n,))
        mask[b, -n:] = 1
    return model, None, ids, mask


def loaded_model(name: str, prompts: list) -> tuple:
    tokenizer = transformers.AutoTokenizer.from_pretrained(name, padding_side="left")
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = transformers.AutoModelForCausalLM.from_pretrained(name, dtype=torch.float32).eval()
    batch = tokenizer(prompts, return_tensors="pt", padding=True)
    return model, tokenizer, batch["input_ids"], batch["attention_mask"]


def generate(model, ids, mask, new_tokens: int, cache=None):
    kwargs = {"cache": cache} if cache is not None else {}
    pad = model.generation_config.pad_token_id
    return model.generate(
        input_ids=ids, attention_mask=mask, max_new_tokens=new_tokens, min_new_tokens=new_tokens,
        do_sample=False, pad_token_id=0 if pad is None else pad, **kwargs,
    )  # fmt: skip


def on_device(model, device: clattn.Device, ids, mask, new_tokens: int) -> tuple:
    """Generates on one device: (tokens, decode tokens/s, bytes to the device a decode step)."""
    with clattn.Context(device.index) as context, clattn.using(context):
        model.set_attn_implementation("clattn")
        cache = lambda: ct.DeviceCache(model.config, max_cache_len=ids.shape[1] + new_tokens, context=context)
        generate(model, ids, mask, 2, cache())  # builds (or loads) the kernels
        runs = []
        for count in (1, new_tokens):  # their difference: new_tokens - 1 decode steps
            before, start = context.transfers(), time.perf_counter()
            tokens = generate(model, ids, mask, count, cache())
            runs.append((time.perf_counter() - start, context.transfers() - before))
    steps = new_tokens - 1
    moved = runs[1][1] - runs[0][1]
    layers = model.config.num_hidden_layers
    step_bytes = (moved.host_to_device_bytes + moved.mapped_bytes) / max(1, steps) / layers
    return tokens, steps / max(runs[1][0] - runs[0][0], 1e-9), step_bytes


def main() -> int:
    args = parse_args()
    ct.register()
    if args.model:
        model, tokenizer, ids, mask = loaded_model(args.model, args.prompt or ["Once upon a time"])
    else:
        model, tokenizer, ids, mask = random_model()
        torch.set_num_threads(1)  # its layers are too small for torch's threads to pay off
    with torch.no_grad():
        model.set_attn_implementation("sdpa")
        reference = generate(model, ids, mask, args.new_tokens)
        if tokenizer is not None:
            for text in tokenizer.batch_decode(reference[:, ids.shape[1] :], skip_special_tokens=True):
                print(f"sdpa: {text!r}")
        print(f"{'device':45} {'tokens as sdpa':>15} {'decode tok/s':>13} {'bytes to device a step and layer':>33}")
        failures = 0
        for device in clattn.devices():
            tokens, rate, step_bytes = on_device(model, device, ids, mask, args.new_tokens)
            same = torch.equal(tokens, reference)
            failures += not same
            name = f"{device.spec} {device.name}"[:45]
            print(f"{name:45} {'yes' if same else 'NO':>15} {rate:13.1f} {step_bytes:33.0f}")
            if tokenizer is not None and not same:
                print("  " + repr(tokenizer.batch_decode(tokens[:, ids.shape[1] :])))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
