"""Any Hugging Face tokenizer as the policy's: no pad token, BOS, several EOS ids, chat
templates (gspo.model.tokens), on small tokenizers built here with `tokenizers`."""

from __future__ import annotations

import json

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers, processors
from transformers import PreTrainedTokenizerFast

from gspo.config.fields import ConfigError
from gspo.config.train import PromptConfig
from gspo.model.models import build_tokenizer
from gspo.model.tokens import Codec, codec

CHAT = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% if not enable_thinking %}<nothink>"
    "{% endif %}{% endif %}"
)


def word_tokenizer(*, pad: bool = True, bos: bool = False, chat: bool = False):
    """Whitespace words; specials <bos> <eos> <pad> and the chat markers."""
    words = [
        "<pad>",
        "<bos>",
        "<eos>",
        "<unk>",
        "<|user|>",
        "<|system|>",
        "<|assistant|>",
        "<|end|>",
        "<nothink>",
        "1",
        "+",
        "=",
        "2",
        "what",
        "is",
        "be",
        "brief",
    ]
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(words)}, unk_token="<unk>"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    if bos:  # Llama-style: the tokenizer itself puts BOS in front of every encoded text
        tok.post_processor = processors.TemplateProcessing(
            single="<bos> $A", special_tokens=[("<bos>", 1)]
        )
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<eos>",
        unk_token="<unk>",
        bos_token="<bos>" if bos else None,
        pad_token="<pad>" if pad else None,
        additional_special_tokens=[
            "<|user|>",
            "<|system|>",
            "<|assistant|>",
            "<|end|>",
            "<nothink>",
        ],
    )
    if chat:
        fast.chat_template = CHAT
    return fast


def test_the_tiny_presets_prompts_encode_exactly_as_before():
    tok = build_tokenizer()
    text = "What is 2+2?\nAnswer:"
    c = Codec(tok)
    assert c.prompt(text) == tok(text, add_special_tokens=False).input_ids
    assert c.response("4") == tok("4", add_special_tokens=False).input_ids + [tok.eos_token_id]
    assert c.pad_id == tok.pad_token_id and c.stop_ids == [tok.eos_token_id]


def test_a_tokenizer_without_a_pad_token_pads_with_eos():
    tok = word_tokenizer(pad=False)
    assert tok.pad_token_id is None
    c = Codec(tok)
    assert c.pad_id == tok.eos_token_id == 2


def test_bos_comes_as_the_tokenizer_defines_it_on_prompts_and_never_on_responses():
    with_bos, without = Codec(word_tokenizer(bos=True)), Codec(word_tokenizer())
    assert with_bos.prompt("1 + 1 =") == [1, 9, 10, 9, 11]
    assert without.prompt("1 + 1 =") == [9, 10, 9, 11]
    assert with_bos.response("2") == without.response("2") == [12, 2]


def test_every_eos_id_of_the_generation_config_stops_generation(tmp_path):
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": [7, 2]}))
    c = codec(word_tokenizer(), tmp_path)
    assert c.stop_ids == [2, 7]  # the tokenizer's EOS first, no duplicates
    (tmp_path / "generation_config.json").write_text(json.dumps({"eos_token_id": 7}))
    assert codec(word_tokenizer(), tmp_path).stop_ids == [2, 7]
    assert codec(word_tokenizer(), tmp_path / "none").stop_ids == [2]


def test_chat_format_wraps_the_prompt_in_the_template_with_the_system_prompt():
    tok = word_tokenizer(chat=True)
    c = Codec(tok, PromptConfig(format="chat", system="be brief", enable_thinking=False))
    assert (
        tok.decode(c.prompt("what is 1 + 1"))
        == "<|system|> be brief <|end|> <|user|> what is 1 + 1 <|end|> <|assistant|> <nothink>"
    )
    thinking = Codec(tok, PromptConfig(format="chat"))
    assert tok.decode(thinking.prompt("1")) == "<|user|> 1 <|end|> <|assistant|>"
    assert thinking.decode(thinking.prompt("1") + [12, 2]) == "1 2"  # specials dropped


def test_chat_format_without_a_template_is_a_one_line_error_naming_the_field():
    with pytest.raises(
        ConfigError,
        match=r"prompt.format: chat, but the tokenizer of /m has no "
        r"chat template; use prompt.format: raw",
    ):
        Codec(word_tokenizer(), PromptConfig(format="chat"), where="/m")
    with pytest.raises(ConfigError, match="system: is a chat-template setting"):
        PromptConfig(system="be brief")


def test_a_model_directory_without_a_tokenizer_names_what_is_missing(tiny_model_dir, tmp_path):
    import shutil

    from gspo.model.models import load_model

    bare = tmp_path / "bare"
    bare.mkdir()
    for f in ("config.json", "model.safetensors"):
        shutil.copy(tiny_model_dir / f, bare / f)
    with pytest.raises(FileNotFoundError, match=r"bare: no tokenizer \(none of tokenizer.json"):
        load_model(bare)


def test_sft_refuses_a_max_len_that_leaves_no_room_after_a_prompt(tmp_path):
    from evaluators.benchmarks import aime
    from gspo.config.train import DataSource, SFTConfig
    from gspo.io import write_jsonl
    from gspo.native.sft import run_sft

    data = tmp_path / "train.jsonl"
    write_jsonl(aime.generate(4, split="train", seed=0, difficulty="easy"), data)
    cfg = SFTConfig(
        model="tiny",
        out_dir=str(tmp_path / "sft"),
        steps=1,
        batch_size=2,
        max_len=8,
        train_data=[DataSource(str(data))],
        threads=1,
    )
    with pytest.raises(
        ConfigError,
        match=r"max_len: 8 leaves no room for a response after the "
        r"prompt of record '.*' in .*train.jsonl \(\d+ tokens\)",
    ):
        run_sft(cfg)
    assert not (tmp_path / "sft" / "model").exists()


def test_the_bpe_preset_trains_its_tokenizer_on_the_corpus_deterministically(tmp_path):
    from evaluators.benchmarks import aime
    from gspo.model.models import build_tiny, load_model

    corpus = [
        r["prompt"] + r["solution"]
        for r in aime.generate(32, split="train", seed=0, difficulty="easy")
    ]
    a = build_tiny("tiny-bpe", tmp_path / "a", corpus=corpus)
    b = build_tiny("tiny-bpe", tmp_path / "b", corpus=corpus)
    assert (a / "tokenizer.json").read_text() == (b / "tokenizer.json").read_text()
    model, tok = load_model(a)
    assert tok.pad_token_id is None and tok.chat_template
    assert tok("1+1").input_ids[0] == tok.bos_token_id == model.config.bos_token_id
    assert len(tok) <= model.config.vocab_size and model.config.vocab_size % 64 == 0
    # two EOS ids: the chat turn's end and end-of-text, both stop generation
    c = codec(tok, a)
    assert c.stop_ids == [tok.eos_token_id, tok.convert_tokens_to_ids("<|endoftext|>")]
    assert len(c.prompt(corpus[0])) < 0.8 * len(corpus[0])  # merges learned from the corpus
    with pytest.raises(ValueError, match="pass them as corpus"):
        build_tiny("tiny-bpe", tmp_path / "c")


@pytest.mark.slow
def test_the_bpe_preset_runs_sft_rl_with_vllm_and_evaluation_in_chat_format(tmp_path):
    """The real-tokenizer path end to end: BOS, a chat template, no pad token, two EOS ids;
    vLLM (CPU build) samples the same token ids the trainer scores, and evaluates in bf16."""
    from evaluators.benchmarks import aime
    from evaluators.tasks import reward, rewards
    from gspo.config.train import DataSource, RLConfig, RolloutConfig, SFTConfig
    from gspo.io import write_jsonl
    from gspo.native.sft import run_sft
    from gspo.native.trainer import run_rl
    from gspo.tracking.runs import read_metrics
    from pipeline import evaluate

    train, test = tmp_path / "train.jsonl", tmp_path / "aime_test.jsonl"
    write_jsonl(aime.generate(40, split="train", seed=0, difficulty=aime.Difficulty(1, 3)), train)
    write_jsonl(aime.generate(4, split="test", seed=0, difficulty=aime.Difficulty(1, 3)), test)
    chat = PromptConfig(format="chat", system="Answer in a box.")
    sft = run_sft(
        SFTConfig(
            model="tiny-bpe",
            out_dir=str(tmp_path / "sft"),
            steps=60,
            batch_size=16,
            lr=1e-2,
            warmup_steps=5,
            log_every=10,
            threads=1,
            train_data=[DataSource(str(train))],
            prompt=chat,
        ),
        reward,
    )
    losses = [r["loss"] for r in read_metrics(tmp_path / "sft" / "metrics.jsonl")]
    assert losses[-1] < 0.5 * losses[0]
    run_rl(
        RLConfig(
            algorithm="gspo",
            model=str(sft),
            out_dir=str(tmp_path / "rl"),
            train_data=[DataSource(str(train))],
            steps=2,
            prompts_per_step=4,
            group_size=4,
            minibatches=2,
            max_new_tokens=24,
            threads=1,
            prompt=chat,
            rollout=RolloutConfig(engine="vllm"),
            old_logprobs="rollout",
        ),
        rewards,
    )
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert rows[-1]["tokens_generated"] > 0
    # vLLM's log-probs of its own samples are the trainer's: same prompt ids, same vocabulary
    assert all(r["logprob_gap_token_max"] < 1e-3 for r in rows)
    assert (
        evaluate.main(
            [
                "--model",
                str(sft),
                "--out",
                str(tmp_path / "eval"),
                "--benchmarks",
                "aime",
                "--data-dir",
                str(tmp_path),
                "--samples",
                "2",
                "--max-new-tokens",
                "24",
                "--set",
                "prompt.format=chat",
                "--set",
                "prompt.system=Answer in a box.",
                "--engine",
                "vllm",
                "--dtype",
                "bfloat16",
            ]
        )
        == 0
    )
    summary = json.loads((tmp_path / "eval" / "aime" / "summary.json").read_text())
    assert summary["config"]["prompt"]["format"] == "chat"
    assert summary["settings"]["engine"] == "vllm" and summary["settings"]["dtype"] == "bfloat16"
    assert summary["benchmarks"]["aime"]["n_samples"] == 8
    results = [json.loads(x) for x in (tmp_path / "eval" / "aime" / "results.jsonl").open()]
    assert not any("<|" in t for r in results for t in r.get("completions", []))
