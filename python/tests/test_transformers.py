"""clattn.transformers against transformers' own sdpa, on small random-weight models: greedy
generation gives the same tokens and logits (Llama with GQA, Mistral with a sliding window,
Qwen2 with full and sliding layers, GPT-2 with MHA; float32 and bfloat16; a left-padded batch of
prompts of different lengths; with the DeviceCache and with transformers' own cache), a BERT
encoder gives the same hidden states on a padded batch, the masks are clattn's (never a dense
[B, 1, L, S] tensor) and dropping them would change the result, the arguments clattn cannot
compute are refused by name, Gemma 2's soft-capping and gpt-oss's sinks generate as eager does,
a decoding step's host-to-device traffic over the DeviceCache does not grow with the context,
and the DeviceCache survives a refused call, takes chunked prefill after all-padding chunks and
refuses layers that share keys. Skipped, saying why, where transformers is not installed."""

from __future__ import annotations

from typing import Any, Callable, Dict, List

import pytest

import clattn

transformers = pytest.importorskip(
    "transformers", reason="transformers is not installed (optional: clattn.transformers needs it)"
)
torch = pytest.importorskip("torch", reason="torch is not installed")

import clattn.transformers as ct  # noqa: E402

ct.register()

VOCAB, NEW_TOKENS = 96, 10
# Tolerances of the logits against sdpa's: float32 computes the same sums in another order;
# bfloat16 rounds every layer's activations (a tie within this is allowed to pick either token).
LOGITS_ATOL = {"float32": 2e-4, "bfloat16": 0.25}
PROMPT_LENGTHS = (11, 7, 4)  # left-padded to 11


def _llama() -> Any:
    config = transformers.LlamaConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        initializer_range=0.2,
    )  # fmt: skip
    return transformers.LlamaForCausalLM(config)


def _mistral() -> Any:
    config = transformers.MistralConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=128,
        sliding_window=5, initializer_range=0.2,
    )  # fmt: skip
    return transformers.MistralForCausalLM(config)


def _qwen2() -> Any:
    config = transformers.Qwen2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=1, max_position_embeddings=128,
        use_sliding_window=True, sliding_window=6, max_window_layers=1, initializer_range=0.2,
    )  # fmt: skip
    return transformers.Qwen2ForCausalLM(config)


def _gpt2() -> Any:
    config = transformers.GPT2Config(
        vocab_size=VOCAB, n_embd=64, n_layer=2, n_head=4, n_positions=128, initializer_range=0.2
    )
    return transformers.GPT2LMHeadModel(config)


DECODERS: Dict[str, Callable[[], Any]] = {
    "llama_gqa": _llama,
    "mistral_sliding_window": _mistral,
    "qwen2_full_and_sliding": _qwen2,
    "gpt2_mha": _gpt2,
}


def _model(family: str, dtype_name: str) -> Any:
    torch.manual_seed(7)
    return DECODERS[family]().to(getattr(torch, dtype_name)).eval()


def _prompts(lengths=PROMPT_LENGTHS):
    """input_ids [B, max] left-padded with token 0, and the 2-D attention mask."""
    generator = torch.Generator().manual_seed(3)
    width = max(lengths)
    ids = torch.zeros(len(lengths), width, dtype=torch.long)
    attention_mask = torch.zeros_like(ids)
    for b, n in enumerate(lengths):
        ids[b, width - n :] = torch.randint(1, VOCAB, (n,), generator=generator)
        attention_mask[b, width - n :] = 1
    return ids, attention_mask


def _generate(model: Any, implementation: str, ids, attention_mask, **kwargs: Any) -> Any:
    model.set_attn_implementation(implementation)
    return model.generate(
        input_ids=ids, attention_mask=attention_mask, max_new_tokens=NEW_TOKENS, do_sample=False,
        output_logits=True, return_dict_in_generate=True, pad_token_id=0, **kwargs,
    )  # fmt: skip


def _assert_same_generation(reference: Any, got: Any, atol: float) -> int:
    """Tokens equal and logits within atol, step by step, for each sequence until it meets a tie
    (reference's best two logits within 2 atol), where either token is right and the sequences
    part. @return the tokens compared."""
    width = reference.sequences.shape[1] - len(reference.logits)
    compared, parted = 0, set()
    for step, (ref_logits, got_logits) in enumerate(zip(reference.logits, got.logits)):
        for b in range(ref_logits.shape[0]):
            if b in parted:
                continue
            error = (ref_logits[b].float() - got_logits[b].float()).abs().max().item()
            assert error <= atol, f"step {step}, sequence {b}: logits differ by {error} (> {atol})"
            want, have = reference.sequences[b, width + step], got.sequences[b, width + step]
            if want != have:
                top = ref_logits[b].float().topk(2).values
                margin = (top[0] - top[1]).item()
                assert margin <= 2 * atol, f"step {step}, sequence {b}: token {have}, not {want} (margin {margin})"
                parted.add(b)
            else:
                compared += 1
    return compared


@pytest.fixture(scope="module")
def context():
    with clattn.Context() as ctx, clattn.using(ctx):
        yield ctx


@pytest.mark.parametrize("cache", ["device_cache", "transformers_cache"])
@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
@pytest.mark.parametrize("family", list(DECODERS))
def test_greedy_generation_equals_sdpa(context, family: str, dtype_name: str, cache: str) -> None:
    model = _model(family, dtype_name)
    ids, attention_mask = _prompts()
    with torch.no_grad():
        reference = _generate(model, "sdpa", ids, attention_mask)
        kwargs = {"cache": ct.DeviceCache(model.config, max_cache_len=32)} if cache == "device_cache" else {}
        got = _generate(model, "clattn", ids, attention_mask, **kwargs)
    compared = _assert_same_generation(reference, got, LOGITS_ATOL[dtype_name])
    assert compared >= (len(PROMPT_LENGTHS) * NEW_TOKENS) // 2, f"only {compared} tokens before ties"
    if dtype_name == "float32":
        assert torch.equal(reference.sequences, got.sequences)


def test_a_padded_sequence_generates_as_it_does_alone(context) -> None:
    """The shortest prompt of the left-padded batch gives, over the DeviceCache (which stores no
    padding), the tokens it gives alone, without padding."""
    model = _model("llama_gqa", "float32")
    ids, attention_mask = _prompts()
    alone_ids = ids[-1:, ids.shape[1] - PROMPT_LENGTHS[-1] :]
    alone_mask = torch.ones_like(alone_ids)
    with torch.no_grad():
        batch = _generate(model, "clattn", ids, attention_mask, cache=ct.DeviceCache(model.config, max_cache_len=32))
        alone = _generate(model, "clattn", alone_ids, alone_mask, cache=ct.DeviceCache(model.config, max_cache_len=32))
    assert torch.equal(batch.sequences[-1, ids.shape[1] :], alone.sequences[0, alone_ids.shape[1] :])
    assert (batch.logits[0][-1] - alone.logits[0][0]).abs().max().item() <= LOGITS_ATOL["float32"]


def test_dropping_the_mask_would_change_the_tokens(context, monkeypatch) -> None:
    """The issue's first attempt: the attention function registered without the mask function,
    so transformers builds no mask and the padding is dropped. On this batch that gives other
    logits, so the generation tests above would fail without the mask."""
    model = _model("llama_gqa", "float32")
    ids, attention_mask = _prompts()
    with torch.no_grad():
        reference = _generate(model, "sdpa", ids, attention_mask)
        monkeypatch.delitem(transformers.AttentionMaskInterface._global_mapping, "clattn")
        unmasked = _generate(model, "clattn", ids, attention_mask)
    error = (reference.logits[0][1:] - unmasked.logits[0][1:]).abs().max().item()
    assert error > 100 * LOGITS_ATOL["float32"], f"dropping the padding changed the logits by only {error}"


def test_masks_are_clattns_own_never_dense(context, monkeypatch) -> None:
    """Causal, padding and sliding-window masks reach clattn as its causal and window masks and a
    per-key bias row [B, 1, 1, S] (broadcast over heads and queries), never [B, 1, L, S]."""
    biases: List[Any] = []
    calls: List[Dict[str, Any]] = []
    original = ct._attention.attention

    def spy(*args: Any, **kwargs: Any) -> Any:
        calls.append(kwargs)
        if kwargs.get("bias") is not None:
            biases.append(tuple(kwargs["bias"].shape))
        return original(*args, **kwargs)

    monkeypatch.setattr(ct._attention, "attention", spy)
    model = _model("mistral_sliding_window", "float32")
    ids, attention_mask = _prompts()
    with torch.no_grad():
        _generate(model, "clattn", ids, attention_mask)
    assert calls and all(call["causal"] and call["window"][0] == 4 for call in calls)  # w = 5
    assert biases and all(shape[1:3] == (1, 1) for shape in biases), biases
    made = ct.mask(3, 11, 11, mask_function=transformers.masking_utils.causal_mask_function,
                   attention_mask=attention_mask.bool())  # fmt: skip
    assert made.dense is None and made.causal and made.padding is not None


def test_an_unknown_mask_function_falls_back_to_a_dense_bias(context) -> None:
    def checkerboard(batch_idx: Any, head_idx: Any, q_idx: Any, kv_idx: Any) -> Any:
        return (q_idx + kv_idx) % 2 == 0

    made = ct.mask(1, 4, 4, mask_function=checkerboard)
    assert made.dense is not None and tuple(made.dense.shape) == (1, 1, 4, 4) and "checkerboard" in made.dense_reason
    q = torch.randn(1, 2, 4, 16)
    out, _ = ct.attention_forward(torch.nn.Module(), q, q, q, made)
    expected = torch.nn.functional.scaled_dot_product_attention(q, q, q, attn_mask=made.dense)
    assert (out.transpose(1, 2) - expected).abs().max().item() < 1e-5


@pytest.mark.parametrize("dtype_name", ["float32", "bfloat16"])
def test_bert_encoder_on_a_padded_batch_equals_sdpa(context, dtype_name: str) -> None:
    """Bidirectional attention with (right) padding: the hidden states of the real tokens."""
    config = transformers.BertConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, max_position_embeddings=64,
    )  # fmt: skip
    torch.manual_seed(5)
    model = transformers.BertModel(config).to(getattr(torch, dtype_name)).eval()
    ids, attention_mask = _prompts()
    ids, attention_mask = ids.flip(1), attention_mask.flip(1)  # right padding, as BERT's tokenizers
    outputs = {}
    with torch.no_grad():
        for implementation in ("sdpa", "clattn"):
            model.set_attn_implementation(implementation)
            outputs[implementation] = model(input_ids=ids, attention_mask=attention_mask).last_hidden_state
    real = attention_mask.bool()
    error = (outputs["sdpa"][real].float() - outputs["clattn"][real].float()).abs().max().item()
    assert error <= {"float32": 1e-4, "bfloat16": 0.1}[dtype_name], error


def test_arguments_clattn_cannot_compute_are_refused_by_name(context) -> None:
    model = _model("llama_gqa", "float32")
    model.set_attn_implementation("clattn")
    ids, attention_mask = _prompts()
    with torch.no_grad(), pytest.raises(clattn.Error, match="output_attentions"):
        model(input_ids=ids, attention_mask=attention_mask, output_attentions=True)
    for module in model.modules():
        if hasattr(module, "attention_dropout"):
            module.attention_dropout = 0.1
    model.train()
    with torch.no_grad(), pytest.raises(clattn.Error, match="dropout=0.1 .*training"):
        model(input_ids=ids, attention_mask=attention_mask)
    q = torch.randn(1, 2, 3, 16)
    with pytest.raises(clattn.Error, match="sinks has shape"):  # passed on, checked by clattn
        ct.attention_forward(torch.nn.Module(), q, q, q, None, s_aux=torch.ones(3))
    ct.attention_forward(torch.nn.Module(), q, q, q, None, softcap=None)  # Gemma 2 without it


def _gemma2() -> Any:
    config = transformers.Gemma2Config(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        sliding_window=5, attn_logit_softcapping=0.5, final_logit_softcapping=30.0,
        query_pre_attn_scalar=16, initializer_range=0.2,
    )  # fmt: skip
    return transformers.Gemma2ForCausalLM(config)


def _gpt_oss() -> Any:
    config = transformers.GptOssConfig(
        vocab_size=VOCAB, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
        num_attention_heads=4, num_key_value_heads=2, head_dim=16, max_position_embeddings=128,
        sliding_window=5, num_local_experts=4, num_experts_per_tok=2, initializer_range=0.2,
    )  # fmt: skip
    model = transformers.GptOssForCausalLM(config)
    for module in model.modules():  # sinks of either sign and of some weight
        if hasattr(module, "sinks"):
            module.sinks.data = torch.linspace(-1.5, 2.5, module.sinks.numel())
    return model


@pytest.mark.parametrize("cache", ["device_cache", "transformers_cache"])
@pytest.mark.parametrize("family", ["gemma2_softcap", "gpt_oss_sinks"])
def test_soft_capping_and_sinks_generate_as_eager(context, family: str, cache: str) -> None:
    """Gemma 2 (soft-capping, 0.5 so that it bites) and gpt-oss (sinks): the same tokens and
    logits as transformers' eager attention, the implementation that computes them."""
    torch.manual_seed(7)
    model = {"gemma2_softcap": _gemma2, "gpt_oss_sinks": _gpt_oss}[family]().float().eval()
    ids, attention_mask = _prompts()
    with torch.no_grad():
        reference = _generate(model, "eager", ids, attention_mask)
        kwargs = {"cache": ct.DeviceCache(model.config, max_cache_len=32)} if cache == "device_cache" else {}
        got = _generate(model, "clattn", ids, attention_mask, **kwargs)
        without = None
        if family == "gemma2_softcap":  # the same model uncapped: the cap must matter
            for module in model.modules():
                if hasattr(module, "attn_logit_softcapping"):
                    module.attn_logit_softcapping = None
            without = _generate(model, "eager", ids, attention_mask)
    compared = _assert_same_generation(reference, got, LOGITS_ATOL["float32"])
    assert compared >= (len(PROMPT_LENGTHS) * NEW_TOKENS) // 2, f"only {compared} tokens before ties"
    assert torch.equal(reference.sequences, got.sequences)
    if without is not None:
        gap = max((a - b).abs().max().item() for a, b in zip(reference.logits, without.logits))
        assert gap > 1e-3, f"soft-capping changed the logits by {gap} only"


def _decode_traffic(model: Any, cache: Any, context_length: int) -> clattn.Transfers:
    """The host-device traffic of one decoding step after a prompt of context_length tokens."""
    ids = torch.randint(1, VOCAB, (1, context_length), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        out = model(input_ids=ids, cache=cache, use_cache=True)
        step = out.logits[:, -1:].argmax(-1)
        before = clattn.default_context().transfers()
        model(input_ids=step, cache=out.cache, use_cache=True)
        return clattn.default_context().transfers() - before


def test_a_decoding_steps_traffic_does_not_grow_with_the_context(context) -> None:
    """Over the DeviceCache a step sends the new token's K, V and Q rows and the lengths: the
    same bytes after 16 and after 96 tokens. Over transformers' own cache the whole past goes to
    the device at each step (mapped on a CPU device, copied on a GPU), and grows."""
    model = _model("llama_gqa", "float32")
    model.set_attn_implementation("clattn")
    # (a step that starts a page also sends the block table: 90 and 16 tokens start none)
    short = _decode_traffic(model, ct.DeviceCache(model.config, max_cache_len=128, page_size=32), 16)
    long = _decode_traffic(model, ct.DeviceCache(model.config, max_cache_len=128, page_size=32), 90)
    assert long.host_to_device_bytes + long.mapped_bytes == short.host_to_device_bytes + short.mapped_bytes
    assert long.device_to_host_bytes == short.device_to_host_bytes
    per_layer = 2 * 2 * 16 * 4 + 4 * 16 * 4  # new K and V rows (2 kv heads, dim 16), Q (4 heads)
    assert long.host_to_device_bytes + long.mapped_bytes < 4 * model.config.num_hidden_layers * per_layer
    grows_short = _decode_traffic(model, transformers.DynamicCache(config=model.config), 16)
    grows_long = _decode_traffic(model, transformers.DynamicCache(config=model.config), 90)
    moved = [t.host_to_device_bytes + t.mapped_bytes for t in (grows_short, grows_long)]
    assert moved[1] - moved[0] >= 2 * 2 * 2 * 16 * 4 * 74  # K and V of 74 more tokens, 2 layers


def test_the_device_cache_refuses_what_it_cannot_do(context) -> None:
    model = _model("llama_gqa", "float32")
    model.set_attn_implementation("clattn")
    ids, attention_mask = _prompts()
    with torch.no_grad(), pytest.raises(clattn.Error, match="max_cache_len=8"):
        model(input_ids=ids, attention_mask=attention_mask, cache=ct.DeviceCache(model.config, max_cache_len=8))
    with torch.no_grad(), pytest.raises(clattn.Error, match="not supported"):
        cache = ct.DeviceCache(model.config, max_cache_len=32)
        _generate(model, "clattn", ids, attention_mask, num_beams=2, cache=cache)


def test_a_refused_step_leaves_the_device_cache_counting_what_it_stored(context) -> None:
    """A step the cache refuses (it would pass max_cache_len) raises, and the cache still counts
    the tokens it holds (it counted the refused ones too), so the next step goes on at the right
    positions."""
    model = _model("llama_gqa", "float32")
    model.set_attn_implementation("clattn")
    ids = torch.randint(1, VOCAB, (1, 6), generator=torch.Generator().manual_seed(5))
    cache = ct.DeviceCache(model.config, max_cache_len=8, page_size=8)
    with torch.no_grad():
        model(input_ids=ids, cache=cache, use_cache=True)
        with pytest.raises(clattn.Error, match="is full"):
            model(input_ids=ids[:, :3], cache=cache, use_cache=True)
        assert cache.get_seq_length() == 6
        model(input_ids=ids[:, :2], cache=cache, use_cache=True)
    assert cache.get_seq_length() == 8
    assert list(cache.layers[0].kv.lengths) == [8]


def test_the_device_cache_resets_and_crops(context) -> None:
    """reset() empties every layer (pages back to the pool), so a second generation over the same
    cache gives the first's tokens; crop() forgets generated tokens (assisted decoding)."""
    model = _model("llama_gqa", "float32")
    ids, attention_mask = _prompts()
    cache = ct.DeviceCache(model.config, max_cache_len=32, page_size=8)
    with torch.no_grad():
        first = _generate(model, "clattn", ids, attention_mask, cache=cache)
        assert cache.get_seq_length() == ids.shape[1] + NEW_TOKENS - 1
        cache.crop(-3)
        assert cache.get_seq_length() == ids.shape[1] + NEW_TOKENS - 4
        assert list(cache.layers[0].kv.lengths) == [n + NEW_TOKENS - 4 for n in PROMPT_LENGTHS]
        cache.reset()
        assert cache.get_seq_length() == 0 and not cache.layers[0].kv.lengths.any()
        second = _generate(model, "clattn", ids, attention_mask, cache=cache)
    assert torch.equal(first.sequences, second.sequences)


def test_transformers_static_cache_with_clattns_attention(context) -> None:
    """transformers' StaticCache: keys padded to max_cache_len, the queries in the middle of
    them, and the masks made ahead of the forward (a compileable cache). clattn's attention takes
    the keys up to the last query's position and gives sdpa's tokens."""
    model = _model("mistral_sliding_window", "float32")
    ids, attention_mask = _prompts()
    with torch.no_grad():
        reference = _generate(model, "sdpa", ids, attention_mask, cache_implementation="static")
        got = _generate(model, "clattn", ids, attention_mask, cache_implementation="static")
    _assert_same_generation(reference, got, LOGITS_ATOL["float32"])
    assert torch.equal(reference.sequences, got.sequences)


def test_a_refused_call_leaves_the_device_cache_as_it_was(context) -> None:
    """A call refused before the attention stores anything (output_attentions) leaves the layer
    without the update's rows, so the same call without it runs on the same cache."""
    model = _model("llama_gqa", "float32")
    model.set_attn_implementation("clattn")
    ids, attention_mask = _prompts()
    cache = ct.DeviceCache(model.config, max_cache_len=32)
    with torch.no_grad():
        with pytest.raises(clattn.Error, match="output_attentions"):
            model(input_ids=ids, attention_mask=attention_mask, cache=cache, output_attentions=True)
        assert cache.get_seq_length() == 0
        model(input_ids=ids, attention_mask=attention_mask, cache=cache, use_cache=True)
    assert cache.get_seq_length() == ids.shape[1]


def test_an_integer_mask_is_refused_not_added(context) -> None:
    """sdpa refuses a 0/1 integer mask; added as a float bias it would mask nothing."""
    q = torch.randn(1, 2, 3, 16)
    with pytest.raises(clattn.Error, match="attention_mask is torch.int64"):
        ct.attention_forward(torch.nn.Module(), q, q, q, torch.ones(1, 1, 3, 3, dtype=torch.long))


def test_chunked_prefill_whose_first_chunk_is_all_padding(context) -> None:
    """A prompt padded far on the left and prefilled in chunks: the first chunk stores nothing,
    and the next starts past position 0 (it took the empty cache's shortcut, which refused it)."""
    model = _model("llama_gqa", "float32")
    ids, attention_mask = _prompts((4, 3))
    pad = torch.zeros(2, 5, dtype=torch.long)
    ids, attention_mask = torch.cat([pad, ids], 1), torch.cat([pad, attention_mask], 1)
    with torch.no_grad():
        reference = _generate(model, "sdpa", ids, attention_mask, prefill_chunk_size=4)
        cache = ct.DeviceCache(model.config, max_cache_len=32)
        got = _generate(model, "clattn", ids, attention_mask, prefill_chunk_size=4, cache=cache)
    _assert_same_generation(reference, got, LOGITS_ATOL["float32"])
    assert torch.equal(reference.sequences, got.sequences)


@pytest.mark.parametrize("sharing", ["kv_sharing_modes", "num_kv_shared_layers"])
def test_layers_that_reuse_another_layers_keys_are_refused(context, sharing: str) -> None:
    config = _model("llama_gqa", "float32").config
    if sharing == "kv_sharing_modes":
        config.kv_sharing_modes = [None] * (config.num_hidden_layers - 1) + ["reuse"]
    else:
        config.num_kv_shared_layers = 1
    layer = config.num_hidden_layers - 1
    with pytest.raises(clattn.Error, match=f"layer {layer} reuses another layer's keys"):
        ct.DeviceCache(config, max_cache_len=32)
