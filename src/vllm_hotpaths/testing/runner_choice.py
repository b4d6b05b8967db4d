"""Which model runner the installed vLLM picks for a few typical configurations, asked of vLLM
itself: `EngineArgs(...).create_engine_config()` over a dummy model's `config.json`, then
`runners.runner_of` (vLLM's `VllmConfig.use_v2_model_runner`, or its variable before 0.22).

The gate prints the answers, so a report says which of its rows the engine would run. The
question is asked in a child process (`python -m vllm_hotpaths.testing.runner_choice`): building
an engine configuration loads vLLM's plugins, which must not patch the gate's own process.
Answers are for a GPU engine; `VLLM_USE_V2_MODEL_RUNNER` in the environment is honoured, as vLLM
honours it.

Asking costs the child about 9 s on 2 cores, nearly all of it importing vLLM and transformers,
at every gate. The child keeps its answers in the environment it runs in (`CACHE_NAME` under
`sys.prefix`), under a digest of everything they depend on (`inputs_digest`): the bytes of every
`.py` file of the vLLM it imports, transformers' version, the `VLLM_*` variables, and this
module's and `runners`' source. Any change to one of them asks vLLM again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import tempfile
from importlib import metadata, util
from pathlib import Path

SMALL = dict(vocab_size=1024, hidden_size=64, intermediate_size=128, num_hidden_layers=1,
             num_attention_heads=2, num_key_value_heads=1)
NGRAM = {"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_max": 3}
# label -> (transformers config class, architecture, extra EngineArgs)
CONFIGURATIONS = {
    "Qwen3 dense": ("Qwen3Config", "Qwen3ForCausalLM", {}),
    "Qwen2 dense": ("Qwen2Config", "Qwen2ForCausalLM", {}),
    "Qwen3 dense, ngram speculative decoding": ("Qwen3Config", "Qwen3ForCausalLM", {"speculative_config": NGRAM}),
}


def ask_vllm(folder: Path) -> list[dict]:
    """This process: each configuration's runner, or the error that stopped vLLM deciding."""
    import transformers

    from vllm_hotpaths import runners, vllm_env

    vllm_env.import_vllm("vllm.config")
    from vllm.engine.arg_utils import EngineArgs

    answers = []
    for label, (config_class, architecture, extra) in CONFIGURATIONS.items():
        model = folder / architecture
        if not model.exists():
            getattr(transformers, config_class)(architectures=[architecture], **SMALL).save_pretrained(model)
        try:
            config = EngineArgs(model=str(model), skip_tokenizer_init=True, load_format="dummy",
                                **extra).create_engine_config()
            answers.append({"configuration": label, "runner": runners.runner_of(config)})
        except Exception as err:  # vLLM refused this configuration here: say why, keep the others
            answers.append({"configuration": label, "runner": None,
                            "error": f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"})
    return answers


CACHE_NAME = "vllm-hotpaths-runner-choice.json"  # {digest: answers}, in the environment's folder


def inputs_digest(vllm_dir: Path | None = None) -> str | None:
    """A digest of what the answers depend on (module docstring); None where vLLM is not found."""
    from vllm_hotpaths import runners

    if vllm_dir is None:
        spec = util.find_spec("vllm")
        if spec is None or not spec.submodule_search_locations:
            return None
        vllm_dir = Path(list(spec.submodule_search_locations)[0])
    try:
        transformers = metadata.version("transformers")
    except metadata.PackageNotFoundError:
        transformers = None
    digest = hashlib.sha256(repr((transformers, sorted((k, v) for k, v in os.environ.items() if k.startswith("VLLM_")),
                                  Path(__file__).read_bytes(), Path(runners.__file__).read_bytes())).encode())
    for path in sorted(vllm_dir.rglob("*.py")):
        digest.update(str(path.relative_to(vllm_dir)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


def kept_or_asked(folder: Path, ask=ask_vllm, store: Path | None = None, vllm_dir: Path | None = None) -> list[dict]:
    """The answers kept in `store` (default: CACHE_NAME in this environment) for the present
    inputs, else `ask(folder)`'s, then kept there (where the folder is writable)."""
    return kept_under(store or Path(sys.prefix) / CACHE_NAME, inputs_digest(vllm_dir), lambda: ask(folder))


def kept_under(store: Path, key: str | None, compute, keep=lambda answer: True):
    """The answer `store` keeps under `key`, else `compute()`'s, kept there where `keep(answer)`
    says so and the folder is writable (no key: never kept)."""
    try:
        kept = json.loads(store.read_text())
    except (OSError, ValueError):
        kept = {}
    if key is not None and isinstance(kept, dict) and key in kept:
        return kept[key]
    answer = compute()
    if key is not None and keep(answer):
        try:
            scratch = store.with_name(f"{store.name}.{os.getpid()}")
            scratch.write_text(json.dumps({key: answer}))
            os.replace(scratch, store)  # whole, for a gate running beside this one
        except OSError:
            pass
    return answer


def choices(python: str = sys.executable, timeout: float = 180) -> list[dict]:
    """The answers of a child process (no plugin loaded there), or one entry saying why none came."""
    env = {**os.environ, "VLLM_PLUGINS": "", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
    try:
        child = subprocess.run([python, "-m", "vllm_hotpaths.testing.runner_choice"], capture_output=True,
                               text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return [{"configuration": "all", "runner": None, "error": f"no answer within {timeout:g} s"}]
    lines = [line for line in child.stdout.splitlines() if line.startswith("{")]
    if child.returncode != 0 or not lines:
        last = (child.stderr.strip().splitlines() or ["no output"])[-1]
        return [{"configuration": "all", "runner": None, "error": f"exit {child.returncode}: {last[:200]}"}]
    return json.loads(lines[-1])["answers"]


def lines(version: str | None, answers: list[dict]) -> list[str]:
    """What the gate prints."""
    head = f"runner choice of vLLM {version} (its own engine configuration, GPU engine):"
    return [head] + [f"  {a['configuration']}: " + (a["runner"] or f"not decided ({a['error']})") for a in answers]


if __name__ == "__main__":
    with tempfile.TemporaryDirectory() as scratch:
        print(json.dumps({"answers": kept_or_asked(Path(scratch))}))
