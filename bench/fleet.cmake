# Fleet benchmark on a real Kafka broker (tests/kafka/broker.sh): short-run
# queue wait with long runs holding 30 % of the slots.
#   cmake --build build --target bench_fleet runnel-worker runnel-mock-agent
#   build/bench/bench_fleet [shorts] [gap_ms] [long_sec]
if(TARGET runnel-worker AND TARGET runnel_devstub)
  add_executable(bench_fleet ${CMAKE_CURRENT_LIST_DIR}/bench_fleet.c)
  # runnel_kfleet (tests/kafka) is defined after bench/; linked by name.
  target_link_libraries(bench_fleet PRIVATE runnel_kfleet)
  add_dependencies(bench_fleet runnel-worker runnel-mock-agent)
endif()
