/* The checked mode's switch, CG_DEBUG (see error.h), read once at load as
 * every variable cgrad reads is (core/parse.h): "1", "true", "yes", "on"
 * turn it on; a malformed value leaves it off, and the programs refuse it
 * at start (cg_env_check). */
#include "core/error.h"
#include "core/parse.h"

static bool g_debug;

__attribute__((constructor)) static void debug_init(void)
{
    bool on = false;
    if (!cg_env_flag("CG_DEBUG", &on))
        cg_clear_error(); /* nothing failed for the caller: the default stays */
    g_debug = on;
}

bool cg_debug_enabled(void) { return g_debug; }
