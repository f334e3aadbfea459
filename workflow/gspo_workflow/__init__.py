"""The Snakemake workflow's Python: `plan` (the validated master config turned into stage configs,
paths and rule helpers; imported by the Snakefile) and `steps` (the jobs:
`python -m gspo_workflow.steps <stage> ...`)."""
