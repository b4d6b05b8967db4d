"""`drained`: what the plugin makes of 0.17.1 to 0.25.1: where no zeroing reads the list, the
managers keep nothing in it, as from 0.26.0; every output stays upstream's, since nothing else
reads the list."""

from __future__ import annotations

from vllm_hotpaths.new_block_ids.reference import NotKept


class Drained(NotKept):
    pass
