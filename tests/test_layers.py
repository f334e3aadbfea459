"""The house's one-way layers, read from the source with `ast`, and its size limits.

Arrows: gspo -> nothing of ours; evaluators -> gspo; pipeline -> gspo, evaluators;
workflow -> pipeline, evaluators, gspo. Imports inside functions, `importlib.import_module`
and `__import__` calls count; a dynamic import whose target is not a literal fails outright.
Inside gspo/, its packages stand on floors (GSPO_FLOORS): each imports only the floors below it.
"""

from __future__ import annotations

import ast
import io
import pathlib
import tokenize

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
# top-level module name -> the layer (folder) it belongs to
LAYER_OF = {
    "gspo": "gspo",
    "evaluators": "evaluators",
    "pipeline": "pipeline",
    "gspo_workflow": "workflow",
    "workflow": "workflow",
    "benchmarks": "benchmarks",
    "tests": "tests",
    "conftest": "tests",
    "toys": "tests",
}
ALLOWED = {
    "gspo": {"gspo"},
    "evaluators": {"gspo", "evaluators"},
    "pipeline": {"gspo", "evaluators", "pipeline"},
    "workflow": {"gspo", "evaluators", "pipeline", "workflow"},
}
# Counted as the lines a reader steps through: a line that only continues a bracketed expression
# (an argument list, a literal laid over several lines) is not counted, so the formatter's layout
# (ruff format puts each argument of a long call on its own line) moves no module or function
# over a limit, and a limit holds the same amount of code however it is laid out.
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
            name = (
                f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else ""
            )
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
    src = (
        "import json\n"
        "def f():\n    from evaluators.tasks import rewards\n"
        "def g():\n    import importlib\n    return importlib.import_module('pipeline.report')\n"
    )
    assert violations("gspo", src, "x.py") == [
        "x.py:3: gspo imports evaluators.tasks (evaluators)",
        "x.py:6: gspo imports pipeline.report (pipeline)",
    ]
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
                is_module = (ROOT / (sub.replace(".", "/") + ".py")).is_file() or (
                    ROOT / sub.replace(".", "/")
                ).is_dir()
                out.add(sub if is_module else node.module)
        elif isinstance(node, ast.Import):
            out |= {a.name for a in node.names if a.name.split(".")[0] == "evaluators"}
    return out


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_the_code_that_runs_untrusted_programs_imports_nothing_else_of_evaluators():
    files = sorted((EVALUATORS / "execution").rglob("*.py"))
    assert len(files) >= 10
    bad = {
        str(p.relative_to(ROOT)): sorted(
            m for m in _evaluators_imports(p) if not _under(m, "evaluators.execution")
        )
        for p in files
    }
    assert not {k: v for k, v in bad.items() if v}


def test_the_benchmarks_reach_nothing_of_evaluators_but_themselves_and_execution():
    files = sorted((EVALUATORS / "benchmarks").rglob("*.py"))
    bad = {
        str(p.relative_to(ROOT)): sorted(
            m
            for m in _evaluators_imports(p)
            if not (_under(m, "evaluators.benchmarks") or _under(m, "evaluators.execution"))
        )
        for p in files
    }
    assert not {k: v for k, v in bad.items() if v}


def test_evaluation_reaches_the_benchmarks_only_through_the_registry():
    outside = [
        p
        for p in EVALUATORS.rglob("*.py")
        if not _under(".".join(p.relative_to(ROOT).parts), "evaluators.benchmarks")
        and p.name != "tasks.py"
    ]
    assert EVALUATORS / "evaluation.py" in outside
    bad = {
        str(p.relative_to(ROOT)): sorted(
            m for m in _evaluators_imports(p) if _under(m, "evaluators.benchmarks")
        )
        for p in outside
    }
    assert not {k: v for k, v in bad.items() if v}
    assert _evaluators_imports(EVALUATORS / "evaluation.py") & {"evaluators.tasks"}


def test_the_import_rules_name_what_a_module_reaches():
    src = (
        "from evaluators.benchmarks import aime, judge\nimport evaluators.execution.pool\n"
        "from evaluators.benchmarks.aime.answers import extract_answer\n"
        "def f():\n    from evaluators import tasks\n"
    )
    assert _evaluators_imports(EVALUATORS / "x.py", src) == {
        "evaluators.benchmarks.aime",
        "evaluators.benchmarks.judge",
        "evaluators.execution.pool",
        "evaluators.benchmarks.aime.answers",
        "evaluators.tasks",
    }


def continuation_lines(text: str) -> set[int]:
    """The line numbers inside a bracketed expression begun on an earlier line (its closing
    bracket's line included): what a layout adds, not what a reader reads."""
    out, depth, start = set(), 0, 0
    for tok in tokenize.generate_tokens(io.StringIO(text).readline):
        if tok.type == tokenize.OP and tok.string in "([{":
            start = tok.start[0] if depth == 0 else start
            depth += 1
        elif tok.type == tokenize.OP and tok.string in ")]}":
            depth -= 1
            if depth == 0:
                out.update(range(start + 1, tok.end[0] + 1))
    return out


def sizes(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    text = path.read_text()
    rel = path.relative_to(root)
    cont = continuation_lines(text)
    out = []
    n = len(text.splitlines()) - len(cont)
    if n > MAX_MODULE_LINES:
        out.append(f"{rel}: {n} lines")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            n = (
                node.end_lineno
                - node.lineno
                + 1
                - len([line for line in cont if node.lineno <= line <= node.end_lineno])
            )
            if n > MAX_FUNCTION_LINES:
                out.append(f"{rel}:{node.lineno}: {node.name} has {n} lines")
    return out


def test_the_size_count_is_the_same_whatever_the_layout(tmp_path):
    """One function laid out by hand and as the formatter lays it out counts the same lines;
    a statement on lines of its own counts each of them."""
    hand = "def f(a, b):\n    return g(a, b,\n             c=1)\n"
    formatted = "def f(a, b):\n    return g(\n        a,\n        b,\n        c=1,\n    )\n"
    assert continuation_lines(hand) == {3} and continuation_lines(formatted) == {3, 4, 5, 6}
    long = "def f():\n" + "    x = 1\n" * (MAX_FUNCTION_LINES + 1)
    (tmp_path / "m.py").write_text(long)
    assert sizes(tmp_path / "m.py", tmp_path) == [f"m.py:1: f has {MAX_FUNCTION_LINES + 2} lines"]
    (tmp_path / "m.py").write_text("def f():\n    return g(\n" + "        1,\n" * 100 + "    )\n")
    assert sizes(tmp_path / "m.py", tmp_path) == []


def test_no_module_is_over_450_lines_and_no_function_over_60():
    bad = [
        msg
        for path in modules("gspo", "evaluators", "pipeline", "workflow", "benchmarks")
        for msg in sizes(path)
    ]
    assert not bad, "\n".join(bad)


def test_the_benchmark_names_are_listed_once():
    """Only the registry spells out the tuple of benchmark names."""
    from evaluators import tasks
    from gspo.config.data import DATA_TASKS

    assert DATA_TASKS == tasks.BENCHMARKS
    spelled = f"{tasks.BENCHMARKS!r}"  # ('aime', 'lcb', 'cf')
    hits = [
        str(p.relative_to(ROOT))
        for p in modules("gspo", "evaluators", "pipeline", "workflow", "benchmarks")
        if spelled.replace("'", '"') in p.read_text() or spelled in p.read_text()
    ]
    assert hits == [], hits


# gspo/ by concept (issue 46), bottom floor first: a package imports its own modules and the
# packages on lower floors, never one beside or above it (names relative to gspo). The algorithm's
# core imports nothing of ours, so no engine adapter and no tracking either; the model knows no
# trainer; the native trainer no engine adapter; TRL's adapter not verl's, nor verl's TRL's.
GSPO_FLOORS = [
    ("io", "errors", "core"),  # atomic files and JSONL, the trainer's error; objectives
    ("config",),  # typed configs (the objectives' names and defaults)
    ("model",),  # presets, tokens, MoE routing, log-probs, FLOPs
    ("infra",),  # ranks and sharding, checkpoints, memory planning
    ("rollout", "tracking"),  # sampling engines; MLflow runs and metric records
    ("native",),  # the native trainer: RL loop, update, SFT, batches
    ("engines.trl", "engines.verl"),  # the other trainers' adapters
]
FLOOR_OF = {unit: i for i, units in enumerate(GSPO_FLOORS) for unit in units}


def gspo_unit(module: str) -> str | None:
    """The GSPO_FLOORS unit a dotted gspo module belongs to (None: gspo or a package's bare
    __init__ above its units, such as gspo.engines)."""
    rest = module.removeprefix("gspo.") if module.startswith("gspo.") else None
    if rest is None:
        return None
    return next(
        (
            u
            for u in sorted(FLOOR_OF, key=len, reverse=True)
            if rest == u or rest.startswith(u + ".")
        ),
        None,
    )


def gspo_imports(source: str, filename: str = "<source>") -> list[tuple[int, str]]:
    """(line, gspo module) of every import of a gspo module in `source`, wherever it sits:
    `from gspo.x import y` names gspo.x.y where that is a module, else gspo.x."""
    out = []
    for node in ast.walk(ast.parse(source, filename)):
        if (
            isinstance(node, ast.ImportFrom)
            and not node.level
            and node.module
            and (node.module == "gspo" or node.module.startswith("gspo."))
        ):
            for a in node.names:
                sub = f"{node.module}.{a.name}"
                path = ROOT / sub.replace(".", "/")
                out.append(
                    (
                        node.lineno,
                        sub if path.with_suffix(".py").is_file() or path.is_dir() else node.module,
                    )
                )
        elif isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names if a.name.startswith("gspo.")]
    return out


def floor_violations(module: str, source: str, filename: str) -> list[str]:
    unit = gspo_unit(module)
    bad = []
    for line, target in gspo_imports(source, filename):
        to = gspo_unit(target)
        if to is not None and to != unit and (unit is None or FLOOR_OF[to] >= FLOOR_OF[unit]):
            where = unit.replace(".", "/") + "/" if unit else "gspo/"
            bad.append(
                f"{filename}:{line}: {where} imports {target} ({to.replace('.', '/')}/, "
                f"floor {FLOOR_OF[to]} >= {FLOOR_OF.get(unit)})"
            )
    return bad


def gspo_modules() -> dict[str, pathlib.Path]:
    return {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in modules("gspo")
    }


def test_every_gspo_module_stands_on_a_floor():
    """A module outside the floors' packages would escape their rules: only gspo's and
    gspo.engines' bare __init__ (docstrings) stand above them, importing nothing."""
    loose = {name for name in gspo_modules() if gspo_unit(name) is None}
    assert loose == {"gspo", "gspo.engines"}
    for name in loose:
        assert gspo_imports(gspo_modules()[name].read_text()) == [], name


def test_each_gspo_package_imports_only_the_floors_below_it():
    bad = [
        msg
        for name, path in gspo_modules().items()
        for msg in floor_violations(name, path.read_text(), str(path.relative_to(ROOT)))
    ]
    assert not bad, "\n".join(bad)


def test_the_algorithms_core_imports_no_engine_adapter_and_no_tracking():
    """The rule the floors hold, said for the issue that asked for it (46): gspo.core imports
    nothing of ours; the native trainer no engine adapter."""
    for name, path in gspo_modules().items():
        targets = {gspo_unit(t) for _, t in gspo_imports(path.read_text())}
        if gspo_unit(name) == "core":
            assert targets <= {"core"}, (name, targets)
        if gspo_unit(name) == "native":
            assert not targets & {"engines.trl", "engines.verl"}, (name, targets)


def test_the_floor_check_sees_an_arrow_up_or_sideways():
    src = (
        "from gspo.native import trainer\n"
        "def f():\n    from gspo.tracking.runs import MetricsLog\n"
        "    import gspo.engines.verl.job\n    from gspo.config.train import RLConfig\n"
    )
    assert floor_violations("gspo.core.objectives", src, "x.py") == [
        "x.py:1: core/ imports gspo.native.trainer (native/, floor 5 >= 0)",
        "x.py:3: core/ imports gspo.tracking.runs (tracking/, floor 4 >= 0)",
        "x.py:4: core/ imports gspo.engines.verl.job (engines/verl/, floor 6 >= 0)",
        "x.py:5: core/ imports gspo.config.train (config/, floor 1 >= 0)",
    ]
    assert floor_violations("gspo.engines.trl.rl", src, "x.py") == [
        "x.py:4: engines/trl/ imports gspo.engines.verl.job (engines/verl/, floor 6 >= 6)"
    ]
    assert floor_violations("gspo.rollout.base", "from gspo.tracking import runs\n", "x.py") == [
        "x.py:1: rollout/ imports gspo.tracking.runs (tracking/, floor 4 >= 4)"
    ]


def module_graph(package: str) -> dict[str, set[str]]:
    """{module: the package's modules it imports} over `package`'s own .py files, wherever the
    import sits; `from package import name` counts as importing package.name when that is a
    module."""
    files = {
        ".".join(p.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__"): p
        for p in modules(package)
    }
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
                found.append(path[path.index(nxt) :] + [nxt])
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

    names = sorted(
        p.stem
        for p in (ROOT / "evaluators" / "execution" / "sandboxed").glob("*.py")
        if p.stem != "__init__"
    )
    assert names == ["file_mode", "functional", "runner"]
    assert (frames.RUNNER, judge.DRIVER, judge.FILE_DRIVER) == (
        source("runner"),
        source("functional"),
        source("file_mode"),
    )
    for name in names:
        r = subprocess.run(
            [sys.executable, "-c", f"import evaluators.execution.sandboxed.{name}; print('ok')"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=60,
            stdin=subprocess.DEVNULL,
            env={"PATH": "/usr/bin:/bin"},
        )
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
