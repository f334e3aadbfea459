"""The Snakemake workflow for real: the smoke config end to end (and its seed-0 paths again, from
scratch, for determinism), re-runs, config changes, resume, validation errors, lint and the
real-scale dry run.

The two smoke runs are made once per test session (conftest's `smoke` fixture, shared with
test_report.py and test_mlflow_ui.py) in temporary working directories, each with its own MLflow sqlite store.
"""

from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import time

import pytest
import yaml

from gspo.core.objectives import OBJECTIVES

ROOT = pathlib.Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake", "-s", str(ROOT / "Snakefile")]
SMOKE = ROOT / "config" / "smoke.yaml"
TIMING_KEYS = re.compile(r"^(time_.*|wall_s|seconds|trl/step_time)$")  # TRL's own timing too


def snakemake(workdir, *args, configfile=SMOKE, timeout=900, check=True):
    """Run snakemake on the repository's Snakefile in `workdir` (its own results/ and store)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GSPO_MLFLOW"))}
    env["OMP_NUM_THREADS"] = "1"
    cmd = SNAKEMAKE + ["-d", str(workdir), "--workflow-profile", str(ROOT / "profiles" / "default")]
    if configfile is not None:
        cmd += ["--configfile", str(configfile)]
    r = subprocess.run(cmd + list(args), env=env, capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({r.returncode}):\n"
            f"{r.stdout[-3000:]}\n{r.stderr[-6000:]}"
        )
    return r


def seed0_targets() -> list[str]:
    """Every seed-0 path of the smoke config, to its MLflow records: data, SFT and its
    evaluation, each variant's RL run (both engines, the bf16 rollout) and its evaluations."""
    cfg = yaml.safe_load(SMOKE.read_text())
    variants = list(cfg["algorithms"]) + list(cfg["variants"])
    return ["results/smoke/eval/sft/mlflow.json"] + [
        f"results/smoke/eval/{v}/seed0/mlflow.json" for v in variants
    ]


def smoke_runs(tmp_root: pathlib.Path) -> tuple[pathlib.Path, pathlib.Path]:
    """Two smoke runs from scratch (conftest's session fixture `smoke` makes them once): `a`
    complete, `b` every seed-0 path only (seed 1 walks the same code with another seed), for
    the determinism check and the kill test; half the jobs of a second complete run."""
    a, b = tmp_root / "a", tmp_root / "b"
    a.mkdir(parents=True)
    snakemake(a, "--cores", "2")
    b.mkdir(parents=True)
    snakemake(b, "--cores", "2", *seed0_targets())
    return a, b


def exp_dir(workdir) -> pathlib.Path:
    return pathlib.Path(workdir) / "results" / "smoke"


def mlflow_client(workdir):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=f"sqlite:///{pathlib.Path(workdir) / 'results' / 'mlflow.db'}")


def _strip(rec: dict) -> dict:
    return {k: v for k, v in rec.items() if not TIMING_KEYS.match(k)}


def _metrics_files(workdir) -> dict[str, list[dict]]:
    base = exp_dir(workdir)
    out = {}
    for p in sorted(base.glob("**/metrics.jsonl")):
        out[str(p.relative_to(base))] = [
            _strip(json.loads(line)) for line in p.read_text().splitlines()
        ]
    return out


def _eval_summaries(workdir) -> dict[str, dict]:
    base = exp_dir(workdir) / "eval"
    out = {}
    for p in sorted(base.glob("**/summary.json")):
        s = json.loads(p.read_text())
        s.pop("seconds", None)
        s["settings"].pop("model", None)
        out[str(p.relative_to(base))] = s
    return out


def _job_counts(dry_run_output: str) -> dict[str, int]:
    """The 'Job stats' table of a dry run: {rule: count}."""
    counts = {}
    m = re.search(r"Job stats:\n.*?\n-+\s+-+\n(.*?)\n\s*\n", dry_run_output, re.S)
    if not m:
        return counts
    for line in m.group(1).splitlines():
        rule, n = line.split()
        if rule != "total":
            counts[rule] = int(n)
    return counts


# -- the smoke pipeline ----------------------------------------------------------------------------


@pytest.mark.slow
def test_the_smoke_pipeline_writes_the_report_and_every_evaluation(smoke):
    a, _ = smoke
    base = exp_dir(a)
    report = base / "report"
    for name in (
        "index.html",
        "score_vs_compute.png",
        "reward_vs_compute.png",
        "clip_fraction.png",
        "final_scores.csv",
        "stability.csv",
        "variants.csv",
        "moe.csv",
    ):
        assert (report / name).stat().st_size > 0, name
    html = (report / "index.html").read_text()
    for text in (
        "Final scores",
        "Clip-fraction ratio",
        "Collapse rule",
        "Provenance",
        "snakemake",
        "Seeds: [0, 1]",
        "torch",
        "Variants against their baselines",
    ):
        assert text in html, text
    # a dense experiment has no MoE section (moe.csv is its header alone)
    assert "Mixture of experts" not in html and not (report / "moe.png").exists()
    assert len((report / "moe.csv").read_text().splitlines()) == 1
    for alg in ("grpo", "gspo", "gspo-bf16-rollout", "gspo-trl"):
        for seed in (0, 1):
            for budget in (50, 100):
                for bench in ("aime", "lcb", "cf"):
                    d = base / "eval" / alg / f"seed{seed}" / f"b{budget}" / bench
                    meta = json.loads((d / "checkpoint.json").read_text())
                    assert meta["step"] == {50: 2, 100: 4}[budget]
                    assert meta["compute_flops"] > 0
                    assert (
                        json.loads((d / "summary.json").read_text())["benchmarks"][bench][
                            "n_problems"
                        ]
                        > 0
                    )
    rows = (report / "final_scores.csv").read_text().splitlines()
    assert rows[0].startswith(
        "variant,algorithm,benchmark,budget,step,seeds,pass_at_1,ci_low,ci_high"
    )
    assert {tuple(r.split(",")[:3]) for r in rows[1:]} == {
        (v, a, b)
        for v, a in (
            ("sft", "sft"),
            ("grpo", "grpo"),
            ("gspo", "gspo"),
            ("gspo-bf16-rollout", "gspo"),
            ("gspo-trl", "gspo"),
        )
        for b in ("aime", "lcb", "cf")
    }
    # the variants are measured against plain GSPO, benchmark by benchmark
    import csv

    var = list(csv.DictReader((report / "variants.csv").open()))
    assert {(r["variant"], r["baseline"], r["benchmark"]) for r in var} == {
        (v, "gspo", b) for v in ("gspo-bf16-rollout", "gspo-trl") for b in ("aime", "lcb", "cf")
    }
    for r in var:
        assert float(r["diff_ci_low"]) <= float(r["diff"]) <= float(r["diff_ci_high"])
        if r["variant"] == "gspo-bf16-rollout":
            # the bf16 engine's log-probs are measurably off the float32 trainer's
            assert float(r["logprob_gap_token"]) > float(r["baseline_logprob_gap_token"]) >= 0.0
        else:  # TRL's runs: their step time and compute beside the native trainer's
            assert float(r["step_s"]) > 0 and float(r["compute_ratio"]) > 0
    # the variant never ran the old-log-prob pass; its baseline did, once per step
    for run, passes in (("gspo-bf16-rollout", 0), ("gspo", 4)):
        last = json.loads(
            (base / "rl" / run / "seed0" / "metrics.jsonl").read_text().splitlines()[-1]
        )
        assert last["old_logprob_passes"] == passes
    rl_cfg = yaml.safe_load((base / "config" / "rl" / "gspo-bf16-rollout-seed0.yaml").read_text())
    assert rl_cfg["algorithm"] == "gspo" and rl_cfg["old_logprobs"] == "rollout"
    assert rl_cfg["rollout"]["dtype"] == "bfloat16" and rl_cfg["rollout"]["engine"] == "torch"
    assert rl_cfg["out_dir"].endswith("rl/gspo-bf16-rollout/seed0")
    # checkpoints are kept (they are not rule outputs) and logs live under results/<experiment>/
    assert (base / "rl" / "gspo" / "seed0" / "checkpoints" / "step_000002").is_dir()
    assert (base / "logs" / "rl" / "gspo-seed0.log").is_file()
    assert (base / "benchmarks" / "rl" / "gspo-seed0.tsv").is_file()


@pytest.mark.slow
def test_mlflow_holds_one_experiment_with_tagged_runs_params_and_scores_by_step_and_compute(smoke):
    a, _ = smoke
    cl = mlflow_client(a)
    exp = cl.get_experiment_by_name("smoke")
    assert exp is not None
    runs = cl.search_runs([exp.experiment_id], max_results=500)
    by_stage: dict[str, list] = {}
    for r in runs:
        by_stage.setdefault(r.data.tags["stage"], []).append(r)
    rl = by_stage["rl"]
    assert sorted(
        (
            r.data.tags["variant"],
            r.data.tags["algorithm"],
            r.data.tags["seed"],
            r.data.tags["baseline"],
            r.info.run_name,
        )
        for r in rl
    ) == [
        ("grpo", "grpo", "0", "", "grpo-seed0"),
        ("grpo", "grpo", "1", "", "grpo-seed1"),
        ("gspo", "gspo", "0", "", "gspo-seed0"),
        ("gspo", "gspo", "1", "", "gspo-seed1"),
        ("gspo-bf16-rollout", "gspo", "0", "gspo", "gspo-bf16-rollout-seed0"),
        ("gspo-bf16-rollout", "gspo", "1", "gspo", "gspo-bf16-rollout-seed1"),
        ("gspo-trl", "gspo", "0", "gspo", "gspo-trl-seed0"),
        ("gspo-trl", "gspo", "1", "gspo", "gspo-trl-seed1"),
    ]
    assert len(by_stage["sft"]) == 1
    # 2 budgets + the 0 % point, 3 benchmarks, 8 runs; plus the SFT model's 3
    assert len(by_stage["eval"]) == 8 * 3 * 3 + 3
    assert {r.data.tags["variant"] for r in by_stage["eval"]} == {
        "sft",
        "grpo",
        "gspo",
        "gspo-bf16-rollout",
        "gspo-trl",
    }
    from gspo.infra.provenance import version

    # every run, training or evaluation, names the code that made it
    for r in rl + by_stage["sft"] + by_stage["eval"]:
        assert r.data.tags["version.gspo-bench"] == version() and r.data.tags["git_commit"]
    for r in rl + by_stage["sft"]:
        assert r.info.status == "FINISHED"
        t = r.data.tags
        assert len(t["config_hash"]) == 16 and t["git_commit"] and t["experiment"] == "smoke"
        assert any(k.startswith("data_hash.") for k in t)
        assert "snakemake" in t["workflow_command"]
    run = next(r for r in rl if r.data.tags["variant"] == "gspo" and r.data.tags["seed"] == "1")
    assert run.data.params["algorithm"] == "gspo" and run.data.params["seed"] == "1"
    assert run.data.params["eps_low"] == "0.0003" and run.data.params["steps"] == "4"

    def hist(key):
        return sorted((m.step, m.value) for m in cl.get_metric_history(run.info.run_id, key))

    assert [s for s, _ in hist("reward_mean")] == [1, 2, 3, 4]
    compute = dict(hist("compute_flops"))
    assert compute[0] == 0.0 and compute[2] < compute[4]
    for bench in ("aime", "lcb", "cf"):
        pts = hist(f"eval/{bench}/pass_at_1")
        assert [s for s, _ in pts] == [0, 2, 4]
        by_gflops = hist(f"eval_by_gflops/{bench}/pass_at_1")
        assert [s for s, _ in by_gflops] == [round(compute[s] / 1e9) for s in (0, 2, 4)]
        assert [v for _, v in by_gflops] == [v for _, v in pts]
        summary = json.loads(
            (exp_dir(a) / "eval" / "gspo" / "seed1" / "b100" / bench / "summary.json").read_text()
        )
        assert pts[-1][1] == summary["benchmarks"][bench]["avg@n"]
    nested = [
        r for r in by_stage["eval"] if r.data.tags.get("mlflow.parentRunId") == run.info.run_id
    ]
    assert sorted(int(r.data.tags["budget"]) for r in nested) == [
        0,
        0,
        0,
        50,
        50,
        50,
        100,
        100,
        100,
    ]
    arts = {f.path for f in cl.list_artifacts(nested[0].info.run_id)}
    assert {"summary.json", "results.jsonl"} <= arts
    report_run = by_stage["report"][0]
    assert "report" in {f.path for f in cl.list_artifacts(report_run.info.run_id)}


@pytest.mark.slow
def test_two_smoke_runs_from_scratch_give_identical_metrics(smoke):
    a, b = smoke  # b: every seed-0 path of a, from scratch in its own folder and store
    ma, mb = _metrics_files(a), _metrics_files(b)
    assert set(ma) >= {
        "sft/metrics.jsonl",
        "rl/grpo/seed0/metrics.jsonl",
        "rl/gspo/seed1/metrics.jsonl",
    }
    seed0 = {k for k in ma if "seed1" not in k}
    assert set(mb) == seed0 and len(seed0) == 1 + 4 and mb == {k: ma[k] for k in seed0}
    ea, eb = _eval_summaries(a), _eval_summaries(b)
    assert len(ea) == 3 + 8 * 2 * 3 and len(eb) == 3 + 4 * 2 * 3
    assert eb == {k: ea[k] for k in eb}
    # the MLflow stores agree as well (values at each step, timing aside)
    ca, cb = mlflow_client(a), mlflow_client(b)

    def store(cl):
        exp = cl.get_experiment_by_name("smoke")
        out = {}
        for r in cl.search_runs([exp.experiment_id], "tags.stage = 'rl'"):
            key = (r.data.tags["variant"], r.data.tags["seed"])
            out[key] = {
                k: sorted((m.step, m.value) for m in cl.get_metric_history(r.info.run_id, k))
                for k in r.data.metrics
                if not TIMING_KEYS.match(k)
            }
        return out

    sa, sb = store(ca), store(cb)
    assert set(sb) == {(v, "0") for v, _ in sa} and sb == {k: sa[k] for k in sb}
    # different seeds do differ: the comparison is not vacuous
    assert ma["rl/gspo/seed0/metrics.jsonl"] != ma["rl/gspo/seed1/metrics.jsonl"]


@pytest.mark.slow
def test_rerunning_with_nothing_changed_does_nothing(smoke):
    a, _ = smoke
    r = snakemake(a, "-n")
    assert "Nothing to be done" in r.stdout + r.stderr


@pytest.mark.slow
def test_changing_only_the_evaluation_settings_reruns_only_evaluation(smoke, tmp_path):
    a, _ = smoke
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["eval"]["samples"] = 3
    changed = tmp_path / "smoke-eval.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    eval_cfg = exp_dir(a) / "config" / "eval" / "lcb.yaml"
    before = eval_cfg.read_text(), eval_cfg.stat().st_mtime_ns
    r = snakemake(a, "-n", configfile=changed)
    jobs = _job_counts(r.stdout + r.stderr)
    assert jobs == {
        "eval_sft": 1,
        "eval_checkpoint": 16,
        "track_sft_evals": 1,
        "track_run_evals": 8,
        "aggregate": 1,
        "report": 1,
        "all": 1,
    }, jobs
    # a dry run leaves the recorded stage configs alone
    assert (eval_cfg.read_text(), eval_cfg.stat().st_mtime_ns) == before
    assert "Nothing to be done" in (lambda r: r.stdout + r.stderr)(snakemake(a, "-n"))


@pytest.mark.slow
def test_changing_the_rl_settings_reruns_rl_and_what_follows_but_not_sft(smoke, tmp_path):
    a, _ = smoke
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["rl"]["lr"] = 1.0e-4
    changed = tmp_path / "smoke-rl.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = _job_counts((lambda r: r.stdout + r.stderr)(snakemake(a, "-n", configfile=changed)))
    assert jobs.get("rl") == 8 and "sft" not in jobs and "data" not in jobs
    assert jobs.get("eval_checkpoint") == 16 and "eval_sft" not in jobs


@pytest.mark.slow
def test_changing_one_variants_settings_reruns_that_variant_alone(smoke, tmp_path):
    a, _ = smoke
    cfg = yaml.safe_load(SMOKE.read_text())
    cfg["variants"]["gspo-bf16-rollout"]["rl"]["rollout"]["dtype"] = "float16"
    changed = tmp_path / "smoke-variant.yaml"
    changed.write_text(yaml.safe_dump(cfg))
    jobs = _job_counts((lambda r: r.stdout + r.stderr)(snakemake(a, "-n", configfile=changed)))
    assert jobs.get("rl") == 2 and jobs.get("eval_checkpoint") == 4, jobs
    assert "sft" not in jobs and "eval_sft" not in jobs


@pytest.mark.slow
def test_an_rl_job_killed_by_sigkill_resumes_in_the_same_mlflow_run_with_every_point_once(smoke):
    # Run b (its determinism was checked already): its gspo seed0 job runs again from scratch
    # and is killed with -9 (snakemake and its job) once its step-2 checkpoint is written; the
    # workflow run again, to that run's MLflow records, resumes it from that checkpoint.
    from gspo.tracking.store import numeric_metrics

    _, b = smoke
    base = exp_dir(b)
    run_dir = base / "rl" / "gspo" / "seed0"
    before = (run_dir / "metrics.jsonl").read_text()
    first_id = json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
    (run_dir / "summary.json").unlink()
    shutil.rmtree(run_dir / "checkpoints")
    shutil.rmtree(base / "eval" / "gspo" / "seed0")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("MLFLOW_", "GSPO_MLFLOW"))}
    cmd = SNAKEMAKE + [
        "-d",
        str(b),
        "--workflow-profile",
        str(ROOT / "profiles" / "default"),
        "--configfile",
        str(SMOKE),
        "--cores",
        "1",
        str(run_dir.relative_to(b) / "summary.json"),
    ]
    with open(b / "killed.log", "w") as log:
        proc = subprocess.Popen(
            cmd,
            env={**env, "OMP_NUM_THREADS": "1"},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    deadline = time.time() + 300
    while not (run_dir / "checkpoints" / "step_000002").is_dir():
        assert proc.poll() is None, (b / "killed.log").read_text()[-3000:]
        assert time.time() < deadline, "no step-2 checkpoint within 5 minutes"
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert not (run_dir / "checkpoints" / "step_000004").exists(), "killed too late"
    killed_id = json.loads((run_dir / "mlflow_run.json").read_text())["run_id"]
    cl = mlflow_client(b)
    assert cl.get_run(killed_id).info.status == "RUNNING"  # nobody could close it
    assert cl.get_run(first_id).info.lifecycle_stage == "deleted"  # started over: replaced

    snakemake(b, "--unlock")
    r = snakemake(
        b, "--cores", "2", "--rerun-incomplete", "results/smoke/eval/gspo/seed0/mlflow.json"
    )
    assert (
        "resuming from the latest checkpoint"
        in (exp_dir(b) / "logs" / "rl" / "gspo-seed0.log").read_text()
    )
    info = json.loads((run_dir / "run_info.json").read_text())
    assert info["resumed_from"].endswith("step_000002")
    after = (run_dir / "metrics.jsonl").read_text()
    strip = [_strip(json.loads(x)) for x in before.splitlines()]
    assert [_strip(json.loads(x)) for x in after.splitlines()] == strip
    assert json.loads((run_dir / "mlflow_run.json").read_text())["run_id"] == killed_id
    run = cl.get_run(killed_id)
    assert run.info.status == "FINISHED" and run.data.tags["resumed_at_step"] == "2"
    exp = cl.get_experiment_by_name("smoke").experiment_id
    live = cl.search_runs([exp], "tags.stage = 'rl' and tags.variant = 'gspo' and tags.seed = '0'")
    assert [x.info.run_id for x in live] == [killed_id]
    # MLflow holds every training metric exactly as metrics.jsonl does, step for step
    rows = [json.loads(x) for x in after.splitlines()]
    keys = set(numeric_metrics({k: v for rec in rows for k, v in rec.items() if k != "step"}))
    assert "reward_mean" in keys and "clip_frac_tokens" in keys
    for key in sorted(keys):
        want = [(rec["step"], float(rec[key])) for rec in rows if key in numeric_metrics(rec)]
        got = sorted((m.step, m.value) for m in cl.get_metric_history(killed_id, key))
        if key == "compute_flops":  # the evaluations add the SFT model's point: no compute
            assert got[0] == (0, 0.0)
            got = got[1:]
        assert len(got) == len(want) and [(s, v) for s, v in got if v == v] == [
            (s, v) for s, v in want if v == v
        ], key
    # its evaluations, recorded again, replaced the earlier ones: one eval run per budget and
    # benchmark, one score per checkpoint step in the training run
    evals = cl.search_runs(
        [exp], "tags.stage = 'eval' and tags.variant = 'gspo' and tags.seed = '0'"
    )
    assert sorted((e.data.tags["budget"], e.data.tags["benchmark"]) for e in evals) == sorted(
        (str(bu), be) for bu in (0, 50, 100) for be in ("aime", "cf", "lcb")
    )
    assert sorted(m.step for m in cl.get_metric_history(killed_id, "eval/aime/pass_at_1")) == [
        0,
        2,
        4,
    ]
    # only that run's RL job and what depends on it ran again
    assert "rule sft:" not in r.stdout + r.stderr and "rule data:" not in r.stdout + r.stderr


# -- configuration ---------------------------------------------------------------------------------


def _bad_config(tmp_path, edit):
    cfg = yaml.safe_load(SMOKE.read_text())
    edit(cfg)
    p = tmp_path / "bad.yaml"
    p.write_text(yaml.safe_dump(cfg))
    return p


@pytest.mark.parametrize(
    "edit, message",
    [
        (
            lambda c: c.update(algorithms=["grpo", "ppo"]),
            # the schema's enum is the registry's names, in its order
            r"'ppo' is not one of " + re.escape(str(list(OBJECTIVES))),
        ),
        (lambda c: c.update(budgets=[0, -25, 100]), r"-25 is less than the minimum of 0"),
        (lambda c: c["sft"].pop("model"), r"'model' is a required property"),
        (
            lambda c: c["sft"].update(model="/nonexistent/qwen3-base"),
            r"config: sft\.model: '/nonexistent/qwen3-base' is neither a model preset",
        ),
        (lambda c: c["rl"].update(minibatches=5), r"config: rl\.minibatches: 5 does not divide"),
        (
            lambda c: c["variants"].update(gspo={"algorithm": "gspo"}),
            r"config: variants\.gspo: has the name of a plain algorithm",
        ),
        (
            lambda c: c["variants"]["gspo-bf16-rollout"].update(baseline="ppo"),
            r"config: variants\.gspo-bf16-rollout\.baseline: 'ppo' is neither in algorithms nor in variants",
        ),
        (
            lambda c: c["variants"]["gspo-bf16-rollout"]["rl"].update(old_logprobs="cached"),
            r"config: variants\.gspo-bf16-rollout\.rl\.old_logprobs: must be 'recompute' or 'rollout'",
        ),
        (
            lambda c: c["variants"]["gspo-bf16-rollout"]["rl"].update(seed=3),
            r"config: variants\.gspo-bf16-rollout\.rl\.seed: is set by the workflow",
        ),
    ],
    ids=[
        "unknown-algorithm",
        "negative-budget",
        "missing-model",
        "missing-model-path",
        "rl-field-checked-by-gspo-config",
        "variant-named-like-an-algorithm",
        "unknown-baseline",
        "variant-field-checked-by-gspo-config",
        "variant-sets-a-managed-field",
    ],
)
def test_a_bad_config_value_fails_before_any_job_runs_and_names_the_key(
    tmp_path, edit, message, request
):
    cfg = _bad_config(tmp_path, edit)
    r = snakemake(tmp_path, "--cores", "1", configfile=cfg, timeout=300, check=False)
    out = r.stdout + r.stderr
    assert r.returncode != 0
    assert re.search(message, out), out[-3000:]
    key = {
        "unknown-algorithm": "['algorithms']",
        "negative-budget": "['budgets']",
        "missing-model": "['sft']",
    }.get(request.node.callspec.id)
    if key:
        assert key in out, out[-3000:]
    assert not (tmp_path / "results" / "smoke" / "data").exists()
    assert "rule data:" not in out


def test_the_schema_documents_every_key_with_a_description_and_a_default():
    schema = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())
    missing = []

    def walk(node, path):
        if "$ref" in node:
            node = {**schema["$defs"][node["$ref"].split("/")[-1]], **node}
        for name, sub in (node.get("properties") or {}).items():
            where = f"{path}.{name}" if path else name
            if "description" not in sub and "$ref" not in sub:
                missing.append(f"{where}: description")
            if "default" not in sub:
                missing.append(f"{where}: default")
            walk(sub, where)

    walk(schema, "")
    assert not missing, missing


def test_the_real_scale_example_passes_validation_and_a_dry_run(tmp_path):
    r = snakemake(tmp_path, "-n", configfile=ROOT / "config" / "real-scale.yaml", timeout=300)
    jobs = _job_counts(r.stdout + r.stderr)
    assert jobs["rl"] == 9 and jobs["eval_checkpoint"] == 9 * 4 and jobs["sft"] == 1
    # the plan says what it will spend; a local run into SQLite needs no server
    assert re.search(r"^plan: compute, estimated: ~[\d,]+ H100 GPU-hours \(sft", r.stderr, re.M)
    assert "the MLflow store is SQLite" not in r.stderr
    assert (
        "vllm"
        in (
            tmp_path / "results" / "qwen3-1.7b-math-code" / "config" / "rl" / "gspo-seed0.yaml"
        ).read_text()
    )


def test_the_workflow_passes_snakemake_lint(tmp_path):
    r = snakemake(tmp_path, "--lint", configfile=None, timeout=300)
    assert "Congratulations, your workflow is in a good condition!" in r.stdout + r.stderr


def _plan_module():
    sys.path.insert(0, str(ROOT / "workflow"))
    from gspo_workflow import plan

    return plan


def test_a_layered_config_drops_a_default_training_task_with_weight_0():
    # Snakemake merges a layered mapping into the default's key by key: {aime: 1.0} alone
    # would keep the default's lcb and cf; weight 0 is how a layer leaves a task out
    from snakemake.utils import update_config, validate

    from gspo.config.fields import ConfigError

    cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    update_config(cfg, {"benchmarks": ["aime"], "train_tasks": {"aime": 1.0, "lcb": 0, "cf": 0}})
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    assert plan.train_tasks == plan.rl_tasks == {"aime": 1.0} and plan.data_tasks == ["aime"]
    cfg["train_tasks"]["aime"] = 0
    with pytest.raises(ConfigError, match="train_tasks: every task has weight 0"):
        _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)


def _launch(**resources) -> str:
    return str(_plan_module().Plan.launcher(None, resources))


MULTI_NODE = dict(nodes=2, tasks=2, mpi="srun", gres="gpu:h100:8", cpus_per_task=64)


def test_the_launcher_starts_python_torchrun_or_one_torchrun_per_slurm_node():
    assert _launch() == _launch(gpu=1) == _launch(gres="gpu:1") == "python -m"
    one_node = "torchrun --standalone --nproc-per-node=8 -m"
    assert (
        _launch(gpu=8) == _launch(gres="gpu:h100:8") == _launch(nodes=1, gres="gpu:8") == one_node
    )
    # CPU ranks (gloo) where there is no GPU: the rehearsal profile's 2 ranks; GPUs win
    assert _launch(ranks=2) == "torchrun --standalone --nproc-per-node=2 -m"
    assert _launch(ranks=1) == "python -m" and _launch(ranks=2, gres="gpu:h100:8") == one_node
    assert _launch(**MULTI_NODE) == (
        "srun --nodes=2 --ntasks=2 --ntasks-per-node=1 --gres=gpu:h100:8 --kill-on-bad-exit=1"
        " --cpus-per-task=64 torchrun --nnodes=2 --nproc-per-node=8 --rdzv-backend=c10d"
        " --rdzv-endpoint=$(hostname):29500 --rdzv-id=$SLURM_JOB_ID -m"
    )
    # several nodes without what the SLURM plugin needs would ask for the wrong allocation
    with pytest.raises(ValueError, match=r"gres .*tasks: 2.*mpi: srun"):
        _launch(nodes=2, gpu=8)


def test_the_multi_node_command_expands_the_rendezvous_host_and_job_id_in_the_jobs_shell(tmp_path):
    # stand-in srun: records its arguments (the real one starts torchrun on each node)
    (tmp_path / "srun").write_text('#!/bin/sh\nprintf "%s\\n" "$@" > "$ARGS"\n')
    (tmp_path / "srun").chmod(0o755)
    env = {
        **os.environ,
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
        "ARGS": str(tmp_path / "args"),
        "SLURM_JOB_ID": "4242",
    }
    cmd = f"exec {_launch(**MULTI_NODE)} pipeline.train --config c.yaml > /dev/null 2>&1"
    subprocess.run(["bash", "-c", cmd], env=env, check=True, timeout=30)
    args = (tmp_path / "args").read_text().splitlines()
    host = subprocess.run(["hostname"], capture_output=True, text=True).stdout.strip()
    assert args[args.index("torchrun") :] == [
        "torchrun",
        "--nnodes=2",
        "--nproc-per-node=8",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint={host}:29500",
        "--rdzv-id=4242",
        "-m",
        "pipeline.train",
        "--config",
        "c.yaml",
    ]


def _profile_value(v):
    """A profile resource as Snakemake reads it: strings are Python expressions."""
    import ast

    return ast.literal_eval(v) if isinstance(v, str) else v


def test_the_slurm_profile_asks_for_what_the_training_jobs_use_and_fits_the_real_scale_config():
    from snakemake.utils import validate

    text = (ROOT / "profiles" / "slurm" / "config.yaml").read_text()
    profile = yaml.safe_load(text)
    rules = set(
        re.findall(
            r"^rule (\w+):",
            "".join(
                p.read_text()
                for p in [ROOT / "Snakefile", *sorted((ROOT / "workflow" / "rules").glob("*.smk"))]
            ),
            re.M,
        )
    )
    assert set(profile["set-resources"]) | set(profile["set-threads"]) <= rules
    # the commented example of several nodes, as the lines to add to a rule
    example = text[text.index("# Several nodes") : text.index("\nexecutor:")]
    extra = {
        k: _profile_value(yaml.safe_load(v))
        for k, v in re.findall(r"^#\s{3,}(\w+):\s*(\S+)", example, re.M)
    }
    assert extra["nodes"] > 1 and extra.keys() == {"nodes", "tasks", "mpi"}

    cfg = yaml.safe_load((ROOT / "config" / "real-scale.yaml").read_text())
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    batches = {
        "sft": [plan.sft_cfg.batch_size],
        "rl": [c.prompts_per_step for c in plan.rl_cfgs.values()],
    }
    for rule, batch in batches.items():
        res = {k: _profile_value(v) for k, v in profile["set-resources"][rule].items()}
        for r in (res, {**res, **extra}):
            gpus = _plan_module().launch.gpus_per_node(r)
            ranks = r.get("nodes", 1) * gpus
            assert gpus > 1 and f"--nproc-per-node={gpus} " in _launch(**r)
            assert all(b % ranks == 0 for b in batch), (rule, batch, ranks)
            # one task (the torchrun) per node, holding every rank's threads
            assert r["tasks_per_gpu"] == 0 and r.get("tasks", 1) == r.get("nodes", 1)
            assert r["cpus_per_task"] >= gpus * profile["set-threads"][rule]
            assert "gpu" not in r, "`gpu` is --gpus, a count for the whole job: use gres"


def test_the_slurm_profile_evaluates_on_every_gpu_of_a_node_and_gives_every_rank_chunks():
    from snakemake.utils import update_config, validate

    profile = yaml.safe_load((ROOT / "profiles" / "slurm" / "config.yaml").read_text())
    cfg = yaml.safe_load((ROOT / "config" / "real-scale.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "config" / "paper-protocol.yaml").read_text()))
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    for rule in ("eval_sft", "eval_checkpoint"):
        r = {k: _profile_value(v) for k, v in profile["set-resources"][rule].items()}
        gpus = _plan_module().launch.gpus_per_node(r)
        assert gpus > 1 and _launch(**r) == f"torchrun --standalone --nproc-per-node={gpus} -m"
        assert r["tasks_per_gpu"] == 0 and "gpu" not in r
        # every rank: its torch threads and its code sandboxes
        assert all(
            r["cpus_per_task"] >= gpus * (profile["set-threads"][rule] + c["workers"])
            for c in plan.eval_cfgs.values()
        ), rule
        # AIME 2024's 30 problems make a chunk of batch_prompts for every rank
        assert -(-30 // plan.eval_cfgs["aime"]["batch_prompts"]) >= gpus


def test_the_eval_rules_run_one_process_or_one_rank_per_gpu_they_are_given(tmp_path):
    r = snakemake(
        tmp_path,
        "-n",
        "-p",
        "--set-resources",
        "eval_checkpoint:gres='gpu:h100:2'",
        configfile=None,
        timeout=300,
    )
    cmds = [
        line.split("exec ", 1)[1]
        for line in (r.stdout + r.stderr).splitlines()
        if "pipeline.evaluate" in line and "exec " in line
    ]
    sft = [c for c in cmds if " --out results/tiny/eval/sft " in c]
    # the tiny default: one plain process, as before; with 2 GPUs: torchrun with 2 ranks
    assert len(sft) == 1 and sft[0].startswith("python -m pipeline.evaluate --model ")
    rest = [c for c in cmds if c not in sft]
    assert rest and all(
        c.startswith("torchrun --standalone --nproc-per-node=2 -m pipeline.evaluate --model ")
        for c in rest
    )


def test_the_default_config_plans_grpo_and_gspo_over_five_seeds_and_five_budgets(tmp_path):
    r = snakemake(tmp_path, "-n", configfile=None, timeout=300)
    jobs = _job_counts(r.stdout + r.stderr)
    assert re.search(r"^plan: compute, estimated: ~\d+ CPU job-minutes \(data", r.stderr, re.M)
    # verdicts need at least 3 training runs per algorithm (pipeline.report.resample.MIN_RUNS)
    assert jobs["rl"] == 10 and jobs["eval_checkpoint"] == jobs["rl"] * 4  # 25/50/75/100 %
    rl = yaml.safe_load(
        (tmp_path / "results" / "tiny" / "config" / "rl" / "gspo-seed1.yaml").read_text()
    )
    assert rl["ckpt_every"] == 8 and rl["steps"] == 32 and rl["seed"] == 1
    assert {d["path"].split("/")[-1] for d in rl["train_data"]} == {
        "aime_rl.jsonl",
        "lcb_rl.jsonl",
        "cf_rl.jsonl",
    }


def test_the_reproducibility_config_runs_the_default_with_disjoint_seeds_in_its_own_experiment(
    tmp_path,
):
    r = snakemake(tmp_path, "-n", configfile=None, timeout=300)
    r2 = snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(ROOT / "config" / "default.yaml"),
        str(ROOT / "config" / "reproduce.yaml"),
        configfile=None,
        timeout=300,
    )
    assert _job_counts(r2.stdout + r2.stderr) == _job_counts(r.stdout + r.stderr)
    default = yaml.safe_load(
        (tmp_path / "results" / "tiny" / "config" / "workflow.yaml").read_text()
    )
    shifted = yaml.safe_load(
        (tmp_path / "results" / "tiny-seeds-b" / "config" / "workflow.yaml").read_text()
    )
    assert not set(shifted["seeds"]) & set(default["seeds"])
    assert len(shifted["seeds"]) == len(default["seeds"])
    assert {k: v for k, v in shifted.items() if k not in ("seeds", "experiment")} == {
        k: v for k, v in default.items() if k not in ("seeds", "experiment")
    }


@pytest.mark.slow
def test_snakemake_report_bundles_the_registered_report(smoke, tmp_path):
    a, _ = smoke
    out = tmp_path / "snakemake-report.html"
    snakemake(a, "--report", str(out), timeout=600)
    text = out.read_text(errors="replace")
    assert out.stat().st_size > 10_000
    assert "score_vs_compute.png" in text and "final_scores.csv" in text


def test_the_precision_experiment_plans_bf16_rollout_variants_beside_their_recompute_baselines(
    tmp_path,
):
    r = snakemake(tmp_path, "-n", configfile=ROOT / "config" / "precision.yaml", timeout=300)
    jobs = _job_counts(r.stdout + r.stderr)
    assert jobs["rl"] == 4 * 2 and jobs["eval_checkpoint"] == 8 * 2
    cfgs = tmp_path / "results" / "precision" / "config"
    for alg in ("grpo", "gspo"):
        base = yaml.safe_load((cfgs / "rl" / f"{alg}-seed0.yaml").read_text())
        var = yaml.safe_load((cfgs / "rl" / f"{alg}-bf16-rollout-seed0.yaml").read_text())
        assert base["old_logprobs"] == "recompute" and base["rollout"]["dtype"] == "float32"
        assert var["old_logprobs"] == "rollout" and var["rollout"]["dtype"] == "bfloat16"
        # everything else, the algorithm's own clip range included, is the baseline's
        diff = {k for k in base if base[k] != var[k]}
        assert diff == {"old_logprobs", "rollout", "out_dir"}, diff
    report = yaml.safe_load((cfgs / "report.yaml").read_text())
    assert report["variants"]["gspo-bf16-rollout"]["baseline"] == "gspo"


def test_the_moe_ablation_plans_grpo_and_gspo_with_and_without_routing_replay(tmp_path):
    r = snakemake(tmp_path, "-n", configfile=ROOT / "config" / "moe.yaml", timeout=300)
    jobs = _job_counts(r.stdout + r.stderr)
    assert jobs["rl"] == 5 * 2
    cfgs = tmp_path / "results" / "moe" / "config"
    sft = yaml.safe_load((cfgs / "sft.yaml").read_text())
    assert sft["model"] == "tiny-moe"
    rl = {
        v: yaml.safe_load((cfgs / "rl" / f"{v}-seed1.yaml").read_text())
        for v in ("grpo", "gspo", "grpo-replay", "gspo-replay", "grpo-engine-replay")
    }
    assert {v: (c["routing_replay"], c["routing_replay_source"]) for v, c in rl.items()} == {
        "grpo": (False, "trainer"),
        "gspo": (False, "trainer"),
        "grpo-replay": (True, "trainer"),
        "gspo-replay": (True, "trainer"),
        "grpo-engine-replay": (True, "engine"),
    }
    engine = rl["grpo-engine-replay"]
    assert (engine["old_logprobs"], engine["rollout"]["dtype"]) == ("rollout", "bfloat16")
    # rl_tasks: RL prompts are math only, while SFT keeps the three-task mix
    assert [pathlib.Path(d["path"]).name for d in engine["train_data"]] == ["aime_rl.jsonl"]
    assert [pathlib.Path(d["path"]).name for d in sft["train_data"]] == [
        "aime_sft.jsonl",
        "lcb_sft.jsonl",
        "cf_sft.jsonl",
    ]


def test_checkpoints_between_the_first_and_last_budget_take_the_intermediate_evaluation():
    # the default evaluates the last budget (and the SFT model) in full, the others on the same
    # problems with fewer samples (the curves' population: pipeline.report.curves)
    from types import SimpleNamespace as Wildcards

    from snakemake.utils import validate

    schema = str(ROOT / "workflow" / "schemas" / "config.schema.yaml")
    cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    validate(cfg, schema, set_default=True)
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    assert plan.checkpoint_eval_configs(Wildcards(budget="100")) == plan.eval_configs()
    for budget in ("25", "50", "75"):
        assert plan.checkpoint_eval_configs(Wildcards(budget=budget)) == [
            plan.cfg_path(f"eval/{b}-intermediate") for b in plan.benchmarks
        ]
    for b in plan.benchmarks:
        full, part = plan.eval_cfgs[b], plan.mid_eval_cfgs[b]
        assert {k for k in full if full[k] != part[k]} == {"samples"}, b
        assert part["limit"] == full["limit"] and part["samples"] < full["samples"]
    texts = plan.stage_texts()
    assert texts[plan.cfg_path("eval/aime-intermediate")] != texts[plan.cfg_path("eval/aime")]
    # none set: every checkpoint is evaluated alike, and no intermediate config is written
    for b in plan.benchmarks:
        cfg["eval"][b]["intermediate"] = {}
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    assert plan.mid_eval_cfgs == {}
    assert plan.checkpoint_eval_configs(Wildcards(budget="50")) == plan.eval_configs()
    assert not any(p.endswith("-intermediate.yaml") for p in plan.stage_texts())


def test_one_prompt_format_reaches_sft_rl_and_evaluation():
    from snakemake.utils import validate

    cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    cfg["prompt"] = {"format": "chat", "system": "Think, then answer."}
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    want = {"format": "chat", "system": "Think, then answer.", "enable_thinking": True}
    assert vars(plan.sft_cfg.prompt) == want
    assert all(vars(c.prompt) == want for c in plan.rl_cfgs.values())
    assert all(c["prompt"] == want for c in plan.eval_cfgs.values())
    cfg["eval"]["prompt"] = {"format": "raw"}  # one place only: evaluation may not differ
    from gspo.config.fields import ConfigError

    with pytest.raises(ConfigError, match="eval.prompt: is set by the workflow"):
        _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)


def test_the_paper_protocol_preset_sets_the_papers_evaluation_in_one_place():
    from snakemake.utils import update_config, validate

    cfg = yaml.safe_load((ROOT / "config" / "real-scale.yaml").read_text())
    update_config(cfg, yaml.safe_load((ROOT / "config" / "paper-protocol.yaml").read_text()))
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    plan = _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)
    ev = plan.eval_cfgs
    assert {b: c["samples"] for b, c in ev.items()} == {"aime": 32, "lcb": 8, "cf": 8}
    assert all(
        c["protocol"] == "gspo-paper-2025"
        and c["max_new_tokens"] == 32768
        and c["temperature"] == 0.6
        and c["top_p"] == 0.95
        for c in ev.values()
    )
    lcb = plan.data_cfg.files.lcb
    assert (lcb.test_start, lcb.test_end) == ("2024-10-01", "2025-02-01") and lcb.test
    # the real-scale data stays as it was
    assert plan.data_cfg.files.aime.test.endswith("train-00000-of-00001.parquet")


def test_the_fair_protocol_trains_every_algorithm_at_every_rate_and_chooses_on_validation(tmp_path):
    r = snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(ROOT / "config" / "default.yaml"),
        str(ROOT / "config" / "fair.yaml"),
        configfile=None,
        timeout=300,
    )
    jobs = _job_counts(r.stdout + r.stderr)
    assert jobs["rl"] == 30 and jobs["eval_val"] == 30 and jobs["select"] == 1  # 2 x 3 x 5
    assert jobs["eval_checkpoint"] == 30  # budget 100
    base = tmp_path / "results" / "tiny-fair" / "config"
    rl = yaml.safe_load((base / "rl" / "gspo-lr2e-5-seed3.yaml").read_text())
    assert rl["lr"] == 2e-5 and rl["algorithm"] == "gspo" and rl["seed"] == 3
    report = yaml.safe_load((base / "report.yaml").read_text())
    assert report["variants"]["gspo-lr1e-4"]["baseline"] == "grpo-lr1e-4"  # same rate
    assert report["variants"]["grpo-lr1e-4"]["baseline"] == ""
    data = yaml.safe_load((base / "data.yaml").read_text())
    assert data["val_n"] == 500 and data["val_tasks"] == ["aime"]
    val = yaml.safe_load((base / "eval" / "aime-val.yaml").read_text())
    full = yaml.safe_load((base / "eval" / "aime.yaml").read_text())
    assert val["data"].endswith("data/aime_val.jsonl") and full["data"].endswith("aime_test.jsonl")
    assert (val["limit"], val["samples"]) == (0, 4)
    sel = yaml.safe_load((base / "select.yaml").read_text())
    assert [p["lr"] for p in sel["grid"]["grpo"]] == [2e-5, 5e-5, 1e-4]
    assert all(
        len(p["results"]) == 5 and all("/val/aime/" in f for f in p["results"])
        for pts in sel["grid"].values()
        for p in pts
    )


def test_the_fair_protocol_refuses_a_validation_benchmark_the_runs_do_not_train_on():
    from snakemake.utils import validate

    cfg = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())
    cfg["fair"] = {"lr_grid": [1e-4], "benchmark": "cf"}
    cfg["benchmarks"] = ["aime", "lcb"]  # CodeForces-style problems are not scored
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    with pytest.raises(
        Exception, match="fair.benchmark: 'cf' must be in benchmarks and in the RL mix"
    ):
        _plan_module().Plan(cfg, workdir=ROOT, dry_run=True)


def test_the_stress_variant_is_the_default_at_a_larger_rate_with_more_off_policy_updates(tmp_path):
    snakemake(
        tmp_path,
        "-n",
        "--configfile",
        str(ROOT / "config" / "default.yaml"),
        str(ROOT / "config" / "stress.yaml"),
        configfile=None,
        timeout=300,
    )
    base = tmp_path / "results"
    stress = yaml.safe_load(
        (base / "tiny-stress" / "config" / "rl" / "gspo-seed4.yaml").read_text()
    )
    default = yaml.safe_load((ROOT / "config" / "default.yaml").read_text())["rl"]
    assert stress["lr"] > 2 * default["lr"] and stress["minibatches"] > default["minibatches"]
    assert (stress["steps"], stress["prompts_per_step"]) == (
        default["steps"],
        default["prompts_per_step"],
    )
