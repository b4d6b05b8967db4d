"""`fused@X`: `_update_request_with_output` in one frame, for the release range of each reference.

It takes the call where upstream's work is appending sampled tokens to a plain `Request` with
sampling parameters and no repetition detection, and, in the AsyncScheduler, no output to drop
after `reset_prefix_cache`; every other call goes to upstream's method. There it does what
upstream does, in upstream's order: each token appended to the output and the token lists, the
block hasher called as `update_block_hashes` calls it, the stop checks of `check_stop` in the
release's order, the trim of the returned list at a stop, the placeholders settled (and the same
assertion), and the caching call. Where the chain below `KVCacheManager.cache_blocks` is the one
of 0.16 to 0.25 (a full-attention manager that does not override it, under the unitary
coordinator), a call that would cache no new block is skipped; otherwise it is made as upstream
makes it.
"""

from __future__ import annotations

from vllm_hotpaths import vllm_env
from vllm_hotpaths.request_output import reference


class Fused:
    """Mixed into a reference: its data chooses the variant."""

    def method(self, upstream, asynchronous: bool):
        """The replacement for the AsyncScheduler's (`asynchronous`) or the base Scheduler's
        `_update_request_with_output`, `upstream` taking the rest."""
        request_type = vllm_env.import_vllm("vllm.v1.request").Request
        status = vllm_env.import_vllm("vllm.v1.request").RequestStatus
        params_type = vllm_env.import_vllm("vllm.sampling_params").SamplingParams
        manager_type = vllm_env.import_vllm("vllm.v1.core.kv_cache_manager").KVCacheManager
        unitary = vllm_env.import_vllm("vllm.v1.core.kv_cache_coordinator").UnitaryKVCacheCoordinator
        single = vllm_env.import_vllm("vllm.v1.core.single_type_kv_cache_manager")
        running, stopped_status, length_status = status.RUNNING, status.FINISHED_STOPPED, status.FINISHED_LENGTH_CAPPED
        repetition = "repetition_detection" in getattr(params_type, "__struct_fields__", ()) or hasattr(
            params_type, "repetition_detection")
        # managers whose cache_blocks returns at once when no block is newly full (0.16 to 0.25)
        plain_managers = () if "cache_blocks" in single.FullAttentionManager.__dict__ else (single.FullAttentionManager,)
        eos_on_request = not hasattr(params_type, "eos_token_id")  # to 0.16: the request holds it
        min_first = self.min_tokens_first
        discard, stale_keeps, one_method = self.discard, self.stale_keeps_placeholders, self.one_method
        settles = asynchronous and not one_method
        stale_arg = stale_keeps or one_method  # the method takes is_stale

        def _update_request_with_output(self, request, new_token_ids, is_stale=False):
            params = request.sampling_params
            if (type(request) is not request_type or params is None or request.pooling_params is not None
                    or (repetition and params.repetition_detection is not None)
                    or (settles and discard and (request.discard_latest_async_tokens if discard == "flag"
                                                 else request.async_tokens_to_discard > 0))):
                if stale_arg:
                    return upstream(self, request, new_token_ids, is_stale)
                return upstream(self, request, new_token_ids)
            status_before = request.status
            returned = len(new_token_ids)
            outputs, tokens = request._output_token_ids, request._all_token_ids
            hasher = request._block_hasher
            max_model_len = self.max_model_len
            stopped = False
            for num_new, token in enumerate(new_token_ids, 1):
                outputs.append(token)
                tokens.append(token)
                if hasher is not None:
                    request.block_hashes.extend(hasher(request))
                num_outputs = len(outputs)
                if min_first and num_outputs < params.min_tokens:
                    continue
                if token == ((None if params.ignore_eos else request.eos_token_id) if eos_on_request
                             else params.eos_token_id):
                    request.status = stopped_status
                    stopped = True
                elif token in (params.stop_token_ids or ()):
                    request.status = stopped_status
                    request.stop_reason = token
                    stopped = True
                elif len(tokens) >= max_model_len or num_outputs >= request.max_tokens:
                    request.status = length_status
                    stopped = True
                if stopped:
                    if one_method and not is_stale:
                        request.num_computed_tokens -= returned - num_new
                    del new_token_ids[num_new:]
                    break
            if one_method:
                if not is_stale and request.num_output_placeholders > 0:
                    request.num_output_placeholders -= returned
                    assert request.num_output_placeholders >= 0
                return new_token_ids, stopped
            if not settles:
                return new_token_ids, stopped
            if not (stale_keeps and is_stale):
                request.num_output_placeholders -= len(new_token_ids)
                assert request.num_output_placeholders >= 0
            if status_before == running:
                kv = self.kv_cache_manager
                num_tokens = request.num_computed_tokens - request.num_output_placeholders
                if type(kv) is manager_type and type(kv.coordinator) is unitary:
                    if not kv.enable_caching:
                        return new_token_ids, stopped
                    managers = kv.coordinator.single_type_managers
                    manager = managers[0]
                    if (len(managers) == 1 and type(manager) in plain_managers
                            and manager.num_cached_block.get(request.request_id, 0) >= num_tokens // manager.block_size):
                        return new_token_ids, stopped
                kv.cache_blocks(request, num_tokens)
            return new_token_ids, stopped

        _update_request_with_output.hotpaths_upstream = upstream
        return _update_request_with_output


class Fused016(Fused, reference.Appended016):
    pass


class Fused022(Fused, reference.Appended022):
    pass


class Fused027(Fused, reference.Appended027):
    pass


class Fused029(Fused, reference.Appended029):
    pass


class Fused033(Fused, reference.Appended033):
    pass
