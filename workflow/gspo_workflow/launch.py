"""How a training or evaluation job (rules sft, rl, eval_sft and eval_checkpoint) starts, from
the resources its rule is given.

    no GPU or one                   python -m
    G GPUs on one node              torchrun --standalone --nproc-per-node=G -m
    no GPU, `ranks: R` (R > 1)      torchrun --standalone --nproc-per-node=R -m  (CPU, gloo: the
                                    rehearsal of a sharded run, profiles/rehearsal)
    N > 1 nodes of G GPUs (SLURM)   srun ... torchrun --nnodes=N --nproc-per-node=G
                                        --rdzv-backend=c10d --rdzv-endpoint=$(hostname):29500
                                        --rdzv-id=$SLURM_JOB_ID -m

GPUs per node come from `gres` (SLURM's --gres is per node: gpu[:type]:G), else from `gpu`
(snakemake-executor-plugin-slurm turns `gpu` into --gpus, a count for the whole job, so it only
says "per node" on one node). Several nodes need the plugin's MPI path: `mpi` set, `tasks` = N,
so the job's command runs in the batch script on the first node, not inside a one-task `srun`
step, and can start its own step: one task per node, each a torchrun with G ranks, meeting at a
c10d rendezvous hosted on that first node. `$(hostname)` names it because the jobstep plugin (0.6)
strips SLURM_JOB_NODELIST and SLURM_NNODES from the job's environment (it keeps SLURM_JOB_ID),
and the rule's shell runs on the batch host, the allocation's first node; torchrun hosts the
store where the endpoint is its own hostname. The values are inserted into the rule's shell
command verbatim, so `$(hostname)` and `$SLURM_JOB_ID` expand there at run time.
"""

from __future__ import annotations

import shlex

RDZV_PORT = 29500


def gpus_per_node(resources) -> int:
    """The GPU count of `gres`'s gpu entry (gpu, gpu:G or gpu:TYPE:G), else `gpu`, else 0."""
    for item in str(resources.get("gres") or "").split(","):
        parts = item.strip().split(":")
        if parts[0] == "gpu":
            return int(parts[-1]) if len(parts) > 1 and parts[-1].isdigit() else 1
    return int(resources.get("gpu", 0) or 0)


def launcher(resources) -> str:
    """The command prefix that runs `<prefix> pipeline.<stage> ...` on what the rule is given."""
    nodes = int(resources.get("nodes", 1) or 1)
    gpus = gpus_per_node(resources)
    if nodes <= 1:
        procs = gpus or int(resources.get("ranks", 0) or 0)
        if procs <= 1:
            return "python -m"
        return f"torchrun --standalone --nproc-per-node={procs} -m"
    problems = []
    if not resources.get("gres"):
        problems.append("gres (GPUs per node, e.g. gpu:h100:8; `gpu` is a count for the whole job)")
    if int(resources.get("tasks", 0) or 0) != nodes:
        problems.append(f"tasks: {nodes} (one torchrun per node)")
    if not resources.get("mpi"):
        problems.append("mpi: srun (the job's command starts its own srun step)")
    if problems:
        raise ValueError(f"resources: nodes={nodes} also needs " + "; ".join(problems))
    srun = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--gres={resources.get('gres')}",
        "--kill-on-bad-exit=1",
    ]
    if resources.get("cpus_per_task"):
        # the step's tasks get one CPU each unless told (srun no longer inherits sbatch's count)
        srun.append(f"--cpus-per-task={int(resources.get('cpus_per_task'))}")
    torchrun = [
        "torchrun",
        f"--nnodes={nodes}",
        f"--nproc-per-node={gpus}",
        "--rdzv-backend=c10d",
        f"--rdzv-endpoint=$(hostname):{RDZV_PORT}",
        "--rdzv-id=$SLURM_JOB_ID",
        "-m",
    ]
    return " ".join([shlex.join(srun)] + torchrun)
