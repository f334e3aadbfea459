"""Tiny Qwen3-architecture models and their locally built tokenizer.

The embedded scale trains a random-initialised Qwen3 (dense or MoE) from scratch. Everything here
is written with `save_pretrained`, so transformers, vLLM and lm-eval load the result by path exactly
like a real checkpoint; the rest of the code never knows which scale it runs at.
"""

from __future__ import annotations

import pathlib
import string

import torch

from gspo.io import atomic_dir

# Characters the math and code tasks need: all printable ASCII plus newline and tab.
CHARS: list[str] = sorted(set(string.printable) - set("\r\x0b\x0c"))
SPECIAL_TOKENS = {"pad": "<pad>", "eos": "<eos>", "unk": "<unk>"}
VOCAB_SIZE = 128  # padded up from len(CHARS) + specials for friendlier matmul shapes

_COMMON = dict(
    vocab_size=VOCAB_SIZE,
    max_position_embeddings=1024,
    rope_theta=10000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    attention_dropout=0.0,
)

PRESETS: dict[str, dict] = {
    # 0.31M parameters: trains in minutes on 2 CPU cores.
    "tiny": dict(arch="dense", hidden_size=128, intermediate_size=256, num_hidden_layers=2,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=32),
    # ~3.2M parameters.
    "small": dict(arch="dense", hidden_size=256, intermediate_size=768, num_hidden_layers=4,
                  num_attention_heads=8, num_key_value_heads=4, head_dim=32),
    # 8 experts, top-2, every layer sparse: the smallest model on which routing can drift.
    "tiny-moe": dict(arch="moe", hidden_size=128, moe_intermediate_size=128, intermediate_size=256,
                     num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, head_dim=32,
                     num_experts=8, num_experts_per_tok=2, norm_topk_prob=True,
                     decoder_sparse_step=1, mlp_only_layers=[], router_aux_loss_coef=0.001),
}


def build_tokenizer():
    """A character-level fast tokenizer (one token per character, specials kept whole)."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    specials = [SPECIAL_TOKENS["pad"], SPECIAL_TOKENS["eos"], SPECIAL_TOKENS["unk"]]
    vocab = {tok: i for i, tok in enumerate(specials + CHARS)}
    assert len(vocab) <= VOCAB_SIZE
    tok = Tokenizer(models.WordLevel(vocab, unk_token=SPECIAL_TOKENS["unk"]))
    tok.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    tok.decoder = decoders.Fuse()  # concatenate characters back, no separator
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        pad_token=SPECIAL_TOKENS["pad"],
        eos_token=SPECIAL_TOKENS["eos"],
        unk_token=SPECIAL_TOKENS["unk"],
        clean_up_tokenization_spaces=False,
        model_max_length=_COMMON["max_position_embeddings"],
    )
    return fast


def model_config(preset: str, tokenizer):
    """The transformers config object for a preset name."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; expected one of {sorted(PRESETS)}")
    spec = dict(PRESETS[preset])
    arch = spec.pop("arch")
    ids = dict(eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
               bos_token_id=None)
    cls = Qwen3MoeConfig if arch == "moe" else Qwen3Config
    return cls(**_COMMON, **spec, **ids)


def build_tiny(preset: str, out_dir, seed: int = 0) -> pathlib.Path:
    """Write a random-initialised model of `preset` plus its tokenizer to `out_dir`.

    The same (preset, seed) gives bit-identical weights. The directory appears complete or not at
    all: everything is written to a sibling temp folder that is renamed into place.
    """
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = pathlib.Path(out_dir)
    tokenizer = build_tokenizer()
    cfg = model_config(preset, tokenizer)
    # Initialise under a private RNG so building a model never disturbs the caller's stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id
    )
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return out


def load_model(path, dtype: torch.dtype = torch.float32):
    """Load a causal LM and tokenizer from a local directory (tiny preset output or real checkpoint)."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = pathlib.Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a model directory (no config.json)")
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=dtype)
    return model, tokenizer


def count_params(model) -> dict[str, int]:
    """Parameter counts: total, embedding, and those a token's forward pass multiplies by.

    `matmul` counts every Linear weight a token passes through (the tied LM head included, the
    embedding lookup excluded); for MoE layers only the top-k routed experts count ("active").
    """
    cfg = model.config
    total = sum(p.numel() for p in model.parameters())
    emb = model.get_input_embeddings().weight.numel()
    matmul = 0
    for name, p in model.named_parameters():
        if p.dim() < 2 or "embed_tokens" in name:
            continue
        n = p.numel()
        if ".experts." in name or name.endswith("experts.gate_up_proj") or name.endswith("experts.down_proj"):
            n = n * cfg.num_experts_per_tok // cfg.num_experts
        matmul += n
    if getattr(cfg, "tie_word_embeddings", False):
        matmul += emb  # the LM head reuses the embedding matrix as a matmul
    return {"total": total, "embedding": emb, "matmul": matmul}


def enable_activation_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in the backward pass (Hugging Face's gradient
    checkpointing, non-reentrant). Refused for MoE models: the recomputed forward would fire the
    Routing Replay and recording hooks (gspo.moe) a second time."""
    from gspo import moe
    from gspo.config import ConfigError

    if moe.is_moe(model):
        raise ConfigError("activation_checkpointing: not supported for Mixture-of-Experts models "
                          "yet (the recomputed forward would replay and record routing twice); "
                          "set it to false")
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
