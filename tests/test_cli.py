"""Every stage command behaves one way (pipeline._cli), and every command the docs show is one the
code takes: each `python -m pipeline.<stage> ...` in the docs, README, config/README and the
workflow's rules parsed by that stage's own parser, without running the stage."""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import re
import shlex
import subprocess
import sys

import pytest

from evaluators.evaluation import EvalConfig
from evaluators.execution.sandbox import SandboxUnavailable
from gspo.config.data import DataGenConfig
from gspo.config.fields import ConfigError
from gspo.config.train import RLConfig, SFTConfig
from gspo.errors import TrainingError
from gspo.infra.provenance import version
from gspo.io import DataError
from pipeline import (
    _cli,
    aggregate,
    data,
    evaluate,
    memory_plan,
    mlflow_server,
    select,
    sft,
    track,
    train,
    verl,
)
from pipeline.report import __main__ as report

ROOT = pathlib.Path(__file__).resolve().parents[1]
STAGES = {
    "pipeline.data": data,
    "pipeline.sft": sft,
    "pipeline.train": train,
    "pipeline.verl": verl,
    "pipeline.evaluate": evaluate,
    "pipeline.track": track,
    "pipeline.aggregate": aggregate,
    "pipeline.report": report,
    "pipeline.memory_plan": memory_plan,
    "pipeline.mlflow_server": mlflow_server,
    "pipeline.select": select,
}
CONFIG_OF = {
    "pipeline.data": DataGenConfig,
    "pipeline.sft": SFTConfig,
    "pipeline.train": RLConfig,
    "pipeline.verl": RLConfig,
    "pipeline.evaluate": EvalConfig,
}
DOCS = [
    ROOT / "README.md",
    ROOT / "config" / "README.md",
    *sorted((ROOT / "docs").glob("*.md")),
    *sorted((ROOT / "workflow" / "rules").glob("*.smk")),
]


def test_the_project_has_one_version_and_every_stage_prints_it(capsys):
    import tomllib

    assert version() == tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    for name, module in STAGES.items():
        with pytest.raises(SystemExit) as e:
            module.parser().parse_args(["--version"])
        assert e.value.code == 0 and capsys.readouterr().out == f"gspo-bench {version()}\n", name


def _leaves(cls, prefix=""):
    for f in dataclasses.fields(cls):
        default = f.default if f.default is not dataclasses.MISSING else f.default_factory()
        if dataclasses.is_dataclass(default):
            yield from _leaves(type(default), f"{prefix}{f.name}.")
        else:
            yield prefix + f.name


@pytest.mark.parametrize("name", sorted(CONFIG_OF))
def test_a_configured_stages_help_names_every_field_it_takes(name):
    text = STAGES[name].parser().format_help()
    missing = [f for f in _leaves(CONFIG_OF[name]) if f"\n  {f} (default " not in text]
    assert not missing and "--set KEY=VALUE" in text, missing


def test_a_bad_flag_is_one_line_and_exit_status_2_for_every_stage(capsys):
    for name, module in STAGES.items():
        with pytest.raises(SystemExit) as e:
            module.parser().parse_args(["--no-such-flag"])
        err = capsys.readouterr().err
        assert e.value.code == 2 and err.count("\n") == 1 and err.startswith("error: "), name


@pytest.mark.parametrize(
    "error, code",
    [
        (ConfigError("rl.yaml: lr: expected a number"), 2),
        (DataError("a.jsonl:3: no prompt"), 2),
        (FileNotFoundError("missing.yaml"), 2),
        (TrainingError("3 non-finite updates\nin a row"), 1),
        (SandboxUnavailable("cannot isolate untrusted code"), 1),
    ],
)
def test_known_errors_are_one_line_exit_2_for_bad_input_and_1_for_a_failed_run(capsys, error, code):
    def main(argv):
        raise error

    with pytest.raises(SystemExit) as e:
        _cli.run(main, [])
    err = capsys.readouterr().err
    assert e.value.code == code and err.count("\n") == 1 and err.startswith("error: ")


def test_a_stage_exits_with_what_its_main_returns_and_a_bug_keeps_its_traceback():
    for returned, code in ((None, 0), (0, 0), (1, 1)):
        with pytest.raises(SystemExit) as e:
            _cli.run(lambda argv, r=returned: r, [])
        assert e.value.code == code
    with pytest.raises(KeyError):
        _cli.run(lambda argv: {}["bug"], [])


def test_every_stage_module_has_a_parser_and_runs_main_through_the_shared_cli():
    for name, module in STAGES.items():
        tree = ast.parse(pathlib.Path(module.__file__).read_text())
        mains = [
            n for n in tree.body if isinstance(n, ast.If) and "__main__" in ast.unparse(n.test)
        ]
        assert len(mains) == 1 and "run(main)" in ast.unparse(mains[0]), name


def test_report_and_aggregate_say_a_missing_file_or_experiment_in_one_line(tmp_path, capsys):
    store = f"sqlite:///{tmp_path / 'db.sqlite'}"
    for module, argv in (
        (report, ["--experiment", "x", "--report-config", str(tmp_path / "no.yaml")]),
        (aggregate, ["--experiment", "nope", "--tracking-uri", store]),
    ):
        with pytest.raises(SystemExit) as e:
            _cli.run(module.main, argv)
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert (
            e.value.code == 2
            and err.startswith("error: ")
            and ("no.yaml" in err or "'nope'" in err)
        )


def test_a_stage_run_for_real_prints_its_version_and_a_bad_config_as_one_line(tmp_path):
    bad = tmp_path / "data.yaml"
    bad.write_text("aime: {test_n: many}\n")
    py = [sys.executable, "-m", "pipeline.data"]
    v = subprocess.run(py + ["--version"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    r = subprocess.run(
        py + ["--config", str(bad)], cwd=ROOT, capture_output=True, text=True, timeout=120
    )
    assert (v.returncode, v.stdout) == (0, f"gspo-bench {version()}\n")
    assert r.returncode == 2 and r.stdout == ""
    assert r.stderr == f"error: {bad}: aime.test_n: expected an integer, got 'many'\n"


# -- the documented commands ---------------------------------------------------------------------


def documented_commands() -> list[tuple[str, str, list[str]]]:
    """(file, stage, argv) of every `-m pipeline.<stage> ...` in the docs and the rules: continued
    lines joined, up to a comment, a pipe, the code span's end or the line's."""
    out = []
    for path in DOCS:
        text = re.sub(r"\\\n\s*", " ", path.read_text())
        for m in re.finditer(r"-m (pipeline\.[a-z_]+)([^`#|;&\n\"]*)", text):
            args = [a.strip("'\"{}") for a in m.group(2).split()]
            out.append((path.name, m.group(1), args))
    return out


def test_the_docs_show_every_stage_command():
    stages = {stage for _, stage, _ in documented_commands()}
    assert set(STAGES) - {"pipeline.verl"} <= stages, set(STAGES) - stages


def test_every_flag_and_set_key_in_a_documented_command_exists():
    bad = []
    for where, stage, args in documented_commands():
        ap = STAGES[stage].parser()
        known = {s for a in ap._actions for s in a.option_strings}
        for i, a in enumerate(args):
            if a.startswith("--") and a.split("=")[0] not in known:
                bad.append(f"{where}: {stage} {a}")
            if a == "--set" and i + 1 < len(args) and stage in CONFIG_OF:
                key = args[i + 1].split("=")[0]
                if key not in set(_leaves(CONFIG_OF[stage])) | {
                    f.name for f in dataclasses.fields(CONFIG_OF[stage])
                }:
                    bad.append(f"{where}: {stage} --set {key}")
    assert not bad, bad


def _stages_chain() -> dict[str, object]:
    """docs/STAGES.md's hand-run chain, each command parsed by its stage's parser."""
    text = (ROOT / "docs" / "STAGES.md").read_text()
    block = re.search(r"```bash\n(.*?)```", text, re.S).group(1)
    block = re.sub(r"\\\n\s*", " ", block)
    out = {}
    for line in block.splitlines():
        m = re.search(r"-m (pipeline\.[a-z_]+)([^#]*)", line)
        if m:
            out[m.group(1)] = STAGES[m.group(1)].parser().parse_args(shlex.split(m.group(2)))
    return out


def test_the_hand_run_chain_records_to_one_store_and_experiment_and_its_paths_connect():
    import yaml

    chain = _stages_chain()
    assert list(chain) == [
        "pipeline.data",
        "pipeline.sft",
        "pipeline.train",
        "pipeline.evaluate",
        "pipeline.track",
        "pipeline.report",
    ]
    recorders = [chain[s] for s in ("pipeline.sft", "pipeline.train", "pipeline.track")]
    assert all(a.tracking_uri for a in recorders)  # without a store nothing is recorded
    assert {a.tracking_uri for a in recorders} == {chain["pipeline.report"].tracking_uri}
    assert {a.experiment for a in recorders} == {chain["pipeline.report"].experiment}
    cfg = {
        s: yaml.safe_load((ROOT / chain[f"pipeline.{s}"].config).read_text())
        for s in ("data", "sft", "train")
    }
    ev, tr = chain["pipeline.evaluate"], chain["pipeline.track"]
    assert cfg["sft"]["train_data"][0]["path"].startswith(cfg["data"]["out_dir"])
    assert cfg["train"]["model"] == cfg["sft"]["out_dir"] + "/model"
    assert ev.model == cfg["train"]["out_dir"] + "/model" and ev.data_dir == cfg["data"]["out_dir"]
    assert tr.run_dir == cfg["train"]["out_dir"] and tr.evals == [f"100={ev.out}"]
    assert tr.variant == cfg["train"]["algorithm"]


def test_the_docs_name_exactly_the_commands_that_take_the_mlflow_flags():
    takes = {
        n
        for n, m in STAGES.items()
        if "--tracking-uri" in {s for a in m.parser()._actions for s in a.option_strings}
    }
    reads = {n for n in takes if "--run-name" not in m_flags(STAGES[n])}
    for page in ("MLFLOW.md", "STAGES.md"):
        text = " ".join((ROOT / "docs" / page).read_text().split())
        record = re.search(
            r"the commands that record runs, (.*?), take `--tracking-uri`", text, re.I
        )
        read = re.search(r"the ones that read a store, (.*?), take", text, re.I)
        assert record and read, page
        assert set(re.findall(r"`(pipeline\.\w+)`", record.group(1))) == takes - reads, page
        assert set(re.findall(r"`(pipeline\.\w+)`", read.group(1))) == reads, page
    assert reads == {"pipeline.aggregate", "pipeline.report"}
    for n in reads:
        assert "else sqlite:///results/mlflow.db" in " ".join(
            STAGES[n].parser().format_help().split()
        )


def m_flags(module) -> set[str]:
    return {s for a in module.parser()._actions for s in a.option_strings}


def test_a_real_checkpoint_evaluated_by_hand_runs_on_the_gpu_with_vllm_in_bf16():
    """docs/SCALE.md's command for a real checkpoint sets what EvalConfig defaults for the CPU."""
    cmds = [
        a
        for where, s, a in documented_commands()
        if where == "SCALE.md" and s == "pipeline.evaluate"
    ]
    assert cmds
    for argv in cmds:
        args = evaluate.parser().parse_args(argv)
        assert (args.engine, args.device, args.dtype) == ("vllm", "cuda", "bfloat16")
        assert args.max_new_tokens > EvalConfig().max_new_tokens


def test_the_architecture_names_every_module_outside_the_benchmarks_that_imports_one():
    from test_layers import imported_modules, modules

    importers = sorted(
        p.relative_to(ROOT).as_posix()
        for p in modules("gspo", "evaluators", "pipeline", "workflow")
        if not p.relative_to(ROOT).as_posix().startswith("evaluators/benchmarks/")
        and any(
            m.startswith("evaluators.benchmarks")
            for _, m in imported_modules(p.read_text(), str(p))
        )
    )
    assert importers == ["evaluators/tasks.py", "pipeline/data.py", "pipeline/report/stats.py"]
    text = " ".join((ROOT / "docs" / "ARCHITECTURE.md").read_text().split())
    claim = re.search(
        r"Outside `evaluators/benchmarks/` the registry is the one module (.*?)"
        r"\(tests/test_cli\.py holds this list\)",
        text,
    ).group(1)
    assert "but for two: `pipeline/data.py`" in claim and "`pipeline/report/stats.py`" in claim


def test_the_licence_and_citation_name_the_project_its_version_and_the_gspo_paper():
    import yaml

    assert "MIT License" in (ROOT / "LICENSE").read_text()
    assert "gspo-bench contributors" in (ROOT / "LICENSE").read_text()
    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0" and cff["version"] == version()
    assert cff["preferred-citation"]["version"] == version() and cff["license"] == "MIT"
    [paper] = cff["references"]
    assert paper["title"] == "Group Sequence Policy Optimization" and paper["year"] == 2025
    assert paper["url"].endswith("2507.18071") and paper["authors"][0]["family-names"] == "Zheng"
