"""TRL's micro-batches from this project's batch settings (`engine: trl`, RL and SFT).

TRL's trainers put `per_device_train_batch_size` sequences in one forward and accumulate
gradients over the rest of a rank's share of the optimizer step. They have no token budget, so
`max_tokens_per_micro_batch` becomes a number of sequences: the most that divide the rank's
share and whose forward, every sequence padded to the longest possible (RL: the longest prompt
+ max_new_tokens; SFT: the longest record), stays within the budget; at least one. With neither
`micro_batch_size` nor a budget, the whole share goes through one forward: at real scale that is
64 sequences x ~9K tokens with full-vocabulary logits (~165 GiB in bf16), so on CUDA it is
refused (`check_whole_share`); CPU runs (the tiny models, the tests) keep it.
"""

from __future__ import annotations

from gspo.config.fields import ConfigError

ENGINE = "engine: trl"


def micro_batch(micro_batch_size: int, budget: int, share: int, seq_len: int) -> int:
    """Sequences per TRL forward on a rank whose step share is `share` sequences of at most
    `seq_len` tokens: `budget` (max_tokens_per_micro_batch) when set, as the native trainer
    lets it replace micro_batch_size, else micro_batch_size, else the whole share."""
    if budget:
        fit = max(1, budget // max(seq_len, 1))
        return max(d for d in range(1, share + 1) if share % d == 0 and d <= fit)
    return micro_batch_size or share


def check_whole_share(cfg, share: int, what: str) -> None:
    """Refuse, on CUDA, a config whose rank's `share` sequences would all go through one TRL
    forward (`what`: "minibatch" or "step")."""
    if (
        str(cfg.device).startswith("cuda")
        and share > 1
        and not cfg.micro_batch_size
        and not cfg.max_tokens_per_micro_batch
    ):
        raise ConfigError(
            f"max_tokens_per_micro_batch: 0 (and micro_batch_size 0) puts a rank's whole {what} "
            f"of {share} sequences in one forward ({ENGINE}; its logits alone can exceed the "
            "GPU); set max_tokens_per_micro_batch (TRL then micro-batches by it) or "
            "micro_batch_size"
        )
