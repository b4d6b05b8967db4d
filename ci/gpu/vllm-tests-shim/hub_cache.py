"""A Hugging Face cache holding what vLLM's scheduler tests load of `facebook/opt-125m` and
`llava-hf/llava-1.5-7b-hf`, for a machine without the Hub (run with HF_HUB_OFFLINE=1 and
HF_HUB_CACHE set to the folder).

The configs are the models' own (their published values). The tokenizers are a stand-in: GPT-2's
byte-level alphabet and four special tokens at OPT's ids, no merges. The scheduler tests build
their requests from token ids; vLLM only loads a tokenizer for its structured-output manager
there, and the runs with and without the plugin load the same one.

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


def byte_symbols() -> list[str]:
    """GPT-2's printable stand-ins for the 256 byte values, in byte order."""
    printable = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1)) + \
        list(range(ord("®"), ord("ÿ") + 1))
    extra = iter(range(256, 512))
    return [chr(b) if b in printable else chr(next(extra)) for b in range(256)]


def write(folder: Path) -> None:
    for repo, config in (("facebook/opt-125m", CONFIG), ("llava-hf/llava-1.5-7b-hf", LLAVA)):
        llava = config is LLAVA
        snapshot = folder / f"models--{repo.replace('/', '--')}" / "snapshots" / ("0" * 40)
        snapshot.mkdir(parents=True, exist_ok=True)
        (snapshot.parents[1] / "refs").mkdir(exist_ok=True)
        (snapshot.parents[1] / "refs" / "main").write_text("0" * 40)
        vocab = dict(SPECIAL, **{s: len(SPECIAL) + i for i, s in enumerate(byte_symbols())})
        if llava:  # its image token at llava's id
            vocab["<image>"] = LLAVA["image_token_index"]
        files = {"config.json": config, "vocab.json": vocab,
                 "tokenizer_config.json": {"tokenizer_class": "GPT2Tokenizer", "bos_token": "</s>",
                                           "eos_token": "</s>", "pad_token": "<pad>", "unk_token": "</s>",
                                           "add_prefix_space": False}}
        if llava:  # the image token whole, as llava's tokenizer has it
            files["tokenizer_config.json"]["added_tokens_decoder"] = {
                str(LLAVA["image_token_index"]): {"content": "<image>", "special": True, "lstrip": False,
                                                  "rstrip": False, "normalized": False, "single_word": False}}
            files.update({"preprocessor_config.json": LLAVA_IMAGES, "processor_config.json": LLAVA_PROCESSOR})
        for name, content in files.items():
            (snapshot / name).write_text(json.dumps(content))
        (snapshot / "merges.txt").write_text("#version: 0.2\n")


if __name__ == "__main__":
    write(Path(sys.argv[1]))
