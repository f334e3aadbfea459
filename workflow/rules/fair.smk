# The fair protocol (config `fair`, gspo_workflow.fair; config/fair.yaml): every grid run's
# final model scored on the validation split, then each algorithm's learning rate chosen there
# (pipeline.select). Without a grid nothing here is asked for.


rule eval_val:
    input:
        config=lambda w: PLAN.cfg_path(f"eval/{w.vbench}-val"),
        done=rules.rl.output.done,     # rule rl_verl makes it for verl's runs
        data="results/{experiment}/data/{vbench}_val.jsonl",
    output:
        summary="results/{experiment}/eval/{variant}/seed{seed}/val/{vbench}/summary.json",
        results="results/{experiment}/eval/{variant}/seed{seed}/val/{vbench}/results.jsonl",
    params:
        config_sha=lambda w: PLAN.config_sha(PLAN.cfg_path(f"eval/{w.vbench}-val")),
        launch=PLAN.launcher,
    log:
        "results/{experiment}/logs/eval/{variant}-seed{seed}-val-{vbench}.log",
    benchmark:
        "results/{experiment}/benchmarks/eval/{variant}-seed{seed}-val-{vbench}.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec {params.launch} pipeline.evaluate"
        " --model results/{wildcards.experiment}/rl/{wildcards.variant}/seed{wildcards.seed}/model"
        " --config {input.config}"
        " --out results/{wildcards.experiment}/eval/{wildcards.variant}/seed{wildcards.seed}/val"
        " --threads {threads} > {log} 2>&1"


rule select:
    input:
        config="results/{experiment}/config/select.yaml",
        results=fair.val_results(PLAN),
    output:
        "results/{experiment}/select/lr.json",
    params:
        config_sha=lambda w: PLAN.config_sha(PLAN.cfg_path("select")),
    log:
        "results/{experiment}/logs/select.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.select --config {input.config} --out {output} > {log} 2>&1"
