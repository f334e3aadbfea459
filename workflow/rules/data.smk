# Task data: <task>_sft / _rl / _test JSONL for every task the training mix or the benchmarks
# use (generated, or real files from data.files).


rule data:
    input:
        config="results/{experiment}/config/data.yaml",
    output:
        expand(
            "results/{{experiment}}/data/{task}_{part}.jsonl",
            task=PLAN.data_tasks,
            part=plan.PARTS,
        ),
    params:
        config_sha=PLAN.sha_param("data"),
    log:
        "results/{experiment}/logs/data.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.data --config {input.config} > {log} 2>&1"
