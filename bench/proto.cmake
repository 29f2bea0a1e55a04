# bench_envelope: envelope validation throughput on one core (goal: 1 M lines/s).
add_executable(bench_envelope ${CMAKE_CURRENT_SOURCE_DIR}/bench_envelope.c)
target_link_libraries(bench_envelope PRIVATE runnel_proto)
