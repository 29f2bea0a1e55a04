# runnel-worker's core: consumer, claim, run orchestration, publishing,
# control, drain and observability, linked with the stages library.
add_library(runnel_worker_core STATIC
  ${CMAKE_CURRENT_LIST_DIR}/claim.c
  ${CMAKE_CURRENT_LIST_DIR}/config.c
  ${CMAKE_CURRENT_LIST_DIR}/consumer.c
  ${CMAKE_CURRENT_LIST_DIR}/control.c
  ${CMAKE_CURRENT_LIST_DIR}/metrics.c
  ${CMAKE_CURRENT_LIST_DIR}/publish.c
  ${CMAKE_CURRENT_LIST_DIR}/run.c
  ${CMAKE_CURRENT_LIST_DIR}/warm_agent.c
  ${CMAKE_CURRENT_LIST_DIR}/webhook.c)
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
# runnel-agent (agent kind builtin) is found next to runnel-worker too.
if(TARGET runnel-agent)
  add_dependencies(runnel-worker runnel-agent)
endif()
if(TARGET runnel-egress-bridge)
  add_dependencies(runnel-worker runnel-egress-bridge)
endif()

# So are the unpacker and the warm sandboxes' init.
if(TARGET runnel-unpack)
  add_dependencies(runnel-worker runnel-unpack)
endif()
if(TARGET runnel-warm-init)
  add_dependencies(runnel-worker runnel-warm-init)
endif()

# Agent adapters (worker/agent.h): the seam, the I/O loop and the kinds
# (each kind also listed in agent.c's table).
target_sources(runnel_worker_core PRIVATE
  ${CMAKE_CURRENT_LIST_DIR}/agent.c
  ${CMAKE_CURRENT_LIST_DIR}/agent_acp.c
  ${CMAKE_CURRENT_LIST_DIR}/agent_builtin.c
  ${CMAKE_CURRENT_LIST_DIR}/agent_command.c
  ${CMAKE_CURRENT_LIST_DIR}/agent_mock.c
  ${CMAKE_CURRENT_LIST_DIR}/agent_loop.c
  ${CMAKE_CURRENT_LIST_DIR}/inbox.c)
