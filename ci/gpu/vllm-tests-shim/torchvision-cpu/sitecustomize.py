"""On PYTHONPATH (vllm-unit-tests.sh puts it there only when needed) where torch is a CPU build and
torchvision is the registry's CUDA build: torchvision's operator library cannot load against that
torch, and `import torchvision` then fails registering fake kernels for `torchvision::nms` and
`qnms`, which nothing defined. Just before, this defines the two operators (schemas only: a call
raises), so that torchvision's Python parts, the transforms vLLM's multimodal processors import,
work. A sitecustomize so that it reaches the subprocesses in which vLLM inspects model classes."""

import sys
from importlib.abc import MetaPathFinder


class _DefineNms(MetaPathFinder):
    library = None

    def find_spec(self, name, path=None, target=None):
        if name == "torchvision._meta_registrations":  # torchvision.extension has tried to load _C
            sys.meta_path.remove(self)
            import torch
            import torchvision.extension

            if not torchvision.extension._has_ops():
                _DefineNms.library = torch.library.Library("torchvision", "DEF")
                for op in ("nms", "qnms"):
                    _DefineNms.library.define(f"{op}(Tensor dets, Tensor scores, float iou_threshold) -> Tensor")
        return None


sys.meta_path.insert(0, _DefineNms())
