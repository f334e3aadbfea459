"""The background builder of the workflow fixtures (tests/prefetch.py): what a failed build tells
the test that waits for it, and that it ends when the pytest that started it is gone."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from prefetch import Background


def test_a_failed_background_build_fails_its_reader_with_the_builders_traceback(tmp_path):
    bg = Background(tmp_path, ["no-such-fixture"])
    with pytest.raises(pytest.fail.Exception, match="(?s)building no-such-fixture.*KeyError"):
        bg.result("no-such-fixture", timeout=120)
    with pytest.raises(KeyError, match="smoke was not built"):
        bg.result("smoke")
    bg.stop()
    assert not (tmp_path / ".no-such-fixture.json").exists()  # the result file is whole


def test_a_builder_whose_pytest_is_gone_ends_its_own_process_group(tmp_path):
    import prefetch

    gone = subprocess.Popen(["sleep", "1"])
    builder = subprocess.Popen(
        [sys.executable, prefetch.__file__, str(gone.pid), str(tmp_path), "moe_ablation"],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    gone.wait()
    assert builder.wait(timeout=120) == -signal.SIGTERM  # its workflow with it, unfinished
    assert not (tmp_path / "moe_ablation.json").exists()
