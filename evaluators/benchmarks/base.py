"""The interface every benchmark offers (evaluators.tasks registers them by name). A Protocol:
the benchmark packages satisfy it by their module-level functions, and tests/test_tasks.py holds
each registered module to it."""

from __future__ import annotations

from typing import Protocol, Sequence


class Benchmark(Protocol):
    TASK: str  # a record's `task` (the registry's name may be shorter)
    RECORD_FIELDS: tuple[str, ...]  # what an evaluation record must carry

    def generate(self, n: int, *, split: str, seed: int, **options) -> list[dict]:
        """`n` procedurally generated records of `split` ('train' or 'test'), disjoint splits."""

    def load(self, source, **options) -> list[dict]:
        """Real problems (for RL or evaluation) from a local file or a hub dataset."""

    def load_sft(self, source, *, limit: int | None = None, **options) -> list[dict]:
        """Real records with worked solutions, for SFT."""

    def format_prompt(self, record: dict) -> str:
        """The exact text the model is given for `record`."""

    def score(self, record: dict, completion: str) -> dict:
        """At least {"passed": bool} for one completion."""

    def score_many(
        self, records: Sequence[dict], completions: Sequence[str], workers: int = 1, **options
    ) -> list[dict]:
        """score() of each (record, completion) pair, in order."""
