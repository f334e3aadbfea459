"""Tiny in-memory toys shared by tests."""

import torch


def memorise(base_dir, out_dir, pairs, steps=80):
    """The tiny model fine-tuned to answer each (prompt, completion) pair by heart, greedily."""
    from gspo.model.models import load_model

    model, tok = load_model(base_dir)
    seqs = [
        (
            tok(p, add_special_tokens=False).input_ids,
            tok(c, add_special_tokens=False).input_ids + [tok.eos_token_id],
        )
        for p, c in pairs
    ]
    L = max(len(a) + len(b) for a, b in seqs)
    ids = torch.full((len(seqs), L), tok.pad_token_id)
    labels = torch.full((len(seqs), L), -100)
    mask = torch.zeros(len(seqs), L, dtype=torch.long)
    for i, (a, b) in enumerate(seqs):
        ids[i, : len(a) + len(b)] = torch.tensor(a + b)
        labels[i, len(a) : len(a) + len(b)] = torch.tensor(b)
        mask[i, : len(a) + len(b)] = 1
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        opt = torch.optim.Adam(model.parameters(), lr=3e-3)
        model.train()
        for _ in range(steps):
            loss = model(input_ids=ids, attention_mask=mask, labels=labels).loss
            opt.zero_grad()
            loss.backward()
            opt.step()
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir


def offline_errors(calls: str, tmp_path) -> list[str]:
    """The DataError lines of `calls` (Python statements, one call a line, the evaluators
    imported as modules) run in a fresh interpreter with the Hugging Face hub offline and an
    empty cache: what a user without the dataset sees."""
    import pathlib
    import subprocess
    import sys

    body = "".join(
        f"try:\n    {c}\nexcept DataError as e:\n    print(e)\n" for c in calls.strip().splitlines()
    )
    code = (
        "from evaluators.benchmarks import codeforces as cf, livecodebench as lcb\n"
        "from gspo.io import DataError\n" + body
    )
    env = {
        "PATH": "/usr/bin:/bin",
        "HF_HOME": str(tmp_path / "hf"),
        "HF_HUB_OFFLINE": "1",
        "HF_DATASETS_OFFLINE": "1",
    }
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=pathlib.Path(__file__).parents[1],
        timeout=120,
    )
    lines = out.stdout.strip().splitlines()
    assert len(lines) == len(calls.strip().splitlines()), (out.stdout, out.stderr[-2000:])
    return lines


def nested_draws(engine, tok, records) -> tuple[list, list]:
    """The completions of (limit, samples) = (8, 2) and of (24, 8) on `records`, in other
    batches and another order: what the curve's intermediate and final evaluations do."""
    from evaluators import evaluation as ev
    from gspo.model.tokens import Codec

    kw = dict(temperature=1.0, top_p=1.0, max_new_tokens=16, seed=1234)
    small = ev.evaluate_records(engine, Codec(tok), records[:8], samples=2, batch_prompts=3, **kw)
    large = ev.evaluate_records(
        engine, Codec(tok), records[:24][::-1], samples=8, batch_prompts=64, **kw
    )
    by_id = {r["id"]: r for r in large}
    return ([r["completions"] for r in small], [by_id[r["id"]]["completions"][:2] for r in small])
