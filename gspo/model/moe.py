"""Mixture-of-Experts instrumentation: Routing Replay, expert-activation volatility, load balance
and the router's load-balancing (aux) loss. Everything here is a no-op on dense models.

How it hooks into transformers (5.x, Qwen3-MoE)
-----------------------------------------------
Each sparse decoder layer `model.model.layers[i].mlp` is a `Qwen3MoeSparseMoeBlock`; its forward
flattens the hidden states (B, T, H) -> (B*T, H), calls `self.gate(...)` (a `Qwen3MoeTopKRouter`,
returning `(router_logits, routing_weights, selected_experts)`: softmax over the experts in float,
top-k, renormalised when `norm_topk_prob`) and passes the weights and indices to `self.experts`.
`routing_hooks(model, ...)` is a context manager that, while open, registers on every such layer

* a forward pre-hook on the block (`mlp`) that notes the (B, T) of the hidden states it gets, and
* a forward hook on the router (`mlp.gate`) that sees the router's output and may replace it:
  - record: keep `selected_experts` reshaped to (B, T, k), keyed by the decoder-layer index;
  - replay: swap `selected_experts` for the given recorded ones and recompute `routing_weights`
    as the *current* router's softmax probabilities gathered at the replayed experts (renormalised
    over the k when `norm_topk_prob`, cast like the model does). The router logits are untouched,
    so gradients still reach `gate.weight`; only the selection is fixed;
  - keep_logits: keep the router logits (with their graph) for the aux loss.

The hooks go on the module instances only (handles removed on exit, even on error), so nothing of
the class, of other models (the rollout engine's copy, the reference model) or of transformers'
own `output_router_logits` recorder (which reads output index 0, the unchanged logits) changes.

A recording is a `Routing`: per MoE layer an integer tensor (B, T, k) whose rows are the batch
rows, stored in the smallest integer type that holds an expert id (uint8 up to 256 experts), so
`Routing.rows(idx)` gives the cache of exactly the minibatch rows `{k: v[idx]}` the trainer feeds.
`Routing.nbytes` is the memory cost of the cache (logged as `moe/routing_cache_bytes`).

With `record` and `replay` both on, `routing()` gives the replayed (used) selection and
`routing(own=True)` what each current router would have picked itself from the hidden states it
got (beyond the first MoE layer those already went through replayed layers).

The rollout engine's routing (the third mode, `routing_replay_source: engine`): the torch engine
runs the same sparse blocks, so it records with these hooks while it generates (`pop()` after
each prefill / decode forward) and returns every sample's experts with its completion
(`Completion.routing`, one row per token it fed: the prompt, then the response without its last
token). `engine_routing` lays them out like the trainer's right-padded batch; the trainer then
replays them in the old-log-prob pass and in the update, so the policy is optimised under the
routing that produced the samples (the "rollout routing replay" of the paper's follow-ups). The
rows the engine never fed (each sequence's last token, padding) get experts 0..k-1: nothing scored
depends on them (causal attention; their logits predict past the sequence). vLLM can return
routed experts on GPU builds (`enable_return_routed_experts`); its CPU build cannot, so this mode
is wired for the torch engine only.

Metrics (all keys prefixed `moe/`)
----------------------------------
* `volatility`: share of (token, layer) top-k expert *sets* that differ between the old policy's
  routing and the updated policy's on the same rollout, over the positions whose logits score a
  response token (the target mask); `volatility/layer_<i>` per layer, `expert_overlap` the mean
  share of the k experts kept.
* `load_entropy` (entropy of the per-expert share of top-k assignments over all real tokens and
  MoE layers, divided by log E; 1 = perfectly balanced), `load_entropy_min_layer`,
  `max_expert_share`, `expert_share/<e>`.
* `aux_loss`: the Switch-style load-balancing loss (transformers' `load_balancing_loss_func`,
  padding masked) of the router on the rollout batch.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math

import torch


class RoutingError(RuntimeError):
    pass


def _is_router(m) -> bool:
    return all(hasattr(m, a) for a in ("top_k", "num_experts", "norm_topk_prob", "weight"))


def routers(model) -> list[tuple[int, torch.nn.Module, torch.nn.Module]]:
    """(decoder-layer index, sparse block, its router) for every MoE layer; [] for a dense model."""
    base = getattr(model, "model", model)
    out = []
    for i, layer in enumerate(getattr(base, "layers", [])):
        block = getattr(layer, "mlp", None)
        gate = getattr(block, "gate", None)
        if gate is not None and _is_router(gate):
            out.append((i, block, gate))
    return out


def is_moe(model) -> bool:
    return bool(routers(model))


def validate(cfg, model) -> None:
    """MoE-only options on a dense model are an error naming the field (silently ignoring
    `routing_replay: true` would make a replay ablation a no-op without anyone noticing)."""
    from gspo.config.fields import ConfigError

    if is_moe(model):
        return
    kind = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
    for name, on in (
        ("routing_replay", bool(getattr(cfg, "routing_replay", False))),
        ("router_aux_loss_coef", getattr(cfg, "router_aux_loss_coef", 0.0) > 0),
    ):
        if on:
            raise ConfigError(
                f"{name}: needs a Mixture-of-Experts policy (Qwen3-MoE), but "
                f"{cfg.model} is dense ({kind}); set {name} to its default "
                "(false / 0.0) or start from a MoE checkpoint (preset tiny-moe)"
            )


def _index_dtype(num_experts: int) -> torch.dtype:
    return (
        torch.uint8 if num_experts <= 256 else torch.int16 if num_experts <= 32767 else torch.int32
    )


@dataclasses.dataclass
class Routing:
    """Top-k expert ids per MoE layer: {layer index: (B, T, k) integer tensor}, rows = batch rows."""

    layers: dict[int, torch.Tensor]
    num_experts: int

    def rows(self, idx) -> "Routing":
        return Routing({i: t[idx] for i, t in self.layers.items()}, self.num_experts)

    @staticmethod
    def cat(parts: list["Routing"]) -> "Routing":
        return Routing(
            {i: torch.cat([p.layers[i] for p in parts]) for i in parts[0].layers},
            parts[0].num_experts,
        )

    @property
    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.layers.values())

    @property
    def shape(self) -> tuple[int, int, int]:
        return tuple(next(iter(self.layers.values())).shape)


class _Hooks:
    def __init__(self, model, record: bool, replay: Routing | None, keep_logits: bool):
        self.record, self.replay, self.keep_logits = record, replay, keep_logits
        self.routers = routers(model)
        self._shape: dict[int, tuple[int, int]] = {}
        self._recorded: dict[int, list[torch.Tensor]] = {i: [] for i, _, _ in self.routers}
        self._own: dict[int, list[torch.Tensor]] = {i: [] for i, _, _ in self.routers}
        self._logits: dict[int, list[torch.Tensor]] = {i: [] for i, _, _ in self.routers}
        self._handles: list[torch.utils.hooks.RemovableHandle] = []
        if replay is not None:
            missing = sorted({i for i, _, _ in self.routers} - set(replay.layers))
            if missing:
                raise RoutingError(f"replayed routing has no record of MoE layer(s) {missing}")

    def __enter__(self):
        for i, block, gate in self.routers:
            self._handles.append(block.register_forward_pre_hook(self._pre(i)))
            self._handles.append(gate.register_forward_hook(self._post(i)))
        return self

    def __exit__(self, *exc):
        for h in self._handles:
            h.remove()
        self._handles.clear()
        return False

    def _pre(self, layer: int):
        def hook(module, args):
            self._shape[layer] = tuple(args[0].shape[:2])

        return hook

    def _post(self, layer: int):
        def hook(gate, args, output):
            logits, weights, selected = output
            B, T = self._shape[layer]
            k = selected.shape[-1]
            own = selected
            if self.replay is not None:
                rec = self.replay.layers[layer]
                if tuple(rec.shape) != (B, T, k):
                    raise RoutingError(
                        f"layer {layer}: replayed routing is {tuple(rec.shape)} but the forward "
                        f"pass routes (B, T, k) = {(B, T, k)}; slice the cache to the batch rows "
                        "(Routing.rows(idx)) and keep the padding of the recorded batch"
                    )
                selected = rec.reshape(B * T, k).to(device=logits.device, dtype=torch.long)
                probs = torch.softmax(logits, dim=-1, dtype=torch.float)
                w = probs.gather(-1, selected)
                if gate.norm_topk_prob:
                    w = w / w.sum(dim=-1, keepdim=True)
                weights = w.to(logits.dtype)
            if self.record:
                dt = _index_dtype(gate.num_experts)
                self._recorded[layer].append(selected.detach().reshape(B, T, k).to(dt))
                if self.replay is not None:
                    self._own[layer].append(own.detach().reshape(B, T, k).to(dt))
            if self.keep_logits:
                self._logits[layer].append(logits)
            return logits, weights, selected

        return hook

    def routing(self, own: bool = False) -> Routing | None:
        """What was recorded since the context opened, forwards concatenated along the batch:
        the selection used, or with `own` (under replay) the routers' own picks."""
        rec = self._own if own and self.replay is not None else self._recorded
        if not self.routers or not any(rec.values()):
            return None
        return Routing({i: torch.cat(v) for i, v in rec.items()}, self.routers[0][2].num_experts)

    def pop(self) -> dict[int, torch.Tensor]:
        """The latest forward's recorded selection per MoE layer, (B, T, k); forgets the rest
        (the rollout engine records forward by forward)."""
        out = {i: v[-1] for i, v in self._recorded.items() if v}
        for v in self._recorded.values():
            v.clear()
        return out

    def aux_loss(self, attention_mask: torch.Tensor | None = None) -> torch.Tensor:
        """transformers' Switch-style load-balancing loss over the kept router logits (forwards
        concatenated in order, so `attention_mask` is that of the whole concatenated batch)."""
        from transformers.models.qwen3_moe.modeling_qwen3_moe import load_balancing_loss_func

        if not self.keep_logits or not self.routers:
            raise RoutingError("aux_loss needs routing_hooks(..., keep_logits=True) on a MoE model")
        gate = self.routers[0][2]
        logits = tuple(torch.cat(self._logits[i]) for i, _, _ in self.routers)
        return load_balancing_loss_func(logits, gate.num_experts, gate.top_k, attention_mask)


def routing_hooks(
    model, *, record: bool = False, replay: Routing | None = None, keep_logits: bool = False
):
    """Context manager: record and/or replay the top-k expert selection of every router of
    `model` (see the module docstring). On a dense model it does nothing and `routing()` is None."""
    if not (record or replay is not None or keep_logits):
        return contextlib.nullcontext(_Hooks(model, False, None, False))
    return _Hooks(model, record, replay, keep_logits)


def engine_routing(
    prompts: list[list[int]], completions: list, length: int, num_experts: int
) -> Routing | None:
    """The engine's experts (`Completion.routing`) laid out like `pad_batch(prompts, ...)`:
    (B, length, k) per layer, right-padded. Rows the engine did not feed get experts 0..k-1.
    None when the engine returned no routing."""
    if not completions or completions[0].routing is None:
        return None
    first = completions[0].routing
    k = next(iter(first.values())).shape[-1]
    dt = _index_dtype(num_experts)
    layers = {
        i: torch.arange(k, dtype=dt).expand(len(completions), length, k).clone() for i in first
    }
    for b, (p, c) in enumerate(zip(prompts, completions)):
        fed = len(p) + len(c.token_ids) - 1
        for i, t in c.routing.items():
            if t.shape[0] != fed:
                raise RoutingError(
                    f"sample {b}: the engine routed {t.shape[0]} tokens but fed "
                    f"{fed} (prompt {len(p)} + response {len(c.token_ids)} - 1)"
                )
            layers[i][b, :fed] = t
    return Routing(layers, num_experts)


# -- metrics ------------------------------------------------------------------------------------


def response_positions(batch: dict) -> torch.Tensor:
    """(B, L) bool: the positions whose logits score a response token (target_mask, padded to L)."""
    tm = batch["target_mask"].bool()
    L = batch["input_ids"].shape[1]
    out = torch.zeros(tm.shape[0], L, dtype=torch.bool, device=tm.device)
    out[:, : tm.shape[1]] = tm[:, :L]
    return out


def volatility(old: Routing, new: Routing, mask: torch.Tensor) -> dict[str, float]:
    """Share of (token, layer) top-k expert sets that differ between `old` and `new` over the
    positions of `mask` (B, T), overall and per layer, plus the mean share of experts kept."""
    if old.shape != new.shape:
        raise RoutingError(f"routings of different shapes {old.shape} vs {new.shape}")
    m = mask.bool().to(next(iter(old.layers.values())).device)
    n = int(m.sum())
    out: dict[str, float] = {}
    if n == 0:
        return out
    k = old.shape[-1]
    differ = kept = 0.0
    for i in old.layers:
        a = old.layers[i].long().sort(-1).values[m]  # (n, k)
        b = new.layers[i].long().sort(-1).values[m]
        d = (a != b).any(-1).float().sum().item()
        kept += (a.unsqueeze(-1) == b.unsqueeze(-2)).any(-1).float().sum().item() / k
        out[f"moe/volatility/layer_{i}"] = d / n
        differ += d
    L = len(old.layers)
    out["moe/volatility"] = differ / (n * L)
    out["moe/expert_overlap"] = kept / (n * L)
    return out


def load_balance(routing: Routing, mask: torch.Tensor) -> dict[str, float]:
    """Per-expert share of the top-k assignments over the real tokens `mask` (B, T) of all MoE
    layers, its entropy / log(E) (overall and the lowest layer's) and the largest share."""
    E = routing.num_experts
    m = mask.bool().to(next(iter(routing.layers.values())).device)
    total = torch.zeros(E, dtype=torch.float64)
    ents = []

    def norm_entropy(c):
        p = c / c.sum().clamp(min=1)
        nz = p[p > 0]
        return float(-(nz * nz.log()).sum() / math.log(E))

    for t in routing.layers.values():
        c = torch.bincount(t[m].long().reshape(-1).cpu(), minlength=E).double()
        total += c
        ents.append(norm_entropy(c))
    if total.sum() == 0:
        return {}
    share = total / total.sum()
    out = {
        "moe/load_entropy": norm_entropy(total),
        "moe/load_entropy_min_layer": min(ents),
        "moe/max_expert_share": float(share.max()),
    }
    out.update({f"moe/expert_share/{e}": float(share[e]) for e in range(E)})
    return out
