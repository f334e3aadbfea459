# One RL run per (algorithm, seed) from the SFT model.
#
# Only done.json is declared as output: the run's checkpoints/ and metrics.jsonl are not, so
# Snakemake never deletes them. An interrupted run is re-run (with --rerun-incomplete when
# Snakemake flagged it) and the trainer resumes from its latest checkpoint; gspo_workflow.steps
# wipes them only when the run's config or SFT model changed.


rule rl:
    input:
        config="results/{experiment}/config/rl/{algorithm}-seed{seed}.yaml",
        model="results/{experiment}/sft/model",
        sft_summary="results/{experiment}/sft/summary.json",
        data=PLAN.rl_data,
    output:
        done="results/{experiment}/rl/{algorithm}/seed{seed}/done.json",
    params:
        config_sha=PLAN.rl_sha_param,
    log:
        "results/{experiment}/logs/rl/{algorithm}-seed{seed}.log",
    benchmark:
        "results/{experiment}/benchmarks/rl/{algorithm}-seed{seed}.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec python -m gspo_workflow.steps rl --config {input.config} --sft-summary {input.sft_summary}"
        " --done {output.done} --threads {threads} > {log} 2>&1"
