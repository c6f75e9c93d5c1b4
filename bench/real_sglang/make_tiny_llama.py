#!/usr/bin/env python3
"""Write a tiny random-weight LlamaForCausalLM that SGLang can serve, without downloading anything.

    python3 make_tiny_llama.py OUTDIR

Needs only numpy, safetensors and tokenizers (all on the GPU machine). Writes config.json,
generation_config.json, model.safetensors (float32 on disk, served as bfloat16), tokenizer.json
(WordLevel, whitespace pre-tokenizer), tokenizer_config.json (with a chat template),
special_tokens_map.json.

Greedy decoding never picks a special token (so never EOS): every non-special lm_head row w has
its negation -w beside it, so max logit = max |h.w| > 0, while special rows are 0 (logit 0).
A temperature-0 request therefore always runs to max_tokens and each step yields a word.
"""

import json
import os
import sys

import numpy as np
from safetensors.numpy import save_file
from tokenizers import Tokenizer, models, normalizers, pre_tokenizers

HIDDEN, INTER, LAYERS, HEADS, KV_HEADS = 128, 256, 2, 2, 2  # head_dim 64: SGLang's fused rope path
SPECIAL = ["<unk>", "<s>", "</s>", "<pad>"]
WORDS = (
    "the a of and to in is it that for on with as at by from this be are was an or not "
    "explain few paragraphs how tensor parallelism splits transformer layer across gpus "
    "capital city france paris model token tokens decode prefill batch cache memory node "
    "server request user assistant system hello world test one two three four five six seven "
    "eight nine ten"
).split()
PUNCT = [".", ",", ":", "?", "!", "'", "-", "(", ")"]


def main(out):
    os.makedirs(out, exist_ok=True)
    words = list(dict.fromkeys(WORDS + PUNCT + ["w%d" % i for i in range(1000)]))
    # vocab: 4 special tokens, then an even number of ordinary tokens (pairs +w/-w in lm_head)
    if len(words) % 2:
        words.append("w_extra")
    vocab = {t: i for i, t in enumerate(SPECIAL + words)}
    V = len(vocab)

    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="<unk>"))
    tok.normalizer = normalizers.Lowercase()
    tok.pre_tokenizer = pre_tokenizers.Whitespace()  # \w+|[^\w\s]+ ; decode joins with spaces
    tok.add_special_tokens(SPECIAL)
    tok.save(os.path.join(out, "tokenizer.json"))

    chat_template = (
        "{% for m in messages %}{{ m['role'] }}: {{ m['content'] if m['content'] is string "
        "else m['content'] | map(attribute='text') | join(' ') }}\n{% endfor %}"
        "{% if add_generation_prompt %}assistant:{% endif %}"
    )
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": "<s>",
                "eos_token": "</s>",
                "unk_token": "<unk>",
                "pad_token": "<pad>",
                "add_bos_token": False,
                "add_eos_token": False,
                "model_max_length": 2048,
                "clean_up_tokenization_spaces": False,
                "chat_template": chat_template,
            },
            f,
            indent=1,
        )
    with open(os.path.join(out, "special_tokens_map.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"}, f)

    config = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": HIDDEN,
        "intermediate_size": INTER,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": HEADS,
        "num_key_value_heads": KV_HEADS,
        "head_dim": HIDDEN // HEADS,
        "hidden_act": "silu",
        "max_position_embeddings": 2048,
        "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0,
        "rope_scaling": None,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000.0},
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "vocab_size": V,
        "bos_token_id": vocab["<s>"],
        "eos_token_id": vocab["</s>"],
        "pad_token_id": vocab["<pad>"],
        "torch_dtype": "bfloat16",
        "dtype": "bfloat16",
        "initializer_range": 0.02,
        "use_cache": True,
    }
    with open(os.path.join(out, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    with open(os.path.join(out, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": vocab["<s>"], "eos_token_id": vocab["</s>"], "do_sample": False}, f)

    rng = np.random.default_rng(0)
    D = HIDDEN // HEADS

    def w(*shape, scale=0.05):
        return (rng.standard_normal(shape) * scale).astype(np.float32)

    t = {
        "model.embed_tokens.weight": w(V, HIDDEN, scale=1.0),
        "model.norm.weight": np.ones(HIDDEN, np.float32),
    }
    for i in range(LAYERS):
        p = "model.layers.%d." % i
        t[p + "input_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "post_attention_layernorm.weight"] = np.ones(HIDDEN, np.float32)
        t[p + "self_attn.q_proj.weight"] = w(HEADS * D, HIDDEN)
        t[p + "self_attn.k_proj.weight"] = w(KV_HEADS * D, HIDDEN)
        t[p + "self_attn.v_proj.weight"] = w(KV_HEADS * D, HIDDEN)
        t[p + "self_attn.o_proj.weight"] = w(HIDDEN, HEADS * D)
        t[p + "mlp.gate_proj.weight"] = w(INTER, HIDDEN)
        t[p + "mlp.up_proj.weight"] = w(INTER, HIDDEN)
        t[p + "mlp.down_proj.weight"] = w(HIDDEN, INTER)
    n = V - len(SPECIAL)  # even
    half = w(n // 2, HIDDEN, scale=1.0)
    lm = np.zeros((V, HIDDEN), np.float32)
    lm[len(SPECIAL) :: 2] = half
    lm[len(SPECIAL) + 1 :: 2] = -half
    t["lm_head.weight"] = lm
    save_file(t, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})
    print("wrote %s: vocab %d, %d tensors" % (out, V, len(t)))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else "tiny-llama")
