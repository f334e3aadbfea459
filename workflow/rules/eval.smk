# Evaluation: the SFT model (every run's 0 % budget, results/<exp>/eval/sft/<bench>/), then each
# run's checkpoint at every other budget (results/<exp>/eval/<variant>/seed<s>/b<budget>/<bench>/).
#
# One job evaluates one checkpoint on all benchmarks: starting a process that loads torch and
# transformers costs 5-10 s on 2 cores, more than a tiny checkpoint's whole evaluation, so the
# model is loaded once per checkpoint. Evaluation jobs only write files; the track_* rules then
# record them in MLflow (pipeline.track): one eval run per checkpoint and benchmark, nested
# under the run that trained it, plus the scores as metrics of the RL run itself
# (eval/<bench>/pass_at_1 at the checkpoint's step, step 0 = the SFT model).
#
# With GPUs (resource `gpu`, or `gres`, in the profile) the job is torchrun with one rank per GPU,
# as sft and rl are (gspo_workflow/launch.py): one engine per GPU, the chunks of batch_prompts
# problems dealt out over the ranks, the same results as one process. Each finished chunk is
# kept in <out>/<bench>.partial/ (evaluators.partial), which is no declared output: Snakemake
# does not delete it when the job fails, and the re-run (retries, --rerun-incomplete) resumes
# from it.


rule eval_sft:
    input:
        configs=PLAN.eval_configs(),
        model=rules.sft.output.model,
        data=PLAN.test_files(),
    output:
        summaries=PLAN.eval_outputs("sft", "summary.json"),
        results=PLAN.eval_outputs("sft", "results.jsonl"),
    params:
        config_sha=PLAN.eval_sha_param(),
        launch=PLAN.launcher,
    log:
        "results/{experiment}/logs/eval/sft.log",
    benchmark:
        "results/{experiment}/benchmarks/eval/sft.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec {params.launch} pipeline.evaluate --model {input.model} --config {input.configs}"
        " --out results/{wildcards.experiment}/eval/sft --threads {threads} > {log} 2>&1"


rule eval_checkpoint:
    input:
        configs=PLAN.checkpoint_eval_configs,
        done=rules.rl.output.done,     # rule rl_verl makes it for verl's runs
        data=PLAN.test_files(),
    output:
        summaries=PLAN.eval_outputs("{variant}/seed{seed}/b{budget}", "summary.json"),
        results=PLAN.eval_outputs("{variant}/seed{seed}/b{budget}", "results.jsonl"),
        meta=PLAN.eval_outputs("{variant}/seed{seed}/b{budget}", "checkpoint.json"),
    params:
        config_sha=PLAN.checkpoint_eval_sha,
        model=PLAN.checkpoint_param,
        launch=PLAN.launcher,
    log:
        "results/{experiment}/logs/eval/{variant}-seed{seed}-b{budget}.log",
    benchmark:
        "results/{experiment}/benchmarks/eval/{variant}-seed{seed}-b{budget}.tsv"
    threads: 1
    conda:
        "../../environment.yml"
    shell:
        "exec {params.launch} pipeline.evaluate --model {params.model} --config {input.configs}"
        " --out results/{wildcards.experiment}/eval/{wildcards.variant}/seed{wildcards.seed}/b{wildcards.budget}"
        " --threads {threads} > {log} 2>&1"


rule track_sft_evals:
    input:
        summaries=PLAN.eval_outputs("sft", "summary.json"),
        sft_summary=rules.sft.output.summary,
    output:
        "results/{experiment}/eval/sft/mlflow.json",
    params:
        tracking=PLAN.tracking_flags(),
    log:
        "results/{experiment}/logs/track/sft.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.track --run-dir results/{wildcards.experiment}/sft --variant sft"
        " --seed 0 --eval 0=results/{wildcards.experiment}/eval/sft --out {output}"
        " {params.tracking} > {log} 2>&1"


rule track_run_evals:
    input:
        done=rules.rl.output.done,     # rule rl_verl makes it for verl's runs
        initial=PLAN.initial_eval_inputs,
        summaries=PLAN.run_eval_summaries,
    output:
        "results/{experiment}/eval/{variant}/seed{seed}/mlflow.json",
    params:
        evals=PLAN.track_eval_flags,
        tracking=PLAN.tracking_flags(),
    log:
        "results/{experiment}/logs/track/{variant}-seed{seed}.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.track --run-dir results/{wildcards.experiment}/rl/{wildcards.variant}/seed{wildcards.seed}"
        " --variant {wildcards.variant} --seed {wildcards.seed} {params.evals} --out {output}"
        " {params.tracking} > {log} 2>&1"
