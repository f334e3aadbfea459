# One RL run per (variant, seed) from the SFT model; a plain algorithm is the variant named after
# it, a configured variant is an algorithm with RLConfig overrides (config `variants`).
#
# Only summary.json (written when training ends) is declared as output: the run's checkpoints/
# and metrics.jsonl are not, so Snakemake never deletes them. An interrupted run is re-run (with
# --rerun-incomplete when Snakemake flagged it) and the trainer resumes from its latest
# checkpoint; --restart-if-changed makes it start over only when its config or SFT model changed.
# With GPUs (resource `gpu`, or `gres` per node, in the profile) the job is torchrun with one rank
# per GPU, on one node or, with `nodes`, several (gspo_workflow/launch.py); prompts_per_step must
# divide by the number of ranks.


rule rl:
    input:
        config="results/{experiment}/config/rl/{variant}-seed{seed}.yaml",
        model=rules.sft.output.model,
        data=PLAN.rl_data,
    output:
        done="results/{experiment}/rl/{variant}/seed{seed}/summary.json",
    params:
        config_sha=PLAN.rl_sha_param,
        baseline=PLAN.baseline_param,
        tracking=PLAN.tracking_flags(),
        launch=PLAN.launcher,
    wildcard_constraints:
        variant=PLAN.engine_regex(False),     # engine: verl's runs: workflow/rules/verl.smk
    log:
        "results/{experiment}/logs/rl/{variant}-seed{seed}.log",
    benchmark:
        "results/{experiment}/benchmarks/rl/{variant}-seed{seed}.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec {params.launch} pipeline.train --config {input.config} --set threads={threads}"
        " --restart-if-changed --run-name {wildcards.variant}-seed{wildcards.seed}"
        " --tag variant={wildcards.variant} --tag baseline={params.baseline:q}"
        " {params.tracking} > {log} 2>&1"
