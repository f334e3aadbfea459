"""Batched, KV-cached sampling in plain torch over a Hugging Face Qwen3 / Qwen3-MoE model.

Why not `transformers.generate`: for the tiny models, per-step Python overhead dominates, and the
RL loop needs the sampled tokens' log-probs under the sampling distribution. This engine reuses the
model's own modules (norms, projections, rotary embedding, dense MLP or sparse-MoE block) and
replaces only the attention cache with a preallocated static one:

- each distinct prompt is prefilled once and its cache copied n times (G samples share a prompt);
- left padding, with per-row positions, so every row decodes in lock-step;
- finished rows are dropped from the batch as they stop, so late steps cost only what is alive.

Determinism: every sample has its own `torch.Generator`, seeded as vLLM seeds its requests
(sample_seeds), so the same model, prompts and arguments give the same completions on CPU; with
one seed per prompt a prompt's samples do not depend on the call it was in nor on how many were
asked for (an evaluation's first k samples are its k-sample evaluation); and two models given
the same seeds share their sampling noise (sample_next: common random numbers, which pair the
evaluations of two checkpoints sample by sample).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from gspo.rollout.base import Completion, nothing_to_generate


def _apply_rope(x, cos, sin):
    # x: (B, H, S, D); cos/sin: (B, S, D)
    cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
    half = x.shape[-1] // 2
    rot = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
    return x * cos + rot * sin


def sample_next(
    logits: torch.Tensor,
    temperature: float,
    top_p: float,
    gens: list,
    race: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row, row b with its own generator gens[b] (or with `race` (B, V),
    the rows' noise drawn ahead from them: RaceNoise); return (tokens (B,), log-prob under the
    sampling dist (B,)).

    The draw is the exponential race (torch.multinomial's own one-sample path): token =
    argmax_v p_v / E_v with E_v ~ Exp(1) from the row's generator, V draws a step whichever
    token wins. A row's noise at step t thus depends on its seed and t alone, never on the
    model or the other rows, so two models sampling one prompt with one seed make the same
    choice wherever their distributions nearly agree: common random numbers, which make a
    paired comparison of two checkpoints (GSPO - GRPO on the same problems) far less noisy
    while each model's samples keep their exact distribution.

    temperature == 0 means greedy; its log-prob is then that of softmax(logits).
    """
    logits = logits.float()
    if temperature == 0:
        tok = logits.argmax(dim=-1)
        return tok, torch.log_softmax(logits, -1).gather(-1, tok[:, None]).squeeze(-1)
    logp = torch.log_softmax(logits / temperature, dim=-1)  # (B, V)
    if top_p < 1.0:
        sorted_lp, idx = logp.sort(dim=-1, descending=True)
        cum = sorted_lp.exp().cumsum(dim=-1)
        drop = (cum - sorted_lp.exp()) >= top_p  # keep the smallest prefix reaching top_p
        sorted_lp = sorted_lp.masked_fill(drop, float("-inf"))
        logp = torch.full_like(logp, float("-inf")).scatter(-1, idx, sorted_lp)
        logp = torch.log_softmax(logp, dim=-1)  # renormalise nucleus
    V = logp.shape[-1]
    if race is None:
        race = torch.stack([torch.empty(V).exponential_(generator=g) for g in gens])  # (B, V)
    tok = (logp - race.to(logp.device).log()).argmax(dim=-1)
    return tok, logp.gather(-1, tok[:, None]).squeeze(-1)


class RaceNoise:
    """Each row's exponential race noise (sample_next), drawn `block` steps at a time from the
    row's own generator. A generator fills a tensor in order, so row r's noise at step t is the
    same V numbers as one draw per step gives, in 1/block as many calls (per-row draws were a
    tenth of a tiny model's rollout); block is capped so the buffer stays within `budget`
    bytes (one step at a time for a 152K vocabulary and many rows)."""

    def __init__(self, gens: list, V: int, max_new: int, budget: int = 64 << 20):
        self.gens, self.V = gens, V
        self.block = max(1, min(max_new, budget // (4 * V * len(gens))))
        self.buf = torch.empty(len(gens), self.block, V)  # (N, block, V)

    def at(self, rows: torch.Tensor, t: int) -> torch.Tensor:
        """The noise of `rows` (original row indices, every row alive so far) at step t."""
        k = t % self.block
        if k == 0:
            for r in rows.tolist():
                self.buf[r].exponential_(generator=self.gens[r])
        return self.buf[rows, k]  # (len(rows), V)


def sample_seeds(seed: int | list[int], n_prompts: int, n: int) -> list[int]:
    """The seed of each sample, prompt-major, as vLLM seeds its requests (a request seeded s
    gives its j-th of n samples s + j: gspo.rollout.vllm_engine). With one int, prompt i of a
    call is the request (seed * n_prompts + i) * n, so no two samples of a call share a stream.
    With a list, seeds[i] is the seed of prompt i's first sample and its j-th sample gets
    seeds[i] + j: a prompt's samples then depend neither on the call it was in nor on n (its
    first k samples are the same for any n >= k), given seeds that lie at least n apart
    (gspo.native.data.prompt_seed times n, rollout.base.problem_seed)."""
    base = (
        [int(x) for x in seed]
        if isinstance(seed, list)
        else [(seed * n_prompts + i) * n for i in range(n_prompts)]
    )
    return [b + j for b in base for j in range(n)]


class TorchEngine:
    """Rollout engine over a local HF causal-LM directory (see gspo.rollout for the contract)."""

    def __init__(self, model_path, *, device: str = "cpu", dtype: str = "float32", model=None):
        from gspo.model.models import load_model

        self.device = torch.device(device)
        self.dtype = getattr(torch, dtype)
        if model is None:
            model, _ = load_model(model_path, dtype=self.dtype)
        self.model = model.to(self.device).eval()
        for p in self.model.parameters():
            p.requires_grad_(False)
        cfg = self.model.config
        self.n_layers = cfg.num_hidden_layers
        self.n_heads = cfg.num_attention_heads
        self.n_kv = cfg.num_key_value_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
        self.max_len = cfg.max_position_embeddings

    def update_weights(self, state_dict, world=None) -> None:
        """Load new policy weights (e.g. the trainer's `state_dict()`) into the engine's model
        (its own process's: `world` changes nothing)."""
        with torch.no_grad():
            self.model.load_state_dict(state_dict, strict=True)

    def close(self) -> None:
        """Nothing to release: the engine is a model in this process."""

    # -- the forward pass with a static cache --------------------------------------------------
    def _forward(self, ids, pos, cache_k, cache_v, start, key_valid):
        """Run tokens `ids` (B, S) at positions `pos` (B, S), writing K/V at [start, start+S).

        key_valid: (B, L) bool over the cache; attention is causal within the new block.
        Returns logits of the last position, (B, V).
        """
        m = self.model.model
        B, S = ids.shape
        x = m.embed_tokens(ids)  # (B, S, H)
        cos, sin = m.rotary_emb(x, pos)  # (B, S, D)
        end = start + S
        # (B, 1, S, end): cached keys are visible where valid; new keys causally. A decode
        # step's own slot is valid already (_decode): its mask is the valid slots as they are.
        mask = key_valid[:, None, None, :end]
        if S > 1:
            causal = torch.ones(S, S, dtype=torch.bool, device=ids.device).tril()
            mask = mask.expand(B, 1, S, end).clone()
            mask[:, :, :, start:end] &= causal
            mask[:, :, torch.arange(S), start + torch.arange(S)] = True  # never all-masked
        for i, layer in enumerate(m.layers):
            attn = layer.self_attn
            h = layer.input_layernorm(x)
            q = attn.q_norm(attn.q_proj(h).view(B, S, -1, self.head_dim)).transpose(1, 2)
            k = attn.k_norm(attn.k_proj(h).view(B, S, -1, self.head_dim)).transpose(1, 2)
            v = attn.v_proj(h).view(B, S, -1, self.head_dim).transpose(1, 2)
            q, k = _apply_rope(q, cos, sin), _apply_rope(k, cos, sin)
            cache_k[i][:, :, start:end] = k
            cache_v[i][:, :, start:end] = v
            o = F.scaled_dot_product_attention(
                q,
                cache_k[i][:, :, :end],
                cache_v[i][:, :, :end],
                attn_mask=mask,
                scale=attn.scaling,
                enable_gqa=self.n_kv != self.n_heads,
            )
            x = x + attn.o_proj(o.transpose(1, 2).reshape(B, S, -1))
            x = x + layer.mlp(layer.post_attention_layernorm(x))
        x = m.norm(x[:, -1])
        return self.model.lm_head(x)

    @torch.no_grad()
    def generate(
        self,
        prompts: list[list[int]],
        *,
        n: int,
        temperature: float = 1.0,
        top_p: float = 1.0,
        max_new_tokens: int = 64,
        seed: int | list[int] = 0,
        stop_token_ids: list[int] | None = None,
        return_routing: bool = False,
    ) -> list[list[Completion]]:
        from gspo.model import moe

        if nothing_to_generate(prompts, n):
            return [[] for _ in prompts]
        # MoE: the routers' picks, recorded forward by forward (hooks only read them)
        with moe.routing_hooks(self.model, record=return_routing and moe.is_moe(self.model)) as h:
            return self._generate(
                prompts,
                n,
                temperature,
                top_p,
                max_new_tokens,
                seed,
                stop_token_ids,
                h if h.record else None,
            )

    def _generate(
        self, prompts, n, temperature, top_p, max_new_tokens, seed, stop_token_ids, hooks
    ) -> list[list[Completion]]:
        if stop_token_ids is None:
            eos = self.model.config.eos_token_id
            stop_token_ids = [eos] if isinstance(eos, int) else list(eos or [])
        plen = max(len(p) for p in prompts)
        max_new = min(max_new_tokens, self.max_len - plen)
        if max_new <= 0:
            raise ValueError(
                f"prompt of {plen} tokens leaves no room within max length {self.max_len}"
            )
        st = self._prefill(prompts, n, plen, plen + max_new, hooks)
        # one generator per sample: its draws never depend on the rows it was batched with
        gen = [
            torch.Generator(device="cpu").manual_seed(x)
            for x in sample_seeds(seed, len(prompts), n)
        ]
        out = self._decode(st, plen, max_new, temperature, top_p, gen, stop_token_ids, hooks)
        return _completions(prompts, n, plen, out, st["routed"] if hooks is not None else None)

    def _prefill(self, prompts, n, plen: int, L: int, hooks) -> dict:
        """Prefill each distinct prompt once, left-padded, then expand the cache and the last
        logits to P*n rows, prompt-major: the decoding state."""
        dev = self.device
        P = len(prompts)
        ids = torch.zeros(P, plen, dtype=torch.long, device=dev)
        valid = torch.zeros(P, L, dtype=torch.bool, device=dev)
        for i, p in enumerate(prompts):
            ids[i, plen - len(p) :] = torch.tensor(p, device=dev)
            valid[i, plen - len(p) : plen] = True
        pad = plen - valid[:, :plen].sum(1)  # (P,)
        pos = (torch.arange(plen, device=dev)[None, :] - pad[:, None]).clamp(min=0)
        shape = (P, self.n_kv, L, self.head_dim)
        ck = [torch.zeros(shape, dtype=self.dtype, device=dev) for _ in range(self.n_layers)]
        cv = [torch.zeros(shape, dtype=self.dtype, device=dev) for _ in range(self.n_layers)]
        logits = self._forward(ids, pos, ck, cv, 0, valid)  # (P, V)
        rep = torch.arange(P, device=dev).repeat_interleave(n)
        routed = {}  # MoE layer -> (N, L, k): the experts of the token at each cache slot
        if hooks is not None:
            for i, t in hooks.pop().items():  # t: (P, plen, k)
                routed[i] = t.new_zeros(P * n, L, t.shape[-1])
                routed[i][:, :plen] = t.cpu()[rep.cpu()]
        return {
            "ck": [c[rep] for c in ck],
            "cv": [c[rep] for c in cv],
            "valid": valid[rep],
            "logits": logits[rep],
            "pad": pad[rep],
            "routed": routed,
            "n": n,
        }

    def _decode(
        self, st: dict, plen: int, max_new: int, temperature, top_p, gen, stop_token_ids, hooks
    ):
        """Sample up to max_new tokens per row, dropping rows that hit a stop token; returns
        (tokens (N, max_new), log-probs (N, max_new), lengths (N,), stopped (N,))."""
        dev = self.device
        ck, cv, valid, logits, pad, routed = (
            st[k] for k in ("ck", "cv", "valid", "logits", "pad", "routed")
        )
        N = logits.shape[0]
        out_tok = torch.zeros(N, max_new, dtype=torch.long)
        out_lp = torch.zeros(N, max_new)
        out_len = torch.full((N,), max_new, dtype=torch.long)
        stopped = torch.zeros(N, dtype=torch.bool)
        alive = torch.arange(N, device=dev)  # original row index of each batch row
        stop = torch.tensor(stop_token_ids, dtype=torch.long, device=dev)
        noise = RaceNoise(gen, logits.shape[-1], max_new) if temperature > 0 else None
        for t in range(max_new):
            rows = alive.cpu()
            tok, lp = sample_next(
                logits, temperature, top_p, [], noise.at(rows, t) if noise is not None else None
            )
            out_tok[rows, t] = tok.cpu()
            out_lp[rows, t] = lp.cpu()
            done = (
                torch.isin(tok, stop) if stop.numel() else torch.zeros_like(tok, dtype=torch.bool)
            )
            if done.any():
                d = rows[done.cpu()]
                out_len[d] = t + 1
                stopped[d] = True
            keep = ~done
            if t == max_new - 1 or not keep.any():
                break
            if not keep.all():
                alive, tok, pad, valid = alive[keep], tok[keep], pad[keep], valid[keep]
                ck = [c[keep] for c in ck]
                cv = [c[keep] for c in cv]
            valid[:, plen + t] = True
            pos = (plen + t - pad)[:, None]
            logits = self._forward(tok[:, None], pos, ck, cv, plen + t, valid)
            if hooks is not None:
                for i, r in hooks.pop().items():  # r: (alive, 1, k)
                    routed[i][alive.cpu(), plen + t] = r[:, 0].cpu()
        return out_tok, out_lp, out_len, stopped


def _completions(prompts, n: int, plen: int, out, routed) -> list[list[Completion]]:
    """The sampled rows as Completions, grouped per prompt; with `routed` (MoE) each carries the
    experts of the slots it fed: the real prompt, then all but its last token."""
    out_tok, out_lp, out_len, stopped = out
    results: list[list[Completion]] = []
    for i in range(len(prompts)):
        group = []
        for j in range(n):
            r = i * n + j
            k = int(out_len[r])
            routing = None
            if routed is not None:
                first = plen - len(prompts[i])
                routing = {
                    li: torch.cat([t[r, first:plen], t[r, plen : plen + k - 1]])
                    for li, t in routed.items()
                }
            group.append(
                Completion(
                    token_ids=out_tok[r, :k].tolist(),
                    logprobs=out_lp[r, :k].tolist(),
                    finish_reason="stop" if stopped[r] else "length",
                    routing=routing,
                )
            )
        results.append(group)
    return results
