"""The workflow's jobs: `python -m gspo_workflow.steps <stage> ...`, one subcommand per rule.

Each job reads its stage config from `results/<experiment>/config/` (written by the Snakefile
through gspo_workflow.plan), runs the stage through the project's own code and records it in
MLflow (MLFLOW_TRACKING_URI / MLFLOW_EXPERIMENT_NAME / GSPO_MLFLOW_TAGS, exported by the
Snakefile).

MLflow layout (one experiment per config, named by its `experiment` key):

    run "sft"              stage=sft   params: resolved SFTConfig; metrics by step: loss, lr,
                                       grad_norm, compute_flops, tokens_trained, greedy_accuracy
      eval-sft-seed0-b0-<bench>   stage=eval (nested), artifacts summary.json + results.jsonl
    run "<variant>-seed<s>" stage=rl   params: resolved RLConfig; metrics by step: reward_mean,
                                       clip_frac_tokens(_offpolicy), compute_flops (cumulative
                                       FLOPs, 0 at step 0), entropy, timing, ...;
                                       eval/<bench>/pass_at_1 (+ _ci_low/_ci_high, pass_at_<k>,
                                       cf rating) at each checkpoint's step (0 = the SFT model);
                                       eval_by_gflops/<bench>/pass_at_1 at step = cumulative RL
                                       training GFLOPs
      eval-<variant>-seed<s>-b<budget>-<bench>  stage=eval (nested), one per checkpoint x
                                       benchmark
    run "aggregate"        stage=aggregate, artifacts scores.json / scores.csv / workflow.yaml
    run "report"           stage=report, artifacts report/ (HTML, PNG, CSV)

Every stage run is tagged algorithm, seed, config_hash, git_commit, data_hash.<file>,
version.<package>, command, experiment, workflow_command; RL and eval runs also variant (the
compared run's name: the algorithm itself, or a configured variant such as gspo-bf16-rollout) and
baseline (the variant it is measured against, "" for none). In the UI, select the RL runs of the
experiment and add a line chart of eval/<bench>/pass_at_1: x-axis "Step" gives score against
RL step; x-axis "Metric: compute_flops" (logged at the same steps) gives score against compute;
or chart eval_by_gflops/<bench>/pass_at_1, whose step axis is GFLOPs already.
"""

from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import sys
import time

ROOT = pathlib.Path(__file__).resolve().parents[2]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402


def _threads(n: int) -> None:
    if n:
        os.environ["OMP_NUM_THREADS"] = str(n)
        import torch

        torch.set_num_threads(n)


def _read_yaml(path) -> dict:
    return yaml.safe_load(pathlib.Path(path).read_text()) or {}


def _sha_file(path) -> str:
    from gspo.io import file_sha256

    return file_sha256(path)[:16]


# -- data / sft -------------------------------------------------------------------------------------

def cmd_data(args):
    from gspo.config import DataGenConfig, load
    from pipeline.data import generate

    cfg = load(DataGenConfig, args.config)
    for name, path in generate(cfg).items():
        print(f"{name}: {path}")
    _init_tracking()


def _init_tracking():
    """Create the MLflow experiment once, before jobs run side by side."""
    from gspo import tracking

    uri = tracking.tracking_uri()
    if uri:
        name = os.environ.get("MLFLOW_EXPERIMENT_NAME") or tracking.DEFAULT_EXPERIMENT
        if uri.startswith("sqlite:///"):
            pathlib.Path(uri[len("sqlite:///"):]).parent.mkdir(parents=True, exist_ok=True)
        print(f"mlflow: experiment {name!r} = {tracking.experiment_id(tracking.client(uri), name)}"
              f" in {uri}")


def cmd_sft(args):
    from gspo.config import SFTConfig, load
    from gspo.sft import run_sft

    cfg = load(SFTConfig, args.config, [f"threads={args.threads}"] if args.threads else [])
    _threads(args.threads)
    _supersede(pathlib.Path(cfg.out_dir))
    os.environ["GSPO_MLFLOW_RUN_NAME"] = "sft"
    print(f"sft model: {run_sft(cfg)}")


def _supersede(out: pathlib.Path) -> None:
    """A stage about to start over: soft-delete the MLflow run its previous attempt left (the
    experiment then shows one live run per stage, algorithm and seed) and forget it."""
    from gspo import tracking

    run_file = out / tracking.RUN_FILE
    if not run_file.is_file():
        return
    prev = json.loads(run_file.read_text())
    uri = tracking.tracking_uri()
    if uri and prev.get("tracking_uri") == uri:
        try:
            tracking.retry(tracking.client(uri).delete_run, prev["run_id"])
            print(f"mlflow: superseded run {prev['run_id']} deleted")
        except Exception as e:  # noqa: BLE001 - already gone
            print(f"mlflow: previous run {prev['run_id']} not deleted ({e})")
    run_file.unlink()


# -- rl ---------------------------------------------------------------------------------------------

RL_STATE = ("checkpoints", "metrics.jsonl", "model", "summary.json", "run_info.json")


def cmd_rl(args):
    """Train one (algorithm, seed). Its checkpoints are not outputs of the rule, so an
    interrupted run keeps them and the trainer resumes from the last one; they are wiped only
    when the run's lineage (its config file and the SFT model it starts from) changed."""
    from gspo.config import RLConfig, load
    from gspo.io import write_json
    from gspo.tracking import RUN_FILE, read_metrics
    from gspo.trainer import run_rl

    cfg = load(RLConfig, args.config, [f"threads={args.threads}"] if args.threads else [])
    _threads(args.threads)
    out = pathlib.Path(cfg.out_dir)
    lineage = {"config": _sha_file(args.config), "sft": _sha_file(args.sft_summary)}
    lfile = out / "lineage.json"
    prev = json.loads(lfile.read_text()) if lfile.is_file() else None
    has_state = any((out / n).exists() for n in RL_STATE)
    if has_state and prev != lineage:
        print(f"rl: {out} holds a run of another config or SFT model: starting over")
        _supersede(out)
        for n in RL_STATE:
            p = out / n
            shutil.rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)
    elif has_state:
        print(f"rl: {out}: same lineage, resuming from the latest checkpoint if any")
    write_json(lfile, lineage)
    variant = args.variant or cfg.algorithm
    os.environ["GSPO_MLFLOW_RUN_NAME"] = f"{variant}-seed{cfg.seed}"
    _add_tags(variant=variant, baseline=args.baseline)
    t0 = time.time()
    run_rl(cfg)
    run = json.loads((out / RUN_FILE).read_text()) if (out / RUN_FILE).is_file() else {}
    rows = read_metrics(out / "metrics.jsonl")
    write_json(args.done, {"algorithm": cfg.algorithm, "variant": variant, "seed": cfg.seed,
                           "steps": cfg.steps,
                           "mlflow_run_id": run.get("run_id"), "seconds": time.time() - t0,
                           "compute_flops": rows[-1]["compute_flops"] if rows else 0.0,
                           "final_reward_mean": rows[-1]["reward_mean"] if rows else None})


# -- evaluation -------------------------------------------------------------------------------------

def _evaluate(evs: list[dict], model: str, out_root: pathlib.Path, threads: int) -> dict:
    """Evaluate `model` on each benchmark config of `evs` in this one process (the checkpoint
    and the engine are loaded once), writing <out_root>/<bench>/results.jsonl and summary.json
    in pipeline.evaluate's format. Returns {bench: summary}."""
    from gspo.io import atomic_write_text, write_json
    from pipeline import evaluate

    _threads(threads)
    engines = {}
    out = {}
    for ev in evs:
        bench = ev["benchmark"]
        t0 = time.time()
        key = (ev["engine"], ev["device"])
        if key not in engines:
            engines[key] = evaluate._make_engine(ev["engine"], model, ev["device"])
        engine, tokenizer = engines[key]
        records = evaluate.load_records(pathlib.Path(ev["data"]).parent, bench,
                                        ev.get("limit") or None)
        results = evaluate.evaluate_records(
            engine, tokenizer, records, samples=ev["samples"], temperature=ev["temperature"],
            top_p=ev["top_p"], max_new_tokens=ev["max_new_tokens"], seed=ev["seed"],
            batch_prompts=ev["batch_prompts"], workers=ev["workers"],
            keep_completions=ev.get("keep_completions", False))
        summary = {
            "benchmarks": evaluate.summarize(results, iters=ev["bootstrap_iters"], seed=ev["seed"]),
            "settings": {"model": str(model), "engine": ev["engine"], "samples": ev["samples"],
                         "temperature": ev["temperature"], "top_p": ev["top_p"],
                         "max_new_tokens": ev["max_new_tokens"], "seed": ev["seed"],
                         "limit": ev.get("limit") or None, "data_dir": str(pathlib.Path(ev["data"]).parent),
                         "batch_prompts": ev["batch_prompts"]},
            "seconds": round(time.time() - t0, 3),
        }
        d = out_root / bench
        atomic_write_text(d / "results.jsonl",
                          "".join(json.dumps(r, sort_keys=True) + "\n" for r in results))
        write_json(d / "summary.json", summary)
        s = summary["benchmarks"][bench]
        print(f"{bench}: avg@{s['samples_per_problem']}={s['avg@n']:.4f} pass@{s['k']}="
              f"{s['pass@k']:.4f} ({s['n_problems']} problems, {s['n_samples']} samples, "
              f"{summary['seconds']:.1f} s)", flush=True)
        out[bench] = summary
    return out


def eval_metrics(bench: str, summary: dict, prefix: str) -> dict[str, float]:
    """Flat MLflow metrics of one benchmark's summary: <prefix>pass_at_1 (= avg@n), its CI,
    pass_at_<k> for each k, cf's rating."""
    s = summary["benchmarks"][bench]
    m = {f"{prefix}pass_at_1": s["avg@n"], f"{prefix}pass_at_1_ci_low": s["avg@n_ci"][0],
         f"{prefix}pass_at_1_ci_high": s["avg@n_ci"][1], f"{prefix}n_problems": s["n_problems"]}
    for k, v in s.items():
        if k.startswith("pass@") and not k.endswith("_ci") and k not in ("pass@k", "pass@1"):
            m[f"{prefix}pass_at_{k[5:]}"] = v
    rating = s.get("rating")
    if isinstance(rating, dict) and rating.get("rating") is not None:
        m[f"{prefix}rating"] = rating["rating"]
    elif isinstance(rating, (int, float)):
        m[f"{prefix}rating"] = rating
    return m


def _compute_at(rl_dir: pathlib.Path, step: int) -> float:
    from gspo.tracking import read_metrics

    if step == 0:
        return 0.0
    for r in read_metrics(rl_dir / "metrics.jsonl"):
        if r["step"] == step:
            return float(r["compute_flops"])
    raise SystemExit(f"error: {rl_dir}/metrics.jsonl has no step {step}")


def _run_id(folder: pathlib.Path) -> str | None:
    from gspo.tracking import RUN_FILE

    p = folder / RUN_FILE
    return json.loads(p.read_text())["run_id"] if p.is_file() else None


def _add_tags(**tags) -> None:
    """Extra MLflow tags for the runs this process creates (gspo.tracking reads them)."""
    extra = json.loads(os.environ.get("GSPO_MLFLOW_TAGS") or "{}")
    extra.update(tags)
    os.environ["GSPO_MLFLOW_TAGS"] = json.dumps(extra)


def log_eval_run(cl, exp: str, *, bench, summary, src: pathlib.Path, ev: dict, algorithm, seed,
                 budget, step, compute, parent: str | None, model: str, variant=None) -> str:
    """One MLflow run (stage=eval) for one evaluated checkpoint and benchmark, nested under the
    run that trained the checkpoint, with summary.json and results.jsonl as artifacts."""
    from gspo import tracking

    tags = {"stage": "eval", "algorithm": str(algorithm), "variant": str(variant or algorithm),
            "seed": str(seed),
            "budget": str(budget), "benchmark": bench, "step": str(step), "model": model,
            "eval_config_sha": _sha_text(ev)}
    if parent:
        tags["mlflow.parentRunId"] = parent
        tags["trained_by_run"] = parent
    extra = os.environ.get("GSPO_MLFLOW_TAGS")
    if extra:
        tags.update({k: str(v) for k, v in json.loads(extra).items()})
    run = tracking.retry(cl.create_run, exp, tags=tags,
                         run_name=f"eval-{variant or algorithm}-seed{seed}-b{budget}-{bench}")
    rid = run.info.run_id
    tracking.log_params(cl, rid, tracking.flatten(ev))
    tracking.log_metrics(cl, rid, [(step, {**eval_metrics(bench, summary, ""),
                                           "compute_flops": compute, "step": step})])
    for name in ("summary.json", "results.jsonl"):
        if (src / name).is_file():
            tracking.retry(cl.log_artifact, rid, str(src / name))
    tracking.retry(cl.set_terminated, rid, "FINISHED")
    return rid


def _delete_eval_runs(cl, exp: str, variant, seed) -> None:
    """Forget the previous eval runs of (variant, seed): a re-run records them afresh."""
    from gspo import tracking

    flt = f"tags.stage = 'eval' and tags.variant = '{variant}' and tags.seed = '{seed}'"
    for old in tracking.retry(cl.search_runs, [exp], flt, max_results=1000):
        tracking.retry(cl.delete_run, old.info.run_id)


def log_into_training_run(cl, run_id: str, bench: str, summary: dict, step: int, compute: float,
                          *, with_compute: bool = False):
    """The checkpoint's scores as metrics of the RL run itself, at the checkpoint's step
    (eval/<bench>/pass_at_1, its CI, pass_at_<k>), and keyed by compute
    (eval_by_gflops/<bench>/pass_at_1 at step = cumulative RL training GFLOPs), replacing
    values logged earlier at those steps."""
    from gspo import tracking

    m = eval_metrics(bench, summary, f"eval/{bench}/")
    if with_compute:
        m["compute_flops"] = compute
    tracking.replace_metrics(cl, run_id, step, m)
    tracking.replace_metrics(cl, run_id, int(round(compute / 1e9)),
                             {f"eval_by_gflops/{bench}/pass_at_1": m[f"eval/{bench}/pass_at_1"]})


def _sha_text(obj) -> str:
    import hashlib

    return hashlib.sha256(json.dumps(obj, sort_keys=True).encode()).hexdigest()[:16]


def cmd_eval(args):
    """Evaluate the checkpoint of (variant, seed) at `--step` on every benchmark config;
    writes <out-root>/<bench>/{results.jsonl, summary.json, checkpoint.json}."""
    from gspo.io import write_json

    evs = [_read_yaml(c) for c in args.configs]
    root = pathlib.Path(args.out_root)
    rl_dir = pathlib.Path(args.rl_dir)
    model = str(rl_dir / "checkpoints" / f"step_{args.step:06d}")
    if not (pathlib.Path(model) / "config.json").is_file():
        raise SystemExit(f"error: {model}: no checkpoint at step {args.step} (ckpt_every must "
                         "divide every budget's step; the workflow sets it so)")
    _evaluate(evs, model, root, args.threads)
    compute = _compute_at(rl_dir, args.step)
    algorithm = json.loads((rl_dir / "done.json").read_text())["algorithm"]
    for ev in evs:
        write_json(root / ev["benchmark"] / "checkpoint.json",
                   {"algorithm": algorithm, "variant": args.variant, "seed": args.seed,
                    "budget": args.budget,
                    "step": args.step, "compute_flops": compute, "model": model,
                    "benchmark": ev["benchmark"]})


def cmd_eval_sft(args):
    """Evaluate the SFT model (every run's 0 % budget) on every benchmark config."""
    _evaluate([_read_yaml(c) for c in args.configs], args.model, pathlib.Path(args.out_root),
              args.threads)


def _tracking():
    from gspo import tracking

    uri = tracking.tracking_uri()
    if not uri:
        return None, None
    cl = tracking.client(uri)
    exp = tracking.experiment_id(cl, os.environ.get("MLFLOW_EXPERIMENT_NAME") or
                                 tracking.DEFAULT_EXPERIMENT)
    return cl, exp


def _configs_by_bench(paths) -> dict[str, dict]:
    out = {}
    for p in paths:
        ev = _read_yaml(p)
        out[ev["benchmark"]] = ev
    return out


def cmd_track_sft(args):
    """Record the SFT model's evaluations in MLflow: eval runs nested under the SFT run."""
    from gspo.io import write_json

    cl, exp = _tracking()
    evs = _configs_by_bench(args.configs)
    record = {"eval_runs": {}}
    if cl is not None:
        _delete_eval_runs(cl, exp, "sft", 0)
        parent = _run_id(pathlib.Path(args.sft_dir))
        record["sft_run_id"] = parent
        for path in args.summaries:
            src = pathlib.Path(path).parent
            summary = json.loads(pathlib.Path(path).read_text())
            bench = next(iter(summary["benchmarks"]))
            record["eval_runs"][bench] = log_eval_run(
                cl, exp, bench=bench, summary=summary, src=src, ev=evs[bench], algorithm="sft",
                seed=0, budget=0, step=0, compute=0.0, parent=parent,
                model=summary["settings"]["model"])
    write_json(args.out, record)


def cmd_track_run(args):
    """Record one RL run's evaluations in MLflow: an eval run per (budget, benchmark) nested
    under the RL run, and the scores as the RL run's own metrics at each checkpoint's step
    (step 0, with compute_flops 0, is the SFT model)."""
    from gspo.io import write_json

    cl, exp = _tracking()
    evs = _configs_by_bench(args.configs)
    rid = _run_id(pathlib.Path(args.rl_dir))
    algorithm = json.loads((pathlib.Path(args.rl_dir) / "done.json").read_text())["algorithm"]
    record = {"rl_run_id": rid, "eval_runs": {}}
    if cl is not None and rid is None:
        print(f"warning: {args.rl_dir} has no MLflow run; evaluations not recorded")
    if cl is not None and rid is not None:
        _delete_eval_runs(cl, exp, args.variant, args.seed)
        items = []
        for path in args.initial:
            summary = json.loads(pathlib.Path(path).read_text())
            items.append((pathlib.Path(path).parent, summary,
                          {"budget": 0, "step": 0, "compute_flops": 0.0,
                           "model": summary["settings"]["model"]}))
        for path in args.summaries:
            src = pathlib.Path(path).parent
            items.append((src, json.loads(pathlib.Path(path).read_text()),
                          json.loads((src / "checkpoint.json").read_text())))
        for src, summary, meta in items:
            bench = next(iter(summary["benchmarks"]))
            record["eval_runs"][f"b{meta['budget']}/{bench}"] = log_eval_run(
                cl, exp, bench=bench, summary=summary, src=src, ev=evs[bench],
                algorithm=algorithm, variant=args.variant, seed=args.seed, budget=meta["budget"],
                step=meta["step"], compute=meta["compute_flops"], parent=rid, model=meta["model"])
            log_into_training_run(cl, rid, bench, summary, meta["step"], meta["compute_flops"],
                                  with_compute=meta["step"] == 0)
    write_json(args.out, record)


# -- aggregate / report -----------------------------------------------------------------------------

def cmd_aggregate(args):
    from pipeline import aggregate

    argv = ["--experiment", args.experiment, "--out", args.out, "--report-config", args.report_config]
    if args.workflow_config:
        argv += ["--workflow-config", args.workflow_config]
    aggregate.main(argv)


def cmd_report(args):
    from pipeline import report

    report.main(["--experiment", args.experiment, "--out", args.out,
                 "--report-config", args.report_config])


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("data")
    p.add_argument("--config", required=True)
    p = sub.add_parser("sft")
    p.add_argument("--config", required=True)
    p.add_argument("--threads", type=int, default=0)
    p = sub.add_parser("rl")
    p.add_argument("--config", required=True)
    p.add_argument("--sft-summary", required=True)
    p.add_argument("--done", required=True)
    p.add_argument("--variant", default="", help="the compared run's name (default: the algorithm)")
    p.add_argument("--baseline", default="", help="the variant this one is measured against")
    p.add_argument("--threads", type=int, default=0)
    p = sub.add_parser("eval")
    p.add_argument("--configs", nargs="+", required=True)
    for k in ("--rl-dir", "--out-root", "--variant"):
        p.add_argument(k, required=True)
    for k in ("--step", "--budget", "--seed"):
        p.add_argument(k, type=int, required=True)
    p.add_argument("--threads", type=int, default=0)
    p = sub.add_parser("eval-sft")
    p.add_argument("--configs", nargs="+", required=True)
    for k in ("--model", "--out-root"):
        p.add_argument(k, required=True)
    p.add_argument("--threads", type=int, default=0)
    p = sub.add_parser("track-sft")
    p.add_argument("--sft-dir", required=True)
    p.add_argument("--summaries", nargs="+", required=True)
    p.add_argument("--configs", nargs="+", required=True)
    p.add_argument("--out", required=True)
    p = sub.add_parser("track-run")
    for k in ("--rl-dir", "--variant", "--out"):
        p.add_argument(k, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--initial", nargs="*", default=[])
    p.add_argument("--summaries", nargs="*", default=[])
    p.add_argument("--configs", nargs="+", required=True)
    for name in ("aggregate", "report"):
        p = sub.add_parser(name)
        p.add_argument("--experiment", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--report-config", required=True)
        p.add_argument("--workflow-config", default="")
    args = ap.parse_args(argv)
    globals()["cmd_" + args.cmd.replace("-", "_")](args)


if __name__ == "__main__":
    from gspo.config import ConfigError
    from gspo.io import DataError

    try:
        main()
    except (ConfigError, DataError) as e:
        print(f"error: {e}", file=sys.stderr)
        sys.exit(2)
