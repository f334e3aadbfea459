# Cold-start SFT on the training mix (train_tasks), once; every RL run starts from its model.
# With GPUs (resource `gpu`, or `gres` per node, in the profile) the job is torchrun with one rank
# per GPU, on one node or, with `nodes`, several (gspo_workflow/launch.py); batch_size must divide
# by the number of ranks.


rule sft:
    input:
        config="results/{experiment}/config/sft.yaml",
        data=PLAN.sft_data,
    output:
        model=directory("results/{experiment}/sft/model"),
        summary="results/{experiment}/sft/summary.json",
    params:
        config_sha=PLAN.sha_param("sft"),
        tracking=PLAN.tracking_flags(),
        launch=PLAN.launcher,
    log:
        "results/{experiment}/logs/sft.log",
    benchmark:
        "results/{experiment}/benchmarks/sft.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec {params.launch} pipeline.sft --config {input.config} --set threads={threads}"
        " --run-name sft {params.tracking} > {log} 2>&1"
