"""The native trainer: the RL loop, a step's update, shaping and metrics, cold-start SFT, and the
record mixes and batches they train on."""
