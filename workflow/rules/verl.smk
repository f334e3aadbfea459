# engine: verl (gspo.engines.verl.job): a variant whose RL config says engine: verl is trained by
# verl's own trainer, in verl's own environment, in three jobs:
#
#   verl_prepare  (the project's environment) python -m pipeline.verl: the run's prompts as
#                 verl's parquet and verl's config as Hydra overrides (out_dir/verl/job.json)
#   verl_train    workflow/scripts/verl_launch.py on the host (srun, squeue and scontrol are
#                 there): a check of verl's environment on every node, a Ray cluster over the
#                 nodes the profile gives the rule, then verl's main_ppo. verl's environment:
#                 envs/verl.yaml with --sdm conda (the launcher runs in it, its steps inherit
#                 it), or with --sdm apptainer the config's verl_container, which the launcher
#                 puts inside each srun step (verl's Ray-on-SLURM recipe); the image is built
#                 from envs/verl.def by rule verl_image unless verl_container names another
#   rl_verl       (the project's environment) python -m pipeline.train, as rule rl: verl's
#                 checkpoints and metrics become the run's, tracked in MLflow
#
# rl_verl makes the same summary.json as rule rl, for the verl variants only (the two rules'
# variant constraints split the variants). verl keeps its own checkpoints in out_dir/verl, so
# an interrupted verl_train resumes from them (trainer.resume_mode auto).


from snakemake.settings.types import DeploymentMethod


rule verl_prepare:
    input:
        config="results/{experiment}/config/rl/{variant}-seed{seed}.yaml",
        model=rules.sft.output.model,
        data=PLAN.rl_data,
    output:
        job="results/{experiment}/rl/{variant}/seed{seed}/verl/job.json",
    params:
        config_sha=PLAN.rl_sha_param,
    wildcard_constraints:
        variant=PLAN.engine_regex(True),
    log:
        "results/{experiment}/logs/rl/{variant}-seed{seed}.verl-prepare.log",
    localrule: True
    conda:
        "../../environment.yml"
    shell:
        "python -m pipeline.verl --config {input.config} > {log} 2>&1"


APPTAINER = DeploymentMethod.APPTAINER in workflow.deployment_settings.deployment_method
VERL_IMAGE = config["verl_container"]
BUILD_IMAGE = APPTAINER and "://" not in VERL_IMAGE     # a local image: built here if missing

if BUILD_IMAGE:

    rule verl_image:
        input:
            definition="workflow/envs/verl.def",
        output:
            image=VERL_IMAGE,
        log:
            "results/logs/verl_image.log",
        localrule: True
        shell:
            "apptainer build --fakeroot {output.image} {input.definition} > {log} 2>&1"


rule verl_train:
    input:
        job=rules.verl_prepare.output.job,
        image=[VERL_IMAGE] if BUILD_IMAGE else [],
    output:
        done="results/{experiment}/rl/{variant}/seed{seed}/verl/done.json",
    params:
        gpus=lambda wildcards, resources: max(1, plan.launch.gpus_per_node(resources)),
        container=f"--container {VERL_IMAGE}" if APPTAINER else "",
    wildcard_constraints:
        variant=PLAN.engine_regex(True),
    log:
        "results/{experiment}/logs/rl/{variant}-seed{seed}.verl.log",
    benchmark:
        "results/{experiment}/benchmarks/rl/{variant}-seed{seed}.verl.tsv"
    conda:
        "../envs/verl.yaml"
    shell:
        "python3 workflow/scripts/verl_launch.py $(dirname {input.job})"
        " --gpus-per-node {params.gpus} {params.container} > {log} 2>&1"


rule rl_verl:
    input:
        config="results/{experiment}/config/rl/{variant}-seed{seed}.yaml",
        model=rules.sft.output.model,
        verl=rules.verl_train.output.done,
    output:
        done="results/{experiment}/rl/{variant}/seed{seed}/summary.json",
    params:
        config_sha=PLAN.rl_sha_param,
        baseline=PLAN.baseline_param,
        tracking=PLAN.tracking_flags(),
    wildcard_constraints:
        variant=PLAN.engine_regex(True),
    log:
        "results/{experiment}/logs/rl/{variant}-seed{seed}.log",
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "python -m pipeline.train --config {input.config} --set threads={threads}"
        " --restart-if-changed --run-name {wildcards.variant}-seed{wildcards.seed}"
        " --tag variant={wildcards.variant} --tag baseline={params.baseline:q}"
        " {params.tracking} > {log} 2>&1"
