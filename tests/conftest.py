import os

import pytest

# Tests are small; one intra-op thread keeps them deterministic and leaves the other core free.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """A random-initialised `tiny` preset model directory, built once per test session."""
    from gspo.models import build_tiny

    return build_tiny("tiny", tmp_path_factory.mktemp("models") / "tiny", seed=0)


@pytest.fixture(scope="session")
def tiny_moe_model_dir(tmp_path_factory):
    from gspo.models import build_tiny

    return build_tiny("tiny-moe", tmp_path_factory.mktemp("models") / "tiny-moe", seed=0)
