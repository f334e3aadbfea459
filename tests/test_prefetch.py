"""The background builder of the workflow fixtures (tests/prefetch.py): what a failed build tells
the test that waits for it."""

from __future__ import annotations

import pytest

from prefetch import Background


def test_a_failed_background_build_fails_its_reader_with_the_builders_traceback(tmp_path):
    bg = Background(tmp_path, ["no-such-fixture"])
    with pytest.raises(pytest.fail.Exception, match="(?s)building no-such-fixture.*KeyError"):
        bg.result("no-such-fixture", timeout=120)
    with pytest.raises(KeyError, match="smoke was not built"):
        bg.result("smoke")
    bg.stop()
    assert not (tmp_path / ".no-such-fixture.json").exists()      # the result file is whole
