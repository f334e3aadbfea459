"""engine: verl (gspo.engines.verl.job, issue 24), as far as a CPU can take it: every RLConfig field
mapped or refused; the mapped config composed and validated by verl 0.9.1's own code (Hydra's
compose API over its config folder, then the checks its main_ppo runs) for every algorithm and
replay mode; the job pipeline.verl writes; a run in verl's saved layout (its checkpoints' Hugging
Face folders, its own file logger's metrics) collected by pipeline.train, tracked in MLflow and
evaluated; the launcher's Ray cluster plan; and config/moe-30b.yaml planned on the SLURM profile
with verl's environment. verl's trainer itself needs GPUs: it has not run here."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest
import torch
import yaml

from gspo.config.fields import ConfigError
from gspo.config.train import DataSource, PromptConfig, RLConfig, RolloutConfig, VerlConfig
from gspo.engines.verl import job as verl_engine
from test_conformance_verl import ROOT, run_verl

ALGORITHMS = tuple(verl_engine.LOSS_MODE)  # every objective verl has (the registry's)
READ = {
    "loss_mode": "actor_rollout_ref.actor.policy_loss.loss_mode",
    "low": "actor_rollout_ref.actor.clip_ratio_low",
    "high": "actor_rollout_ref.actor.clip_ratio_high",
    "dual": "actor_rollout_ref.actor.clip_ratio_c",
    "agg": "actor_rollout_ref.actor.loss_agg_mode",
    "std": "algorithm.norm_adv_by_std_in_grpo",
    "mini": "actor_rollout_ref.actor.ppo_mini_batch_size",
    "n": "actor_rollout_ref.rollout.n",
    "replay": "actor_rollout_ref.actor.megatron.router_replay.mode",
    "rollout_replay": "actor_rollout_ref.rollout.enable_rollout_routing_replay",
    "tp": "actor_rollout_ref.actor.megatron.tensor_model_parallel_size",
    "ep": "actor_rollout_ref.actor.megatron.expert_model_parallel_size",
    "clip_cov_ratio": "actor_rollout_ref.actor.policy_loss.clip_cov_ratio",
    "kl_cov_coef": "actor_rollout_ref.actor.policy_loss.ppo_kl_coef",
    "scale": "actor_rollout_ref.actor.loss_scale_factor",
}


def gpu_cfg(**kw) -> RLConfig:
    """An RL config verl can run (GPUs, bf16, chat prompts, vLLM rollouts)."""
    base = dict(
        train_data=[DataSource("x.jsonl")],
        engine="verl",
        precision="bfloat16",
        device="cuda",
        prompt=PromptConfig(format="chat"),
        rollout=RolloutConfig(engine="vllm", device="cuda"),
        prompts_per_step=16,
        group_size=8,
        minibatches=4,
        max_new_tokens=256,
    )
    if kw.get("algorithm") == "dapo":  # DAPO's overlong buffer and dynamic sampling: refused
        base.update(overlong_buffer=0, dynamic_sampling=False, mask_truncated=False)
    return RLConfig(**{**base, **kw})


def megatron(**kw) -> RLConfig:
    return gpu_cfg(verl=VerlConfig(strategy="megatron", tensor_parallel=4, expert_parallel=8), **kw)


def replay(source: str | None) -> dict:
    return {} if source is None else dict(routing_replay=True, routing_replay_source=source)


def case(cfg: RLConfig, nodes: int = 2, gpus: int = 8) -> dict:
    return {
        "kind": "config",
        "name": verl_engine.config_name(cfg),
        "read": list(READ.values()),
        "overrides": verl_engine.overrides(cfg, "/job")
        + [f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={gpus}"],
    }


def moe_30b_configs() -> dict[str, RLConfig]:
    """config/moe-30b.yaml's RL configs, as the workflow resolves them (rl, then the variant)."""
    from gspo.config.fields import from_dict
    from gspo_workflow.plan import deep_merge

    cfg = yaml.safe_load((ROOT / "config" / "moe-30b.yaml").read_text())
    runs = {a: {"algorithm": a} for a in cfg["algorithms"]}
    runs.update({k: {"algorithm": v["algorithm"], **v["rl"]} for k, v in cfg["variants"].items()})
    return {
        name: from_dict(
            RLConfig,
            deep_merge(
                {**cfg["rl"], "train_data": [{"path": "x.jsonl"}], "prompt": cfg["prompt"]}, over
            ),
        )
        for name, over in runs.items()
    }


# Qwen3-30B-A3B's shape (its config.json), for Megatron's TransformerConfig
QWEN3_30B_A3B = dict(
    num_layers=48,
    hidden_size=2048,
    num_attention_heads=32,
    num_query_groups=4,
    ffn_hidden_size=6144,
    num_moe_experts=128,
    moe_router_topk=8,
    moe_ffn_hidden_size=768,
)
# the overrides issue 42 added (ETP, CP, recompute, Adam's betas for Megatron, the Ray env)
BEFORE = (
    "expert_tensor_parallel_size",
    "context_parallel_size",
    "recompute_",
    "override_optimizer_config",
    "CUDA_DEVICE_MAX_CONNECTIONS",
)


def megatron_case(cfg: RLConfig) -> dict:
    return {**case(cfg), "kind": "megatron", "shape": QWEN3_30B_A3B}


@pytest.fixture(scope="module")
def verl_says(tmp_path_factory):
    """verl's own composition and validation of every case, in one verl process."""
    sys.path.insert(0, str(ROOT / "workflow"))
    cases = {f"fsdp-{a}": case(gpu_cfg(algorithm=a), nodes=1) for a in ALGORITHMS}
    cases.update(
        {
            f"megatron-{a}-{src}": case(megatron(algorithm=a, **replay(src)))
            for a in ALGORITHMS
            for src in (None, "trainer", "engine")
        }
    )
    cases.update({f"moe-30b-{name}": case(c) for name, c in moe_30b_configs().items()})
    # 3 prompts x 8 samples do not split over 16 GPUs: verl's own check says so
    cases["bad-batch"] = case(gpu_cfg(prompts_per_step=3, minibatches=1))
    # R2 records routes in the old-log-prob pass, which bypass mode skips
    r2_bypass = megatron(algorithm="grpo", **replay("trainer"))
    cases["bad-r2-bypass"] = {
        **case(r2_bypass),
        "overrides": case(r2_bypass)["overrides"]
        + ["algorithm.rollout_correction.bypass_mode=true"],
    }
    # what verl's Megatron engine hands Megatron-Core, for every moe-30b run, and two controls:
    # the overrides as they were before issue 42, and without the recompute settings only
    cases.update({f"mcore-{name}": megatron_case(c) for name, c in moe_30b_configs().items()})
    gspo = megatron_case(moe_30b_configs()["gspo"])
    cases["mcore-before"] = {
        **gspo,
        "overrides": [o for o in gspo["overrides"] if not any(k in o for k in BEFORE)],
    }
    cases["mcore-no-recompute"] = {
        **gspo,
        "overrides": [o for o in gspo["overrides"] if "recompute" not in o],
    }
    return run_verl(cases, tmp_path_factory.mktemp("verl_config"))


# -- the mapping --------------------------------------------------------------------------------


def test_every_rlconfig_field_is_mapped_or_refused():
    assert set(verl_engine.FIELDS) == {f for f in RLConfig.__dataclass_fields__}


def test_the_docs_table_is_the_codes_mapping():
    text = (ROOT / "docs" / "ENGINES.md").read_text().split("### What verl receives")[1]
    rows = dict(re.findall(r"^\| `([a-z_]+)` \| (.+?) \|$", text.split("\n## ")[0], re.M))
    assert rows == verl_engine.FIELDS


@pytest.mark.parametrize(
    "change, field",
    [
        (dict(precision="float32"), "precision"),
        (dict(device="cpu"), "device"),
        (dict(prompt=PromptConfig(format="raw")), "prompt"),
        (dict(rollout=RolloutConfig(engine="torch", device="cuda")), "rollout"),
        (dict(routing_replay=True), "routing_replay"),  # fsdp: no replay in verl
        (dict(router_aux_loss_coef=0.01), "router_aux_loss_coef"),
        (dict(logprob_chunk=1024), "logprob_chunk"),
        (dict(log_ratio_clamp=10.0), "log_ratio_clamp"),
        (dict(peak_flops=989e12), "peak_flops"),
        (dict(staleness=2), "staleness"),
        (
            dict(rollout_correction="token_truncate", rollout_correction_min=0.5),
            "rollout_correction_min",
        ),
        (dict(algorithm="dapo", overlong_buffer=None), "overlong_buffer"),
    ],
)
def test_what_verl_cannot_honour_is_a_one_line_error_naming_the_field(change, field):
    with pytest.raises(ConfigError) as e:
        verl_engine.check(gpu_cfg(**change))
    msg = str(e.value)
    assert msg.startswith(f"{field}: not supported with engine: verl") and "\n" not in msg


def test_verl_settings_belong_to_engine_verl_only():
    with pytest.raises(ConfigError, match="^verl: holds engine: verl's settings"):
        RLConfig(train_data=[DataSource("x.jsonl")], verl=VerlConfig(strategy="megatron"))
    with pytest.raises(ConfigError, match="^strategy: tensor/expert/pipeline parallelism"):
        VerlConfig(tensor_parallel=2)


# -- verl's own code on the mapped config ---------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_verl_composes_and_validates_every_algorithm_with_our_values(verl_says, algorithm):
    cfg = gpu_cfg(algorithm=algorithm)
    got = verl_says[f"fsdp-{algorithm}"]
    assert "error" not in got, got
    v = {k: got["values"][path] for k, path in READ.items()}
    assert v["loss_mode"] == verl_engine.LOSS_MODE[algorithm]
    assert (v["low"], v["high"]) == pytest.approx((cfg.eps_low, cfg.eps_high))
    # DPPO truncates its weight at clip_ratio_c; for the others it is the dual clip, off
    dual = cfg.dppo_is_cap if algorithm.startswith("dppo") else verl_engine.DUAL_CLIP_OFF
    assert v["dual"] == dual and v["agg"] == cfg.agg
    assert (v["clip_cov_ratio"], v["kl_cov_coef"]) == (cfg.clip_cov_ratio, cfg.kl_cov_coef)
    assert v["std"] is (cfg.adv_scale == "std")
    assert (v["mini"], v["n"]) == (16 // 4, 8)
    assert v["scale"] == (256 if cfg.agg == "seq-mean-token-sum-norm" else None)


@pytest.mark.slow
@pytest.mark.parametrize("source, mode", [(None, "disabled"), ("trainer", "R2"), ("engine", "R3")])
@pytest.mark.parametrize("algorithm", ALGORITHMS)
def test_verl_validates_every_algorithm_and_replay_mode_on_megatron(
    verl_says, algorithm, source, mode
):
    got = verl_says[f"megatron-{algorithm}-{source}"]
    assert "error" not in got, got
    v = {k: got["values"][path] for k, path in READ.items()}
    assert (v["replay"], v["rollout_replay"]) == (mode, mode == "R3")
    assert (v["tp"], v["ep"]) == (4, 8)


@pytest.mark.slow
def test_verl_validates_the_moe_30b_runs_and_rejects_what_it_should(verl_says):
    modes = {
        n[len("moe-30b-") :]: r["values"][READ["replay"]]
        for n, r in verl_says.items()
        if n.startswith("moe-30b-") and "error" not in r
    }
    assert modes == {
        "grpo": "disabled",
        "gspo": "disabled",
        "grpo-r2": "R2",
        "gspo-r2": "R2",
        "grpo-r3": "R3",
        "gspo-r3": "R3",
    }
    assert "must be divisible by minimal possible batch size" in verl_says["bad-batch"]["error"]
    assert "bypass_mode=False" in verl_says["bad-r2-bypass"]["error"]
    assert verl_says["version"] == "0.9.1"


@pytest.mark.slow
def test_megatron_core_accepts_the_layout_recompute_and_optimizer_verl_hands_it(verl_says):
    """Issue 42 rows 1-3 and 6, for every run of config/moe-30b.yaml: Megatron-Core's own
    initialize_model_parallel on the 16 ranks of 2 x 8 GPUs, its OptimizerConfig and
    TransformerConfig from what verl's Megatron engine passes, and the env Ray starts with."""
    runs = sorted(n for n in verl_says if n.startswith("mcore-") and n[6:] in moe_30b_configs())
    assert len(runs) == 6
    for name in runs:
        got = verl_says[name]
        assert got["layout"] == {"tp": 4, "ep": 8, "etp": 1, "edp": 2, "dp": 4, "world": 16}, name
        assert (got["optimizer"]["adam_beta1"], got["optimizer"]["adam_beta2"]) == verl_engine.BETAS
        assert got["transformer"] == {
            "recompute_granularity": "full",
            "recompute_method": "uniform",
            "recompute_num_layers": 1,
            "moe_aux_loss_coeff": 0.0,
        }, name
        assert got["ray_env"]["CUDA_DEVICE_MAX_CONNECTIONS"] == "1"
    before = verl_says["mcore-before"]  # the overrides as they were: each row fails
    assert before["layout"] == {
        "error": "RuntimeError: world_size (16) is not divisible by "
        "expert_tensor_model_pipeline_parallel size (32)"
    }
    assert before["optimizer"]["adam_beta2"] == 0.999
    assert "CUDA_DEVICE_MAX_CONNECTIONS" not in before["ray_env"]
    assert verl_says["mcore-no-recompute"]["transformer"]["recompute_granularity"] is None


# -- a run in verl's layout, collected, tracked and evaluated ------------------------------------


def _save_hf(model, tok, folder: pathlib.Path) -> None:
    folder.mkdir(parents=True)
    model.save_pretrained(folder)
    tok.save_pretrained(folder)


@pytest.fixture(scope="module")
def verl_run(tmp_path_factory):
    """A 2-step GSPO run as verl leaves it: pipeline.verl's job, checkpoints at steps 1 and 2 in
    verl's FSDP layout (the tiny-bpe model, perturbed per step), its file logger's metrics from
    two attempts (the second re-logging step 2 after a resume) and the launcher's done.json."""
    from evaluators.benchmarks import aime
    from gspo.io import write_jsonl
    from gspo.model.models import build_tiny, load_model

    tmp = tmp_path_factory.mktemp("verl_run")
    recs = aime.generate(6, split="train", seed=0, difficulty=aime.Difficulty(1, 3))
    write_jsonl(recs, tmp / "rl.jsonl")
    model_dir = build_tiny(
        "tiny-bpe", tmp / "sft", seed=0, corpus=[r["prompt"] + r["solution"] for r in recs]
    )
    cfg = tmp / "rl.yaml"
    cfg.write_text(
        yaml.safe_dump(
            {
                "engine": "verl",
                "algorithm": "gspo",
                "model": str(model_dir),
                "out_dir": str(tmp / "rl"),
                "train_data": [{"path": str(tmp / "rl.jsonl")}],
                "steps": 2,
                "prompts_per_step": 2,
                "group_size": 2,
                "minibatches": 1,
                "max_new_tokens": 16,
                "ckpt_every": 1,
                "precision": "bfloat16",
                "device": "cuda",
                "prompt": {"format": "chat"},
                "rollout": {"engine": "vllm", "device": "cuda"},
            }
        )
    )
    prep = _run("pipeline.verl", "--config", cfg)
    assert prep.returncode == 0, prep.stderr
    job = tmp / "rl" / "verl"
    model, tok = load_model(model_dir)
    for step in (1, 2):
        with torch.no_grad():
            for p in model.parameters():
                p.add_(0.01)
        _save_hf(model, tok, job / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface")
    (job / "checkpoints" / "latest_checkpointed_iteration.txt").write_text("2")

    def data(step, reward):
        return {
            "critic/score/mean": reward,
            "actor/pg_clipfrac": 0.25 * step,
            "actor/pg_loss": 0.1,
            "actor/grad_norm": 1.5,
            "actor/entropy": 2.0,
            "actor/lr": 1e-6,
            "response_length/mean": 10.0,
            "prompt_length/mean": 30.0,
            "timing_s/step": 4.0,
            "timing_s/gen": 1.0,
            "timing_s/update_actor": 2.0,
            "perf/mfu/actor": 0.3,
        }

    run_verl(
        {
            "a1": {
                "kind": "log",
                "path": str(job / "metrics.1.jsonl"),
                "rows": [(1, data(1, 0.1)), (2, data(2, 0.2))],
            },
            "a2": {
                "kind": "log",
                "path": str(job / "metrics.2.jsonl"),
                "rows": [(2, data(2, 0.5))],
            },
        },
        tmp,
    )
    (job / "done.json").write_text(
        json.dumps({"verl_version": "0.9.1", "attempts": 2, "world_size": 16})
    )
    uri = f"sqlite:///{tmp / 'mlflow.db'}"
    done = _run("pipeline.train", "--config", cfg, "--tracking-uri", uri, "--experiment", "verl")
    return {
        "tmp": tmp,
        "cfg": cfg,
        "recs": recs,
        "out": tmp / "rl",
        "uri": uri,
        "collect": done,
        "model": model,
    }


def _run(module, *args, env=None):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", **(env or {})}
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


@pytest.mark.slow
def test_the_job_holds_every_steps_prompts_in_order_and_the_mapped_overrides(verl_run):
    import pyarrow.parquet as pq

    from gspo.native.data import Mix

    job = verl_run["out"] / "verl"
    spec = json.loads((job / "job.json").read_text())
    assert spec["config_name"] == "ppo_trainer" and spec["steps"] == 2
    assert "actor_rollout_ref.actor.policy_loss.loss_mode=gspo" in spec["overrides"]
    assert "data.shuffle=false" in spec["overrides"]
    mix = Mix([DataSource(str(verl_run["tmp"] / "rl.jsonl"))])
    want = [r["id"] for s in range(2) for r in mix.sample(2, seed=0, step=s)]
    rows = pq.read_table(job / "train.parquet").to_pylist()
    assert [r["extra_info"]["id"] for r in rows] == [str(i) for i in want]


@pytest.mark.slow
def test_collect_exports_verls_checkpoints_and_metrics_under_our_names(verl_run):
    from gspo.model.models import load_model

    assert verl_run["collect"].returncode == 0, verl_run["collect"].stderr
    out = verl_run["out"]
    ckpts = sorted(p.name for p in (out / "checkpoints").iterdir())
    assert ckpts == ["step_000001", "step_000002"]
    metas = [json.loads((out / "checkpoints" / c / "checkpoint.json").read_text()) for c in ckpts]
    assert [m["engine"] for m in metas] == ["verl", "verl"]
    assert 0 < metas[0]["compute_flops"] < metas[1]["compute_flops"]
    assert metas[1]["compute_flops"] == pytest.approx(2 * metas[0]["compute_flops"])
    published, _ = load_model(out / "model")
    for a, b in zip(published.parameters(), verl_run["model"].parameters()):
        assert torch.equal(a, b)  # the final model is step 2's
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert [r["reward_mean"] for r in rows] == [0.1, 0.5]  # step 2 from the resumed attempt
    # verl's pg_clipfrac is token-weighted for GSPO too: no sequence-level fraction is made up
    assert [r["clip_frac_tokens"] for r in rows] == [0.25, 0.5]
    assert not any("clip_frac_seqs" in r for r in rows)
    assert rows[1]["verl/perf/mfu/actor"] == 0.3 and rows[1]["time_rollout_s"] == 1.0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["engine"] == "verl" and summary["compute_flops"] == metas[1]["compute_flops"]


@pytest.mark.slow
def test_the_collected_run_is_tracked_in_mlflow_once_per_point(verl_run):
    from mlflow.tracking import MlflowClient

    cl = MlflowClient(verl_run["uri"])
    run_id = json.loads((verl_run["out"] / "mlflow_run.json").read_text())["run_id"]
    run = cl.get_run(run_id)
    assert run.info.status == "FINISHED" and run.data.tags["stage"] == "rl"
    history = cl.get_metric_history(run_id, "reward_mean")
    assert sorted((m.step, m.value) for m in history) == [(1, 0.1), (2, 0.5)]
    assert len(cl.get_metric_history(run_id, "verl/actor/pg_clipfrac")) == 2


@pytest.mark.slow
def test_a_checkpoint_from_verls_layout_is_evaluated(verl_run):
    from gspo.io import write_jsonl

    data = verl_run["tmp"] / "eval_data"
    data.mkdir(exist_ok=True)
    write_jsonl(verl_run["recs"][:3], data / "aime_test.jsonl")
    out = verl_run["tmp"] / "eval"
    r = _run(
        "pipeline.evaluate",
        "--model",
        verl_run["out"] / "checkpoints" / "step_000002",
        "--benchmarks",
        "aime",
        "--samples",
        2,
        "--data-dir",
        data,
        "--out",
        out,
        "--max-new-tokens",
        8,
        "--set",
        "prompt.format=chat",
    )
    assert r.returncode == 0, r.stderr
    summary = json.loads((out / "aime" / "summary.json").read_text())
    assert summary["benchmarks"]["aime"]["n_problems"] == 3


@pytest.mark.slow
def test_collect_without_a_finished_verl_run_is_a_one_line_error(verl_run, tmp_path):
    cfg = yaml.safe_load(verl_run["cfg"].read_text())
    cfg["out_dir"] = str(tmp_path / "rl")
    path = tmp_path / "rl.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = _run("pipeline.train", "--config", path)
    assert r.returncode != 0
    (line,) = r.stderr.strip().splitlines()
    assert "no finished verl run" in line and "verl_train" in line


@pytest.mark.slow
def test_a_checkpoint_verl_saved_but_never_logged_is_still_exported(verl_run, tmp_path):
    """Issue 42 row 10: verl saved step 2, then stopped before logging it; its resume had
    nothing left to run."""
    import shutil

    from gspo.config.fields import from_dict
    from gspo.engines.verl.collect import collect
    from gspo.errors import TrainingError

    out = tmp_path / "rl"
    shutil.copytree(verl_run["out"] / "verl", out / "verl")
    (out / "verl" / "metrics.2.jsonl").unlink()
    first = (out / "verl" / "metrics.1.jsonl").read_text().splitlines()[0]
    (out / "verl" / "metrics.1.jsonl").write_text(first + "\n")
    cfg = from_dict(RLConfig, {**yaml.safe_load(verl_run["cfg"].read_text()), "out_dir": str(out)})
    collect(cfg)
    assert sorted(p.name for p in (out / "checkpoints").iterdir()) == ["step_000001", "step_000002"]
    rows = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2] and rows[1]["verl/row_missing"] == 1
    assert "reward_mean" not in rows[1]
    assert rows[1]["compute_flops"] == pytest.approx(2 * rows[0]["compute_flops"])
    meta = json.loads((out / "checkpoints" / "step_000002" / "checkpoint.json").read_text())
    assert meta["compute_flops"] == rows[1]["compute_flops"]
    shutil.rmtree(out / "verl" / "checkpoints" / "global_step_2")  # neither logged nor saved
    with pytest.raises(TrainingError, match=r"logged steps 1 and saved \[1\].*missing: 2\)$"):
        collect(cfg)


# -- the launcher and the workflow ----------------------------------------------------------------

LAUNCH = str(ROOT / "workflow" / "scripts" / "verl_launch.py")


def _launch_plan(tmp_path, *args) -> list[list[str]]:
    """The launcher's dry-run plan for a 3-node job, one command a line."""
    job = tmp_path / "job"
    job.mkdir(exist_ok=True)
    (job / "job.json").write_text(
        json.dumps(
            {
                "config_name": "ppo_megatron_trainer",
                "overrides": ["data.shuffle=false", "actor_rollout_ref.model.path=/models/q"],
            }
        )
    )
    r = subprocess.run(
        [
            sys.executable,
            LAUNCH,
            str(job),
            "--gpus-per-node",
            "8",
            "--cpus-per-node",
            "96",
            "--dry-run",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode == 0, r.stderr
    return [line.split() for line in r.stdout.splitlines()]


def test_the_launcher_puts_the_container_inside_each_srun_step_with_the_nodes_resources(tmp_path):
    """Issue 42 rows 4 and 5: srun on the host, apptainer inside each step; CPUs, GPUs and the
    address of each node given to the step and to Ray."""
    check, head, w1, w2, trainer = _launch_plan(
        tmp_path,
        "--hosts",
        "gpu01=10.0.0.1,gpu02=10.0.0.2,gpu03=10.0.0.3",
        "--container",
        "img.sif",
    )
    box = [
        "apptainer",
        "exec",
        "--nv",
        "--bind",
        f"{ROOT},{(tmp_path / 'job').resolve()},/models/q",
        "img.sif",
    ]

    def split(cmd):
        i = cmd.index("apptainer")
        return cmd[:i], cmd[i:]

    srun, inside = split(check)
    assert srun == [
        "srun",
        "--nodes=3",
        "--ntasks=3",
        "--ntasks-per-node=1",
        "--cpus-per-task=96",
        "--gres=gpu:8",
    ]
    assert inside == box + [
        "python3",
        str(ROOT / "workflow" / "scripts" / "verl_preflight.py"),
        "--config-name",
        "ppo_megatron_trainer",
        "--gpus",
        "8",
    ]
    ray = ["--num-cpus=96", "--num-gpus=8", "--block"]
    for cmd, host, role in [
        (head, "gpu01", ["--head", "--port=6379"]),
        (w1, "gpu02", ["--address=10.0.0.1:6379"]),
        (w2, "gpu03", ["--address=10.0.0.1:6379"]),
    ]:
        srun, inside = split(cmd)
        assert srun == [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            "--cpus-per-task=96",
            "--gres=gpu:8",
            "-w",
            host,
        ]
        ip = f"10.0.0.{host[-1]}"
        assert inside == box + ["ray", "start", *role, f"--node-ip-address={ip}", *ray]
    srun, inside = split(trainer)
    assert srun == ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", "gpu01"]
    assert inside == box + [
        "python3",
        "-m",
        "verl.trainer.main_ppo",
        "--config-name",
        "ppo_megatron_trainer",
        "data.shuffle=false",
        "actor_rollout_ref.model.path=/models/q",
        "trainer.nnodes=3",
        "trainer.n_gpus_per_node=8",
    ]


def test_without_a_container_the_steps_run_verls_environment_itself(tmp_path):
    check, head, w1, w2, trainer = _launch_plan(tmp_path, "--hosts", "gpu01,gpu02,gpu03")
    assert not any("apptainer" in cmd for cmd in (check, head, w1, w2, trainer))
    assert head[6:9] == ["gpu01", "ray", "start"] and "--num-cpus=96" in head
    assert "--node-ip-address=gpu02" in w1  # a dry run prints a name it cannot resolve as is
    assert trainer[6:8] == [sys.executable, "-m"]


@pytest.mark.slow
def test_the_preflight_names_in_one_line_all_that_verls_environment_lacks():
    """Issue 42 row 7-8's check, run where verl 0.9.1, Ray and Megatron-Core import
    (.venv/verl-nodeps beside the project, vLLM's CPU build, math-verify, bwrap) but Megatron-
    Bridge, Transformer Engine, flash-attn and GPUs do not."""
    from test_conformance_verl import VERL_PATH

    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(VERL_PATH), str(ROOT)]),
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    r = subprocess.run(
        [
            sys.executable,
            str(ROOT / "workflow" / "scripts" / "verl_preflight.py"),
            "--config-name",
            "ppo_megatron_trainer",
            "--gpus",
            "8",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert r.returncode == 1
    (line,) = [x for x in r.stderr.splitlines() if x.startswith("verl_preflight:")]
    for missing in ("megatron.bridge", "transformer_engine", "flash_attn", "0 GPUs visible"):
        assert missing in line
    for present in (
        "verl.trainer.main_ppo ",
        "import ray ",
        "megatron.core ",
        "math_verify",
        "evaluators",
        "bwrap",
        "math-verify not in use",
    ):
        assert present not in line


def test_the_launcher_refuses_a_missing_job_in_one_line(tmp_path):
    r = subprocess.run(
        [sys.executable, LAUNCH, str(tmp_path), "--gpus-per-node", "1", "--dry-run"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "no such job" in r.stderr.strip()


@pytest.mark.slow
def test_moe_30b_plans_verl_jobs_on_two_nodes_of_eight_gpus():
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "snakemake",
            "-n",
            "--workflow-profile",
            "profiles/slurm",
            "--configfile",
            "config/moe-30b.yaml",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        env={k: v for k, v in os.environ.items() if not k.startswith("MLFLOW_")},
    )
    assert r.returncode == 0, r.stderr[-3000:]
    # SLURM's 32 jobs at once into the default SQLite store: the plan names the server to start
    assert re.search(
        r"^warning: the MLflow store is SQLite .* the slurm executor.*"
        r"python -m pipeline\.mlflow_server",
        r.stderr,
        re.M,
    ), r.stderr[-3000:]
    counts = dict(re.findall(r"^(\w+)\s+(\d+)$", r.stdout, re.M))
    runs = 6 * 3  # variants x seeds
    assert {k: int(counts.get(k, 0)) for k in ("verl_prepare", "verl_train", "rl_verl", "rl")} == {
        "verl_prepare": runs,
        "verl_train": runs,
        "rl_verl": runs,
        "rl": 0,
    }
    trains = [b for b in r.stdout.split("\nrule ") if b.startswith("verl_train:")]
    assert len(trains) == runs
    for block in trains:
        assert "nodes=2" in block and "tasks=2" in block and "gres=gpu:h100:8" in block
        assert "verl_launch.py" in block and "--gpus-per-node 8" in block
        assert "--container" not in block and "apptainer" not in block  # no --sdm apptainer


ENVS = """
import json, pathlib, sys
sys.argv = ["snakemake", "-n"]      # the plan's dry-run mode: data files need not exist
from snakemake.api import SnakemakeApi
from snakemake.settings.types import (ConfigSettings, DeploymentMethod, DeploymentSettings,
                                      OutputSettings, ResourceSettings, StorageSettings)
root = pathlib.Path(".").resolve()
with SnakemakeApi(OutputSettings(quiet=True)) as api:
    wf = api.workflow(resource_settings=ResourceSettings(cores=1),
                      config_settings=ConfigSettings(configfiles=[root / CONFIG]),
                      storage_settings=StorageSettings(), workdir=root,
                      snakefile=root / "Snakefile",
                      deployment_settings=DeploymentSettings(
                          deployment_method={DeploymentMethod.CONDA,
                                             DeploymentMethod.APPTAINER}))
    print(json.dumps({r.name: [str(r.conda_env) if r.conda_env else None,
                               str(r.container_img) if r.container_img else None]
                      for r in wf._workflow.rules}))
"""


@pytest.mark.slow
def test_verls_rule_declares_verls_environment_and_the_others_the_projects():
    code = ENVS.replace("CONFIG", repr("config/moe-30b.yaml"))
    r = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=600
    )
    assert r.returncode == 0, r.stderr[-3000:]
    envs = json.loads(r.stdout.strip().splitlines()[-1])
    # no container directive: with --sdm apptainer the launcher runs on the host and puts the
    # image inside each srun step; rule verl_image builds the default, local image
    assert envs.pop("verl_train") == ["../envs/verl.yaml", None]
    assert envs.pop("verl_image") == [None, None]
    envs.pop("all")
    assert {tuple(v) for v in envs.values()} == {("../../environment.yml", None)}
    env = yaml.safe_load((ROOT / "workflow" / "envs" / "verl.yaml").read_text())
    pip = env["dependencies"][-1]["pip"]
    assert "verl[vllm,mcore]==0.9.1" in pip and "math-verify==0.9.0" in pip
    assert {"megatron-core", "megatron-bridge==0.6.2", "transformer-engine[pytorch]"} <= set(pip)
    assert "bubblewrap" in env["dependencies"]
    image = (ROOT / "workflow" / "envs" / "verl.def").read_text()
    for need in ("verl==0.9.1", "megatron-bridge==0.6.2", "math-verify==0.9.0", "bubblewrap"):
        assert need in image


@pytest.mark.slow
def test_a_verl_run_verl_cannot_honour_stops_the_plan_in_one_line(tmp_path):
    cfg = yaml.safe_load((ROOT / "config" / "moe-30b.yaml").read_text())
    cfg["rl"]["precision"] = "float32"
    path = tmp_path / "moe.yaml"
    path.write_text(yaml.safe_dump(cfg))
    r = subprocess.run(
        [sys.executable, "-m", "snakemake", "-n", "--configfile", str(path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode != 0
    assert "config: rl.precision: not supported with engine: verl" in r.stdout + r.stderr


# every field: a changed value changes verl's overrides, or is refused, or the harness honours it
# (FIELDS says how); (setting, changed setting) pairs where a field acts only beside another
MAPPED = {
    "algorithm": [({}, dict(algorithm="grpo"))],
    "model": [({}, dict(model="/other"))],
    "steps": [({}, dict(steps=7))],
    "prompts_per_step": [({}, dict(prompts_per_step=32))],
    "group_size": [({}, dict(group_size=4))],
    "minibatches": [({}, dict(minibatches=2))],
    "epochs": [({}, dict(epochs=2))],
    "micro_batch_size": [({}, dict(micro_batch_size=4))],
    "max_tokens_per_micro_batch": [({}, dict(max_tokens_per_micro_batch=4096))],
    "activation_checkpointing": [({}, dict(activation_checkpointing=True))],
    "prompt": [({}, dict(prompt=PromptConfig(format="chat", enable_thinking=False)))],
    "lr": [({}, dict(lr=1e-4))],
    "warmup_steps": [({}, dict(warmup_steps=2))],
    "weight_decay": [({}, dict(weight_decay=0.1))],
    "grad_clip": [({}, dict(grad_clip=0.5))],
    "eps_low": [({}, dict(eps_low=1e-4))],
    "eps_high": [({}, dict(eps_high=1e-3))],
    "agg": [({}, dict(agg="token-mean"))],
    "adv_scale": [({}, dict(adv_scale="none"))],
    "sapo_tau_pos": [(dict(algorithm="sapo"), dict(algorithm="sapo", sapo_tau_pos=1.5))],
    "sapo_tau_neg": [(dict(algorithm="sapo"), dict(algorithm="sapo", sapo_tau_neg=1.5))],
    "rollout_correction": [({}, dict(rollout_correction="token_mask"))],
    "rollout_correction_min": [
        (
            dict(rollout_correction="token_mask"),
            dict(rollout_correction="token_mask", rollout_correction_min=0.5),
        )
    ],
    "rollout_correction_max": [
        (
            dict(rollout_correction="token_truncate"),
            dict(rollout_correction="token_truncate", rollout_correction_max=2.0),
        )
    ],
    "icepop_min": [
        (dict(rollout_correction="icepop"), dict(rollout_correction="icepop", icepop_min=0.3))
    ],
    "icepop_max": [
        (dict(rollout_correction="icepop"), dict(rollout_correction="icepop", icepop_max=3.0))
    ],
    "kl_coef": [({}, dict(kl_coef=0.1))],
    "dppo_is_cap": [
        (dict(algorithm="dppo_tv"), dict(algorithm="dppo_tv", dppo_is_cap=5.0)),
        (dict(algorithm="dppo_kl"), dict(algorithm="dppo_kl", dppo_is_cap=5.0)),
    ],
    "clip_cov_ratio": [
        (dict(algorithm="clip_cov"), dict(algorithm="clip_cov", clip_cov_ratio=0.01))
    ],
    "clip_cov_lb": [(dict(algorithm="clip_cov"), dict(algorithm="clip_cov", clip_cov_lb=0.5))],
    "clip_cov_ub": [(dict(algorithm="clip_cov"), dict(algorithm="clip_cov", clip_cov_ub=6.0))],
    "kl_cov_ratio": [(dict(algorithm="kl_cov"), dict(algorithm="kl_cov", kl_cov_ratio=0.01))],
    "kl_cov_coef": [(dict(algorithm="kl_cov"), dict(algorithm="kl_cov", kl_cov_coef=1.0))],
    "temperature": [({}, dict(temperature=0.7))],
    "top_p": [({}, dict(top_p=0.9))],
    "max_new_tokens": [({}, dict(max_new_tokens=32))],
    "rollout": [({}, dict(rollout=RolloutConfig(engine="vllm", device="cuda", dtype="float16")))],
    "old_logprobs": [({}, dict(old_logprobs="rollout"))],
    "routing_replay": [
        (
            dict(verl=VerlConfig(strategy="megatron")),
            dict(verl=VerlConfig(strategy="megatron"), routing_replay=True),
        )
    ],
    "routing_replay_source": [
        (
            dict(verl=VerlConfig(strategy="megatron"), routing_replay=True),
            dict(
                verl=VerlConfig(strategy="megatron"),
                routing_replay=True,
                routing_replay_source="engine",
            ),
        )
    ],
    "router_aux_loss_coef": [
        (
            dict(verl=VerlConfig(strategy="megatron")),
            dict(verl=VerlConfig(strategy="megatron"), router_aux_loss_coef=0.01),
        )
    ],
    "reward_workers": [({}, dict(reward_workers=4))],
    "ckpt_every": [({}, dict(ckpt_every=5))],
    "resume": [({}, dict(resume=False))],
    "seed": [({}, dict(seed=3))],
    "log_samples_every": [({}, dict(log_samples_every=0))],
    "verl": [
        ({}, dict(verl=VerlConfig(strategy="megatron"))),
        ({}, dict(verl=VerlConfig(overrides=["trainer.val_before_train=true"]))),
    ],
}
REFUSED = {
    "logprob_chunk": 1024,
    "precision": "float32",
    "overlong_buffer": 8,
    "dynamic_sampling": True,
    "dynamic_sampling_max_rounds": 5,
    "mask_truncated": True,
    "log_ratio_clamp": 10.0,
    "peak_flops": 1e15,
    "staleness": 1,
    "device": "cpu",
    "opsm_threshold": 0.5,
}
# the settings of an objective verl lacks: refused with it (the objective first)
WITH_OBJECTIVE = {
    "vespo_k_pos": "vespo",
    "vespo_lambda_pos": "vespo",
    "vespo_k_neg": "vespo",
    "vespo_lambda_neg": "vespo",
}
HARNESS = {
    "engine",
    "out_dir",
    "train_data",
    "keep_last",
    "keep_steps",
    "threads",
    "max_consecutive_nonfinite",
    "moe_metrics",
}


def test_every_field_changes_verls_config_is_refused_or_is_the_harnesss():
    assert set(MAPPED) | set(REFUSED) | HARNESS | set(WITH_OBJECTIVE) == set(
        RLConfig.__dataclass_fields__
    )
    for field, algorithm in WITH_OBJECTIVE.items():
        why = dict(verl_engine.refusals(gpu_cfg(algorithm=algorithm, **{field: 1.5})))
        assert set(why) == {"algorithm", field}, field
    for field, pairs in MAPPED.items():
        for before, after in pairs:
            a = verl_engine.overrides(gpu_cfg(**before), "/job")
            b = verl_engine.overrides(gpu_cfg(**after), "/job")
            assert a != b, field
    for field, value in REFUSED.items():
        with pytest.raises(ConfigError, match=f"^{field}: not supported with engine: verl"):
            verl_engine.check(gpu_cfg(**{field: value}))


def test_moe_metrics_is_refused_on_an_moe_model_only(tiny_model_dir, tiny_moe_model_dir):
    verl_engine.check(gpu_cfg(model=str(tiny_model_dir)))
    with pytest.raises(ConfigError, match="^moe_metrics: not supported with engine: verl"):
        verl_engine.check(gpu_cfg(model=str(tiny_moe_model_dir)))
    verl_engine.check(gpu_cfg(model=str(tiny_moe_model_dir), moe_metrics=False))
