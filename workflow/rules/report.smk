# Aggregation and the report, both read from the MLflow store (pipeline.aggregate,
# pipeline.report); the report is also registered for `snakemake --report`.


rule aggregate:
    input:
        tracked=PLAN.tracked(),
        config="results/{experiment}/config/report.yaml",
        workflow_config="results/{experiment}/config/workflow.yaml",
    output:
        scores="results/{experiment}/aggregate/scores.json",
        table="results/{experiment}/aggregate/scores.csv",
    params:
        tracking=PLAN.tracking_flags(),
    log:
        "results/{experiment}/logs/aggregate.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.aggregate --out {output.scores}"
        " --workflow-config {input.workflow_config} {params.tracking} > {log} 2>&1"


rule report:
    input:
        scores="results/{experiment}/aggregate/scores.json",
        config="results/{experiment}/config/report.yaml",
        selection=fair.selection(PLAN),     # the fair protocol's learning-rate choice, if any
    output:
        html=report(
            "results/{experiment}/report/index.html",
            caption="../report/index.rst",
            category="Report",
        ),
        score=report(
            "results/{experiment}/report/score_vs_compute.png",
            caption="../report/score.rst",
            category="Figures",
        ),
        final=report(
            "results/{experiment}/report/final_scores.png",
            caption="../report/final.rst",
            category="Figures",
        ),
        reward=report(
            "results/{experiment}/report/reward_vs_compute.png",
            caption="../report/reward.rst",
            category="Figures",
        ),
        clip=report(
            "results/{experiment}/report/clip_fraction.png",
            caption="../report/clip.rst",
            category="Figures",
        ),
        table=report(
            "results/{experiment}/report/final_scores.csv",
            caption="../report/table.rst",
            category="Tables",
        ),
        stability=report(
            "results/{experiment}/report/stability.csv",
            caption="../report/stability.rst",
            category="Tables",
        ),
        variants=report(
            "results/{experiment}/report/variants.csv",
            caption="../report/variants.rst",
            category="Tables",
        ),
        moe=report(
            "results/{experiment}/report/moe.csv",
            caption="../report/moe.rst",
            category="Tables",
        ),
    params:
        tracking=PLAN.tracking_flags(),
        selection=lambda w, input: f"--selection {input.selection}" if input.selection else "",
    log:
        "results/{experiment}/logs/report.log",
    conda:
        "../../environment.yml"
    shell:
        "exec python -m pipeline.report --out $(dirname {output.html}) --report-config {input.config}"
        " {params.selection} {params.tracking} > {log} 2>&1"
