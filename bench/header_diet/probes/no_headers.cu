// The floor: no torch, no CUTLASS; what any .cu costs with this command line.
#include <cuda_runtime.h>
