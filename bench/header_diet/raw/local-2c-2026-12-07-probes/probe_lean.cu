#include "sgl_kernel_torch_lean.h"
#include "utils.h"
