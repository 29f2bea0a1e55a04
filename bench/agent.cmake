# runnel-agent's overhead: start -> first model request at a loopback fake
# provider (goal <= 5 ms).  Run a Release build without sanitizers:
#   cmake -S . -B build-rel -DCMAKE_BUILD_TYPE=Release -DRUNNEL_SANITIZE=OFF -DRUNNEL_FUZZ=OFF
#   cmake --build build-rel --target bench_agent runnel-agent
#   build-rel/bench/bench_agent build-rel/worker/runnel-agent [runs]
if(TARGET runnel-agent)
  add_executable(bench_agent ${CMAKE_CURRENT_LIST_DIR}/bench_agent.c
    ${PROJECT_SOURCE_DIR}/tests/builtin/fakechat.c ${PROJECT_SOURCE_DIR}/tests/builtin/agentproc.c)
  target_include_directories(bench_agent PRIVATE ${PROJECT_SOURCE_DIR})
  # agentproc.c spawns through tests/support (th_spawn_opts).
  target_link_libraries(bench_agent PRIVATE runnel_testsupport PkgConfig::JANSSON Threads::Threads)
  add_dependencies(bench_agent runnel-agent)
endif()
