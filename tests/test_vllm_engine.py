"""The vLLM rollout engine against the trainer's own numbers (real vLLM, CPU build in CI).

One engine per model (dense `tiny`, then `tiny-moe`) is shared by every test of this file: a
start costs ~40 s on 2 cores. Tests that change the engine's weights put the originals back.

Tolerance: engine log-probs must equal the trainer's recomputed ones within LOGP_ATOL = 1e-4 per
token (both are float32 on CPU; observed max difference ~1e-6).
"""

import dataclasses
import os

import pytest
import torch
from safetensors.torch import load_file

from gspo.model.logprobs import sequence_logprobs
from gspo.model.models import load_model
from gspo.native.data import pad_batch
from gspo.rollout import make_engine
from gspo.rollout.vllm_engine import VLLMEngine, _vllm_device_type, checkpoint_state_dict

LOGP_ATOL = 1e-4


@dataclasses.dataclass
class Setup:
    path: object
    engine: VLLMEngine
    model: object  # the trainer's model (HF), kept equal to the engine's weights
    tok: object
    prompts: list
    base: dict  # the original weights

    def load(self, sd):
        self.model.load_state_dict(sd)
        self.engine.update_weights(sd)

    def restore(self):
        self.load(self.base)


@pytest.fixture(scope="module", params=["tiny", "tiny-moe"])
def setup(request, tiny_model_dir, tiny_moe_model_dir):
    path = tiny_model_dir if request.param == "tiny" else tiny_moe_model_dir
    model, tok = load_model(path)
    model.eval()
    engine = make_engine("vllm", path, device="cpu", dtype="float32")
    block = engine.llm.llm_engine.vllm_config.cache_config.block_size
    texts = [
        "Compute (7*3+5) mod 1000.\n",
        "Hi\n",
        "x",
        # longer than two KV blocks, so the prefix cache holds full blocks of it
        ("Compute (12*7+3-4+5) mod 1000. Show each step. " * 8)[: 2 * block + 5],
    ]
    prompts = [tok(t, add_special_tokens=False).input_ids for t in texts]
    base = {k: v.detach().clone() for k, v in model.state_dict().items()}
    yield Setup(path, engine, model, tok, prompts, base)
    engine.close()


def flat(prompts, groups):
    ps = [p for p, g in zip(prompts, groups) for _ in g]
    cs = [c for g in groups for c in g]
    return ps, cs


def trainer_logits(model, prompts, comps, pad_id):
    """Per completion: the trainer's logits (len(c), V) at the positions predicting its tokens."""
    batch = pad_batch(prompts, [c.token_ids for c in comps], pad_id)
    with torch.no_grad():
        logits = model(
            input_ids=batch["input_ids"], attention_mask=batch["attention_mask"], use_cache=False
        ).logits.float()
    return [
        logits[i, len(p) - 1 : len(p) - 1 + len(c.token_ids)]
        for i, (p, c) in enumerate(zip(prompts, comps))
    ]


def trainer_logprobs(model, prompts, comps, pad_id, temperature):
    """Per completion: log_softmax(logits / T) of its tokens, as the trainer computes them."""
    batch = pad_batch(prompts, [c.token_ids for c in comps], pad_id)
    with torch.no_grad():
        logp = sequence_logprobs(model, batch, temperature=temperature)
    return [
        logp[i, len(p) - 1 : len(p) - 1 + len(c.token_ids)]
        for i, (p, c) in enumerate(zip(prompts, comps))
    ]


def perturbed(sd, seed, scale=0.02):
    g = torch.Generator().manual_seed(seed)
    out = {k: v + scale * torch.randn(v.shape, generator=g) for k, v in sd.items()}
    out["lm_head.weight"] = out["model.embed_tokens.weight"]  # keep the tie
    return out


def test_make_engine_builds_the_vllm_engine(setup):
    assert isinstance(setup.engine, VLLMEngine)
    assert setup.engine.prefix_caching  # so the weight-update test exercises its reset


def test_vllm_logprobs_equal_the_trainers_recomputed_logprobs(setup):
    s = setup
    groups = s.engine.generate(
        s.prompts, n=3, temperature=0.7, top_p=1.0, max_new_tokens=12, seed=5
    )
    ps, cs = flat(s.prompts, groups)
    ours = trainer_logprobs(s.model, ps, cs, s.tok.pad_token_id, temperature=0.7)
    for c, t in zip(cs, ours):
        assert len(c.logprobs) == len(c.token_ids) > 0
        assert torch.allclose(torch.tensor(c.logprobs), t, atol=LOGP_ATOL), (c.logprobs, t)


def test_top_p_logprobs_are_those_of_the_renormalised_nucleus(setup):
    s = setup
    T, top_p = 1.0, 0.9
    groups = s.engine.generate(
        s.prompts, n=3, temperature=T, top_p=top_p, max_new_tokens=12, seed=3
    )
    ps, cs = flat(s.prompts, groups)
    gained = 0.0
    for c, logits in zip(cs, trainer_logits(s.model, ps, cs, s.tok.pad_token_id)):
        logp = torch.log_softmax(logits / T, -1)
        srt, idx = logp.sort(-1, descending=True)
        before = srt.exp().cumsum(-1) - srt.exp()  # mass of strictly likelier tokens
        nucleus = torch.full_like(logp, float("-inf")).scatter(
            -1, idx, srt.masked_fill(before >= top_p, float("-inf"))
        )
        nucleus = torch.log_softmax(nucleus, -1)
        tok = torch.tensor(c.token_ids)[:, None]
        want = nucleus.gather(-1, tok).squeeze(-1)
        raw = logp.gather(-1, tok).squeeze(-1)
        assert torch.isfinite(want).all()  # every sample lies in the nucleus
        assert torch.allclose(torch.tensor(c.logprobs), want, atol=LOGP_ATOL)
        gained = max(gained, (want - raw).min().item())
    assert gained > 1e-3  # renormalisation raised the log-probs (nucleus mass < 1)


def test_greedy_completions_are_the_trainers_argmax_with_untempered_logprobs(setup):
    s = setup
    groups = s.engine.generate(
        s.prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=10, seed=0, stop_token_ids=[]
    )
    ps, cs = flat(s.prompts, groups)
    for c, logits in zip(cs, trainer_logits(s.model, ps, cs, s.tok.pad_token_id)):
        assert c.token_ids == logits.argmax(-1).tolist()
        want = torch.log_softmax(logits, -1).gather(-1, torch.tensor(c.token_ids)[:, None])
        assert torch.allclose(torch.tensor(c.logprobs), want.squeeze(-1), atol=LOGP_ATOL)


def test_update_weights_makes_the_engine_sample_from_the_new_weights(setup):
    s = setup
    kw = dict(n=2, temperature=0.7, top_p=1.0, max_new_tokens=12, seed=11)
    s.engine.generate(s.prompts, **kw)  # fills the prefix cache under the old weights
    old_model, _ = load_model(s.path)
    try:
        s.load(perturbed(s.base, seed=1))
        groups = s.engine.generate(s.prompts, **kw)
        ps, cs = flat(s.prompts, groups)
        new = trainer_logprobs(s.model, ps, cs, s.tok.pad_token_id, temperature=0.7)
        old = trainer_logprobs(old_model, ps, cs, s.tok.pad_token_id, temperature=0.7)
        moved = 0.0
        for c, n_, o in zip(cs, new, old):
            assert torch.allclose(torch.tensor(c.logprobs), n_, atol=LOGP_ATOL)
            moved = max(moved, (torch.tensor(c.logprobs) - o).abs().max().item())
        assert moved > 0.05  # ... and the old weights' values are not them
    finally:
        s.restore()
    # back on the original weights, the engine agrees with the original model again
    groups = s.engine.generate(s.prompts, **kw)
    ps, cs = flat(s.prompts, groups)
    for c, o in zip(cs, trainer_logprobs(old_model, ps, cs, s.tok.pad_token_id, 0.7)):
        assert torch.allclose(torch.tensor(c.logprobs), o, atol=LOGP_ATOL)


def test_update_weights_with_a_zero_final_norm_makes_greedy_pick_token_0(setup):
    s = setup
    sd = dict(s.base)
    # A zero final norm makes every logit 0: greedy then picks token 0 whatever the input.
    sd["model.norm.weight"] = torch.zeros_like(sd["model.norm.weight"])
    try:
        s.load(sd)
        out = s.engine.generate(
            s.prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=8, seed=0, stop_token_ids=[]
        )
    finally:
        s.restore()
    assert all(c.token_ids == [0] * 8 for g in out for c in g)
    uniform = -torch.log(torch.tensor(float(s.model.config.vocab_size))).item()
    assert all(lp == pytest.approx(uniform, abs=1e-4) for g in out for c in g for lp in c.logprobs)


def test_generation_is_deterministic_for_a_seed_and_differs_across_seeds(setup):
    s = setup
    kw = dict(n=4, temperature=1.0, top_p=1.0, max_new_tokens=10)
    a = s.engine.generate(s.prompts, seed=1, **kw)
    b = s.engine.generate(s.prompts, seed=1, **kw)
    c = s.engine.generate(s.prompts, seed=2, **kw)
    ids = lambda gs: [[x.token_ids for x in g] for g in gs]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert [[x.logprobs for x in g] for g in a] == [[x.logprobs for x in g] for g in b]


def test_each_prompt_gets_n_completions_and_repeated_prompts_get_their_own_samples(setup):
    s = setup
    p = s.prompts[0]
    out = s.engine.generate(
        [p, p, s.prompts[1]],
        n=4,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=10,
        seed=0,
        stop_token_ids=[],
    )
    assert [len(g) for g in out] == [4, 4, 4]
    ids = [[c.token_ids for c in g] for g in out]
    assert ids[0] != ids[1]  # same prompt, different streams
    assert len({tuple(t) for t in ids[0]}) == 4  # n samples differ from each other
    assert all(len(c.token_ids) == 10 and c.finish_reason == "length" for g in out for c in g)


def test_generation_stops_at_a_stop_token_and_includes_it(setup):
    s = setup
    vocab = s.model.config.vocab_size
    # Stop on every token id: each completion is exactly one token long.
    out = s.engine.generate(
        s.prompts,
        n=2,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=10,
        seed=0,
        stop_token_ids=list(range(vocab)),
    )
    assert all(len(c.token_ids) == 1 and c.finish_reason == "stop" for g in out for c in g)
    assert all(len(c.logprobs) == 1 for g in out for c in g)
    out = s.engine.generate(
        s.prompts, n=2, temperature=1.0, top_p=1.0, max_new_tokens=7, seed=0, stop_token_ids=[]
    )
    assert all(len(c.token_ids) == 7 and c.finish_reason == "length" for g in out for c in g)


def test_the_default_stop_token_is_eos_and_ends_the_completion(setup):
    s = setup
    eos = s.tok.eos_token_id
    out = s.engine.generate(s.prompts, n=8, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=0)
    stopped = 0
    for c in (c for g in out for c in g):
        assert eos not in c.token_ids[:-1]
        assert (c.finish_reason == "stop") == (c.token_ids[-1] == eos)
        assert c.finish_reason == "stop" or len(c.token_ids) == 64
        stopped += c.finish_reason == "stop"
    assert stopped > 0  # a random 128-token model hits EOS within 32 x 64 draws


def test_prompts_without_tokens_or_without_room_are_rejected(setup):
    s = setup
    with pytest.raises(ValueError, match="at least one token"):
        s.engine.generate([[5], []], n=1, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0)
    full = [5] * s.engine.max_model_len
    with pytest.raises(ValueError, match="leaves no room"):
        s.engine.generate([full], n=1, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0)
    assert s.engine.generate([], n=2, temperature=1.0, top_p=1.0, max_new_tokens=4, seed=0) == []


def test_the_first_samples_of_a_larger_evaluation_are_the_smaller_evaluation(setup):
    """Nested draws on vLLM (issue 40; test_evaluate has the torch engine's): the first two
    samples of each of 8 problems in a 24 x 8 evaluation are the 8 x 2 evaluation."""
    from evaluators.benchmarks import aime
    from toys import nested_draws

    records = aime.generate(24, split="test", seed=3, difficulty="easy")
    small, first_two = nested_draws(setup.engine, setup.tok, records)
    assert small == first_two
    assert any(a != b for a, b in small)


def test_asking_the_vllm_engine_for_routed_experts_is_refused_with_the_alternative(setup):
    with pytest.raises(NotImplementedError, match="routed experts.*use the torch engine"):
        setup.engine.generate(setup.prompts[:1], n=1, max_new_tokens=4, seed=0, return_routing=True)


def test_update_weights_sends_the_layout_save_pretrained_writes(setup):
    s = setup
    sd = checkpoint_state_dict(s.model.config, s.model.state_dict())
    on_disk = load_file(str(s.path / "model.safetensors"))
    assert sorted(sd) == sorted(on_disk)  # e.g. per-expert MoE weights, no tied lm_head
    assert all(torch.equal(sd[k], on_disk[k]) for k in on_disk)


def test_options_the_engine_cannot_honour_are_rejected_before_starting_vllm(tiny_model_dir):
    other = "cuda" if _vllm_device_type() == "cpu" else "cpu"
    with pytest.raises(ValueError, match="installed vLLM build"):
        VLLMEngine(tiny_model_dir, device=other)
    if _vllm_device_type() == "cpu":
        with pytest.raises(ValueError, match="sleep mode needs CUDA"):
            VLLMEngine(tiny_model_dir, sleep=True)
    with pytest.raises(ValueError, match="processed_logprobs"):
        VLLMEngine(tiny_model_dir, logprobs_mode="raw_logprobs")
    with pytest.raises(ValueError, match="dtype"):
        VLLMEngine(tiny_model_dir, dtype="int8")


def test_a_short_gspo_run_with_vllm_rollouts_and_rollout_logprobs_trains_end_to_end(
    tmp_path, toy_data, toy_sft_model
):
    from evaluators.tasks import rewards
    from gspo.config.train import DataSource, RLConfig, RolloutConfig
    from gspo.native.trainer import run_rl
    from gspo.tracking.runs import read_metrics

    data, sft = toy_data / "train.jsonl", toy_sft_model
    out = run_rl(
        RLConfig(
            algorithm="gspo",
            model=str(sft),
            out_dir=str(tmp_path / "rl"),
            train_data=[DataSource(str(data))],
            steps=3,
            prompts_per_step=4,
            group_size=4,
            minibatches=2,
            lr=1e-3,
            max_new_tokens=32,
            rollout=RolloutConfig(engine="vllm"),
            old_logprobs="rollout",
            threads=1,
        ),
        rewards,
    )
    rows = read_metrics(tmp_path / "rl" / "metrics.jsonl")
    assert [r["step"] for r in rows] == [1, 2, 3]
    assert all(r["old_logprob_passes"] == 0 for r in rows)
    # vLLM's float32 log-probs are the policy's: the on-policy minibatch sees ratio ~1.
    assert all(r["logprob_gap_token_max"] < 1e-3 for r in rows)
    assert any(r["zero_variance_groups"] < 1 for r in rows)
    a, b = load_file(str(sft / "model.safetensors")), load_file(str(out / "model.safetensors"))
    assert any(not torch.equal(a[k], b[k]) for k in a)


def test_each_ranks_engine_sees_only_its_own_gpu_while_vllm_starts(monkeypatch):
    from gspo.rollout.vllm_engine import _visible_gpu

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,5,6")
    with _visible_gpu("1"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "5"  # local rank 1: the second one
    assert os.environ["CUDA_VISIBLE_DEVICES"] == "4,5,6"
    with pytest.raises(ValueError, match="shows 3 GPU"):
        with _visible_gpu("3"):
            pass
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    with _visible_gpu("2"):
        assert os.environ["CUDA_VISIBLE_DEVICES"] == "2"
    assert "CUDA_VISIBLE_DEVICES" not in os.environ
    with _visible_gpu(""):  # plain "cuda": left alone
        assert "CUDA_VISIBLE_DEVICES" not in os.environ


def test_each_local_rank_binds_its_cpu_engine_to_its_own_cores_unless_the_user_chose(monkeypatch):
    from gspo.rollout.vllm_engine import _rank_cores

    cores = sorted(os.sched_getaffinity(0))
    monkeypatch.delenv("VLLM_CPU_OMP_THREADS_BIND", raising=False)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert _rank_cores() is None  # one process: vLLM's own binding
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    per = max(1, len(cores) // 2)
    shares = []
    for rank in (0, 1):
        monkeypatch.setenv("LOCAL_RANK", str(rank))
        shares.append([int(c) for c in _rank_cores().split(",")])
    assert shares[0] == cores[:per] and len(shares[1]) == per
    if len(cores) >= 2:
        assert not set(shares[0]) & set(shares[1])  # two ranks never share a core
    monkeypatch.setenv("VLLM_CPU_OMP_THREADS_BIND", "nobind")
    assert _rank_cores() is None  # the user's choice stands
