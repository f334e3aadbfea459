"""The off-policy experiment's part of the plan (config `offpolicy`, config/offpolicy.yaml; issue 45).

With a non-empty `offpolicy.staleness` list, every compared run at staleness 0 (each plain
algorithm in `algorithms` and each configured variant) also trains at every staleness k of the
list: one variant per (run, k), named `<run>-stale<k>`, with the run's settings plus
`rl.staleness: k` (gspo.native.staleness), measured against `<run>` itself, its on-policy
self. An objective added to the experiment is therefore one entry (a name in `algorithms`, or
one variant with its settings) and gets every staleness; pipeline.report.offpolicy groups the
runs back by (objective, staleness) for the follow-up claims and the figure.
"""

from __future__ import annotations


def grid(config: dict) -> list[int]:
    """The staleness values each on-policy run is repeated at (0 is the run itself)."""
    return [int(k) for k in (config.get("offpolicy") or {}).get("staleness") or []]


def variant_name(name: str, k: int) -> str:
    return f"{name}-stale{k}"


def variants(on_policy: dict[str, dict], ks: list[int]) -> dict[str, dict]:
    """{name: {algorithm, baseline, description, rl}}: each of `on_policy` (the plan's runs
    so far, in their order) at each staleness of `ks`. A variant that sets rl.staleness itself
    is a stale run already and is not repeated."""
    out = {}
    for name, v in on_policy.items():
        if v["rl"].get("staleness"):
            continue
        for k in ks:
            out[variant_name(name, k)] = {
                "algorithm": v["algorithm"],
                "baseline": name,
                "rl": {**v["rl"], "staleness": k},
                "description": f"{v['description'] or v['algorithm'].upper()}, rollouts from "
                f"the policy {k} step{'s' if k > 1 else ''} back (staleness {k})",
            }
    return out
