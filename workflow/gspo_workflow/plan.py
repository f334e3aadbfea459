"""The workflow's plan: the validated master config turned into per-stage configs and paths.

The Snakefile calls `Plan(config, ...)` once after schema validation. The plan

- checks what a JSON schema cannot (budget steps, each stage's typed config via gspo.config.train, that
  a model path exists, that each variant's engine honours its settings: gspo_workflow.preflight)
  and raises ConfigError naming the key, before any job runs;
- writes each stage's resolved config under `results/<experiment>/config/` only when its content
  changed (rules depend on these files, never on the master config, so editing the evaluation
  settings re-runs evaluation and nothing upstream);
- answers the rules' questions about paths (input functions, params) without lambdas.

The jobs are the stage commands a user runs by hand (`python -m pipeline.<stage>`), given those
stage files and, on their command line, the MLflow store, experiment and tags
(`tracking_flags`, from gspo_workflow.invocation).
"""

from __future__ import annotations

import glob
import hashlib
import json
import math
import pathlib
import shlex
import sys

import yaml

from evaluators.evaluation import EvalConfig
from evaluators.tasks import BENCHMARKS as TASKS
from gspo.config.data import DataGenConfig
from gspo.config.fields import ConfigError, from_dict, to_dict
from gspo.config.train import RLConfig, SFTConfig
from gspo.io import atomic_write_text
from gspo.model.models import PRESETS

from . import fair, invocation, launch, offpolicy, preflight

PARTS = ("sft", "rl", "test")
# RL fields the workflow sets itself, per run.
RL_MANAGED = (
    "algorithm",
    "seed",
    "model",
    "out_dir",
    "train_data",
    "ckpt_every",
    "keep_steps",
    "prompt",
)
SFT_MANAGED = ("out_dir", "train_data", "eval_data", "prompt")


def dump(obj) -> str:
    # through JSON first: values shared between keys (schema defaults) must not become YAML
    # anchors/aliases
    return yaml.safe_dump(json.loads(json.dumps(obj)), sort_keys=True, default_flow_style=False)


def write_if_changed(path: pathlib.Path, text: str, *, dry_run: bool = False) -> bool:
    """Write `text` to `path` unless it already holds exactly that; True when it changed. A dry
    run only writes files that do not exist yet (it must not make existing results look stale;
    the rules' `params.config_sha` still shows a change)."""
    path = pathlib.Path(path)
    exists = path.is_file()
    if exists and path.read_text() == text:
        return False
    if not (dry_run and exists):
        atomic_write_text(path, text)
    return True


def sha(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def deep_merge(base: dict, over: dict) -> dict:
    """`base` with `over` laid on top; nested mappings merge key by key (so a variant can set
    rl.rollout.dtype and keep rl.rollout.engine)."""
    out = dict(base)
    for k, v in over.items():
        out[k] = (
            deep_merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
        )
    return out


def regex_of(values) -> str:
    """A wildcard constraint matching exactly one of `values`."""
    import re

    return "|".join(re.escape(str(v)) for v in values)


def budget_steps(steps: int, budgets: list[int]) -> dict[int, int]:
    """{budget percent: RL step} (rounded to the nearest step; 0 % is the SFT model)."""
    return {b: int(round(steps * b / 100)) for b in budgets}


class Plan:
    def __init__(self, config: dict, *, workdir, dry_run: bool = False):
        self.config = config
        self.dry_run = dry_run
        self.workdir = pathlib.Path(workdir).resolve()
        self.experiment = config["experiment"]
        self.base = f"results/{self.experiment}"
        self.algorithms = list(config["algorithms"])
        self.lr_grid = fair.grid(config)  # the fair protocol's (gspo_workflow.fair)
        # The compared runs: each plain algorithm, then each configured variant (an algorithm
        # with RLConfig overrides and the run it is measured against). Rules, paths and MLflow
        # run names use the variant's name; its algorithm is a tag.
        self.variants = self._variants()
        self.seeds = [int(s) for s in config["seeds"]]
        self.budgets = sorted(int(b) for b in config["budgets"])
        self.benchmarks = list(config["benchmarks"])
        # canonical task order (aime, lcb, cf): the mix samples files by index, so the order in
        # which a YAML mapping happens to list them must not change the data
        # weight 0 leaves a task out: Snakemake merges a layered config's mapping into the
        # default's key by key, so a layer cannot drop a key, only set it to 0
        self.train_tasks = {
            t: config["train_tasks"][t] for t in TASKS if config["train_tasks"].get(t, 0) != 0
        }
        rl_tasks = config.get("rl_tasks") or config["train_tasks"]
        self.rl_tasks = {t: rl_tasks[t] for t in TASKS if rl_tasks.get(t, 0) != 0}
        self.data_tasks = sorted(
            set(self.benchmarks) | set(self.train_tasks) | set(self.rl_tasks), key=TASKS.index
        )
        self._check_lists()
        # one prompt format for SFT, RL and evaluation (gspo.model.tokens)
        self.prompt = dict(config.get("prompt") or {})
        self.data_cfg = self._data_config()
        self.sft_cfg = self._sft_config()
        self.rl_steps = int(
            config["rl"].get("steps", RLConfig.__dataclass_fields__["steps"].default)
        )
        self.steps_of = budget_steps(self.rl_steps, self.budgets)
        self._check_budgets()
        nonzero = [s for s in self.steps_of.values() if s > 0]
        self.ckpt_every = math.gcd(*nonzero)
        self.rl_cfgs = {(v, s): self._rl_config(v, s) for v in self.variants for s in self.seeds}
        self.eval_cfgs = {b: self._eval_config(b) for b in self.benchmarks}
        # the checkpoints between budget 0 and the last, where a benchmark's `intermediate`
        # settings (fewer problems or samples) differ from its full ones
        self.mid_eval_cfgs = {
            b: cfg
            for b in self.benchmarks
            if (cfg := self._eval_config(b, intermediate=True)) != self.eval_cfgs[b]
        }
        self.report_cfg = dict(config["report"])
        self.tracking_uri = invocation.tracking_uri(config, self.workdir)

    # -- checks ---------------------------------------------------------------------------------
    @staticmethod
    def _fail(key: str, msg: str):
        raise ConfigError(f"config: {key}: {msg}")

    def _check_lists(self):
        for key in ("algorithms", "seeds", "budgets", "benchmarks"):
            vals = self.config[key]
            if len(set(map(str, vals))) != len(vals):
                self._fail(key, f"has duplicates: {vals}")
        if not any(b > 0 for b in self.budgets):
            self._fail("budgets", "needs at least one budget above 0 (percent of rl.steps)")
        for key, mix in (("train_tasks", self.train_tasks), ("rl_tasks", self.rl_tasks)):
            for t, w in mix.items():
                if w < 0:
                    self._fail(f"{key}.{t}", f"weight must be >= 0 (0: left out), got {w}")
            if not mix:
                self._fail(key, "every task has weight 0: give at least one a weight > 0")

    def _variants(self) -> dict[str, dict]:
        """{name: {algorithm, baseline, description, rl}} in config order, plain algorithms
        first; a baseline "" resolves to the variant named after the algorithm, when present."""
        out = (
            fair.variants(self.algorithms, self.lr_grid)
            if self.lr_grid
            else {
                a: {"algorithm": a, "baseline": "", "description": "", "rl": {}}
                for a in self.algorithms
            }
        )
        for name, v in (self.config.get("variants") or {}).items():
            if name in out:
                self._fail(
                    f"variants.{name}",
                    "has the name of a plain algorithm in "
                    "`algorithms`; give the variant another name",
                )
            if name == "sft":
                self._fail(
                    f"variants.{name}",
                    "'sft' names the SFT model's evaluations; give the variant another name",
                )
            out[name] = {
                "algorithm": v.get("algorithm", "gspo"),
                "baseline": v.get("baseline", ""),
                "description": v.get("description", ""),
                "rl": v.get("rl") or {},
            }
        out.update(offpolicy.variants(out, offpolicy.grid(self.config)))  # each at each k
        if not out:
            self._fail("algorithms", "and variants are both empty: nothing to train")
        for name, v in out.items():
            if name in self.algorithms:
                continue
            base = v["baseline"] or (v["algorithm"] if v["algorithm"] in out else "")
            if base and base not in out:
                self._fail(
                    f"variants.{name}.baseline",
                    f"{base!r} is neither in algorithms nor in variants ({', '.join(out)})",
                )
            if base == name:
                self._fail(f"variants.{name}.baseline", "a variant cannot be its own baseline")
            v["baseline"] = base
        return out

    def _check_budgets(self):
        seen = {}
        for b, s in self.steps_of.items():
            if b > 0 and s == 0:
                self._fail(
                    "budgets",
                    f"{b}% of rl.steps={self.rl_steps} rounds to step 0; "
                    "raise rl.steps or the budget",
                )
            if s in seen:
                self._fail(
                    "budgets",
                    f"{seen[s]}% and {b}% of rl.steps={self.rl_steps} are the "
                    f"same step {s}; raise rl.steps or drop one",
                )
            seen[s] = b

    def _model_exists(self, key: str, model: str):
        if model in PRESETS:
            return
        p = pathlib.Path(model)
        if not (p / "config.json").is_file():
            msg = (
                f"{model!r} is neither a model preset ({', '.join(sorted(PRESETS))}) nor a "
                "model directory with a config.json"
            )
            if self.dry_run:
                print(
                    f"warning: config: {key}: {msg} (a dry run goes on; a real run stops here)",
                    file=sys.stderr,
                )
            else:
                self._fail(key, msg)

    def _typed(self, cls, data: dict, key: str):
        try:
            return from_dict(cls, data)
        except ConfigError as e:
            raise ConfigError(f"config: {key}.{e}") from None

    # -- stage configs --------------------------------------------------------------------------
    def data_file(self, task: str, part: str) -> str:
        return f"{self.base}/data/{task}_{part}.jsonl"

    def data_files(self) -> list[str]:
        return [self.data_file(t, p) for t in self.data_tasks for p in PARTS] + (
            [self.data_file(self.val_bench(), "val")] if self.lr_grid else []
        )

    def val_bench(self) -> str:
        return fair.val_bench(self.config, self.benchmarks, self.rl_tasks)

    def _data_config(self) -> DataGenConfig:
        d = dict(self.config["data"])
        d["out_dir"] = f"{self.base}/data"
        d["tasks"] = self.data_tasks
        if self.lr_grid:
            d.update(val_n=fair.settings(self.config)["problems"], val_tasks=[self.val_bench()])
        cfg = self._typed(DataGenConfig, d, "data")
        for task in TASKS:
            for part in (*PARTS, "generated_tests"):  # a generated_tests folder is local
                src = getattr(getattr(cfg.files, task), part)
                local = (
                    part == "generated_tests"
                    or src.startswith((".", "/"))
                    or src.endswith((".json", ".jsonl", ".parquet", ".csv"))
                )
                if (
                    src
                    and local
                    and not (glob.glob(src) if "*" in src else pathlib.Path(src).exists())
                ):
                    msg = f"{src}: file not found"
                    if self.dry_run:
                        print(f"warning: config: data.files.{task}.{part}: {msg}", file=sys.stderr)
                    else:
                        self._fail(f"data.files.{task}.{part}", msg)
        return cfg

    def _mix(self, part: str) -> list[dict]:
        tasks = self.rl_tasks if part == "rl" else self.train_tasks
        return [{"path": self.data_file(t, part), "weight": float(w)} for t, w in tasks.items()]

    def _sft_config(self) -> SFTConfig:
        d = dict(self.config["sft"])
        for k in SFT_MANAGED:
            if k in d:
                self._fail(f"sft.{k}", "is set by the workflow; leave it out")
        self._model_exists("sft.model", d.get("model", "tiny"))
        d.update(
            out_dir=f"{self.base}/sft",
            train_data=self._mix("sft"),
            prompt=self.prompt,
            eval_data=self.data_file("aime", "test") if "aime" in self.data_tasks else "",
        )
        cfg = self._typed(SFTConfig, d, "sft")
        preflight.sft_engine_check(cfg)
        return cfg

    def _rl_config(self, variant: str, seed: int) -> RLConfig:
        v = self.variants[variant]
        algorithm = v["algorithm"]
        d = {k: val for k, val in self.config["rl"].items() if k != "per_algorithm"}
        d = deep_merge(d, (self.config["rl"].get("per_algorithm") or {}).get(algorithm) or {})
        for k in RL_MANAGED:
            if k in d:
                self._fail(
                    f"rl.{k}", "is set by the workflow (per algorithm and seed); leave it out"
                )
            if k in v["rl"]:
                self._fail(f"variants.{variant}.rl.{k}", "is set by the workflow; leave it out")
        d = deep_merge(d, v["rl"])
        d.update(
            algorithm=algorithm,
            seed=seed,
            model=f"{self.base}/sft/model",
            out_dir=self.rl_dir(variant, seed),
            train_data=self._mix("rl"),
            ckpt_every=self.ckpt_every,
            keep_steps=self.nonzero_steps(),
            prompt=self.prompt,
        )
        key = "rl" if variant in self.algorithms else f"variants.{variant}.rl"
        cfg = self._typed(RLConfig, d, key)
        preflight.engine_check(cfg, key)  # a refusal stops the plan, not a GPU job hours later
        return cfg

    def _eval_config(self, bench: str, *, intermediate: bool = False) -> dict:
        ev = self.config["eval"]
        common = {k: v for k, v in ev.items() if k not in TASKS}
        merged = {**common, **{k: v for k, v in (ev.get(bench) or {}).items() if v is not None}}
        mid = merged.pop("intermediate", None) or {}
        if intermediate:
            merged.update({k: v for k, v in mid.items() if v is not None})
        if "prompt" in merged:
            self._fail("eval.prompt", "is set by the workflow (top-level prompt); leave it out")
        merged.update(benchmark=bench, prompt=self.prompt)
        merged["data"] = self.data_file(bench, "test")
        # typed and complete (every EvalConfig field, defaults filled in), checked before any job
        return to_dict(self._typed(EvalConfig, merged, f"eval.{bench}"))

    # -- files the rules use --------------------------------------------------------------------
    def cfg_path(self, name: str) -> str:
        return f"{self.base}/config/{name}.yaml"

    def rl_dir(self, variant: str, seed) -> str:
        return f"{self.base}/rl/{variant}/seed{seed}"

    def stage_texts(self) -> dict[str, str]:
        """{config file: content} of every stage."""
        out = {
            self.cfg_path("data"): dump(to_dict(self.data_cfg)),
            self.cfg_path("sft"): dump(to_dict(self.sft_cfg)),
        }
        for (a, s), cfg in self.rl_cfgs.items():
            out[self.cfg_path(f"rl/{a}-seed{s}")] = dump(to_dict(cfg))
        for b, cfg in self.eval_cfgs.items():
            out[self.cfg_path(f"eval/{b}")] = dump(cfg)
        for b, cfg in self.mid_eval_cfgs.items():
            out[self.cfg_path(f"eval/{b}-intermediate")] = dump(cfg)
        out[self.cfg_path("workflow")] = dump(self.config)
        out.update({self.cfg_path(k): dump(v) for k, v in fair.stage_configs(self).items()})
        out[self.cfg_path("report")] = dump(
            {
                **self.report_cfg,
                "experiment": self.experiment,
                "algorithms": self.algorithms,
                "seeds": self.seeds,
                "budgets": self.budgets,
                "benchmarks": self.benchmarks,
                "variants": {
                    n: {k: v[k] for k in ("algorithm", "baseline", "description")}
                    for n, v in self.variants.items()
                },
                "budget_steps": {str(b): s for b, s in self.steps_of.items()},
                "rl_steps": self.rl_steps,
            }
        )
        return out

    def write_stage_configs(self) -> list[str]:
        """Write the stage configs whose content changed; the changed paths."""
        self._shas = {}
        changed = []
        for path, text in self.stage_texts().items():
            self._shas[path] = sha(text)
            if write_if_changed(self.workdir / path, text, dry_run=self.dry_run):
                changed.append(path)
        return changed

    def config_sha(self, path: str) -> str:
        return self._shas[path]

    # -- rule helpers (input functions and params take the job's wildcards) -----------------------
    def step_of(self, budget) -> int:
        return self.steps_of[int(budget)]

    def sha_param(self, name: str) -> str:
        return self.config_sha(self.cfg_path(name))

    def rl_sha_param(self, wildcards) -> str:
        return self.config_sha(self.cfg_path(f"rl/{wildcards.variant}-seed{wildcards.seed}"))

    def eval_sha_param(self) -> str:
        return sha("".join(self.config_sha(p) for p in self.eval_configs()))

    def checkpoint_eval_configs(self, wildcards) -> list[str]:
        """The eval configs of a run's checkpoint at `wildcards.budget`: a benchmark's
        intermediate ones between budget 0 and the last, its full ones at the last."""
        mid = 0 < int(wildcards.budget) < self.budgets[-1]
        return [
            self.cfg_path(
                f"eval/{b}-intermediate" if mid and b in self.mid_eval_cfgs else f"eval/{b}"
            )
            for b in self.benchmarks
        ]

    def checkpoint_eval_sha(self, wildcards) -> str:
        return sha("".join(self.config_sha(p) for p in self.checkpoint_eval_configs(wildcards)))

    def test_files(self) -> list[str]:
        return [self.data_file(b, "test") for b in self.benchmarks]

    def eval_outputs(self, what: str, name: str) -> list[str]:
        """`name` of each benchmark under results/{experiment}/eval/<what>/ (`what` may hold
        wildcards such as {variant}/seed{seed}/b{budget})."""
        return [f"results/{{experiment}}/eval/{what}/{b}/{name}" for b in self.benchmarks]

    def step_param(self, wildcards) -> int:
        return self.step_of(wildcards.budget)

    def sft_data(self, wildcards) -> list[str]:
        return [self.data_file(t, "sft") for t in self.train_tasks] + (
            [self.data_file("aime", "test")] if "aime" in self.data_tasks else []
        )

    def rl_data(self, wildcards) -> list[str]:
        return [self.data_file(t, "rl") for t in self.rl_tasks]

    def engine_regex(self, verl: bool) -> str:
        """The variants verl trains (verl=True: workflow/rules/verl.smk) or the others (rule rl):
        each rule's wildcard constraint, so that exactly one makes a run's summary.json."""
        names = [
            v for v in self.variants if (self.rl_cfgs[v, self.seeds[0]].engine == "verl") == verl
        ]
        return regex_of(names) if names else "(?!)"

    def rl_dirs(self) -> list[str]:
        return [self.rl_dir(v, s) for v in self.variants for s in self.seeds]

    def eval_out(self, variant, seed, budget, bench) -> str:
        return f"{self.base}/eval/{variant}/seed{seed}/b{budget}/{bench}"

    def sft_eval_summaries(self) -> list[str]:
        return [f"{self.base}/eval/sft/{b}/summary.json" for b in self.benchmarks]

    def eval_configs(self) -> list[str]:
        return [self.cfg_path(f"eval/{b}") for b in self.benchmarks]

    def initial_eval_inputs(self, wildcards) -> list[str]:
        """A run's 0 % points: the SFT model's evaluations (when 0 is a budget)."""
        return self.sft_eval_summaries() if 0 in self.budgets else []

    def run_eval_summaries(self, wildcards) -> list[str]:
        return [
            f"{self.eval_out(wildcards.variant, wildcards.seed, b, bench)}/summary.json"
            for b in self.nonzero_budgets()
            for bench in self.benchmarks
        ]

    def nonzero_budgets(self) -> list[int]:
        return [b for b in self.budgets if b > 0]

    def nonzero_steps(self) -> list[int]:
        return [self.steps_of[b] for b in self.nonzero_budgets()]

    def tracked(self) -> list[str]:
        """The track_* outputs: every evaluation recorded in MLflow."""
        return [f"{self.base}/eval/sft/mlflow.json"] + [
            f"{self.base}/eval/{v}/seed{s}/mlflow.json" for v in self.variants for s in self.seeds
        ]

    def report_outputs(self) -> dict[str, str]:
        r = f"{self.base}/report"
        return {
            "html": f"{r}/index.html",
            "score": f"{r}/score_vs_compute.png",
            "final": f"{r}/final_scores.png",
            "reward": f"{r}/reward_vs_compute.png",
            "clip": f"{r}/clip_fraction.png",
            "table": f"{r}/final_scores.csv",
            "stability": f"{r}/stability.csv",
            "variants": f"{r}/variants.csv",
            "moe": f"{r}/moe.csv",
        }

    def baseline_param(self, wildcards) -> str:
        return self.variants[wildcards.variant]["baseline"]

    def checkpoint_param(self, wildcards) -> str:
        """The checkpoint of (variant, seed) at the budget's step."""
        step = self.step_of(wildcards.budget)
        return f"{self.rl_dir(wildcards.variant, wildcards.seed)}/checkpoints/step_{step:06d}"

    def track_eval_flags(self, wildcards) -> str:
        """pipeline.track's --eval BUDGET=FOLDER of every budget of (variant, seed)."""
        evals = [f"0={self.base}/eval/sft"] if 0 in self.budgets else []
        evals += [
            f"{b}={self.base}/eval/{wildcards.variant}/seed{wildcards.seed}/b{b}"
            for b in self.nonzero_budgets()
        ]
        return " ".join(f"--eval {shlex.quote(e)}" for e in evals)

    @staticmethod
    def launcher(wildcards, resources) -> invocation.Unrecorded:
        """How a training or evaluation job starts: `python -m` on one device, torchrun with one
        process per GPU the profile gives the rule, srun + one torchrun per node on several SLURM
        nodes (gspo_workflow.launch). Unrecorded: the same run on another number of GPUs gives
        the same numbers, so it re-runs nothing."""
        return invocation.Unrecorded(launch.launcher(resources))

    def tracking_flags(self, argv: list[str] | None = None) -> invocation.Unrecorded:
        """Every stage command's MLflow flags: this plan's store and experiment, and the tags."""
        return invocation.tracking_flags(self.tracking_uri, self.experiment, argv)
