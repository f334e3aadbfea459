"""Run the verl job pipeline.verl wrote, in verl's environment (the workflow's verl_train rule).

    python workflow/scripts/verl_launch.py JOB_DIR --nodes N --gpus-per-node G [--dry-run]

One node: verl's trainer starts its own Ray instance. Several (a SLURM job of N nodes, the rule's
`nodes`): verl's documented pattern, a Ray head on the first node and a worker on each other one,
each a one-task srun step, then the trainer on the batch host attached to that cluster
(RAY_ADDRESS). The nodes come from `scontrol show hostnames` of the job's node list (the
executor's job step hides SLURM_JOB_NODELIST, so it is asked of squeue by SLURM_JOB_ID) or from
--hosts.

Every attempt logs into a file of its own, JOB_DIR/metrics.<k>.jsonl (verl's file logger
truncates its file when a run resumes; gspo.verl_engine.verl_metrics merges them), and the
repository root goes first on PYTHONPATH so Ray's workers import the reward function's
evaluators. JOB_DIR/done.json is written once the trainer has exited cleanly.

Standard library only: it runs before verl is imported, in whatever environment verl has.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shlex
import subprocess
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
RAY_PORT = 6379


def job_hosts() -> list[str]:
    """The SLURM job's nodes, first the batch host."""
    nodelist = os.environ.get("SLURM_JOB_NODELIST") or subprocess.run(
        ["squeue", "-h", "-j", os.environ["SLURM_JOB_ID"], "-o", "%N"],
        check=True, capture_output=True, text=True).stdout.strip()
    out = subprocess.run(["scontrol", "show", "hostnames", nodelist], check=True,
                         capture_output=True, text=True).stdout
    return out.split()


def plan(job: dict, *, hosts: list[str], gpus: int, python: str = sys.executable) -> dict:
    """The commands of one launch: `cluster` (srun steps, started in order, left running) and
    `trainer` (verl's main_ppo with the job's overrides and the cluster's size)."""
    nodes = len(hosts)
    trainer = [python, "-m", "verl.trainer.main_ppo", "--config-name", job["config_name"],
               *job["overrides"], f"trainer.nnodes={nodes}", f"trainer.n_gpus_per_node={gpus}"]
    if nodes == 1:
        return {"cluster": [], "trainer": trainer, "ray_address": None}
    head = hosts[0]

    def step(host, *ray):
        return ["srun", "--nodes=1", "--ntasks=1", f"--gres=gpu:{gpus}", "-w", host,
                "ray", "start", *ray, f"--num-gpus={gpus}", "--block"]

    cluster = [step(head, "--head", f"--port={RAY_PORT}")]
    cluster += [step(h, f"--address={head}:{RAY_PORT}") for h in hosts[1:]]
    return {"cluster": cluster, "trainer": trainer, "ray_address": f"{head}:{RAY_PORT}"}


def wait_for_nodes(address: str, nodes: int, timeout: float = 300.0) -> None:
    """Until `ray status` at `address` lists `nodes` active nodes."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = subprocess.run(["ray", "status", f"--address={address}"], capture_output=True,
                           text=True)
        if r.returncode == 0 and r.stdout.count("node_") >= nodes:
            return
        time.sleep(5)
    raise SystemExit(f"verl_launch: the Ray cluster at {address} did not reach {nodes} nodes "
                     f"in {timeout:.0f} s")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("job_dir", type=pathlib.Path)
    ap.add_argument("--gpus-per-node", type=int, required=True)
    ap.add_argument("--hosts", default="", help="comma-separated nodes (default: the SLURM "
                    "job's; none outside SLURM: this machine)")
    ap.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = ap.parse_args(argv)
    job_file = args.job_dir / "job.json"
    if not job_file.is_file():
        raise SystemExit(f"verl_launch: {job_file}: no such job (python -m pipeline.verl "
                         "writes it)")
    job = json.loads(job_file.read_text())
    hosts = (args.hosts.split(",") if args.hosts else
             job_hosts() if "SLURM_JOB_ID" in os.environ else [os.uname().nodename])
    p = plan(job, hosts=hosts, gpus=args.gpus_per_node)
    attempt = 1 + len(list(args.job_dir.glob("metrics.*.jsonl")))
    env = {**os.environ, "VERL_FILE_LOGGER_PATH": str(args.job_dir / f"metrics.{attempt}.jsonl"),
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    if p["ray_address"]:
        env["RAY_ADDRESS"] = p["ray_address"]
    if args.dry_run:
        for cmd in p["cluster"] + [p["trainer"]]:
            print(shlex.join(cmd))
        return 0
    steps = [subprocess.Popen(cmd, env=env) for cmd in p["cluster"]]
    try:
        if p["ray_address"]:
            wait_for_nodes(p["ray_address"], len(hosts))
        rc = subprocess.run(p["trainer"], env=env).returncode
    finally:
        for s in steps:
            s.terminate()
    if rc == 0:
        import verl   # noqa: PLC0415 - only now: the trainer ran in this environment

        tmp = args.job_dir / ".done.json"
        tmp.write_text(json.dumps({"verl_version": verl.__version__, "attempts": attempt,
                                   "world_size": len(hosts) * args.gpus_per_node}))
        os.replace(tmp, args.job_dir / "done.json")
    return rc


if __name__ == "__main__":
    sys.exit(main())
