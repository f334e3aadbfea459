import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from gspo.model.models import CHARS, PRESETS, build_tiny, count_params


def test_building_a_preset_twice_with_one_seed_gives_identical_weights(tmp_path):
    a = AutoModelForCausalLM.from_pretrained(build_tiny("tiny", tmp_path / "a", seed=3))
    b = AutoModelForCausalLM.from_pretrained(build_tiny("tiny", tmp_path / "b", seed=3))
    c = AutoModelForCausalLM.from_pretrained(build_tiny("tiny", tmp_path / "c", seed=4))
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert not all(torch.equal(sa[k], sc[k]) for k in sa)


def test_the_tiny_preset_is_a_qwen3_well_under_a_million_parameters(tiny_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert model.config.model_type == "qwen3"
    assert count_params(model)["total"] < 500_000


def test_the_moe_preset_routes_each_token_to_two_of_eight_experts(tiny_moe_model_dir):
    model = AutoModelForCausalLM.from_pretrained(tiny_moe_model_dir)
    cfg = model.config
    assert cfg.model_type == "qwen3_moe" and cfg.num_experts == 8 and cfg.num_experts_per_tok == 2
    n = count_params(model)
    assert n["matmul"] < n["total"]  # only the routed experts count per token


def test_the_tokenizer_round_trips_every_character_the_tasks_use(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    text = "Compute (7*3+5-2) mod 1000.\n\\boxed{24}\n```python\nprint(int(input())*2)\n```\t~"
    ids = tok(text, add_special_tokens=False).input_ids
    assert len(ids) == len(text)
    assert tok.decode(ids) == text
    assert tok.unk_token_id not in tok("".join(CHARS), add_special_tokens=False).input_ids
    assert tok.eos_token_id != tok.pad_token_id


def test_a_saved_preset_generates_with_transformers_by_path(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    out = model.generate(**tok("1+1=", return_tensors="pt"), max_new_tokens=3, do_sample=False)
    assert out.shape[1] == 4 + 3


def test_every_preset_builds(tmp_path):
    corpus = ["1+1=2", "print(input())"] * 20  # the BPE preset trains on the texts it gets
    for name in PRESETS:
        assert (build_tiny(name, tmp_path / name, corpus=corpus) / "config.json").is_file()
