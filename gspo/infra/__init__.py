"""The infrastructure the trainers share: the torchrun world and FSDP2 sharding, checkpoints and
run records, memory planning at real scale."""
