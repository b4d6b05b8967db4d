"""`new_block_ids`: the KV cache manager's list of the blocks allocated since the scheduler last
took them, which the scheduler takes only for a model whose KV cache must be zeroed (Mamba
layers) and hands to the model runner as `SchedulerOutput.new_block_ids_to_zero`.

From vLLM 0.17.1 to 0.25.1 every full-attention manager records every block it allocates, and
nothing drains the list when no zeroing is needed: it keeps every block id ever allocated, 8
bytes a block, for as long as the engine runs (34,174 ids per rollout of 1,024 requests of 256
tokens: docs/decode-profile.md). 0.16.0 and 0.17.0 have no such list; from 0.26.0 a manager
records ids only when zeroing is needed.
"""
