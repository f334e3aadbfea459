import math

import pytest
import torch
from transformers import AutoTokenizer

from gspo.model.logprobs import sequence_logprobs
from gspo.model.models import load_model
from gspo.native.data import pad_batch
from gspo.rollout import make_engine
from gspo.rollout.torch_engine import sample_next, sample_seeds


@pytest.fixture(scope="module", params=["tiny", "tiny-moe"])
def setup(request, tiny_model_dir, tiny_moe_model_dir):
    path = tiny_model_dir if request.param == "tiny" else tiny_moe_model_dir
    tok = AutoTokenizer.from_pretrained(path)
    prompts = [
        tok(t, add_special_tokens=False).input_ids
        for t in ["Compute (7*3+5) mod 1000.\n", "Hi\n", "x"]
    ]
    return path, tok, prompts


def test_engine_logprobs_equal_the_trainers_recomputed_logprobs(setup):
    path, tok, prompts = setup
    engine = make_engine("torch", path)
    model, _ = load_model(path)
    groups = engine.generate(prompts, n=3, temperature=0.7, top_p=1.0, max_new_tokens=12, seed=5)
    flat_p = [p for p, g in zip(prompts, groups) for _ in g]
    flat_c = [c for g in groups for c in g]
    batch = pad_batch(flat_p, [c.token_ids for c in flat_c], tok.pad_token_id)
    with torch.no_grad():
        logp = sequence_logprobs(model, batch, temperature=0.7)
    for i, (p, c) in enumerate(zip(flat_p, flat_c)):
        ours = logp[i, len(p) - 1 : len(p) - 1 + len(c.token_ids)]
        assert len(c.logprobs) == len(c.token_ids)
        assert torch.allclose(ours, torch.tensor(c.logprobs), atol=1e-4)


def test_generation_is_deterministic_for_a_seed_and_differs_across_seeds(setup):
    path, _, prompts = setup
    engine = make_engine("torch", path)
    kw = dict(n=4, temperature=1.0, top_p=1.0, max_new_tokens=10)
    a = engine.generate(prompts, seed=1, **kw)
    b = engine.generate(prompts, seed=1, **kw)
    c = engine.generate(prompts, seed=2, **kw)
    ids = lambda gs: [[x.token_ids for x in g] for g in gs]  # noqa: E731
    assert ids(a) == ids(b) and ids(a) != ids(c)
    assert [len(g) for g in a] == [4, 4, 4]


def test_generation_stops_at_a_stop_token_and_includes_it(setup):
    path, _, prompts = setup
    engine = make_engine("torch", path)
    # Stop on every token id: each completion is exactly one token long.
    out = engine.generate(
        prompts,
        n=2,
        temperature=1.0,
        top_p=1.0,
        max_new_tokens=10,
        seed=0,
        stop_token_ids=list(range(128)),
    )
    assert all(len(c.token_ids) == 1 and c.finish_reason == "stop" for g in out for c in g)
    out = engine.generate(
        prompts, n=2, temperature=1.0, top_p=1.0, max_new_tokens=7, seed=0, stop_token_ids=[]
    )
    assert all(len(c.token_ids) == 7 and c.finish_reason == "length" for g in out for c in g)


def test_update_weights_changes_what_the_engine_samples(setup):
    path, _, prompts = setup
    engine = make_engine("torch", path)
    model, _ = load_model(path)
    before = engine.generate(prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=8, seed=0)
    sd = model.state_dict()
    # A zero final norm makes every logit 0: greedy then picks token 0 whatever the input.
    sd["model.norm.weight"] = torch.zeros_like(sd["model.norm.weight"])
    engine.update_weights(sd)
    after = engine.generate(
        prompts, n=1, temperature=0.0, top_p=1.0, max_new_tokens=8, seed=0, stop_token_ids=[]
    )
    assert all(c.token_ids == [0] * 8 for g in after for c in g)
    assert before != after


def test_top_p_logprobs_are_those_of_the_renormalised_nucleus():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    gen = torch.Generator().manual_seed(0)
    seen = set()
    for _ in range(200):
        tok, lp = sample_next(logits, 1.0, 0.8, [gen])
        seen.add(int(tok))
        # nucleus {0, 1} has mass 0.8: p = 0.5/0.8 or 0.3/0.8
        assert lp.item() == pytest.approx(math.log([0.625, 0.375][int(tok)]), abs=1e-5)
    assert seen == {0, 1}


def test_an_unknown_engine_name_is_rejected():
    with pytest.raises(ValueError, match="unknown rollout engine 'sglang'"):
        make_engine("sglang", "x")


def test_with_one_seed_per_prompt_a_prompts_samples_do_not_depend_on_its_batch(tiny_model_dir):
    from gspo.model.models import load_model
    from gspo.rollout import make_engine

    model, tok = load_model(tiny_model_dir)
    engine = make_engine("torch", tiny_model_dir, model=model)
    prompts = [tok(t).input_ids for t in ("1+2=", "33*4=", "7-5=", "100+1=")]
    kw = dict(n=3, temperature=1.0, top_p=1.0, max_new_tokens=10)
    together = engine.generate(prompts, seed=[11, 12, 13, 14], **kw)
    apart = engine.generate(prompts[2:], seed=[13, 14], **kw) + engine.generate(
        prompts[:2], seed=[11, 12], **kw
    )
    apart = apart[2:] + apart[:2]
    assert [[c.token_ids for c in g] for g in together] == [[c.token_ids for c in g] for g in apart]
    # each prompt's own seed matters
    other = engine.generate(prompts, seed=[11, 12, 99, 14], **kw)
    assert [c.token_ids for c in other[2]] != [c.token_ids for c in together[2]]
    assert [c.token_ids for c in other[0]] == [c.token_ids for c in together[0]]


def test_the_exponential_race_samples_each_row_from_its_distribution():
    # 4000 rows, each with its own generator: the frequencies are the probabilities
    p = torch.tensor([0.5, 0.3, 0.15, 0.05])
    gens = [torch.Generator().manual_seed(s) for s in range(4000)]
    tok, lp = sample_next(p.log().expand(4000, 4), 1.0, 1.0, gens)
    freq = torch.bincount(tok, minlength=4) / 4000
    assert torch.allclose(freq, p, atol=0.025), freq  # ~3.5 standard errors
    assert torch.allclose(lp, p.log()[tok])


def test_a_rows_draw_depends_on_its_own_generator_not_on_the_rows_beside_it():
    logits = torch.randn(6, 50, generator=torch.Generator().manual_seed(0))
    alone = [
        sample_next(logits[i : i + 1], 1.0, 1.0, [torch.Generator().manual_seed(i)])[0]
        for i in range(6)
    ]
    together, _ = sample_next(
        logits, 1.0, 1.0, [torch.Generator().manual_seed(i) for i in range(6)]
    )
    assert together.tolist() == torch.cat(alone).tolist()


def test_noise_drawn_several_steps_ahead_is_the_noise_of_one_draw_per_step():
    from gspo.rollout.torch_engine import RaceNoise

    V, steps = 5, 7
    ref = [torch.Generator().manual_seed(s) for s in range(3)]
    want = [[torch.empty(V).exponential_(generator=g) for _ in range(steps)] for g in ref]
    noise = RaceNoise(
        [torch.Generator().manual_seed(s) for s in range(3)], V, steps, budget=4 * V * 3 * 3
    )
    assert noise.block == 3  # refills at steps 0, 3, 6: rows drop in between
    for t in range(steps):
        rows = torch.tensor([0, 1, 2] if t < 4 else [0, 2])  # row 1 stops after step 3
        got = noise.at(rows, t)
        assert all(torch.equal(got[i], want[r][t]) for i, r in enumerate(rows.tolist()))


def test_sample_seeds_follow_vllms_request_seeds():
    assert sample_seeds(3, 2, 2) == [12, 13, 14, 15]  # (3*2+i)*2 + j
    # one seed per prompt: its first sample's, then + j whatever n is (a vLLM request seeded s)
    assert sample_seeds([5, 9], 2, 3) == [5, 6, 7, 9, 10, 11]
    assert sample_seeds([5, 9], 2, 2) == [5, 6, 9, 10]
    assert len(set(sample_seeds(0, 10, 4))) == 40


def test_problem_seeds_leave_room_for_every_sample_and_depend_on_seed_and_id_alone():
    from gspo.rollout.base import SAMPLE_SLOTS, problem_seed

    ids = [f"aime-test-{i}" for i in range(2000)]
    seeds = [problem_seed(1234, i) for i in ids]
    assert seeds == [problem_seed(1234, i) for i in ids]  # a pure function
    assert all(s % SAMPLE_SLOTS == 0 and 0 <= s < 2**63 for s in seeds)
    assert len(set(seeds)) == len(ids)  # streams 2**20 apart
    assert seeds != [problem_seed(1235, i) for i in ids]


def test_two_close_models_with_the_same_seeds_share_their_sampling_noise(tiny_model_dir):
    """Common random numbers: a checkpoint and a slightly moved copy, sampled with the same
    seeds, make the same choices wherever their distributions nearly agree, so their paired
    scores differ far less than two independent samplings would."""
    from gspo.model.models import load_model

    model, tok = load_model(tiny_model_dir)
    moved, _ = load_model(tiny_model_dir)
    with torch.no_grad():
        g = torch.Generator().manual_seed(1)
        for p in moved.parameters():
            p.add_(1e-3 * p.abs().mean() * torch.randn(p.shape, generator=g))
    prompts = [tok(t).input_ids for t in ("1+2=", "33*4=", "7-5=", "100+1=")]
    # rows stop at different steps (a shared stream would then shift under the rows after them)
    kw = dict(n=16, temperature=1.0, top_p=1.0, max_new_tokens=12, stop_token_ids=list(range(12)))

    def sample(m, seed):
        groups = make_engine("torch", tiny_model_dir, model=m).generate(prompts, seed=seed, **kw)
        return [c.token_ids for g in groups for c in g]

    base, same_seeds, other_seeds = sample(model, 7), sample(moved, 7), sample(moved, 8)
    paired = sum(a == b for a, b in zip(base, same_seeds)) / len(base)
    unpaired = sum(a == b for a, b in zip(base, other_seeds)) / len(base)
    assert paired > 0.8 and unpaired < 0.2, (paired, unpaired)
