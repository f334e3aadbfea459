"""What the workflow's plan checks before any job starts, and the compute it says the run will spend
(workflow/gspo_workflow/preflight.py, gspo/infra/compute_plan.py): each check on a real config, in
process (the dry runs in test_workflow.py and test_verl_engine.py show the lines Snakemake
prints)."""

from __future__ import annotations

import io
import pathlib
import re
import sys

import pytest
import yaml

from gspo.config.fields import ConfigError
from gspo.infra import compute_plan as cp
from gspo.infra.memory_plan import PRESETS, Shape

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "workflow"))
from gspo_workflow import invocation, preflight  # noqa: E402
from gspo_workflow import plan as plan_mod  # noqa: E402


def config(*names: str, edit=None) -> dict:
    from snakemake.utils import update_config, validate

    cfg = {}
    for n in names:
        update_config(cfg, yaml.safe_load((ROOT / "config" / n).read_text()))
    if edit:
        edit(cfg)
    validate(cfg, str(ROOT / "workflow" / "schemas" / "config.schema.yaml"), set_default=True)
    return cfg


def plan(*names: str, edit=None, dry_run=True):
    return plan_mod.Plan(config(*names, edit=edit), workdir=ROOT, dry_run=dry_run)


def lines(p, executor="local") -> list[str]:
    out = io.StringIO()
    preflight.report(p, executor, out=out)
    return out.getvalue().splitlines()


# -- engines --------------------------------------------------------------------------------------


def test_a_variant_its_engine_refuses_stops_the_plan_with_trls_own_one_line_reason():
    def rollout_logprobs_on_trl(cfg):
        cfg["variants"]["gspo-trl"]["rl"]["old_logprobs"] = "rollout"

    with pytest.raises(ConfigError) as e:
        plan("smoke.yaml", edit=rollout_logprobs_on_trl)
    assert str(e.value).startswith(
        "config: variants.gspo-trl.rl.old_logprobs: not supported "
        "with engine: trl: 'rollout': TRL's generate returns no"
    )
    plan("smoke.yaml")  # as shipped, the TRL variant passes TRL's checks


def test_an_sft_engine_refusal_stops_the_plan():
    def chunked_trl_sft(cfg):
        cfg["sft"].update(engine="trl", logprob_chunk=64)

    with pytest.raises(
        ConfigError,
        match=r"^config: sft\.logprob_chunk: not supported with "
        r"engine: trl",
    ):
        plan("smoke.yaml", edit=chunked_trl_sft)


# -- the sandbox ----------------------------------------------------------------------------------


@pytest.fixture
def no_sandbox(monkeypatch):
    """A machine without bubblewrap, as the sandbox's own probe sees it."""
    from evaluators.execution import sandbox

    monkeypatch.setenv("GSPO_SANDBOX_BWRAP", "")
    monkeypatch.delenv("GSPO_UNSAFE_SANDBOX", raising=False)
    sandbox.reset_probe()
    yield
    sandbox.reset_probe()


def test_a_missing_sandbox_stops_a_real_run_of_code_benchmarks_before_any_job(no_sandbox):
    p = plan("smoke.yaml", dry_run=False)
    with pytest.raises(ConfigError) as e:
        lines(p)
    msg = str(e.value)
    assert "\n" not in msg and "lcb, cf run programs in the sandbox" in msg
    assert "bubblewrap (bwrap) not found" in msg and "docs/SANDBOX.md" in msg
    # a dry run (or a lint, a report), or a cluster whose jobs run on other machines, is told
    assert lines(plan("smoke.yaml"))[0].startswith("warning: config: benchmarks / rl_tasks: lcb")
    assert "the jobs run elsewhere" in lines(p, "slurm")[0]
    assert not invocation.runs_jobs(["snakemake", "--lint"]) and invocation.runs_jobs(
        ["snakemake", "--cores", "2"]
    )


def test_without_code_benchmarks_the_sandbox_is_not_needed(no_sandbox):
    def math_only(cfg):  # SFT runs no program: its mix may keep code tasks
        cfg.update(benchmarks=["aime"], rl_tasks={"aime": 1.0})

    out = lines(plan("smoke.yaml", edit=math_only, dry_run=False))
    assert out[0].startswith("plan: compute, estimated:")


# -- the MLflow store against the executor ----------------------------------------------------------


def test_sqlite_with_a_cluster_executor_is_a_one_line_warning_naming_the_server():
    warn = preflight.store_warning("sqlite:////shared/results/mlflow.db", "slurm")
    assert warn.startswith("warning: the MLflow store is SQLite") and preflight.SERVER in warn
    assert preflight.SERVER.split(" --")[0] in (ROOT / "docs" / "MLFLOW.md").read_text()
    assert preflight.store_warning("http://mlflow:5000", "slurm") is None
    assert preflight.store_warning("sqlite:///results/mlflow.db", "local") is None


def test_the_executor_comes_from_the_command_line_or_the_profile(tmp_path, monkeypatch):
    monkeypatch.delenv("SNAKEMAKE_PROFILE", raising=False)
    ex = lambda *a: invocation.executor(ROOT, ["snakemake", *a])  # noqa: E731
    assert ex("-n") == "local"  # profiles/default
    assert ex("--workflow-profile", str(ROOT / "profiles" / "slurm")) == "slurm"
    assert ex("--workflow-profile=profiles/slurm", "-e", "cluster-generic") == "cluster-generic"
    monkeypatch.chdir(tmp_path)  # snakemake -d: a profile named from the project
    monkeypatch.setenv("PWD", str(tmp_path))
    assert ex("--workflow-profile", "profiles/slurm") == "slurm"
    (tmp_path / "config.yaml").write_text("executor: googlebatch\njobs: 4\n")
    monkeypatch.setenv("SNAKEMAKE_PROFILE", str(tmp_path))
    assert ex() == "googlebatch"


# -- the compute ----------------------------------------------------------------------------------


def test_the_flops_per_token_are_the_trainers_own_accounting(tiny_model_dir, tiny_moe_model_dir):
    from gspo.model.flops import FlopCounter
    from gspo.model.models import load_model

    for folder in (tiny_model_dir, tiny_moe_model_dir):  # dense, and MoE's top-k experts
        model, _ = load_model(folder)
        shape = Shape.of(model.config.to_dict())
        for length in (1, 64, 300):
            assert cp.flops_per_token(shape, length) == pytest.approx(
                FlopCounter(model).forward([length]) / length
            )


def test_decoding_speed_is_the_one_profiles_slurm_sizes_evaluation_with():
    """profiles/slurm/config.yaml: ~2K tokens/s for 1.7B, ~1K for 8B, at 16K-token samples."""
    per_s = {
        m: 1e6 / cp.decode_seconds(Shape.of(PRESETS[m]), cp.GPU(), 1e6, 16384, 0.9)
        for m in ("Qwen3-1.7B", "Qwen3-8B")
    }
    assert 1500 < per_s["Qwen3-1.7B"] < 2500 and 800 < per_s["Qwen3-8B"] < 1300, per_s


def _total(head: str, unit: str) -> float:
    return float(re.search(rf"~([\d,.]+) {unit}", head).group(1).replace(",", ""))


def test_the_default_costs_what_its_run_took_and_real_scale_what_the_docs_say():
    default, real = (
        preflight.compute_lines(plan(*n)) for n in (("default.yaml",), ("real-scale.yaml",))
    )
    # the default run took 1,300 job-seconds on the machine the rates come from (6.4 of them RL,
    # 11.7 evaluation); 10 RL runs, 3 benchmarks x (the SFT model + 10 runs x 4 budgets)
    assert 18 <= _total(default[0], "CPU job-minutes") <= 26, default
    assert "rl 6.4 in 10 runs" in default[0] and "in 123 model x benchmark" in default[0]
    hours = _total(real[0], "H100 GPU-hours")
    assert re.search(r"\(sft \d+, rl [\d,]+ in 9 runs, eval [\d,]+ in 111 ", real[0]), real[0]
    assert "aime, lcb, cf: 300 test problems assumed" in real[1]
    scale = " ".join((ROOT / "docs" / "SCALE.md").read_text().split())
    assert f"~{hours:,.0f} H100 GPU-hours" in scale


def test_the_defaults_note_on_a_third_algorithm_is_what_the_plan_counts():
    line = next(
        ln
        for ln in (ROOT / "config" / "default.yaml").read_text().splitlines()
        if ln.startswith("algorithms:")
    )
    runs, percent = map(int, re.search(r"\+(\d+) RL runs.*~\+(\d+)% time", line).groups())
    base = plan("default.yaml")
    more = plan("default.yaml", edit=lambda c: c["algorithms"].append("gspo_token"))
    assert len(more.rl_cfgs) - len(base.rl_cfgs) == runs == len(base.seeds)
    minutes = [_total(preflight.compute_lines(p)[0], "CPU job-minutes") for p in (base, more)]
    assert minutes[1] / minutes[0] - 1 == pytest.approx(percent / 100, abs=0.1), minutes
