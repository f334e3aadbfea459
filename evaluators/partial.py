"""The store of a partial evaluation: each chunk's results as soon as it is done, so that a killed
evaluation resumes where it stopped.

evaluators.evaluation.evaluate_records samples the records in chunks of `batch_prompts` (chunk j
whose records are seeded by their ids: the same completions whichever process samples it). Given a `ChunkStore`, it
writes each chunk's per-record results, once sampled and scored, to `<folder>/chunk_<j>.jsonl`
(atomically: a chunk file there is whole), and reads a chunk found there back instead of
sampling it, so a resumed evaluation gives what an uninterrupted one gives. Under torchrun every
rank writes and reads only its own chunks.

`<folder>/key.json` holds the digest of what the results depend on (`store_key`: the model
directory and its files, the data, every EvalConfig field that changes a result, the store's
format); a folder made with another key, or without one, is discarded, saying so in one line,
before anything is read from it. evaluators.evaluation keeps the store of `<out>/<bench>/` at
`<out>/<bench>.partial/`, beside it rather than in it: Snakemake deletes a failed job's declared
outputs (the files in `<out>/<bench>/`) before re-running it, never this folder.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import pathlib
import shutil
import time

from gspo.infra import distributed as dist
from gspo.infra.checkpoint import model_fingerprint
from gspo.io import atomic_write_text, file_sha256, write_json

FORMAT = 2  # of the chunk files: a change discards the stores of older versions
# (2: samples seeded per problem id, gspo.rollout.base.problem_seed)
# EvalConfig fields that change no per-record result: the data's path (its content is keyed), the
# sandboxes scoring in parallel, the summary's bootstrap and the protocol's name
NOT_KEYED = ("data", "workers", "bootstrap_iters", "protocol")


def digest(obj) -> str:
    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()


def store_key(cfg, model, records: list[dict]) -> dict:
    """What the per-record results of evaluating `model` on `records` with EvalConfig `cfg`
    depend on: the model directory (its path, and its files' names, sizes and times: a rebuilt
    model is another), the data file's content and the records' ids (the `limit`), and every
    result-changing setting (samples, temperature, top_p, max_new_tokens, seed, batch_prompts,
    engine, dtype, the prompt format, ...)."""
    data = pathlib.Path(cfg.data) if cfg.data else None
    return {
        "format": FORMAT,
        "model": str(pathlib.Path(model).resolve()),
        "model_files": model_fingerprint(str(model)),
        "data_sha256": file_sha256(data) if data and data.is_file() else None,
        "record_ids": digest([r["id"] for r in records]),
        "config": {k: v for k, v in dataclasses.asdict(cfg).items() if k not in NOT_KEYED},
    }


class ChunkStore:
    """Chunk j's per-record results in `<folder>/chunk_<j>.jsonl`, made with `key`."""

    def __init__(self, folder, key: dict):
        self.folder = pathlib.Path(folder)
        self.key = key
        self.digest = digest(key)

    def open(self, world: dist.World = dist.World()) -> ChunkStore:
        """Make the folder ready (rank 0: discard one made with another key, else say how much
        is done; write key.json) while the other ranks wait."""
        if world.main:
            key_file = self.folder / "key.json"
            if self.folder.exists() and self._stored_digest() != self.digest:
                print(
                    f"{self.folder}: a partial evaluation made with other settings (model, "
                    "data or sampling): discarded, starting over",
                    flush=True,
                )
                shutil.rmtree(self.folder)
            done = sorted(self.folder.glob("chunk_*.jsonl"))
            if done:
                print(
                    f"{self.folder}: resuming a partial evaluation: {len(done)} chunk(s) done",
                    flush=True,
                )
            if not key_file.is_file():
                write_json(key_file, {"digest": self.digest, "key": self.key})
        dist.barrier(world)
        return self

    def _stored_digest(self):
        try:
            return json.loads((self.folder / "key.json").read_text())["digest"]
        except (OSError, ValueError, KeyError, TypeError):
            return None

    def path(self, j: int) -> pathlib.Path:
        return self.folder / f"chunk_{j:05d}.jsonl"

    def load(self, j: int, ids: list) -> list[dict] | None:
        """Chunk j's results, when stored for exactly the records `ids` (else None)."""
        try:
            rows = [json.loads(line) for line in self.path(j).read_text().splitlines()]
        except (OSError, ValueError):
            return None
        return (
            rows
            if [r.get("id") if isinstance(r, dict) else None for r in rows] == list(ids)
            else None
        )

    def save(self, j: int, rows: list[dict]) -> None:
        atomic_write_text(self.path(j), "".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))

    def wait(self, n_chunks: int, poll_s: float = 5.0) -> None:
        """Return once chunks 0 .. n_chunks - 1 are all stored, by whichever rank. The ranks
        finish at different times, and a collective (the gather of the results) waits at most
        the process group's timeout (30 min, gspo.infra.distributed.init); torchrun stops every rank
        when one fails, so this does not wait for a dead one."""
        while not all(self.path(j).is_file() for j in range(n_chunks)):
            time.sleep(poll_s)

    def remove(self) -> None:
        shutil.rmtree(self.folder, ignore_errors=True)
