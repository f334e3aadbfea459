"""benchmarks/gpu_check.py's generic parts: the memory sampler, the random Qwen3 writer, the
parameter and FLOP counts read from a saved model, a timing wrapper and the report's table.
Nothing here knows the check's phases beyond the names it is handed."""

from __future__ import annotations

import pathlib
import threading
import time

GIB = 1024**3


def one_line(e: BaseException) -> str:
    return f"{type(e).__name__}: " + " | ".join(s.strip() for s in str(e).splitlines() if s.strip())


def timed(fn, into: list):
    """`fn`, appending the seconds of every call to `into` (also when the call raises)."""

    def wrapper(*args, **kw):
        t = time.perf_counter()
        try:
            return fn(*args, **kw)
        finally:
            into.append(time.perf_counter() - t)

    return wrapper


class MemoryMonitor:
    """The peak memory in use since the last reset, sampled every `every` seconds: on CUDA the
    device's (all processes: the trainer and vLLM's engine), on CPU the resident set of this
    process and its children (summed, so shared pages count twice)."""

    def __init__(self, cuda: bool, every: float = 0.1):
        self.cuda, self.every = cuda, every
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def used(self) -> int:
        if self.cuda:
            import torch

            free, total = torch.cuda.mem_get_info(0)
            return total - free
        import psutil

        me = psutil.Process()
        rss = me.memory_info().rss
        for c in me.children(recursive=True):
            try:
                rss += c.memory_info().rss
            except psutil.Error:
                pass
        return rss

    def _run(self):
        while not self._stop.wait(self.every):
            try:
                self.peak = max(self.peak, self.used())
            except Exception:  # a child gone between listing and reading; the next sample counts
                pass

    def reset(self) -> None:
        self.peak = self.used()

    def read(self) -> int:
        self.peak = max(self.peak, self.used())
        return self.peak

    def close(self) -> None:
        self._stop.set()
        self._thread.join()


def write_random_qwen3(
    out: pathlib.Path, dims: dict, device: str = "cpu", dtype: str = "bfloat16"
) -> pathlib.Path:
    """A random-initialised Qwen3 of `dims` (gspo.infra.memory_plan.PRESETS' config.json fields) with
    the project's character tokenizer, saved with save_pretrained in `dtype` (initialised on
    `device`: seconds on a GPU where a CPU takes minutes for 1.7B)."""
    import torch
    from transformers import AutoModelForCausalLM, GenerationConfig, Qwen3Config

    from gspo.io import atomic_dir
    from gspo.model.models import build_tokenizer

    tok = build_tokenizer()
    cfg = Qwen3Config(
        **dims,
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        attention_dropout=0.0,
        eos_token_id=tok.eos_token_id,
        pad_token_id=tok.pad_token_id,
        bos_token_id=tok.bos_token_id,
    )
    with torch.random.fork_rng(devices=[]), torch.device(device):
        torch.manual_seed(0)
        model = AutoModelForCausalLM.from_config(cfg, dtype=getattr(torch, dtype))
    model.generation_config = GenerationConfig(
        eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id
    )
    with atomic_dir(out) as tmp:
        model.save_pretrained(tmp, safe_serialization=True)
        tok.save_pretrained(tmp)
    del model
    return out


def _meta_model(model_dir):
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(AutoConfig.from_pretrained(model_dir))


def count_params_of(model_dir) -> int:
    return sum(p.numel() for p in _meta_model(model_dir).parameters())


def eval_flops(model_dir, data: pathlib.Path, results: list[dict]) -> float:
    """Forward FLOPs of the evaluation's samples (gspo.model.flops: generation is one forward pass
    over prompt + completion)."""
    from transformers import AutoTokenizer

    from gspo.io import read_jsonl
    from gspo.model import tokens
    from gspo.model.flops import FlopCounter

    codec = tokens.codec(AutoTokenizer.from_pretrained(model_dir), model_dir)
    prompt_len = {r["id"]: len(codec.prompt(r["prompt"])) for r in read_jsonl(data)}
    counter = FlopCounter(_meta_model(model_dir))
    return counter.forward([prompt_len[r["id"]] + n for r in results for n in r["n_tokens"]])


def dir_bytes(path: pathlib.Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def _fmt(v, spec: str = ".2f") -> str:
    if v is None:
        return "n/a"
    return format(v, spec) if isinstance(v, (int, float)) and not isinstance(v, bool) else str(v)


def print_table(report: dict, phases) -> None:
    """The report as a table, one row per phase in `phases`, then each phase's other fields."""
    cuda = report["mode"] == "gpu"
    mem = "device used" if cuda else "RSS (proc+children)"
    print(
        f"\n== gpu_check ({report['mode']}): {report['shape']} shapes, random init, "
        f"{_fmt(report.get('params'), ',')} parameters; {report['device']}, "
        f"{report['precision']}, rollout/eval engine {report['engine']}; world of one; MFU vs "
        f"{report['peak_flops']:.3g} FLOP/s{'' if cuda else ' (nominal)'} =="
    )
    print(
        f"{'phase':6s} {'status':6s} {'wall_s':>7s} {'alloc_GiB':>9s} {'resv_GiB':>8s} "
        f"{'peak_GiB':>8s} {'mfu':>22s} {'tokens/s':>9s} {'sync_s':>7s}"
    )
    for name in phases:
        r = report["phases"].get(name, {"status": "-"})
        if name.startswith("rl") and "mfu_update" in r:
            mfu = "/".join(
                _fmt(r.get(k), ".3f") for k in ("mfu_rollout", "mfu_old_logprob", "mfu_update")
            )
        else:
            mfu = _fmt(r.get("mfu"), ".4f")
        print(
            f"{name:6s} {r['status']:6s} {_fmt(r.get('wall_s'), '.1f'):>7s} "
            f"{_fmt(r.get('torch_peak_allocated_gib')):>9s} "
            f"{_fmt(r.get('torch_peak_reserved_gib')):>8s} {_fmt(r.get('peak_used_gib')):>8s} "
            f"{mfu:>22s} {_fmt(r.get('tokens_per_s'), '.0f'):>9s} "
            f"{_fmt(r.get('sync_s'), '.3f'):>7s}"
        )
    print(
        f"(peak_GiB: {mem}, sampled; alloc/resv: torch's peaks in this process; rl mfu: "
        "rollout/old_logprob/update, update time includes the sync; tokens/s: sft trained "
        "response tokens, rl and eval generated)"
    )
    for name in phases:
        r = report["phases"].get(name, {})
        extra = {
            k: v
            for k, v in r.items()
            if k
            not in (
                "status",
                "wall_s",
                "torch_peak_allocated_gib",
                "torch_peak_reserved_gib",
                "peak_used_gib",
                "mfu",
                "tokens_per_s",
                "sync_s",
                "mfu_rollout",
                "mfu_old_logprob",
                "mfu_update",
            )
        }
        if extra:
            print(f"  {name}: " + ", ".join(f"{k}={_fmt(v, '.4g')}" for k, v in extra.items()))
