"""Training sharded over ranks equals training in one process: real torch.distributed processes
(torchrun, FSDP2 on the gloo backend, 2 ranks on a CPU)."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pytest
import torch

from evaluators.benchmarks import aime
from gspo.core.objectives import AGGS
from gspo.io import write_jsonl

HERE = pathlib.Path(__file__).resolve().parent


def torchrun(nproc: int, *args, timeout: int = 600):
    env = dict(os.environ, OMP_NUM_THREADS="1")
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            f"--nproc-per-node={nproc}",
            *map(str, args),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert r.returncode == 0, r.stderr[-4000:]
    return r


@pytest.fixture(scope="module")
def one_update_each(tiny_model_dir, tmp_path_factory):
    """{world size: {(algorithm, agg): saved update}} of tests/dist_update.py at 1 and 2 ranks."""
    root = tmp_path_factory.mktemp("dist")
    data = root / "prompts.jsonl"
    write_jsonl(aime.generate(4, split="train", seed=0, difficulty="easy"), data)
    out = {}
    for n in (1, 2):
        (root / str(n)).mkdir()
        torchrun(n, HERE / "dist_update.py", tiny_model_dir, data, root / str(n))
        out[n] = {tuple(p.stem.split("-", 1)): torch.load(p) for p in (root / str(n)).glob("*.pt")}
    return out


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ["grpo", "gspo", "gspo_token"])
@pytest.mark.parametrize("agg", AGGS)
def test_one_update_on_two_ranks_gives_the_parameters_of_one_rank(
    one_update_each, tiny_model_dir, algorithm, agg
):
    from safetensors.torch import load_file

    one, two = one_update_each[1][(algorithm, agg)], one_update_each[2][(algorithm, agg)]
    assert one["skipped"] == two["skipped"] == 0
    # relative 1e-5 per tensor, in norm: Adam's first step divides each gradient element by its
    # own size, so elements near zero after cancelling sums differ by rounding, elementwise
    for name, p1 in one["params"].items():
        assert (two["params"][name] - p1).norm() <= 1e-5 * p1.norm(), name
    # the update moved the weights far more than that (the comparison is not vacuous) ...
    before = load_file(str(tiny_model_dir / "model.safetensors"))
    assert (
        max(float((one["params"][k] - before[k]).norm() / before[k].norm()) for k in before) > 1e-2
    )
    # ... and the metrics agree: means over the global minibatches, extremes over all ranks, and
    # the gradient norm, which catches a loss normalised by the wrong count (Adam's first step
    # would hide a constant factor in the gradient)
    assert set(one["metrics"]) == set(two["metrics"])
    for k, v in one["metrics"].items():
        assert two["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-7), k


def test_the_kl_reference_model_sharded_on_two_ranks_gives_the_update_of_one(one_update_each):
    one, two = one_update_each[1][("kl",)], one_update_each[2][("kl",)]
    assert one["metrics"]["kl_ref"] > 0  # the penalty is there: the policy moved from it
    for name, p1 in one["params"].items():
        assert (two["params"][name] - p1).norm() <= 1e-5 * p1.norm(), name
    for k, v in one["metrics"].items():
        assert two["metrics"][k] == pytest.approx(v, rel=1e-4, abs=1e-7), k


def test_the_sync_gathers_every_tensor_to_host_memory_in_the_engines_dtype(one_update_each):
    sync = one_update_each[2][("sync",)]
    assert set(sync["half"]) == set(sync["params"])
    for name, h in sync["half"].items():
        assert h.device.type == "cpu" and h.dtype == torch.bfloat16, name
        assert torch.equal(h, sync["params"][name].to(torch.bfloat16)), name


def test_the_vllm_sync_file_is_written_once_per_node_and_read_by_every_rank(one_update_each):
    """Issue 43 #1: the node's local rank 0 alone keeps the gathered weights and writes the
    file; both ranks read that one file (no second copy exists while they read); it is gone
    afterwards; a writer that fails (a full /dev/shm) stops every rank in one line."""
    sync = one_update_each[2][("sync",)]
    r0, r1 = sync["shared"]
    assert r0["kept"] == len(sync["params"]) and r1["kept"] == 0
    assert r0["seen"]["path"] == r1["seen"]["path"]
    assert r0["seen"]["folders"] == r1["seen"]["folders"] == 1
    assert r0["seen"]["tensors"] == r1["seen"]["tensors"] == len(sync["params"])
    assert r0["after"] == r1["after"] == 0
    want = "weight sync failed: rank 0 (the node's writer): OSError: [Errno 28] No space left"
    assert r0["failed"].startswith(want) and r1["failed"] == r0["failed"]
    assert "\n" not in r0["failed"]


def test_only_rank_0_reads_the_weight_files_and_the_others_get_the_same_model(one_update_each):
    one, two = one_update_each[1][("load",)], one_update_each[2][("load",)]
    assert two["reads"][0] and all(p.endswith(".safetensors") for p in two["reads"][0])
    assert two["reads"][1] == []
    # rank 1 built its shards from rank 0's broadcast, the rotary frequencies (a buffer in no
    # state dict) included: its greedy tokens, and the updates above, are one process's
    assert two["greedy"] == one["greedy"]
    assert [len(t) for t in one["greedy"][5]] == [12] * 5 and len(one["greedy"][1]) == 1


TIMING = ("time_", "wall_s")


def _sft_config(tmp, data, out, **extra):
    cfg = tmp / f"{out}.yaml"
    cfg.write_text(
        f"model: tiny\nout_dir: {tmp / out}\ntrain_data: [{{path: {data}, weight: 1.0}}]\n"
        f"eval_data: {data}\neval_problems: 4\neval_every: 2\nsteps: 4\n"
        "batch_size: 8\nlog_every: 1\nlr: 3.0e-3\nwarmup_steps: 1\nmax_len: 160\n"
        # a token budget packs each rank's slice differently: the rank with fewer
        # micro-batches runs empty ones, as FSDP's collectives require
        "max_tokens_per_micro_batch: 300\nthreads: 1\n"
        + "".join(f"{k}: {v}\n" for k, v in extra.items())
    )
    return cfg


def _metrics(folder):
    import json

    return [json.loads(x) for x in (folder / "metrics.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def sft_runs(tmp_path_factory):
    """{(world size, precision): output folder} of a 4-step SFT run of the tiny preset."""
    root = tmp_path_factory.mktemp("sft")
    data = root / "train.jsonl"
    write_jsonl(aime.generate(32, split="train", seed=0, difficulty="easy"), data)
    out = {}
    for n in (1, 2):
        for precision in ("float32", "bfloat16"):
            name = f"sft{n}-{precision}"
            torchrun(
                n,
                "-m",
                "pipeline.sft",
                "--config",
                _sft_config(root, data, name, precision=precision),
            )
            out[n, precision] = root / name
    # the chunked log-prob path (logprob_chunk: decoder, then the LM head in chunks), sharded
    torchrun(
        2,
        "-m",
        "pipeline.sft",
        "--config",
        _sft_config(root, data, "sft2-chunked", logprob_chunk=16),
    )
    out[2, "float32-chunked"] = root / "sft2-chunked"
    return out


@pytest.mark.slow
def test_sft_on_two_ranks_logs_the_metrics_and_ends_at_the_weights_of_one_rank(sft_runs):
    from safetensors.torch import load_file

    one, two = _metrics(sft_runs[1, "float32"]), _metrics(sft_runs[2, "float32"])
    assert [r["step"] for r in one] == [r["step"] for r in two] == [1, 2, 3, 4]
    for a, b in zip(one, two):
        for k in ("loss", "grad_norm", "tokens_trained", "compute_flops", "greedy_accuracy"):
            if k in a or k in b:
                assert b[k] == pytest.approx(a[k], rel=1e-4, abs=1e-6), (a["step"], k)
    assert "greedy_accuracy" in two[2] and "greedy_accuracy" in two[-1]  # the sharded check ran
    w1 = load_file(str(sft_runs[1, "float32"] / "model" / "model.safetensors"))
    w2 = load_file(str(sft_runs[2, "float32"] / "model" / "model.safetensors"))
    init = load_file(str(sft_runs[1, "float32"] / "init" / "model.safetensors"))
    assert w1.keys() == w2.keys()
    for k in w1:
        assert (w2[k] - w1[k]).norm() <= 1e-5 * w1[k].norm(), k
    assert max(float((w1[k] - init[k]).norm() / init[k].norm()) for k in w1) > 1e-2


@pytest.mark.slow
def test_the_chunked_head_on_two_ranks_trains_as_the_whole_logits_on_one(sft_runs):
    # the chunked path calls the decoder and the head outside the model's forward: sharded, it
    # must still gather the root's parameters (embeddings, norm, head) and reduce their grads
    from safetensors.torch import load_file

    one, two = _metrics(sft_runs[1, "float32"]), _metrics(sft_runs[2, "float32-chunked"])
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=1e-4)
    w1 = load_file(str(sft_runs[1, "float32"] / "model" / "model.safetensors"))
    w2 = load_file(str(sft_runs[2, "float32-chunked"] / "model" / "model.safetensors"))
    for k in w1:
        assert (w2[k] - w1[k]).norm() <= 1e-5 * w1[k].norm(), k


@pytest.mark.slow
def test_bf16_training_computes_in_bf16_and_publishes_bf16_files(sft_runs):
    import json

    from safetensors.torch import load_file

    fp32 = _metrics(sft_runs[1, "float32"])
    for n in (1, 2):
        bf16 = _metrics(sft_runs[n, "bfloat16"])
        # the losses follow fp32's to bf16 precision, but not exactly: compute ran in bf16
        assert [r["loss"] for r in bf16] == pytest.approx([r["loss"] for r in fp32], rel=3e-2)
        assert any(a["loss"] != b["loss"] for a, b in zip(bf16, fp32))
        # the files in the compute precision, as published checkpoints are (the fp32 masters
        # an exact resume needs: test_trainer's bf16 resume)
        weights = load_file(str(sft_runs[n, "bfloat16"] / "model" / "model.safetensors"))
        assert all(t.dtype == torch.bfloat16 and torch.isfinite(t).all() for t in weights.values())
        conf = json.loads((sft_runs[n, "bfloat16"] / "model" / "config.json").read_text())
        assert conf["dtype"] == "bfloat16"
    # autocast (one rank) and FSDP's mixed precision (two) agree to bf16 precision
    one, two = _metrics(sft_runs[1, "bfloat16"]), _metrics(sft_runs[2, "bfloat16"])
    assert [r["loss"] for r in two] == pytest.approx([r["loss"] for r in one], rel=3e-2)


def _rl_config(tmp, model, data, out, steps=3, minibatches=2):
    cfg = tmp / f"{out}.yaml"
    cfg.write_text(
        f"algorithm: gspo\nmodel: {model}\nout_dir: {tmp / out}\n"
        f"train_data: [{{path: {data}, weight: 1.0}}]\nsteps: {steps}\n"
        "prompts_per_step: 4\ngroup_size: 4\n"
        f"minibatches: {minibatches}\nmax_new_tokens: 32\n"
        "lr: 1.0e-3\nckpt_every: 2\nthreads: 1\n"
    )
    return cfg


@pytest.mark.slow
def test_a_three_step_rl_run_on_two_ranks_logs_the_metrics_of_one_rank(
    toy_sft_model, toy_data, tmp_path
):
    import json

    from safetensors.torch import load_file

    data = toy_data / "train.jsonl"  # an SFT'd model on it: rewards vary, updates move
    rows = {}
    for n in (1, 2):
        # One minibatch per step, so every update is on-policy and its ratios are 1 within
        # rounding. Clipping is a step function of the ratio: off-policy, where ratios spread
        # over [0.002, 4] at this learning rate, some sit within rounding of a clip edge, the
        # ranks' reduction order flips them and the later updates differ by more than
        # rounding. The off-policy update's parity on fixed data is dist_update.py's.
        cfg = _rl_config(tmp_path, toy_sft_model, data, f"rl{n}", minibatches=1)
        torchrun(n, "-m", "pipeline.train", "--config", cfg)
        rows[n] = [
            json.loads(x) for x in (tmp_path / f"rl{n}" / "metrics.jsonl").read_text().splitlines()
        ]
        assert (tmp_path / f"rl{n}" / "model" / "model.safetensors").is_file()
    assert [r["step"] for r in rows[1]] == [r["step"] for r in rows[2]] == [1, 2, 3]
    for one, two in zip(rows[1], rows[2]):
        keys = {k for k in one if not k.startswith(TIMING)}
        assert keys == {k for k in two if not k.startswith(TIMING)}
        for k in keys:
            if k.startswith("logprob_gap"):  # engine vs trainer: rounding itself, measured
                assert max(one[k], two[k]) < 1e-4, (one["step"], k)
                continue
            assert two[k] == pytest.approx(one[k], rel=1e-4, abs=1e-6), (one["step"], k)
    # the samples were the same: every rollout token generated and trained counted alike
    assert rows[2][-1]["tokens_generated"] == rows[1][-1]["tokens_generated"] > 0
    # not vacuous: groups had reward variance, so the updates moved the weights
    assert any(r["grad_norm"] > 0 and r["zero_variance_groups"] < 1 for r in rows[1])
    summary = json.loads((tmp_path / "rl2" / "summary.json").read_text())
    assert summary["world_size"] == 2

    # a checkpoint written by 2 ranks resumes on 1: the optimizer's Distributed Checkpoint
    # shards are resharded on load, and the run goes on as the 1-rank run did
    cfg = _rl_config(tmp_path, toy_sft_model, data, "moved", steps=2, minibatches=1)
    torchrun(2, "-m", "pipeline.train", "--config", cfg)
    assert (
        tmp_path / "moved" / "checkpoints" / "step_000002" / "optimizer" / ".metadata"
    ).is_file()
    torchrun(1, "-m", "pipeline.train", "--config", cfg, "--set", "steps=3")
    moved = _metrics(tmp_path / "moved")
    assert json.loads((tmp_path / "moved" / "run_info.json").read_text())["resumed_from"].endswith(
        "step_000002"
    )
    for k in (k for k in rows[1][2] if not k.startswith((*TIMING, "logprob_gap"))):
        assert moved[2][k] == pytest.approx(rows[1][2][k], rel=1e-4, abs=1e-6), k
    a = load_file(str(tmp_path / "rl1" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "moved" / "model" / "model.safetensors"))
    for k in a:
        assert (b[k] - a[k]).norm() <= 1e-5 * a[k].norm(), k


def kill_all(marker: str) -> None:
    """SIGKILL every process whose command line mentions `marker`; return once none is left."""
    import signal
    import time

    for _ in range(100):
        pids = []
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmd = pathlib.Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmd and int(pid) != os.getpid():
                pids.append(int(pid))
        if not pids:
            return
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.1)
    raise AssertionError(f"processes of {marker} survive SIGKILL")


@pytest.mark.slow
def test_a_two_rank_run_killed_and_started_again_ends_at_the_uninterrupted_runs_weights(
    toy_sft_model, toy_data, tmp_path
):
    import signal
    import time

    from safetensors.torch import load_file

    data = toy_data / "train.jsonl"  # an SFT'd model on it: rewards vary, updates move
    # 8 steps, checkpoints every 2: the kill lands mid-run even when this process, sharing the
    # cores with both ranks, notices the first checkpoint late
    full = _rl_config(tmp_path, toy_sft_model, data, "full", steps=8)
    torchrun(2, "-m", "pipeline.train", "--config", full)
    cut = _rl_config(tmp_path, toy_sft_model, data, "cut", steps=8)
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node=2",
        "-m",
        "pipeline.train",
        "--config",
        str(cut),
    ]
    proc = subprocess.Popen(
        cmd,
        env=dict(os.environ, OMP_NUM_THREADS="1"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.time() + 300
    while not (tmp_path / "cut" / "checkpoints" / "step_000002").is_dir():
        assert proc.poll() is None and time.time() < deadline, "no checkpoint at step 2"
        time.sleep(0.02)
    # every rank and the launcher at once, no clean-up (torchrun starts the ranks in sessions
    # of their own, so the launcher's process group alone would leave them running)
    os.killpg(proc.pid, signal.SIGKILL)
    kill_all(str(cut))
    proc.wait(timeout=60)
    assert not (tmp_path / "cut" / "model").exists()
    torchrun(2, "-m", "pipeline.train", "--config", cut)  # the same command again
    a = load_file(str(tmp_path / "full" / "model" / "model.safetensors"))
    b = load_file(str(tmp_path / "cut" / "model" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    start = load_file(str(toy_sft_model / "model.safetensors"))
    assert any(not torch.equal(a[k], start[k]) for k in start)  # the run did train
    import json

    rows = [json.loads(x) for x in (tmp_path / "cut" / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == list(range(1, 9))
    info = json.loads((tmp_path / "cut" / "run_info.json").read_text())
    assert info["resumed_from"].split("step_")[-1] in ("000002", "000004", "000006")  # mid-run


@pytest.mark.slow
def test_two_ranks_with_a_vllm_engine_each_sample_and_train_as_one_rank(
    toy_sft_model, toy_data, tmp_path
):
    """One vLLM engine per rank (CPU build here; on GPUs each on its rank's GPU): per-prompt
    seeds give the same samples, and each engine's weight sync keeps its log-probs the
    policy's."""
    rows = {}
    for n in (1, 2):
        cfg = _rl_config(tmp_path, toy_sft_model, toy_data / "train.jsonl", f"vllm{n}", steps=2)
        with open(cfg, "a") as f:
            f.write("old_logprobs: rollout\nrollout: {engine: vllm}\n")
        torchrun(n, "-m", "pipeline.train", "--config", cfg)
        rows[n] = _metrics(tmp_path / f"vllm{n}")
    for one, two in zip(rows[1], rows[2]):
        for k in ("reward_mean", "tokens_generated", "response_length", "loss", "grad_norm"):
            assert two[k] == pytest.approx(one[k], rel=1e-4, abs=1e-6), (one["step"], k)
        # step 2 samples after a weight sync on every rank: the engines hold the new policy
        assert two["logprob_gap_token_max"] < 1e-3
    assert rows[2][0]["grad_norm"] > 0 and rows[2][0]["zero_variance_groups"] < 1
