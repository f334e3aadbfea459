"""Tracking: a stage's MLflow run and its metrics file (runs), the MLflow store (store), the
recording of evaluations (evals)."""
