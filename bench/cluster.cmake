# The Redis side of runnel, standalone against a 3-primary cluster:
# lines/s, runs/s and commands per primary.
#   cmake --build build --target bench_cluster && build/bench/bench_cluster [seconds] [threads]
add_executable(bench_cluster ${CMAKE_CURRENT_LIST_DIR}/bench_cluster.c)
# runnel_testsupport (tests/support) is defined after bench/; linked by name.
target_link_libraries(bench_cluster PRIVATE runnel_testsupport runnel_common Threads::Threads)
