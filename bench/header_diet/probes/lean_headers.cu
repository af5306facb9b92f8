// What v13 (0012) includes instead: the lean header, then utils.h (which then skips torch/all.h).
#include "sgl_kernel_torch_lean.h"

#include "utils.h"
