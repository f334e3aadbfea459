"""The house's one-way layers, read from the source with `ast`, and its size limits.

Arrows: gspo -> nothing of ours; evaluators -> gspo; pipeline -> gspo, evaluators;
workflow -> pipeline, evaluators, gspo. Imports inside functions, `importlib.import_module`
and `__import__` calls count; a dynamic import whose target is not a literal fails outright.
"""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# top-level module name -> the layer (folder) it belongs to
LAYER_OF = {"gspo": "gspo", "evaluators": "evaluators", "pipeline": "pipeline",
            "gspo_workflow": "workflow", "workflow": "workflow", "benchmarks": "benchmarks",
            "tests": "tests", "conftest": "tests", "toys": "tests"}
ALLOWED = {"gspo": {"gspo"}, "evaluators": {"gspo", "evaluators"},
           "pipeline": {"gspo", "evaluators", "pipeline"},
           "workflow": {"gspo", "evaluators", "pipeline", "workflow"}}
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 60


def imported_modules(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, absolute module name) of every import in `source`, wherever it sits; relative
    imports are returned as '.' (same package). Raises ValueError on a non-literal dynamic
    import."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            out.append((node.lineno, "." if node.level else node.module))
        elif isinstance(node, ast.Call):
            f = node.func
            name = f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            if name in ("import_module", "__import__"):
                arg = node.args[0] if node.args else None
                if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str)):
                    raise ValueError(f"{filename}:{node.lineno}: dynamic import of a non-literal")
                out.append((node.lineno, arg.value))
    return out


def violations(layer: str, source: str, filename: str) -> list[str]:
    bad = []
    for line, mod in imported_modules(source, filename):
        target = LAYER_OF.get(mod.split(".")[0])
        if mod != "." and target is not None and target not in ALLOWED[layer]:
            bad.append(f"{filename}:{line}: {layer} imports {mod} ({target})")
    return bad


def modules(*folders):
    for folder in folders:
        yield from sorted((ROOT / folder).rglob("*.py"))


@pytest.mark.parametrize("layer", sorted(ALLOWED))
def test_every_module_of_a_layer_imports_only_the_layers_below_it(layer):
    bad = []
    for path in modules(layer):
        bad += violations(layer, path.read_text(), str(path.relative_to(ROOT)))
    assert not bad, "\n".join(bad)


def test_the_arrow_check_sees_hidden_imports():
    src = ("import json\n"
           "def f():\n    from evaluators.tasks import rewards\n"
           "def g():\n    import importlib\n    return importlib.import_module('pipeline.report')\n")
    assert violations("gspo", src, "x.py") == [
        "x.py:3: gspo imports evaluators.tasks (evaluators)",
        "x.py:6: gspo imports pipeline.report (pipeline)"]
    assert violations("pipeline", src, "x.py") == []
    with pytest.raises(ValueError, match="non-literal"):
        imported_modules("import importlib\nname = 'gspo'\nimportlib.import_module(name)\n")


def sizes(path: pathlib.Path) -> list[str]:
    text = path.read_text()
    rel = path.relative_to(ROOT)
    out = []
    if len(text.splitlines()) > MAX_MODULE_LINES:
        out.append(f"{rel}: {len(text.splitlines())} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = node.end_lineno - node.lineno + 1
            if n > MAX_FUNCTION_LINES:
                out.append(f"{rel}:{node.lineno}: {node.name} has {n} lines")
    return out


def test_no_module_is_over_500_lines_and_no_function_over_60():
    bad = [msg for path in modules("gspo", "evaluators", "pipeline", "workflow", "benchmarks")
           for msg in sizes(path)]
    assert not bad, "\n".join(bad)


def test_the_benchmark_names_are_listed_once():
    """Only the registry spells out the tuple of benchmark names."""
    from evaluators import tasks
    from gspo.data_config import DATA_TASKS

    assert DATA_TASKS == tasks.BENCHMARKS
    spelled = f"{tasks.BENCHMARKS!r}"          # ('aime', 'lcb', 'cf')
    hits = [str(p.relative_to(ROOT)) for p in modules("gspo", "evaluators", "pipeline",
                                                     "workflow", "benchmarks")
            if spelled.replace("'", '"') in p.read_text() or spelled in p.read_text()]
    assert hits == [], hits
