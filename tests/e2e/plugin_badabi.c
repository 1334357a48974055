/* A plugin built for a task ABI this worker does not speak: the worker must refuse it. */
#include "spillway/task.h"

static const spw_plugin plugin = {SPW_TASK_ABI_VERSION + 41, "from-the-future", 0, 0};

const spw_plugin *spillway_plugin_v1(void)
{
    return &plugin;
}
