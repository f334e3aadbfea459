"""The data stage's config: generated task data per split, or real files read by each
benchmark's own loader (pipeline.data)."""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass

from gspo.config.fields import check, option


@dataclass
class AimeDataConfig:
    sft_n: int = option(20000, "worked problems for SFT (train split)")
    sft_steps: list[int] = option([1, 2, 3], "add/subtract step counts mixed in the SFT set")
    rl_n: int = option(5000, "RL prompts (train split)")
    rl_steps: list[int] = option([3], "step counts of RL prompts")
    test_n: int = option(300, "held-out problems (test split)")
    test_steps: list[int] = option([3], "step counts of held-out problems")
    max_operand: int = option(9, "operands are drawn from 1..max_operand")
    sft_unboxed: float = option(
        0.0,
        "share of SFT worked solutions that stop before their "
        "final \\boxed{} line (seeded): cold-start data that leave RL a "
        "behaviour to learn",
    )

    def __post_init__(self):
        for name in ("sft_n", "rl_n", "test_n", "max_operand"):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)}")
        check(
            0 <= self.sft_unboxed < 1,
            "sft_unboxed",
            f"must lie in [0, 1) (a share of the SFT set), got {self.sft_unboxed}",
        )
        for name in ("sft_steps", "rl_steps", "test_steps"):
            v = getattr(self, name)
            check(len(v) > 0 and all(s >= 0 for s in v), name, "must be a non-empty list of >= 0")


@dataclass
class CodeDataConfig:
    """Generated code problems (LiveCodeBench-style `lcb` or CodeForces-style `cf`). Each split is
    drawn from a finite problem space (about 1,200 train and 140 test problems over all
    templates); asking for more than exists is an error naming the count."""

    sft_n: int = option(1000, "worked problems for SFT (train split)")
    rl_n: int = option(1000, "RL prompts (train split; may overlap the SFT problems)")
    test_n: int = option(100, "held-out problems (test split)")
    templates: list[str] = option([], "generator templates to draw from (empty: all of them)")
    max_rating: int = option(3500, "cf only: leave out templates rated above this")

    def __post_init__(self):
        for name in ("sft_n", "rl_n", "test_n"):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)}")
        check(self.max_rating >= 800, "max_rating", f"must be >= 800, got {self.max_rating}")


@dataclass
class GeneratedDataConfig:
    """Generated problems of a benchmark whose generator takes no settings but the split's size
    (evaluators.tasks: `generate(n, split=, seed=, test_fraction=)`); a new benchmark's
    section (docs/EXTENDING.md)."""

    sft_n: int = option(1000, "worked problems for SFT (train split)")
    rl_n: int = option(1000, "RL prompts (train split)")
    test_n: int = option(100, "held-out problems (test split)")

    def __post_init__(self):
        for name in ("sft_n", "rl_n", "test_n"):
            check(getattr(self, name) > 0, name, f"must be > 0, got {getattr(self, name)}")


@dataclass
class TaskFiles:
    """Real data for one task instead of generated problems: each split that names a source is
    read with the benchmark's own loader (evaluators.<task>.load: a local .json/.jsonl/.parquet
    file or a Hugging Face hub name) and written in the project's record layout; an empty split
    is generated as usual."""

    sft: str = option("", "worked problems for SFT (records need a solution; empty: generated)")
    rl: str = option("", "RL prompts (empty: generated)")
    test: str = option("", "held-out evaluation problems (empty: generated)")
    limit: int = option(0, "keep at most this many records of each loaded file (0: all)")
    test_start: str = option(
        "",
        "lcb only: keep test problems released on or after this ISO "
        "date (the contamination window after the model's cut-off; '': "
        "no bound)",
    )
    test_end: str = option(
        "", "lcb only: keep test problems released on or before this ISO date ('': no bound)"
    )
    version: str = option(
        "",
        "lcb only, hub names: the LiveCodeBench release read "
        "(release_v5: its files 1-5; v5: file 5 alone; '': all)",
    )
    test_split: str = option(
        "",
        "a hub name as test: the dataset split it reads ('': the "
        "loader's default; open-r1/codeforces: test)",
    )
    generated_tests: str = option(
        "",
        "cf only: open-r1/codeforces' generated_tests folder "
        "(parquet files of problem_id, input, output, test_case_i); "
        "its tests join the rl and test problems' official ones",
    )

    def __post_init__(self):
        check(self.limit >= 0, "limit", f"must be >= 0, got {self.limit}")
        for name in ("test_start", "test_end"):
            v = getattr(self, name)
            check(
                not v or re.fullmatch(r"\d{4}-\d{2}-\d{2}", v) is not None,
                name,
                f"must be an ISO date YYYY-MM-DD, got {v!r}",
            )
        check(
            not (self.test_start and self.test_end) or self.test_start <= self.test_end,
            "test_start",
            f"{self.test_start} is after test_end {self.test_end}",
        )
        check(
            not self.window or bool(self.test),
            "test_start",
            "filters a loaded test file by release date; set test to that file",
        )
        check(
            re.fullmatch(r"(release_v\d+|v\d+|release_latest)?", self.version) is not None,
            "version",
            f"must be release_vN, vN or release_latest, got {self.version!r}",
        )
        check(
            not self.test_split or bool(self.test),
            "test_split",
            "is the split of a hub dataset named as test; set test to its name",
        )

    def load_kwargs(self, part: str) -> dict:
        """The loader's keywords beside the source for `part` ('rl' or 'test')."""
        kw = {"generated_tests": self.generated_tests} if self.generated_tests else {}
        kw.update({"version": self.version} if self.version else {})
        if part != "test":
            return kw
        return {**kw, **self.window, **({"split": self.test_split} if self.test_split else {})}

    @property
    def window(self) -> dict:
        """The test split's release-date window as loader arguments (empty: none)."""
        if not (self.test_start or self.test_end):
            return {}
        return {"start_date": self.test_start or None, "end_date": self.test_end or None}


@dataclass
class DataFiles:
    aime: TaskFiles = option(TaskFiles(), "real AIME-style data (evaluators.benchmarks.aime.load)")
    lcb: TaskFiles = option(
        TaskFiles(), "real LiveCodeBench data (evaluators.benchmarks.livecodebench.load)"
    )
    cf: TaskFiles = option(
        TaskFiles(), "real CodeForces data (evaluators.benchmarks.codeforces.load)"
    )

    def __post_init__(self):
        for task in ("aime", "cf"):  # only LiveCodeBench records carry release dates
            check(
                not getattr(self, task).window,
                f"{task}.test_start",
                "a release-date window is for lcb only (its records carry contest dates)",
            )
        for task in ("aime", "lcb"):  # only open-r1/codeforces has a generated-tests folder
            check(
                not getattr(self, task).generated_tests,
                f"{task}.generated_tests",
                "is for cf only (open-r1/codeforces' generated_tests folder)",
            )
        for task in ("aime", "cf"):  # only LiveCodeBench publishes releases
            check(
                not getattr(self, task).version,
                f"{task}.version",
                "is for lcb only (LiveCodeBench's release files)",
            )


# The tasks data can be made for are the fields of DataFiles: the library never lists the
# benchmarks itself (evaluators.tasks.BENCHMARKS does; a test holds the two equal).
DATA_TASKS = tuple(f.name for f in dataclasses.fields(DataFiles))


@dataclass
class DataGenConfig:
    """Procedurally generated task data (train / RL / held-out test splits, disjoint)."""

    out_dir: str = option("results/default/data", "where the JSONL files are written")
    seed: int = option(0, "generator seed")
    test_fraction: float = option(0.1, "share of the problem space reserved for the test split")
    tasks: list[str] = option(
        ["aime"],
        "tasks to generate, any of aime, lcb, cf: files "
        "<task>_sft.jsonl, <task>_rl.jsonl and <task>_test.jsonl each",
    )
    aime: AimeDataConfig = option(AimeDataConfig(), "AIME-style math")
    lcb: CodeDataConfig = option(
        CodeDataConfig(), "LiveCodeBench-style code (evaluators.benchmarks.livecodebench)"
    )
    cf: CodeDataConfig = option(
        CodeDataConfig(), "CodeForces-style code (evaluators.benchmarks.codeforces)"
    )
    files: DataFiles = option(DataFiles(), "real data files replacing generated splits, per task")
    val_n: int = option(
        0,
        "RL prompts of each task in val_tasks held out as its validation "
        "split, <task>_val.jsonl (the last ones not among the SFT problems); the "
        "fair protocol chooses learning rates on it. 0: none",
    )
    val_tasks: list[str] = option(["aime"], "the tasks that get a validation split")

    def __post_init__(self):
        check(0 < self.test_fraction < 1, "test_fraction", "must lie in (0, 1)")
        check(len(self.tasks) > 0, "tasks", f"is empty; list some of {list(DATA_TASKS)}")
        for t in self.tasks:
            check(
                t in DATA_TASKS, "tasks", f"unknown task {t!r}; expected some of {list(DATA_TASKS)}"
            )
        check(self.val_n >= 0, "val_n", f"must be >= 0, got {self.val_n}")
        for t in self.val_tasks:
            check(
                t in DATA_TASKS,
                "val_tasks",
                f"unknown task {t!r}; expected some of {list(DATA_TASKS)}",
            )
