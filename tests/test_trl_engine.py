"""engine: trl (gspo.engines.trl.rl): every RLConfig field mapped or refused, the docs' table equal to
the code's, and real TRL runs: the native trainer's prompts, checkpoints evaluation loads,
metrics under this project's names in MLflow, and a kill -9 resumed."""

import dataclasses
import json
import pathlib
import re
import signal
import subprocess
import sys
import time

import pytest
import torch

from gspo.config.fields import ConfigError
from gspo.config.train import DataSource, RLConfig, RolloutConfig
from gspo.engines.trl import rl as trl_engine

ROOT = pathlib.Path(__file__).resolve().parents[1]
DATA = [DataSource(path="x.jsonl")]


def cfg_of(**kw) -> RLConfig:
    return RLConfig(**{"engine": "trl", "train_data": DATA, **kw})


# a value TRL cannot honour, per refused field (RLConfig itself accepts each)
REFUSED = {
    "algorithm": [dict(algorithm="gspo_token"), dict(algorithm="gmpo")],
    "agg": [
        dict(algorithm="gspo", agg="seq-mean-token-sum-norm"),
        dict(algorithm="cispo", agg="seq-mean-token-mean"),
        dict(algorithm="luspo", agg="seq-mean-token-mean"),
        dict(algorithm="vespo", agg="seq-mean-token-mean"),
    ],
    "opsm_threshold": [dict(opsm_threshold=0.5, rollout=RolloutConfig(engine="vllm"))],
    "eps_low": [dict(algorithm="cispo", eps_low=0.2)],
    "micro_batch_size": [dict(agg="token-mean", micro_batch_size=8)],
    "max_tokens_per_micro_batch": [dict(agg="token-mean", max_tokens_per_micro_batch=512)],
    "logprob_chunk": [dict(logprob_chunk=16)],
    "overlong_buffer": [dict(algorithm="dapo", dynamic_sampling=False)],
    "dynamic_sampling": [dict(dynamic_sampling=True)],
    "dynamic_sampling_max_rounds": [dict(dynamic_sampling_max_rounds=5)],
    "rollout_correction": [dict(rollout_correction="token_truncate")],
    "rollout_correction_min": [dict(rollout_correction_min=0.5)],
    "rollout_correction_max": [dict(rollout_correction_max=2.0)],
    "icepop_min": [dict(rollout_correction="icepop", icepop_min=0.3)],
    "icepop_max": [dict(rollout_correction="icepop", icepop_max=3.0)],
    "routing_replay": [dict(routing_replay=True)],
    "routing_replay_source": [dict(routing_replay=True, routing_replay_source="engine")],
    "router_aux_loss_coef": [dict(router_aux_loss_coef=0.01)],
    "log_ratio_clamp": [dict(log_ratio_clamp=10.0)],
    "old_logprobs": [dict(old_logprobs="rollout")],
    "staleness": [dict(staleness=1)],
    "rollout": [
        dict(rollout=RolloutConfig(dtype="bfloat16")),
        dict(rollout=RolloutConfig(max_model_len=256)),
    ],
}
# a changed value, per field TRL receives: it must change GRPOConfig's arguments
MAPPED = {
    "algorithm": "grpo",
    "steps": 7,
    "prompts_per_step": 8,
    "group_size": 4,
    "minibatches": 2,
    "epochs": 2,
    "micro_batch_size": 8,
    "activation_checkpointing": True,
    "precision": "bfloat16",
    "lr": 1e-4,
    "warmup_steps": 2,
    "weight_decay": 0.1,
    "grad_clip": 0.5,
    "eps_low": 1e-4,
    "eps_high": 1e-3,
    "agg": "token-mean",
    "adv_scale": "none",
    "mask_truncated": True,
    "kl_coef": 0.1,
    "temperature": 0.7,
    "top_p": 0.9,
    "max_new_tokens": 32,
    "ckpt_every": 5,
    "seed": 3,
    "device": "cuda",
    "opsm_threshold": 0.5,
}
# fields the harness itself honours around TRL (FIELDS says how), and sapo's (mapped for sapo)
HARNESS = {
    "engine",
    "model",
    "out_dir",
    "train_data",
    "prompt",
    "reward_workers",
    "keep_last",
    "keep_steps",
    "resume",
    "max_consecutive_nonfinite",
    "threads",
    "moe_metrics",
    "peak_flops",
    "log_samples_every",
    "sapo_tau_pos",
    "sapo_tau_neg",
    "vespo_k_pos",  # and vespo's (mapped for vespo)
    "vespo_lambda_pos",
    "vespo_k_neg",
    "vespo_lambda_neg",
    "verl",
}  # engine: verl's settings, which RLConfig refuses with any other engine


# the settings of objectives TRL lacks: refused with them (the objective first)
WITH_OBJECTIVE = {
    "dppo_is_cap": ("dppo_tv", 5.0),
    "clip_cov_ratio": ("clip_cov", 0.01),
    "clip_cov_lb": ("clip_cov", 0.5),
    "clip_cov_ub": ("clip_cov", 6.0),
    "kl_cov_ratio": ("kl_cov", 0.01),
    "kl_cov_coef": ("kl_cov", 1.0),
}


def test_every_rlconfig_field_is_mapped_refused_or_honoured_by_the_harness():
    fields = {f.name for f in dataclasses.fields(RLConfig)}
    assert set(trl_engine.FIELDS) == fields
    assert set(MAPPED) | set(REFUSED) | HARNESS | set(WITH_OBJECTIVE) == fields
    for field, (algorithm, value) in WITH_OBJECTIVE.items():
        why = dict(trl_engine.refusals(cfg_of(algorithm=algorithm, **{field: value})))
        assert set(why) == {"algorithm", field}, field
    base = trl_engine.grpo_args(cfg_of())
    for field, value in MAPPED.items():
        assert trl_engine.grpo_args(cfg_of(**{field: value})) != base, field
    sapo = trl_engine.grpo_args(cfg_of(algorithm="sapo"))
    assert trl_engine.grpo_args(cfg_of(algorithm="sapo", sapo_tau_neg=1.25)) != sapo
    vespo = trl_engine.grpo_args(cfg_of(algorithm="vespo"))
    for field in ("vespo_k_pos", "vespo_lambda_pos", "vespo_k_neg", "vespo_lambda_neg"):
        changed = trl_engine.grpo_args(cfg_of(algorithm="vespo", **{field: 1.5}))
        assert changed != vespo and changed[field] == 1.5, field


@pytest.mark.parametrize("field", list(REFUSED))
def test_a_value_trl_cannot_honour_is_a_one_line_error_naming_the_field(field):
    for kw in REFUSED[field]:
        cfg = cfg_of(**kw)  # a valid config for the native trainer
        assert field in [f for f, _ in trl_engine.refusals(cfg)], kw
        with pytest.raises(ConfigError) as e:
            trl_engine.check(cfg)
        msg = str(e.value)
        assert "\n" not in msg and "engine: trl" in msg and msg.split(":")[0] in REFUSED


def test_the_defaults_and_each_supported_objective_pass():
    for algorithm in ("grpo", "gspo", "dr_grpo", "cispo", "sapo", "luspo", "vespo"):
        trl_engine.check(cfg_of(algorithm=algorithm))
    trl_engine.check(cfg_of(algorithm="dapo", dynamic_sampling=False, overlong_buffer=0))
    args = trl_engine.grpo_args(cfg_of(algorithm="gspo"))
    assert (args["loss_type"], args["importance_sampling_level"]) == ("grpo", "sequence")
    assert (args["epsilon"], args["epsilon_high"]) == (3e-4, 4e-4) and args["beta"] == 0.0
    grpo = trl_engine.grpo_args(cfg_of(algorithm="grpo", agg="token-mean"))
    assert (grpo["loss_type"], grpo["importance_sampling_level"]) == ("bnpo", "token")
    assert trl_engine.grpo_args(cfg_of(algorithm="cispo"))["epsilon_high"] == 5.0


@pytest.mark.parametrize(
    "kw, loss_type, level",
    [
        (dict(algorithm="grpo"), "grpo", "token"),
        (dict(algorithm="gspo"), "grpo", "sequence"),
        (dict(algorithm="gspo", agg="token-mean"), "bnpo", "sequence"),
        (dict(algorithm="dapo", dynamic_sampling=False, overlong_buffer=0), "bnpo", "token"),
        (dict(algorithm="dr_grpo"), "dr_grpo", "token"),
        (dict(algorithm="cispo"), "cispo", "token"),
        (dict(algorithm="sapo"), "sapo", "token"),
        (dict(algorithm="luspo"), "luspo", "sequence"),
        (dict(algorithm="vespo"), "vespo", "token"),
        (dict(opsm_threshold=0.5), "grpo", "sequence"),
        (dict(micro_batch_size=8), "grpo", "sequence"),
    ],
)
def test_trls_own_config_accepts_each_mapping(tmp_path, kw, loss_type, level):
    args = trl_engine._trl().GRPOConfig(
        output_dir=str(tmp_path), **trl_engine.grpo_args(cfg_of(**kw))
    )
    assert (args.loss_type, args.importance_sampling_level) == (loss_type, level)
    # TRL's generation batch is the rollout batch: prompts_per_step x group_size
    assert args.generation_batch_size == 16 * 8


def test_several_ranks_ask_trl_for_fsdp2_and_one_rank_for_nothing(tmp_path):
    from gspo.engines.trl import fsdp as trl_fsdp
    from gspo.engines.trl import sft as trl_sft

    assert "fsdp" not in trl_engine.grpo_args(cfg_of())
    args = trl_engine._trl().GRPOConfig(
        output_dir=str(tmp_path), **trl_engine.grpo_args(cfg_of(), world_size=2)
    )
    # what accelerate's FullyShardedDataParallelPlugin is built from
    plugin = args.fsdp_plugin_args
    assert plugin["fsdp_version"] == 2 and plugin["state_dict_type"] == "FULL_STATE_DICT"
    assert plugin["auto_wrap_policy"] == "TRANSFORMER_BASED_WRAP"
    assert plugin["reshard_after_forward"] is True
    sft = trl_sft.sft_args(trl_sft.SFTConfig(model="tiny", train_data=DATA, batch_size=8), 2)
    assert {k: sft[k] for k in ("fsdp", "fsdp_config")} == trl_fsdp.fsdp_args(2)


def test_a_run_on_several_ranks_that_accelerate_does_not_shard_with_fsdp2_stops():
    from accelerate import Accelerator

    from gspo.engines.trl import fsdp as trl_fsdp
    from gspo.errors import TrainingError

    acc = Accelerator(cpu=True)  # one process: accelerate's NO
    assert trl_fsdp.check_sharded(acc, 1) == "none"
    with pytest.raises(
        TrainingError,
        match=r"^engine: trl: accelerate prepared none, not "
        r"FSDP2, on 2 ranks",
    ):
        trl_fsdp.check_sharded(acc, 2)


def test_the_docs_table_is_the_codes_mapping():
    text = (ROOT / "docs" / "ENGINES.md").read_text().split("## What TRL receives")[1]
    text = text.split("\n## ")[0]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", text, re.M))
    assert rows == trl_engine.FIELDS


# -- real TRL runs -----------------------------------------------------------------------------


def _yaml(tmp_path, model, data, *, steps, ckpt_every, extra="", new_tokens=8) -> pathlib.Path:
    cfg = tmp_path / "rl.yaml"
    cfg.write_text(
        f"engine: trl\nalgorithm: gspo\nmodel: {model}\nout_dir: {tmp_path / 'rl'}\n"
        f"train_data: [{{path: {data}, weight: 1.0}}]\nsteps: {steps}\n"
        f"prompts_per_step: 2\ngroup_size: 4\nminibatches: 2\n"
        f"max_new_tokens: {new_tokens}\n"
        f"ckpt_every: {ckpt_every}\nthreads: 1\n{extra}"
    )
    return cfg


@pytest.mark.slow
def test_trl_trains_on_the_native_trainers_prompts_and_saves_checkpoints_evaluation_loads(
    tmp_path, tiny_model_dir, aime_prompts
):
    from gspo.config.fields import load
    from gspo.model.models import load_model
    from gspo.native.data import Mix

    cfg = load(
        RLConfig,
        _yaml(
            tmp_path,
            tiny_model_dir,
            aime_prompts,
            steps=3,
            ckpt_every=2,
            extra="peak_flops: 1.0e+12\nlog_samples_every: 2\n",
        ),
    )
    seen = []

    def reward_fn(records, completions):
        seen.append([r["id"] for r in records])
        return [float(len(c) % 2) for c in completions]

    model = trl_engine.train(cfg, reward_fn)
    mix = Mix(cfg.train_data)
    want = [[r["id"] for r in mix.sample(2, seed=0, step=s) for _ in range(4)] for s in range(3)]
    assert seen == want  # step k: the native trainer's step-k prompts
    ckpts = sorted(p.name for p in (tmp_path / "rl" / "checkpoints").iterdir())
    assert ckpts == ["step_000002", "step_000003"]  # every ckpt_every, and the last
    assert [p.name for p in (tmp_path / "rl" / "trl").glob("checkpoint-*")] == ["checkpoint-6"]
    final, _ = load_model(model)
    last, _ = load_model(tmp_path / "rl" / "checkpoints" / "step_000003")
    start, _ = load_model(tiny_model_dir)
    diff = [not torch.equal(a, b) for a, b in zip(final.parameters(), start.parameters())]
    assert any(diff)  # it learned something
    assert all(torch.equal(a, b) for a, b in zip(final.parameters(), last.parameters()))
    from gspo.infra.checkpoint import checkpoint_meta

    meta = checkpoint_meta(tmp_path / "rl" / "checkpoints" / "step_000002")  # what eval records
    assert meta["step"] == 2 and meta["stage"] == "rl" and meta["compute_flops"] > 0
    recs = [json.loads(line) for line in (tmp_path / "rl" / "metrics.jsonl").open()]
    assert [r["step"] for r in recs] == [1, 2, 3]
    for r in recs:
        assert {
            "reward_mean",
            "clip_frac_seqs",
            "entropy",
            "grad_norm",
            "response_length",
            "compute_flops",
            "time_step_s",
            "time_rollout_s",
            "time_update_s",
            "trl/reward",
            "trl/clip_ratio/region_mean",
        } <= set(r)
        assert r["time_step_s"] == pytest.approx(r["time_rollout_s"] + r["time_update_s"])
    flops = [r["compute_flops"] for r in recs]
    # MFU from the harness's clock: each phase's passes over the step's F(L) (2 minibatches,
    # 1 epoch: TRL makes an old-log-prob pass), against peak_flops
    forward = [(b - a) / (1 + 1 + 3) for a, b in zip([0.0] + flops, flops)]
    for r, f in zip(recs, forward):
        assert r["mfu_rollout"] == pytest.approx(2 * f / (r["time_rollout_s"] * 1e12), rel=1e-6)
        assert r["mfu_update"] == pytest.approx(3 * f / (r["time_update_s"] * 1e12), rel=1e-6)
    assert 0 < flops[0] < flops[1] < flops[2]
    assert json.loads((tmp_path / "rl" / "summary.json").read_text())["engine"] == "trl"
    # step 2's samples as the reward function saw them, the prompts rendered as TRL got them
    (logged,) = (tmp_path / "rl" / "samples").iterdir()
    rows = [json.loads(line) for line in logged.open()]
    assert logged.name == "step_000002.jsonl" and len(rows) == 8
    assert [r["reward"] for r in rows] == [float(len(r["completion"]) % 2) for r in rows]
    assert {r["prompt"] for r in rows} == {rec["prompt"] for rec in mix.sample(2, seed=0, step=1)}
    assert {r["ratio"] for r in rows} == {None}  # TRL does not say


@pytest.mark.slow
def test_a_trl_run_killed_with_sigkill_resumes_into_the_same_mlflow_run_and_numbers(
    tmp_path, tiny_model_dir, aime_prompts
):
    from gspo.tracking.runs import read_metrics

    db = tmp_path / "mlflow.db"
    flags = ["--tracking-uri", f"sqlite:///{db}", "--experiment", "t", "--tag", "suite=tests"]
    cmd = [
        sys.executable,
        "-m",
        "pipeline.train",
        "--config",
        str(_yaml(tmp_path, tiny_model_dir, aime_prompts, steps=12, ckpt_every=2)),
        *flags,
    ]
    # the reference: the same run uninterrupted, in another folder
    ref_cfg = tmp_path / "ref"
    ref_cfg.mkdir()
    ref = _yaml(ref_cfg, tiny_model_dir, aime_prompts, steps=12, ckpt_every=2)
    r = subprocess.run(
        [sys.executable, "-m", "pipeline.train", "--config", str(ref)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr[-3000:]

    with open(tmp_path / "stderr.txt", "w") as err:
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    ckpts = tmp_path / "rl" / "checkpoints"
    deadline = time.time() + 300
    while not (ckpts / "step_000002").is_dir():
        assert proc.poll() is None, (tmp_path / "stderr.txt").read_text()[-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    proc.send_signal(signal.SIGKILL)
    assert proc.wait(timeout=60) == -signal.SIGKILL  # killed mid-run, not after its end
    r = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]

    mine = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    theirs = read_metrics(ref_cfg / "rl" / "metrics.jsonl")
    assert [m["step"] for m in mine] == list(range(1, 13))
    for a, b in zip(mine, theirs):  # TRL's resume restores its RNG: the same samples
        assert a["reward_mean"] == b["reward_mean"] and a["loss"] == b["loss"], a["step"]
    import mlflow

    cl = mlflow.MlflowClient(f"sqlite:///{db}")
    (run,) = cl.search_runs([cl.get_experiment_by_name("t").experiment_id])
    assert run.info.status == "FINISHED" and run.data.params["engine"] == "trl"
    assert 2 <= int(run.data.tags["resumed_at_step"]) < 12
    hist = sorted((m.step, m.value) for m in cl.get_metric_history(run.info.run_id, "reward_mean"))
    assert hist == [(m["step"], m["reward_mean"]) for m in mine]  # each step exactly once


@pytest.mark.slow
def test_trl_on_two_ranks_shards_with_fsdp2_counts_both_ranks_and_resumes_a_kill_9(
    tmp_path, toy_sft_model, toy_data
):
    """Two CPU ranks take the FSDP2 path a GPU run takes (gspo.engines.trl.fsdp), not DDP: rank 0 alone
    writes, both ranks' compute is counted, and a run whose ranks are all killed with -9 resumes
    from TRL's FSDP checkpoint (whole model, optimizer) to the same numbers and weights."""
    import mlflow

    from gspo.model.models import load_model
    from gspo.tracking.runs import read_metrics

    def cmd(d: pathlib.Path) -> list[str]:
        d.mkdir()
        cfg = _yaml(
            d,
            toy_sft_model,
            toy_data / "train.jsonl",
            steps=4,
            ckpt_every=2,
            new_tokens=24,
            extra="lr: 1.0e-2\nepochs: 2\n",
        )
        return [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "pipeline.train",
            "--config",
            str(cfg),
            "--tracking-uri",
            f"sqlite:///{d / 'mlflow.db'}",
            "--experiment",
            "t",
        ]

    ref, killed = tmp_path / "ref", tmp_path / "killed"
    r = subprocess.run(cmd(ref), cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    recs = read_metrics(ref / "rl" / "metrics.jsonl")
    assert [x["step"] for x in recs] == [1, 2, 3, 4]
    assert any(x["loss"] != 0 for x in recs)  # rewards varied: it trained
    # each step's tokens: both ranks' shares (TRL's mean length is over the gathered batch)
    before = 0
    for x in recs:
        assert x["tokens_generated"] - before == round(x["response_length"] * 2 * 4)
        before = x["tokens_generated"]
    summary = json.loads((ref / "rl" / "summary.json").read_text())
    assert summary["world_size"] == 2 and summary["tokens_generated"] == before
    assert summary["sharding"] == "fsdp2"  # as on GPUs (gspo.engines.trl.fsdp), not DDP
    assert sorted(p.name for p in (ref / "rl" / "checkpoints").iterdir()) == [
        "step_000002",
        "step_000004",
    ]
    # the export keeps the model, not TRL's FSDP files, and the tied head once (as native runs)
    assert not list((ref / "rl" / "checkpoints").glob("*/*.bin"))
    from safetensors import safe_open

    with safe_open(ref / "rl" / "model" / "model.safetensors", "pt") as f:
        assert "lm_head.weight" not in f.keys() and "model.embed_tokens.weight" in f.keys()

    run = cmd(killed)
    with open(killed / "stderr.txt", "w") as err:
        proc = subprocess.Popen(run, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=err)
    deadline = time.time() + 300
    while not (killed / "rl" / "checkpoints" / "step_000002").is_dir():
        assert proc.poll() is None, (killed / "stderr.txt").read_text()[-3000:]
        assert time.time() < deadline
        time.sleep(0.05)
    # every process of the run at once: torchrun and its ranks (in sessions of their own)
    import psutil  # accelerate's dependency

    for p in [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(recursive=True)]:
        p.kill()
    assert proc.wait(timeout=60) == -signal.SIGKILL
    r = subprocess.run(run, cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    mine = read_metrics(killed / "rl" / "metrics.jsonl")
    assert [(m["reward_mean"], m["loss"]) for m in mine] == [
        (x["reward_mean"], x["loss"]) for x in recs
    ]
    a, _ = load_model(ref / "rl" / "model")
    b, _ = load_model(killed / "rl" / "model")
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))
    cl = mlflow.MlflowClient(f"sqlite:///{killed / 'mlflow.db'}")
    (got,) = cl.search_runs([cl.get_experiment_by_name("t").experiment_id])
    assert got.info.status == "FINISHED" and got.data.params["engine"] == "trl"
    assert 2 <= int(got.data.tags["resumed_at_step"]) < 4


def test_the_real_scale_rl_settings_under_trl_stop_at_the_first_field_it_refuses(tmp_path):
    import yaml

    from gspo.config.fields import load

    rl = yaml.safe_load((ROOT / "config" / "real-scale.yaml").read_text())["rl"]
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump({**rl, "engine": "trl", "train_data": [{"path": "x.jsonl"}]}))
    cfg = load(RLConfig, path)
    refused = [f for f, _ in trl_engine.refusals(cfg)]
    # what the config's comment says engine: trl refuses there; its token budget it honours
    assert refused == ["logprob_chunk"]
    with pytest.raises(ConfigError, match=r"^logprob_chunk: not supported with "):
        trl_engine.check(cfg)


@pytest.mark.slow
def test_trl_samples_through_the_projects_vllm_engine_with_the_native_trainers_seeds(
    tmp_path, toy_data, toy_sft_model
):
    """rollout.engine: vllm under TRL (gspo.engines.trl.rollout): the native trainer and TRL sample
    step 1 with the same seeds from the same model, so the same responses; each makes one
    on-policy update of the whole batch (the same loss up to rounding: tests/test_conformance),
    and step 2 samples alike again only if the new weights reached TRL's engine."""
    from evaluators.tasks import rewards
    from gspo.native.trainer import run_rl
    from gspo.tracking.runs import read_metrics

    kw = dict(
        algorithm="gspo",
        model=str(toy_sft_model),
        steps=2,
        prompts_per_step=4,
        group_size=4,
        minibatches=1,
        lr=1e-2,
        max_new_tokens=32,
        threads=1,
        train_data=[DataSource(str(toy_data / "train.jsonl"))],
        rollout=RolloutConfig(engine="vllm", dtype="bfloat16"),
    )
    run_rl(RLConfig(out_dir=str(tmp_path / "native"), **kw), rewards)
    trl_engine.train(RLConfig(engine="trl", out_dir=str(tmp_path / "trl"), **kw), rewards)
    native, trl = (read_metrics(tmp_path / r / "metrics.jsonl") for r in ("native", "trl"))
    assert [r["step"] for r in trl] == [1, 2]
    for a, b in zip(native, trl):
        assert (b["reward_mean"], b["response_length"]) == (a["reward_mean"], a["response_length"])
    assert native[0]["response_length"] != native[1]["response_length"]  # the update mattered
