# The run's stages that touch the outside world (bootstrap, workspace,
# sandbox, writeback) and the built-in scripted agent.
add_library(runnel_worker_stages STATIC
  ${CMAKE_CURRENT_LIST_DIR}/bootstrap.c
  ${CMAKE_CURRENT_LIST_DIR}/workspace.c
  ${CMAKE_CURRENT_LIST_DIR}/sandbox.c
  ${CMAKE_CURRENT_LIST_DIR}/seccomp.c
  ${CMAKE_CURRENT_LIST_DIR}/warm.c
  ${CMAKE_CURRENT_LIST_DIR}/reaper.c
  ${CMAKE_CURRENT_LIST_DIR}/writeback.c
  ${CMAKE_CURRENT_LIST_DIR}/httpc.c
  # Per-run limits and egress: cgroups, the guard, the proxy.
  ${CMAKE_CURRENT_LIST_DIR}/cgroup.c
  ${CMAKE_CURRENT_LIST_DIR}/limits.c
  ${CMAKE_CURRENT_LIST_DIR}/egress.c
  # The model gateway: provider keys stay out of the sandbox, usage is counted.
  ${CMAKE_CURRENT_LIST_DIR}/gateway.c)
target_include_directories(runnel_worker_stages PUBLIC ${CMAKE_CURRENT_LIST_DIR}/..)
target_link_libraries(runnel_worker_stages PUBLIC runnel_proto runnel_common
  PkgConfig::CURL PkgConfig::ARCHIVE PkgConfig::JANSSON PkgConfig::SECCOMP PkgConfig::SODIUM PkgConfig::HIREDIS
  Threads::Threads m)

# The sandbox's end of the allowlist egress proxy; found next to runnel-worker.
add_executable(runnel-egress-bridge ${CMAKE_CURRENT_LIST_DIR}/egress_bridge.c)
# common/io.h only (header-only): no library.
target_include_directories(runnel-egress-bridge PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)

# Unpacks a run's bag inside its cgroup (worker/unpack.c); found next to
# runnel-worker.
add_executable(runnel-unpack ${CMAKE_CURRENT_LIST_DIR}/unpack.c)
target_link_libraries(runnel-unpack PRIVATE runnel_worker_stages)

add_executable(runnel-mock-agent ${CMAKE_CURRENT_LIST_DIR}/mock_agent.c)
target_link_libraries(runnel-mock-agent PRIVATE runnel_proto runnel_common)

# The first program of a warm sandbox (worker/warm.h): waits on stdin for
# the run's argv and environment, then becomes the agent.  libc only.
add_executable(runnel-warm-init ${CMAKE_CURRENT_LIST_DIR}/warm_init.c)
# common/sandbox_layout.h only (constants): no library.
target_include_directories(runnel-warm-init PRIVATE ${CMAKE_CURRENT_LIST_DIR}/..)
# Static (outside sanitizer builds): a warm start execs it and then the
# agent, and a static program skips the dynamic loader's work on every run.
if(NOT RUNNEL_SANITIZE)
  target_link_options(runnel-warm-init PRIVATE -static)
endif()
