#include "qgpu_core.h"

int qgpu_core_version(void) { return 3; }
