# Included by the top-level CMakeLists.txt: the dashboard's assets, embedded into
# prefixd_daemon_monitoring at build time (issue 8).
# The build runs `npm ci` for uPlot when npm is found (PREFIXD_DASHBOARD_NPM);
# without npm, or when it fails, the page is built without charts.
option(PREFIXD_DASHBOARD_NPM "Fetch uPlot with npm at build time for the dashboard's charts" ON)
find_program(PREFIXD_NPM_EXECUTABLE npm)
set(dash_src ${CMAKE_CURRENT_LIST_DIR})
set(dash_gen ${CMAKE_BINARY_DIR}/dashboard)
set(dash_cpp ${dash_gen}/dashboard_assets.cpp)
add_custom_command(
  OUTPUT ${dash_cpp}
  COMMAND ${CMAKE_COMMAND} -DSRC_DIR=${dash_src} -DWORK_DIR=${dash_gen}/npm -DOUT=${dash_cpp}
          -DNPM=${PREFIXD_NPM_EXECUTABLE} -DUSE_NPM=${PREFIXD_DASHBOARD_NPM}
          -P ${dash_src}/embed_assets.cmake
  DEPENDS ${dash_src}/index.html ${dash_src}/login.html ${dash_src}/dashboard.css
          ${dash_src}/dashboard.js ${dash_src}/package.json ${dash_src}/package-lock.json
          ${dash_src}/embed_assets.cmake
  COMMENT "Embedding the dashboard assets"
  VERBATIM)
target_sources(prefixd_daemon_monitoring PRIVATE ${dash_cpp})
