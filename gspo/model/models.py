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
    "tiny": dict(
        arch="dense",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    ),
    # ~3.2M parameters.
    "small": dict(
        arch="dense",
        hidden_size=256,
        intermediate_size=768,
        num_hidden_layers=4,
        num_attention_heads=8,
        num_key_value_heads=4,
        head_dim=32,
    ),
    # tiny with a byte-level BPE tokenizer trained on the training texts, BOS, a ChatML chat
    # template, two EOS ids and no pad token: the real-tokenizer path at the embedded scale.
    "tiny-bpe": dict(
        arch="dense",
        tokenizer="bpe",
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
    ),
    # 8 experts, top-2, every layer sparse: the smallest model on which routing can drift.
    "tiny-moe": dict(
        arch="moe",
        hidden_size=128,
        moe_intermediate_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        head_dim=32,
        num_experts=8,
        num_experts_per_tok=2,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        router_aux_loss_coef=0.001,
    ),
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


BPE_VOCAB = 512
# ChatML as Qwen3 writes it, after the tokenizer's BOS (as Llama-style templates put it)
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}"
    "<|im_end|>\n{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
BPE_SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|bos|>"]


def build_bpe_tokenizer(corpus: list[str], vocab_size: int = BPE_VOCAB):
    """A byte-level BPE tokenizer trained on `corpus` (deterministic for the same texts): BOS
    put in front of every encoded text, EOS <|im_end|> (the chat turn's end), a chat template,
    no pad token (gspo.model.tokens pads with EOS)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
    from transformers import PreTrainedTokenizerFast

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator(
        corpus,
        trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=BPE_SPECIALS,
            show_progress=False,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        ),
    )
    tok.post_processor = processors.TemplateProcessing(
        single="<|bos|> $A", special_tokens=[("<|bos|>", tok.token_to_id("<|bos|>"))]
    )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        bos_token="<|bos|>",
        eos_token="<|im_end|>",
        clean_up_tokenization_spaces=False,
        additional_special_tokens=["<|endoftext|>", "<|im_start|>"],
        model_max_length=_COMMON["max_position_embeddings"],
    )
    fast.chat_template = CHAT_TEMPLATE
    return fast


def model_config(preset: str, tokenizer):
    """The transformers config object for a preset name."""
    from transformers import Qwen3Config, Qwen3MoeConfig

    if preset not in PRESETS:
        raise ValueError(f"unknown model preset {preset!r}; expected one of {sorted(PRESETS)}")
    spec = dict(PRESETS[preset])
    arch = spec.pop("arch")
    spec.pop("tokenizer", None)
    ids = dict(
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    cls = Qwen3MoeConfig if arch == "moe" else Qwen3Config
    # the vocabulary rounded up to a multiple of 64 (friendlier matmul shapes)
    vocab = max(VOCAB_SIZE, -(-len(tokenizer) // 64) * 64)
    return cls(**{**_COMMON, "vocab_size": vocab}, **spec, **ids)


def build_tiny(
    preset: str, out_dir, seed: int = 0, corpus: list[str] | None = None
) -> pathlib.Path:
    """Write a random-initialised model of `preset` plus its tokenizer to `out_dir`; a BPE
    preset trains its tokenizer on `corpus` (the training texts) first.

    The same (preset, seed, corpus) gives bit-identical weights. The directory appears complete
    or not at all: everything is written to a sibling temp folder that is renamed into place.
    """
    from transformers import AutoModelForCausalLM, GenerationConfig

    out = pathlib.Path(out_dir)
    if PRESETS.get(preset, {}).get("tokenizer") == "bpe":
        if not corpus:
            raise ValueError(
                f"preset {preset!r} trains its BPE tokenizer on the training texts: "
                "pass them as corpus"
            )
        tokenizer = build_bpe_tokenizer(corpus)
        eos_ids = [tokenizer.eos_token_id, tokenizer.convert_tokens_to_ids("<|endoftext|>")]
    else:
        tokenizer = build_tokenizer()
        eos_ids = tokenizer.eos_token_id
    cfg = model_config(preset, tokenizer)
    # Initialise under a private RNG so building a model never disturbs the caller's stream.
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)
    model.generation_config = GenerationConfig(
        eos_token_id=eos_ids,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
    )
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tokenizer.save_pretrained(tmp)
    return out


# what a model directory needs for AutoTokenizer (any one of them)
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


def load_model(path, dtype: torch.dtype = torch.float32, weights: bool = True):
    """Load a causal LM and tokenizer from a local directory (tiny preset output or real
    checkpoint); weights=False builds the model on the meta device without reading its weight
    files (gspo.infra.distributed.load_sharded: the ranks that receive their shards)."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = pathlib.Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path}: not a model directory (no config.json)")
    if not any((path / f).is_file() for f in TOKENIZER_FILES):
        raise FileNotFoundError(
            f"{path}: no tokenizer (none of {', '.join(TOKENIZER_FILES)}); "
            "copy the checkpoint's tokenizer files next to its weights"
        )
    tokenizer = AutoTokenizer.from_pretrained(path)
    if not weights:
        with torch.device("meta"):
            model = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(path), dtype=dtype)
        return model, tokenizer
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
        if (
            ".experts." in name
            or name.endswith("experts.gate_up_proj")
            or name.endswith("experts.down_proj")
        ):
            n = n * cfg.num_experts_per_tok // cfg.num_experts
        matmul += n
    if getattr(cfg, "tie_word_embeddings", False):
        matmul += emb  # the LM head reuses the embedding matrix as a matmul
    return {"total": total, "embedding": emb, "matmul": matmul}


def enable_activation_checkpointing(model) -> None:
    """Recompute each decoder layer's activations in the backward pass (Hugging Face's gradient
    checkpointing, non-reentrant). Refused for MoE models: the recomputed forward would fire the
    Routing Replay and recording hooks (gspo.model.moe) a second time."""
    from gspo.config.fields import ConfigError
    from gspo.model import moe

    if moe.is_moe(model):
        raise ConfigError(
            "activation_checkpointing: not supported for Mixture-of-Experts models "
            "yet (the recomputed forward would replay and record routing twice); "
            "set it to false"
        )
    model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
