"""The two registries, gspo.core.objectives.OBJECTIVES and evaluators.tasks.MODULES, against every
place that names their entries: what derives from them is derived (the engines' maps, the data
stage), what cannot be (the static YAML schema, the docs' tables, the stage config sections) is
checked here, each failure naming the place to edit (docs/EXTENDING.md lists them)."""

from __future__ import annotations

import dataclasses
import pathlib
import re

import yaml

from evaluators import tasks
from gspo.config.data import DataFiles, DataGenConfig
from gspo.config.train import DataSource, RLConfig
from gspo.core.objectives import OBJECTIVES
from gspo.engines.trl import rl as trl_engine
from gspo.engines.verl import job as verl_engine

ROOT = pathlib.Path(__file__).resolve().parents[1]
SCHEMA = yaml.safe_load((ROOT / "workflow" / "schemas" / "config.schema.yaml").read_text())


def test_the_schema_names_the_registered_objectives_and_benchmarks_in_one_place_each():
    defs = SCHEMA["$defs"]
    assert defs["algorithm"]["enum"] == list(OBJECTIVES), "workflow/schemas: $defs/algorithm"
    assert defs["benchmark"]["enum"] == list(tasks.BENCHMARKS), "workflow/schemas: $defs/benchmark"
    props = SCHEMA["properties"]
    refs = [
        props["algorithms"]["items"],
        props["variants"]["additionalProperties"]["properties"]["algorithm"],
        props["rl"]["properties"]["per_algorithm"]["propertyNames"],
    ]
    assert {r["$ref"] for r in refs} == {"#/$defs/algorithm"}
    refs = [
        props["benchmarks"]["items"],
        props["train_tasks"]["propertyNames"],
        props["rl_tasks"]["propertyNames"],
        props["fair"]["properties"]["benchmark"],
    ]
    assert {r["$ref"] for r in refs} == {"#/$defs/benchmark"}


def test_every_benchmark_has_its_data_and_eval_sections_in_the_schema_and_the_data_config():
    props = SCHEMA["properties"]
    data, ev = props["data"]["properties"], props["eval"]["properties"]
    for b in tasks.BENCHMARKS:
        assert b in data, f"workflow/schemas: data.{b} (its generated sizes)"
        assert data["files"]["properties"].get(b, {}).get("$ref") == "#/$defs/task_files", (
            f"workflow/schemas: data.files.{b}"
        )
        assert ev.get(b, {}).get("$ref") == "#/$defs/eval_override", f"workflow/schemas: eval.{b}"
    gen = {f.name for f in dataclasses.fields(DataGenConfig)}
    assert set(tasks.BENCHMARKS) <= gen, "gspo/config/data.py: a DataGenConfig section"
    assert [f.name for f in dataclasses.fields(DataFiles)] == list(tasks.BENCHMARKS), (
        "gspo/config/data.py: a DataFiles field"
    )
    assert set(tasks.TITLES) == set(tasks.BENCHMARKS), "evaluators/tasks.py: TITLES"


def test_the_engines_maps_are_the_registrys(monkeypatch):
    assert verl_engine.LOSS_MODE == {n: o.verl for n, o in OBJECTIVES.items() if o.verl}
    assert trl_engine.TRL_OBJECTIVES == tuple(n for n, o in OBJECTIVES.items() if o.trl)
    assert {o.trl for o in OBJECTIVES.values()} <= {
        "",
        "token",
        "sequence",
        "cispo",
        "sapo",
        "luspo",
        "vespo",
    }
    # an objective registered without engine names is refused by both by name, not a KeyError
    monkeypatch.setitem(OBJECTIVES, "toy", dataclasses.replace(OBJECTIVES["grpo"], trl="", verl=""))
    cfg = RLConfig(algorithm="toy", train_data=[DataSource("x.jsonl")])
    for engine in (trl_engine, verl_engine):
        why = dict(engine.refusals(cfg)).get("algorithm", "")
        assert why.startswith("'toy': ") and "use one of" in why, why


def test_the_objectives_page_has_one_row_per_objective_with_its_engines_names():
    text = (ROOT / "docs" / "OBJECTIVES.md").read_text()
    table = text.split("| `algorithm` |")[1].split("\n\n")[0]
    rows = {
        m[0]: m[1:]
        for m in re.findall(r"^\| `([a-z_]+)` \|.*\| ([^|]+) \| ([^|]+) \|$", table, re.M)
    }
    assert list(rows) == list(OBJECTIVES), "docs/OBJECTIVES.md: the first table's rows"
    for name, o in OBJECTIVES.items():
        named = tuple(f"`{v}`" if v else "refused" for v in (o.trl, o.verl))
        assert rows[name] == named, f"docs/OBJECTIVES.md: {name}'s TRL and verl columns"
