"""Whether vLLM's KV cache manager keeps every block id it ever allocated: `new_block_ids` of each
`SingleTypeKVCacheManager`, which the scheduler drains only where KV blocks must be zeroed
(Mamba models) in some releases. Runs ROLLOUTS batches of B requests (prompts of 16 to 512
tokens, TOKENS output tokens each, prefix caching on, the async scheduler stepped as the engine's
batch queue steps it) one after another on one scheduler, as an RL loop does, and prints after
each rollout the ids held, the blocks allocated so far and the process's resident memory.

    python ci/new-block-ids.py [B=256] [TOKENS=256] [ROLLOUTS=8]
"""

import resource
import sys

from vllm_hotpaths.testing.scheduler_loop import DecodeLoop


def held(scheduler) -> int:
    managers = scheduler.kv_cache_manager.coordinator.single_type_managers
    return sum(len(getattr(m, "new_block_ids", ())) for m in managers)


def main(batch: int, tokens: int, rollouts: int) -> None:
    loop = DecodeLoop(batch, tokens - 8, True, mixed_prompts=True)
    pool = loop.scheduler.kv_cache_manager.block_pool
    allocated = [0]
    take = pool.get_new_blocks

    def counted(n):
        allocated[0] += n
        return take(n)

    pool.get_new_blocks = counted
    print("| rollout | steps | block ids held in new_block_ids | blocks allocated so far | max RSS (MiB) |")
    print("|---|---|---|---|---|")
    for round_ in range(rollouts):
        steps = loop.rollout(f"r{round_}-")
        rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        print(f"| {round_ + 1} | {steps} | {held(loop.scheduler):,} | {allocated[0]:,} | {rss:.0f} |", flush=True)


if __name__ == "__main__":
    args = [int(a) for a in sys.argv[1:]]
    main(*(args + [256, 256, 8][len(args):]))
