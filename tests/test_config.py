import pytest

from gspo.config.fields import ConfigError, describe, from_dict, load
from gspo.config.train import DataSource, RLConfig, SFTConfig


def write(tmp_path, text):
    p = tmp_path / "c.yaml"
    p.write_text(text)
    return p


def test_clip_ranges_default_to_each_algorithms_paper_setting():
    src = [DataSource("x.jsonl")]
    assert (
        RLConfig(algorithm="gspo", train_data=src).eps_low,
        RLConfig(algorithm="gspo", train_data=src).eps_high,
    ) == (3e-4, 4e-4)
    assert (
        RLConfig(algorithm="grpo", train_data=src).eps_low,
        RLConfig(algorithm="grpo", train_data=src).eps_high,
    ) == (0.2, 0.27)
    assert (
        RLConfig(algorithm="dapo", train_data=src).eps_high,
        RLConfig(algorithm="dapo", train_data=src).agg,
    ) == (0.28, "token-mean")
    dr = RLConfig(algorithm="dr_grpo", train_data=src)
    assert (dr.adv_scale, dr.agg) == ("none", "seq-mean-token-sum-norm")
    assert RLConfig(algorithm="gspo", train_data=src).agg == "seq-mean-token-mean"
    # a field set by hand wins over the objective's default
    assert (
        RLConfig(algorithm="dapo", agg="seq-mean-token-mean", train_data=src).agg
        == "seq-mean-token-mean"
    )
    assert RLConfig(train_data=src).kl_coef == 0.0


def test_every_field_of_every_stage_config_has_a_help_text():
    for cls in (SFTConfig, RLConfig):
        for name, _type, _default, help_text in describe(cls):
            assert help_text, f"{cls.__name__}.{name} has no help"


def test_an_unknown_field_is_named_with_the_known_ones(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml: lrr: unknown field \(known: .*lr,"):
        load(RLConfig, write(tmp_path, "lrr: 0.1\ntrain_data: [{path: a}]\n"))


def test_a_wrong_type_names_the_dotted_field(tmp_path):
    with pytest.raises(ConfigError, match=r"rollout.engine: expected a string"):
        load(RLConfig, write(tmp_path, "train_data: [{path: a}]\nrollout: {engine: 3}\n"))
    with pytest.raises(ConfigError, match=r"train_data\[0\].weight: must be > 0"):
        load(RLConfig, write(tmp_path, "train_data: [{path: a, weight: -1}]\n"))


def test_an_unknown_algorithm_is_rejected_with_the_valid_choices(tmp_path):
    with pytest.raises(
        ConfigError,
        match=r"algorithm: must be one of \['cispo', 'clip_cov', 'dapo', 'dppo_kl', 'dppo_tv', "
        r"'dr_grpo', 'gmpo', 'grpo', 'gspo', 'gspo_token', 'kl_cov', 'luspo', "
        r"'sapo', 'vespo'\]",
    ):
        load(RLConfig, write(tmp_path, "algorithm: ppo\ntrain_data: [{path: a}]\n"))


def test_malformed_yaml_reports_the_line(tmp_path):
    with pytest.raises(ConfigError, match=r"c.yaml:2: malformed YAML"):
        load(RLConfig, write(tmp_path, "steps: 3\n  bad: [\n"))


def test_overrides_apply_dotted_keys_and_yaml_values(tmp_path):
    cfg = load(
        RLConfig,
        write(tmp_path, "train_data: [{path: a}]\n"),
        ["rollout.dtype=bfloat16", "lr=5e-5", "steps=7"],
    )
    assert cfg.rollout.dtype == "bfloat16" and cfg.lr == 5e-5 and cfg.steps == 7


def test_the_shipped_configs_load(tmp_path):
    import pathlib

    root = pathlib.Path(__file__).resolve().parents[1] / "config"
    assert load(SFTConfig, root / "sft.yaml").model == "tiny"
    assert load(RLConfig, root / "rl.yaml").minibatches == 4


def test_from_dict_builds_nested_dataclasses():
    cfg = from_dict(RLConfig, {"train_data": [{"path": "a", "weight": 2}]})
    assert cfg.train_data[0] == DataSource("a", 2.0)


def test_vllm_knobs_pass_through_with_zero_meaning_the_engines_default(tmp_path):
    cfg = load(
        RLConfig,
        write(
            tmp_path,
            "train_data: [{path: a}]\nrollout: {engine: vllm, "
            "gpu_memory_utilization: 0.25, tensor_parallel_size: 2}\n",
        ),
    )
    assert cfg.rollout.vllm_options() == {
        "gpu_memory_utilization": 0.25,
        "max_model_len": None,
        "tensor_parallel_size": 2,
        "sleep": False,
    }
    assert (
        RLConfig(train_data=[DataSource("a")]).rollout.vllm_options()["gpu_memory_utilization"]
        is None
    )


def test_a_vllm_knob_out_of_range_names_the_field_and_the_range(tmp_path):
    with pytest.raises(ConfigError, match=r"rollout.gpu_memory_utilization: must be in \[0, 1\)"):
        load(
            RLConfig,
            write(tmp_path, "train_data: [{path: a}]\nrollout: {gpu_memory_utilization: 1.5}\n"),
        )
    with pytest.raises(ConfigError, match=r"rollout.tensor_parallel_size: must be >= 1"):
        load(
            RLConfig,
            write(tmp_path, "train_data: [{path: a}]\nrollout: {tensor_parallel_size: 0}\n"),
        )
    with pytest.raises(
        ConfigError,
        match=r"rollout.sleep: is vLLM's sleep mode: it needs engine: "
        r"vllm and a cuda device",
    ):
        load(
            RLConfig,
            write(tmp_path, "train_data: [{path: a}]\nrollout: {engine: vllm, sleep: true}\n"),
        )
    with pytest.raises(
        ConfigError,
        match=r"precision: must be float32 or bfloat16 \(the engines' "
        r"dtype names, as rollout.dtype\), got 'bf16'",
    ):
        load(RLConfig, write(tmp_path, "train_data: [{path: a}]\nprecision: bf16\n"))


def _schema_defaults_vs(cls, node, schema, path) -> list[str]:
    """Every schema property of `node` that is a field of `cls` must have the field's default
    (nested dataclasses are compared field by field)."""
    import dataclasses as dc

    fields = {f.name: f for f in dc.fields(cls)}
    out = []
    for name, sub in (node.get("properties") or {}).items():
        if "$ref" in sub:
            sub = {**schema["$defs"][sub["$ref"].split("/")[-1]], **sub}
        if name not in fields:
            continue
        f = fields[name]
        default = f.default if f.default is not dc.MISSING else f.default_factory()
        if dc.is_dataclass(default):
            out += _schema_defaults_vs(type(default), sub, schema, f"{path}.{name}")
        elif sub.get("default") != default:
            out.append(
                f"{path}.{name}: schema {sub.get('default')!r}, {cls.__name__}.{name} {default!r}"
            )
    return out


def test_the_workflow_schema_defaults_are_the_config_dataclasses_defaults():
    """One source of truth: a stage section's defaults in the schema are its dataclass's."""
    import pathlib

    import yaml

    from evaluators.evaluation import EvalConfig
    from gspo.config.data import DataGenConfig

    schema = yaml.safe_load(
        (
            pathlib.Path(__file__).resolve().parents[1]
            / "workflow"
            / "schemas"
            / "config.schema.yaml"
        ).read_text()
    )
    props = schema["properties"]
    bad = []
    for key, cls in (
        ("sft", SFTConfig),
        ("rl", RLConfig),
        ("eval", EvalConfig),
        ("data", DataGenConfig),
    ):
        bad += _schema_defaults_vs(cls, props[key], schema, key)
    assert not bad, "\n".join(bad)


def test_a_setting_that_does_not_apply_to_the_objective_is_a_one_line_error(tmp_path):
    with pytest.raises(ConfigError, match=r"eps_low/eps_high: sapo has no clip"):
        load(RLConfig, write(tmp_path, "algorithm: sapo\neps_high: 0.3\ntrain_data: [{path: a}]\n"))
    with pytest.raises(
        ConfigError,
        match=r"sapo_tau_pos/sapo_tau_neg: apply to algorithm: sapo "
        r"only, not gspo",
    ):
        load(RLConfig, write(tmp_path, "sapo_tau_neg: 2.0\ntrain_data: [{path: a}]\n"))
    sapo = load(
        RLConfig, write(tmp_path, "algorithm: sapo\nsapo_tau_neg: 2.0\ntrain_data: [{path: a}]\n")
    )
    assert (sapo.sapo_tau_pos, sapo.sapo_tau_neg, sapo.eps_low) == (1.0, 2.0, 0.0)
    # CISPO's default lower bound 1.0 (no bound: a weight is never below 0) is valid for it
    assert RLConfig(algorithm="cispo", train_data=[DataSource("a")]).eps_low == 1.0
