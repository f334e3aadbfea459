"""Records to token ids and back, for any Hugging Face tokenizer: the one place SFT, RL and
evaluation encode prompts and responses, pad batches and stop generation.

- BOS as the tokenizer defines it: prompts are encoded with `add_special_tokens=True`, so a
  tokenizer whose post-processor adds BOS (Llama-style) gets it and one that adds none (Qwen3,
  the tiny presets' character tokenizer) gets none. Responses never get one.
- Padding: the tokenizer's pad token, else its EOS token (padded positions are masked out by the
  attention mask and never trained, so any id would do; EOS is the documented fallback).
- Stop ids: every EOS id of the model's generation config (Qwen3 chat models end on
  `<|im_end|>` or `<|endoftext|>`) plus the tokenizer's own EOS. A response trained in SFT ends
  with the tokenizer's EOS.
- `prompt_format: raw` encodes the record's prompt text as it is; `chat` wraps it in the
  tokenizer's chat template as one user turn (after an optional system prompt) with the
  generation prompt appended; `enable_thinking` is handed to the template (Qwen3's thinking
  switch; templates without it ignore it).
"""

from __future__ import annotations

import json
import pathlib

from gspo.config.fields import ConfigError
from gspo.config.train import PromptConfig


class Codec:
    """A tokenizer with the run's prompt format: `prompt(text)` and `response(text)` give token
    ids, `pad_id` and `stop_ids` what batches and generation need, `decode` the text back."""

    def __init__(
        self,
        tokenizer,
        prompt: PromptConfig | None = None,
        generation_eos: int | list[int] | None = None,
        where: str = "the model",
    ):
        self.tokenizer = tokenizer
        self.fmt = prompt or PromptConfig()
        if self.fmt.format == "chat" and not tokenizer.chat_template:
            raise ConfigError(
                f"prompt.format: chat, but the tokenizer of {where} has no chat "
                "template; use prompt.format: raw"
            )
        self.eos_id = tokenizer.eos_token_id
        if self.eos_id is None:
            raise ConfigError(f"{where}: its tokenizer has no EOS token, so responses cannot end")
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else self.eos_id
        extra = [generation_eos] if isinstance(generation_eos, int) else list(generation_eos or [])
        self.stop_ids = list(dict.fromkeys([self.eos_id, *extra]))
        self._cache: dict[str, list[int]] = {}

    def prompt(self, text: str) -> list[int]:
        """The model input for a record's prompt text (memoised)."""
        if text not in self._cache:
            if self.fmt.format == "chat":
                turns = (
                    [{"role": "system", "content": self.fmt.system}] if self.fmt.system else []
                ) + [{"role": "user", "content": text}]
                ids = self.tokenizer.apply_chat_template(
                    turns,
                    add_generation_prompt=True,
                    tokenize=True,
                    return_dict=True,
                    enable_thinking=self.fmt.enable_thinking,
                )["input_ids"]
            else:
                ids = self.tokenizer(text, add_special_tokens=True).input_ids
            self._cache[text] = list(ids)
        return self._cache[text]

    def response(self, text: str) -> list[int]:
        """A trained response: its tokens, then EOS."""
        return self.tokenizer(text, add_special_tokens=False).input_ids + [self.eos_id]

    def decode(self, ids: list[int]) -> str:
        return self.tokenizer.decode(ids, skip_special_tokens=True)


def generation_eos(model_dir) -> int | list[int] | None:
    """The EOS id(s) of a model directory's generation_config.json (None without one)."""
    p = pathlib.Path(model_dir) / "generation_config.json"
    return json.loads(p.read_text()).get("eos_token_id") if p.is_file() else None


def codec(tokenizer, model_dir, prompt: PromptConfig | None = None) -> Codec:
    """The Codec of the model at `model_dir` (its generation config's EOS ids as stop ids)."""
    return Codec(tokenizer, prompt, generation_eos(model_dir), where=str(model_dir))
