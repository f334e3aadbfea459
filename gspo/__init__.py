"""gspo-bench training library: models, objectives, rollouts, SFT and the RL trainer."""
