"""Whether Triton is installed, answered without importing it.

Triton decides at its own import whether kernels run compiled or in its CPU interpreter
(TRITON_INTERPRET), so the engine must not import it as a side effect: the kernel modules are imported
only when a CUDA tensor needs them, and a machine without Triton keeps the PyTorch twins.
"""

import functools
import importlib.util


@functools.cache
def has_triton() -> bool:
    return importlib.util.find_spec("triton") is not None
