"""One RL update on a fixed batch, run by tests/test_distributed.py under torchrun.

    torchrun --standalone --nproc-per-node N tests/dist_update.py MODEL_DIR DATA OUT_DIR

For every algorithm x loss aggregation: a Trainer over the world torchrun started (FSDP2 on
gloo when N > 1), the same global batch of 8 sequences in 2 groups, each rank given whole groups
(its contiguous share), one `Trainer.update` (2 minibatches, micro-batches of 1 sequence), then
rank 0 saves the full parameters and the update's metrics to OUT_DIR/<algorithm>-<agg>.pt; then
the sync's gather (sync.pt), and the greedy decoding of the sharded model and which rank opened
which weight file (load.pt).
"""

import sys

import torch

from gspo.config.train import DataSource, RLConfig
from gspo.core.objectives import AGGS
from gspo.infra import distributed as dist
from gspo.native.data import pad_batch
from gspo.native.trainer import Trainer


def fixed_batch(vocab: int, n: int = 8):
    g = torch.Generator().manual_seed(1234)
    prompts = [
        torch.randint(
            4, vocab, (int(torch.randint(3, 7, (1,), generator=g)),), generator=g
        ).tolist()
        for _ in range(n)
    ]
    responses = [
        torch.randint(
            4, vocab, (int(torch.randint(2, 9, (1,), generator=g)),), generator=g
        ).tolist()
        for _ in range(n)
    ]
    batch = pad_batch(prompts, responses, 0)
    adv = torch.randn(n, generator=g)
    noise = 0.05 * torch.randn(batch["target_mask"].shape, generator=g)
    return batch, adv, noise


def spy_on_weight_reads() -> list[str]:
    """The weight files transformers opens in this process from now on (it reads safetensors
    through safe_open in these two modules; the real function still runs)."""
    import transformers.modeling_layers as layers
    import transformers.modeling_utils as utils

    opened: list[str] = []
    for mod in (utils, layers):
        real = mod.safe_open

        def spy(path, *args, _real=real, **kw):
            opened.append(str(path))
            return _real(path, *args, **kw)

        mod.safe_open = spy
    return opened


def one_writer_per_node(policy, world, out) -> list[dict]:
    """The vLLM sync's file, once per node (gspo.infra.distributed.node_shared_folder): the gather
    kept by the node's writer alone, the file it writes read by every rank, then removed; a
    writer that fails raises on every rank. What each rank saw, gathered."""
    import pathlib
    import tempfile

    from safetensors.torch import load_file, save_file

    kept = dist.full_state_dict(policy, world, dtype=torch.bfloat16, keep=world.local_rank == 0)
    root = pathlib.Path(out) / "shm"
    root.mkdir(exist_ok=True)
    seen = {}

    def write():
        d = pathlib.Path(tempfile.mkdtemp(dir=root))
        save_file(kept, str(d / "model.safetensors"))
        return d

    def read(path):
        seen.update(
            path=path,
            folders=len(list(root.iterdir())),
            tensors=len(load_file(f"{path}/model.safetensors")),
        )

    dist.node_shared_folder(world, write, read)
    dist.barrier(world)
    after = len(list(root.iterdir()))

    def full_disk():
        raise OSError("[Errno 28] No space left on device")

    try:
        dist.node_shared_folder(world, full_disk, read)
        failed = None
    except RuntimeError as e:
        failed = str(e)
    return dist.gather_objects(
        [{"kept": len(kept), "seen": seen, "after": after, "failed": failed}], world
    )


def main(model_dir, data, out):
    world = dist.init("cpu")
    torch.manual_seed(0)
    opened = spy_on_weight_reads()
    for algorithm in ("grpo", "gspo", "gspo_token"):
        for agg in AGGS:
            cfg = RLConfig(
                algorithm=algorithm,
                agg=agg,
                model=model_dir,
                out_dir=f"{out}/run-{algorithm}-{agg}-rank{world.rank}",
                train_data=[DataSource(data)],
                prompts_per_step=2,
                group_size=4,
                minibatches=2,
                micro_batch_size=1,
                lr=1e-2,
                threads=1,
            )
            tr = Trainer(cfg, lambda recs, texts: [0.0] * len(texts), world)
            batch, adv, noise = fixed_batch(len(tr.tok))
            share = 8 // world.size
            rows = torch.arange(world.rank * share, (world.rank + 1) * share)
            local = {k: v[rows] for k, v in batch.items()}
            # old log-probs a little off the policy's own, so ratios differ from 1 and clip
            old = tr.old_logprobs(local)[0] + noise[rows] * local["target_mask"]
            upd, skipped, _ = tr.update(local, old, adv[rows], step=0, rows=rows)
            params = {
                k: v.detach().clone() for k, v in dist.full_state_dict(tr.policy, world).items()
            }
            if world.main:
                torch.save(
                    {"params": params, "metrics": upd, "skipped": skipped},
                    f"{out}/{algorithm}-{agg}.pt",
                )
            if world.distributed and (algorithm, agg) == ("grpo", AGGS[0]):
                # the engine sync's gather: one tensor at a time, to host memory, cast
                half = dist.full_state_dict(tr.policy, world, dtype=torch.bfloat16)
                shared = one_writer_per_node(tr.policy, world, out)
                if world.main:
                    torch.save({"half": half, "params": params, "shared": shared}, f"{out}/sync.pt")
    # the KL penalty's reference model, sharded as the policy is
    cfg = RLConfig(
        algorithm="gspo",
        model=model_dir,
        out_dir=f"{out}/run-kl-rank{world.rank}",
        train_data=[DataSource(data)],
        prompts_per_step=2,
        group_size=4,
        minibatches=2,
        micro_batch_size=1,
        lr=1e-2,
        threads=1,
        kl_coef=0.5,
    )
    tr = Trainer(cfg, lambda recs, texts: [0.0] * len(texts), world)
    local = {k: v[rows] for k, v in batch.items()}
    old = tr.old_logprobs(local)[0] + noise[rows] * local["target_mask"]
    upd, skipped, _ = tr.update(local, old, adv[rows], step=0, rows=rows)
    params = {k: v.detach().clone() for k, v in dist.full_state_dict(tr.policy, world).items()}
    if world.main:
        torch.save({"params": params, "metrics": upd, "skipped": skipped}, f"{out}/kl.pt")

    # the greedy check on the sharded model: each rank decodes its own prompts (one rank none)
    # and the ranks step together; the tokens must be one process's
    from gspo.native.sft import greedy_decode

    prompts = fixed_batch(len(tr.tok))[0]["input_ids"][:5, :4].tolist()
    greedy = {}
    for n_prompts in (5, 1):
        share = -(-n_prompts // world.size)
        mine = prompts[:n_prompts][world.rank * share : (world.rank + 1) * share]
        outs = greedy_decode(tr.policy, mine, 12, [tr.tok.eos_token_id], world)
        greedy[n_prompts] = dist.gather_objects(outs, world)
    reads = dist.gather_objects([opened], world)
    if world.main:
        torch.save({"greedy": greedy, "reads": reads}, f"{out}/load.pt")
    dist.close(world)


if __name__ == "__main__":
    main(*sys.argv[1:4])
