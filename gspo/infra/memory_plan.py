"""Per-GPU memory of an RL run at real scale, estimated from the model's config and the run's
settings: what must fit on each of N GPUs, phase by phase, before a GPU is rented.

    python -m pipeline.memory_plan --config config/real-scale.yaml --model Qwen3-8B

Each rank holds (bytes; P parameters, N ranks, FSDP2 full sharding, bf16 compute):
- the trainer's persistent state: fp32 master weights 4P/N and AdamW's two moments 8P/N;
- during the update, fp32 gradient shards 4P/N; the bf16 parameters FSDP2 has gathered (the
  root's embeddings, head and final norm for the whole pass, plus two decoder layers: the one
  computing and the one prefetched), and one layer's gathered gradients (bf16, then fp32 for the
  reduction); activations at the micro-batch's token budget T: with activation checkpointing
  each layer's input (T x hidden, bf16) plus one layer recomputed, forward and backward
  (`layer_act_bytes` per token, twice), without it every layer's; the chunked LM head's
  chunk x vocab logits in fp32 (forward, softmax, gradient: three);
- in the old-log-prob pass (no gradients), the gathered parameters, one layer's activations at
  T and one head chunk;
- the colocated vLLM engine, awake while sampling: its `gpu_memory_utilization` share of the GPU
  (weights, then activations and the KV cache in what is left); asleep (sleep mode) ~0;
- the weight sync: the engine's weights woken, plus what the trainer materialises on the
  device to send them: with `sync="streamed"` (gspo.infra.distributed.full_state_dict today) one
  tensor at a time, the largest, in fp32 and its cast copy; with `sync="full"` (the code before
  issue 23) the whole model in fp32 and a bf16 copy on every rank;
- CUDA context, NCCL buffers and allocator slack: RESERVE_GIB.

Each node's host memory (`host_plan`; G = gpus_per_node ranks): loading, rank 0 alone reads the
fp32 model (4P; `load="every"`: every rank, as TRL did before issue 43: 4PG); the weight sync's
gathered copy in the engine's dtype and the safetensors file in /dev/shm (a tmpfs: host memory,
half of it by default), 2P each, once per node (`sync_writers="node"`) or on every rank ("rank",
before issue 43: 8 x 2P of files at once, where each rank had checked the free space alone);
a checkpoint, rank 0's gathered fp32 model (4P); HOST_RESERVE_GIB per rank for its process.

Estimates, not measurements: activations follow the shapes of a Qwen3 decoder layer with SDPA
attention (no T x T scores kept), and the allocator's fragmentation is folded into the reserve.
No GPU has checked them yet (docs/EXPERIMENTS.md)."""

from __future__ import annotations

import dataclasses

GIB = 1024**3
RESERVE_GIB = 3.0  # CUDA context (~0.5), NCCL buffers (~1), allocator slack
HOST_RESERVE_GIB = 6.0  # a rank's process in host memory: Python, torch, CUDA and NCCL libraries
MARGIN = 0.10  # a plan fits when every phase leaves this share of the GPU free

# config.json fields of the public checkpoints (no download needed to plan)
PRESETS = {
    "Qwen3-1.7B": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 6144,
        "tie_word_embeddings": True,
    },
    "Qwen3-8B": {
        "vocab_size": 151936,
        "hidden_size": 4096,
        "num_hidden_layers": 36,
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "intermediate_size": 12288,
        "tie_word_embeddings": False,
    },
}


@dataclasses.dataclass(frozen=True)
class Shape:
    """A Qwen3 (dense or MoE) model's sizes, from its Hugging Face config.json."""

    vocab: int
    hidden: int
    layers: int
    heads: int
    kv_heads: int
    head_dim: int
    intermediate: int
    tied: bool
    experts: int = 0  # MoE (every layer sparse, as Qwen3-MoE ships): experts per layer, each of moe_intermediate, top-k active
    moe_intermediate: int = 0
    top_k: int = 0

    @classmethod
    def of(cls, config: dict) -> "Shape":
        heads = config["num_attention_heads"]
        return cls(
            vocab=config["vocab_size"],
            hidden=config["hidden_size"],
            layers=config["num_hidden_layers"],
            heads=heads,
            kv_heads=config.get("num_key_value_heads", heads),
            head_dim=config.get("head_dim") or config["hidden_size"] // heads,
            intermediate=config.get("intermediate_size", 0),
            tied=bool(config.get("tie_word_embeddings", False)),
            experts=(config.get("num_experts") or config.get("num_local_experts") or 0),
            moe_intermediate=config.get("moe_intermediate_size", 0) or 0,
            top_k=config.get("num_experts_per_tok", 0) or 0,
        )

    def layer_params(self) -> int:
        h, d = self.hidden, self.head_dim
        attn = h * self.heads * d + 2 * h * self.kv_heads * d + self.heads * d * h + 2 * d
        mlp = (
            self.experts * 3 * h * self.moe_intermediate + h * self.experts
            if self.experts
            else 3 * h * self.intermediate
        )
        return attn + mlp + 2 * h  # + the two RMSNorms

    def root_params(self) -> int:
        """Embeddings, the LM head (unless tied) and the final norm: FSDP2's root unit."""
        return self.vocab * self.hidden * (1 if self.tied else 2) + self.hidden

    def params(self) -> int:
        return self.layers * self.layer_params() + self.root_params()

    def largest_tensor(self) -> int:
        """Elements of the largest single tensor: the embeddings, or an MLP projection."""
        return max(
            self.vocab * self.hidden, self.hidden * max(self.intermediate, self.moe_intermediate)
        )

    def layer_act_bytes(self) -> int:
        """bf16 activations one decoder layer keeps per token for its backward: the two norms'
        outputs, q, k, v, the attention output, the residual sums, and the MLP's gate, up,
        activation and product (MoE: top_k experts' worth)."""
        h, d = self.hidden, self.head_dim
        inter = self.top_k * self.moe_intermediate if self.experts else self.intermediate
        return 2 * (4 * h + 2 * self.heads * d + 2 * self.kv_heads * d + 4 * inter)

    def kv_bytes_per_token(self, dtype_bytes: int = 2) -> int:
        return 2 * self.layers * self.kv_heads * self.head_dim * dtype_bytes


@dataclasses.dataclass(frozen=True)
class Settings:
    """What the plan needs of an RL run (RLConfig and its rollout section)."""

    gpus: int = 8
    gpu_gib: float = 79.6  # an H100 80GB as torch reports it
    micro_tokens: int = 32768  # max_tokens_per_micro_batch
    logprob_chunk: int = 1024
    activation_checkpointing: bool = True
    engine_share: float = 0.3  # rollout.gpu_memory_utilization
    sleep: bool = True  # rollout.sleep
    seq_len: int = 9216  # prompt + max_new_tokens, the longest rollout
    sequences_per_rank: int = 256  # prompts_per_step x group_size / gpus
    sync: str = "streamed"  # "streamed" (today) or "full" (before issue 23)
    gpus_per_node: int = 8
    host_gib: float = 1000.0  # a node's host memory (an 8-GPU node has 1-2 TiB)
    shm_gib: float = 0.0  # /dev/shm's size (0: half of host_gib, tmpfs's default)
    sync_writers: str = "node"  # "node" (today) or "rank" (before issue 43)
    load: str = "rank0"  # "rank0" (today, both engines) or "every" (TRL before 43)


def host_plan(shape: Shape, s: Settings) -> dict:
    """A node's host memory (module doc): {"items": {name: GiB}, "phases": {phase: GiB},
    "shm_gib", "fits": every phase within the host memory and the sync's files in /dev/shm}."""
    P, G = shape.params(), min(s.gpus_per_node, s.gpus)
    g = lambda b: b / GIB  # noqa: E731
    copies = 1 if s.sync_writers == "node" else G
    items = {
        "model read at load (fp32)": g(4 * P * (1 if s.load == "rank0" else G)),
        "sync: gathered weights (engine dtype)": g(2 * P * copies),
        "sync: files in /dev/shm": g(2 * P * copies),
        "checkpoint: rank 0's gathered model (fp32)": g(4 * P),
        "ranks' processes": HOST_RESERVE_GIB * G,
    }
    rest = items["ranks' processes"]
    phases = {
        "load": items["model read at load (fp32)"] + rest,
        "weight sync": items["sync: gathered weights (engine dtype)"]
        + items["sync: files in /dev/shm"]
        + rest,
        "checkpoint": items["checkpoint: rank 0's gathered model (fp32)"] + rest,
    }
    shm = s.shm_gib or s.host_gib / 2
    return {
        "items": items,
        "phases": phases,
        "shm_gib": shm,
        "fits": (
            all(v <= (1 - MARGIN) * s.host_gib for v in phases.values())
            and items["sync: files in /dev/shm"] <= shm
        ),
    }


def plan(shape: Shape, s: Settings) -> dict:
    """{"items": {name: GiB}, "phases": {phase: GiB}, "fits": bool, "concurrent_sequences":
    how many rollouts of seq_len the engine's KV cache holds at once, "waves": rounds of
    sampling a rank's sequences take}."""
    P, N, L = shape.params(), s.gpus, shape.layers
    g = lambda b: b / GIB  # noqa: E731
    T = s.micro_tokens
    layer = shape.layer_params()
    items = {
        "master weights (fp32 shard)": g(4 * P / N),
        "AdamW moments (fp32 shard)": g(8 * P / N),
        "gradients (fp32 shard)": g(4 * P / N),
        "gathered bf16 parameters (root + 2 layers)": g(2 * (shape.root_params() + 2 * layer)),
        "one layer's gathered gradients (bf16 + fp32)": g(6 * layer),
        "activations at the token budget": g(
            (T * shape.hidden * 2 * L + 2 * T * shape.layer_act_bytes())
            if s.activation_checkpointing
            else (2 * T * shape.layer_act_bytes() * L)
        ),
        "activations, no-grad pass": g(T * shape.layer_act_bytes()),
        "LM head chunk (fp32 logits, softmax, grad)": g(3 * s.logprob_chunk * shape.vocab * 4),
        "engine awake (its share)": s.engine_share * s.gpu_gib,
        "engine weights (bf16)": g(2 * P),
        "sync buffer": g(6 * (P if s.sync == "full" else shape.largest_tensor())),
        "reserve (context, NCCL, slack)": RESERVE_GIB,
    }
    persistent = items["master weights (fp32 shard)"] + items["AdamW moments (fp32 shard)"]
    asleep = 0.0 if s.sleep else items["engine awake (its share)"]
    phases = {
        "rollout": persistent + items["engine awake (its share)"],
        "old log-probs": persistent
        + asleep
        + items["gathered bf16 parameters (root + 2 layers)"]
        + items["activations, no-grad pass"]
        + items["LM head chunk (fp32 logits, softmax, grad)"] / 3,
        "update": persistent
        + asleep
        + items["gradients (fp32 shard)"]
        + items["gathered bf16 parameters (root + 2 layers)"]
        + items["one layer's gathered gradients (bf16 + fp32)"]
        + items["activations at the token budget"]
        + items["LM head chunk (fp32 logits, softmax, grad)"],
        "weight sync": persistent
        + (items["engine weights (bf16)"] if s.sleep else items["engine awake (its share)"])
        + items["sync buffer"],
    }
    phases = {k: v + RESERVE_GIB for k, v in phases.items()}
    # the engine's share holds its weights, ~1 GiB of activations and CUDA graphs, then KV
    kv_gib = items["engine awake (its share)"] - items["engine weights (bf16)"] - 1.0
    concurrent = max(0.0, kv_gib * GIB / (shape.kv_bytes_per_token() * s.seq_len))
    host = host_plan(shape, s)
    return {
        "params": P,
        "items": items,
        "phases": phases,
        "host": host,
        "fits": all(v <= (1 - MARGIN) * s.gpu_gib for v in phases.values()) and host["fits"],
        "kv_cache_gib": kv_gib,
        "concurrent_sequences": concurrent,
        "waves": s.sequences_per_rank / concurrent if concurrent >= 1 else float("inf"),
    }
