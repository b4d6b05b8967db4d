"""Two of the installed vLLM's schedulers fed the same requests, outputs and aborts in lockstep:
`upstream` as vLLM ships it, `patched` with the plugin's scheduler patches bound to that one
object (the class stays upstream's, so both run in one process). After every call the two must
give the same bits: the call's result, field by field and in order, and the scheduler's state
(`state`), with the clock frozen so that timestamps agree.
"""

from __future__ import annotations

import dataclasses
import enum
import functools
import importlib
import itertools
import time
import types
from collections import deque
from contextlib import contextmanager
from unittest import mock

from vllm_hotpaths import registry, vllm_env
from vllm_hotpaths.testing.scheduler_loop import make_scheduler, runner_output, samples

# Where the upstream code of a scheduler hot path lives.
SCHEDULER_MODULES = ("vllm.v1.core.sched.", "vllm.v1.core.kv_cache_manager.")


def scheduler_hotpaths() -> list[str]:
    return [hp.name for hp in registry.HOTPATHS.values() if hp.upstream.startswith(SCHEDULER_MODULES)]


def patched_methods(names: list[str]) -> dict[str, dict[str, object]]:
    """{hot path: {"Class.method": the function its patch installs}} for those of `names` whose
    patch the plugin would install on the installed vLLM (the release has the hot path and needs
    the patch), taken from the class while the patch is installed and put back at once (the
    twin binds them to one object)."""
    version = vllm_env.installed_version()
    found = {}
    for name in names:
        hotpath = registry.get(name)
        if not hotpath.exists_in(version) or hotpath.removed_in(version) or hotpath.patch_needed(version):
            continue
        module = importlib.import_module(hotpath.patch.rsplit(":", 1)[0])
        try:
            for replaced in module.install(version):
                owner, method = replaced.split(".")
                home = vllm_env.import_vllm(getattr(module, "HOMES", {}).get(owner)
                                            or getattr(module, "MODULE", None) or module.SCHEDULER)
                found.setdefault(name, {})[replaced] = getattr(home, owner).__dict__[method]
        finally:
            module.uninstall()
    return found


@dataclasses.dataclass(frozen=True)
class Setup:
    """One scheduler configuration, both twins the same."""

    asynchronous: bool = True
    policy: str = "fcfs"
    num_blocks: int = 64
    block_size: int = 16
    max_num_seqs: int = 8
    max_num_batched_tokens: int = 256
    max_model_len: int = 256
    prefix_caching: bool = True
    long_prefill_token_threshold: int = 0
    zeroing: bool = False  # new KV blocks must be zeroed (a model with Mamba layers)

    def make(self, count: int = 1):
        """`count` schedulers of this configuration (one, or a list), and their block hasher."""
        return make_scheduler(self.asynchronous, count=count, **{
            f.name: getattr(self, f.name) for f in dataclasses.fields(self) if f.name != "asynchronous"})


class Clock:
    """`time.monotonic`, `time.time` and `time.perf_counter` frozen at `now` (advanced by the caller
    between calls, never within one: both twins see the same instants)."""

    def __init__(self) -> None:
        self.now = 1_000.0

    @contextmanager
    def frozen(self):
        read = lambda: self.now  # noqa: E731
        with mock.patch.object(time, "monotonic", read), mock.patch.object(time, "time", read), \
                mock.patch.object(time, "perf_counter", read), mock.patch.object(time, "monotonic_ns",
                                                                                 lambda: int(self.now * 1e9)):
            yield


class Twins:
    def __init__(self, setup: Setup, patches: dict[str, dict[str, object]]) -> None:
        self.setup, self.clock = setup, Clock()
        inits = {replaced: function for methods in patches.values() for replaced, function in methods.items()
                 if replaced.endswith(".__init__")}
        with self.clock.frozen():
            if inits:  # a patched constructor: the patched twin is built by it
                self.upstream, self.hasher = setup.make()
                with class_attributes(inits):
                    self.patched, _ = setup.make()
            else:
                (self.upstream, self.patched), self.hasher = setup.make(count=2)
        bind(self.patched, patches)

    def both(self, call):
        """`call(scheduler)` on each twin under the frozen clock: the two results, or the two
        exceptions raised (their types must then agree)."""
        results = []
        for scheduler in (self.upstream, self.patched):
            with self.clock.frozen():
                try:
                    results.append(("returned", call(scheduler)))
                except Exception as error:  # compared by type and message
                    results.append(("raised", error))
        self.clock.now += 1.0
        return results

    def request(self, request_id: str, prompt: list[int], **kwargs):
        """Two vLLM requests made alike (each scheduler owns and changes its own)."""
        with self.clock.frozen():
            return [request(self.hasher, request_id, prompt, **kwargs) for _ in range(2)]


@contextmanager
def class_attributes(replaced: dict[str, object]):
    """The scheduler module's classes with `{"Class.attr": value}` set, then put back."""
    module = vllm_env.import_vllm("vllm.v1.core.sched.scheduler")
    before = {}
    for name, value in replaced.items():
        owner, attr = name.split(".")
        before[name] = getattr(module, owner).__dict__[attr]
        setattr(getattr(module, owner), attr, value)
    try:
        yield
    finally:
        for name, value in before.items():
            owner, attr = name.split(".")
            setattr(getattr(module, owner), attr, value)


def built(setup: Setup, patches: dict[str, dict[str, object]]):
    """One scheduler of `setup` with `patches`: built under its patched constructors, its patched
    methods bound; and its block hasher."""
    inits = {r: f for methods in patches.values() for r, f in methods.items() if r.endswith(".__init__")}
    with class_attributes(inits):
        scheduler, hasher = setup.make()
    bind(scheduler, patches)
    return scheduler, hasher


def run_rollouts(scheduler, hasher, rollouts: list[list[dict]], sampled: tuple = (5,),
                 resets: dict[int, bool] | None = None) -> None:
    """Each rollout's requests (`Twins.request`'s keyword arguments) added, then stepped as the
    engine core steps the scheduler (two steps in flight with async scheduling) until every
    request has finished; the sampled tokens taken from `sampled` in turn; before the update
    numbered n (counted over the rollouts) where `resets` has n, `reset_prefix_cache` (of the
    running requests too where it maps n to True); at most 400 steps a rollout."""
    depth = 2 if scheduler.scheduler_config.async_scheduling else 1
    tokens = itertools.cycle(sampled)
    resets = resets or {}
    updates = 0
    for n, rollout in enumerate(rollouts):
        for i, kwargs in enumerate(rollout):
            scheduler.add_request(request(hasher, f"{n}-{i}", **kwargs))
        in_flight: deque = deque()
        for _ in range(400):
            if not (scheduler.has_requests() or in_flight):
                break
            if len(in_flight) < depth and scheduler.has_requests():
                output = scheduler.schedule()
                in_flight.append((output, {r: [next(tokens)] for r in samples(scheduler, output)}))
            if in_flight and (len(in_flight) == depth or not scheduler.has_requests()):
                if updates in resets:
                    scheduler.reset_prefix_cache(reset_running_requests=resets[updates])
                updates += 1
                output, tokens_of = in_flight.popleft()
                scheduler.update_from_output(output, runner_output(output, tokens_of))


def bind(scheduler, patches: dict[str, dict[str, object]]) -> None:
    """Each patched method (`patched_methods`) bound to this one scheduler (or its KV cache
    manager), shadowing the class's; a patched constructor is applied by building the scheduler
    under it (`class_attributes`), not here."""
    asynchronous = any(c.__name__ == "AsyncScheduler" for c in type(scheduler).__mro__)
    # the AsyncScheduler's own method after the base's, so that it wins on an async scheduler
    for replaced, function in sorted([item for methods in patches.values() for item in methods.items()],
                                     key=lambda item: item[0].startswith("AsyncScheduler.")):
        if replaced.endswith(".__init__") or (replaced.startswith("AsyncScheduler.") and not asynchronous):
            continue
        owner = scheduler if replaced.startswith(("Scheduler.", "AsyncScheduler.")) else scheduler.kv_cache_manager
        setattr(owner, replaced.split(".")[1], types.MethodType(function, owner))


def request(hasher, request_id: str, prompt: list[int], *, max_tokens: int, min_tokens: int = 0,
            eos: int | None = None, stop_token_ids: tuple = (), priority: int = 0):
    """A vLLM request (`eos`: its end-of-sequence id, None for none)."""
    from vllm.sampling_params import SamplingParams
    from vllm.v1.request import Request

    params = SamplingParams(max_tokens=max_tokens, min_tokens=min_tokens, stop_token_ids=list(stop_token_ids),
                            ignore_eos=eos is None, temperature=1.0)
    if eos is not None:  # to 0.16 the request takes it instead
        vllm_env.call(params.update_from_generation_config, {}, eos_token_id=eos)
    return vllm_env.call(Request, request_id=request_id, prompt_token_ids=list(prompt), sampling_params=params,
                         pooling_params=None, eos_token_id=eos, priority=priority, block_hasher=hasher)


def state(scheduler) -> tuple:
    """The scheduler's state as plain values: queues in order, every request's own fields, the KV
    cache manager's blocks per request and the block pool (free queue from head to tail, each
    block's reference count and hash, the cached hashes in order). The new block ids a manager
    holds are apart (`testing.live.new_block_ids.held`): the new_block_ids patch drops them."""
    manager = scheduler.kv_cache_manager
    pool = manager.block_pool
    free, block = [], pool.free_block_queue.fake_free_list_head.next_free_block
    while block is not None and block is not pool.free_block_queue.fake_free_list_tail:
        free.append(block.block_id)
        block = block.next_free_block
    managers = [{"req_to_blocks": [(k, [b.block_id for b in v]) for k, v in m.req_to_blocks.items()],
                 "num_cached_block": list(m.num_cached_block.items())}
                for m in manager.coordinator.single_type_managers]  # new_block_ids: live.new_block_ids.held
    cached = pool.cached_block_hash_to_block
    return bits({
        "running": [r.request_id for r in scheduler.running],
        "waiting": [r.request_id for r in scheduler.waiting],
        "skipped_waiting": [r.request_id for r in getattr(scheduler, "skipped_waiting", ())],
        "requests": scheduler.requests,
        "finished_req_ids": scheduler.finished_req_ids,
        "finished_req_ids_dict": getattr(scheduler, "finished_req_ids_dict", None),
        "prev_step_scheduled_req_ids": getattr(scheduler, "prev_step_scheduled_req_ids", None),
        "managers": managers,
        "free_queue": free,
        "blocks": [(b.block_id, b.ref_cnt, b.block_hash) for b in pool.blocks],
        "cached_hashes": getattr(cached, "_cache", cached),  # a plain dict to 0.2x, then a map around one
    })


def bits(value, seen: frozenset = frozenset()):
    """`value` as nested tuples of type names and contents, in iteration order: two values give
    equal bits only if they are equal field by field with the same types and the same orders.
    Functions compare by name, KV blocks by id, objects by their fields."""
    if value is None or isinstance(value, (bool, int, float, str, bytes)):
        return (type(value).__name__, value)
    if isinstance(value, enum.Enum):
        return (type(value).__name__, value.name)
    if isinstance(value, (types.FunctionType, types.MethodType, functools.partial, types.BuiltinFunctionType)):
        return ("function", getattr(value, "__qualname__", repr(type(value))))
    if type(value).__name__ == "KVCacheBlock":
        return ("KVCacheBlock", value.block_id)
    if id(value) in seen:
        return ("cycle", type(value).__name__)
    seen = seen | {id(value)}
    if isinstance(value, dict):
        return (type(value).__name__, tuple((bits(k, seen), bits(v, seen)) for k, v in value.items()))
    if isinstance(value, (list, tuple, set, frozenset)) or type(value).__name__ in ("ConstantList", "deque"):
        if all(type(v) is int for v in value):  # token and block id lists: most of the state
            return (type(value).__name__, "ints", tuple(value))
        return (type(value).__name__, tuple(bits(v, seen) for v in value))
    if hasattr(value, "tolist"):
        return (type(value).__name__, bits(value.tolist(), seen))
    if dataclasses.is_dataclass(value):
        names = [f.name for f in dataclasses.fields(value)]
    elif hasattr(value, "__struct_fields__"):
        names = list(value.__struct_fields__)
    elif hasattr(value, "__dict__"):
        names = list(vars(value))
    else:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, tuple((n, bits(getattr(value, n, None), seen)) for n in names))


def first_difference(a, b, path: str = "") -> str | None:
    """Where two `bits` values first differ, as a path into them."""
    if a == b:
        return None
    if isinstance(a, tuple) and isinstance(b, tuple) and len(a) == len(b):
        for i, (x, y) in enumerate(zip(a, b)):
            name = x[0] if isinstance(x, tuple) and x and isinstance(x[0], str) else i
            found = first_difference(x, y, f"{path}/{name}")
            if found:
                return found
    return f"{path}: {str(a)[:300]} != {str(b)[:300]}"
