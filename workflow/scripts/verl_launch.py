"""Run the verl job pipeline.verl wrote, in verl's environment (the workflow's verl_train rule).

    python workflow/scripts/verl_launch.py JOB_DIR --gpus-per-node G [--cpus-per-node C]
        [--container IMAGE] [--hosts H1[=IP],H2[=IP],...] [--dry-run]

First a check, on every node: verl_preflight.py imports everything the job will call and fails
in one line otherwise. One node: verl's trainer starts its own Ray instance. Several (a SLURM job
of N nodes, the rule's `nodes`): verl's Ray-on-SLURM recipe, a Ray head on the first node and a
worker on each other one, each a one-task srun step with the node's CPUs (--cpus-per-task, Ray's
--num-cpus: some SLURM versions bind a step to one core otherwise), its GPUs and its address
(--node-ip-address: the host name's address, or the one --hosts gives, so a multi-NIC node
does not pick another interface), then the trainer in a step on the first node attached to that
cluster (RAY_ADDRESS). The nodes come from `scontrol show hostnames` of the job's node list (the
executor's job step hides SLURM_JOB_NODELIST, so it is asked of squeue by SLURM_JOB_ID) or from
--hosts.

This script runs on the host, where srun, squeue and scontrol are. With --container (the rule
passes the workflow's `verl_container` under --software-deployment-method apptainer) every
command verl runs, the check, `ray start` and the trainer, runs inside the image, each inside
its srun step (`apptainer exec --nv`, the repository, the job and the model bound); without it
they run in this environment (workflow/envs/verl.yaml under --software-deployment-method conda).

Every attempt logs into a file of its own, JOB_DIR/metrics.<k>.jsonl (verl's file logger
truncates its file when a run resumes; gspo.engines.verl.collect.verl_metrics merges them), and the
repository root goes first on PYTHONPATH so Ray's workers import the reward function's
evaluators. JOB_DIR/done.json is written once the trainer has exited cleanly.

Standard library only: it runs before verl is imported, on the host or in verl's environment.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import socket
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
RAY_PORT = 6379


def job_hosts() -> list[str]:
    """The SLURM job's nodes, first the batch host."""
    nodelist = (
        os.environ.get("SLURM_JOB_NODELIST")
        or subprocess.run(
            ["squeue", "-h", "-j", os.environ["SLURM_JOB_ID"], "-o", "%N"],
            check=True,
            capture_output=True,
            text=True,
        ).stdout.strip()
    )
    out = subprocess.run(
        ["scontrol", "show", "hostnames", nodelist], check=True, capture_output=True, text=True
    ).stdout
    return out.split()


def node_ip(host: str, strict: bool = True) -> str:
    """`host`'s address: the one given as HOST=IP, else its name resolved (in a dry run an
    unresolvable name is printed as it is)."""
    name, _, ip = host.partition("=")
    if ip:
        return ip
    try:
        return socket.gethostbyname(name)
    except OSError as e:
        if not strict:
            return name
        raise SystemExit(
            f"verl_launch: {name}: no address ({e}); give it as --hosts {name}=IP"
        ) from e


def container_cmd(image: str, job: dict, job_dir: pathlib.Path) -> list[str]:
    """`apptainer exec` of `image` with the GPUs and the paths the job reads and writes bound:
    the repository (the reward's code), the job folder and the model's folder."""
    model = next(
        (
            o.split("=", 1)[1]
            for o in job["overrides"]
            if o.startswith("actor_rollout_ref.model.path=")
        ),
        None,
    )
    binds = dict.fromkeys(str(p) for p in (ROOT, job_dir.resolve(), model) if p)
    return ["apptainer", "exec", "--nv", "--bind", ",".join(binds), image]


def plan(
    job: dict,
    *,
    hosts: list[str],
    gpus: int,
    cpus: int,
    container: list[str] = (),
    python: str = sys.executable,
    strict: bool = True,
) -> dict:
    """The commands of one launch: `check` (verl_preflight.py on every node), `cluster` (srun
    steps, started in order, left running) and `trainer` (verl's main_ppo with the job's
    overrides and the cluster's size), each inside `container` (container_cmd) when given."""
    nodes, inside = len(hosts), list(container)
    python = "python3" if inside else python
    names = [h.partition("=")[0] for h in hosts]
    trainer = inside + [
        python,
        "-m",
        "verl.trainer.main_ppo",
        "--config-name",
        job["config_name"],
        *job["overrides"],
        f"trainer.nnodes={nodes}",
        f"trainer.n_gpus_per_node={gpus}",
    ]
    check = inside + [
        python,
        str(ROOT / "workflow" / "scripts" / "verl_preflight.py"),
        "--config-name",
        job["config_name"],
        "--gpus",
        str(gpus),
    ]
    if nodes == 1:
        return {"check": check, "cluster": [], "trainer": trainer, "ray_address": None}
    head = node_ip(hosts[0], strict)
    check = [
        "srun",
        f"--nodes={nodes}",
        f"--ntasks={nodes}",
        "--ntasks-per-node=1",
        f"--cpus-per-task={cpus}",
        f"--gres=gpu:{gpus}",
        *check,
    ]

    def step(i, *ray):
        return [
            "srun",
            "--nodes=1",
            "--ntasks=1",
            f"--cpus-per-task={cpus}",
            f"--gres=gpu:{gpus}",
            "-w",
            names[i],
            *inside,
            "ray",
            "start",
            *ray,
            f"--node-ip-address={node_ip(hosts[i], strict)}",
            f"--num-cpus={cpus}",
            f"--num-gpus={gpus}",
            "--block",
        ]

    cluster = [step(0, "--head", f"--port={RAY_PORT}")]
    cluster += [step(i, f"--address={head}:{RAY_PORT}") for i in range(1, nodes)]
    trainer = ["srun", "--overlap", "--nodes=1", "--ntasks=1", "-w", names[0], *trainer]
    return {
        "check": check,
        "cluster": cluster,
        "trainer": trainer,
        "ray_address": f"{head}:{RAY_PORT}",
    }


def wait_for_nodes(address: str, nodes: int, inside: list[str], timeout: float = 300.0) -> None:
    """Until `ray status` at `address` (inside the image, if any) lists `nodes` active nodes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(
            [*inside, "ray", "status", f"--address={address}"], capture_output=True, text=True
        )
        if r.returncode == 0 and r.stdout.count("node_") >= nodes:
            return
        time.sleep(5)
    raise SystemExit(
        f"verl_launch: the Ray cluster at {address} did not reach {nodes} nodes in {timeout:.0f} s"
    )


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("job_dir", type=pathlib.Path)
    ap.add_argument("--gpus-per-node", type=int, required=True)
    ap.add_argument(
        "--cpus-per-node",
        type=int,
        default=int(os.environ.get("SLURM_CPUS_PER_TASK") or os.cpu_count() or 1),
        help="CPUs of each node's step and Ray's --num-cpus (default: SLURM_CPUS_PER_TASK)",
    )
    ap.add_argument(
        "--container",
        default="",
        help="run verl's commands inside this image (apptainer), each inside its srun step",
    )
    ap.add_argument(
        "--hosts",
        default="",
        help="comma-separated nodes, each HOST or HOST=IP "
        "(default: the SLURM job's; none outside SLURM: this machine)",
    )
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    job_file = args.job_dir / "job.json"
    if not job_file.is_file():
        raise SystemExit(
            f"verl_launch: {job_file}: no such job (python -m pipeline.verl writes it)"
        )
    job = json.loads(job_file.read_text())
    hosts = (
        args.hosts.split(",")
        if args.hosts
        else job_hosts()
        if "SLURM_JOB_ID" in os.environ
        else [os.uname().nodename]
    )
    inside = container_cmd(args.container, job, args.job_dir) if args.container else []
    p = plan(
        job,
        hosts=hosts,
        gpus=args.gpus_per_node,
        cpus=args.cpus_per_node,
        container=inside,
        strict=not args.dry_run,
    )
    attempt = 1 + len(list(args.job_dir.glob("metrics.*.jsonl")))
    # inside an image the host's own PYTHONPATH would point at the host's packages
    path = [str(ROOT)] + ([] if inside else [os.environ.get("PYTHONPATH", "")])
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(path),
        "VERL_FILE_LOGGER_PATH": str(args.job_dir.resolve() / f"metrics.{attempt}.jsonl"),
    }
    if p["ray_address"]:
        env["RAY_ADDRESS"] = p["ray_address"]
    if args.dry_run:
        for cmd in [p["check"], *p["cluster"], p["trainer"]]:
            print(shlex.join(cmd))
        return 0
    if subprocess.run(p["check"], env=env).returncode:
        return 1  # verl_preflight.py said what is missing, in one line
    steps = [subprocess.Popen(cmd, env=env) for cmd in p["cluster"]]
    try:
        if p["ray_address"]:
            wait_for_nodes(p["ray_address"], len(hosts), inside)
        rc = subprocess.run(p["trainer"], env=env).returncode
    finally:
        for s in steps:
            s.terminate()
    if rc == 0:
        version = subprocess.run(
            inside
            + [
                "python3" if inside else sys.executable,
                "-c",
                "import verl; print(verl.__version__)",
            ],
            env=env,
            capture_output=True,
            text=True,
        ).stdout.strip()
        tmp = args.job_dir / ".done.json"
        tmp.write_text(
            json.dumps(
                {
                    "verl_version": version,
                    "attempts": attempt,
                    "world_size": len(hosts) * args.gpus_per_node,
                }
            )
        )
        os.replace(tmp, args.job_dir / "done.json")
    return rc


if __name__ == "__main__":
    sys.exit(main())
