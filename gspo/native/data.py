"""Training data: weighted mixes of task-record files, stateless sampling, prompt encoding,
padded batches."""

from __future__ import annotations

import hashlib
import random

import torch

from gspo.io import DataError, file_sha256, read_jsonl

REQUIRED = ("id", "task", "prompt")


class Mix:
    """Records from several JSONL files, sampled with per-file weights.

    Sampling is a pure function of (seed, step), so a resumed run draws exactly what an
    uninterrupted one would.
    """

    def __init__(self, sources, *, need_solution: bool = False):
        self.files = []
        req = REQUIRED + (("solution",) if need_solution else ())
        for src in sources:
            recs = read_jsonl(src.path, required=req)
            if not recs:
                raise DataError(f"{src.path}: no records")
            self.files.append((src.path, src.weight, recs))

    def hashes(self) -> dict[str, str]:
        return {path: file_sha256(path) for path, _, _ in self.files}

    def sample(self, n: int, *, seed: int, step: int, draw: int = 0) -> list[dict]:
        """`n` records for step `step`; draw k > 0 gives further, independent ones (dynamic
        sampling)."""
        rng = random.Random(f"mix:{seed}:{step}" + (f":{draw}" if draw else ""))
        weights = [w for _, w, _ in self.files]
        picks = rng.choices(range(len(self.files)), weights=weights, k=n)
        return [rng.choice(self.files[i][2]) for i in picks]


def prompt_seed(seed: int, step: int, prompt: int) -> int:
    """The sampling seed of step `step`'s `prompt`-th prompt (31 bits); times the group size it
    is the seed of the prompt's first sample (gspo.rollout.torch_engine.sample_seeds)."""
    h = hashlib.sha256(f"rollout:{seed}:{step}:{prompt}".encode()).digest()
    return int.from_bytes(h[:4], "big") >> 1


def step_seed(seed: int, step: int, salt: int) -> int:
    """A seed for the step's `salt`-th random draw (e.g. the minibatch shuffle)."""
    return (seed * 1_000_003 + step * 7_919 + salt) % (2**63 - 1)


def encoder(tokenizer):
    """text -> token ids, memoised: the one way SFT, RL and evaluation encode a prompt."""
    cache: dict[str, list[int]] = {}

    def enc(text: str) -> list[int]:
        if text not in cache:
            cache[text] = tokenizer(text, add_special_tokens=False).input_ids
        return cache[text]

    return enc


def pad_batch(
    prompts: list[list[int]], responses: list[list[int]], pad_id: int, max_len: int | None = None
) -> dict[str, torch.Tensor]:
    """Right-padded prompt+response tensors and the mask of response *targets*.

    input_ids: (B, L); attention_mask: (B, L); target_mask: (B, L-1), 1 where logits[:, t]
    predicts a response token (i.e. input_ids[:, t+1] is part of the response).
    """
    seqs = [p + r for p, r in zip(prompts, responses)]
    if max_len is not None:
        seqs = [s[:max_len] for s in seqs]
    L = max(len(s) for s in seqs)
    B = len(seqs)
    ids = torch.full((B, L), pad_id, dtype=torch.long)
    att = torch.zeros(B, L, dtype=torch.long)
    tmask = torch.zeros(B, max(L - 1, 1))
    for i, (s, p) in enumerate(zip(seqs, prompts)):
        ids[i, : len(s)] = torch.tensor(s, dtype=torch.long)
        att[i, : len(s)] = 1
        tmask[i, len(p) - 1 : len(s) - 1] = 1.0
    return {"input_ids": ids, "attention_mask": att, "target_mask": tmask}


def micro_batches(
    rows: torch.Tensor,
    lengths: torch.Tensor,
    size: int,
    max_tokens: int,
    *,
    by_length: bool = False,
) -> list[torch.Tensor]:
    """`rows` split into micro-batches: `size` rows each (0: all at once; by_length: the rows
    sorted longest first, so that each micro-batch trimmed to its longest row carries little
    padding), or with max_tokens the rows sorted longest first and packed so that rows x the
    longest length stays within the budget (a row longer than the budget goes alone)."""

    def longest_first() -> list[int]:
        return sorted(rows.tolist(), key=lambda r: -int(lengths[r]))

    if not max_tokens:
        size = size or max(len(rows), 1)
        if by_length:
            rows = torch.tensor(longest_first(), dtype=torch.long)
        return [rows[j : j + size] for j in range(0, len(rows), size)]
    out: list[list[int]] = []
    for r in longest_first():
        # sorted longest first: the micro-batch's first row sets its padded width
        if out and (len(out[-1]) + 1) * int(lengths[out[-1][0]]) <= max_tokens:
            out[-1].append(r)
        else:
            out.append([r])
    return [torch.tensor(m, dtype=torch.long) for m in out]


def trim_padding(sub: dict) -> dict:
    """A right-padded micro-batch cut to its longest sequence (targets one shorter)."""
    L = int(sub["attention_mask"].sum(1).max())
    return {
        "input_ids": sub["input_ids"][:, :L],
        "attention_mask": sub["attention_mask"][:, :L],
        "target_mask": sub["target_mask"][:, : max(L - 1, 1)],
    }


def micro_batched(
    forward, batch: dict, micros: list[torch.Tensor], n_micro: int, *, trim: bool, n_out: int
) -> list[torch.Tensor]:
    """`forward(sub)` -> a tuple of `n_out` (b, t) tensors, run over `batch`'s micro-batches
    `micros` (row indices; padding trimmed when `trim`) and laid back out as (B, T) tensors in
    row order. n_micro >= len(micros) passes run in all: the extra ones over row 0, their
    outputs dropped, so a rank short of micro-batches still joins FSDP's collectives."""
    B, T = batch["target_mask"].shape
    outs = [batch["target_mask"].new_zeros(B, T, dtype=torch.float32) for _ in range(n_out)]
    for j in range(n_micro):
        idx = micros[j] if j < len(micros) else torch.zeros(1, dtype=torch.long)
        sub = {k: v[idx] for k, v in batch.items()}
        res = forward(trim_padding(sub) if trim else sub)
        if j >= len(micros):
            continue
        for k, r in enumerate(res):
            if outs[k].dtype != r.dtype:
                outs[k] = outs[k].to(r.dtype)
            outs[k][idx.to(r.device), : r.shape[1]] = r  # trimmed: the rows' own width
    return outs


def pad_to(t: torch.Tensor, width: int) -> torch.Tensor:
    """(b, T) right-padded with zeros to (b, width)."""
    return torch.nn.functional.pad(t, (0, width - t.shape[1])) if t.shape[1] < width else t
