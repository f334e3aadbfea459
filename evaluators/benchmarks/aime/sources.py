"""The public math datasets' published layouts, turned into the plain rows evaluators.benchmarks.aime.load
reads (problem / answer / solution / id), and the hub names that need more than one config.

Layouts (see the dataset cards; `layout_of` tells them apart by their columns):

* plain: AIME 2024 `HuggingFaceH4/aime_2024` (id, problem, solution, answer, url, year), AIME 2025
  `opencompass/AIME2025` (question, answer) and the other flat copies: read by aime.load as they are.
* dapo: DAPO-Math-17k, verl's RL layout (data_source, prompt = [{content, role}], ability,
  reward_model = {ground_truth, style}, extra_info = {index}). The problem is the user message's
  content with DAPO's wrapper (the "Solve the following math problem step by step. The last line
  of your response should be of the form Answer: $Answer ..." preamble and the "Remember to put
  your answer on its own line after "Answer:"." reminder) stripped, so that its prompt is the
  project's own (`aime.make_prompt`, the boxed-answer instruction) like every other AIME record;
  a user message without the wrapper is kept whole. answer = reward_model.ground_truth,
  id = extra_info.index. The published file repeats each problem many times: rows whose index was
  already read are skipped and counted.
* openr1: OpenR1-Math-220k (problem, solution, answer, generations, correctness_math_verify,
  uuid, messages, ...). The SFT solution is the first generation whose correctness_math_verify is
  true; rows with none are skipped and counted. id = uuid.
"""

from __future__ import annotations

from gspo.io import DataError

DAPO_PREAMBLE = (
    "Solve the following math problem step by step. The last line of your response "
    "should be of the form Answer: $Answer (without quotes) where $Answer is the "
    "answer to the problem."
)
DAPO_REMINDER = 'Remember to put your answer on its own line after "Answer:".'

# Hub datasets published as several configs, all read and concatenated: name -> (split, configs).
HUB_CONFIGS = {"opencompass/AIME2025": ("test", ("AIME2025-I", "AIME2025-II"))}


def layout_of(columns) -> str:
    """'dapo', 'openr1' or 'plain', from a dataset's column names."""
    cols = set(columns or ())
    if {"prompt", "reward_model"} <= cols:
        return "dapo"
    if {"generations", "correctness_math_verify"} <= cols:
        return "openr1"
    return "plain"


def strip_dapo_wrapper(text: str) -> str:
    """The problem inside DAPO's user message (the text itself when it has no wrapper)."""
    text = text.strip()
    if text.startswith(DAPO_PREAMBLE):
        text = text[len(DAPO_PREAMBLE) :].strip()
    if text.endswith(DAPO_REMINDER):
        text = text[: -len(DAPO_REMINDER)].strip()
    return text


def _missing(where: str, field: str) -> DataError:
    return DataError(f"{where}: record is missing field {field!r}")


def dapo_row(row: dict, where: str) -> dict:
    """The plain row of a DAPO-Math (verl layout) row; `where` names the file and row."""
    messages = row.get("prompt")
    if not isinstance(messages, (list, tuple)):
        raise _missing(where, "prompt")
    user = [m.get("content") for m in messages if isinstance(m, dict) and m.get("role") == "user"]
    if not user or not isinstance(user[-1], str) or not user[-1].strip():
        raise _missing(where, "prompt[role=user].content")
    reward = row.get("reward_model")
    truth = reward.get("ground_truth") if isinstance(reward, dict) else None
    if truth is None or not str(truth).strip():
        raise _missing(where, "reward_model.ground_truth")
    extra = row.get("extra_info")
    index = extra.get("index") if isinstance(extra, dict) else None
    out = {"problem": strip_dapo_wrapper(user[-1]), "answer": truth}
    if index is not None and str(index).strip():
        out["id"] = f"dapo-{str(index).strip()}"
    return out


def openr1_row(row: dict, where: str) -> dict | None:
    """The plain row of an OpenR1-Math row, its solution the first generation math-verify found
    correct; None when there is none."""
    gens, ok = row.get("generations"), row.get("correctness_math_verify")
    if not isinstance(gens, (list, tuple)):
        raise _missing(where, "generations")
    if not isinstance(ok, (list, tuple)):
        raise _missing(where, "correctness_math_verify")
    trace = next(
        (g for g, good in zip(gens, ok) if good is True and isinstance(g, str) and g.strip()), None
    )
    if trace is None:
        return None
    out = {k: row.get(k) for k in ("problem", "answer")}
    uuid = row.get("uuid")
    if uuid is not None and str(uuid).strip():
        out["id"] = f"openr1-{str(uuid).strip()}"
    out["solution"] = trace
    return out


def offline_message(name: str) -> str:
    """The one line for a hub dataset that is neither cached nor reachable."""
    configs = HUB_CONFIGS.get(name, (None, ()))[1]
    what = f" (configs {', '.join(configs)})" if configs else ""
    return (
        f"{name}{what}: not in the local Hugging Face cache and no network; download it with "
        f"`huggingface-cli download {name} --repo-type dataset` or point data.files at local "
        "files"
    )


def hub_rows(load, name: str) -> list[dict]:
    """Rows of every config of a HUB_CONFIGS dataset through `load(name, config, split=...)`,
    concatenated; each gets id '<config>-<n>' (1-based) unless it has one."""
    split, configs = HUB_CONFIGS[name]
    out = []
    for config in configs:
        for k, row in enumerate(load(name, config, split=split)):
            row = dict(row)
            row.setdefault("id", f"{config}-{k + 1:02d}")
            out.append(row)
    return out
