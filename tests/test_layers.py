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
MAX_MODULE_LINES = 450
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


# evaluators/ in two wings (issue 26): execution/ runs untrusted programs and knows no benchmark;
# benchmarks/ holds the benchmarks' content, reached from the rest only through the registry.
EVALUATORS = ROOT / "evaluators"


def _evaluators_imports(path: pathlib.Path, source: str | None = None) -> set[str]:
    """The evaluators modules `path` (or `source`) imports, as dotted names (`from evaluators.x
    import y` counts as evaluators.x.y when that is a module or package, else as evaluators.x)."""
    tree = ast.parse(path.read_text() if source is None else source, str(path))
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").split(".")[0] == "evaluators":
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                is_module = (ROOT / (sub.replace(".", "/") + ".py")).is_file() or \
                    (ROOT / sub.replace(".", "/")).is_dir()
                out.add(sub if is_module else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "evaluators"}
    return out


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_code_that_runs_untrusted_programs_imports_nothing_else_of_evaluators():
    files = sorted((EVALUATORS / "execution").rglob("*.py"))
    assert len(files) >= 10
    bad = {str(p.relative_to(ROOT)): sorted(m for m in _evaluators_imports(p)
                                            if not _under(m, "evaluators.execution"))
           for p in files}
    assert not {k: v for k, v in bad.items() if v}


def test_the_benchmarks_reach_nothing_of_evaluators_but_themselves_and_execution():
    files = sorted((EVALUATORS / "benchmarks").rglob("*.py"))
    bad = {str(p.relative_to(ROOT)): sorted(
        m for m in _evaluators_imports(p)
        if not (_under(m, "evaluators.benchmarks") or _under(m, "evaluators.execution")))
        for p in files}
    assert not {k: v for k, v in bad.items() if v}


def test_evaluation_reaches_the_benchmarks_only_through_the_registry():
    outside = [p for p in EVALUATORS.rglob("*.py")
               if not _under(".".join(p.relative_to(ROOT).parts), "evaluators.benchmarks")
               and p.name != "tasks.py"]
    assert EVALUATORS / "evaluation.py" in outside
    bad = {str(p.relative_to(ROOT)): sorted(m for m in _evaluators_imports(p)
                                            if _under(m, "evaluators.benchmarks"))
           for p in outside}
    assert not {k: v for k, v in bad.items() if v}
    assert _evaluators_imports(EVALUATORS / "evaluation.py") & {"evaluators.tasks"}


def test_the_import_rules_name_what_a_module_reaches():
    src = ("from evaluators.benchmarks import aime, judge\nimport evaluators.execution.pool\n"
           "from evaluators.benchmarks.aime.answers import extract_answer\n"
           "def f():\n    from evaluators import tasks\n")
    assert _evaluators_imports(EVALUATORS / "x.py", src) == {
        "evaluators.benchmarks.aime", "evaluators.benchmarks.judge", "evaluators.execution.pool",
        "evaluators.benchmarks.aime.answers", "evaluators.tasks"}


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


def test_no_module_is_over_450_lines_and_no_function_over_60():
    bad = [msg for path in modules("gspo", "evaluators", "pipeline", "workflow", "benchmarks")
           for msg in sizes(path)]
    assert not bad, "\n".join(bad)


def test_the_benchmark_names_are_listed_once():
    """Only the registry spells out the tuple of benchmark names."""
    from evaluators import tasks
    from gspo.config.data import DATA_TASKS

    assert DATA_TASKS == tasks.BENCHMARKS
    spelled = f"{tasks.BENCHMARKS!r}"          # ('aime', 'lcb', 'cf')
    hits = [str(p.relative_to(ROOT)) for p in modules("gspo", "evaluators", "pipeline",
                                                     "workflow", "benchmarks")
            if spelled.replace("'", '"') in p.read_text() or spelled in p.read_text()]
    assert hits == [], hits


def module_graph(package: str) -> dict[str, set[str]]:
    """{module: the package's modules it imports} over `package`'s own .py files, wherever the
    import sits; `from package import name` counts as importing package.name when that is a
    module."""
    files = {".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
             for p in modules(package)}
    graph = {}
    for name, path in files.items():
        deps = set()
        tree = ast.parse(path.read_text(), str(path))
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and not node.level:
                subs = {f"{node.module}.{a.name}" for a in node.names} & set(files)
                deps |= subs or ({node.module} & set(files))
            elif isinstance(node, ast.Import):
                deps |= {a.name for a in node.names} & set(files)
        graph[name] = deps - {name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Every import cycle (a path that comes back to its start), each found once."""
    found, state = [], {}

    def visit(node, path):
        state[node] = "open"
        for nxt in sorted(graph.get(node, ())):
            if state.get(nxt) == "open":
                found.append(path[path.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, path + [nxt])
        state[node] = "done"

    for node in sorted(graph):
        if node not in state:
            visit(node, [node])
    return found


@pytest.mark.parametrize("package", ["gspo", "evaluators", "pipeline"])
def test_no_package_has_an_import_cycle(package):
    assert cycles(module_graph(package)) == []


def test_the_cycle_check_sees_a_cycle_through_lazy_imports():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c", "a"]]
    assert cycles({"a": {"b"}, "b": set()}) == []


def test_programs_that_run_in_the_sandbox_are_files_that_run_nothing_when_imported():
    """evaluators/execution/sandboxed/*.py are handed to the sandbox as text; imported (by a
    linter, a test, a mistake) they must do nothing: no reading of stdin, no channel, no exit."""
    import subprocess
    import sys

    from evaluators.benchmarks import judge
    from evaluators.execution import frames
    from evaluators.execution.sandboxed import source

    names = sorted(p.stem for p in (ROOT / "evaluators" / "execution" / "sandboxed").glob("*.py")
                   if p.stem != "__init__")
    assert names == ["file_mode", "functional", "runner"]
    assert (frames.RUNNER, judge.DRIVER, judge.FILE_DRIVER) == (
        source("runner"), source("functional"), source("file_mode"))
    for name in names:
        r = subprocess.run([sys.executable, "-c", f"import evaluators.execution.sandboxed.{name}; print('ok')"],
                           cwd=ROOT, capture_output=True, text=True, timeout=60,
                           stdin=subprocess.DEVNULL, env={"PATH": "/usr/bin:/bin"})
        assert (r.returncode, r.stdout.strip()) == (0, "ok"), r.stderr


# Every workflow job is a process, and on the tiny scale its imports are most of its time: the
# stages that never touch a tensor must not pay torch's (~1.2 s a job).
@pytest.mark.parametrize("stage", ["pipeline.data", "pipeline.track", "pipeline.aggregate"])
def test_the_stages_without_tensors_do_not_import_torch(stage):
    import subprocess
    import sys

    code = f"import sys, {stage}; print('torch' in sys.modules)"
    r = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.strip() == "False", f"{stage} imports torch"
