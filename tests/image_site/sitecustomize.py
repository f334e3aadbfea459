"""The lent GPU image's limits in a Python here (tests/test_gpu_check.py puts this folder first
on PYTHONPATH): a module named in GSPO_IMAGE_BLOCKED (benchmarks/device_image.py's BLOCKED:
what the image lacks and no carried wheel brings) is not found, neither by import (a
ModuleNotFoundError) nor by importlib.util.find_spec, nor its distribution by importlib.metadata
(what transformers and TRL ask before they use vLLM), as on the image. Child processes
(torchrun's ranks) inherit it through the environment."""

import os
import sys
from importlib.machinery import PathFinder

_BLOCKED = {m for m in os.environ.get("GSPO_IMAGE_BLOCKED", "").split(",") if m}


def _blocked(name: str) -> bool:
    name = name.lower().replace("-", "_").replace(".", "_")
    return any(name == m or name.startswith(m + "_") for m in _BLOCKED)


class _ImagePathFinder(PathFinder):
    """sys.path's finder, blind to the blocked modules and distributions."""

    @classmethod
    def find_spec(cls, fullname, path=None, target=None):
        if fullname.partition(".")[0] in _BLOCKED:
            return None
        return super().find_spec(fullname, path, target)

    @classmethod
    def find_distributions(cls, *args, **kwargs):
        for d in super().find_distributions(*args, **kwargs):
            if not _blocked(d.metadata["Name"] or ""):
                yield d


if _BLOCKED:
    sys.meta_path[:] = [_ImagePathFinder if f is PathFinder else f for f in sys.meta_path]
