"""FSDP2 under TRL (`engine: trl` on several ranks): the same sharding as the native trainer's
(gspo.infra.distributed.shard: `fully_shard` on every decoder layer, then the root), by accelerate.

- `fsdp_args` is what GRPOConfig / SFTConfig (transformers' TrainingArguments) get on several
  ranks: FSDP version 2, each decoder layer its own unit (the model's `_no_split_modules`),
  parameters resharded after the forward, and FULL_STATE_DICT checkpoints, so that each TRL
  checkpoint holds a whole `model.safetensors` the harness exports as the native stage does.
  The cost: at a checkpoint rank 0 gathers the whole model and optimizer state in host memory
  (~12 bytes a parameter: fp32 weights and AdamW's two moments).
- A CPU world: accelerate 1.15 shards with FSDP only from a GPU (or NPU, XPU, ...) state and
  keeps a CPU world of several processes on DDP whatever the FSDP settings (`AcceleratorState`).
  `shard_cpu_worlds_too` lifts that one gate, so that the CPU rehearsal and the tests run the
  FSDP2 path a GPU run takes (FSDP2 itself runs on gloo; the native trainer's tests use it), not
  DDP. Everything past the gate is accelerate's own code.
- `sharding` names what a trainer actually does (recorded in summary.json), and
  `check_sharded` stops a run on several ranks that is not FSDP2 rather than train it otherwise.
- `make_trainer` is how the RL and SFT stages build their TRL trainer: the gate lifted on
  several ranks, saves through `untied_saves`, the sharding checked, rank 0's buffers sent.
- `load`: as under the native trainer (gspo.infra.distributed.load_sharded), only rank 0 reads the
  weight files into host memory. The other ranks hold an unread `torch.empty` model (its host
  pages never touched) that accelerate's FSDP2 preparation moves to the meta device, shards and
  fills from rank 0 (`cpu_ram_efficient_loading`); the non-persistent buffers (rotary
  frequencies), in no state dict, follow from rank 0 when training begins. Every rank reading
  the fp32 model took 8 x 4 bytes a parameter of host memory per node (issue 43 #3).
"""

from __future__ import annotations

from gspo.errors import TrainingError

ENGINE = "engine: trl"
_lifted = False  # shard_cpu_worlds_too has run in this process


def fsdp_args(world_size: int) -> dict:
    """TrainingArguments' FSDP2 settings on `world_size` ranks (none on one)."""
    if world_size <= 1:
        return {}
    return dict(
        fsdp=True,
        fsdp_config={
            "version": 2,
            "reshard_after_forward": True,
            "auto_wrap_policy": "TRANSFORMER_BASED_WRAP",
            "state_dict_type": "FULL_STATE_DICT",
            "cpu_ram_efficient_loading": True,
        },
    )


def load(path, world):
    """(model, tokenizer) of the model directory `path` for TRL on `world`'s ranks (module
    doc): read whole in a world of one and on rank 0, unread elsewhere when sharded."""
    from gspo.model.models import load_model

    if world.size <= 1 or world.main:
        return load_model(path)
    model, tok = load_model(path, weights=False)  # on the meta device: nothing read
    model.to_empty(device="cpu")  # torch.empty: accelerate moves it to meta before filling
    model.tie_weights()  # to_empty made the tied head a parameter of its own
    return model, tok


def make_trainer(base, world, **kwargs):
    """(`base`, a TRL trainer class, built from kwargs for `world`'s ranks; its sharding):
    on several ranks accelerate's CPU gate is lifted first (GPU states never meet it), the
    trainer must come out FSDP2 and rank 0's buffers reach the others (`load`)."""
    if world.size > 1:
        shard_cpu_worlds_too()
        kwargs["callbacks"] = [*kwargs.get("callbacks", []), _rank0_buffers(world)]
    trainer = untied_saves(base)(**kwargs)
    return trainer, check_sharded(trainer.accelerator, world.size)


def _rank0_buffers(world):
    """A TrainerCallback that overwrites every rank's buffers with rank 0's once the model is
    prepared (sharded, filled): the non-persistent ones are in no state dict."""
    from transformers import TrainerCallback

    from gspo.infra import distributed as dist

    class Rank0Buffers(TrainerCallback):
        def on_train_begin(self, args, state, control, model=None, **kw):
            for buf in model.buffers():
                dist.broadcast(buf, world)

    return Rank0Buffers()


def untied_saves(base):
    """`base` (a transformers Trainer class) whose model files hold an output head tied to the
    input embedding once, as the native stage's do: FSDP2's gathered state dict carries it as a
    copy of its own, which save_pretrained cannot tell is tied and would write twice
    (gspo.infra.checkpoint.untied). A resume reads TRL's FSDP state file, not these."""
    from gspo.infra.checkpoint import untied

    class Trainer(base):  # type: ignore[valid-type,misc]  # a class given at run time
        def _save(self, output_dir=None, state_dict=None):
            super()._save(output_dir, untied(self.accelerator.unwrap_model(self.model), state_dict))

    return Trainer


def shard_cpu_worlds_too() -> None:
    """Let accelerate shard a CPU world with FSDP as it shards a GPU one (see the module doc).
    Idempotent; a world that has no FSDP plugin is left as accelerate made it."""
    global _lifted
    from accelerate import state
    from accelerate.utils import DistributedType

    if _lifted:
        return
    init = state.AcceleratorState.__init__

    def __init__(self, *args, **kwargs):
        init(self, *args, **kwargs)
        # each construction copies the process state (MULTI_CPU) over the shared one again
        if kwargs.get("fsdp_plugin") is not None:
            self.fsdp_plugin = kwargs["fsdp_plugin"]
        if (
            self.distributed_type == DistributedType.MULTI_CPU
            and self.__dict__.get("fsdp_plugin") is not None
        ):
            self.distributed_type = DistributedType.FSDP

    state.AcceleratorState.__init__ = __init__
    _lifted = True


def sharding(accelerator) -> str:
    """fsdp2, fsdp1, ddp or none: how `accelerator` wraps the model."""
    from accelerate.utils import DistributedType

    kind = accelerator.distributed_type
    if kind == DistributedType.FSDP:
        return "fsdp2" if accelerator.is_fsdp2 else "fsdp1"
    return "none" if kind == DistributedType.NO else "ddp"


def check_sharded(accelerator, world_size: int) -> str:
    """The trainer's sharding; on several ranks anything but FSDP2 is a TrainingError."""
    got = sharding(accelerator)
    if world_size > 1 and got != "fsdp2":
        raise TrainingError(
            f"{ENGINE}: accelerate prepared {got}, not FSDP2, on {world_size} "
            f"ranks ({accelerator.distributed_type}); is `fsdp` in the "
            "trainer's arguments (gspo.engines.trl.fsdp.fsdp_args)?"
        )
    return got
