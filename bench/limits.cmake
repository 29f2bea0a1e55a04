# Limits benchmark: the start cost of a run's cgroup, its size-limited
# workspace, its egress proxy, and a bwrap sandbox with and without them.
#   cmake --build build --target bench_limits runnel-egress-bridge
#   build/bench/bench_limits [iterations]
if(TARGET runnel_worker_stages)
  add_executable(bench_limits ${CMAKE_CURRENT_LIST_DIR}/bench_limits.c)
  target_link_libraries(bench_limits PRIVATE runnel_worker_stages)
  target_compile_definitions(bench_limits PRIVATE RUNNEL_TEST_SANDBOX_INIT="$<TARGET_FILE:runnel-warm-init>")
  add_dependencies(bench_limits runnel-warm-init)
  if(TARGET runnel-egress-bridge)
    add_dependencies(bench_limits runnel-egress-bridge)
  endif()
endif()
