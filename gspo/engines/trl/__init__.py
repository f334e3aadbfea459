"""engine: trl: the RL and SFT stages on TRL's GRPOTrainer and SFTTrainer (rl, sft), the
field mapping (fields), FSDP2 (fsdp), sampling through this project's vLLM engine (rollout),
micro-batch sizes (batch)."""
