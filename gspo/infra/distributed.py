"""The processes of one training job, on PyTorch's own distributed stack.

`torchrun --nproc-per-node N -m pipeline.train ...` starts N processes and sets RANK, WORLD_SIZE
and LOCAL_RANK (its documented interface); `init` joins them into a process group (nccl on
CUDA, gloo on CPU, which is how the tests run 2 ranks on a CPU). A plain `python -m ...` is a
world of one: no process group, every collective below a no-op, nothing sharded.

GSPO_COLLECTIVES=1 under torchrun makes even a world of one `distributed`: the process group is
initialised, the model sharded by FSDP2 and every collective below runs (on its backend's
device), so one GPU exercises the multi-GPU path (NCCL refuses two ranks on one GPU;
benchmarks/device_check.sh). It changes no number: a collective over one rank is the identity.

`shard` applies FSDP2 (`fully_shard`) to every decoder layer, then the root. FSDP averages
gradients over the ranks; the trainer divides each rank's loss by the global normaliser
(sequences or tokens of the whole minibatch, all-reduced) and multiplies it by the world size
(`grad_scale`), so the averaged gradient is the single-process gradient whatever the world size
(a verl loss once came out world-size-squared too small by normalising twice;
tests/test_distributed.py checks parity). Gloo has no pre-multiplied sum, so FSDP's divide
factor is left alone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import os
import shutil
import types

import torch
import torch.distributed as dist


@dataclasses.dataclass(frozen=True)
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0
    device: str = "cpu"  # where the backend's collectives take tensors: cuda:<local rank> (nccl)
    collectives: bool = False  # a process group even for a world of one (GSPO_COLLECTIVES=1)

    @property
    def main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        """A process group, sharding and real collectives: several ranks, or `collectives`."""
        return self.size > 1 or self.collectives


def init(device: str = "cpu") -> World:
    """The world torchrun started this process in (a world of one outside torchrun)."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        return World()
    rank, size = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    cuda = device.startswith("cuda")
    forced = os.environ.get("GSPO_COLLECTIVES", "0") not in ("", "0")
    world = World(rank, size, local_rank, f"cuda:{local_rank}" if cuda else "cpu", forced)
    if world.distributed and not dist.is_initialized():
        if cuda:
            torch.cuda.set_device(world.local_rank)
        dist.init_process_group("nccl" if cuda else "gloo", timeout=datetime.timedelta(minutes=30))
    return world


def rank_device(device: str, world: World) -> str:
    """`device` as this rank uses it: plain "cuda" on several ranks is the rank's own GPU (one
    colocated rollout engine per rank: gspo.rollout.vllm_engine)."""
    return f"cuda:{world.local_rank}" if device == "cuda" and world.distributed else device


def close(world: World) -> None:
    if world.distributed and dist.is_initialized():
        dist.destroy_process_group()


# Every collective of the library goes through the helpers below (tests/test_device_path.py reads
# the sources to hold that): nccl serves only CUDA tensors and gloo CPU ones, and a count made
# with torch.tensor(...) lives on the CPU, so a collective called on it directly passes the gloo
# tests and stops the first GPU run.
def on_collective_device(t: torch.Tensor, world: World) -> torch.Tensor:
    """`t` where the world's backend takes it (itself when it is already there)."""
    return t if t.device == torch.device(world.device) else t.to(world.device)


def all_reduce(t: torch.Tensor, world: World, op: str = "sum") -> torch.Tensor:
    """`t` reduced over the ranks (sum, max or min), in place on whatever device it is;
    returned for chaining."""
    if world.distributed:
        buf = on_collective_device(t, world)
        dist.all_reduce(
            buf,
            op={"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "min": dist.ReduceOp.MIN}[op],
        )
        if buf is not t:
            t.copy_(buf)
    return t


def all_gather_cat(t: torch.Tensor, world: World) -> torch.Tensor:
    """The ranks' equally long 1-D tensors `t`, concatenated in rank order, on `t`'s device
    (`t` itself in a world of one)."""
    if not world.distributed:
        return t
    buf = on_collective_device(t.contiguous(), world)
    parts = [torch.empty_like(buf) for _ in range(world.size)]
    dist.all_gather(parts, buf)
    return torch.cat(parts).to(t.device)


def broadcast(t: torch.Tensor, world: World, src: int = 0) -> torch.Tensor:
    """`t` overwritten in place with rank `src`'s values; returned for chaining."""
    if world.distributed:
        buf = on_collective_device(t, world)
        dist.broadcast(buf, src)
        if buf is not t:
            t.copy_(buf)
    return t


def barrier(world: World) -> None:
    if world.distributed:
        dist.barrier()


def gather_objects(items: list, world: World) -> list:
    """Every rank's list of picklable `items`, concatenated in rank order, on every rank."""
    if not world.distributed:
        return list(items)
    parts: list = [None] * world.size
    dist.all_gather_object(parts, items)
    return [x for part in parts for x in part]


def node_shared_folder(world: World, write, read) -> None:
    """`write()` (a new temp folder) on each node's local rank 0 alone, then `read(folder)` on
    every rank of the node, then the folder removed; every rank of `world` must call it (the
    vLLM weight sync: one file per node, gspo.rollout.vllm_engine). A
    failure anywhere raises on every rank (none is left waiting in a collective). The node's
    writer is its first rank: torchrun numbers a node's ranks contiguously from
    node_rank x nproc_per_node."""
    folder, err = None, None
    if world.local_rank == 0:
        try:
            folder = write()
        except Exception as e:  # noqa: BLE001 - reported on every rank below
            err = f"{type(e).__name__}: {e}"
    told = gather_objects([(None if folder is None else str(folder), err)], world)
    path, err = told[world.rank - world.local_rank]
    if err is not None:
        err = f"rank {world.rank - world.local_rank} (the node's writer): {err}"
    else:
        try:
            read(path)
        except Exception as e:  # noqa: BLE001
            err = f"rank {world.rank}: {type(e).__name__}: {e}"
    errors = [e for e in gather_objects([err], world) if e]  # every rank has read it
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    if errors:
        raise RuntimeError(f"weight sync failed: {errors[0]}".splitlines()[0])


def decoder_layers(model) -> list[torch.nn.Module]:
    """The decoder layers of a Hugging Face causal LM (Qwen3, Qwen3-MoE and alike)."""
    return list(model.get_decoder().layers)


def shard(model, world: World, precision: str = "float32"):
    """FSDP2 over the world: each decoder layer, then the root (gradients averaged over ranks;
    see grad_scale). precision "bfloat16": bf16 parameters and compute, fp32 gradient reduction
    (the sharded fp32 parameters stay the master weights the optimizer updates)."""
    if not world.distributed:
        return model
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

    mp = (
        MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
        if precision == "bfloat16"
        else MixedPrecisionPolicy()
    )
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=mp)
    fully_shard(model, mp_policy=mp)
    # The chunked log-prob path (logprob_chunk > 0) calls the decoder and the LM head rather
    # than the model's forward; registered as a forward method of the root, it gathers the
    # root's parameters (embeddings, final norm, head) and hooks their gradient reduction.
    from torch.distributed.fsdp import register_fsdp_forward_method

    from gspo.model.logprobs import head_logprobs

    model.head_logprobs = types.MethodType(head_logprobs, model)
    register_fsdp_forward_method(model, "head_logprobs")
    return model


def load_sharded(path, world: World, device: str, precision: str = "float32", prepare=None):
    """(model, tokenizer) of the model directory `path`, on `device` and sharded over the world
    (shard). `prepare(model)` runs on the whole, unsharded module first (activation
    checkpointing, checks).

    Only rank 0 reads the weight files, into host memory; the other ranks build the model on
    the meta device (no memory), shard it, allocate their shards and receive them from rank 0
    (FSDP2's own broadcast_from_rank0), then rank 0's buffers (non-persistent ones, such as the
    rotary frequencies, are in no state dict). Loading the whole fp32 model on every rank
    before sharding took 8 host copies and a whole model on every GPU (issue 23 #5)."""
    from gspo.model.models import load_model

    if not world.distributed:
        model, tok = load_model(path)
        model.to(device)
        if prepare is not None:
            prepare(model)
        return model, tok
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_model_state_dict

    model, tok = load_model(path, weights=world.main)
    if prepare is not None:
        prepare(model)
    full = model.state_dict() if world.main else {}  # keeps rank 0's host copy past sharding
    shard(model, world, precision)
    if world.main:
        model.to(device)
    else:
        model.to_empty(device=device)
    set_model_state_dict(
        model, full, options=StateDictOptions(full_state_dict=True, broadcast_from_rank0=True)
    )
    del full
    for buf in model.buffers():
        broadcast(buf, world)
    return model, tok


def compute_precision(precision: str, device: str, world: World):
    """The context a training forward runs in. Sharded, FSDP's MixedPrecisionPolicy (see shard)
    already casts; a world of one gets bf16 compute from autocast, its fp32 parameters staying
    the master weights. The two bf16 paths round differently (autocast keeps some ops in fp32),
    so bf16 numbers match across world sizes only to bf16 precision; fp32 ones to float
    rounding."""
    if precision == "bfloat16" and not world.distributed:
        return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


def grad_scale(world: World) -> float:
    """What a rank's loss is multiplied by so that FSDP's mean over ranks is the sum."""
    return float(world.size)


def clip_grad_norm(params: list, max_norm: float, world: World) -> float:
    """Clip the gradients to a global L2 norm of `max_norm`; returns the norm before clipping.
    A world of one uses torch's clip_grad_norm_ itself. Sharded: the squared norms of every
    rank's shards are summed over the ranks (torch's own function, given FSDP2's DTensor
    gradients, was seen to return a smaller norm inside a training step)."""
    if not world.distributed:
        return float(torch.nn.utils.clip_grad_norm_(params, max_norm))
    from torch.distributed.tensor import DTensor

    grads = [p.grad for p in params if p.grad is not None]
    sq = sum((g.to_local() if isinstance(g, DTensor) else g).double().pow(2).sum() for g in grads)
    total = float(all_reduce(torch.as_tensor(sq, dtype=torch.float64), world).sqrt())
    coef = max_norm / (total + 1e-6)
    if coef < 1.0:
        for g in grads:
            g.mul_(coef)
    return total


def full_state_dict(
    model,
    world: World,
    *,
    rank0_only: bool = False,
    dtype: torch.dtype | None = None,
    keep: bool = True,
) -> dict[str, torch.Tensor]:
    """The whole model's parameters and buffers as plain tensors, on every rank (to sync a
    rollout engine), or with rank0_only on rank 0 alone (to publish the model or score it; the
    other ranks get an empty dict). Every rank must call it when sharded; a rank that passes
    keep=False takes part in the gathers and keeps nothing (an empty dict: the vLLM sync's
    ranks other than a node's writer, gspo.rollout.vllm_engine).

    Sharded, the tensors are gathered one at a time and moved to host memory (floating ones
    cast to `dtype` when given) before the next: the device holds at most one whole tensor
    beyond the shards, the largest (the embeddings), where gathering the state dict on the
    device took the whole model in fp32 on every GPU (gspo.infra.memory_plan: +46 GiB each for 8B).
    A world of one returns the model's own state dict."""
    if not world.distributed:
        return model.state_dict()
    if rank0_only:
        from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict

        return get_model_state_dict(
            model, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
        )
    from torch.distributed.tensor import DTensor

    out = {}
    for name, t in model.state_dict().items():
        full = t.full_tensor() if isinstance(t, DTensor) else t  # collective, one tensor
        cast = dtype if dtype is not None and full.is_floating_point() else full.dtype
        if keep:
            out[name] = full.detach().to(device="cpu", dtype=cast)
        del full
    return out


def unsharded_copy(model, world: World, dtype: torch.dtype = torch.float32):
    """A plain (unsharded) copy of `model` in `dtype` on every rank, in host memory when
    sharded (collective; for a rollout engine of its own, the CPU's torch engine)."""
    if not world.distributed:
        import copy

        return copy.deepcopy(model).to(dtype=dtype)
    weights = full_state_dict(model, world, dtype=dtype)
    from transformers import AutoModelForCausalLM

    plain = AutoModelForCausalLM.from_config(model.config, dtype=dtype)
    plain.load_state_dict(weights)
    return plain
