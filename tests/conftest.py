import os
import pathlib

import pytest

# Tests are small; one intra-op thread keeps them deterministic and leaves the other core free.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(items):
    """The tests that read a background-built workflow (tests/prefetch.py) run last, each file's
    in its order: every other test runs beside the builds first, and the readers wait least."""
    from prefetch import BUILDERS

    readers = [i for i in items if any(name in i.fixturenames for name in BUILDERS)]
    chosen = set(map(id, readers))
    items[:] = [i for i in items if id(i) not in chosen] + readers


@pytest.fixture(scope="session", autouse=True)
def prefetched(request, tmp_path_factory):
    """The workflow fixtures the collected tests need (tests/prefetch.py's BUILDERS), built in one
    background process from the first test on, in the order the tests first need them; a
    fixture calls `prefetched(name)` to wait for its result."""
    from prefetch import BUILDERS, Background

    names = dict.fromkeys(
        name for item in request.session.items for name in BUILDERS if name in item.fixturenames
    )  # in the order tests first need them
    background = Background(tmp_path_factory.getbasetemp() / "prefetch", list(names))
    yield background.result
    background.stop()


@pytest.fixture(scope="session")
def smoke(prefetched):
    """The two smoke workflow runs from scratch (tests/test_workflow.py's smoke_runs: a complete,
    b its seed-0 paths), made once per session for the three files that read them
    (test_workflow, test_report, test_mlflow_ui)."""
    a, b = prefetched("smoke")
    return pathlib.Path(a), pathlib.Path(b)


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random-initialised `tiny` preset model directory, built once per test session."""
    from gspo.model.models import build_tiny

    return build_tiny("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_moe_model_dir(tmp_path_factory):
    from gspo.model.models import build_tiny

    return build_tiny("tiny-moe", tmp_path_factory.mktemp("models") / "tiny-moe", seed=0)


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """A folder with train.jsonl: a small AIME-style problem space (operands 1..3, one step) that
    100 SFT steps half learn, so that RL groups have reward variance to learn from."""
    from evaluators.benchmarks import aime
    from gspo.io import write_jsonl

    d = tmp_path_factory.mktemp("toy_data")
    write_jsonl(
        aime.generate(40, split="train", seed=0, difficulty=aime.Difficulty(1, 3)),
        d / "train.jsonl",
    )
    return d


@pytest.fixture(scope="session")
def toy_sft_model(toy_data, tmp_path_factory):
    """The `tiny` preset after 100 SFT steps on toy_data: RL's starting point in the tests."""
    from evaluators.tasks import reward
    from gspo.config.train import DataSource, SFTConfig
    from gspo.native.sft import run_sft

    out = tmp_path_factory.mktemp("toy_sft")
    cfg = SFTConfig(
        model="tiny",
        out_dir=str(out),
        steps=100,
        batch_size=16,
        lr=1e-2,
        warmup_steps=5,
        train_data=[DataSource(str(toy_data / "train.jsonl"))],
        eval_data=str(toy_data / "train.jsonl"),
        eval_problems=8,
        eval_every=0,
        threads=1,
    )
    return run_sft(cfg, reward)


@pytest.fixture
def aime_prompts(tmp_path):
    """8 AIME-style prompts (operands 1..9, one step) in tmp_path/prompts.jsonl."""
    from evaluators.benchmarks import aime
    from gspo.io import write_jsonl

    path = tmp_path / "prompts.jsonl"
    write_jsonl(aime.generate(8, split="train", seed=0, difficulty=aime.Difficulty(1, 9)), path)
    return path
