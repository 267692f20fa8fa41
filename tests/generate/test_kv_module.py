"""The torch KV-cache wrapper: decode through its buffers equals a full forward over the same tokens."""

import numpy as np
import pytest
import torch

from mlbench.generate.kv_module import (
    MASKED,
    KVCacheLM,
    NotACausalLM,
    cache_shape,
    causal_mask,
    eager_step,
    greedy,
    step_inputs,
    tiny_causal_lm,
)


@pytest.mark.parametrize("style", ["llama", "gpt2"])
def test_decode_with_the_cache_equals_a_full_forward(style):
    model = tiny_causal_lm(style)
    wrapper = KVCacheLM(model, context=32)
    prompt = [3, 5, 7, 9, 11]
    run = greedy(eager_step(wrapper), eager_step(wrapper), prompt, new_tokens=6)
    sequence = prompt + run.tokens
    with torch.no_grad():
        full = model(input_ids=torch.tensor([sequence[:-1]])).logits[0].numpy()
    for i, logits in enumerate(run.logits):
        expected = full[len(prompt) - 1 + i]
        assert np.abs(logits - expected).max() < 1e-4
        assert run.tokens[i] == int(np.argmax(expected))


def test_the_cache_holds_the_written_positions_only():
    wrapper = KVCacheLM(tiny_causal_lm("llama"), context=16)
    step = eager_step(wrapper)
    step(*step_inputs([1, 2, 3], 0))
    step(*step_inputs([4], 3))
    assert wrapper.key_cache.shape == (2, 1, 2, 16, 8)  # layers, batch, kv heads (GQA), context, head_dim
    assert torch.count_nonzero(wrapper.key_cache[:, :, :, :4]) > 0
    assert torch.count_nonzero(wrapper.key_cache[:, :, :, 4:]) == 0
    wrapper.reset()
    assert torch.count_nonzero(wrapper.key_cache) == 0


def test_a_prompt_prefilled_in_two_chunks_matches_one_prefill():
    wrapper = KVCacheLM(tiny_causal_lm("gpt2"), context=32)
    step = eager_step(wrapper)
    whole = step(*step_inputs([5, 6, 7, 8], 0))[0, -1]
    wrapper.reset()
    step(*step_inputs([5, 6], 0))
    chunked = step(*step_inputs([7, 8], 2))[0, -1]
    assert np.abs(whole - chunked).max() < 1e-4


def test_causal_mask_by_hand():
    mask = causal_mask(2, 3)
    assert mask.shape == (1, 1, 2, 5)
    assert mask[0, 0].tolist() == [[0, 0, 0, 0, MASKED], [0, 0, 0, 0, 0]]


def test_cache_geometry_and_bytes():
    geometry = cache_shape(tiny_causal_lm("llama").config, 64)
    assert geometry.shape == (2, 1, 2, 64, 8)
    assert geometry.bytes(2) == 2 * 2 * 2 * 64 * 8 * 2


def test_a_model_without_an_lm_head_is_refused_in_one_line():
    import transformers

    encoder = transformers.BertModel(transformers.BertConfig(hidden_size=32, num_hidden_layers=1,
                                                             num_attention_heads=2, intermediate_size=64,
                                                             vocab_size=100))
    with pytest.raises(NotACausalLM) as err:
        KVCacheLM(encoder, context=16)
    assert str(err.value) == ("BertModel is not a causal language model (no LM head), "
                              "so it has no key/value cache to generate with")


def test_fused_attention_decodes_as_eager_attention_does():
    model = tiny_causal_lm("llama")
    prompt = [3, 5, 7, 9, 11]
    runs = {}
    for attention in ("eager", "sdpa"):
        wrapper = KVCacheLM(model, context=32, attention=attention)
        runs[attention] = greedy(eager_step(wrapper), eager_step(wrapper), prompt, new_tokens=6)
    assert runs["sdpa"].tokens == runs["eager"].tokens
    assert max(np.abs(a - b).max() for a, b in zip(runs["sdpa"].logits, runs["eager"].logits)) < 1e-4
    with pytest.raises(ValueError, match="attention must be one of eager, sdpa, not 'flash'"):
        KVCacheLM(model, context=32, attention="flash")
