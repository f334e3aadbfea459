# One RL run per (variant, seed) from the SFT model; a plain algorithm is the variant named after
# it, a configured variant is an algorithm with RLConfig overrides (config `variants`).
#
# Only done.json is declared as output: the run's checkpoints/ and metrics.jsonl are not, so
# Snakemake never deletes them. An interrupted run is re-run (with --rerun-incomplete when
# Snakemake flagged it) and the trainer resumes from its latest checkpoint; gspo_workflow.steps
# wipes them only when the run's config or SFT model changed.


rule rl:
    input:
        config="results/{experiment}/config/rl/{variant}-seed{seed}.yaml",
        model="results/{experiment}/sft/model",
        sft_summary="results/{experiment}/sft/summary.json",
        data=PLAN.rl_data,
    output:
        done="results/{experiment}/rl/{variant}/seed{seed}/done.json",
    params:
        config_sha=PLAN.rl_sha_param,
        baseline=PLAN.baseline_param,
    log:
        "results/{experiment}/logs/rl/{variant}-seed{seed}.log",
    benchmark:
        "results/{experiment}/benchmarks/rl/{variant}-seed{seed}.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec python -m gspo_workflow.steps rl --config {input.config} --sft-summary {input.sft_summary}"
        " --variant {wildcards.variant} --baseline={params.baseline:q} --done {output.done}"
        " --threads {threads} > {log} 2>&1"
