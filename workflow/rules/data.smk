# Task data: <task>_sft / _rl / _test JSONL for every task the training mix or the benchmarks
# use (generated, or real files from data.files).


rule data:
    input:
        config="results/{experiment}/config/data.yaml",
    output:
        # <task>_sft / _rl / _test, and with the fair protocol its benchmark's _val
        [f.replace(PLAN.base, "results/{experiment}", 1) for f in PLAN.data_files()],
    params:
        config_sha=PLAN.sha_param("data"),
    log:
        "results/{experiment}/logs/data.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.data --config {input.config} > {log} 2>&1"
