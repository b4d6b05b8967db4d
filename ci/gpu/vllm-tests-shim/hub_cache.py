"""A Hugging Face cache holding what vLLM's `tests/v1/core/` files load of `facebook/opt-125m`,
`llava-hf/llava-1.5-7b-hf`, `Qwen/Qwen3-0.6B` (vLLM's default model), `Qwen/Qwen1.5-7B` and
`Qwen/Qwen2.5-VL-3B-Instruct`, for a machine without the Hub (run with HF_HUB_OFFLINE=1 and
HF_HUB_CACHE set to the folder).

The configs are the models' own (their published values). The tokenizers are a stand-in: GPT-2's
byte-level alphabet and the model's special tokens at its ids, no merges. The scheduler tests build
their requests from token ids; vLLM only loads a tokenizer for its structured-output manager and its
multimodal processors there, and the runs with and without the plugin load the same one.

    python hub_cache.py FOLDER
"""

import json
import sys
from pathlib import Path

CONFIG = {
    "activation_dropout": 0.0, "activation_function": "relu", "architectures": ["OPTForCausalLM"],
    "attention_dropout": 0.0, "bos_token_id": 2, "do_layer_norm_before": True, "dropout": 0.1, "eos_token_id": 2,
    "ffn_dim": 3072, "hidden_size": 768, "init_std": 0.02, "layerdrop": 0.0, "max_position_embeddings": 2048,
    "model_type": "opt", "num_attention_heads": 12, "num_hidden_layers": 12, "pad_token_id": 1, "prefix": "</s>",
    "torch_dtype": "float16", "use_cache": True, "vocab_size": 50272, "word_embed_proj_dim": 768,
}
LLAVA = {
    "architectures": ["LlavaForConditionalGeneration"], "ignore_index": -100, "image_token_index": 32000,
    "model_type": "llava", "pad_token_id": 32001, "projector_hidden_act": "gelu", "tie_word_embeddings": False,
    "torch_dtype": "float16", "vision_feature_layer": -2, "vision_feature_select_strategy": "default",
    "vocab_size": 32064,
    "text_config": {"architectures": ["LlamaForCausalLM"], "max_position_embeddings": 4096, "model_type": "llama",
                    "rms_norm_eps": 1e-05, "torch_dtype": "float16", "vocab_size": 32064},
    "vision_config": {"hidden_size": 1024, "image_size": 336, "intermediate_size": 4096,
                      "model_type": "clip_vision_model", "num_attention_heads": 16, "num_hidden_layers": 24,
                      "patch_size": 14, "projection_dim": 768, "vocab_size": 32000},
}
LLAVA_IMAGES = {
    "crop_size": {"height": 336, "width": 336}, "do_center_crop": True, "do_convert_rgb": True, "do_normalize": True,
    "do_rescale": True, "do_resize": True, "image_mean": [0.48145466, 0.4578275, 0.40821073],
    "image_processor_type": "CLIPImageProcessor", "image_std": [0.26862954, 0.26130258, 0.27577711],
    "processor_class": "LlavaProcessor", "resample": 3, "rescale_factor": 0.00392156862745098,
    "size": {"shortest_edge": 336},
}
LLAVA_PROCESSOR = {"image_token": "<image>", "patch_size": 14, "processor_class": "LlavaProcessor",
                   "vision_feature_select_strategy": "default"}
SPECIAL = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3}
QWEN3 = {
    "architectures": ["Qwen3ForCausalLM"], "attention_bias": False, "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "head_dim": 128, "hidden_act": "silu", "hidden_size": 1024, "initializer_range": 0.02,
    "intermediate_size": 3072, "max_position_embeddings": 40960, "max_window_layers": 28, "model_type": "qwen3",
    "num_attention_heads": 16, "num_hidden_layers": 28, "num_key_value_heads": 8, "rms_norm_eps": 1e-06,
    "rope_scaling": None, "rope_theta": 1000000, "sliding_window": None, "tie_word_embeddings": True,
    "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False, "vocab_size": 151936,
}
QWEN15 = {
    "architectures": ["Qwen2ForCausalLM"], "attention_dropout": 0.0, "bos_token_id": 151643, "eos_token_id": 151643,
    "hidden_act": "silu", "hidden_size": 4096, "initializer_range": 0.02, "intermediate_size": 11008,
    "max_position_embeddings": 32768, "max_window_layers": 28, "model_type": "qwen2", "num_attention_heads": 32,
    "num_hidden_layers": 32, "num_key_value_heads": 32, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0,
    "sliding_window": 32768, "tie_word_embeddings": False, "torch_dtype": "bfloat16", "use_cache": True,
    "use_sliding_window": False, "vocab_size": 151936,
}
QWEN25_VL = {
    "architectures": ["Qwen2_5_VLForConditionalGeneration"], "attention_dropout": 0.0, "bos_token_id": 151643,
    "eos_token_id": 151645, "vision_start_token_id": 151652, "vision_end_token_id": 151653,
    "vision_token_id": 151654, "image_token_id": 151655, "video_token_id": 151656, "hidden_act": "silu",
    "hidden_size": 2048, "initializer_range": 0.02, "intermediate_size": 11008, "max_position_embeddings": 128000,
    "max_window_layers": 70, "model_type": "qwen2_5_vl", "num_attention_heads": 16, "num_hidden_layers": 36,
    "num_key_value_heads": 2, "rms_norm_eps": 1e-06, "rope_theta": 1000000.0, "sliding_window": 32768,
    "tie_word_embeddings": True, "torch_dtype": "bfloat16", "use_cache": True, "use_sliding_window": False,
    "vision_config": {"depth": 32, "hidden_act": "silu", "hidden_size": 1280, "intermediate_size": 3420,
                      "num_heads": 16, "in_chans": 3, "out_hidden_size": 2048, "patch_size": 14,
                      "spatial_merge_size": 2, "spatial_patch_size": 14, "window_size": 112,
                      "fullatt_block_indexes": [7, 15, 23, 31], "tokens_per_second": 2, "temporal_patch_size": 2},
    "rope_scaling": {"type": "mrope", "mrope_section": [16, 24, 24]}, "vocab_size": 151936,
}
QWEN25_VL_IMAGES = {
    "min_pixels": 3136, "max_pixels": 12845056, "patch_size": 14, "temporal_patch_size": 2, "merge_size": 2,
    "image_mean": [0.48145466, 0.4578275, 0.40821073], "image_std": [0.26862954, 0.26130258, 0.27577711],
    "image_processor_type": "Qwen2VLImageProcessor", "processor_class": "Qwen2_5_VLProcessor",
}
QWEN_SPECIAL = {"<|endoftext|>": 151643, "<|im_start|>": 151644, "<|im_end|>": 151645, "<|vision_start|>": 151652,
                "<|vision_end|>": 151653, "<|vision_pad|>": 151654, "<|image_pad|>": 151655, "<|video_pad|>": 151656}
QWEN_TOKENS = {"bos_token": None, "eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>",
               "unk_token": None}
OPT_TOKENS = {"bos_token": "</s>", "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "</s>"}
# repo: config, special tokens (content: id), their roles, other files
MODELS = {
    "facebook/opt-125m": (CONFIG, SPECIAL, OPT_TOKENS, {}),
    "llava-hf/llava-1.5-7b-hf": (LLAVA, dict(SPECIAL, **{"<image>": LLAVA["image_token_index"]}), OPT_TOKENS,
                                 {"preprocessor_config.json": LLAVA_IMAGES, "processor_config.json": LLAVA_PROCESSOR}),
    "Qwen/Qwen3-0.6B": (QWEN3, QWEN_SPECIAL, QWEN_TOKENS, {}),
    "Qwen/Qwen1.5-7B": (QWEN15, QWEN_SPECIAL, QWEN_TOKENS, {}),
    "Qwen/Qwen2.5-VL-3B-Instruct": (QWEN25_VL, QWEN_SPECIAL, QWEN_TOKENS,
                                    {"preprocessor_config.json": QWEN25_VL_IMAGES}),
}


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def write(folder: Path) -> None:
    for repo, (config, special, roles, extra) in MODELS.items():
        snapshot = folder / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot.parents[1] / "refs").mkdir(exist_ok=True)
        (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
        # The byte alphabet after the special tokens that have small ids (OPT's), the rest at the
        # model's ids and whole, as the model's tokenizer has them.
        low = {s: i for s, i in special.items() if i < len(SPECIAL)}
        vocab = dict(low, **{s: len(low) + i for i, s in enumerate(byte_symbols())})
        vocab.update(special)
        tokenizer = {"tokenizer_class": "GPT2Tokenizer", "add_prefix_space": False, **roles}
        whole = {s: i for s, i in special.items() if s not in low}
        if whole:
            tokenizer["added_tokens_decoder"] = {
                str(i): {"content": s, "special": True, "lstrip": False, "rstrip": False, "normalized": False,
                         "single_word": False} for s, i in whole.items()}
        files = {"config.json": config, "vocab.json": vocab, "tokenizer_config.json": tokenizer, **extra}
        for name, content in files.items():
            (snapshot / name).write_text(json.dumps(content))
        (snapshot / "merges.txt").write_text("#version: 0.2\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
