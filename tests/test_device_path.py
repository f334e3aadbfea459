"""What a CPU can check of the GPU path (issue 23): collectives take tensors where the backend
serves them, and step metrics keep their tensors on the training device. The "meta" device
stands in for CUDA: a CPU tensor stacked with a meta one is the same device error a CPU constant
stacked with CUDA sums is on a GPU."""

import ast
import pathlib

import pytest
import torch

from gspo.infra import distributed as dist
from gspo.native.step_metrics import gap_sums

ROOT = pathlib.Path(__file__).resolve().parents[1]
COLLECTIVES = {
    "all_reduce",
    "all_gather",
    "all_gather_object",
    "all_gather_into_tensor",
    "broadcast",
    "broadcast_object_list",
    "reduce",
    "reduce_scatter",
    "reduce_scatter_tensor",
    "all_to_all",
    "all_to_all_single",
    "gather",
    "scatter",
    "gather_object",
    "scatter_object_list",
    "send",
    "recv",
    "isend",
    "irecv",
    "barrier",
}


def _direct_collective_calls(path: pathlib.Path, root: pathlib.Path = ROOT) -> list[str]:
    """`torch.distributed` collectives called in `path` other than through gspo.infra.distributed:
    torch.distributed.X(...), an alias of torch.distributed's X(...), or X imported from it."""
    tree = ast.parse(path.read_text(), str(path))
    aliases, names = {"torch.distributed"}, set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            aliases |= {a.asname for a in node.names if a.name == "torch.distributed" and a.asname}
        elif isinstance(node, ast.ImportFrom) and node.module == "torch.distributed":
            names |= {a.asname or a.name for a in node.names if a.name in COLLECTIVES}
    found = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        f = node.func
        if isinstance(f, ast.Name) and f.id in names:
            found.append(f"{path.relative_to(root)}:{node.lineno} {f.id}")
        elif (
            isinstance(f, ast.Attribute)
            and f.attr in COLLECTIVES
            and ast.unparse(f.value) in aliases
        ):
            found.append(f"{path.relative_to(root)}:{node.lineno} {ast.unparse(f)}")
    return found


def test_every_collective_of_the_code_goes_through_gspo_distributed():
    own = ROOT / "gspo" / "infra" / "distributed.py"
    files = [
        p
        for d in ("gspo", "evaluators", "pipeline", "workflow")
        for p in (ROOT / d).rglob("*.py")
        if p != own
    ]
    assert len(files) > 40
    assert [c for p in files for c in _direct_collective_calls(p)] == []
    # and the helper module is where they are: the scan sees them
    assert len(_direct_collective_calls(own)) >= 4


def test_the_scan_finds_each_way_of_calling_a_collective_directly(tmp_path):
    src = tmp_path / "x.py"
    src.write_text(
        "import torch.distributed as td\nimport torch\n"
        "from torch.distributed import all_reduce as ar\n"
        "td.all_reduce(t)\ntorch.distributed.all_gather_object(a, b)\nar(t)\n"
        "td.get_rank()\n"
    )
    calls = _direct_collective_calls(src, tmp_path)
    assert sorted(c.split()[1] for c in calls) == [
        "ar",
        "td.all_reduce",
        "torch.distributed.all_gather_object",
    ]


def test_under_nccl_a_collective_takes_its_tensor_on_the_ranks_gpu():
    gpu = dist.World(rank=1, size=2, local_rank=1, device="meta")  # meta: a stand-in for cuda:1
    t = torch.tensor(3)
    moved = dist.on_collective_device(t, gpu)
    assert moved.device.type == "meta" and moved.shape == t.shape and moved.dtype == t.dtype
    cpu = dist.World(rank=1, size=2, local_rank=1)
    assert dist.on_collective_device(t, cpu) is t  # gloo: no copy


def test_init_names_the_ranks_gpu_as_the_collective_device(monkeypatch):
    # a world of one (no torchrun) is on the CPU whatever the training device
    monkeypatch.delenv("RANK", raising=False)
    assert dist.init("cuda").device == "cpu"
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setenv("WORLD_SIZE", "1")  # one rank: no process group, no GPU needed
    monkeypatch.setenv("LOCAL_RANK", "0")
    assert dist.init("cuda").device == "cuda:0"
    assert dist.init("cpu").device == "cpu"


@pytest.mark.parametrize("rows", [3, 0])
def test_the_log_prob_gap_sums_stay_on_the_rows_device(rows):
    """Issue 23 #2: a CPU count and a CPU zero were stacked with the device's sums."""
    t = torch.empty(rows, 5, device="meta")
    sums, maxes = gap_sums(t, t, t, t)
    assert sums.device.type == maxes.device.type == "meta"
    assert sums.shape == (5,) and maxes.shape == (2,) and sums.dtype == torch.float64


def test_the_log_prob_gap_sums_by_hand():
    engine = torch.tensor([[-1.0, -2.0, 0.0], [-0.5, 0.0, 0.0]])
    trainer = torch.tensor([[-1.5, -1.0, 0.0], [-0.5, 0.0, 0.0]])
    mask = torch.tensor([[1.0, 1.0, 0.0], [1.0, 0.0, 0.0]])
    ent = torch.tensor([[2.0, 1.0, 9.0], [3.0, 9.0, 9.0]])
    sums, maxes = gap_sums(engine, trainer, ent, mask)
    # token gaps: +0.5, -1.0 | 0.0; sequence gaps: |(-0.5)| / 2 = 0.25 | 0
    assert sums.tolist() == pytest.approx([6.0, 3.0, 1.5, 0.25, 2.0])
    assert maxes.tolist() == pytest.approx([1.0, 0.25])
