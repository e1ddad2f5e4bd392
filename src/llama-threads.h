// How many compute threads a context gets: the request, or all cores for
// <= 0, and never more than the cores this process may run on (more threads
// than cores only wait on each other: 1024 threads on 2 cores ran 370x
// slower), with a notice on stderr when a request is cut down.
#pragma once

namespace pinfer {

int n_cores();                            // CPUs in this process's affinity mask (>= 1)
int pick_n_threads(int requested, const char *who);  // who: prefix of the notice
}  // namespace pinfer
