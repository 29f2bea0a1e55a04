# runnel-worker's core: consumer, claim, run orchestration, publishing,
# control, drain and observability, linked with the stages library.
add_library(runnel_worker_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/claim.c
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/consumer.c
  ${CMAKE_CURRENT_LIST_DIR}/control.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/publish.c
  ${CMAKE_CURRENT_LIST_DIR}/run.c)
target_include_directories(runnel_worker_core PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(runnel_worker_core PUBLIC runnel_worker_stages runnel_proto runnel_common
  PkgConfig::RDKAFKA PkgConfig::HIREDIS PkgConfig::LIBEVENT PkgConfig::JANSSON
  PkgConfig::SODIUM PkgConfig::CURL Threads::Threads)

add_executable(runnel-worker ${CMAKE_CURRENT_LIST_DIR}/main.c)
target_link_libraries(runnel-worker PRIVATE runnel_worker_core)
# The mock agent is found next to runnel-worker at run time.
if(TARGET runnel-mock-agent)
  add_dependencies(runnel-worker runnel-mock-agent)
endif()
