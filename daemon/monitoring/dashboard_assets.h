// The dashboard's static files (HTML, CSS, JS and, when npm could fetch it at
// build time, uPlot), embedded by CMake from daemon/monitoring/web/ into a
// generated dashboard_assets.cpp in the build directory.
#pragma once

#include <cstddef>
#include <string_view>

namespace prefixd {

// The bytes of daemon/monitoring/web/NAME (e.g. "index.html", "uPlot.iife.min.js");
// empty when the file was not embedded.
std::string_view dashboard_asset(std::string_view name);
// True when uPlot was bundled (npm ran at build time); otherwise the page
// shows tables only.
bool dashboard_has_charts();

}  // namespace prefixd
