/* cgrad core: the library's version at run time (core/version.h). */
#include "core/version.h"

int cg_library_version(void) { return CG_VERSION_NUMBER; }
